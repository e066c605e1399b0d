//===- Device.cpp - host and GPU memory, the CUDA runtime of k3rt ---------===//

#include "Device.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <utility>
#include <vector>

using namespace k3rt;

namespace {
/// The k3rt_cuda_* calls of libk3rt_cuda.so (MgpuRuntime.c).
struct CudaApi {
  const char *(*lastError)() = nullptr;
  void (*workspaceReset)() = nullptr;
  int (*device)(int *, int *, char *, size_t, size_t *, size_t *) = nullptr;
  int (*alloc)(void **, size_t, int) = nullptr;
  void (*free)(void *, int) = nullptr;
  int (*copy)(void *, const void *, size_t) = nullptr;
  int (*zero)(void *, size_t) = nullptr;
  void (*setStream)(void *) = nullptr;
  bool loaded = false;
  std::string why;
};

CudaApi &api() {
  static CudaApi cuda;
  return cuda;
}

/// The directory of the object holding this code (libk3rt.so, or the
/// program k3rt is linked into).
std::string selfDirectory() {
  Dl_info info;
  if (!::dladdr(reinterpret_cast<void *>(&selfDirectory), &info) ||
      !info.dli_fname)
    return std::string();
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

void loadOnce() {
  CudaApi &cu = api();
  std::vector<std::string> candidates;
  if (const char *env = std::getenv("K3RT_CUDA_RUNTIME"))
    candidates.push_back(env);
  std::string dir = selfDirectory();
  if (!dir.empty())
    candidates.push_back(dir + "/libk3rt_cuda.so");
  candidates.push_back("libk3rt_cuda.so");
  void *handle = nullptr;
  std::string errors;
  for (const std::string &path : candidates) {
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle)
      break;
    const char *err = ::dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (err ? err : path);
  }
  if (!handle) {
    cu.why = "cannot load libk3rt_cuda.so, k3rt's CUDA runtime (" + errors +
             "); put it next to libk3rt or set K3RT_CUDA_RUNTIME";
    return;
  }
#define GET(field, name)                                                       \
  cu.field = reinterpret_cast<decltype(cu.field)>(::dlsym(handle, name));      \
  if (!cu.field) {                                                             \
    cu.why = "libk3rt_cuda.so lacks " name " (from another k3c version?)";     \
    return;                                                                    \
  }
  GET(lastError, "k3rt_cuda_last_error");
  GET(workspaceReset, "k3rt_cuda_workspace_reset");
  GET(device, "k3rt_cuda_device");
  GET(alloc, "k3rt_cuda_alloc");
  GET(free, "k3rt_cuda_free");
  GET(copy, "k3rt_cuda_copy");
  GET(zero, "k3rt_cuda_zero");
  GET(setStream, "k3rt_cuda_set_stream");
#undef GET
  cu.loaded = true;
}
} // namespace

bool k3rt::preloadCudaRuntime(std::string &why) {
  static std::once_flag once;
  std::call_once(once, loadOnce);
  why = api().why;
  return api().loaded;
}

const char *k3rt::cudaError() {
  return api().loaded ? api().lastError() : nullptr;
}

std::unique_lock<std::recursive_mutex> k3rt::lockGpu() {
  static std::recursive_mutex gpu;
  return std::unique_lock<std::recursive_mutex>(gpu);
}

void k3rt::cudaWorkspaceReset() {
  if (!api().loaded)
    return;
  auto gpu = lockGpu();
  api().workspaceReset();
}

void k3rt::cudaSetStream(void *stream) {
  if (!api().loaded)
    return;
  auto gpu = lockGpu();
  api().setStream(stream);
}

namespace {
/// Device 0 as the driver reports it.
struct DeviceInfo {
  int major = 0, minor = 0;
  char name[256] = {0};
  size_t freeBytes = 0, total = 0;
};

/// Fills `info` (the runtime must be loaded); false with the driver's error
/// in `why` otherwise.
bool queryDevice(DeviceInfo &info, std::string &why) {
  if (api().device(&info.major, &info.minor, info.name, sizeof(info.name) - 1,
                   &info.freeBytes, &info.total) == 0)
    return true;
  why = api().lastError() ? api().lastError() : "no CUDA device";
  return false;
}
} // namespace

/// "sm_90" -> 90; 0 for anything else.
static int smNumber(const std::string &target) {
  if (target.rfind("sm_", 0) != 0 || target.size() < 5)
    return 0;
  char *end = nullptr;
  long v = std::strtol(target.c_str() + 3, &end, 10);
  return end && (*end == 0 || *end == 'a') && v > 0 && v < 1000 ? int(v) : 0;
}

std::string k3rt::cudaDeviceDescription() {
  std::string why;
  DeviceInfo d;
  if (!preloadCudaRuntime(why) || !queryDevice(d, why))
    return why;
  return format("%s (sm_%d%d, %.1f GiB, %.1f GiB free)", d.name, d.major,
                d.minor, double(d.total) / double(1ull << 30),
                double(d.freeBytes) / double(1ull << 30));
}

k3rt_status *k3rt::checkGpu(const std::string &library,
                            const std::vector<std::string> &targets) {
  std::string why;
  std::string list;
  int lowest = 0;
  for (const std::string &t : targets) {
    list += (list.empty() ? "" : ",") + t;
    int sm = smNumber(t);
    if (sm && (!lowest || sm < lowest))
      lowest = sm;
  }
  DeviceInfo d;
  if (!preloadCudaRuntime(why) || !queryDevice(d, why))
    return makeStatus(K3RT_FAILED_PRECONDITION, "%s: compiled for %s: %s",
                      library.c_str(), list.c_str(), why.c_str());
  if (d.major * 10 + d.minor < lowest)
    return makeStatus(K3RT_FAILED_PRECONDITION,
                      "%s: compiled for %s; device 0 (%s) is sm_%d%d (compile "
                      "with k3c --target=sm_%d%d)",
                      library.c_str(), list.c_str(), d.name, d.major, d.minor,
                      d.major, d.minor);
  // The library's module loaded when it was opened: a failure there (no
  // code for this GPU, say) is the driver's first error.
  if (const char *err = api().lastError())
    return makeStatus(K3RT_FAILED_PRECONDITION,
                      "%s: compiled for %s; on device 0 (%s, sm_%d%d): %s",
                      library.c_str(), list.c_str(), d.name, d.major, d.minor,
                      err);
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

Memory::Memory(Memory &&other) noexcept
    : host(std::move(other.host)), addr(other.addr), length(other.length),
      where(other.where) {
  other.addr = nullptr;
  other.length = 0;
}

Memory &Memory::operator=(Memory &&other) noexcept {
  std::swap(host, other.host);
  std::swap(addr, other.addr);
  std::swap(length, other.length);
  std::swap(where, other.where);
  return *this;
}

Memory::~Memory() { release(); }

void Memory::release() {
  if (addr && where != Place::Host)
    api().free(addr, where == Place::Pinned);
  addr = nullptr;
  length = 0;
}

k3rt_status *Memory::allocate(uint64_t bytes, const char *what, Place place,
                              Memory &out) {
  Memory m;
  m.where = place;
  if (bytes == 0) {
    out = std::move(m);
    return nullptr;
  }
  if (bytes > uint64_t(SIZE_MAX / 2))
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "cannot allocate %llu bytes for %s",
                      (unsigned long long)bytes, what);
  if (place == Place::Host) {
    K3RT_RETURN_IF_ERROR(Buffer::allocate(bytes, what, m.host));
    m.addr = m.host.data();
    m.length = bytes;
    out = std::move(m);
    return nullptr;
  }
  std::string why;
  if (!preloadCudaRuntime(why))
    return makeStatus(K3RT_FAILED_PRECONDITION, "%s: %s", what, why.c_str());
  bool pinned = place == Place::Pinned;
  int r = api().alloc(&m.addr, size_t(bytes), pinned);
  if (r != 0 || !m.addr) {
    m.addr = nullptr;
    if (const char *err = api().lastError())
      return makeStatus(K3RT_ABORTED, "%s: %s", what, err);
    DeviceInfo d;
    std::string ignored;
    queryDevice(d, ignored);
    if (pinned)
      return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                        "cannot allocate %llu bytes of page-locked host "
                        "memory for %s (CUDA error %d)",
                        (unsigned long long)bytes, what, r);
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "cannot allocate %llu bytes of device memory for %s "
                      "(CUDA error %d; %.2f GiB of %.2f GiB free)",
                      (unsigned long long)bytes, what, r,
                      double(d.freeBytes) / double(1ull << 30),
                      double(d.total) / double(1ull << 30));
  }
  m.length = bytes;
  if (pinned)
    std::memset(m.addr, 0, size_t(bytes));
  else
    api().zero(m.addr, size_t(bytes));
  out = std::move(m);
  return nullptr;
}

void k3rt::copyBytes(bool gpu, void *dst, const void *src, uint64_t n) {
  if (!n)
    return;
  if (gpu) {
    auto lock = lockGpu();
    api().copy(dst, src, size_t(n));
  } else
    std::memcpy(dst, src, size_t(n));
}

void k3rt::zeroBytes(bool gpu, void *dst, uint64_t n) {
  if (!n)
    return;
  if (gpu) {
    auto lock = lockGpu();
    api().zero(dst, size_t(n));
  } else
    std::memset(dst, 0, size_t(n));
}
