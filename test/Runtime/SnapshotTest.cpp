//===- SnapshotTest.cpp - snapshots, rollback, verify, prefix reuse -------===//
//
// The fake library's logits are features of the whole history a sequence
// sees through its state (KDA slot, conv tails, MLA pages), so a sequence
// resumed from a snapshot, rolled back, forked at a position or started
// from a cached prefix must give exactly the reference's rows for its
// token history (TestUtil referenceRow), and its state must equal that of
// a fresh sequence fed the same tokens.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

using namespace k3rt_test;

namespace {

std::vector<int32_t> range(int32_t from, int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i)
    v.push_back((from + i * 7) % FAKE_VOCAB);
  return v;
}

template <typename T>
std::vector<T> concat(std::vector<T> a, const std::vector<T> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> prefix(const std::vector<int32_t> &v, size_t n) {
  return std::vector<int32_t>(v.begin(), v.begin() + long(n));
}

const char *const kGroups[] = {"kda.recurrent", "kda.conv_q", "kda.conv_k",
                               "kda.conv_v", "mla.latent"};

/// Every state of sequence `id`, flattened.
std::vector<float> allState(FakeSession &s, int64_t id) {
  std::vector<float> all;
  for (const char *g : kGroups) {
    bool mla = std::strcmp(g, "mla.latent") == 0;
    for (int64_t layer : mla ? std::vector<int64_t>{1, 3}
                             : std::vector<int64_t>{0, 2}) {
      std::vector<float> v = s.readState(id, g, layer);
      all.insert(all.end(), v.begin(), v.end());
    }
  }
  return all;
}

/// The state of a fresh sequence (in a fresh session) fed `history`.
std::vector<float> freshState(const std::vector<int32_t> &history) {
  FakeSession fresh(1, 32);
  EXPECT_OK(k3rt_sequence_add(fresh.get(), 0));
  if (!history.empty())
    fresh.feed(0, history);
  return allState(fresh, 0);
}

k3rt_sequence_info seqInfo(FakeSession &s, int64_t id) {
  k3rt_sequence_info i{};
  i.struct_size = sizeof(i);
  EXPECT_OK(k3rt_sequence_get_info(s.get(), id, &i));
  return i;
}

std::vector<float> verify(FakeSession &s, int64_t id,
                          const std::vector<int32_t> &tokens) {
  return s.step({{id, int64_t(tokens.size()), tokens.data(),
                  K3RT_LOGITS_ALL | K3RT_STEP_VERIFY}});
}

//===----------------------------------------------------------------------===//
// Options and the shared budget
//===----------------------------------------------------------------------===//

class SnapshotOptionsTest : public ::testing::Test {
protected:
  void SetUp() override {
    writeFakeCheckpoint(dir.path());
    lib = openFake();
    k3rt_weights *w = nullptr;
    ASSERT_OK(k3rt_weights_load(lib.get(), dir.path().c_str(), nullptr, &w));
    weights.reset(w);
    o.struct_size = sizeof(o);
    o.max_sequences = 2;
    o.state_budget_bytes = 1 << 20;
    o.snapshot_interval = 8;
    o.snapshot_slots = 3;
    o.max_verify_tokens = 2;
  }

  k3rt_status *create(Session *out = nullptr) {
    k3rt_session *s = nullptr;
    k3rt_status *status = k3rt_session_create(lib.get(), weights.get(), &o, &s);
    if (out)
      out->reset(s);
    else
      k3rt_session_release(s);
    return status;
  }

  TempDir dir;
  Library lib;
  Weights weights;
  k3rt_session_options o{};
};

TEST_F(SnapshotOptionsTest, OneBudgetEachPoolInItsOwnUnit) {
  // 2 sequence slots and 3 snapshot slots of 512 bytes, then 96-byte pages:
  // nothing is rounded to another pool's unit.
  o.state_budget_bytes = 5 * 512 + 7 * 96 + 95;
  Session s;
  ASSERT_OK(create(&s));
  k3rt_session_info i{};
  i.struct_size = sizeof(i);
  ASSERT_OK(k3rt_session_get_info(s.get(), &i));
  EXPECT_EQ(i.num_pages, 7);
  EXPECT_EQ(i.snapshot_slots, 3);
  EXPECT_EQ(i.free_snapshot_slots, 3);
  EXPECT_EQ(i.snapshot_interval, 8);
  EXPECT_EQ(i.max_verify_tokens, 2);
  EXPECT_EQ(i.state_bytes, uint64_t(5 * 512 + 7 * 96));
  EXPECT_EQ(i.cached_snapshots, 0);
}

TEST_F(SnapshotOptionsTest, BadPolicies) {
  o.snapshot_interval = 6;
  EXPECT_ERROR(create(), K3RT_INVALID_ARGUMENT, "snapshot_interval 6",
               "multiple of the MLA page size 4");
  o.snapshot_interval = 8;
  o.snapshot_slots = 0;
  o.max_verify_tokens = 0;
  EXPECT_ERROR(create(), K3RT_INVALID_ARGUMENT, "needs snapshot_slots > 0");
  o.snapshot_slots = 1;
  o.max_verify_tokens = 2;
  EXPECT_ERROR(create(), K3RT_INVALID_ARGUMENT, "max_verify_tokens 2",
               "snapshot_slots 1");
  o.max_verify_tokens = -1;
  EXPECT_ERROR(create(), K3RT_INVALID_ARGUMENT, "must not be negative");
  o.max_verify_tokens = 1;
  o.snapshot_slots = 3;
  o.state_budget_bytes = 5 * 512 - 1;
  EXPECT_ERROR(create(), K3RT_RESOURCE_EXHAUSTED, "2 sequence slots",
               "3 snapshot slots");
  o.state_budget_bytes = 5 * 512 + 10;
  EXPECT_ERROR(create(), K3RT_RESOURCE_EXHAUSTED, "no room for a single");
  o.state_budget_bytes = 5 * 512 + 96;
  EXPECT_OK(create());
}

TEST_F(SnapshotOptionsTest, IntervalMustBeAMultipleOfARecordedKdaChunk) {
  std::string m = fakeManifest();
  // Record a KDA chunk size of 16 in the kda.recurrent group.
  std::string key = "\"layout\": \"value_first\",";
  size_t at = m.find(key);
  ASSERT_NE(at, std::string::npos);
  m.insert(at + key.size(), " \"chunk_size\": 16,");
  Library chunked;
  ASSERT_OK(openFakeWithManifest(m, &chunked));
  k3rt_model_info info{};
  info.struct_size = sizeof(info);
  ASSERT_OK(k3rt_library_get_info(chunked.get(), &info));
  EXPECT_EQ(info.kda_chunk_size, 16);
  k3rt_weights *w = nullptr;
  ASSERT_OK(k3rt_weights_load(chunked.get(), dir.path().c_str(), nullptr, &w));
  Weights cw(w);
  k3rt_session *s = nullptr;
  EXPECT_ERROR(k3rt_session_create(chunked.get(), cw.get(), &o, &s),
               K3RT_INVALID_ARGUMENT, "multiple of the KDA chunk size 16");
  o.snapshot_interval = 32;
  EXPECT_OK(k3rt_session_create(chunked.get(), cw.get(), &o, &s));
  k3rt_session_release(s);
}

TEST_F(SnapshotOptionsTest, AnOlderOptionsStructGetsTheDefaults) {
  // A caller built against API version 1 knows only the fields up to
  // check_logits: no snapshots, no verify entries.
  o.struct_size = offsetof(k3rt_session_options, snapshot_interval);
  Session s;
  ASSERT_OK(create(&s));
  k3rt_session_info i{};
  i.struct_size = sizeof(i);
  ASSERT_OK(k3rt_session_get_info(s.get(), &i));
  EXPECT_EQ(i.snapshot_interval, 0);
  EXPECT_EQ(i.snapshot_slots, 0);
  EXPECT_EQ(i.state_bytes % 512, 0u);
}

//===----------------------------------------------------------------------===//
// Capture at aligned positions
//===----------------------------------------------------------------------===//

TEST(SnapshotTest, EntriesAreSplitAtSnapshotPositions) {
  FakeSession s(2, 16, 0, {8, 4, 0});
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  std::vector<int32_t> t = range(3, 19);
  long before = fakeForwardCalls();
  std::vector<float> rows = s.feed(1, t);
  // Calls [0, 8), [8, 16), [16, 19): one pass over the tokens.
  EXPECT_EQ(fakeForwardCalls() - before, 3);
  EXPECT_TRUE(s.matchesCalls(rows, t, 0, 19, 8));
  k3rt_session_info i = s.info();
  EXPECT_EQ(i.cached_snapshots, 2);
  EXPECT_EQ(i.cached_blocks, 2);
  EXPECT_EQ(i.free_snapshot_slots, 2);
  // A decode token that reaches a boundary captures too.
  std::vector<int32_t> more = range(5, 5);
  rows = s.feed(1, more);
  EXPECT_TRUE(s.matchesCalls(rows, concat(t, more), 19, 5, 8));
  EXPECT_EQ(s.info().cached_snapshots, 3);
  EXPECT_EQ(seqInfo(s, 1).snapshot_position, 24);
}

TEST(SnapshotTest, ChunkedOrNotTheSameSnapshots) {
  // A prefill in uneven chunks captures the same states as one entry.
  std::vector<int32_t> t = range(2, 17);
  FakeSession a(2, 16, 0, {8, 4, 0}), b(2, 16, 0, {8, 4, 0});
  ASSERT_OK(k3rt_sequence_add(a.get(), 1));
  ASSERT_OK(k3rt_sequence_add(b.get(), 1));
  a.feed(1, t);
  size_t at = 0;
  for (size_t chunk : {3u, 6u, 1u, 7u}) {
    std::vector<int32_t> part(t.begin() + long(at),
                              t.begin() + long(at + chunk));
    std::vector<float> rows = b.feed(1, part);
    EXPECT_TRUE(b.matchesCalls(rows, t, int64_t(at), int64_t(chunk), 8));
    at += chunk;
  }
  EXPECT_EQ(allState(a, 1), allState(b, 1));
  for (FakeSession *s : {&a, &b}) {
    int64_t reused = -1;
    ASSERT_OK(k3rt_sequence_add_with_prefix(s->get(), 2, t.data(), 17,
                                            &reused));
    EXPECT_EQ(reused, 16);
    EXPECT_EQ(allState(*s, 2), freshState(prefix(t, 16)));
  }
}

TEST(SnapshotTest, PublishedOnlyAfterTheStepCompleted) {
  // A step that fails its logits check (a NaN weight row reached at token
  // 6) has run, but its snapshots are discarded.
  TempDir dir;
  std::vector<TensorData> w = fakeWeights();
  uint16_t nan = 0x7fc0;
  std::memcpy(&w[0].bytes[2 * (6 * 4)], &nan, 2);
  writeFile(dir.file("model.safetensors"), safetensorsBytes(w));
  Library lib = openFake();
  k3rt_weights *raw = nullptr;
  ASSERT_OK(k3rt_weights_load(lib.get(), dir.path().c_str(), nullptr, &raw));
  Weights weights(raw);
  k3rt_session_options o{};
  o.struct_size = sizeof(o);
  o.max_sequences = 2;
  o.state_budget_bytes = 1 << 16;
  o.check_logits = 1;
  o.snapshot_interval = 4;
  o.snapshot_slots = 4;
  k3rt_session *rs = nullptr;
  ASSERT_OK(k3rt_session_create(lib.get(), weights.get(), &o, &rs));
  Session s(rs);
  ASSERT_OK(k3rt_sequence_add(s.get(), 0));
  int32_t tokens[9] = {1, 2, 3, 4, 5, 7, 8, 9, 6};
  k3rt_step_entry e = {0, 9, tokens, K3RT_LOGITS_ALL};
  std::vector<float> out(9 * FAKE_VOCAB);
  EXPECT_ERROR(k3rt_session_step(s.get(), &e, 1, out.data(), out.size()),
               K3RT_DATA_LOSS, "snapshots are discarded");
  k3rt_session_info i{};
  i.struct_size = sizeof(i);
  ASSERT_OK(k3rt_session_get_info(s.get(), &i));
  EXPECT_EQ(i.cached_blocks, 0);
  EXPECT_EQ(i.free_snapshot_slots, 4);
  int64_t reusable = -1;
  ASSERT_OK(k3rt_session_match_prefix(s.get(), tokens, 9, &reusable));
  EXPECT_EQ(reusable, 0);
  // A clean step publishes.
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  k3rt_step_entry ok = {1, 8, tokens, K3RT_LOGITS_LAST};
  EXPECT_OK(k3rt_session_step(s.get(), &ok, 1, out.data(), out.size()));
  ASSERT_OK(k3rt_session_match_prefix(s.get(), tokens, 9, &reusable));
  EXPECT_EQ(reusable, 8);
}

//===----------------------------------------------------------------------===//
// Prefix reuse
//===----------------------------------------------------------------------===//

TEST(PrefixTest, ResumesFromTheDeepestExactSnapshot) {
  FakeSession s(4, 32, 0, {8, 4, 0});
  std::vector<int32_t> t = range(1, 21);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  ASSERT_OK(k3rt_sequence_remove(s.get(), 1)); // snapshots outlive it
  EXPECT_EQ(s.info().cached_snapshots, 2);

  int64_t reused = -1;
  ASSERT_OK(k3rt_session_match_prefix(s.get(), t.data(), 21, &reused));
  EXPECT_EQ(reused, 16);
  ASSERT_OK(k3rt_sequence_add_with_prefix(s.get(), 2, t.data(), 21, &reused));
  EXPECT_EQ(reused, 16);
  EXPECT_EQ(s.length(2), 16);
  EXPECT_EQ(seqInfo(s, 2).reused_tokens, 16);
  EXPECT_EQ(allState(s, 2), freshState(prefix(t, 16)));
  std::vector<int32_t> rest(t.begin() + 16, t.end());
  std::vector<float> rows = s.feed(2, rest);
  EXPECT_TRUE(s.matchesCalls(rows, t, 16, 5, 8));
  EXPECT_EQ(allState(s, 2), freshState(t));
  // The hit shares the cached pages: no page copied, 2 new for 16..21.
  EXPECT_EQ(seqInfo(s, 2).num_pages, 6);
}

TEST(PrefixTest, AHitIsNeverApproximate) {
  FakeSession s(4, 32, 0, {8, 4, 0});
  std::vector<int32_t> t = range(1, 16);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  // One token differs in the second block: only the first block matches.
  std::vector<int32_t> u = t;
  u[12] = (u[12] + 1) % FAKE_VOCAB;
  int64_t reused = -1;
  ASSERT_OK(k3rt_sequence_add_with_prefix(s.get(), 2, u.data(), 16, &reused));
  EXPECT_EQ(reused, 8);
  std::vector<int32_t> rest(u.begin() + 8, u.end());
  std::vector<float> rows = s.feed(2, rest);
  EXPECT_TRUE(s.matchesCalls(rows, u, 8, 8, 8));
  // The first token differs: nothing.
  u[0] = (u[0] + 1) % FAKE_VOCAB;
  ASSERT_OK(k3rt_sequence_add_with_prefix(s.get(), 3, u.data(), 16, &reused));
  EXPECT_EQ(reused, 0);
  EXPECT_EQ(allState(s, 3), freshState({}));
  // Fewer tokens than a block: nothing; exactly a block: that block.
  ASSERT_OK(k3rt_session_match_prefix(s.get(), t.data(), 7, &reused));
  EXPECT_EQ(reused, 0);
  ASSERT_OK(k3rt_session_match_prefix(s.get(), t.data(), 8, &reused));
  EXPECT_EQ(reused, 8);
}

TEST(PrefixTest, SharesAPrefixWithALiveSequence) {
  // The cached snapshots of a sequence still running serve another one;
  // both then continue independently (copy-on-write).
  FakeSession s(4, 32, 0, {4, 8, 0});
  std::vector<int32_t> t = range(4, 10);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  std::vector<int32_t> u = concat(prefix(t, 8), {5, 6, 7});
  int64_t reused = -1;
  ASSERT_OK(k3rt_sequence_add_with_prefix(s.get(), 2, u.data(), 11, &reused));
  EXPECT_EQ(reused, 8);
  std::vector<int32_t> x = {9, 9}, y = {5, 6, 7};
  std::vector<float> rows = s.step(
      {{1, 2, x.data(), K3RT_LOGITS_ALL}, {2, 3, y.data(), K3RT_LOGITS_ALL}});
  EXPECT_TRUE(s.matchesCalls(rows, concat(t, x), 10, 2, 4, 0));
  EXPECT_TRUE(s.matchesCalls(rows, u, 8, 3, 4, 2));
  EXPECT_EQ(allState(s, 1), freshState(concat(t, x)));
  EXPECT_EQ(allState(s, 2), freshState(u));
}

TEST(PrefixTest, BadCalls) {
  FakeSession s(1, 16, 0, {4, 2, 0});
  int32_t bad[2] = {1, FAKE_VOCAB};
  int64_t reused = -1;
  EXPECT_ERROR(k3rt_sequence_add_with_prefix(s.get(), 1, bad, 2, &reused),
               K3RT_INVALID_ARGUMENT, "token 1 is 32");
  EXPECT_ERROR(k3rt_sequence_add_with_prefix(s.get(), 1, nullptr, 2, &reused),
               K3RT_INVALID_ARGUMENT, "tokens is NULL");
  EXPECT_ERROR(k3rt_sequence_add_with_prefix(s.get(), 1, bad, -1, &reused),
               K3RT_INVALID_ARGUMENT, "n_tokens is -1");
  EXPECT_EQ(s.info().num_sequences, 0);
  ASSERT_OK(k3rt_sequence_add_with_prefix(s.get(), 1, nullptr, 0, nullptr));
  EXPECT_ERROR(k3rt_sequence_add_with_prefix(s.get(), 1, bad, 1, &reused),
               K3RT_ALREADY_EXISTS, "sequence 1 already exists");
  EXPECT_ERROR(k3rt_sequence_add_with_prefix(s.get(), 2, bad, 1, &reused),
               K3RT_RESOURCE_EXHAUSTED, "no free sequence slot");
  EXPECT_ERROR(k3rt_session_match_prefix(s.get(), bad, 1, nullptr),
               K3RT_INVALID_ARGUMENT);
}

TEST(PrefixTest, ARemovedSlotReusedStartsFromZerosOrTheSnapshot) {
  FakeSession s(1, 16, 0, {4, 2, 0});
  std::vector<int32_t> t = range(6, 9);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  ASSERT_OK(k3rt_sequence_remove(s.get(), 1));
  // The only slot, reused: a miss is all zeros, a hit exactly the snapshot.
  std::vector<int32_t> other = {30, 1, 2, 3, 4};
  int64_t reused = -1;
  ASSERT_OK(
      k3rt_sequence_add_with_prefix(s.get(), 2, other.data(), 5, &reused));
  EXPECT_EQ(reused, 0);
  EXPECT_EQ(allState(s, 2), freshState({}));
  ASSERT_OK(k3rt_sequence_remove(s.get(), 2));
  ASSERT_OK(k3rt_sequence_add_with_prefix(s.get(), 3, t.data(), 9, &reused));
  EXPECT_EQ(reused, 8);
  EXPECT_EQ(allState(s, 3), freshState(prefix(t, 8)));
}

//===----------------------------------------------------------------------===//
// Eviction: snapshots never crowd out live state
//===----------------------------------------------------------------------===//

TEST(EvictionTest, DeeperSnapshotsWinTheSlots) {
  // 2 snapshot slots, a 17-token prefill: the states at 12 and 16 are kept
  // (4 and 8 stay as nodes without state, leading to them).
  FakeSession s(2, 16, 0, {4, 2, 0});
  std::vector<int32_t> t = range(2, 17);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  std::vector<float> rows = s.feed(1, t);
  EXPECT_TRUE(s.matchesCalls(rows, t, 0, 17, 4));
  k3rt_session_info i = s.info();
  EXPECT_EQ(i.cached_snapshots, 2);
  EXPECT_EQ(i.cached_blocks, 4);
  EXPECT_EQ(i.free_snapshot_slots, 0);
  int64_t reused = -1;
  ASSERT_OK(k3rt_session_match_prefix(s.get(), t.data(), 17, &reused));
  EXPECT_EQ(reused, 16);
  ASSERT_OK(k3rt_session_match_prefix(s.get(), t.data(), 15, &reused));
  EXPECT_EQ(reused, 12);
  ASSERT_OK(k3rt_session_match_prefix(s.get(), t.data(), 11, &reused));
  EXPECT_EQ(reused, 0);
  // Rolling back to 8 is impossible now, and the message says where to.
  EXPECT_ERROR(k3rt_sequence_rollback(s.get(), 1, 9), K3RT_FAILED_PRECONDITION,
               "sequence 1 (length 17)", "position 8",
               "cached snapshots on its path at 12, 16");
}

TEST(EvictionTest, LeastRecentlyUsedStateGoesFirst) {
  FakeSession s(4, 32, 0, {4, 2, 0});
  std::vector<int32_t> a = range(1, 4), b = range(2, 4), c = range(3, 4);
  for (int64_t id : {1, 2, 3})
    ASSERT_OK(k3rt_sequence_add(s.get(), id));
  s.feed(1, a);
  s.feed(2, b);
  int64_t reused = -1;
  ASSERT_OK(k3rt_sequence_add_with_prefix(s.get(), 4, a.data(), 4, &reused));
  ASSERT_OK(k3rt_sequence_remove(s.get(), 4)); // a is now the more recent
  s.feed(3, c);                                // evicts b's state
  ASSERT_OK(k3rt_session_match_prefix(s.get(), a.data(), 4, &reused));
  EXPECT_EQ(reused, 4);
  ASSERT_OK(k3rt_session_match_prefix(s.get(), b.data(), 4, &reused));
  EXPECT_EQ(reused, 0);
  ASSERT_OK(k3rt_session_match_prefix(s.get(), c.data(), 4, &reused));
  EXPECT_EQ(reused, 4);
  EXPECT_EQ(s.info().cached_blocks, 2); // b's node went with its state
}

TEST(EvictionTest, CachedPagesAreReclaimedForLiveSequences) {
  // 6 pages. A 16-token sequence publishes 4 pages' worth of snapshots and
  // is removed; a new 20-token sequence needs 5 pages: the cache gives
  // back what it holds, the step succeeds.
  FakeSession s(2, 6, 0, {8, 2, 0});
  std::vector<int32_t> t = range(1, 16);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  ASSERT_OK(k3rt_sequence_remove(s.get(), 1));
  k3rt_session_info i = s.info();
  EXPECT_EQ(i.free_pages, 2);
  EXPECT_EQ(i.cached_pages, 4);
  std::vector<int32_t> u = range(5, 20);
  ASSERT_OK(k3rt_sequence_add(s.get(), 2));
  std::vector<float> rows = s.feed(2, u);
  EXPECT_TRUE(s.matchesCalls(rows, u, 0, 20, 8));
  // Only the pages held by nothing but the cache count; live ones don't.
  ASSERT_OK(k3rt_sequence_add(s.get(), 3));
  std::vector<int32_t> w = range(7, 9);
  k3rt_step_entry e = {3, 9, w.data(), K3RT_LOGITS_LAST};
  float out[FAKE_VOCAB];
  EXPECT_ERROR(k3rt_session_step(s.get(), &e, 1, out, FAKE_VOCAB),
               K3RT_RESOURCE_EXHAUSTED, "out of MLA pages", "needs 3 new pages",
               "1 of 6 are free");
}

TEST(EvictionTest, DropSnapshots) {
  FakeSession s(2, 16, 0, {4, 4, 0});
  std::vector<int32_t> t = range(1, 12);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  EXPECT_EQ(s.info().cached_snapshots, 3);
  ASSERT_OK(k3rt_session_drop_snapshots(s.get()));
  k3rt_session_info i = s.info();
  EXPECT_EQ(i.cached_blocks, 0);
  EXPECT_EQ(i.free_snapshot_slots, 4);
  EXPECT_EQ(i.free_pages, 16 - 3);
  // The sequence itself is untouched.
  std::vector<float> rows = s.feed(1, {3});
  EXPECT_TRUE(s.matchesCalls(rows, concat(t, {3}), 12, 1, 4));
}

//===----------------------------------------------------------------------===//
// Rollback
//===----------------------------------------------------------------------===//

TEST(RollbackTest, ToASnapshotIsExact) {
  FakeSession s(2, 16, 0, {4, 4, 0});
  std::vector<int32_t> t = range(3, 10);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 2)); // to 8
  EXPECT_EQ(s.length(1), 8);
  EXPECT_EQ(allState(s, 1), freshState(prefix(t, 8)));
  // Continue differently: the popped rows are gone (the fake checks that
  // rows past the end of a page are zero before it writes them).
  std::vector<int32_t> x = {31, 30, 29};
  std::vector<float> rows = s.feed(1, x);
  EXPECT_TRUE(s.matchesCalls(rows, concat(prefix(t, 8), x), 8, 3, 4));
  // To 6 now (inside a page, snapshot at... none): refused, nothing changes.
  std::vector<float> before = allState(s, 1);
  EXPECT_ERROR(k3rt_sequence_rollback(s.get(), 1, 5), K3RT_FAILED_PRECONDITION,
               "rollback: sequence 1 (length 11)",
               "no exact KDA state at position 6", "at 4, 8");
  EXPECT_EQ(allState(s, 1), before);
  EXPECT_EQ(s.length(1), 11);
  // To 4, then 0 (always possible).
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 7));
  EXPECT_EQ(allState(s, 1), freshState(prefix(t, 4)));
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 4));
  EXPECT_EQ(allState(s, 1), freshState({}));
  EXPECT_EQ(s.info().free_pages, 16 - 2); // only the cache holds pages
}

TEST(RollbackTest, IntoAPageSharedWithAFork) {
  // Rolling back into the middle of a page that a fork still holds leaves
  // it intact; the next write copies its valid rows (the fake checks that
  // the rows past the write position are zero).
  FakeSession s(3, 16, 0, {4, 6, 3});
  std::vector<int32_t> p = range(2, 6), d = {3, 4, 5};
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, p);
  verify(s, 1, d); // checkpoints at 6, 7, 8
  ASSERT_OK(k3rt_sequence_fork(s.get(), 1, 2));
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 2)); // to 7, in page 1
  std::vector<int32_t> x = {1, 2, 3};
  std::vector<int32_t> h1 = concat(concat(p, {3}), x);
  std::vector<float> rows = s.feed(1, x);
  EXPECT_TRUE(s.matchesCalls(rows, h1, 7, 3, 4));
  EXPECT_EQ(allState(s, 1), freshState(h1));
  // The fork still sees its 9 tokens.
  std::vector<int32_t> h2 = concat(concat(p, d), {6});
  rows = s.feed(2, {6});
  EXPECT_TRUE(s.matchesCalls(rows, h2, 9, 1, 4));
  EXPECT_EQ(allState(s, 2), freshState(h2));
}

TEST(RollbackTest, IntoAPageItsOtherHoldersLetGoOf) {
  // Rolling back into a shared page leaves the rows past the new end for
  // the other holder. If that holder lets go before the sequence writes
  // again, the sequence holds the page alone, with another holder's rows
  // where it writes next: they are zeroed first (the fake checks that the
  // rows past the write position are zero).
  FakeSession s(3, 16, 0, {4, 6, 3});
  // The other holder is a fork, removed.
  std::vector<int32_t> p = range(2, 5);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, p);
  verify(s, 1, {3, 4}); // rows 4..6 in page 1, checkpoints at 5, 6
  ASSERT_OK(k3rt_sequence_fork(s.get(), 1, 2));
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 1)); // to 6, in page 1
  ASSERT_OK(k3rt_sequence_remove(s.get(), 2));
  std::vector<int32_t> x = {1, 2, 3};
  std::vector<int32_t> h = concat(concat(p, {3}), x);
  std::vector<float> rows = s.feed(1, x);
  EXPECT_TRUE(s.matchesCalls(rows, h, 6, 3, 4));
  EXPECT_EQ(allState(s, 1), freshState(h));
  ASSERT_OK(k3rt_sequence_remove(s.get(), 1));

  // The other holder is the cached snapshot at 8 (captured by the verify
  // entry's last call), evicted.
  ASSERT_OK(k3rt_session_drop_snapshots(s.get()));
  p = range(3, 6);
  ASSERT_OK(k3rt_sequence_add(s.get(), 3));
  s.feed(3, p);
  verify(s, 3, {5, 6}); // rows 4..7 in page 1, snapshot at 8
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 3, 1)); // to 7, in page 1
  ASSERT_OK(k3rt_session_drop_snapshots(s.get()));
  h = concat(concat(p, {5}), x);
  rows = s.feed(3, x);
  EXPECT_TRUE(s.matchesCalls(rows, h, 7, 3, 4));
  EXPECT_EQ(allState(s, 3), freshState(h));
}

TEST(RollbackTest, BadCalls) {
  FakeSession s(2, 16); // no snapshots at all
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, range(1, 6));
  EXPECT_ERROR(k3rt_sequence_rollback(s.get(), 1, 7), K3RT_OUT_OF_RANGE,
               "sequence 1 has 6 tokens, cannot pop 7");
  EXPECT_ERROR(k3rt_sequence_rollback(s.get(), 1, -1), K3RT_INVALID_ARGUMENT,
               "n_tokens is -1");
  EXPECT_ERROR(k3rt_sequence_rollback(s.get(), 9, 1), K3RT_NOT_FOUND,
               "rollback: sequence 9 does not exist");
  // A prefill cannot be rolled back into without snapshots (TVM silently
  // would; RUNTIME_NOTES §1.2).
  EXPECT_ERROR(k3rt_sequence_rollback(s.get(), 1, 1), K3RT_FAILED_PRECONDITION,
               "position 5", "snapshot_interval is 0");
  EXPECT_OK(k3rt_sequence_rollback(s.get(), 1, 0));
  EXPECT_EQ(s.length(1), 6);
}

//===----------------------------------------------------------------------===//
// Verify steps: one checkpoint per draft position
//===----------------------------------------------------------------------===//

TEST(VerifyTest, RollbackToAnyDraftPositionIsExact) {
  FakeSession s(2, 16, 0, {0, 5, 4});
  std::vector<int32_t> p = range(2, 6);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, p);
  std::vector<int32_t> drafts = {3, 14, 15, 9}; // t0 and three drafts
  long before = fakeForwardCalls();
  std::vector<float> rows = verify(s, 1, drafts);
  EXPECT_EQ(fakeForwardCalls() - before, 4); // one call per token
  EXPECT_TRUE(s.matchesCalls(rows, concat(p, drafts), 6, 4, 1));
  k3rt_sequence_info si = seqInfo(s, 1);
  EXPECT_EQ(si.checkpoint_first, 6);
  EXPECT_EQ(si.checkpoint_count, 4);
  EXPECT_EQ(s.info().checkpoints, 4);
  // Accept t0 and one draft: pop 2.
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 2));
  std::vector<int32_t> kept = concat(p, {3, 14});
  EXPECT_EQ(allState(s, 1), freshState(kept));
  rows = s.feed(1, {7});
  EXPECT_TRUE(s.matches(rows, concat(kept, {7}), 8, 1));
  // The next step gave the checkpoints back.
  EXPECT_EQ(s.info().checkpoints, 0);
  EXPECT_EQ(s.info().free_snapshot_slots, 5);
}

TEST(VerifyTest, RejectEverythingThenRollBackFurtherStopsAtTheCheckpoints) {
  FakeSession s(2, 16, 0, {0, 4, 4});
  std::vector<int32_t> p = range(1, 5);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, p);
  verify(s, 1, {1, 2, 3});
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 1)); // to 7
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 2)); // to 5: the first one
  EXPECT_EQ(allState(s, 1), freshState(p));
  EXPECT_ERROR(k3rt_sequence_rollback(s.get(), 1, 1), K3RT_FAILED_PRECONDITION,
               "position 4", "verify checkpoints at 5..5");
}

TEST(VerifyTest, LimitsAndSlots) {
  FakeSession s(3, 16, 0, {0, 4, 3});
  for (int64_t id : {1, 2})
    ASSERT_OK(k3rt_sequence_add(s.get(), id));
  std::vector<int32_t> four = {1, 2, 3, 4};
  std::vector<float> out(8 * FAKE_VOCAB);
  k3rt_step_entry e = {1, 4, four.data(), K3RT_LOGITS_ALL | K3RT_STEP_VERIFY};
  EXPECT_ERROR(k3rt_session_step(s.get(), &e, 1, out.data(), out.size()),
               K3RT_OUT_OF_RANGE, "verify entry of 4 tokens", "at most 3");
  e.logits = K3RT_LOGITS_ALL | 0x200;
  EXPECT_ERROR(k3rt_session_step(s.get(), &e, 1, out.data(), out.size()),
               K3RT_INVALID_ARGUMENT, "unknown logits mode");
  EXPECT_EQ(k3rt_step_logits_rows(&e, 1), 0u);
  // Sequence 1 holds 3 of the 4 slots; sequence 2 cannot verify 2 tokens.
  verify(s, 1, {1, 2, 3});
  k3rt_step_entry e2 = {2, 2, four.data(), K3RT_LOGITS_LAST | K3RT_STEP_VERIFY};
  EXPECT_ERROR(k3rt_session_step(s.get(), &e2, 1, out.data(), out.size()),
               K3RT_RESOURCE_EXHAUSTED, "need 2 snapshot slots",
               "1 of 4 are free");
  EXPECT_EQ(s.length(2), 0);
  // In one step with sequence 1, whose checkpoints are given back first.
  k3rt_step_entry both[2] = {
      {1, 1, four.data(), K3RT_LOGITS_LAST},
      {2, 2, four.data(), K3RT_LOGITS_LAST | K3RT_STEP_VERIFY}};
  EXPECT_OK(k3rt_session_step(s.get(), both, 2, out.data(), out.size()));
  EXPECT_EQ(seqInfo(s, 2).checkpoint_count, 2);
  EXPECT_EQ(seqInfo(s, 1).checkpoint_count, 0);
  // Removing a sequence gives its checkpoints back.
  ASSERT_OK(k3rt_sequence_remove(s.get(), 2));
  EXPECT_EQ(s.info().free_snapshot_slots, 4);
}

TEST(VerifyTest, OffByDefault) {
  FakeSession s(1, 16);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  int32_t tok = 1;
  k3rt_step_entry e = {1, 1, &tok, K3RT_LOGITS_LAST | K3RT_STEP_VERIFY};
  float out[FAKE_VOCAB];
  EXPECT_ERROR(k3rt_session_step(s.get(), &e, 1, out, FAKE_VOCAB),
               K3RT_FAILED_PRECONDITION, "max_verify_tokens 0");
}

TEST(VerifyTest, CheckpointsEvictCachedSnapshots) {
  FakeSession s(2, 32, 0, {4, 3, 3});
  std::vector<int32_t> t = range(1, 12);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t); // 3 cached states: every slot
  EXPECT_EQ(s.info().free_snapshot_slots, 0);
  std::vector<float> rows = verify(s, 1, {4, 5, 6});
  EXPECT_TRUE(s.matchesCalls(rows, concat(t, {4, 5, 6}), 12, 3, 1));
  EXPECT_EQ(s.info().checkpoints, 3);
  ASSERT_OK(k3rt_sequence_rollback(s.get(), 1, 3));
  EXPECT_EQ(allState(s, 1), freshState(t));
}

//===----------------------------------------------------------------------===//
// Fork at a position
//===----------------------------------------------------------------------===//

TEST(ForkAtTest, AtASnapshotACheckpointOrZero) {
  FakeSession s(4, 32, 0, {4, 6, 3});
  std::vector<int32_t> t = range(5, 10);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  ASSERT_OK(k3rt_sequence_fork_at(s.get(), 1, 2, 8));
  EXPECT_EQ(s.length(2), 8);
  EXPECT_EQ(allState(s, 2), freshState(prefix(t, 8)));
  std::vector<float> rows = s.feed(2, {1, 1, 1});
  EXPECT_TRUE(s.matchesCalls(rows, concat(prefix(t, 8), {1, 1, 1}), 8, 3, 4));
  // The parent is untouched by the child's writes into its page.
  rows = s.feed(1, {2});
  EXPECT_TRUE(s.matchesCalls(rows, concat(t, {2}), 10, 1, 4));

  verify(s, 1, {3, 4, 5});
  ASSERT_OK(k3rt_sequence_fork_at(s.get(), 1, 3, 12)); // a checkpoint
  EXPECT_EQ(allState(s, 3), freshState(concat(t, {2, 3})));
  ASSERT_OK(k3rt_sequence_fork_at(s.get(), 1, 4, 0));
  EXPECT_EQ(allState(s, 4), freshState({}));
  ASSERT_OK(k3rt_sequence_remove(s.get(), 4));
  EXPECT_ERROR(k3rt_sequence_fork_at(s.get(), 1, 4, 7),
               K3RT_FAILED_PRECONDITION, "fork: sequence 1 (length 14)",
               "position 7", "verify checkpoints at 11..13");
  EXPECT_ERROR(k3rt_sequence_fork_at(s.get(), 1, 4, 15), K3RT_OUT_OF_RANGE,
               "outside [0, 14]");
  EXPECT_ERROR(k3rt_sequence_fork_at(s.get(), 1, 2, 4), K3RT_ALREADY_EXISTS);
  EXPECT_EQ(s.info().num_sequences, 3);
}

TEST(ForkAtTest, InsideAPageTheParentLetGoOf) {
  // A child forked inside a page the parent wrote past the position, the
  // parent (and the snapshot at 8 that holds the page) gone before the
  // child writes: the parent's rows past the position are zeroed first.
  FakeSession s(4, 32, 0, {4, 6, 3});
  std::vector<int32_t> t = range(5, 6);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, t);
  verify(s, 1, {3, 4, 5}); // checkpoints at 6, 7, 8
  ASSERT_OK(k3rt_sequence_fork_at(s.get(), 1, 2, 7));
  ASSERT_OK(k3rt_sequence_remove(s.get(), 1));
  ASSERT_OK(k3rt_session_drop_snapshots(s.get()));
  std::vector<int32_t> x = {1, 2, 3};
  std::vector<int32_t> h = concat(concat(t, {3}), x);
  std::vector<float> rows = s.feed(2, x);
  EXPECT_TRUE(s.matchesCalls(rows, h, 7, 3, 4));
  EXPECT_EQ(allState(s, 2), freshState(h));
}

//===----------------------------------------------------------------------===//
// Any interleaving equals a fresh computation
//===----------------------------------------------------------------------===//

// Random operations over several sequences (prefill chunks, decode tokens,
// verify + rollback, fork, fork at a position, prefix hits, removal),
// batched together; every logits row is checked against the reference for
// the sequence's own history, and at the end every state against a fresh
// sequence fed that history.
TEST(InterleavingTest, RandomScheduleEqualsFreshComputation) {
  // What the schedules exercised, over all seeds.
  int hits = 0, rollbacks = 0, midForks = 0, batches = 0, exhausted = 0;
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
    FakeSession s(5, 40, 0, {4, 6, 3});
    std::map<int64_t, std::vector<int32_t>> hist; // live sequences
    int64_t nextId = 0;
    auto randomTokens = [&](int n) {
      std::vector<int32_t> v;
      for (int i = 0; i < n; ++i)
        v.push_back(pick(4) == 0 ? 7 : pick(FAKE_VOCAB)); // some repeats
      return v;
    };
    std::vector<int32_t> common = randomTokens(12);
    for (int op = 0; op < 60; ++op) {
      k3rt_session_info info = s.info();
      int choice = pick(10);
      if (hist.empty() || (choice <= 1 && info.free_slots > 0)) {
        // A new sequence, often sharing a prefix with earlier ones.
        // One draw after the other: the order of evaluation of function
        // arguments is unspecified, and the schedule must not depend on it.
        std::vector<int32_t> prompt;
        if (pick(2)) {
          std::vector<int32_t> shared = prefix(common, size_t(pick(13)));
          prompt = concat(shared, randomTokens(3));
        } else {
          prompt = randomTokens(5);
        }
        int64_t reused = -1, id = nextId++;
        ASSERT_OK(k3rt_sequence_add_with_prefix(
            s.get(), id, prompt.data(), int64_t(prompt.size()), &reused));
        ASSERT_EQ(reused % 4, 0);
        hits += reused > 0;
        hist[id] = prefix(prompt, size_t(reused));
        std::vector<int32_t> rest(prompt.begin() + reused, prompt.end());
        if (rest.empty())
          continue;
        k3rt_step_entry e = {id, int64_t(rest.size()), rest.data(),
                             K3RT_LOGITS_ALL};
        std::vector<float> rows(rest.size() * FAKE_VOCAB);
        k3rt_status *st =
            k3rt_session_step(s.get(), &e, 1, rows.data(), rows.size());
        if (k3rt_status_code(st) == K3RT_RESOURCE_EXHAUSTED) {
          k3rt_status_free(st);
          ++exhausted;
          continue;
        }
        ASSERT_OK(st);
        EXPECT_TRUE(s.matchesCalls(rows, prompt, reused,
                                   int64_t(rest.size()), 4));
        hist[id] = prompt;
        continue;
      }
      auto it = hist.begin();
      std::advance(it, pick(int(hist.size())));
      int64_t id = it->first;
      std::vector<int32_t> &h = it->second;
      if (choice == 2 && info.free_slots > 0) {
        int64_t child = nextId++;
        int64_t pos = pick(3) ? int64_t(h.size()) : int64_t(h.size()) / 4 * 4;
        k3rt_status *st = k3rt_sequence_fork_at(s.get(), id, child, pos);
        if (k3rt_status_code(st) == K3RT_FAILED_PRECONDITION) { // evicted
          k3rt_status_free(st);
          continue;
        }
        ASSERT_OK(st);
        midForks += pos < int64_t(h.size());
        hist[child] = prefix(h, size_t(pos));
        continue;
      }
      if ((choice == 3 || choice == 9) && hist.size() > 1) {
        ASSERT_OK(k3rt_sequence_remove(s.get(), id));
        hist.erase(it);
        continue;
      }
      if (choice == 4 && h.size() + 3 <= FAKE_MAX_CONTEXT) {
        std::vector<int32_t> drafts = randomTokens(1 + pick(3));
        int64_t len = int64_t(h.size());
        k3rt_step_entry e = {id, int64_t(drafts.size()), drafts.data(),
                             K3RT_LOGITS_ALL | K3RT_STEP_VERIFY};
        std::vector<float> rows(drafts.size() * FAKE_VOCAB);
        k3rt_status *st =
            k3rt_session_step(s.get(), &e, 1, rows.data(), rows.size());
        if (k3rt_status_code(st) == K3RT_RESOURCE_EXHAUSTED) {
          k3rt_status_free(st); // other sequences hold the slots or pages
          continue;
        }
        ASSERT_OK(st);
        EXPECT_TRUE(s.matchesCalls(rows, concat(h, drafts), len,
                                   int64_t(drafts.size()), 1));
        int64_t pop = pick(int(drafts.size()) + 1);
        ASSERT_OK(k3rt_sequence_rollback(s.get(), id, pop));
        rollbacks += pop > 0;
        h = prefix(concat(h, drafts), drafts.size() - size_t(pop) + h.size());
        continue;
      }
      // A batch: this sequence and maybe others, chunks or single tokens.
      std::vector<int64_t> ids = {id};
      for (auto &other : hist)
        if (other.first != id && pick(3) == 0)
          ids.push_back(other.first);
      std::vector<std::vector<int32_t>> chunks;
      std::vector<k3rt_step_entry> entries;
      for (int64_t sid : ids) {
        int64_t room = FAKE_MAX_CONTEXT - int64_t(hist[sid].size());
        int n = int(std::min<int64_t>(pick(3) ? 1 + pick(9) : 1, room));
        if (n <= 0)
          continue;
        chunks.push_back(randomTokens(n));
      }
      size_t c = 0;
      for (int64_t sid : ids) {
        if (FAKE_MAX_CONTEXT - int64_t(hist[sid].size()) <= 0)
          continue;
        entries.push_back({sid, int64_t(chunks[c].size()), chunks[c].data(),
                           K3RT_LOGITS_ALL});
        ++c;
      }
      if (entries.empty())
        continue;
      std::vector<float> out(k3rt_step_logits_rows(entries.data(),
                                                   entries.size()) *
                             FAKE_VOCAB);
      k3rt_status *st = k3rt_session_step(s.get(), entries.data(),
                                          entries.size(), out.data(),
                                          out.size());
      if (k3rt_status_code(st) == K3RT_RESOURCE_EXHAUSTED) {
        k3rt_status_free(st); // out of pages: the next op may remove
        ++exhausted;
        continue;
      }
      ASSERT_OK(st);
      batches += entries.size() > 1;
      size_t row = 0;
      for (const k3rt_step_entry &e : entries) {
        std::vector<int32_t> &sh = hist[e.seq_id];
        int64_t len = int64_t(sh.size());
        sh.insert(sh.end(), e.tokens, e.tokens + e.n_tokens);
        EXPECT_TRUE(s.matchesCalls(out, sh, len, e.n_tokens, 4, row))
            << "sequence " << e.seq_id << " op " << op;
        row += size_t(e.n_tokens);
      }
    }
    for (auto &[id, h] : hist) {
      EXPECT_EQ(s.length(id), int64_t(h.size()));
      EXPECT_EQ(allState(s, id), freshState(h)) << "sequence " << id;
    }
  }
  EXPECT_GT(hits, 3);
  EXPECT_GT(rollbacks, 3);
  EXPECT_GT(midForks, 0);
  EXPECT_GT(batches, 3);
  std::printf("interleavings: %d prefix hits, %d verify rollbacks, %d forks "
              "inside a sequence, %d batched steps, %d steps out of pages\n",
              hits, rollbacks, midForks, batches, exhausted);
}

} // namespace
