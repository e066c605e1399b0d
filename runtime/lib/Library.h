//===- Library.h - an opened k3c library ------------------------*- C++ -*-===//

#ifndef K3RT_LIB_LIBRARY_H
#define K3RT_LIB_LIBRARY_H

#include "Manifest.h"

#include <atomic>
#include <string>

/// docs/ABI.md: `void k3_forward(void **args)`.
using K3ForwardFn = void (*)(void **);
/// docs/ABI.md: `k3_fill_random(words, seed, stream, kind, range, off,
/// scale)`, words a rank-1 i32 memref descriptor.
using K3FillRandomFn = void (*)(void *, uint64_t, uint64_t, int32_t, int32_t,
                                int32_t, float);

struct k3rt_library {
  std::atomic<int> refs{1};
  void *handle = nullptr;
  std::string path;
  k3rt::Manifest manifest;
  K3ForwardFn forward = nullptr;
  /// Null for a library without one (k3rt_weights_generate refuses it).
  K3FillRandomFn fillRandom = nullptr;
};

namespace k3rt {

/// dlopen + ABI version + manifest checks.
k3rt_status *openLibrary(const char *path, k3rt_library **out);
void retain(k3rt_library *library);
void release(k3rt_library *library);

} // namespace k3rt

#endif // K3RT_LIB_LIBRARY_H
