//===- Session.cpp - state pools, sequences, snapshots and steps ----------===//

#include "Session.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

using namespace k3rt;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A row-major descriptor of `shape` over `data`.
static void setDesc(MemRefDesc &d, void *data,
                    const std::vector<int64_t> &shape) {
  d.allocated = data;
  d.aligned = data;
  d.offset = 0;
  size_t rank = shape.size();
  int64_t stride = 1;
  for (size_t i = rank; i-- > 0;) {
    d.dims[i] = shape[i];
    d.dims[rank + i] = stride;
    stride *= shape[i];
  }
}

static void setData(MemRefDesc &d, void *data) {
  d.allocated = data;
  d.aligned = data;
}

static std::string removedHint(const k3rt_session *s, int64_t id) {
  for (int64_t r : s->removed)
    if (r == id)
      return " (it was removed)";
  return std::string();
}

static k3rt_status *unknownSequence(const k3rt_session *s, int64_t id,
                                    const char *what) {
  return makeStatus(K3RT_NOT_FOUND, "%s: sequence %lld does not exist%s", what,
                    (long long)id, removedHint(s, id).c_str());
}

static uint8_t *slotData(const k3rt_session *s, int32_t slot) {
  return s->slots.data() + uint64_t(slot) * s->manifest->slotBytes;
}

static uint8_t *pageData(const k3rt_session *s, size_t pool, int32_t page) {
  return s->pools[pool].data() +
         uint64_t(page) * s->manifest->pageBytesPerLayer;
}

static int32_t takeSlot(k3rt_session *s) {
  int32_t slot = s->freeSlots.back();
  s->freeSlots.pop_back();
  return slot;
}

/// A page handed out zeroed in every paged layer.
static int32_t takeZeroedPage(k3rt_session *s) {
  int32_t page = s->freePages.back();
  s->freePages.pop_back();
  s->pageRefs[size_t(page)] = 1;
  for (size_t p = 0; p < s->pools.size(); ++p)
    zeroBytes(s->gpu, pageData(s, p, page), s->manifest->pageBytesPerLayer);
  return page;
}

static void dropPage(k3rt_session *s, int32_t page) {
  if (--s->pageRefs[size_t(page)] == 0)
    s->freePages.push_back(page);
}

static float bf16ToFloat(uint16_t v) {
  uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

static float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Converts `count` elements of `dtype` to f32.
static void toFloat(const uint8_t *src, DType dtype, size_t count, float *dst) {
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
    case DType::F32:
      std::memcpy(&dst[i], src + 4 * i, 4);
      break;
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = bf16ToFloat(v);
      break;
    }
    case DType::F16: {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = f16ToFloat(v);
      break;
    }
    default: // parseManifest admits other dtypes; read them as raw bytes.
      dst[i] = float(src[i]);
      break;
    }
  }
}

static uint8_t *snapshotData(const k3rt_session *s, int32_t slot) {
  return s->snapshotSlots.data() + uint64_t(slot) * s->manifest->slotBytes;
}

static void copyState(const k3rt_session *s, uint8_t *dst, const uint8_t *src) {
  copyBytes(s->gpu, dst, src, s->manifest->slotBytes);
}

static void zeroState(const k3rt_session *s, uint8_t *dst) {
  zeroBytes(s->gpu, dst, s->manifest->slotBytes);
}

static int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Bytes of one token row in one paged layer's pool.
static uint64_t rowBytes(const k3rt_session *s) {
  return s->manifest->pageBytesPerLayer / uint64_t(s->pageSize);
}

/// Zeroes rows [from, P) of `page` in every paged layer.
static void zeroRows(k3rt_session *s, int32_t page, int64_t from) {
  uint64_t row = rowBytes(s);
  for (size_t p = 0; p < s->pools.size(); ++p)
    zeroBytes(s->gpu, pageData(s, p, page) + uint64_t(from) * row,
              uint64_t(s->pageSize - from) * row);
}

static void forgetRemoved(k3rt_session *s, int64_t id) {
  for (int64_t &r : s->removed)
    if (r == id)
      r = std::numeric_limits<int64_t>::min();
}

static void freeCheckpoints(k3rt_session *s, Sequence &seq) {
  for (const Checkpoint &c : seq.checkpoints)
    s->freeSnapshotSlots.push_back(c.slot);
  seq.checkpoints.clear();
}

//===----------------------------------------------------------------------===//
// The prefix cache
//===----------------------------------------------------------------------===//

static constexpr uint64_t kChainSeed = 0x6b3372742d636163ULL;

/// The chain hash of a block given its parent's: a 64-bit mix of every
/// token. Only finds candidates: a hit is verified token by token.
static uint64_t chainHash(uint64_t h, const int32_t *tokens, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    h ^= uint64_t(uint32_t(tokens[i])) + 0x9e3779b97f4a7c15ULL + (h << 6) +
         (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
  }
  return h;
}

static CacheNode *node(k3rt_session *s, int64_t id) {
  if (id < 0)
    return nullptr;
  auto it = s->nodes.find(id);
  return it == s->nodes.end() ? nullptr : &it->second;
}

/// The child of `parent` (-1: the root) for the block `tokens` whose chain
/// hash is `hash`, verified token by token; -1 if none.
static int64_t findChild(k3rt_session *s, int64_t parent, uint64_t hash,
                         const int32_t *tokens) {
  auto range = s->nodesByHash.equal_range(hash);
  for (auto it = range.first; it != range.second; ++it) {
    const CacheNode &n = s->nodes.find(it->second)->second;
    if (n.parent == parent &&
        std::equal(n.tokens.begin(), n.tokens.end(), tokens))
      return it->second;
  }
  return -1;
}

/// The nodes on the path of `tokens[0 .. limit)` from the root, one per
/// block, for as long as nodes exist and match.
static std::vector<int64_t> walkPath(k3rt_session *s, const int32_t *tokens,
                                     int64_t limit) {
  std::vector<int64_t> path;
  int64_t I = s->snapshotInterval;
  if (I == 0 || s->nodes.empty())
    return path;
  int64_t parent = -1;
  uint64_t hash = kChainSeed;
  for (int64_t end = I; end <= limit; end += I) {
    hash = chainHash(hash, tokens + end - I, I);
    int64_t id = findChild(s, parent, hash, tokens + end - I);
    if (id < 0)
      break;
    path.push_back(id);
    parent = id;
  }
  return path;
}

static void touch(k3rt_session *s, int64_t id) {
  uint64_t now = ++s->clock;
  for (CacheNode *n = node(s, id); n; n = node(s, n->parent))
    n->lastUse = now;
}

/// Removes node `id` (a leaf), returning its state and pages; then its
/// parent too if that is now a leaf without a state.
static void removeNode(k3rt_session *s, int64_t id) {
  while (CacheNode *n = node(s, id)) {
    if (n->children != 0)
      return;
    if (n->slot >= 0)
      s->freeSnapshotSlots.push_back(n->slot);
    for (int32_t page : n->pages)
      dropPage(s, page);
    auto range = s->nodesByHash.equal_range(n->hash);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second == id) {
        s->nodesByHash.erase(it);
        break;
      }
    int64_t parent = n->parent;
    s->nodes.erase(id);
    CacheNode *p = node(s, parent);
    if (!p)
      return;
    --p->children;
    if (p->slot >= 0 || p->children != 0)
      return;
    id = parent;
  }
}

/// Frees the state of the least recently used node that holds one (the
/// node stays while it leads to a deeper state). False if none does.
static bool evictOneState(k3rt_session *s) {
  int64_t victim = -1;
  uint64_t oldest = std::numeric_limits<uint64_t>::max();
  for (const auto &[id, n] : s->nodes)
    if (n.slot >= 0 && (n.lastUse < oldest ||
                        (n.lastUse == oldest && id < victim))) {
      oldest = n.lastUse;
      victim = id;
    }
  CacheNode *n = node(s, victim);
  if (!n)
    return false;
  s->freeSnapshotSlots.push_back(n->slot);
  n->slot = -1;
  if (n->children == 0)
    removeNode(s, victim);
  return true;
}

/// Removes least recently used leaves until `needed` pages are free or the
/// cache is empty.
static void evictForPages(k3rt_session *s, int64_t needed) {
  while (int64_t(s->freePages.size()) < needed && !s->nodes.empty()) {
    int64_t victim = -1;
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    for (const auto &[id, n] : s->nodes)
      if (n.children == 0 && (n.lastUse < oldest ||
                              (n.lastUse == oldest && id < victim))) {
        oldest = n.lastUse;
        victim = id;
      }
    if (victim < 0)
      return;
    removeNode(s, victim);
  }
}

/// Pages held by cached nodes and nothing else: freed by evicting them all.
static int64_t cacheOnlyPages(const k3rt_session *s) {
  int64_t count = 0;
  for (const auto &entry : s->nodes)
    for (int32_t page : entry.second.pages)
      if (s->pageRefs[size_t(page)] == 1)
        ++count;
  return count;
}

static int64_t cachedStates(const k3rt_session *s) {
  int64_t count = 0;
  for (const auto &entry : s->nodes)
    if (entry.second.slot >= 0)
      ++count;
  return count;
}

/// A free snapshot slot, evicting a cached state if needed; with
/// `stealPending`, the slot of the oldest snapshot captured in this step
/// (deeper snapshots are worth more). -1 if there is none.
static int32_t takeSnapshotSlot(k3rt_session *s, bool stealPending) {
  if (s->freeSnapshotSlots.empty() && !evictOneState(s) && stealPending) {
    for (PendingSnapshot &p : s->pending)
      if (p.slot >= 0) {
        int32_t slot = p.slot;
        p.slot = -1;
        return slot;
      }
  }
  if (s->freeSnapshotSlots.empty())
    return -1;
  int32_t slot = s->freeSnapshotSlots.back();
  s->freeSnapshotSlots.pop_back();
  return slot;
}

/// The node ending at `end` on the path of `seq` (its tokens verified), or
/// -1. Starts from the sequence's hint when it is still cached.
static int64_t nodeAt(k3rt_session *s, Sequence &seq, int64_t end) {
  int64_t I = s->snapshotInterval;
  if (I == 0 || end <= 0 || end % I != 0 || end > seq.length)
    return -1;
  if (CacheNode *hint = node(s, seq.chainNode)) {
    if (hint->end >= end) {
      int64_t id = seq.chainNode;
      while (CacheNode *n = node(s, id)) {
        if (n->end == end)
          return id;
        id = n->parent;
      }
      return -1;
    }
  }
  std::vector<int64_t> path = walkPath(s, seq.tokens.data(), end);
  if (int64_t(path.size()) * I != end)
    return -1;
  return path.back();
}

/// Moves the hint of `seq` back to a node ending at or before `end`.
static void trimHint(k3rt_session *s, Sequence &seq, int64_t end) {
  int64_t id = seq.chainNode;
  while (CacheNode *n = node(s, id)) {
    if (n->end <= end) {
      seq.chainNode = id;
      seq.chainEnd = n->end;
      return;
    }
    id = n->parent;
  }
  seq.chainNode = -1;
  seq.chainEnd = 0;
}

/// Publishes the state captured in snapshot slot `slot` (or none: -1) at
/// `end` on the path of `seq`: every block up to `end` gets a node (the
/// missing ones without a state), the last one the state. A node that
/// exists keeps its state; the new copy is then returned to the pool.
static void publish(k3rt_session *s, Sequence &seq, int64_t end, int32_t slot) {
  int64_t I = s->snapshotInterval;
  int64_t parent = -1, at = 0;
  uint64_t hash = kChainSeed;
  if (CacheNode *hint = node(s, seq.chainNode)) {
    if (hint->end <= end) {
      parent = seq.chainNode;
      at = hint->end;
      hash = hint->hash;
    }
  }
  int64_t pagesPerBlock = s->pageSize ? I / s->pageSize : 0;
  for (; at < end; at += I) {
    const int32_t *block = seq.tokens.data() + at;
    hash = chainHash(hash, block, I);
    int64_t id = findChild(s, parent, hash, block);
    if (id < 0) {
      id = s->nextNodeId++;
      CacheNode n;
      n.parent = parent;
      n.hash = hash;
      n.end = at + I;
      n.tokens.assign(block, block + I);
      if (s->pageSize) {
        size_t first = size_t(at / s->pageSize);
        n.pages.assign(seq.pages.begin() + long(first),
                       seq.pages.begin() + long(first) + long(pagesPerBlock));
        for (int32_t page : n.pages)
          ++s->pageRefs[size_t(page)];
      }
      if (CacheNode *p = node(s, parent))
        ++p->children;
      s->nodes.emplace(id, std::move(n));
      s->nodesByHash.emplace(hash, id);
    }
    parent = id;
  }
  CacheNode *last = node(s, parent);
  if (slot >= 0) {
    if (last->slot < 0)
      last->slot = slot;
    else
      s->freeSnapshotSlots.push_back(slot);
  }
  seq.chainNode = parent;
  seq.chainEnd = end;
  touch(s, parent);
  // Keep the invariant (every leaf holds a state) if nothing was stored.
  if (last->slot < 0 && last->children == 0) {
    trimHint(s, seq, end - I);
    removeNode(s, parent);
    trimHint(s, seq, end - I);
  }
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

#define OPTION(opts, field, fallback)                                          \
  ((opts)->struct_size >=                                                      \
           offsetof(k3rt_session_options, field) + sizeof((opts)->field)       \
       ? (opts)->field                                                         \
       : (fallback))

k3rt_status *k3rt::createSession(k3rt_library *library, k3rt_weights *weights,
                                 const k3rt_session_options *options,
                                 k3rt_session **out) {
  if (!library || !weights || !options || !out)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_session_create: library, weights, options and "
                      "out must not be NULL");
  *out = nullptr;
  if (options->struct_size < offsetof(k3rt_session_options, max_sequences) +
                                 sizeof(options->max_sequences))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_session_options.struct_size is %zu; set it to "
                      "sizeof(k3rt_session_options)",
                      options->struct_size);
  if (weights->library != library)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "the weights were loaded for another library (%s)",
                      weights->library->path.c_str());
  const Manifest &m = library->manifest;
  uint64_t budget = OPTION(options, state_budget_bytes, 0);
  int64_t maxSequences = OPTION(options, max_sequences, 0);
  int64_t maxContext = OPTION(options, max_context, 0);
  int64_t numPages = OPTION(options, num_pages, 0);
  bool checkLogits = OPTION(options, check_logits, 0) != 0;
  int64_t interval = OPTION(options, snapshot_interval, 0);
  int64_t snapshotSlots = OPTION(options, snapshot_slots, 0);
  int64_t maxVerify = OPTION(options, max_verify_tokens, 0);
  int64_t maxStepTokens = OPTION(options, max_step_tokens, 0);
  int64_t maxStepEntries = OPTION(options, max_step_entries, 0);
  void *stream = OPTION(options, cuda_stream, nullptr);
  if (maxSequences <= 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "max_sequences must be positive, got %lld",
                      (long long)maxSequences);
  if (maxContext < 0 || numPages < 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "max_context and num_pages must not be negative");
  if (budget == 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "state_budget_bytes is 0; give the bytes the session "
                      "may use for sequence state");
  if (maxStepTokens < 0 || maxStepEntries < 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "max_step_tokens and max_step_entries must not be "
                      "negative");
  if (stream && !m.gpu)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "cuda_stream is set, but %s holds host code (targets "
                      "[%s])",
                      library->path.c_str(), m.targetList.c_str());
  if (interval < 0 || snapshotSlots < 0 || maxVerify < 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "snapshot_interval, snapshot_slots and "
                      "max_verify_tokens must not be negative");
  if (snapshotSlots > std::numeric_limits<int32_t>::max())
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "snapshot_slots %lld exceeds the i32 slot index",
                      (long long)snapshotSlots);
  if (interval) {
    if (m.pageSize && interval % m.pageSize != 0)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "snapshot_interval %lld is not a multiple of the MLA "
                        "page size %lld (a snapshot owns whole pages)",
                        (long long)interval, (long long)m.pageSize);
    if (m.kdaChunkSize && interval % m.kdaChunkSize != 0)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "snapshot_interval %lld is not a multiple of the KDA "
                        "chunk size %lld",
                        (long long)interval, (long long)m.kdaChunkSize);
    if (snapshotSlots == 0)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "snapshot_interval %lld needs snapshot_slots > 0 to "
                        "hold the snapshots",
                        (long long)interval);
  }
  if (maxVerify > snapshotSlots)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "max_verify_tokens %lld exceeds snapshot_slots %lld (a "
                      "verify entry keeps one checkpoint per token)",
                      (long long)maxVerify, (long long)snapshotSlots);
  maxContext = maxContext ? std::min(maxContext, m.maxContext) : m.maxContext;

  // One budget; each pool in its own unit (RUNTIME_NOTES §1.4).
  uint64_t slotTotal, seqTotal, snapTotal;
  if (mulOverflow(uint64_t(maxSequences), m.slotBytes, seqTotal) ||
      mulOverflow(uint64_t(snapshotSlots), m.slotBytes, snapTotal) ||
      __builtin_add_overflow(seqTotal, snapTotal, &slotTotal) ||
      slotTotal > budget)
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "%lld sequence slots and %lld snapshot slots of %llu "
                      "bytes do not fit in the state budget of %llu bytes",
                      (long long)maxSequences, (long long)snapshotSlots,
                      (unsigned long long)m.slotBytes,
                      (unsigned long long)budget);
  if (m.pagedGroup >= 0) {
    uint64_t fit = (budget - slotTotal) / m.pageBytes;
    if (numPages == 0)
      numPages = int64_t(std::min<uint64_t>(
          fit, uint64_t(std::numeric_limits<int32_t>::max())));
    else if (uint64_t(numPages) > fit)
      return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                        "%lld pages of %llu bytes, %lld sequence slots and "
                        "%lld snapshot slots do not fit in the state budget "
                        "of %llu bytes",
                        (long long)numPages, (unsigned long long)m.pageBytes,
                        (long long)maxSequences, (long long)snapshotSlots,
                        (unsigned long long)budget);
    if (numPages < 1)
      return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                        "the state budget of %llu bytes leaves no room for a "
                        "single %llu-byte page after %lld sequence slots and "
                        "%lld snapshot slots",
                        (unsigned long long)budget,
                        (unsigned long long)m.pageBytes,
                        (long long)maxSequences, (long long)snapshotSlots);
    if (numPages > std::numeric_limits<int32_t>::max())
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "num_pages %lld exceeds the i32 page index",
                        (long long)numPages);
  } else {
    numPages = 0;
  }

  std::unique_ptr<k3rt_session> s(new (std::nothrow) k3rt_session);
  if (!s)
    return makeStatus(K3RT_RESOURCE_EXHAUSTED, "out of host memory");
  s->manifest = &m;
  s->maxSequences = maxSequences;
  s->maxContext = maxContext;
  s->pageSize = m.pageSize;
  s->numPages = numPages;
  s->checkLogits = checkLogits;
  s->snapshotInterval = interval;
  s->numSnapshotSlots = snapshotSlots;
  s->maxVerifyTokens = maxVerify;
  s->maxStepTokens = maxStepTokens;
  s->maxStepEntries = maxStepEntries ? maxStepEntries : maxSequences;
  if (const char *v = std::getenv("K3RT_SEPARATE_DECODE"))
    s->batchDecode = std::string(v) != "1";
  // The session's device memory and first stream setting are GPU work
  // (Device.h, lockGpu).
  std::unique_lock<std::recursive_mutex> gpu;
  if (m.gpu)
    gpu = lockGpu();
  s->gpu = m.gpu;
  s->stream = stream;
  s->device = m.gpu ? cudaDeviceDescription() : "host";
  if (s->gpu)
    cudaSetStream(stream);
  Memory::Place place = s->gpu ? Memory::Place::Device : Memory::Place::Host;
  K3RT_RETURN_IF_ERROR(
      Memory::allocate(seqTotal, "sequence slots", place, s->slots));
  K3RT_RETURN_IF_ERROR(Memory::allocate(snapTotal, "snapshot slots", place,
                                        s->snapshotSlots));
  s->pools.resize(m.pagedLayers.size());
  for (size_t p = 0; p < s->pools.size(); ++p)
    K3RT_RETURN_IF_ERROR(
        Memory::allocate(uint64_t(numPages) * m.pageBytesPerLayer,
                         "an MLA page pool", place, s->pools[p]));
  for (int64_t i = maxSequences; i-- > 0;)
    s->freeSlots.push_back(int32_t(i));
  for (int64_t i = snapshotSlots; i-- > 0;)
    s->freeSnapshotSlots.push_back(int32_t(i));
  for (int64_t i = numPages; i-- > 0;)
    s->freePages.push_back(int32_t(i));
  s->pageRefs.assign(size_t(numPages), 0);
  s->removed.assign(64, std::numeric_limits<int64_t>::min());

  // Descriptors: weights and pools are fixed; the rest is set per call.
  s->descs.assign(m.args.size(), MemRefDesc{});
  s->args.resize(m.args.size());
  s->poolOf.assign(m.args.size(), -1);
  // A step then only patches pointers and run-time sizes.
  size_t pool = 0;
  for (size_t a = 0; a < m.args.size(); ++a) {
    const AbiArg &arg = m.args[a];
    s->args[a] = &s->descs[a];
    std::vector<int64_t> shape = arg.shape;
    for (int64_t &d : shape)
      d = std::max<int64_t>(d, 1);
    void *data = nullptr;
    if (arg.role == ArgRole::Weight) {
      data = const_cast<void *>(weights->argData[a]);
    } else if (arg.role == ArgRole::SlotPool) {
      // The states of this kind and layer in every sequence slot: slot k's
      // at slots + k * slotBytes + slotOffset (docs/ABI.md).
      shape[0] = maxSequences;
      setDesc(s->descs[a], s->slots.data(), shape);
      uint64_t elem = dtypeBits(arg.dtype) / 8;
      s->descs[a].offset = int64_t(arg.slotOffset / elem);
      s->descs[a].dims[shape.size()] = int64_t(m.slotBytes / elem);
      continue;
    } else if (arg.role == ArgRole::PagePool) {
      s->poolOf[a] = int64_t(pool);
      shape[0] = numPages;
      data = s->pools[pool].data();
      ++pool;
    }
    setDesc(s->descs[a], data, shape);
  }

  retain(library);
  retain(weights);
  s->library = library;
  s->weights = weights;
  *out = s.release();
  return nullptr;
}

void k3rt::destroySession(k3rt_session *session) {
  if (!session)
    return;
  k3rt_library *library = session->library;
  k3rt_weights *weights = session->weights;
  {
    std::unique_lock<std::recursive_mutex> gpu;
    if (session->gpu)
      gpu = lockGpu();
    delete session;
  }
  release(weights);
  release(library);
}

k3rt_status *k3rt::sessionInfo(k3rt_session *s, k3rt_session_info *info) {
  k3rt_session_info full{};
  full.struct_size = sizeof(full);
  full.max_sequences = s->maxSequences;
  full.max_context = s->maxContext;
  full.page_size = s->pageSize;
  full.num_pages = s->numPages;
  full.free_pages = int64_t(s->freePages.size());
  full.free_slots = int64_t(s->freeSlots.size());
  full.num_sequences = int64_t(s->sequences.size());
  uint64_t bytes = s->slots.size() + s->snapshotSlots.size();
  for (const Memory &b : s->pools)
    bytes += b.size();
  full.state_bytes = bytes;
  full.snapshot_interval = s->snapshotInterval;
  full.snapshot_slots = s->numSnapshotSlots;
  full.free_snapshot_slots = int64_t(s->freeSnapshotSlots.size());
  full.cached_snapshots = cachedStates(s);
  full.cached_blocks = int64_t(s->nodes.size());
  full.cached_pages = cacheOnlyPages(s);
  int64_t checkpoints = 0;
  for (const auto &entry : s->sequences)
    checkpoints += int64_t(entry.second.checkpoints.size());
  full.checkpoints = checkpoints;
  full.max_verify_tokens = s->maxVerifyTokens;
  full.max_step_tokens = s->maxStepTokens;
  full.max_step_entries = s->maxStepEntries;
  full.device = s->device.c_str();
  if (!copyOut(full, info))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_session_get_info: info must be non-NULL with "
                      "struct_size = sizeof(k3rt_session_info)");
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Sequence operations
//===----------------------------------------------------------------------===//

static k3rt_status *noSlot(const k3rt_session *s, const char *what,
                           int64_t id) {
  return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                    "%s: no free sequence slot for sequence %lld (all %lld "
                    "are in use; remove a sequence or create the session "
                    "with a larger max_sequences)",
                    what, (long long)id, (long long)s->maxSequences);
}

k3rt_status *k3rt::addSequence(k3rt_session *s, int64_t id) {
  if (s->sequences.count(id))
    return makeStatus(K3RT_ALREADY_EXISTS, "add: sequence %lld already exists",
                      (long long)id);
  if (s->freeSlots.empty())
    return noSlot(s, "add", id);
  Sequence seq;
  seq.slot = takeSlot(s);
  // Zero on hand-out (vllm-project/vllm#56524: stale state in reused slots).
  zeroState(s, slotData(s, seq.slot));
  s->sequences.emplace(id, std::move(seq));
  forgetRemoved(s, id);
  return nullptr;
}

static k3rt_status *checkTokens(const k3rt_session *s, const char *what,
                                const int32_t *tokens, int64_t n) {
  if (n < 0)
    return makeStatus(K3RT_INVALID_ARGUMENT, "%s: n_tokens is %lld", what,
                      (long long)n);
  if (n > 0 && !tokens)
    return makeStatus(K3RT_INVALID_ARGUMENT, "%s: tokens is NULL", what);
  for (int64_t t = 0; t < n; ++t)
    if (tokens[t] < 0 || int64_t(tokens[t]) >= s->manifest->vocabSize)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "%s: token %lld is %d, outside the vocabulary [0, "
                        "%lld)",
                        what, (long long)t, tokens[t],
                        (long long)s->manifest->vocabSize);
  return nullptr;
}

/// The deepest node with a state on the path of `tokens[0 .. n)`, and the
/// path up to it.
static int64_t deepestState(k3rt_session *s, const int32_t *tokens, int64_t n,
                            std::vector<int64_t> &path) {
  path = walkPath(s, tokens, std::min(n, s->maxContext));
  while (!path.empty() && node(s, path.back())->slot < 0)
    path.pop_back();
  return path.empty() ? -1 : path.back();
}

k3rt_status *k3rt::addWithPrefix(k3rt_session *s, int64_t id,
                                 const int32_t *tokens, int64_t n,
                                 int64_t *reused) {
  if (reused)
    *reused = 0;
  if (s->sequences.count(id))
    return makeStatus(K3RT_ALREADY_EXISTS,
                      "add_with_prefix: sequence %lld already exists",
                      (long long)id);
  K3RT_RETURN_IF_ERROR(checkTokens(s, "add_with_prefix", tokens, n));
  if (s->freeSlots.empty())
    return noSlot(s, "add_with_prefix", id);
  std::vector<int64_t> path;
  int64_t hit = deepestState(s, tokens, n, path);
  Sequence seq;
  seq.slot = takeSlot(s);
  if (hit < 0) {
    zeroState(s, slotData(s, seq.slot));
  } else {
    const CacheNode &last = *node(s, hit);
    copyState(s, slotData(s, seq.slot), snapshotData(s, last.slot));
    for (int64_t nodeId : path)
      for (int32_t page : node(s, nodeId)->pages) {
        ++s->pageRefs[size_t(page)];
        seq.pages.push_back(page);
      }
    seq.length = last.end;
    seq.tokens.assign(tokens, tokens + last.end);
    seq.chainNode = hit;
    seq.chainEnd = last.end;
    seq.reused = last.end;
    touch(s, hit);
  }
  if (reused)
    *reused = seq.length;
  s->sequences.emplace(id, std::move(seq));
  forgetRemoved(s, id);
  return nullptr;
}

k3rt_status *k3rt::matchPrefix(k3rt_session *s, const int32_t *tokens,
                               int64_t n, int64_t *reusable) {
  if (!reusable)
    return makeStatus(K3RT_INVALID_ARGUMENT, "match_prefix: out is NULL");
  *reusable = 0;
  K3RT_RETURN_IF_ERROR(checkTokens(s, "match_prefix", tokens, n));
  std::vector<int64_t> path;
  int64_t hit = deepestState(s, tokens, n, path);
  if (hit >= 0)
    *reusable = node(s, hit)->end;
  return nullptr;
}

k3rt_status *k3rt::dropSnapshots(k3rt_session *s) {
  while (!s->nodes.empty()) {
    // Leaves first; removing one may expose its parent.
    std::vector<int64_t> leaves;
    for (const auto &[id, n] : s->nodes)
      if (n.children == 0)
        leaves.push_back(id);
    for (int64_t id : leaves) {
      CacheNode *n = node(s, id);
      if (!n)
        continue;
      if (n->slot >= 0) {
        s->freeSnapshotSlots.push_back(n->slot);
        n->slot = -1;
      }
      removeNode(s, id);
    }
  }
  for (auto &entry : s->sequences) {
    entry.second.chainNode = -1;
    entry.second.chainEnd = 0;
  }
  return nullptr;
}

k3rt_status *k3rt::removeSequence(k3rt_session *s, int64_t id) {
  auto it = s->sequences.find(id);
  if (it == s->sequences.end())
    return unknownSequence(s, id, "remove");
  for (int32_t page : it->second.pages)
    dropPage(s, page);
  freeCheckpoints(s, it->second);
  s->freeSlots.push_back(it->second.slot);
  s->sequences.erase(it);
  s->removed[s->removedNext] = id;
  s->removedNext = (s->removedNext + 1) % s->removed.size();
  return nullptr;
}

k3rt_status *k3rt::forkSequence(k3rt_session *s, int64_t parent,
                                int64_t child) {
  auto it = s->sequences.find(parent);
  if (it == s->sequences.end())
    return unknownSequence(s, parent, "fork");
  return forkAt(s, parent, child, it->second.length);
}

/// Where the KDA state of `seq` at `target` can be restored from.
namespace {
struct StateSource {
  enum Kind { None, Live, Zero, Checkpoint, Snapshot } kind = None;
  const uint8_t *data = nullptr;
};
} // namespace

static StateSource findState(k3rt_session *s, Sequence &seq, int64_t target) {
  StateSource src;
  if (target == seq.length) {
    src.kind = StateSource::Live;
    src.data = slotData(s, seq.slot);
    return src;
  }
  for (const Checkpoint &c : seq.checkpoints)
    if (c.position == target) {
      src.kind = StateSource::Checkpoint;
      src.data = snapshotData(s, c.slot);
      return src;
    }
  if (target == 0 || s->manifest->slotBytes == 0) {
    src.kind = StateSource::Zero;
    return src;
  }
  int64_t id = nodeAt(s, seq, target);
  if (CacheNode *n = node(s, id)) {
    if (n->slot >= 0) {
      src.kind = StateSource::Snapshot;
      src.data = snapshotData(s, n->slot);
      touch(s, id);
    }
  }
  return src;
}

/// "verify checkpoints at 17..20; cached snapshots at 8, 16" for messages.
static std::string restorable(k3rt_session *s, Sequence &seq) {
  std::string out;
  if (!seq.checkpoints.empty())
    out += format("verify checkpoints at %lld..%lld",
                  (long long)seq.checkpoints.front().position,
                  (long long)seq.checkpoints.back().position);
  std::vector<std::string> snaps;
  for (int64_t id : walkPath(s, seq.tokens.data(), seq.length))
    if (node(s, id)->slot >= 0)
      snaps.push_back(std::to_string(node(s, id)->end));
  if (!out.empty())
    out += "; ";
  out += snaps.empty() ? "no cached snapshots on its path"
                       : "cached snapshots on its path at " + joinCapped(snaps);
  if (s->snapshotInterval == 0)
    out += " (snapshot_interval is 0)";
  return out + "; and position 0";
}

static k3rt_status *noState(k3rt_session *s, Sequence &seq, const char *what,
                            int64_t id, int64_t target) {
  return makeStatus(K3RT_FAILED_PRECONDITION,
                    "%s: sequence %lld (length %lld): no exact KDA state at "
                    "position %lld; it has %s",
                    what, (long long)id, (long long)seq.length,
                    (long long)target, restorable(s, seq).c_str());
}

k3rt_status *k3rt::forkAt(k3rt_session *s, int64_t parent, int64_t child,
                          int64_t position) {
  auto it = s->sequences.find(parent);
  if (it == s->sequences.end())
    return unknownSequence(s, parent, "fork");
  if (s->sequences.count(child))
    return makeStatus(K3RT_ALREADY_EXISTS,
                      "fork: child sequence %lld already exists",
                      (long long)child);
  Sequence &from = it->second;
  if (position < 0 || position > from.length)
    return makeStatus(K3RT_OUT_OF_RANGE,
                      "fork: position %lld is outside [0, %lld] (the length "
                      "of sequence %lld)",
                      (long long)position, (long long)from.length,
                      (long long)parent);
  StateSource src = findState(s, from, position);
  if (src.kind == StateSource::None)
    return noState(s, from, "fork", parent, position);
  if (s->freeSlots.empty())
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "fork: no free sequence slot for sequence %lld (all "
                      "%lld are in use)",
                      (long long)child, (long long)s->maxSequences);
  Sequence seq;
  seq.slot = takeSlot(s);
  seq.length = position;
  if (s->pageSize)
    seq.pages.assign(from.pages.begin(),
                     from.pages.begin() + long(ceilDiv(position, s->pageSize)));
  for (int32_t page : seq.pages)
    ++s->pageRefs[size_t(page)];
  // Inside a page the parent wrote past `position`: its rows are the
  // parent's (the child copies the page on its first write, or zeroes them
  // if the parent has let go of it by then).
  seq.staleTail = s->pageSize && position % s->pageSize != 0 &&
                  (position < from.length || from.staleTail);
  seq.tokens.assign(from.tokens.begin(), from.tokens.begin() + long(position));
  if (src.kind == StateSource::Zero)
    zeroState(s, slotData(s, seq.slot));
  else
    copyState(s, slotData(s, seq.slot), src.data);
  seq.chainNode = from.chainNode;
  seq.chainEnd = from.chainEnd;
  trimHint(s, seq, position);
  s->sequences.emplace(child, std::move(seq));
  forgetRemoved(s, child);
  return nullptr;
}

k3rt_status *k3rt::rollback(k3rt_session *s, int64_t id, int64_t n) {
  auto it = s->sequences.find(id);
  if (it == s->sequences.end())
    return unknownSequence(s, id, "rollback");
  Sequence &seq = it->second;
  if (n < 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "rollback: sequence %lld: n_tokens is %lld; give the "
                      "number of tokens to pop",
                      (long long)id, (long long)n);
  if (n > seq.length)
    return makeStatus(K3RT_OUT_OF_RANGE,
                      "rollback: sequence %lld has %lld tokens, cannot pop "
                      "%lld",
                      (long long)id, (long long)seq.length, (long long)n);
  if (n == 0)
    return nullptr;
  int64_t target = seq.length - n;
  StateSource src = findState(s, seq, target);
  if (src.kind == StateSource::None)
    return noState(s, seq, "rollback", id, target);
  if (src.kind == StateSource::Zero)
    zeroState(s, slotData(s, seq.slot));
  else
    copyState(s, slotData(s, seq.slot), src.data);
  // MLA: drop the pages past the end; the rows past it in a page only this
  // sequence holds are zeroed (a shared one is copied on the next write).
  if (s->pageSize) {
    size_t keep = size_t(ceilDiv(target, s->pageSize));
    for (size_t k = keep; k < seq.pages.size(); ++k)
      dropPage(s, seq.pages[k]);
    seq.pages.resize(keep);
    // In a shared page they stay for the other holders: the next write
    // copies the page, or zeroes them if the sequence holds it alone by
    // then (staleTail).
    int64_t used = target % s->pageSize;
    seq.staleTail = false;
    if (used && s->pageRefs[size_t(seq.pages.back())] == 1)
      zeroRows(s, seq.pages.back(), used);
    else if (used)
      seq.staleTail = true;
  }
  seq.length = target;
  seq.tokens.resize(size_t(target));
  std::vector<Checkpoint> kept;
  for (const Checkpoint &c : seq.checkpoints) {
    if (c.position <= target)
      kept.push_back(c);
    else
      s->freeSnapshotSlots.push_back(c.slot);
  }
  seq.checkpoints = std::move(kept);
  trimHint(s, seq, target);
  return nullptr;
}

k3rt_status *k3rt::sequenceLength(k3rt_session *s, int64_t id, int64_t *out) {
  if (!out)
    return makeStatus(K3RT_INVALID_ARGUMENT, "length: out is NULL");
  auto it = s->sequences.find(id);
  if (it == s->sequences.end())
    return unknownSequence(s, id, "length");
  *out = it->second.length;
  return nullptr;
}

k3rt_status *k3rt::sequenceInfo(k3rt_session *s, int64_t id,
                                k3rt_sequence_info *info) {
  auto it = s->sequences.find(id);
  if (it == s->sequences.end())
    return unknownSequence(s, id, "sequence_get_info");
  Sequence &seq = it->second;
  k3rt_sequence_info full{};
  full.struct_size = sizeof(full);
  full.length = seq.length;
  full.num_pages = int64_t(seq.pages.size());
  if (!seq.checkpoints.empty()) {
    full.checkpoint_first = seq.checkpoints.front().position;
    full.checkpoint_count = int64_t(seq.checkpoints.size());
  }
  full.reused_tokens = seq.reused;
  for (int64_t nodeId : walkPath(s, seq.tokens.data(), seq.length))
    if (node(s, nodeId)->slot >= 0)
      full.snapshot_position = node(s, nodeId)->end;
  if (!copyOut(full, info))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_sequence_get_info: info must be non-NULL with "
                      "struct_size = sizeof(k3rt_sequence_info)");
  return nullptr;
}

k3rt_status *k3rt::readState(k3rt_session *s, int64_t id, const char *group,
                             int64_t layer, float *out, size_t outCount,
                             k3rt_state_shape *shape) {
  if (!group)
    return makeStatus(K3RT_INVALID_ARGUMENT, "read_state: group is NULL");
  if (shape && shape->struct_size < sizeof(size_t))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "read_state: shape->struct_size must be "
                      "sizeof(k3rt_state_shape)");
  auto it = s->sequences.find(id);
  if (it == s->sequences.end())
    return unknownSequence(s, id, "read_state");
  const Sequence &seq = it->second;
  const Manifest &m = *s->manifest;
  int64_t g = m.findGroup(group);
  if (g < 0) {
    std::vector<std::string> kinds;
    for (const StateGroup &sg : m.groups)
      kinds.push_back(sg.kind);
    return makeStatus(K3RT_NOT_FOUND,
                      "read_state: no state group '%s' (the model has %s)",
                      group, joinCapped(kinds).c_str());
  }
  const StateGroup &sg = m.groups[size_t(g)];
  // The argument holding this group and layer.
  int64_t argIndex = -1;
  for (size_t a = 0; a < m.args.size(); ++a) {
    const AbiArg &arg = m.args[a];
    if (arg.ref == g && arg.layer == layer &&
        (arg.role == ArgRole::SlotPool || arg.role == ArgRole::PagePool)) {
      argIndex = int64_t(a);
      break;
    }
  }
  if (argIndex < 0) {
    std::vector<std::string> layers;
    for (int64_t l : sg.layers)
      layers.push_back(std::to_string(l));
    return makeStatus(K3RT_NOT_FOUND,
                      "read_state: state group '%s' has no layer %lld (it has "
                      "layers %s)",
                      group, (long long)layer, joinCapped(layers).c_str());
  }
  const AbiArg &arg = m.args[size_t(argIndex)];
  std::vector<int64_t> dims;
  if (arg.role == ArgRole::SlotPool)
    dims = sg.shape;
  else
    dims = {seq.length, sg.shape[0]};
  int64_t count = 1;
  for (int64_t d : dims)
    count *= d;
  if (shape) {
    k3rt_state_shape full{};
    full.struct_size = sizeof(full);
    full.rank = int32_t(dims.size());
    for (size_t i = 0; i < 4; ++i)
      full.dims[i] = i < dims.size() ? dims[i] : 0;
    full.count = count;
    copyOut(full, shape);
  }
  if (!out)
    return nullptr;
  if (outCount < size_t(count))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "read_state: the output holds %zu floats, the state "
                      "has %lld",
                      outCount, (long long)count);
  // GPU: through a host copy of the bytes.
  std::vector<uint8_t> host;
  auto hostView = [&](const uint8_t *src, uint64_t bytes) -> const uint8_t * {
    if (!s->gpu)
      return src;
    host.resize(size_t(bytes));
    copyBytes(true, host.data(), src, bytes);
    return host.data();
  };
  if (arg.role == ArgRole::SlotPool) {
    const uint8_t *src =
        hostView(slotData(s, seq.slot) + arg.slotOffset,
                 uint64_t(count) * dtypeBits(arg.dtype) / 8);
    toFloat(src, arg.dtype, size_t(count), out);
    return nullptr;
  }
  // Paged: the first `length` tokens, gathered from the pages in order.
  size_t pool = size_t(s->poolOf[size_t(argIndex)]);
  int64_t width = sg.shape[0];
  uint64_t rowBytes = uint64_t(width) * dtypeBits(sg.dtype) / 8;
  for (int64_t q = 0; q < seq.length; q += s->pageSize) {
    int32_t page = seq.pages[size_t(q / s->pageSize)];
    int64_t rows = std::min(s->pageSize, seq.length - q);
    const uint8_t *src = hostView(pageData(s, pool, page), uint64_t(rows) * rowBytes);
    for (int64_t r = 0; r < rows; ++r)
      toFloat(src + uint64_t(r) * rowBytes, sg.dtype, size_t(width),
              out + (q + r) * width);
  }
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Step
//===----------------------------------------------------------------------===//

/// The k3rt_logits_mode of an entry, or -1 for an unknown mode or flag.
static int logitsMode(int32_t logits) {
  int mode = logits & K3RT_LOGITS_MODE_MASK;
  int32_t flags = logits & ~int32_t(K3RT_LOGITS_MODE_MASK);
  if ((flags & ~int32_t(K3RT_STEP_VERIFY)) != 0 ||
      (mode != K3RT_LOGITS_NONE && mode != K3RT_LOGITS_LAST &&
       mode != K3RT_LOGITS_ALL))
    return -1;
  return mode;
}

static bool isVerify(const k3rt_step_entry &e) {
  return (e.logits & K3RT_STEP_VERIFY) != 0;
}

/// A decode entry: one token, no checkpoints; the step runs all of them as
/// one call.
static bool isDecode(const k3rt_session *s, const k3rt_step_entry &e) {
  return s->batchDecode && e.n_tokens == 1 && !isVerify(e);
}

size_t k3rt::logitsRows(const k3rt_step_entry *entries, size_t numEntries) {
  if (!entries)
    return 0;
  size_t rows = 0;
  for (size_t i = 0; i < numEntries; ++i) {
    if (entries[i].n_tokens < 0)
      return 0;
    switch (logitsMode(entries[i].logits)) {
    case K3RT_LOGITS_NONE:
      break;
    case K3RT_LOGITS_LAST:
      rows += 1;
      break;
    case K3RT_LOGITS_ALL:
      rows += size_t(entries[i].n_tokens);
      break;
    default:
      return 0;
    }
  }
  return rows;
}

namespace {
/// What validation found that the run needs.
/// Pages a call's page table can hold: the context window's.
static int64_t stagePages(const k3rt_session *s) {
  return s->pageSize ? ceilDiv(s->maxContext, s->pageSize) : 0;
}

/// Bytes of the GPU stage for calls of up to `tokens` tokens: a length, a
/// slot and a page table per sequence of the call (at most `tokens`), then
/// the tokens.
static uint64_t stageBytes(const k3rt_session *s, int64_t tokens) {
  return uint64_t(tokens) *
         (sizeof(int64_t) + uint64_t(stagePages(s) + 2) * sizeof(int32_t));
}

struct StepPlan {
  uint64_t rows = 0;
  int64_t maxTokens = 0;
  int64_t pagesNeeded = 0;
};
} // namespace

/// Checks the whole batch; nothing is changed.
static k3rt_status *validateStep(k3rt_session *s,
                                 const k3rt_step_entry *entries, size_t n,
                                 size_t logitsCount, const float *logits,
                                 StepPlan &plan) {
  const Manifest &m = *s->manifest;
  if (!entries || n == 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "step: the batch is empty (no entries)");
  if (int64_t(n) > s->maxStepEntries)
    return makeStatus(K3RT_OUT_OF_RANGE,
                      "step: %zu entries; the session takes at most %lld per "
                      "step (max_step_entries)",
                      n, (long long)s->maxStepEntries);
  int64_t stepTokens = 0;
  std::unordered_map<int64_t, size_t> seen;
  seen.reserve(n);
  plan = StepPlan();
  int64_t verifySlots = 0, ownCheckpoints = 0, decodeEntries = 0;
  for (size_t i = 0; i < n; ++i) {
    const k3rt_step_entry &e = entries[i];
    long long id = (long long)e.seq_id;
    auto it = s->sequences.find(e.seq_id);
    if (it == s->sequences.end())
      return makeStatus(K3RT_NOT_FOUND,
                        "step entry %zu: sequence %lld does not exist%s", i, id,
                        removedHint(s, e.seq_id).c_str());
    auto [prev, fresh] = seen.emplace(e.seq_id, i);
    if (!fresh)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "step entries %zu and %zu both name sequence %lld; a "
                        "sequence may appear once per step",
                        prev->second, i, id);
    if (e.n_tokens <= 0)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "step entry %zu (sequence %lld): n_tokens is %lld; an "
                        "entry needs at least one token",
                        i, id, (long long)e.n_tokens);
    if (s->maxStepTokens &&
        e.n_tokens > s->maxStepTokens - stepTokens)
      return makeStatus(K3RT_OUT_OF_RANGE,
                        "step entry %zu (sequence %lld): %lld tokens bring "
                        "the step past the session's max_step_tokens of %lld "
                        "(split the prefill into chunks)",
                        i, id, (long long)e.n_tokens,
                        (long long)s->maxStepTokens);
    stepTokens += e.n_tokens;
    if (!e.tokens)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "step entry %zu (sequence %lld): tokens is NULL", i,
                        id);
    int mode = logitsMode(e.logits);
    if (mode < 0)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "step entry %zu (sequence %lld): unknown logits mode "
                        "%d",
                        i, id, int(e.logits));
    int64_t length = it->second.length;
    if (e.n_tokens > s->maxContext - length)
      return makeStatus(K3RT_OUT_OF_RANGE,
                        "step entry %zu (sequence %lld): %lld tokens after "
                        "the %lld already processed exceed the context "
                        "window of %lld",
                        i, id, (long long)e.n_tokens, (long long)length,
                        (long long)s->maxContext);
    if (isVerify(e)) {
      if (s->maxVerifyTokens == 0)
        return makeStatus(K3RT_FAILED_PRECONDITION,
                          "step entry %zu (sequence %lld): a verify entry, "
                          "but the session was created with "
                          "max_verify_tokens 0",
                          i, id);
      if (e.n_tokens > s->maxVerifyTokens)
        return makeStatus(K3RT_OUT_OF_RANGE,
                          "step entry %zu (sequence %lld): a verify entry of "
                          "%lld tokens; the session keeps checkpoints for at "
                          "most %lld (max_verify_tokens)",
                          i, id, (long long)e.n_tokens,
                          (long long)s->maxVerifyTokens);
      verifySlots += e.n_tokens;
    }
    ownCheckpoints += int64_t(it->second.checkpoints.size());
    // Checked on the host: an out-of-range embedding gather on a device is a
    // sticky illegal-address error (RUNTIME_NOTES §3, 22).
    for (int64_t t = 0; t < e.n_tokens; ++t) {
      int32_t tok = e.tokens[t];
      if (tok < 0 || int64_t(tok) >= m.vocabSize)
        return makeStatus(K3RT_INVALID_ARGUMENT,
                          "step entry %zu (sequence %lld): token %lld is %d, "
                          "outside the vocabulary [0, %lld)",
                          i, id, (long long)t, tok, (long long)m.vocabSize);
    }
    plan.rows += mode == K3RT_LOGITS_ALL    ? uint64_t(e.n_tokens)
                 : mode == K3RT_LOGITS_LAST ? 1
                                            : 0;
    plan.maxTokens = std::max(plan.maxTokens, e.n_tokens);
    decodeEntries += isDecode(s, e);
  }
  // The decode entries run as one call.
  plan.maxTokens = std::max(plan.maxTokens, decodeEntries);

  // Checkpoints: the batch's sequences give theirs back first, and cached
  // states are evicted for them.
  if (verifySlots) {
    int64_t free = int64_t(s->freeSnapshotSlots.size());
    int64_t cached = cachedStates(s);
    if (verifySlots > free + cached + ownCheckpoints)
      return makeStatus(
          K3RT_RESOURCE_EXHAUSTED,
          "step: the verify entries need %lld snapshot slots for their "
          "checkpoints; %lld of %lld are free, %lld hold cached snapshots "
          "and %lld checkpoints of sequences in this step (the rest hold "
          "checkpoints of other sequences)",
          (long long)verifySlots, (long long)free,
          (long long)s->numSnapshotSlots, (long long)cached,
          (long long)ownCheckpoints);
  }

  // Pages for the whole batch, counting the copy of a shared partial page
  // exactly: an earlier entry's copy may leave a later entry sole owner.
  // Pages that only cached snapshots hold can be reclaimed.
  if (s->pageSize) {
    std::unordered_map<int32_t, int32_t> released;
    int64_t needed = 0;
    int64_t free = int64_t(s->freePages.size());
    int64_t reclaim = -1; // computed when needed
    for (size_t i = 0; i < n; ++i) {
      const k3rt_step_entry &e = entries[i];
      const Sequence &seq = s->sequences.find(e.seq_id)->second;
      int64_t fresh = ceilDiv(seq.length + e.n_tokens, s->pageSize) -
                      int64_t(seq.pages.size());
      int64_t copies = 0;
      if (seq.length % s->pageSize != 0) {
        int32_t page = seq.pages[size_t(seq.length / s->pageSize)];
        if (s->pageRefs[size_t(page)] - released[page] > 1) {
          copies = 1;
          ++released[page];
        }
      }
      needed += fresh + copies;
      if (needed > free && reclaim < 0)
        reclaim = cacheOnlyPages(s);
      if (needed > free + std::max<int64_t>(reclaim, 0))
        return makeStatus(
            K3RT_RESOURCE_EXHAUSTED,
            "step entry %zu (sequence %lld, length %lld, +%lld tokens): out "
            "of MLA pages: the batch needs %lld new pages up to this entry, "
            "%lld of %lld are free%s",
            i, (long long)e.seq_id, (long long)seq.length,
            (long long)e.n_tokens, (long long)needed, (long long)free,
            (long long)s->numPages,
            reclaim > 0 ? format(" and %lld more held only by cached "
                                 "snapshots",
                                 (long long)reclaim)
                              .c_str()
                        : "");
    }
    plan.pagesNeeded = needed;
  }

  uint64_t floats;
  if (mulOverflow(plan.rows, uint64_t(m.vocabSize), floats))
    return makeStatus(K3RT_INVALID_ARGUMENT, "step: logits size overflows");
  if (plan.rows && (!logits || logitsCount < floats))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "step: logits_out holds %zu floats; this step returns "
                      "%llu rows of %lld",
                      logits ? logitsCount : size_t(0),
                      (unsigned long long)plan.rows, (long long)m.vocabSize);

  // The scratch is the last thing that can fail; it is not state.
  uint64_t need =
      uint64_t(plan.maxTokens) * uint64_t(m.vocabSize) * sizeof(float);
  Memory::Place place = s->gpu ? Memory::Place::Device : Memory::Place::Host;
  if (s->scratch.size() < need) {
    Memory b;
    K3RT_RETURN_IF_ERROR(
        Memory::allocate(need, "the logits scratch", place, b));
    s->scratch = std::move(b);
  }
  // GPU: tokens, page table and length of one call, page-locked.
  uint64_t stage = stageBytes(s, plan.maxTokens);
  if (s->gpu && s->stage.size() < stage) {
    Memory b;
    K3RT_RETURN_IF_ERROR(Memory::allocate(
        stage, "the step's token buffer", Memory::Place::Pinned, b));
    s->stage = std::move(b);
  }
  uint64_t slotsBytes = uint64_t(plan.maxTokens) * sizeof(int32_t);
  if (s->gpu && s->deviceSlots.size() < slotsBytes) {
    Memory b;
    K3RT_RETURN_IF_ERROR(Memory::allocate(slotsBytes, "the step's slots",
                                          Memory::Place::Device, b));
    s->deviceSlots = std::move(b);
    s->deviceSlotsHeld.clear();
  }
  return nullptr;
}

/// Gives `seq` private pages for positions [length, length + n): copies a
/// shared partial page (its rows before `length`, in every pool; the rest
/// of the copy is zero), zeroes the rows past `length` of a partial page it
/// holds alone that may hold another holder's rows (Sequence::staleTail),
/// and appends zeroed pages.
static void preparePages(k3rt_session *s, Sequence &seq, int64_t n) {
  int64_t P = s->pageSize;
  if (seq.length % P != 0) {
    size_t k = size_t(seq.length / P);
    int32_t old = seq.pages[k];
    if (s->pageRefs[size_t(old)] == 1 && seq.staleTail) {
      // Shared when the sequence rolled back or forked into it, the other
      // holders (a fork, a cached snapshot, the parent) gone since.
      zeroRows(s, old, seq.length % P);
    } else if (s->pageRefs[size_t(old)] > 1) {
      int32_t page = s->freePages.back();
      s->freePages.pop_back();
      s->pageRefs[size_t(page)] = 1;
      uint64_t used = uint64_t(seq.length % P) * rowBytes(s);
      for (size_t p = 0; p < s->pools.size(); ++p) {
        copyBytes(s->gpu, pageData(s, p, page), pageData(s, p, old), used);
        zeroBytes(s->gpu, pageData(s, p, page) + used,
                  s->manifest->pageBytesPerLayer - used);
      }
      dropPage(s, old);
      seq.pages[k] = page;
    }
  }
  seq.staleTail = false;
  int64_t want = ceilDiv(seq.length + n, P);
  while (int64_t(seq.pages.size()) < want)
    seq.pages.push_back(takeZeroedPage(s));
}

/// One k3_forward call (docs/ABI.md) over `seqs`: one sequence and its next
/// T tokens (a segment), or T sequences and one token each (a decode
/// batch); pages prepared. The logits land in the scratch, a row per token.
static void forwardCall(k3rt_session *s, const std::vector<Sequence *> &seqs,
                        const int32_t *tokens, int64_t T) {
  const Manifest &m = *s->manifest;
  size_t R = seqs.size();
  int64_t each = R == 1 ? T : 1; // tokens per sequence
  // Page tables as rows of the longest one the call needs.
  int64_t n = 1;
  if (s->pageSize)
    for (const Sequence *seq : seqs)
      n = std::max(n, ceilDiv(seq->length + each, s->pageSize));
  int64_t *lengths;
  int32_t *slots, *tables;
  if (s->gpu) {
    // Page-locked, read by the kernels and the library's host code:
    // lengths, slots, page tables, tokens.
    lengths = reinterpret_cast<int64_t *>(s->stage.data());
    slots = reinterpret_cast<int32_t *>(lengths + R);
    tables = slots + R;
    int32_t *staged = tables + R * size_t(n);
    std::copy(tokens, tokens + T, staged);
    tokens = staged;
  } else {
    s->callLengths.resize(R);
    s->callSlots.resize(R);
    s->callTables.resize(R * size_t(n));
    lengths = s->callLengths.data();
    slots = s->callSlots.data();
    tables = s->callTables.data();
  }
  for (size_t r = 0; r < R; ++r) {
    const Sequence &seq = *seqs[r];
    lengths[r] = seq.length;
    slots[r] = seq.slot;
    int32_t *row = tables + r * size_t(n);
    std::fill(row, row + n, 0);
    std::copy(seq.pages.begin(),
              seq.pages.begin() + std::min<int64_t>(n, seq.pages.size()), row);
  }
  if (s->gpu) {
    // A synchronous copy: only when the slots differ from the last call's.
    if (!std::equal(slots, slots + R, s->deviceSlotsHeld.begin(),
                    s->deviceSlotsHeld.end())) {
      copyBytes(true, s->deviceSlots.data(), slots, R * sizeof(int32_t));
      s->deviceSlotsHeld.assign(slots, slots + R);
    }
    slots = reinterpret_cast<int32_t *>(s->deviceSlots.data());
  }
  float *scratch = reinterpret_cast<float *>(s->scratch.data());
  for (size_t a = 0; a < m.args.size(); ++a) {
    const AbiArg &arg = m.args[a];
    MemRefDesc &d = s->descs[a];
    switch (arg.role) {
    case ArgRole::Tokens: // [T], stride 1
      setData(d, const_cast<int32_t *>(tokens));
      d.dims[0] = T;
      break;
    case ArgRole::Slots: // [R], stride 1
      setData(d, slots);
      d.dims[0] = int64_t(R);
      break;
    case ArgRole::PageTable: // [R, n], strides [n, 1]
      setDesc(d, tables, {int64_t(R), n});
      break;
    case ArgRole::PageLength: // [R], stride 1
      setData(d, lengths);
      d.dims[0] = int64_t(R);
      break;
    case ArgRole::Logits: // [T, V], strides [V, 1]
      setData(d, scratch);
      d.dims[0] = T;
      break;
    case ArgRole::Weight:
    case ArgRole::SlotPool:
    case ArgRole::PagePool:
      break;
    }
  }
  s->library->forward(s->args.data());
  if (s->gpu)
    cudaWorkspaceReset(); // waits for the call's kernels
  for (Sequence *seq : seqs)
    seq->length += each;
}

k3rt_status *k3rt::step(k3rt_session *s, const k3rt_step_entry *entries,
                        size_t n, float *logits, size_t logitsCount) {
  StepPlan plan;
  K3RT_RETURN_IF_ERROR(
      validateStep(s, entries, n, logitsCount, logits, plan));

  // Validated: from here on nothing fails (check_logits reports at the end).
  // 1. The batch's sequences give back their checkpoints.
  for (size_t i = 0; i < n; ++i)
    freeCheckpoints(s, s->sequences.find(entries[i].seq_id)->second);
  // 2. Pages held only by cached snapshots, if the batch needs them.
  if (s->pageSize && plan.pagesNeeded > int64_t(s->freePages.size()))
    evictForPages(s, plan.pagesNeeded);
  // 3. Checkpoint slots for the verify entries, before any capture.
  std::vector<std::vector<int32_t>> reserved(n);
  for (size_t i = 0; i < n; ++i)
    if (isVerify(entries[i]))
      for (int64_t t = 0; t < entries[i].n_tokens; ++t)
        reserved[i].push_back(takeSnapshotSlot(s, /*stealPending=*/false));
  s->pending.clear();

  const Manifest &m = *s->manifest;
  int64_t V = m.vocabSize;
  int64_t I = s->snapshotInterval;
  float *scratch = reinterpret_cast<float *>(s->scratch.data());
  k3rt_status *firstBad = nullptr;
  // Each entry's rows in logits_out, in entry order.
  std::vector<float *> dst(n);
  float *next = logits;
  for (size_t i = 0; i < n; ++i) {
    dst[i] = next;
    int mode = logitsMode(entries[i].logits);
    next += (mode == K3RT_LOGITS_ALL    ? entries[i].n_tokens
             : mode == K3RT_LOGITS_LAST ? 1
                                        : 0) *
            V;
  }
  // After a call over positions [a, b) of entry i (which ends at `stop`):
  // a snapshot at a multiple of the interval, and the requested rows
  // (scratch rows from `row`).
  auto finish = [&](size_t i, Sequence &seq, int64_t a, int64_t b,
                    int64_t stop, int64_t row) {
    const k3rt_step_entry &e = entries[i];
    if (I && b % I == 0) {
      int32_t slot = takeSnapshotSlot(s, /*stealPending=*/true);
      if (slot >= 0) {
        copyState(s, snapshotData(s, slot), slotData(s, seq.slot));
        s->pending.push_back({e.seq_id, b, slot});
      }
    }
    int mode = logitsMode(e.logits);
    int64_t first = 0, count = 0;
    if (mode == K3RT_LOGITS_ALL) {
      count = b - a;
    } else if (mode == K3RT_LOGITS_LAST && b == stop) {
      first = b - a - 1;
      count = 1;
    }
    if (count == 0)
      return;
    copyBytes(s->gpu, dst[i], scratch + (row + first) * V,
              uint64_t(count * V) * sizeof(float));
    if (s->checkLogits && !firstBad) {
      for (int64_t k = 0; k < count * V && !firstBad; ++k)
        if (!std::isfinite(dst[i][k]))
          firstBad = makeStatus(
              K3RT_DATA_LOSS,
              "step entry %zu (sequence %lld): logit %lld of position %lld "
              "is %f (the step has run; its snapshots are discarded)",
              i, (long long)e.seq_id, (long long)(k % V),
              (long long)(a + first + k / V), double(dst[i][k]));
    }
    dst[i] += count * V;
  };

  // 1. The decode entries, one call for all of them.
  std::vector<Sequence *> batch;
  std::vector<size_t> batchEntries;
  std::vector<int32_t> batchTokens;
  for (size_t i = 0; i < n; ++i) {
    if (!isDecode(s, entries[i]))
      continue;
    Sequence &seq = s->sequences.find(entries[i].seq_id)->second;
    if (s->pageSize)
      preparePages(s, seq, 1);
    seq.tokens.push_back(entries[i].tokens[0]);
    batch.push_back(&seq);
    batchEntries.push_back(i);
    batchTokens.push_back(entries[i].tokens[0]);
  }
  if (!batch.empty()) {
    forwardCall(s, batch, batchTokens.data(), int64_t(batch.size()));
    for (size_t k = 0; k < batch.size(); ++k)
      finish(batchEntries[k], *batch[k], batch[k]->length - 1,
             batch[k]->length, batch[k]->length, int64_t(k));
  }

  // 2. The others, one call per segment.
  for (size_t i = 0; i < n; ++i) {
    const k3rt_step_entry &e = entries[i];
    if (isDecode(s, e))
      continue;
    Sequence &seq = s->sequences.find(e.seq_id)->second;
    int64_t T = e.n_tokens;
    int64_t start = seq.length, stop = start + T;
    bool verify = isVerify(e);
    if (s->pageSize)
      preparePages(s, seq, T);
    seq.tokens.insert(seq.tokens.end(), e.tokens, e.tokens + T);
    // The calls: one per token for a verify entry, else split at the
    // snapshot positions.
    while (seq.length < stop) {
      int64_t a = seq.length, b = stop;
      if (verify) {
        b = a + 1;
        int32_t slot = reserved[i][size_t(a - start)];
        copyState(s, snapshotData(s, slot), slotData(s, seq.slot));
        seq.checkpoints.push_back({a, slot});
      } else if (I) {
        b = std::min(stop, (a / I + 1) * I);
      }
      forwardCall(s, {&seq}, e.tokens + (a - start), b - a);
      finish(i, seq, a, b, stop, 0);
    }
  }

  // Snapshots are published only once the step has completed (a hit on a
  // state never written: vllm-project/vllm#56525).
  for (const PendingSnapshot &p : s->pending) {
    if (p.slot < 0)
      continue;
    if (firstBad)
      s->freeSnapshotSlots.push_back(p.slot);
    else
      publish(s, s->sequences.find(p.seqId)->second, p.end, p.slot);
  }
  s->pending.clear();
  return firstBad;
}

k3rt_status *k3rt::checkDevice(k3rt_session *s, const char *what,
                               k3rt_status *status) {
  if (!s->gpu)
    return status;
  // A driver error is the process's (the context is gone with a sticky
  // one): it loses every GPU session.
  if (s->lost.empty())
    if (const char *err = cudaError())
      s->lost = err;
  if (s->lost.empty()) {
    cudaSetStream(s->stream);
    return status;
  }
  freeStatus(status);
  return makeStatus(K3RT_ABORTED,
                    "%s: the GPU failed: %s; the session is lost "
                    "(DEVICE_LOST): its state is undefined, release it and "
                    "restart the process",
                    what, s->lost.c_str());
}
