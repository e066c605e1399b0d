//===- Library.cpp - an opened k3c library --------------------------------===//

#include "Library.h"
#include "Device.h"

#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <new>
#include <string>
#include <sys/stat.h>

using namespace k3rt;

using AbiVersionFn = uint32_t (*)();
using ManifestFn = const char *(*)();

k3rt_status *k3rt::openLibrary(const char *path, k3rt_library **out) {
  if (!out)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_library_open: out must not be NULL");
  *out = nullptr;
  // NULL: the library linked into the program (its k3_* symbols are found
  // in the program's global scope).
  const char *shown = path ? path : "(linked library)";
  struct stat st;
  if (path && ::stat(path, &st) != 0)
    return makeStatus(K3RT_NOT_FOUND, "%s: cannot open library: %s", path,
                      std::strerror(errno));
  // A name without a slash is a file here, not a soname for dlopen to
  // look up in the library path.
  std::string local;
  if (path && !std::strchr(path, '/'))
    local = std::string("./") + path;
  // A GPU library loads its kernels (mgpuModuleLoad) as it is opened: the
  // CUDA runtime of k3rt must be there first. It does nothing until called.
  std::string noCuda;
  bool haveCuda = preloadCudaRuntime(noCuda);
  // RTLD_LOCAL: two libraries export the same three symbols.
  void *handle =
      ::dlopen(local.empty() ? path : local.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *err = ::dlerror();
    std::string why = err ? err : "unknown dlopen error";
    if (!haveCuda && why.find("mgpu") != std::string::npos)
      why += " (a library compiled for a GPU needs k3rt's CUDA runtime: " +
             noCuda + ")";
    return makeStatus(K3RT_INVALID_ARGUMENT, "%s: cannot load library: %s",
                      shown, why.c_str());
  }
  auto fail = [&](k3rt_status *status) {
    ::dlclose(handle);
    return status;
  };
  auto version =
      reinterpret_cast<AbiVersionFn>(::dlsym(handle, "k3_abi_version"));
  auto manifest =
      reinterpret_cast<ManifestFn>(::dlsym(handle, "k3_manifest_json"));
  auto forward = reinterpret_cast<K3ForwardFn>(::dlsym(handle, "k3_forward"));
  if (!version || !manifest || !forward)
    return fail(makeStatus(K3RT_INVALID_ARGUMENT,
                           "%s: not a k3c library: it does not export %s%s%s",
                           shown, !version ? "k3_abi_version " : "",
                           !manifest ? "k3_manifest_json " : "",
                           !forward ? "k3_forward" : ""));
  uint32_t abi = version();
  if (abi != K3RT_LIBRARY_ABI_VERSION)
    return fail(makeStatus(K3RT_FAILED_PRECONDITION,
                           "%s: library ABI version %u, this runtime "
                           "implements version %d (rebuild the library with "
                           "a matching k3c)",
                           shown, abi, K3RT_LIBRARY_ABI_VERSION));
  k3rt_library *lib = new (std::nothrow) k3rt_library;
  if (!lib)
    return fail(makeStatus(K3RT_RESOURCE_EXHAUSTED, "out of host memory"));
  if (k3rt_status *s = parseManifest(manifest(), lib->manifest)) {
    delete lib;
    return fail(annotate(s, shown));
  }
  if (lib->manifest.gpu)
    if (k3rt_status *s = checkGpu(shown, lib->manifest.targets)) {
      delete lib;
      return fail(s);
    }
  lib->handle = handle;
  lib->path = shown;
  lib->forward = forward;
  lib->fillRandom =
      reinterpret_cast<K3FillRandomFn>(::dlsym(handle, "k3_fill_random"));
  *out = lib;
  return nullptr;
}

void k3rt::retain(k3rt_library *library) {
  library->refs.fetch_add(1, std::memory_order_relaxed);
}

void k3rt::release(k3rt_library *library) {
  if (!library || library->refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
    return;
  ::dlclose(library->handle);
  delete library;
}
