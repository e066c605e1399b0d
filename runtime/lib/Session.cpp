//===- Session.cpp - state pools, sequences and steps ---------------------===//

#include "Session.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
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
    std::memset(pageData(s, p, page), 0,
                size_t(s->manifest->pageBytesPerLayer));
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
  maxContext = maxContext ? std::min(maxContext, m.maxContext) : m.maxContext;

  uint64_t slotTotal;
  if (mulOverflow(uint64_t(maxSequences), m.slotBytes, slotTotal) ||
      slotTotal > budget)
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "%lld sequence slots of %llu bytes do not fit in the "
                      "state budget of %llu bytes",
                      (long long)maxSequences, (unsigned long long)m.slotBytes,
                      (unsigned long long)budget);
  if (m.pagedGroup >= 0) {
    uint64_t fit = (budget - slotTotal) / m.pageBytes;
    if (numPages == 0)
      numPages = int64_t(std::min<uint64_t>(
          fit, uint64_t(std::numeric_limits<int32_t>::max())));
    else if (uint64_t(numPages) > fit)
      return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                        "%lld pages of %llu bytes and %lld slots do not fit "
                        "in the state budget of %llu bytes",
                        (long long)numPages, (unsigned long long)m.pageBytes,
                        (long long)maxSequences, (unsigned long long)budget);
    if (numPages < 1)
      return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                        "the state budget of %llu bytes leaves no room for a "
                        "single %llu-byte page after %lld slots",
                        (unsigned long long)budget,
                        (unsigned long long)m.pageBytes,
                        (long long)maxSequences);
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
  K3RT_RETURN_IF_ERROR(Buffer::allocate(slotTotal, "sequence slots", s->slots));
  s->pools.resize(m.pagedLayers.size());
  for (size_t p = 0; p < s->pools.size(); ++p)
    K3RT_RETURN_IF_ERROR(
        Buffer::allocate(uint64_t(numPages) * m.pageBytesPerLayer,
                         "an MLA page pool", s->pools[p]));
  for (int64_t i = maxSequences; i-- > 0;)
    s->freeSlots.push_back(int32_t(i));
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
  delete session;
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
  uint64_t bytes = s->slots.size();
  for (const Buffer &b : s->pools)
    bytes += b.size();
  full.state_bytes = bytes;
  if (!copyOut(full, info))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_session_get_info: info must be non-NULL with "
                      "struct_size = sizeof(k3rt_session_info)");
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Sequence operations
//===----------------------------------------------------------------------===//

k3rt_status *k3rt::addSequence(k3rt_session *s, int64_t id) {
  if (s->sequences.count(id))
    return makeStatus(K3RT_ALREADY_EXISTS, "add: sequence %lld already exists",
                      (long long)id);
  if (s->freeSlots.empty())
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "add: no free sequence slot for sequence %lld (all %lld "
                      "are in use; remove a sequence or create the session "
                      "with a larger max_sequences)",
                      (long long)id, (long long)s->maxSequences);
  Sequence seq;
  seq.slot = takeSlot(s);
  // Zero on hand-out (vllm-project/vllm#56524: stale state in reused slots).
  if (s->manifest->slotBytes)
    std::memset(slotData(s, seq.slot), 0, size_t(s->manifest->slotBytes));
  s->sequences.emplace(id, std::move(seq));
  for (int64_t &r : s->removed)
    if (r == id)
      r = std::numeric_limits<int64_t>::min();
  return nullptr;
}

k3rt_status *k3rt::removeSequence(k3rt_session *s, int64_t id) {
  auto it = s->sequences.find(id);
  if (it == s->sequences.end())
    return unknownSequence(s, id, "remove");
  for (int32_t page : it->second.pages)
    dropPage(s, page);
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
  if (s->sequences.count(child))
    return makeStatus(K3RT_ALREADY_EXISTS,
                      "fork: child sequence %lld already exists",
                      (long long)child);
  if (s->freeSlots.empty())
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "fork: no free sequence slot for sequence %lld (all "
                      "%lld are in use)",
                      (long long)child, (long long)s->maxSequences);
  Sequence seq;
  seq.slot = takeSlot(s);
  seq.length = it->second.length;
  seq.pages = it->second.pages;
  for (int32_t page : seq.pages)
    ++s->pageRefs[size_t(page)];
  if (s->manifest->slotBytes)
    std::memcpy(slotData(s, seq.slot), slotData(s, it->second.slot),
                size_t(s->manifest->slotBytes));
  s->sequences.emplace(child, std::move(seq));
  for (int64_t &r : s->removed)
    if (r == child)
      r = std::numeric_limits<int64_t>::min();
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
        (arg.role == ArgRole::SlotState || arg.role == ArgRole::PagePool)) {
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
  if (arg.role == ArgRole::SlotState)
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
  if (arg.role == ArgRole::SlotState) {
    toFloat(slotData(s, seq.slot) + arg.slotOffset, arg.dtype, size_t(count),
            out);
    return nullptr;
  }
  // Paged: the first `length` tokens, gathered from the pages in order.
  size_t pool = size_t(s->poolOf[size_t(argIndex)]);
  int64_t width = sg.shape[0];
  uint64_t rowBytes = uint64_t(width) * dtypeBits(sg.dtype) / 8;
  for (int64_t q = 0; q < seq.length; ++q) {
    int32_t page = seq.pages[size_t(q / s->pageSize)];
    const uint8_t *row =
        pageData(s, pool, page) + uint64_t(q % s->pageSize) * rowBytes;
    toFloat(row, sg.dtype, size_t(width), out + q * width);
  }
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Step
//===----------------------------------------------------------------------===//

size_t k3rt::logitsRows(const k3rt_step_entry *entries, size_t numEntries) {
  if (!entries)
    return 0;
  size_t rows = 0;
  for (size_t i = 0; i < numEntries; ++i) {
    if (entries[i].n_tokens < 0)
      return 0;
    switch (entries[i].logits) {
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

static int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Checks the whole batch; nothing is changed. Sets the rows to return and
/// the longest entry.
static k3rt_status *validateStep(k3rt_session *s,
                                 const k3rt_step_entry *entries, size_t n,
                                 size_t logitsCount, const float *logits,
                                 uint64_t &rows, int64_t &maxTokens) {
  const Manifest &m = *s->manifest;
  if (!entries || n == 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "step: the batch is empty (no entries)");
  std::unordered_map<int64_t, size_t> seen;
  seen.reserve(n);
  rows = 0;
  maxTokens = 0;
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
    if (!e.tokens)
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "step entry %zu (sequence %lld): tokens is NULL", i,
                        id);
    if (e.logits != K3RT_LOGITS_NONE && e.logits != K3RT_LOGITS_LAST &&
        e.logits != K3RT_LOGITS_ALL)
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
    rows += e.logits == K3RT_LOGITS_ALL    ? uint64_t(e.n_tokens)
            : e.logits == K3RT_LOGITS_LAST ? 1
                                           : 0;
    maxTokens = std::max(maxTokens, e.n_tokens);
  }

  // Pages for the whole batch, counting the copy of a shared partial page
  // exactly: an earlier entry's copy may leave a later entry sole owner.
  if (s->pageSize) {
    std::unordered_map<int32_t, int32_t> released;
    int64_t needed = 0;
    int64_t free = int64_t(s->freePages.size());
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
      if (needed > free)
        return makeStatus(
            K3RT_RESOURCE_EXHAUSTED,
            "step entry %zu (sequence %lld, length %lld, +%lld tokens): out "
            "of MLA pages: the batch needs %lld new pages up to this entry, "
            "%lld of %lld are free",
            i, (long long)e.seq_id, (long long)seq.length,
            (long long)e.n_tokens, (long long)needed, (long long)free,
            (long long)s->numPages);
    }
  }

  uint64_t floats;
  if (mulOverflow(rows, uint64_t(m.vocabSize), floats))
    return makeStatus(K3RT_INVALID_ARGUMENT, "step: logits size overflows");
  if (rows && (!logits || logitsCount < floats))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "step: logits_out holds %zu floats; this step returns "
                      "%llu rows of %lld",
                      logits ? logitsCount : size_t(0),
                      (unsigned long long)rows, (long long)m.vocabSize);

  // The scratch is the last thing that can fail; it is not state.
  uint64_t need = uint64_t(maxTokens) * uint64_t(m.vocabSize) * sizeof(float);
  if (s->scratch.size() < need) {
    Buffer b;
    K3RT_RETURN_IF_ERROR(Buffer::allocate(need, "the logits scratch", b));
    s->scratch = std::move(b);
  }
  return nullptr;
}

/// Gives `seq` private pages for positions [length, length + n): copies a
/// shared partial page (in every pool) and appends zeroed pages.
static void preparePages(k3rt_session *s, Sequence &seq, int64_t n) {
  int64_t P = s->pageSize;
  if (seq.length % P != 0) {
    size_t k = size_t(seq.length / P);
    int32_t old = seq.pages[k];
    if (s->pageRefs[size_t(old)] > 1) {
      int32_t page = s->freePages.back();
      s->freePages.pop_back();
      s->pageRefs[size_t(page)] = 1;
      for (size_t p = 0; p < s->pools.size(); ++p)
        std::memcpy(pageData(s, p, page), pageData(s, p, old),
                    size_t(s->manifest->pageBytesPerLayer));
      dropPage(s, old);
      seq.pages[k] = page;
    }
  }
  int64_t want = ceilDiv(seq.length + n, P);
  while (int64_t(seq.pages.size()) < want)
    seq.pages.push_back(takeZeroedPage(s));
}

k3rt_status *k3rt::step(k3rt_session *s, const k3rt_step_entry *entries,
                        size_t n, float *logits, size_t logitsCount) {
  uint64_t rows;
  int64_t maxTokens;
  K3RT_RETURN_IF_ERROR(
      validateStep(s, entries, n, logitsCount, logits, rows, maxTokens));

  const Manifest &m = *s->manifest;
  int64_t V = m.vocabSize;
  float *scratch = reinterpret_cast<float *>(s->scratch.data());
  float *dst = logits;
  k3rt_status *firstBad = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const k3rt_step_entry &e = entries[i];
    Sequence &seq = s->sequences.find(e.seq_id)->second;
    int64_t T = e.n_tokens;
    if (s->pageSize)
      preparePages(s, seq, T);
    // One length per call, shared by every paged layer; the kernel reads it.
    int64_t length = seq.length;
    uint8_t *slot = slotData(s, seq.slot);
    for (size_t a = 0; a < m.args.size(); ++a) {
      const AbiArg &arg = m.args[a];
      MemRefDesc &d = s->descs[a];
      switch (arg.role) {
      case ArgRole::Tokens: // [T], stride 1
        setData(d, const_cast<int32_t *>(e.tokens));
        d.dims[0] = T;
        break;
      case ArgRole::SlotState:
        setData(d, slot + arg.slotOffset);
        break;
      case ArgRole::PageTable: // [pages], stride 1
        setData(d, seq.pages.data());
        d.dims[0] = int64_t(seq.pages.size());
        break;
      case ArgRole::PageLength:
        setData(d, &length);
        break;
      case ArgRole::Logits: // [T, V], strides [V, 1]
        setData(d, scratch);
        d.dims[0] = T;
        break;
      case ArgRole::Weight:
      case ArgRole::PagePool:
        break;
      }
    }
    s->library->forward(s->args.data());
    seq.length += T;
    int64_t first = 0, count = 0;
    if (e.logits == K3RT_LOGITS_ALL) {
      count = T;
    } else if (e.logits == K3RT_LOGITS_LAST) {
      first = T - 1;
      count = 1;
    }
    if (count == 0)
      continue;
    std::memcpy(dst, scratch + first * V, size_t(count * V) * sizeof(float));
    if (s->checkLogits && !firstBad) {
      for (int64_t k = 0; k < count * V && !firstBad; ++k)
        if (!std::isfinite(dst[k]))
          firstBad = makeStatus(
              K3RT_DATA_LOSS,
              "step entry %zu (sequence %lld): logit %lld of position %lld is "
              "%f (the step has run)",
              i, (long long)e.seq_id, (long long)(k % V),
              (long long)(length + first + k / V), double(dst[k]));
    }
    dst += count * V;
  }
  return firstBad;
}
