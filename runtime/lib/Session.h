//===- Session.h - state pools, sequences and steps -------------*- C++ -*-===//
//
// A session owns the per-sequence state of one model (ARCHITECTURE.md §5,
// RUNTIME_NOTES.md §1):
//  - slots: one fixed-size region per live sequence holding every per-
//    sequence state argument (KDA recurrent state and conv tails of all KDA
//    layers), zeroed when handed out;
//  - pages: one pool per paged (MLA) layer, [num_pages, P, width]; a page
//    index is shared by all paged layers of a sequence; pages are reference
//    counted, shared by forks and copied before a write into a shared one
//    (in every paged layer's pool); zeroed when handed out.
// The two kinds are sized separately from the manifest; neither is padded
// to the other's size.
//
//===----------------------------------------------------------------------===//

#ifndef K3RT_LIB_SESSION_H
#define K3RT_LIB_SESSION_H

#include "Weights.h"

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace k3rt {

/// An MLIR ranked memref descriptor (docs/ABI.md) with room for kMaxRank:
/// the descriptor of rank R is a prefix ({allocated, aligned, offset,
/// sizes[R], strides[R]}) because sizes and strides are filled at
/// dims[0..R) and dims[R..2R).
struct MemRefDesc {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t dims[2 * kMaxRank];
};

struct Sequence {
  int32_t slot = -1;
  int64_t length = 0;
  /// Page indices in order; size() == ceil(length / page_size).
  std::vector<int32_t> pages;
};

} // namespace k3rt

struct k3rt_session {
  std::atomic<bool> busy{false};
  k3rt_library *library = nullptr; ///< retained
  k3rt_weights *weights = nullptr; ///< retained
  const k3rt::Manifest *manifest = nullptr;

  int64_t maxSequences = 0;
  int64_t maxContext = 0;
  int64_t pageSize = 0;
  int64_t numPages = 0;
  bool checkLogits = false;

  k3rt::Buffer slots;              ///< maxSequences x slotBytes
  std::vector<k3rt::Buffer> pools; ///< per paged layer, ABI order
  std::vector<int32_t> freeSlots;  ///< LIFO
  std::vector<int32_t> freePages;  ///< LIFO
  std::vector<int32_t> pageRefs;   ///< per page

  std::unordered_map<int64_t, k3rt::Sequence> sequences;
  /// Recently removed ids, for clearer "does not exist" messages.
  std::vector<int64_t> removed;
  size_t removedNext = 0;

  /// Logits scratch [T, V] f32, grown on demand.
  k3rt::Buffer scratch;

  /// k3_forward arguments: constant parts filled at creation.
  std::vector<k3rt::MemRefDesc> descs;
  std::vector<void *> args;
  /// For a PagePool argument: its index in `pools`.
  std::vector<int64_t> poolOf;
};

namespace k3rt {

k3rt_status *createSession(k3rt_library *library, k3rt_weights *weights,
                           const k3rt_session_options *options,
                           k3rt_session **out);
void destroySession(k3rt_session *session);

// These assume the caller holds the session's busy flag.
k3rt_status *sessionInfo(k3rt_session *s, k3rt_session_info *info);
k3rt_status *addSequence(k3rt_session *s, int64_t id);
k3rt_status *removeSequence(k3rt_session *s, int64_t id);
k3rt_status *forkSequence(k3rt_session *s, int64_t parent, int64_t child);
k3rt_status *sequenceLength(k3rt_session *s, int64_t id, int64_t *out);
k3rt_status *readState(k3rt_session *s, int64_t id, const char *group,
                       int64_t layer, float *out, size_t outCount,
                       k3rt_state_shape *shape);
k3rt_status *step(k3rt_session *s, const k3rt_step_entry *entries,
                  size_t numEntries, float *logits, size_t logitsCount);
size_t logitsRows(const k3rt_step_entry *entries, size_t numEntries);

} // namespace k3rt

#endif // K3RT_LIB_SESSION_H
