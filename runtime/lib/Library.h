//===- Library.h - an opened k3c library ------------------------*- C++ -*-===//

#ifndef K3RT_LIB_LIBRARY_H
#define K3RT_LIB_LIBRARY_H

#include "Manifest.h"

#include <atomic>
#include <string>

/// docs/ABI.md: `void k3_forward(void **args)`.
using K3ForwardFn = void (*)(void **);

struct k3rt_library {
  std::atomic<int> refs{1};
  void *handle = nullptr;
  std::string path;
  k3rt::Manifest manifest;
  K3ForwardFn forward = nullptr;
};

namespace k3rt {

/// dlopen + ABI version + manifest checks.
k3rt_status *openLibrary(const char *path, k3rt_library **out);
void retain(k3rt_library *library);
void release(k3rt_library *library);

} // namespace k3rt

#endif // K3RT_LIB_LIBRARY_H
