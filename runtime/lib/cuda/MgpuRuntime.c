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
 * One stream: every kernel of a forward call, and k3rt's copies, are
 * queued in order on the caller's stream (k3rt_cuda_set_stream) or else on
 * one stream of this runtime (within one graph, kernels that share no
 * buffer may overlap: "Graphs" below). The library's host code waits for its stream at the end
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
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void *CUgraphNode;

/* CUDA_KERNEL_NODE_PARAMS (v2, CUDA 12.0 and later). */
typedef struct {
  CUfunction func;
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  void **kernelParams;
  void **extra;
  void *kern;
  CUcontext ctx;
} KernelNodeParams;

/* CUgraphEdgeData (CUDA 12.3 and later). */
typedef struct {
  unsigned char fromPort, toPort, type, reserved[5];
} GraphEdgeData;
enum {
  kPortProgrammatic = 1, /* CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC */
  kEdgeProgrammatic = 1, /* CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC */
};

#define K3_EXPORT __attribute__((visibility("default")))

static struct {
  int ready;
  char error[512];
  CUcontext context; /* the device's primary context */
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
  CUresult (*funcSetAttribute)(CUfunction, int, int);
  /* Optional: without them every kernel is launched on its own. */
  CUresult (*funcGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
  CUresult (*graphCreate)(CUgraph *, unsigned);
  CUresult (*graphDestroy)(CUgraph);
  CUresult (*graphAddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *,
                                 size_t, const KernelNodeParams *);
  CUresult (*graphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*graphExecDestroy)(CUgraphExec);
  CUresult (*graphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                           const KernelNodeParams *);
  CUresult (*graphLaunch)(CUgraphExec, CUstream);
  CUresult (*moduleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
  CUresult (*graphAddDependencies)(CUgraph, const CUgraphNode *,
                                   const CUgraphNode *, const GraphEdgeData *,
                                   size_t);
  CUresult (*memcpyDtoH)(void *, CUdeviceptr, size_t);
  int graphs;   /* replay each call's kernels as a CUDA graph */
  int dag;      /* join a graph's kernels by the buffers they share */
  int dependentLaunch; /* programmatic edges into kernels that wait */
  CUdevice device;
  CUdeviceptr arena;
  size_t arenaSize, arenaUsed;
  int poison;   /* K3RT_CUDA_POISON */
  int syncEach; /* K3RT_CUDA_SYNC_EACH */
  int graphLog; /* K3RT_CUDA_GRAPH_LOG */
  CUstream userStream; /* the caller's, or NULL */
  CUstream ownStream;  /* ours, when the caller gives none */
} cu;

/* K3RT_CUDA_GRAPH_LOG=1 (debugging): each queued segment on stderr, with
 * the host's time since the last call's end (k3rt_cuda_workspace_reset)
 * and each replayed node that was updated, by kernel and argument. */
static double callEnd;     /* microseconds, CLOCK_MONOTONIC */
static double firstLaunch; /* the call's first launch, once it came */
static int launchedInCall;
static double nowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}
static const char *functionName(CUfunction f);

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

/* Whether this thread has made the primary context current: the driver's
 * current context is per thread, and k3rt.h lets sessions be driven from
 * any thread (k3rt takes turns, see runtime/lib/Device.h). */
static _Thread_local int threadBound;

static int load(void) {
  if (cu.ready) {
    if (!threadBound && !cu.error[0]) {
      threadBound = 1;
      CHECK(cu.ctxSetCurrent(cu.context), "cuCtxSetCurrent");
    }
    return !cu.error[0];
  }
  cu.ready = 1;
  threadBound = 1;
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
  GET(funcSetAttribute, "cuFuncSetAttribute");
  /* The graph entry points, each at the CUDA version of its signature. */
#define GET_OPTIONAL(field, name, version)                                     \
  do {                                                                         \
    int status = 0;                                                            \
    if (getProc(name, (void **)&cu.field, version, 0, &status) != 0)           \
      cu.field = NULL;                                                         \
  } while (0)
  GET_OPTIONAL(funcGetParamInfo, "cuFuncGetParamInfo", 12040);
  GET_OPTIONAL(graphCreate, "cuGraphCreate", 12000);
  GET_OPTIONAL(graphDestroy, "cuGraphDestroy", 12000);
  GET_OPTIONAL(graphAddKernelNode, "cuGraphAddKernelNode", 12000);
  GET_OPTIONAL(graphInstantiate, "cuGraphInstantiateWithFlags", 12000);
  GET_OPTIONAL(graphExecDestroy, "cuGraphExecDestroy", 12000);
  GET_OPTIONAL(graphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams",
               12000);
  GET_OPTIONAL(graphLaunch, "cuGraphLaunch", 12000);
  GET_OPTIONAL(moduleGetGlobal, "cuModuleGetGlobal", 12000);
  GET_OPTIONAL(graphAddDependencies, "cuGraphAddDependencies", 12030);
  GET_OPTIONAL(memcpyDtoH, "cuMemcpyDtoH", 3020);
#undef GET_OPTIONAL
#undef GET
  CUdevice dev = 0;
  CUcontext ctx;
  CHECK(cu.init(0), "cuInit");
  CHECK(cu.deviceGet(&dev, 0), "cuDeviceGet");
  cu.device = dev;
  CHECK(cu.primaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  cu.context = ctx;
  CHECK(cu.ctxSetCurrent(ctx), "cuCtxSetCurrent");
  const char *mb = getenv("K3RT_CUDA_WORKSPACE_MB");
  cu.arenaSize = (size_t)(mb ? atol(mb) : 1024) << 20;
  CHECK(cu.memAlloc(&cu.arena, cu.arenaSize), "workspace cuMemAlloc");
  const char *each = getenv("K3RT_CUDA_SYNC_EACH");
  cu.syncEach = each && *each && strcmp(each, "0") != 0;
  const char *poison = getenv("K3RT_CUDA_POISON");
  cu.poison = poison && *poison && strcmp(poison, "0") != 0;
  const char *graphLog = getenv("K3RT_CUDA_GRAPH_LOG");
  cu.graphLog = graphLog && *graphLog && strcmp(graphLog, "0") != 0;
  callEnd = nowUs();
  /* K3RT_CUDA_GRAPHS=0: launch every kernel on its own (for comparisons). */
  const char *graphs = getenv("K3RT_CUDA_GRAPHS");
  cu.graphs = !cu.syncEach && !(graphs && !strcmp(graphs, "0")) &&
              cu.funcGetParamInfo && cu.graphCreate && cu.graphDestroy &&
              cu.graphAddKernelNode && cu.graphInstantiate &&
              cu.graphExecDestroy && cu.graphExecKernelNodeSetParams &&
              cu.graphLaunch;
  /* K3RT_CUDA_DEPENDENT_LAUNCH=0: ordinary edges only (for comparisons). */
  const char *dependent = getenv("K3RT_CUDA_DEPENDENT_LAUNCH");
  cu.dependentLaunch = cu.graphs && cu.moduleGetGlobal &&
                       cu.graphAddDependencies &&
                       !(dependent && !strcmp(dependent, "0"));
  /* K3RT_CUDA_GRAPH_DAG=0: each graph one chain (for comparisons). */
  const char *dag = getenv("K3RT_CUDA_GRAPH_DAG");
  cu.dag = cu.graphs && cu.moduleGetGlobal && cu.memcpyDtoH &&
           !(dag && !strcmp(dag, "0"));
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

/*--- Graphs --------------------------------------------------------------*
 * A forward call launches hundreds of kernels (a batch-1 decode step of
 * K3's widths about 400), most of them a few microseconds long, so the gaps
 * between them cost as much as the work. With graphs on (the default when
 * the driver has the entry points; K3RT_CUDA_GRAPHS=0 turns them off), a
 * call's launches are recorded, not queued, and queued as CUDA graphs: in
 * segments while the call runs (below), the rest when it ends
 * (k3rt_cuda_workspace_reset, or before any other work on the stream). A
 * call that launches the same kernels in the same order as an earlier one
 * (every decode step of a batch composition, every prefill chunk of one
 * size) replays that call's graphs, with the nodes whose grid or arguments
 * changed updated in place; a new composition builds graphs of its own,
 * and the least recently used of kGraphs are dropped. Nothing a kernel
 * computes depends on how it was queued.
 *
 * A call is cut into segments at its kFirstCut-th launch, then at four
 * times as many, and so on (4, 16, 64, 256, ...), each segment a graph of
 * its own: the GPU starts on the call's first kernels while the host
 * records the rest (recording a batch-1 decode step of K3's widths takes
 * 0.05 to 0.2 ms, which the GPU waited for when the call was one graph),
 * and each segment is queued before the GPU reaches it. The cuts depend
 * only on the count of launches, so a replayed call cuts where it did
 * before. (A first cut at 16 launches instead of 4 left the GPU idle 23-26
 * us longer per batch-1 step of k3-group, H200, BENCHMARKS.md thirty-fourth
 * session; 4 launches queued one by one instead of as a graph spread the
 * first kernels apart: BENCHMARKS.md, "A first segment of 4 launches
 * queued one by one".)
 *
 * Within a graph, a kernel waits only for the kernels it must (the DAG;
 * K3RT_CUDA_GRAPH_DAG=0 chains them all, for comparisons): k3c gives each
 * kernel a constant `<kernel>_k3_access` (k3-gpu-kernel-access) that says
 * which of its parameters are buffers it reads (`r`) or may write (`w`),
 * and whether it writes a global of its module (`g`: split-K counters, so
 * two launches of it may not overlap). A buffer is a workspace allocation
 * of the call (any pointer into it) or else the pointer's value (weights,
 * state pools, logits: k3rt's buffers, whose descriptors keep the base
 * pointer; docs/ABI.md). A kernel that reads a buffer waits for the last
 * kernel that wrote it, one that writes it also for the kernels that read
 * it since; a kernel without the constant waits for every kernel before it,
 * and every kernel after it for it. Graphs of different segments, and any
 * copy, run in stream order.
 */

enum {
  kGraphs = 64,       /* graphs kept (segments of calls) */
  kGraphMin = 4,      /* segments with fewer launches are queued one by one */
  kFirstCut = 4,      /* a call's first segment; each next is 4x as far */
  kMaxParams = 1024,  /* arguments of one kernel (memrefs are expanded) */
  kParamCache = 1024, /* kernels whose argument sizes are known */
};

typedef struct {
  CUfunction fn;
  int waits; /* it waits for the kernel before it (see dependentLaunch) */
  int succeeded; /* a later launch of the segment waits for it */
  unsigned grid[3], block[3], smem;
  uint32_t nparams;
  const uint16_t *size; /* each argument's bytes */
  size_t at, bytes;     /* its arguments' first byte in `values`, length */
  size_t depAt;         /* the launches it waits for: deps[depAt ..] */
  uint32_t ndeps;
} Launch;

typedef struct {
  Launch *launch;
  size_t n, cap;
  unsigned char *values; /* arguments, each in 8-byte aligned slots */
  size_t bytes, valueCap;
  uint32_t *deps; /* earlier launches of the segment, by index */
  size_t ndeps, depCap;
} Recording;

typedef struct {
  Recording rec; /* what the graph's nodes were last set to */
  uint64_t key, used;
  CUgraph graph;
  CUgraphExec exec;
  CUgraphNode *node;
} Graph;

static Recording pending; /* the current segment's launches */
static void clearPending(void);
/* Launches recorded in the current call, and the count at which its next
 * segment is queued. */
static size_t callLaunches, nextCut = kFirstCut;
static Graph graphCache[kGraphs];
static uint64_t useClock;
static struct {
  CUfunction fn;
  uint32_t n;
  uint16_t *size;
} paramInfo[kParamCache];
/* k3rt_cuda_graph_stats: graphs built, graph launches, nodes updated,
 * kernels queued one by one. */
static uint64_t stats[4];

static size_t slotBytes(size_t bytes) { return (bytes + 7) & ~(size_t)7; }

/* `array` (`*cap` elements of `size` bytes) with room for element `n`:
 * doubled (first `first` elements) when full; NULL when out of host memory
 * (`array` stays as it was). */
static void *grow(void *array, size_t *cap, size_t n, size_t size,
                  size_t first) {
  if (n < *cap)
    return array;
  size_t more = *cap ? 2 * *cap : first;
  void *p = realloc(array, more * size);
  if (p)
    *cap = more;
  return p;
}

/* The byte size of each of `fn`'s `n` arguments, asked once; NULL if the
 * driver does not tell. */
static const uint16_t *paramSizes(CUfunction fn, uint32_t n) {
  size_t slot = ((uintptr_t)fn >> 4) % kParamCache;
  for (size_t probe = 0; probe < kParamCache; ++probe) {
    size_t i = (slot + probe) % kParamCache;
    if (paramInfo[i].fn == fn)
      return paramInfo[i].n == n ? paramInfo[i].size : NULL;
    if (paramInfo[i].fn)
      continue;
    uint16_t *size = malloc(n ? n * sizeof(uint16_t) : 1);
    if (!size)
      return NULL;
    for (uint32_t a = 0; a < n; ++a) {
      size_t offset = 0, bytes = 0;
      if (cu.funcGetParamInfo(fn, a, &offset, &bytes) != 0 || !bytes ||
          bytes > 0xFFFF) {
        free(size);
        return NULL;
      }
      size[a] = (uint16_t)bytes;
    }
    paramInfo[i].fn = fn;
    paramInfo[i].n = n;
    paramInfo[i].size = size;
    return size;
  }
  return NULL;
}

/* Modules whose kernels all wait for the kernel before them (k3c's
 * k3-gpu-dependent-launch: griddepcontrol.wait at each kernel's entry, and
 * the device global k3_dependent_launch), and their functions: each key
 * with its module. A kernel without the wait must not start before its
 * predecessor has finished, so only these get programmatic edges. Guarded
 * by functionsLock; open addressing, a removed key becomes kGone. */
enum { kWaiting = 8192 };
static struct {
  void *key, *module;
} waiting[kWaiting];
static atomic_size_t waitingModules; /* none: no lookups per launch */
static pthread_mutex_t functionsLock = PTHREAD_MUTEX_INITIALIZER;
#define kGone ((void *)1)

static size_t waitingSlot(void *key) {
  uintptr_t h = (uintptr_t)key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 40) % kWaiting;
}

/* Whether `key` (a module or function) is in the set; caller holds the
 * lock. */
static int isWaiting(void *key) {
  for (size_t probe = 0, i = waitingSlot(key); probe < kWaiting;
       ++probe, i = (i + 1) % kWaiting) {
    if (waiting[i].key == key)
      return 1;
    if (!waiting[i].key)
      return 0;
  }
  return 0;
}

/* Adds `key` of `module` (a full set keeps ordinary edges). */
static void addWaiting(void *key, void *module) {
  if (isWaiting(key))
    return;
  for (size_t probe = 0, i = waitingSlot(key); probe < kWaiting;
       ++probe, i = (i + 1) % kWaiting)
    if (!waiting[i].key || waiting[i].key == kGone) {
      waiting[i].key = key, waiting[i].module = module;
      return;
    }
}

/* Drops `module` and its functions. */
static void dropWaiting(void *module) {
  if (isWaiting(module))
    --waitingModules;
  for (size_t i = 0; i < kWaiting; ++i)
    if (waiting[i].key && waiting[i].key != kGone &&
        waiting[i].module == module)
      waiting[i].key = kGone, waiting[i].module = NULL;
}

static int waits(CUfunction fn) {
  if (!waitingModules)
    return 0;
  pthread_mutex_lock(&functionsLock);
  int found = isWaiting(fn);
  pthread_mutex_unlock(&functionsLock);
  return found;
}

/*--- What each kernel touches (see "Within a graph" above) ----------------*/

/* Each kernel's access string, read from its module once, at its first
 * lookup (mgpuModuleGetFunction); NULL: the kernel has none. Guarded by
 * functionsLock. */
static struct {
  CUfunction fn;
  void *module;
  char *access; /* 1 + the kernel's parameter count characters */
  uint32_t n;
} accessInfo[kParamCache];

static size_t accessSlot(CUfunction fn) {
  return ((uintptr_t)fn >> 4) % kParamCache;
}

/* Reads `<name>_k3_access` of `module` for `fn`; caller holds the lock. */
static void readAccess(CUfunction fn, CUmodule module, const char *name) {
  if (!cu.dag)
    return;
  char global[512];
  CUdeviceptr at = 0;
  size_t bytes = 0;
  if (snprintf(global, sizeof(global), "%s_k3_access", name) >=
          (int)sizeof(global) ||
      cu.moduleGetGlobal(&at, &bytes, module, global) != 0 || bytes < 1 ||
      bytes > kMaxParams + 1)
    return;
  char *access = malloc(bytes);
  if (!access)
    return;
  if (cu.memcpyDtoH(access, at, bytes) != 0) {
    free(access);
    return;
  }
  for (size_t probe = 0, i = accessSlot(fn); probe < kParamCache;
       ++probe, i = (i + 1) % kParamCache) {
    if (accessInfo[i].fn && accessInfo[i].fn != fn)
      continue;
    free(accessInfo[i].access);
    accessInfo[i].fn = fn, accessInfo[i].module = module;
    accessInfo[i].access = access, accessInfo[i].n = (uint32_t)bytes - 1;
    return;
  }
  free(access);
}

/* `fn`'s access string if it has one for `n` parameters, and its module. */
static const char *accessOf(CUfunction fn, uint32_t n, void **module) {
  const char *access = NULL;
  pthread_mutex_lock(&functionsLock);
  for (size_t probe = 0, i = accessSlot(fn); probe < kParamCache;
       ++probe, i = (i + 1) % kParamCache) {
    if (!accessInfo[i].fn)
      break;
    if (accessInfo[i].fn == fn) {
      if (accessInfo[i].n == n)
        access = accessInfo[i].access, *module = accessInfo[i].module;
      break;
    }
  }
  pthread_mutex_unlock(&functionsLock);
  return access;
}

/* Forgets the kernels of `module`, keeping the probe chains of the rest
 * (their entries move up); caller holds the lock. */
static void dropAccess(void *module) {
  for (int again = 1; again;) {
    again = 0;
    for (size_t i = 0; i < kParamCache; ++i) {
      if (!accessInfo[i].fn || accessInfo[i].module != module)
        continue;
      free(accessInfo[i].access);
      accessInfo[i].fn = NULL, accessInfo[i].module = NULL;
      accessInfo[i].access = NULL, accessInfo[i].n = 0;
      /* Re-insert the entries after it in its chain. */
      for (size_t j = (i + 1) % kParamCache; accessInfo[j].fn;
           j = (j + 1) % kParamCache) {
        size_t k = accessSlot(accessInfo[j].fn);
        while (accessInfo[k].fn && k != j)
          k = (k + 1) % kParamCache;
        if (k != j) {
          accessInfo[k] = accessInfo[j];
          accessInfo[j].fn = NULL, accessInfo[j].module = NULL;
          accessInfo[j].access = NULL, accessInfo[j].n = 0;
          again = 1;
        }
      }
    }
  }
}

/* The call's workspace allocations, by offset (ascending: the arena is a
 * bump allocator), so that any pointer into one names it. */
static size_t *allocAt, nAllocs, allocCap;

static uint64_t bufferOf(uint64_t ptr) {
  if (ptr < cu.arena || ptr >= cu.arena + cu.arenaUsed || !nAllocs)
    return ptr;
  size_t lo = 0, hi = nAllocs; /* the last allocation at or before ptr */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (cu.arena + allocAt[mid] <= ptr)
      lo = mid;
    else
      hi = mid;
  }
  return cu.arena + allocAt[lo];
}

/* The buffers the segment's launches touched: the last launch that wrote
 * each and the launches that read it since (a list in `readers`). Open
 * addressing; an entry of an older segment (`gen`) is free. */
enum { kTouchSlots = 1 << 13 };
static struct {
  uint64_t buffer;
  int32_t writer, readers;
  uint32_t gen;
} touched[kTouchSlots];
static uint32_t touchGen = 1;
static size_t nTouched;
static struct {
  int32_t launch, next;
} *readers;
static size_t nReaders, readerCap;
static int32_t barrier = -1; /* the last launch that waited for all */

/* The segment's entry of `buffer`, or -1 when the table is full. */
static long touchOf(uint64_t buffer) {
  uint64_t h = buffer * 0x9E3779B97F4A7C15ull;
  for (size_t probe = 0, i = (size_t)(h >> 51); probe < kTouchSlots / 2;
       ++probe, i = (i + 1) % kTouchSlots) {
    if (touched[i].gen != touchGen) {
      if (nTouched >= kTouchSlots / 2)
        return -1;
      ++nTouched;
      touched[i].gen = touchGen, touched[i].buffer = buffer;
      touched[i].writer = -1, touched[i].readers = -1;
      return (long)i;
    }
    if (touched[i].buffer == buffer)
      return (long)i;
  }
  return -1;
}

/* Makes the last launch wait for launch `d` (once; not for itself). */
static int addDep(int32_t d) {
  size_t me = pending.n - 1;
  Launch *l = &pending.launch[me];
  if (d < 0 || (size_t)d == me)
    return 1;
  for (uint32_t k = 0; k < l->ndeps; ++k)
    if (pending.deps[l->depAt + k] == (uint32_t)d)
      return 1;
  uint32_t *deps = grow(pending.deps, &pending.depCap, pending.ndeps,
                        sizeof(uint32_t), 4096);
  if (!deps)
    return 0;
  pending.deps = deps;
  pending.deps[pending.ndeps++] = (uint32_t)d;
  ++l->ndeps;
  pending.launch[d].succeeded = 1;
  return 1;
}

/* The last launch reads (write = 0) or writes `buffer`. */
static int touch(uint64_t buffer, int write) {
  int32_t me = (int32_t)pending.n - 1;
  long t = touchOf(buffer);
  if (t < 0)
    return 0;
  if (!addDep(touched[t].writer))
    return 0;
  if (write) {
    for (int32_t r = touched[t].readers; r >= 0; r = readers[r].next)
      if (!addDep(readers[r].launch))
        return 0;
    touched[t].writer = me, touched[t].readers = -1;
    return 1;
  }
  if (touched[t].readers >= 0 && readers[touched[t].readers].launch == me)
    return 1;
  void *more = grow(readers, &readerCap, nReaders, sizeof(*readers), 4096);
  if (!more)
    return 0;
  readers = more;
  readers[nReaders].launch = me, readers[nReaders].next = touched[t].readers;
  touched[t].readers = (int32_t)nReaders++;
  return 1;
}

/* The launches the last recorded one waits for. Without the DAG, the one
 * before it; without an access string (or when the tables run out), every
 * launch no other waits for yet, and it becomes the barrier every later
 * launch waits for. */
static int findDeps(void) {
  int32_t me = (int32_t)pending.n - 1;
  Launch *l = &pending.launch[me];
  l->depAt = pending.ndeps, l->ndeps = 0, l->succeeded = 0;
  if (!cu.dag)
    return addDep(me - 1);
  void *module = NULL;
  const char *access = accessOf(l->fn, l->nparams, &module);
  int ok = access && addDep(barrier);
  if (ok && access[0] == 'g')
    ok = touch((uint64_t)(uintptr_t)module, 1);
  size_t at = l->at;
  for (uint32_t a = 0; ok && a < l->nparams; ++a) {
    char c = access[1 + a];
    if ((c == 'r' || c == 'w') && l->size[a] == 8) {
      uint64_t ptr;
      memcpy(&ptr, pending.values + at, 8);
      if (ptr)
        ok = touch(bufferOf(ptr), c == 'w');
    }
    at += slotBytes(l->size[a]);
  }
  if (ok)
    return 1;
  /* A barrier: the dependencies found so far are kept (all of them
   * earlier launches), the rest are every launch nothing waits for. */
  for (int32_t d = 0; d < me; ++d)
    if (!pending.launch[d].succeeded && !addDep(d))
      return 0;
  barrier = me;
  if (++touchGen == 0) {
    memset(touched, 0, sizeof(touched));
    touchGen = 1;
  }
  nTouched = 0, nReaders = 0;
  return 1;
}

/* Appends a launch to the current call's; 0 if it cannot be recorded. */
static int record(CUfunction fn, const unsigned grid[3],
                  const unsigned block[3], unsigned smem, void **params,
                  uint32_t n) {
  const uint16_t *size = paramSizes(fn, n);
  if (!size)
    return 0;
  size_t bytes = 0;
  for (uint32_t a = 0; a < n; ++a)
    bytes += slotBytes(size[a]);
  Launch *launches =
      grow(pending.launch, &pending.cap, pending.n, sizeof(Launch), 512);
  if (!launches)
    return 0;
  pending.launch = launches;
  if (pending.bytes + bytes > pending.valueCap) {
    size_t cap = pending.valueCap ? 2 * pending.valueCap : 1 << 16;
    while (cap < pending.bytes + bytes)
      cap *= 2;
    unsigned char *v = realloc(pending.values, cap);
    if (!v)
      return 0;
    pending.values = v, pending.valueCap = cap;
  }
  Launch *l = &pending.launch[pending.n++];
  l->fn = fn;
  l->waits = cu.dependentLaunch && waits(fn);
  memcpy(l->grid, grid, sizeof(l->grid));
  memcpy(l->block, block, sizeof(l->block));
  l->smem = smem;
  l->nparams = n;
  l->size = size;
  l->at = pending.bytes;
  l->bytes = bytes;
  for (uint32_t a = 0; a < n; ++a) {
    /* The slot's padding zeroed: replays compare whole slots, and stale
     * bytes there (the buffers are reused) made nodes look changed: 1-4
     * updates per batch-1 step of k3-group, each 7-28 us of host time
     * before its segment's launch (H100, BENCHMARKS.md thirty-ninth
     * session). */
    unsigned char *slot = pending.values + pending.bytes;
    memcpy(slot, params[a], size[a]);
    memset(slot + size[a], 0, slotBytes(size[a]) - size[a]);
    pending.bytes += slotBytes(size[a]);
  }
  if (!findDeps()) {
    /* Not recorded: the caller queues the segment, then this launch. */
    pending.bytes = l->at, pending.ndeps = l->depAt, --pending.n;
    return 0;
  }
  return 1;
}

/* Launch `i` of `r` as kernel node parameters; `ptrs` holds its argument
 * pointers. */
static KernelNodeParams nodeParams(const Recording *r, size_t i,
                                   void *ptrs[kMaxParams]) {
  const Launch *l = &r->launch[i];
  size_t at = l->at;
  for (uint32_t a = 0; a < l->nparams; ++a) {
    ptrs[a] = r->values + at;
    at += slotBytes(l->size[a]);
  }
  KernelNodeParams p = {l->fn, l->grid[0], l->grid[1], l->grid[2],
                        l->block[0], l->block[1], l->block[2], l->smem,
                        ptrs, NULL, NULL, NULL};
  return p;
}

/* The kernels in order (not their grids or arguments): what a graph's
 * nodes are. */
static uint64_t shapeKey(const Recording *r) {
  uint64_t h = 0xcbf29ce484222325ull ^ r->n;
  for (size_t i = 0; i < r->n; ++i) {
    const Launch *l = &r->launch[i];
    uint64_t v[6] = {(uintptr_t)l->fn, l->block[0], l->block[1],
                     ((uint64_t)l->block[2] << 32) | l->smem, l->nparams,
                     l->ndeps};
    for (int k = 0; k < 6; ++k)
      h = (h ^ v[k]) * 0x100000001b3ull;
    for (uint32_t k = 0; k < l->ndeps; ++k)
      h = (h ^ r->deps[l->depAt + k]) * 0x100000001b3ull;
  }
  return h;
}

static int sameShape(const Recording *a, const Recording *b) {
  if (a->n != b->n)
    return 0;
  for (size_t i = 0; i < a->n; ++i) {
    const Launch *x = &a->launch[i], *y = &b->launch[i];
    if (x->fn != y->fn || x->smem != y->smem || x->nparams != y->nparams ||
        memcmp(x->block, y->block, sizeof(x->block)) ||
        x->ndeps != y->ndeps ||
        (x->ndeps && memcmp(a->deps + x->depAt, b->deps + y->depAt,
                            x->ndeps * sizeof(uint32_t))))
      return 0;
  }
  return 1;
}

static void dropGraph(Graph *g) {
  if (g->exec)
    cu.graphExecDestroy(g->exec);
  if (g->graph)
    cu.graphDestroy(g->graph);
  free(g->node);
  g->exec = NULL, g->graph = NULL, g->node = NULL, g->key = 0, g->used = 0;
  g->rec.n = g->rec.bytes = g->rec.ndeps = 0;
}

/* Builds `g` from the pending launches: each kernel node after the nodes
 * it waits for (findDeps). When a kernel waits for its predecessor in the
 * kernel (griddepcontrol), the segment is one chain instead, that kernel
 * joined to its predecessor by a programmatic edge (dispatched once every
 * block of the predecessor has started and executed
 * griddepcontrol.launch_dependents, or ended), any other by an ordinary
 * one. */
static int buildGraph(Graph *g) {
  void *ptrs[kMaxParams];
  g->node = malloc(pending.n * sizeof(CUgraphNode));
  CUgraphNode *deps = malloc(pending.n * sizeof(CUgraphNode));
  if (!g->node || !deps) {
    free(deps);
    fail("graph nodes (host memory)", 2);
    return 0;
  }
  CHECK(cu.graphCreate(&g->graph, 0), "cuGraphCreate");
  const GraphEdgeData programmatic = {kPortProgrammatic, 0, kEdgeProgrammatic,
                                      {0}};
  int chain = 0;
  for (size_t i = 0; i < pending.n; ++i)
    chain |= pending.launch[i].waits;
  for (size_t i = 0; i < pending.n && !cu.error[0]; ++i) {
    KernelNodeParams p = nodeParams(&pending, i, ptrs);
    const Launch *l = &pending.launch[i];
    int early = chain && i && l->waits;
    size_t n = 0;
    if (chain && i && !early)
      deps[n++] = g->node[i - 1];
    for (uint32_t k = 0; !chain && k < l->ndeps; ++k)
      deps[n++] = g->node[pending.deps[l->depAt + k]];
    CHECK(cu.graphAddKernelNode(&g->node[i], g->graph, n ? deps : NULL, n,
                                &p),
          "cuGraphAddKernelNode");
    if (early && !cu.error[0])
      CHECK(cu.graphAddDependencies(g->graph, &g->node[i - 1], &g->node[i],
                                    &programmatic, 1),
            "cuGraphAddDependencies");
  }
  free(deps);
  if (!cu.error[0])
    CHECK(cu.graphInstantiate(&g->exec, g->graph, 0), "cuGraphInstantiate");
  ++stats[0];
  return !cu.error[0];
}

/* K3RT_CUDA_GRAPH_LOG: node `i` of `g` gets `now` (was `was`): its kernel,
 * and its grid or the indices of the arguments that differ. */
static void logUpdate(size_t i, const Launch *now, const Launch *was,
                      const Graph *g) {
  char what[512];
  int n = snprintf(what, sizeof(what), "%s",
                   memcmp(now->grid, was->grid, sizeof(now->grid)) ? " grid"
                                                                   : "");
  size_t a0 = now->at, a1 = was->at;
  for (uint32_t a = 0; a < now->nparams && n < (int)sizeof(what) - 16; ++a) {
    size_t bytes = slotBytes(now->size[a]);
    if (memcmp(pending.values + a0, g->rec.values + a1, now->size[a]))
      n += snprintf(what + n, sizeof(what) - n, " %u", a);
    a0 += bytes, a1 += bytes;
  }
  fprintf(stderr, "k3rt-cuda graph:   node %zu %s:%s\n", i,
          functionName(now->fn), what);
}

/* Queues the recorded launches: as a graph, or one by one for a short
 * call. */
static void flush(void) {
  if (!pending.n)
    return;
  if (cu.error[0]) {
    clearPending();
    return;
  }
  CUstream stream = theStream();
  void *ptrs[kMaxParams];
  if (pending.n < kGraphMin) {
    if (cu.graphLog)
      fprintf(stderr, "k3rt-cuda graph: launches %zu-%zu one by one, host "
              "+%.1f us\n", callLaunches - pending.n, callLaunches,
              nowUs() - callEnd);
    for (size_t i = 0; i < pending.n && !cu.error[0]; ++i) {
      KernelNodeParams p = nodeParams(&pending, i, ptrs);
      CHECK(cu.launchKernel(p.func, p.gridDimX, p.gridDimY, p.gridDimZ,
                            p.blockDimX, p.blockDimY, p.blockDimZ,
                            p.sharedMemBytes, stream, ptrs, NULL),
            "cuLaunchKernel");
      ++stats[3];
    }
    clearPending();
    return;
  }
  uint64_t key = shapeKey(&pending);
  Graph *g = NULL, *victim = &graphCache[0];
  for (int k = 0; k < kGraphs && !g; ++k) {
    Graph *c = &graphCache[k];
    if (c->exec && c->key == key && sameShape(&c->rec, &pending))
      g = c;
    else if (!c->exec || (victim->exec && c->used < victim->used))
      victim = c;
  }
  double start = cu.graphLog ? nowUs() : 0;
  size_t updated = 0;
  int built = !g;
  if (g) {
    /* The same kernels: update the nodes whose grid or arguments differ. */
    for (size_t i = 0; i < pending.n && !cu.error[0]; ++i) {
      const Launch *now = &pending.launch[i], *was = &g->rec.launch[i];
      if (!memcmp(now->grid, was->grid, sizeof(now->grid)) &&
          !memcmp(pending.values + now->at, g->rec.values + was->at,
                  now->bytes))
        continue;
      if (cu.graphLog)
        logUpdate(i, now, was, g);
      KernelNodeParams p = nodeParams(&pending, i, ptrs);
      CHECK(cu.graphExecKernelNodeSetParams(g->exec, g->node[i], &p),
            "cuGraphExecKernelNodeSetParams");
      ++stats[2], ++updated;
    }
  } else {
    g = victim;
    dropGraph(g);
    if (!buildGraph(g))
      dropGraph(g);
  }
  if (!cu.error[0]) {
    /* The graph keeps this call's launches; their buffers take the old. */
    Recording old = g->rec;
    g->rec = pending;
    pending = old;
    g->key = key;
    g->used = ++useClock;
    double launched = cu.graphLog ? nowUs() : 0;
    CHECK(cu.graphLaunch(g->exec, stream), "cuGraphLaunch");
    ++stats[1];
    if (cu.graphLog)
      fprintf(stderr,
              "k3rt-cuda graph: launches %zu-%zu %s, %zu nodes updated; "
              "host +%.1f us at the segment, +%.1f at cuGraphLaunch, "
              "+%.1f after it\n",
              callLaunches - g->rec.n, callLaunches,
              built ? "built" : "replayed", updated,
              start - callEnd, launched - callEnd, nowUs() - callEnd);
  }
  clearPending();
}

/* Empties the segment and what its launches touched. */
static void clearPending(void) {
  pending.n = pending.bytes = pending.ndeps = 0;
  if (++touchGen == 0) {
    memset(touched, 0, sizeof(touched));
    touchGen = 1;
  }
  nTouched = 0, nReaders = 0, barrier = -1;
}

/* Drops every graph (their kernels' module is going away). */
static void dropGraphs(void) {
  for (int k = 0; k < kGraphs; ++k)
    dropGraph(&graphCache[k]);
  for (size_t i = 0; i < kParamCache; ++i) {
    free(paramInfo[i].size);
    paramInfo[i].fn = NULL, paramInfo[i].size = NULL, paramInfo[i].n = 0;
  }
}

/* Graphs built, graph launches, graph nodes updated between replays, and
 * kernels queued one by one since the library was loaded. */
K3_EXPORT void k3rt_cuda_graph_stats(uint64_t out[4]) {
  memcpy(out, stats, sizeof(stats));
}

/* Waits for a forward call's kernels, then rewinds the workspace arena:
 * call after every forward call. */
K3_EXPORT void k3rt_cuda_workspace_reset(void) {
  if (cu.ready && !cu.error[0])
    flush();
  if (cu.graphLog)
    fprintf(stderr, "k3rt-cuda graph: call of %zu launches queued, host "
            "+%.1f us (its first launch at +%.1f)\n", callLaunches,
            nowUs() - callEnd, firstLaunch - callEnd);
  clearPending();
  callLaunches = 0, nextCut = kFirstCut;
  nAllocs = 0;
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
  if (cu.graphLog)
    callEnd = nowUs(), launchedInCall = 0;
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
    flush();
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
    flush();
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
  CUdeviceptr marker;
  size_t bytes = 0;
  if (m && cu.dependentLaunch &&
      cu.moduleGetGlobal(&marker, &bytes, m, "k3_dependent_launch") == 0 &&
      bytes == 4) {
    pthread_mutex_lock(&functionsLock);
    addWaiting(m, m);
    ++waitingModules;
    pthread_mutex_unlock(&functionsLock);
  }
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

/* The name `f` was looked up by, for messages. */
static const char *functionName(CUfunction f) {
  const char *name = "?";
  pthread_mutex_lock(&functionsLock);
  for (size_t i = 0; i < kFunctionCache; ++i)
    if (functions[i].module && functions[i].function == f)
      name = functions[i].name;
  pthread_mutex_unlock(&functionsLock);
  return name;
}

static size_t functionSlot(void *module, const char *name) {
  uintptr_t h = ((uintptr_t)module * 0x9E3779B97F4A7C15ull) ^ (uintptr_t)name;
  return (size_t)((h >> 7) ^ (h >> 29)) % kFunctionCache;
}

/* A kernel with more than 48 KB of dynamic shared memory (k3c's k3-gpu-mma:
 * 54 KB of rings for its 64 x 128 tiles) must opt in before its first
 * launch or graph node (CUDA C++ Programming Guide, "Shared Memory",
 * compute capability 9.0): CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
 * once per function and size; the driver rejects more than the device
 * allows. The functions that did are kept until a module is unloaded (a
 * later module's function may have the same handle). Guarded by
 * functionsLock. */
enum { kSharedOptIns = 256, kSharedDefault = 48 * 1024 };
static struct {
  CUfunction function;
  unsigned bytes;
} sharedOptIns[kSharedOptIns];

static void allowShared(CUfunction function, unsigned bytes) {
  pthread_mutex_lock(&functionsLock);
  size_t i = 0;
  while (i < kSharedOptIns && sharedOptIns[i].function &&
         sharedOptIns[i].function != function)
    ++i;
  if (i == kSharedOptIns || sharedOptIns[i].bytes < bytes) {
    enum { kMaxDynamicShared = 8 }; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_... */
    CHECK(cu.funcSetAttribute(function, kMaxDynamicShared, (int)bytes),
          "cuFuncSetAttribute (dynamic shared memory)");
    if (i < kSharedOptIns)
      sharedOptIns[i].function = function, sharedOptIns[i].bytes = bytes;
  }
  pthread_mutex_unlock(&functionsLock);
}

K3_EXPORT void mgpuModuleUnload(void *module) {
  if (!module)
    return;
  pthread_mutex_lock(&functionsLock);
  for (size_t i = 0; i < kFunctionCache; ++i)
    if (functions[i].module == module)
      functions[i].module = NULL, functions[i].name = NULL;
  memset(sharedOptIns, 0, sizeof(sharedOptIns));
  dropWaiting(module);
  dropAccess(module);
  pthread_mutex_unlock(&functionsLock);
  if (load()) {
    /* Graphs name the module's kernels: queue what is recorded, wait, and
     * drop them. */
    flush();
    if (!cu.error[0] && cu.streamSynchronize)
      CHECK(cu.streamSynchronize(theStream()), "cuStreamSynchronize");
    dropGraphs();
    CHECK(cu.moduleUnload(module), "cuModuleUnload");
  }
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
    if (f && isWaiting(module))
      addWaiting(f, module);
    if (f)
      readAccess(f, module, name);
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
  if (!function || !load())
    return;
  /* A grid with no blocks has no work (an empty segment of a loop). */
  if (gx <= 0 || gy <= 0 || gz <= 0)
    return;
  if (smem > kSharedDefault)
    allowShared(function, (unsigned)smem);
  if (cu.graphLog && !launchedInCall++)
    firstLaunch = nowUs();
  if (cu.graphs && !extra && stream == theStream() && nparams <= kMaxParams) {
    unsigned grid[3] = {(unsigned)gx, (unsigned)gy, (unsigned)gz};
    unsigned block[3] = {(unsigned)bx, (unsigned)by, (unsigned)bz};
    if (record(function, grid, block, (unsigned)smem, params,
               (uint32_t)nparams)) {
      if (++callLaunches == nextCut) {
        nextCut *= 4;
        flush();
      }
      return;
    }
  }
  /* Not recorded: it goes after the recorded ones. */
  flush();
  ++stats[3];
  CHECK(cu.launchKernel(function, (unsigned)gx, (unsigned)gy, (unsigned)gz,
                        (unsigned)bx, (unsigned)by, (unsigned)bz,
                        (unsigned)smem, stream, params, extra),
        "cuLaunchKernel");
  /* K3RT_CUDA_SYNC_EACH=1 (debugging): wait for every kernel, so that a
   * kernel that faults is the one the error names. */
  if (cu.syncEach && !cu.error[0]) {
    CUresult r = cu.streamSynchronize(stream);
    if (r != 0) {
      const char *name = functionName(function);
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
  /* An empty allocation (a projection's unused split-K partials) takes no
   * room: it is the next allocation's buffer to the graphs' dependencies.
   * In a MoE layer that makes the experts' grouping, and so the routed
   * experts, wait for the shared experts' down projection (the empty
   * buffer's writer). Given room of its own (256 bytes), the two ran side
   * by side and a batch-8 step was 0.1 ms slower (H200: gate/up stage
   * 1.670 -> 1.807 ms; BENCHMARKS.md, twenty-seventh session). */
  size_t aligned = (size_t)((size + 255) & ~(uint64_t)255);
  if (cu.arenaUsed + aligned > cu.arenaSize) {
    fail("workspace (raise K3RT_CUDA_WORKSPACE_MB)", 2 /* out of memory */);
    return NULL;
  }
  size_t *at = grow(allocAt, &allocCap, nAllocs, sizeof(size_t), 1024);
  if (!at) {
    fail("workspace allocation list (host memory)", 2);
    return NULL;
  }
  allocAt = at;
  allocAt[nAllocs++] = cu.arenaUsed;
  void *p = (void *)(uintptr_t)(cu.arena + cu.arenaUsed);
  cu.arenaUsed += aligned;
  return p;
}

K3_EXPORT void mgpuMemFree(void *ptr, void *stream) {
  /* Workspace memory is released all at once by the reset. */
  (void)ptr;
  (void)stream;
}
