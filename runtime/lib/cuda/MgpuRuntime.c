/*===- MgpuRuntime.c - the GPU runtime calls of k3c's GPU libraries -------===*
 *
 * A library compiled by k3c for an NVIDIA GPU (--target=sm_90) launches its
 * kernels and allocates its temporaries through the mgpu* calls that MLIR's
 * GPU lowering emits. This file implements them over the CUDA driver API,
 * loaded at run time: dlopen("libcuda.so.1") and every entry point through
 * cuGetProcAddress (versioned names differ in signature). Nothing links the
 * driver, so the code builds and loads on machines without one.
 *
 * Temporaries come from a per-process workspace arena in device memory that
 * k3rt_cuda_workspace_reset() rewinds after each forward call.
 *
 * One stream: every kernel of a forward call, and k3rt's copies, run in
 * order on the caller's stream (k3rt_cuda_set_stream) or else on one stream
 * of this runtime. The library's host code waits for its stream at the end
 * of every function that launches kernels (MLIR's gpu-async-region); on the
 * one stream nothing needs that (the host code never reads device memory,
 * and the arena is only reused after the reset), so those waits are skipped
 * and k3rt_cuda_workspace_reset() waits once per forward call instead:
 * kernels are queued back to back, without a host round trip between
 * them. The first
 * driver error is kept (k3rt_cuda_last_error) and makes every later call a
 * no-op, so a failed launch never turns into garbage results.
 *
 * k3rt (runtime/lib/Device.cpp) loads this library before a GPU model
 * library and uses the k3rt_cuda_* calls below for its own device memory:
 * weights, state pools, logits and copies between them. A session's caller
 * stream (k3rt_cuda_set_stream) replaces the streams the library creates.
 *
 *===----------------------------------------------------------------------===*/

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

#define K3_EXPORT __attribute__((visibility("default")))

static struct {
  int ready;
  char error[512];
  CUresult (*init)(unsigned);
  CUresult (*deviceGet)(CUdevice *, int);
  CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*moduleLoadData)(CUmodule *, const void *);
  CUresult (*moduleUnload)(CUmodule);
  CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void **,
                           void **);
  CUresult (*streamCreate)(CUstream *, unsigned);
  CUresult (*streamDestroy)(CUstream);
  CUresult (*streamSynchronize)(CUstream);
  CUresult (*memAlloc)(CUdeviceptr *, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*getErrorString)(CUresult, const char **);
  CUresult (*deviceGetAttribute)(int *, int, CUdevice);
  CUresult (*deviceGetName)(char *, int, CUdevice);
  CUresult (*memGetInfo)(size_t *, size_t *);
  CUresult (*memAllocHost)(void **, size_t);
  CUresult (*memFreeHost)(void *);
  CUresult (*memcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*memsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUdevice device;
  CUdeviceptr arena;
  size_t arenaSize, arenaUsed;
  int poison;   /* K3RT_CUDA_POISON */
  int syncEach; /* K3RT_CUDA_SYNC_EACH */
  CUstream userStream; /* the caller's, or NULL */
  CUstream ownStream;  /* ours, when the caller gives none */
} cu;

static void fail(const char *what, CUresult r) {
  if (cu.error[0])
    return;
  const char *msg = NULL;
  if (cu.getErrorString)
    cu.getErrorString(r, &msg);
  snprintf(cu.error, sizeof(cu.error), "%s failed: CUDA error %d (%s)", what,
           r, msg ? msg : "unknown");
}

#define CHECK(call, what)                                                      \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != 0)                                                               \
      fail(what, r_);                                                          \
  } while (0)

static int load(void) {
  if (cu.ready)
    return !cu.error[0];
  cu.ready = 1;
  /* K3RT_CUDA_DRIVER: another driver library (a test double, say). */
  const char *driver = getenv("K3RT_CUDA_DRIVER");
  if (!driver || !*driver)
    driver = "libcuda.so.1";
  void *lib = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(cu.error, sizeof(cu.error),
             "no NVIDIA driver: cannot load %s (%s)", driver, dlerror());
    return 0;
  }
  CUresult (*getProc)(const char *, void **, int, unsigned long long, int *) =
      (CUresult(*)(const char *, void **, int, unsigned long long, int *))dlsym(
          lib, "cuGetProcAddress_v2");
  if (!getProc) {
    snprintf(cu.error, sizeof(cu.error),
             "the NVIDIA driver is too old: no cuGetProcAddress_v2");
    return 0;
  }
#define GET(field, name)                                                       \
  do {                                                                         \
    int status = 0;                                                            \
    if (getProc(name, (void **)&cu.field, 12000, 0, &status) != 0 ||           \
        !cu.field) {                                                           \
      snprintf(cu.error, sizeof(cu.error), "driver entry point %s missing",    \
               name);                                                          \
      return 0;                                                                \
    }                                                                          \
  } while (0)
  GET(getErrorString, "cuGetErrorString");
  GET(init, "cuInit");
  GET(deviceGet, "cuDeviceGet");
  GET(primaryCtxRetain, "cuDevicePrimaryCtxRetain");
  GET(ctxSetCurrent, "cuCtxSetCurrent");
  GET(moduleLoadData, "cuModuleLoadData");
  GET(moduleUnload, "cuModuleUnload");
  GET(moduleGetFunction, "cuModuleGetFunction");
  GET(launchKernel, "cuLaunchKernel");
  GET(streamCreate, "cuStreamCreate");
  GET(streamDestroy, "cuStreamDestroy");
  GET(streamSynchronize, "cuStreamSynchronize");
  GET(memAlloc, "cuMemAlloc");
  GET(memFree, "cuMemFree");
  GET(deviceGetAttribute, "cuDeviceGetAttribute");
  GET(deviceGetName, "cuDeviceGetName");
  GET(memGetInfo, "cuMemGetInfo");
  GET(memAllocHost, "cuMemAllocHost");
  GET(memFreeHost, "cuMemFreeHost");
  GET(memcpyAsync, "cuMemcpyAsync");
  GET(memsetD8Async, "cuMemsetD8Async");
#undef GET
  CUdevice dev = 0;
  CUcontext ctx;
  CHECK(cu.init(0), "cuInit");
  CHECK(cu.deviceGet(&dev, 0), "cuDeviceGet");
  cu.device = dev;
  CHECK(cu.primaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  CHECK(cu.ctxSetCurrent(ctx), "cuCtxSetCurrent");
  const char *mb = getenv("K3RT_CUDA_WORKSPACE_MB");
  cu.arenaSize = (size_t)(mb ? atol(mb) : 1024) << 20;
  CHECK(cu.memAlloc(&cu.arena, cu.arenaSize), "workspace cuMemAlloc");
  const char *each = getenv("K3RT_CUDA_SYNC_EACH");
  cu.syncEach = each && *each && strcmp(each, "0") != 0;
  const char *poison = getenv("K3RT_CUDA_POISON");
  cu.poison = poison && *poison && strcmp(poison, "0") != 0;
  if (cu.poison && !cu.error[0]) {
    CHECK(cu.memsetD8Async(cu.arena, 0xFF, cu.arenaSize, NULL),
          "cuMemsetD8Async");
    CHECK(cu.streamSynchronize(NULL), "cuStreamSynchronize");
  }
  return !cu.error[0];
}

/* The first error since load, or NULL. */
K3_EXPORT const char *k3rt_cuda_last_error(void) {
  load();
  return cu.error[0] ? cu.error : NULL;
}

/* The one stream of the library's kernels and k3rt's copies. */
static CUstream theStream(void) {
  if (cu.userStream)
    return cu.userStream;
  if (!cu.ownStream && !cu.error[0] && cu.streamCreate)
    CHECK(cu.streamCreate(&cu.ownStream, 0), "cuStreamCreate");
  return cu.ownStream;
}

/* Waits for a forward call's kernels, then rewinds the workspace arena:
 * call after every forward call. */
K3_EXPORT void k3rt_cuda_workspace_reset(void) {
  if (cu.ready && !cu.error[0])
    CHECK(cu.streamSynchronize(theStream()), "cuStreamSynchronize");
  /* K3RT_CUDA_POISON=1 (debugging): the workspace a call used is filled
   * with 0xFF bytes (f32 NaN, index -1) before the next, so a kernel that
   * reads workspace no kernel of its call wrote faults or shows NaN instead
   * of reading what an earlier call left there. */
  if (cu.poison && cu.arenaUsed && cu.ready && !cu.error[0]) {
    CHECK(cu.memsetD8Async(cu.arena, 0xFF, cu.arenaUsed, theStream()),
          "cuMemsetD8Async");
    CHECK(cu.streamSynchronize(theStream()), "cuStreamSynchronize");
  }
  cu.arenaUsed = 0;
}

/* Bytes of the workspace in use (its high-water mark per forward). */
K3_EXPORT size_t k3rt_cuda_workspace_used(void) { return cu.arenaUsed; }

/* Device 0: compute capability, name and memory. 0, or -1 with the error in
 * k3rt_cuda_last_error. */
K3_EXPORT int k3rt_cuda_device(int *major, int *minor, char *name,
                               size_t nameSize, size_t *freeBytes,
                               size_t *totalBytes) {
  if (!load())
    return -1;
  CHECK(cu.deviceGetAttribute(major, 75 /* COMPUTE_CAPABILITY_MAJOR */,
                              cu.device),
        "cuDeviceGetAttribute");
  CHECK(cu.deviceGetAttribute(minor, 76 /* COMPUTE_CAPABILITY_MINOR */,
                              cu.device),
        "cuDeviceGetAttribute");
  CHECK(cu.deviceGetName(name, (int)nameSize, cu.device), "cuDeviceGetName");
  CHECK(cu.memGetInfo(freeBytes, totalBytes), "cuMemGetInfo");
  return cu.error[0] ? -1 : 0;
}

/* Device memory (host = 0) or page-locked host memory (host = 1) that
 * kernels can address. Returns the CUDA error (2: out of memory); an
 * allocation failure is not sticky. */
K3_EXPORT int k3rt_cuda_alloc(void **out, size_t bytes, int host) {
  *out = NULL;
  if (!load())
    return -1;
  if (host)
    return cu.memAllocHost(out, bytes);
  CUdeviceptr p = 0;
  CUresult r = cu.memAlloc(&p, bytes);
  *out = (void *)(uintptr_t)p;
  return r;
}

K3_EXPORT void k3rt_cuda_free(void *ptr, int host) {
  if (!ptr || !cu.ready || !cu.memFree)
    return;
  /* After a sticky error the context is gone; freeing is moot. */
  if (host)
    cu.memFreeHost(ptr);
  else
    cu.memFree((CUdeviceptr)(uintptr_t)ptr);
}

/* Copies `bytes` between any two addresses the device can see (unified
 * addressing) on the session stream and waits for it. */
K3_EXPORT int k3rt_cuda_copy(void *dst, const void *src, size_t bytes) {
  if (!load())
    return -1;
  if (bytes) {
    CHECK(cu.memcpyAsync((CUdeviceptr)(uintptr_t)dst,
                         (CUdeviceptr)(uintptr_t)src, bytes, theStream()),
          "cuMemcpyAsync");
    CHECK(cu.streamSynchronize(theStream()), "cuStreamSynchronize");
  }
  return cu.error[0] ? -1 : 0;
}

/* Zeroes `bytes` of device memory and waits for it. */
K3_EXPORT int k3rt_cuda_zero(void *dst, size_t bytes) {
  if (!load())
    return -1;
  if (bytes) {
    CHECK(cu.memsetD8Async((CUdeviceptr)(uintptr_t)dst, 0, bytes,
                           theStream()),
          "cuMemsetD8Async");
    CHECK(cu.streamSynchronize(theStream()), "cuStreamSynchronize");
  }
  return cu.error[0] ? -1 : 0;
}

/* The stream the library's kernels and k3rt's copies run on; NULL: one
 * stream of this runtime. */
K3_EXPORT void k3rt_cuda_set_stream(void *stream) { cu.userStream = stream; }

K3_EXPORT void *mgpuModuleLoad(void *data, size_t size) {
  (void)size;
  CUmodule m = NULL;
  if (load())
    CHECK(cu.moduleLoadData(&m, data), "cuModuleLoadData");
  return m;
}

/* The library's host code asks for a kernel's function before every
 * launch; the driver's answers are kept per (module, name string), so a
 * decode step of ~400 launches makes no lookups after its first. */
enum { kFunctionCache = 4096 };
static struct {
  void *module;
  const char *name;
  CUfunction function;
} functions[kFunctionCache];
static pthread_mutex_t functionsLock = PTHREAD_MUTEX_INITIALIZER;

static size_t functionSlot(void *module, const char *name) {
  uintptr_t h = ((uintptr_t)module * 0x9E3779B97F4A7C15ull) ^ (uintptr_t)name;
  return (size_t)((h >> 7) ^ (h >> 29)) % kFunctionCache;
}

K3_EXPORT void mgpuModuleUnload(void *module) {
  if (!module)
    return;
  pthread_mutex_lock(&functionsLock);
  for (size_t i = 0; i < kFunctionCache; ++i)
    if (functions[i].module == module)
      functions[i].module = NULL, functions[i].name = NULL;
  pthread_mutex_unlock(&functionsLock);
  if (load())
    CHECK(cu.moduleUnload(module), "cuModuleUnload");
}

K3_EXPORT void *mgpuModuleGetFunction(void *module, const char *name) {
  CUfunction f = NULL;
  if (!module || !load())
    return NULL;
  pthread_mutex_lock(&functionsLock);
  size_t slot = functionSlot(module, name), free = kFunctionCache;
  for (size_t probe = 0; probe < 8; ++probe) {
    size_t i = (slot + probe) % kFunctionCache;
    if (functions[i].module == module && functions[i].name == name) {
      f = functions[i].function;
      break;
    }
    if (!functions[i].module && free == kFunctionCache)
      free = i;
  }
  if (!f) {
    CHECK(cu.moduleGetFunction(&f, module, name), "cuModuleGetFunction");
    if (f && free != kFunctionCache) {
      functions[free].module = module;
      functions[free].name = name;
      functions[free].function = f;
    }
  }
  pthread_mutex_unlock(&functionsLock);
  return f;
}

K3_EXPORT void mgpuLaunchKernel(void *function, intptr_t gx, intptr_t gy,
                                intptr_t gz, intptr_t bx, intptr_t by,
                                intptr_t bz, int32_t smem, void *stream,
                                void **params, void **extra, size_t nparams) {
  (void)nparams;
  if (!function || !load())
    return;
  /* A grid with no blocks has no work (an empty segment of a loop). */
  if (gx <= 0 || gy <= 0 || gz <= 0)
    return;
  CHECK(cu.launchKernel(function, (unsigned)gx, (unsigned)gy, (unsigned)gz,
                        (unsigned)bx, (unsigned)by, (unsigned)bz,
                        (unsigned)smem, stream, params, extra),
        "cuLaunchKernel");
  /* K3RT_CUDA_SYNC_EACH=1 (debugging): wait for every kernel, so that a
   * kernel that faults is the one the error names. */
  if (cu.syncEach && !cu.error[0]) {
    CUresult r = cu.streamSynchronize(stream);
    if (r != 0) {
      const char *name = "?";
      pthread_mutex_lock(&functionsLock);
      for (size_t i = 0; i < kFunctionCache; ++i)
        if (functions[i].module && functions[i].function == function)
          name = functions[i].name;
      pthread_mutex_unlock(&functionsLock);
      char what[200];
      snprintf(what, sizeof(what), "kernel %s (grid %ldx%ldx%ld, block %ldx%ldx%ld)",
               name, (long)gx, (long)gy, (long)gz, (long)bx, (long)by, (long)bz);
      fail(what, r);
    }
  }
}

K3_EXPORT void *mgpuStreamCreate(void) {
  return load() ? theStream() : NULL;
}

K3_EXPORT void mgpuStreamDestroy(void *stream) {
  if (stream && stream != cu.userStream && stream != cu.ownStream && load())
    CHECK(cu.streamDestroy(stream), "cuStreamDestroy");
}

/* The one stream is waited for by k3rt_cuda_workspace_reset (see above). */
K3_EXPORT void mgpuStreamSynchronize(void *stream) {
  if (!load() || stream == theStream())
    return;
  CHECK(cu.streamSynchronize(stream), "cuStreamSynchronize");
}

K3_EXPORT void *mgpuMemAlloc(uint64_t size, void *stream, int8_t hostShared) {
  (void)stream;
  (void)hostShared;
  if (!load())
    return NULL;
  size_t aligned = (size_t)((size + 255) & ~(uint64_t)255);
  if (cu.arenaUsed + aligned > cu.arenaSize) {
    fail("workspace (raise K3RT_CUDA_WORKSPACE_MB)", 2 /* out of memory */);
    return NULL;
  }
  void *p = (void *)(uintptr_t)(cu.arena + cu.arenaUsed);
  cu.arenaUsed += aligned;
  return p;
}

K3_EXPORT void mgpuMemFree(void *ptr, void *stream) {
  /* Workspace memory is released all at once by the reset. */
  (void)ptr;
  (void)stream;
}
