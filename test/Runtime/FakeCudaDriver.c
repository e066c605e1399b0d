/*===- FakeCudaDriver.c - a CUDA driver test double for k3rt's GPU paths --===*
 *
 * Loaded in place of libcuda.so.1 through K3RT_CUDA_DRIVER, it lets the
 * GPU paths of k3rt and libk3rt_cuda run on a machine without a GPU: the
 * device is host memory, copies are memmove, and kernels do not run.
 *
 *   FAKE_CUDA_SM      compute capability as NN (default 90)
 *   FAKE_CUDA_MEM_MB  device memory (default 4096); allocations past it
 *                     fail with CUDA_ERROR_OUT_OF_MEMORY (2)
 *   FAKE_CUDA_LAUNCH  "fail" (default): every launch fails with
 *                     CUDA_ERROR_LAUNCH_FAILED (719), like a kernel that
 *                     faulted; "ok": launches succeed and do nothing
 *   FAKE_CUDA_COUNT   set: at exit, print to stderr the launches and the
 *                     stream waits that found kernels still queued (the
 *                     host round trips between kernels)
 *                     and, on a second line, the graphs instantiated and
 *                     launched, the kernel nodes updated in place, the
 *                     programmatic edges added (graphs with a programmatic
 *                     edge into a kernel of a module without the
 *                     k3_dependent_launch global, which would race on a
 *                     GPU, fail to instantiate with 1, invalid value) and
 *                     the pairs of kernel nodes of launched graphs that
 *                     no path of edges orders (that a GPU may run side by
 *                     side; a launch-order edge, from port 2, orders when
 *                     kernels start, not what they see)
 *   FAKE_CUDA_DUMP    set: print each graph's nodes when it is
 *                     instantiated (kernel, grid x, the nodes it waits for)
 *   FAKE_CUDA_GUARD   set: device memory is mapped without access rights
 *                     except inside the driver's own copies and fills, so
 *                     host code that reads or writes a device buffer (a
 *                     library's host part reading what only its kernels
 *                     may) faults at once, as it would with a real device
 *
 * A graph launch fails with 1, invalid value, when two of its kernel nodes
 * that no path of edges orders touch one buffer, one of them writing it:
 * the same pointer in parameters that their kernels' `<kernel>_k3_access`
 * constants (k3c's k3-gpu-kernel-access, read here from the module's PTX)
 * mark `w` in one and `r` or `w` in the other, or both kernels of one
 * module marked `g`; a kernel without the constant conflicts with every
 * other. It names the two nodes on stderr. FAKE_CUDA_UNORDERED=1 makes
 * the check ignore every edge (it then finds the races a graph without
 * edges would have).
 *
 * A context is current per thread, as with the real driver (calls from a
 * thread that did not make it current fail with 201, invalid context), and
 * a launch or graph node with more than 48 KB of dynamic shared memory
 * fails with 1, invalid value, unless its function opted in
 * (cuFuncSetAttribute), as with the real driver.
 *
 * Only the entry points MgpuRuntime.c resolves exist.
 *===----------------------------------------------------------------------===*/

#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
#define EXPORT __attribute__((visibility("default")))

static size_t used, limit;
static long launches, waitsQueued, filledFF, lookups;
static long graphsBuilt, graphLaunches, nodeUpdates, programmaticEdges;
static long unorderedPairs;
static int queued, faulted;

static long envInt(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? atol(v) : fallback;
}

static CUresult init(unsigned flags) {
  (void)flags;
  limit = (size_t)envInt("FAKE_CUDA_MEM_MB", 4096) << 20;
  return 0;
}
static CUresult deviceGet(int *dev, int ordinal) {
  *dev = ordinal;
  return 0;
}
static CUresult ctxRetain(void **ctx, int dev) {
  (void)dev;
  *ctx = (void *)&used;
  return 0;
}
/* The context current on this thread (cuCtxSetCurrent), as in the real
 * driver: a thread that did not make one current gets
 * CUDA_ERROR_INVALID_CONTEXT from every call that needs it. */
static _Thread_local void *current;
#define NEED_CONTEXT                                                           \
  do {                                                                         \
    if (!current)                                                              \
      return 201;                                                              \
  } while (0)
static CUresult ctxSetCurrent(void *ctx) {
  current = ctx;
  return 0;
}
static CUresult moduleLoadData(void **module, const void *image) {
  NEED_CONTEXT;
  *module = (void *)(uintptr_t)image;
  return 0;
}
/* The image's bytes: a fatbin's header gives its size; anything else is
 * taken as text. */
static size_t imageBytes(const unsigned char *image) {
  uint32_t magic;
  memcpy(&magic, image, 4);
  if (magic != 0xBA55ED50u)
    return strlen((const char *)image);
  uint16_t header;
  uint64_t body;
  memcpy(&header, image + 6, 2);
  memcpy(&body, image + 8, 8);
  return header + body;
}
/* A module's device global: found if the image holds its name, 4 bytes. */
/* A byte array's initializer in the module's PTX, ".b8 NAME[N] = {v, ...}":
 * its N bytes (the caller frees them), or NULL. */
static unsigned char *ptxBytes(void *module, const char *name, size_t *n) {
  char key[600];
  snprintf(key, sizeof(key), ".b8 %s[", name);
  const char *at = memmem(module, imageBytes(module), key, strlen(key));
  if (!at)
    return NULL;
  char *end;
  *n = strtoul(at + strlen(key), &end, 10);
  if (strncmp(end, "] = {", 5) != 0 || !*n)
    return NULL;
  unsigned char *v = malloc(*n);
  const char *c = end + 5;
  for (size_t i = 0; v && i < *n; ++i) {
    v[i] = (unsigned char)strtoul(c, &end, 10);
    c = end + strspn(end, ", ");
  }
  return v;
}
static CUresult moduleGetGlobal(uint64_t *ptr, size_t *bytes, void *module,
                                const char *name) {
  NEED_CONTEXT;
  if (!memmem(module, imageBytes(module), name, strlen(name)))
    return 500; /* CUDA_ERROR_NOT_FOUND */
  /* An initialized array is kept for the process, as the module's global
   * would be. */
  static struct Kept {
    unsigned char *bytes;
    struct Kept *next;
  } *kept;
  size_t n;
  unsigned char *v = ptxBytes(module, name, &n);
  struct Kept *k = v ? malloc(sizeof(*k)) : NULL;
  if (k) {
    k->bytes = v, k->next = kept, kept = k;
    *ptr = (uint64_t)(uintptr_t)v;
    *bytes = n;
    return 0;
  }
  free(v);
  static uint32_t storage;
  *ptr = (uint64_t)(uintptr_t)&storage;
  *bytes = sizeof(storage);
  return 0;
}
static CUresult moduleUnload(void *module) {
  NEED_CONTEXT;
  (void)module;
  return 0;
}
/* A function is one (module, name): kernels of one name in two modules
 * differ, as on a GPU. */
static struct FakeFunction {
  void *module;
  char *name;
  unsigned dynamicShared; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
  char *access; /* its `<name>_k3_access`, NUL-terminated, or NULL */
  size_t nparams;       /* as its PTX entry declares them (0: not found) */
  unsigned char *bytes; /* each parameter's size */
  struct FakeFunction *next;
} *functions;
/* `k`'s parameter sizes as its PTX entry declares them (".param .u64 ...",
 * ".param .f32 ..."): a real driver's, so that the runtime's 8-byte slots
 * have padding as on a GPU. */
static void paramSizes(struct FakeFunction *k) {
  char key[600];
  snprintf(key, sizeof(key), ".entry %s(", k->name);
  size_t total = imageBytes(k->module);
  const char *at = memmem(k->module, total, key, strlen(key));
  const char *end =
      at ? memchr(at, ')', total - (size_t)(at - (const char *)k->module))
         : NULL;
  k->nparams = 0, k->bytes = NULL;
  while (end && (at = memmem(at, (size_t)(end - at), ".param .", 8))) {
    at += 8; /* the type: u64, f32, b8, ... */
    size_t bytes = (size_t)strtoul(at + 1, NULL, 10) / 8;
    unsigned char *b = realloc(k->bytes, k->nparams + 1);
    if (!b)
      break;
    k->bytes = b;
    k->bytes[k->nparams++] = (unsigned char)(bytes ? bytes : 1);
  }
}
static CUresult moduleGetFunction(void **f, void *module, const char *name) {
  NEED_CONTEXT;
  ++lookups;
  for (struct FakeFunction *k = functions; k; k = k->next)
    if (k->module == module && !strcmp(k->name, name)) {
      *f = k;
      return 0;
    }
  struct FakeFunction *k = malloc(sizeof(*k));
  if (!k || !(k->name = strdup(name)))
    return 2;
  k->module = module;
  k->dynamicShared = 48 * 1024;
  char global[600];
  size_t n = 0;
  snprintf(global, sizeof(global), "%s_k3_access", name);
  unsigned char *access = ptxBytes(module, global, &n);
  k->access = access ? realloc(access, n + 1) : NULL;
  if (k->access)
    k->access[n] = 0;
  paramSizes(k);
  k->next = functions;
  functions = k;
  *f = k;
  return 0;
}
/* More dynamic shared memory than 48 KB needs the function's opt-in
 * (cuFuncSetAttribute), at most the 227 KB of an sm_90 block; else the
 * launch or graph node fails with 1, invalid value, as on a GPU. */
enum { kMaxDynamicSharedAttr = 8, kMostShared = 227 * 1024 };
static CUresult funcSetAttribute(void *f, int attr, int value) {
  if (attr != kMaxDynamicSharedAttr || value < 0 || value > kMostShared)
    return 1;
  ((struct FakeFunction *)f)->dynamicShared = (unsigned)value;
  return 0;
}
static int sharedFits(void *f, unsigned smem) {
  return smem <= ((struct FakeFunction *)f)->dynamicShared;
}
static CUresult launchKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz,
                             unsigned smem, void *stream, void **params,
                             void **extra) {
  NEED_CONTEXT;
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz;
  (void)stream, (void)params, (void)extra;
  if (!sharedFits(f, smem))
    return 1;
  const char *mode = getenv("FAKE_CUDA_LAUNCH");
  ++launches;
  queued = 1;
  /* "fault": launches are accepted and the wait after them fails, as an
   * illegal address in a kernel shows on a GPU. */
  if (mode && !strcmp(mode, "fault"))
    faulted = 1;
  return mode && (!strcmp(mode, "ok") || !strcmp(mode, "fault")) ? 0 : 719;
}
static CUresult streamCreate(void **s, unsigned flags) {
  NEED_CONTEXT;
  (void)flags;
  *s = (void *)&limit;
  return 0;
}
static CUresult streamNop(void *s) {
  (void)s;
  return 0;
}
static CUresult streamSynchronize(void *s) {
  NEED_CONTEXT;
  (void)s;
  waitsQueued += queued;
  queued = 0;
  return faulted ? 700 : 0;
}
__attribute__((destructor)) static void report(void) {
  if (!getenv("FAKE_CUDA_COUNT"))
    return;
  fprintf(stderr,
          "fake cuda: %ld launches, %ld waits with kernels queued, %ld "
          "bytes filled with 0xff, %ld function lookups\n",
          launches, waitsQueued, filledFF, lookups);
  fprintf(stderr,
          "fake cuda graphs: %ld instantiated, %ld launched, %ld kernel "
          "nodes updated, %ld programmatic edges, %ld kernel node pairs "
          "unordered\n",
          graphsBuilt, graphLaunches, nodeUpdates, programmaticEdges,
          unorderedPairs);
}

/* Graphs: a chain of kernel nodes; a launch runs (counts) each as
 * cuLaunchKernel would. The driver cannot know argument sizes here, so
 * every argument is 8 bytes (k3c's kernels take pointers and i64 indices). */
typedef struct {
  void *fn;
  unsigned grid[3], smem;
  int programmatic; /* an incoming programmatic edge */
  size_t *dep, ndeps;  /* the nodes it waits for */
  uint64_t *arg;       /* its parameters, when its kernel has an access */
} FakeNode;
typedef struct {
  FakeNode *node;
  size_t n, cap;
} FakeGraph;
typedef struct {
  void *fn;
  unsigned grid[3], block[3], smem;
  void **params, **extra;
} NodeParams;

/* Parameter `i` of `f` (paramSizes; 8 bytes at 8 i for a kernel whose
 * entry was not found). */
static CUresult funcGetParamInfo(void *f, size_t i, size_t *offset,
                                 size_t *size) {
  const struct FakeFunction *k = f;
  *offset = 8 * i, *size = 8;
  if (!k->nparams)
    return 0;
  if (i >= k->nparams)
    return 1; /* past the last parameter: invalid value */
  size_t off = 0;
  for (size_t a = 0; a <= i; ++a) {
    size_t bytes = k->bytes[a];
    off = (off + bytes - 1) / bytes * bytes;
    if (a < i)
      off += bytes;
  }
  *offset = off, *size = k->bytes[i];
  return 0;
}
static CUresult graphCreate(FakeGraph **g, unsigned flags) {
  NEED_CONTEXT;
  (void)flags;
  *g = calloc(1, sizeof(FakeGraph));
  return *g ? 0 : 2;
}
static CUresult graphDestroy(FakeGraph *g) {
  for (size_t i = 0; g && i < g->n; ++i)
    free(g->node[i].dep), free(g->node[i].arg);
  if (g)
    free(g->node);
  free(g);
  return 0;
}
/* The parameters of `p` that `f`'s access string covers, each widened to
 * 8 bytes (its size as funcGetParamInfo says). */
static uint64_t *nodeArgs(struct FakeFunction *f, void **params) {
  if (!f->access || !params)
    return NULL;
  size_t n = strlen(f->access) - 1;
  uint64_t *arg = calloc(n ? n : 1, sizeof(uint64_t));
  for (size_t a = 0; arg && a < n; ++a) {
    size_t size = a < f->nparams ? f->bytes[a] : 8;
    memcpy(&arg[a], params[a], size < 8 ? size : 8);
  }
  return arg;
}
static int addNodeDep(FakeNode *n, size_t d) {
  size_t *dep = realloc(n->dep, (n->ndeps + 1) * sizeof(size_t));
  if (!dep)
    return 0;
  n->dep = dep;
  n->dep[n->ndeps++] = d;
  return 1;
}
/* Each node is a number: its position in the graph. */
static CUresult graphAddKernelNode(void **node, FakeGraph *g,
                                   void *const *deps, size_t ndeps,
                                   const NodeParams *p) {
  if (!sharedFits(p->fn, p->smem))
    return 1;
  for (size_t k = 0; k < ndeps; ++k)
    if ((size_t)(uintptr_t)deps[k] >= g->n)
      return 1;
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 64;
    FakeNode *n = realloc(g->node, cap * sizeof(FakeNode));
    if (!n)
      return 2;
    g->node = n, g->cap = cap;
  }
  FakeNode *added = &g->node[g->n];
  added->fn = p->fn;
  added->programmatic = 0;
  added->dep = NULL, added->ndeps = 0;
  added->arg = nodeArgs(p->fn, p->params);
  for (size_t k = 0; k < ndeps; ++k)
    if (!addNodeDep(added, (size_t)(uintptr_t)deps[k]))
      return 2;
  g->node[g->n].smem = p->smem;
  memcpy(g->node[g->n].grid, p->grid, sizeof(p->grid));
  *node = (void *)(uintptr_t)g->n++;
  return 0;
}
/* CUgraphEdgeData: a programmatic edge must leave the programmatic (1) or
 * launch-order (2) port of a kernel node. */
typedef struct {
  unsigned char fromPort, toPort, type, reserved[5];
} EdgeData;
static CUresult graphAddDependencies(FakeGraph *g, void *const *from,
                                     void *const *to, const EdgeData *edge,
                                     size_t n) {
  for (size_t e = 0; e < n; ++e) {
    size_t a = (size_t)(uintptr_t)from[e], b = (size_t)(uintptr_t)to[e];
    if (a >= g->n || b >= g->n || a == b || edge[e].toPort)
      return 1;
    /* A launch-order edge (port 2) orders dispatch, not memory. */
    int launchOrder = edge[e].type == 1 && edge[e].fromPort == 2;
    if (edge[e].type == 1) {
      if (edge[e].fromPort != 1 && edge[e].fromPort != 2)
        return 1;
      if (!launchOrder)
        g->node[b].programmatic = 1;
      ++programmaticEdges;
    }
    if (a >= b)
      return 1;
    if (!launchOrder && !addNodeDep(&g->node[b], a))
      return 2;
  }
  return 0;
}
static CUresult graphInstantiate(FakeGraph **exec, FakeGraph *g,
                                 unsigned long long flags) {
  NEED_CONTEXT;
  (void)flags;
  for (size_t i = 0; i < g->n; ++i) {
    struct FakeFunction *f = g->node[i].fn;
    uint64_t ptr;
    size_t bytes;
    if (g->node[i].programmatic &&
        moduleGetGlobal(&ptr, &bytes, f->module, "k3_dependent_launch"))
      return 1;
  }
  FakeGraph *e = calloc(1, sizeof(FakeGraph));
  if (!e || !(e->node = malloc((g->n ? g->n : 1) * sizeof(FakeNode))))
    return 2;
  memcpy(e->node, g->node, g->n * sizeof(FakeNode));
  e->n = e->cap = g->n;
  for (size_t i = 0; i < g->n; ++i) { /* its own copies */
    FakeNode *n = &e->node[i];
    struct FakeFunction *f = n->fn;
    size_t nargs = f->access ? strlen(f->access) - 1 : 0;
    n->dep = malloc((n->ndeps ? n->ndeps : 1) * sizeof(size_t));
    n->arg = g->node[i].arg ? malloc((nargs ? nargs : 1) * 8) : NULL;
    if (!n->dep || (g->node[i].arg && !n->arg))
      return 2;
    if (n->ndeps)
      memcpy(n->dep, g->node[i].dep, n->ndeps * sizeof(size_t));
    if (n->arg)
      memcpy(n->arg, g->node[i].arg, nargs * 8);
  }
  if (getenv("FAKE_CUDA_DUMP"))
    for (size_t i = 0; i < e->n; ++i) {
      fprintf(stderr, "fake cuda graph %ld node %zu %s grid %u:",
              graphsBuilt, i, ((struct FakeFunction *)e->node[i].fn)->name,
              e->node[i].grid[0]);
      for (size_t d = 0; d < e->node[i].ndeps; ++d)
        fprintf(stderr, " %zu", e->node[i].dep[d]);
      const char *acc = ((struct FakeFunction *)e->node[i].fn)->access;
      for (size_t a = 0; e->node[i].arg && acc[1 + a]; ++a)
        if (acc[1 + a] != '-' && (a == 0 || acc[a] == '-'))
          fprintf(stderr, " %c%llx", acc[1 + a],
                  (unsigned long long)e->node[i].arg[a + 1]);
      fputc('\n', stderr);
    }
  ++graphsBuilt;
  *exec = e;
  return 0;
}
static CUresult graphExecSetParams(FakeGraph *exec, void *node,
                                   const NodeParams *p) {
  size_t i = (size_t)(uintptr_t)node;
  if (i >= exec->n || exec->node[i].fn != p->fn ||
      !sharedFits(p->fn, p->smem))
    return 1; /* CUDA_ERROR_INVALID_VALUE */
  memcpy(exec->node[i].grid, p->grid, sizeof(p->grid));
  exec->node[i].smem = p->smem;
  free(exec->node[i].arg);
  exec->node[i].arg = nodeArgs(p->fn, p->params);
  ++nodeUpdates;
  return 0;
}
/* Whether nodes x and y of a graph touch one buffer, one of them writing
 * it (the header); 0 or the buffer (1 for a module's globals or a kernel
 * without an access string). */
static uint64_t conflict(const FakeNode *x, const FakeNode *y) {
  const struct FakeFunction *f = x->fn, *h = y->fn;
  if (!x->arg || !y->arg)
    return 1;
  if (f->access[0] == 'g' && h->access[0] == 'g' && f->module == h->module)
    return 1;
  for (size_t a = 0; f->access[1 + a]; ++a) {
    char ca = f->access[1 + a];
    if ((ca != 'r' && ca != 'w') || !x->arg[a])
      continue;
    for (size_t b = 0; h->access[1 + b]; ++b) {
      char cb = h->access[1 + b];
      if ((cb == 'r' || cb == 'w') && (ca == 'w' || cb == 'w') &&
          x->arg[a] == y->arg[b])
        return x->arg[a];
    }
  }
  return 0;
}
/* Orders every two nodes that conflict, or fails (the header). */
static CUresult checkOrder(const FakeGraph *g) {
  size_t n = g->n, words = (n + 63) / 64;
  uint64_t *before = calloc(n * words + 1, sizeof(uint64_t));
  if (!before)
    return 2;
  CUresult r = 0;
  int unordered = getenv("FAKE_CUDA_UNORDERED") != NULL;
  for (size_t j = 0; j < n && !r; ++j) {
    uint64_t *bj = before + j * words;
    for (size_t k = 0; k < g->node[j].ndeps; ++k) {
      size_t d = g->node[j].dep[k];
      for (size_t w = 0; w < words; ++w)
        bj[w] |= before[d * words + w];
      bj[d / 64] |= 1ull << (d % 64);
    }
    for (size_t i = 0; i < j && !r; ++i) {
      if (bj[i / 64] >> (i % 64) & 1 && !unordered)
        continue;
      ++unorderedPairs;
      uint64_t buffer = conflict(&g->node[i], &g->node[j]);
      if (buffer) {
        fprintf(stderr,
                "fake cuda: graph kernel nodes %zu (%s) and %zu (%s) race on "
                "%#llx\n",
                i, ((struct FakeFunction *)g->node[i].fn)->name, j,
                ((struct FakeFunction *)g->node[j].fn)->name,
                (unsigned long long)buffer);
        r = 1;
      }
    }
  }
  free(before);
  return r;
}
static CUresult graphLaunch(FakeGraph *exec, void *stream) {
  NEED_CONTEXT;
  ++graphLaunches;
  CUresult order = checkOrder(exec);
  if (order)
    return order;
  for (size_t i = 0; i < exec->n; ++i) {
    const FakeNode *n = &exec->node[i];
    CUresult r = launchKernel(n->fn, n->grid[0], n->grid[1], n->grid[2], 64,
                              1, 1, n->smem, stream, NULL, NULL);
    if (r)
      return r;
  }
  return 0;
}
/* Guarded device memory (FAKE_CUDA_GUARD): whole pages mapped PROT_NONE,
 * opened only while the driver copies or fills them. */
#define MAX_GUARDED 4096
static struct {
  char *base;
  size_t bytes;     /* mapped, whole pages */
  size_t requested; /* counted in `used` */
} guarded[MAX_GUARDED];
static int guard(void) { return getenv("FAKE_CUDA_GUARD") != NULL; }
static int findGuarded(const void *p) {
  for (int i = 0; i < MAX_GUARDED; ++i)
    if (guarded[i].base && (const char *)p >= guarded[i].base &&
        (const char *)p < guarded[i].base + guarded[i].bytes)
      return i;
  return -1;
}
/* Opens (`rights` PROT_READ | PROT_WRITE) or closes (PROT_NONE) the guarded
 * block holding `p`, if any. */
static void setRights(const void *p, int rights) {
  int i = findGuarded(p);
  if (i >= 0)
    mprotect(guarded[i].base, guarded[i].bytes, rights);
}

/* Each block carries its size in front, so that frees give it back. */
static CUresult memAlloc(uint64_t *p, size_t bytes) {
  NEED_CONTEXT;
  if (used + bytes > limit)
    return 2;
  if (guard()) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t mapped = (bytes + page - 1) / page * page;
    if (!mapped)
      mapped = page;
    int slot = 0;
    while (slot < MAX_GUARDED && guarded[slot].base)
      ++slot;
    if (slot == MAX_GUARDED)
      return 2;
    void *m = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
      return 2;
    guarded[slot].base = m;
    guarded[slot].bytes = mapped;
    guarded[slot].requested = bytes;
    used += bytes;
    *p = (uint64_t)(uintptr_t)m;
    return 0;
  }
  size_t *block = malloc(bytes + 16);
  if (!block)
    return 2;
  block[0] = bytes;
  used += bytes;
  *p = (uint64_t)(uintptr_t)(block + 2);
  return 0;
}
static CUresult memFree(uint64_t p) {
  NEED_CONTEXT;
  if (!p)
    return 0;
  int i = findGuarded((const void *)(uintptr_t)p);
  if (i >= 0) {
    used -= guarded[i].requested;
    munmap(guarded[i].base, guarded[i].bytes);
    guarded[i].base = NULL;
    return 0;
  }
  size_t *block = (size_t *)(uintptr_t)p - 2;
  used -= block[0];
  free(block);
  return 0;
}
static CUresult memAllocHost(void **p, size_t bytes) {
  NEED_CONTEXT;
  *p = malloc(bytes ? bytes : 1);
  return *p ? 0 : 2;
}
static CUresult memFreeHost(void *p) {
  NEED_CONTEXT;
  free(p);
  return 0;
}
static CUresult getErrorString(CUresult r, const char **s) {
  *s = r == 2     ? "out of memory"
       : r == 201 ? "invalid device context"
       : r == 719 ? "unspecified launch failure"
                  : "fake driver error";
  return 0;
}
static CUresult deviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  long sm = envInt("FAKE_CUDA_SM", 90);
  *v = attr == 75 ? (int)(sm / 10) : attr == 76 ? (int)(sm % 10) : 0;
  return 0;
}
static CUresult deviceGetName(char *name, int len, int dev) {
  (void)dev;
  snprintf(name, (size_t)len, "Fake GPU");
  return 0;
}
static CUresult memGetInfo(size_t *freeBytes, size_t *total) {
  NEED_CONTEXT;
  *freeBytes = limit - used;
  *total = limit;
  return 0;
}
static CUresult memcpyAsync(uint64_t dst, uint64_t src, size_t n, void *s) {
  NEED_CONTEXT;
  (void)s;
  void *d = (void *)(uintptr_t)dst;
  const void *from = (const void *)(uintptr_t)src;
  setRights(d, PROT_READ | PROT_WRITE);
  setRights(from, PROT_READ | PROT_WRITE);
  memmove(d, from, n);
  setRights(d, PROT_NONE);
  setRights(from, PROT_NONE);
  return 0;
}
static CUresult memcpyDtoH(void *dst, uint64_t src, size_t n) {
  return memcpyAsync((uint64_t)(uintptr_t)dst, src, n, NULL);
}
static CUresult memsetD8Async(uint64_t dst, unsigned char v, size_t n,
                              void *s) {
  NEED_CONTEXT;
  (void)s;
  void *d = (void *)(uintptr_t)dst;
  if (v == 0xFF)
    filledFF += (long)n;
  setRights(d, PROT_READ | PROT_WRITE);
  memset(d, v, n);
  setRights(d, PROT_NONE);
  return 0;
}

EXPORT CUresult cuGetProcAddress_v2(const char *name, void **fn, int version,
                                    unsigned long long flags, int *status) {
  (void)version, (void)flags;
  static const struct {
    const char *name;
    void *fn;
  } table[] = {
      {"cuInit", (void *)init},
      {"cuDeviceGet", (void *)deviceGet},
      {"cuDevicePrimaryCtxRetain", (void *)ctxRetain},
      {"cuCtxSetCurrent", (void *)ctxSetCurrent},
      {"cuModuleLoadData", (void *)moduleLoadData},
      {"cuModuleUnload", (void *)moduleUnload},
      {"cuModuleGetFunction", (void *)moduleGetFunction},
      {"cuLaunchKernel", (void *)launchKernel},
      {"cuFuncSetAttribute", (void *)funcSetAttribute},
      {"cuStreamCreate", (void *)streamCreate},
      {"cuStreamDestroy", (void *)streamNop},
      {"cuStreamSynchronize", (void *)streamSynchronize},
      {"cuMemAlloc", (void *)memAlloc},
      {"cuMemFree", (void *)memFree},
      {"cuMemAllocHost", (void *)memAllocHost},
      {"cuMemFreeHost", (void *)memFreeHost},
      {"cuGetErrorString", (void *)getErrorString},
      {"cuDeviceGetAttribute", (void *)deviceGetAttribute},
      {"cuDeviceGetName", (void *)deviceGetName},
      {"cuMemGetInfo", (void *)memGetInfo},
      {"cuMemcpyAsync", (void *)memcpyAsync},
      {"cuMemcpyDtoH", (void *)memcpyDtoH},
      {"cuMemsetD8Async", (void *)memsetD8Async},
      {"cuFuncGetParamInfo", (void *)funcGetParamInfo},
      {"cuGraphCreate", (void *)graphCreate},
      {"cuGraphDestroy", (void *)graphDestroy},
      {"cuGraphAddKernelNode", (void *)graphAddKernelNode},
      {"cuGraphInstantiateWithFlags", (void *)graphInstantiate},
      {"cuGraphExecDestroy", (void *)graphDestroy},
      {"cuGraphExecKernelNodeSetParams", (void *)graphExecSetParams},
      {"cuGraphLaunch", (void *)graphLaunch},
      {"cuModuleGetGlobal", (void *)moduleGetGlobal},
      {"cuGraphAddDependencies", (void *)graphAddDependencies},
  };
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); ++i)
    if (!strcmp(table[i].name, name)) {
      *fn = table[i].fn;
      if (status)
        *status = 1;
      return 0;
    }
  *fn = NULL;
  if (status)
    *status = 0;
  return 500; /* CUDA_ERROR_NOT_FOUND */
}
