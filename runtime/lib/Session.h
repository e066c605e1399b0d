//===- Session.h - state pools, sequences, snapshots and steps --*- C++ -*-===//
//
// A session owns the per-sequence state of one model (RUNTIME_NOTES.md §1):
//  - slots: one fixed-size region per live sequence holding every per-
//    sequence state argument (KDA recurrent state and conv tails of all KDA
//    layers), zeroed when handed out;
//  - snapshot slots: the same size, holding copies of a slot: the states of
//    cached snapshots (the prefix cache) and the verify checkpoints of
//    sequences;
//  - pages: one pool per paged (MLA) layer, [num_pages, P, width]; a page
//    index is shared by all paged layers of a sequence; pages are reference
//    counted (by sequences and cached snapshots), shared by forks and
//    prefix hits and copied before a write into a shared one (in every
//    paged layer's pool); zeroed when handed out.
// The kinds are sized separately from the manifest under one budget;
// neither is padded to the other's size.
//
// The prefix cache is a tree of blocks of `snapshotInterval` tokens from
// position 0: a node holds its block's tokens, the pages covering them and
// (unless evicted) the KDA state after its last token. Nodes are found
// through a hash chain and verified token by token. Invariant: every leaf
// holds a state (a node whose state is evicted stays only while it leads
// to a deeper state).
//
//===----------------------------------------------------------------------===//

#ifndef K3RT_LIB_SESSION_H
#define K3RT_LIB_SESSION_H

#include "Device.h"
#include "Weights.h"

#include <atomic>
#include <cstdint>
#include <string>
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

/// A verify checkpoint: the KDA state at `position`, in a snapshot slot.
struct Checkpoint {
  int64_t position = 0;
  int32_t slot = -1;
};

struct Sequence {
  int32_t slot = -1;
  int64_t length = 0;
  /// Page indices in order; size() == ceil(length / page_size).
  std::vector<int32_t> pages;
  /// The rows past `length` in the last (partial) page may hold another
  /// holder's data: the sequence came to share that page at a shorter
  /// length (a rollback into a shared page, a fork at a position inside a
  /// page). While the page is shared, the next write copies it; once the
  /// sequence holds it alone (the other holders gone), the next write
  /// first zeroes those rows (the kernel may read them as unwritten).
  bool staleTail = false;
  /// The tokens processed, in order (size() == length).
  std::vector<int32_t> tokens;
  /// Of the last verify step, ascending positions.
  std::vector<Checkpoint> checkpoints;
  /// The deepest prefix cache node known to lie on this sequence's path
  /// (its tokens verified), ending at `chainEnd`; -1 if none. A hint: the
  /// node may have been evicted since.
  int64_t chainNode = -1;
  int64_t chainEnd = 0;
  int64_t reused = 0;
};

/// A prefix cache node: the block [end - interval, end).
struct CacheNode {
  int64_t parent = -1; ///< node id, -1 for a first block
  uint64_t hash = 0;   ///< chain hash of every token up to `end`
  int64_t end = 0;
  std::vector<int32_t> tokens; ///< the block's tokens
  std::vector<int32_t> pages;  ///< the block's pages (references held)
  int32_t slot = -1;           ///< snapshot slot with the state, or -1
  int32_t children = 0;
  uint64_t lastUse = 0;
};

/// A state captured during a step, published when the step has completed.
struct PendingSnapshot {
  int64_t seqId = 0;
  int64_t end = 0;
  int32_t slot = -1; ///< -1: no slot was free (a node without state)
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
  int64_t maxStepTokens = 0;  ///< 0 = no limit
  int64_t maxStepEntries = 0;
  /// Decode entries of a step run as one call (K3RT_SEPARATE_DECODE=1: one
  /// call per entry, for comparisons).
  bool batchDecode = true;

  /// A GPU library: state, logits and weights live in device memory and
  /// every copy goes through the driver (Device.h).
  bool gpu = false;
  void *stream = nullptr;     ///< the caller's CUstream, or NULL
  std::string device;         ///< "host" or the GPU's description
  /// Set by the first device error: every later call fails with ABORTED.
  std::string lost;

  k3rt::Memory slots;              ///< maxSequences x slotBytes
  std::vector<k3rt::Memory> pools; ///< per paged layer, ABI order
  std::vector<int32_t> freeSlots;  ///< LIFO
  std::vector<int32_t> freePages;  ///< LIFO
  std::vector<int32_t> pageRefs;   ///< per page

  // Snapshots and checkpoints.
  int64_t snapshotInterval = 0;
  int64_t numSnapshotSlots = 0;
  int64_t maxVerifyTokens = 0;
  k3rt::Memory snapshotSlots;             ///< numSnapshotSlots x slotBytes
  std::vector<int32_t> freeSnapshotSlots; ///< LIFO
  std::unordered_map<int64_t, k3rt::CacheNode> nodes;
  std::unordered_multimap<uint64_t, int64_t> nodesByHash;
  int64_t nextNodeId = 0;
  uint64_t clock = 0; ///< for lastUse
  std::vector<k3rt::PendingSnapshot> pending;

  std::unordered_map<int64_t, k3rt::Sequence> sequences;
  /// Recently removed ids, for clearer "does not exist" messages.
  std::vector<int64_t> removed;
  size_t removedNext = 0;

  /// Logits scratch [T, V] f32, grown on demand.
  k3rt::Memory scratch;
  /// GPU: the per-call inputs in page-locked memory the kernels and the
  /// library's host code both read: lengths, slots, page tables, tokens.
  k3rt::Memory stage;
  /// GPU: the call's slots in device memory (kernels read them; nothing
  /// on the host does).
  k3rt::Memory deviceSlots;
  /// What deviceSlots holds, so that a step with the same slots (a steady
  /// decode batch) skips the copy and its wait.
  std::vector<int32_t> deviceSlotsHeld;
  /// Host: the same per-call inputs (lengths, slots, page tables).
  std::vector<int64_t> callLengths;
  std::vector<int32_t> callSlots, callTables;

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
k3rt_status *addWithPrefix(k3rt_session *s, int64_t id, const int32_t *tokens,
                           int64_t n, int64_t *reused);
k3rt_status *matchPrefix(k3rt_session *s, const int32_t *tokens, int64_t n,
                         int64_t *reusable);
k3rt_status *dropSnapshots(k3rt_session *s);
k3rt_status *forkAt(k3rt_session *s, int64_t parent, int64_t child,
                    int64_t position);
k3rt_status *rollback(k3rt_session *s, int64_t id, int64_t n);
k3rt_status *sequenceInfo(k3rt_session *s, int64_t id,
                          k3rt_sequence_info *info);
size_t logitsRows(const k3rt_step_entry *entries, size_t numEntries);

/// GPU sessions: ABORTED if the session is lost (a device error in an
/// earlier call); else `status`, or ABORTED (marking the session lost) if
/// the call left a device error.
k3rt_status *checkDevice(k3rt_session *s, const char *what,
                         k3rt_status *status);

} // namespace k3rt

#endif // K3RT_LIB_SESSION_H
