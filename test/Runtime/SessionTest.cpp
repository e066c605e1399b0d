//===- SessionTest.cpp - sequences, steps, pools; bad calls 17-24 ---------===//
//
// The fake library's logits are features of the whole history of a
// sequence as seen through its state, so comparing them with the
// reference (TestUtil referenceRow) checks the orchestration: slots, conv
// tails, pages and page tables, lengths, batching, forks, copy-on-write.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

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

std::vector<float> concat3(const std::vector<float> &a,
                           const std::vector<float> &b,
                           const std::vector<float> &c) {
  return concat(concat(a, b), c);
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

class SessionCreateTest : public ::testing::Test {
protected:
  void SetUp() override {
    writeFakeCheckpoint(dir.path());
    lib = openFake();
    k3rt_weights *w = nullptr;
    ASSERT_OK(k3rt_weights_load(lib.get(), dir.path().c_str(), nullptr, &w));
    weights.reset(w);
    options.struct_size = sizeof(options);
    options.max_sequences = 2;
    options.state_budget_bytes = 1 << 20;
  }

  k3rt_status *create(Session *out = nullptr) {
    k3rt_session *s = nullptr;
    k3rt_status *status =
        k3rt_session_create(lib.get(), weights.get(), &options, &s);
    if (out)
      out->reset(s);
    else
      k3rt_session_release(s);
    return status;
  }

  TempDir dir;
  Library lib;
  Weights weights;
  k3rt_session_options options{};
};

TEST_F(SessionCreateTest, PoolsAreSizedFromTheManifestAndBudget) {
  // 2 slots of 512 bytes, then 96-byte pages (two MLA layers).
  options.state_budget_bytes = 2 * 512 + 10 * 96 + 50;
  Session s;
  ASSERT_OK(create(&s));
  k3rt_session_info i{};
  i.struct_size = sizeof(i);
  ASSERT_OK(k3rt_session_get_info(s.get(), &i));
  EXPECT_EQ(i.max_sequences, 2);
  EXPECT_EQ(i.max_context, FAKE_MAX_CONTEXT);
  EXPECT_EQ(i.page_size, FAKE_PAGE);
  EXPECT_EQ(i.num_pages, 10);
  EXPECT_EQ(i.free_pages, 10);
  EXPECT_EQ(i.free_slots, 2);
  EXPECT_EQ(i.num_sequences, 0);
  EXPECT_EQ(i.state_bytes, uint64_t(2 * 512 + 10 * 96));
}

TEST_F(SessionCreateTest, MaxContextIsTheSmallerOfOptionAndManifest) {
  options.max_context = 10;
  Session s;
  ASSERT_OK(create(&s));
  k3rt_session_info i{};
  i.struct_size = sizeof(i);
  ASSERT_OK(k3rt_session_get_info(s.get(), &i));
  EXPECT_EQ(i.max_context, 10);
  options.max_context = 1000;
  ASSERT_OK(create(&s));
  ASSERT_OK(k3rt_session_get_info(s.get(), &i));
  EXPECT_EQ(i.max_context, FAKE_MAX_CONTEXT);
}

TEST_F(SessionCreateTest, BadOptions) {
  options.max_sequences = 0;
  EXPECT_ERROR(create(), K3RT_INVALID_ARGUMENT, "max_sequences");
  options.max_sequences = 2;
  options.state_budget_bytes = 0;
  EXPECT_ERROR(create(), K3RT_INVALID_ARGUMENT, "state_budget_bytes");
  options.state_budget_bytes = 1050; // two slots fit, no page does
  EXPECT_ERROR(create(), K3RT_RESOURCE_EXHAUSTED, "no room for a single");
  options.state_budget_bytes = 100; // not even the slots
  EXPECT_ERROR(create(), K3RT_RESOURCE_EXHAUSTED, "2 sequence slots");
  options.state_budget_bytes = 2 * 512 + 4 * 96;
  options.num_pages = 5;
  EXPECT_ERROR(create(), K3RT_RESOURCE_EXHAUSTED, "5 pages");
  options.num_pages = 4;
  EXPECT_OK(create());
  options.struct_size = 0;
  EXPECT_ERROR(create(), K3RT_INVALID_ARGUMENT, "struct_size");
}

TEST_F(SessionCreateTest, WeightsOfAnotherLibrary) {
  Library other = openFake();
  k3rt_session *s = nullptr;
  EXPECT_ERROR(k3rt_session_create(other.get(), weights.get(), &options, &s),
               K3RT_INVALID_ARGUMENT, "another library");
}

TEST_F(SessionCreateTest, HandlesMayBeReleasedInAnyOrder) {
  Session s;
  ASSERT_OK(create(&s));
  lib.reset();
  weights.reset();
  ASSERT_OK(k3rt_sequence_add(s.get(), 0));
  int32_t tok = 4;
  k3rt_step_entry e = {0, 1, &tok, K3RT_LOGITS_LAST};
  std::vector<float> out(FAKE_VOCAB);
  EXPECT_OK(k3rt_session_step(s.get(), &e, 1, out.data(), out.size()));
  EXPECT_EQ(out[FAKE_F_TOKEN], 4);
}

//===----------------------------------------------------------------------===//
// Steps against the reference
//===----------------------------------------------------------------------===//

TEST(SessionTest, PrefillThenDecodeMatchesTheReference) {
  FakeSession s;
  ASSERT_OK(k3rt_sequence_add(s.get(), 7));
  std::vector<int32_t> prompt = range(3, 10);
  std::vector<float> rows = s.feed(7, prompt);
  EXPECT_TRUE(s.matches(rows, prompt, 0, 10));
  std::vector<int32_t> history = prompt;
  for (int32_t tok : {5, 31, 0, 17}) {
    history.push_back(tok);
    rows = s.feed(7, {tok});
    EXPECT_TRUE(s.matches(rows, history, int64_t(history.size()) - 1, 1));
  }
  EXPECT_EQ(s.length(7), 14);
}

TEST(SessionTest, ChunkedPrefillEqualsOneShot) {
  std::vector<int32_t> prompt = range(1, 13);
  FakeSession a, b;
  ASSERT_OK(k3rt_sequence_add(a.get(), 0));
  ASSERT_OK(k3rt_sequence_add(b.get(), 0));
  std::vector<float> whole = a.feed(0, prompt);
  size_t at = 0;
  for (int64_t chunk : {3, 1, 4, 5}) {
    std::vector<int32_t> part(prompt.begin() + long(at),
                              prompt.begin() + long(at) + chunk);
    std::vector<float> rows = b.feed(0, part);
    EXPECT_TRUE(b.matches(rows, prompt, int64_t(at), chunk));
    at += size_t(chunk);
  }
  EXPECT_TRUE(a.matches(whole, prompt, 0, 13));
  // The state after both is the same.
  for (const char *group : {"kda.recurrent", "kda.conv_q", "kda.conv_k",
                            "kda.conv_v", "mla.latent"})
    for (int64_t layer : {0, 1, 2, 3}) {
      bool mla = std::strcmp(group, "mla.latent") == 0;
      if (mla != (layer == 1 || layer == 3))
        continue;
      EXPECT_EQ(a.readState(0, group, layer), b.readState(0, group, layer))
          << group << " layer " << layer;
    }
}

TEST(SessionTest, LogitsModes) {
  FakeSession s;
  for (int64_t id : {1, 2, 3})
    ASSERT_OK(k3rt_sequence_add(s.get(), id));
  std::vector<int32_t> p1 = range(2, 5), p2 = range(9, 6), p3 = range(4, 3);
  std::vector<k3rt_step_entry> e = {{1, 5, p1.data(), K3RT_LOGITS_LAST},
                                    {2, 6, p2.data(), K3RT_LOGITS_NONE},
                                    {3, 3, p3.data(), K3RT_LOGITS_ALL}};
  EXPECT_EQ(k3rt_step_logits_rows(e.data(), e.size()), 4u);
  std::vector<float> rows = s.step(e);
  ASSERT_EQ(rows.size(), 4u * FAKE_VOCAB);
  // Entry 1: its last row; entry 2: nothing; entry 3: all three rows.
  std::vector<float> last(rows.begin(), rows.begin() + FAKE_VOCAB);
  EXPECT_EQ(last, referenceRow(p1, 4, 5, 4, s.sums()));
  EXPECT_TRUE(s.matches(rows, p3, 0, 3, 1));
  EXPECT_EQ(s.length(2), 6);
}

// Batching = running alone: a batch mixing prefill chunks and decode tokens
// gives each sequence exactly what it gets by itself.
TEST(SessionTest, BatchingEqualsRunningAlone) {
  std::vector<int32_t> a = range(1, 9), b = range(5, 3), c = range(11, 6);
  FakeSession batched, alone;
  for (int64_t id : {10, 20, 30}) {
    ASSERT_OK(k3rt_sequence_add(batched.get(), id));
    ASSERT_OK(k3rt_sequence_add(alone.get(), id));
  }
  // Step 1: prefill a[0..5), b whole, c[0..2).
  std::vector<float> r1 = batched.step({{10, 5, a.data(), K3RT_LOGITS_ALL},
                                        {20, 3, b.data(), K3RT_LOGITS_ALL},
                                        {30, 2, c.data(), K3RT_LOGITS_ALL}});
  // Step 2: a continues, b decodes, c continues.
  int32_t bNext = 13;
  std::vector<float> r2 =
      batched.step({{30, 4, c.data() + 2, K3RT_LOGITS_ALL},
                    {20, 1, &bNext, K3RT_LOGITS_ALL},
                    {10, 4, a.data() + 5, K3RT_LOGITS_ALL}});

  std::vector<float> a1 = alone.feed(10, {a.begin(), a.begin() + 5});
  std::vector<float> b1 = alone.feed(20, b);
  std::vector<float> c1 = alone.feed(30, {c.begin(), c.begin() + 2});
  std::vector<float> c2 = alone.feed(30, {c.begin() + 2, c.end()});
  std::vector<float> b2 = alone.feed(20, {bNext});
  std::vector<float> a2 = alone.feed(10, {a.begin() + 5, a.end()});

  EXPECT_EQ(r1, concat3(a1, b1, c1));
  EXPECT_EQ(r2, concat3(c2, b2, a2));
  EXPECT_TRUE(batched.matches(r2, a, 5, 4, 5));
  EXPECT_TRUE(batched.matches(r2, concat(b, {bNext}), 3, 1, 4));
}

// The decode entries of a step (one token, not verify) run as one call, each
// token in its own sequence's slot and page table (docs/ABI.md); the other
// entries run as before; rows come back in entry order either way.
TEST(SessionTest, DecodeEntriesRunAsOneCall) {
  auto run = [](bool separate, long &calls) {
    if (separate)
      setenv("K3RT_SEPARATE_DECODE", "1", 1);
    FakeSession s(8);
    unsetenv("K3RT_SEPARATE_DECODE");
    // Lengths 1, 5, 9, 14 (pages of 4: one to four pages; 5 and 9 start a
    // page with their next token).
    std::vector<std::vector<int32_t>> h = {range(3, 1), range(7, 5),
                                           range(2, 9), range(9, 14)};
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_OK(k3rt_sequence_add(s.get(), 10 + i));
      s.feed(10 + i, h[size_t(i)]);
    }
    EXPECT_OK(k3rt_sequence_add(s.get(), 20));
    std::vector<int32_t> p = range(4, 3);
    int32_t next[4] = {5, 6, 7, 8};
    long before = fakeForwardCalls();
    std::vector<float> rows =
        s.step({{10, 1, &next[0], K3RT_LOGITS_LAST},
                {20, 3, p.data(), K3RT_LOGITS_ALL},
                {11, 1, &next[1], K3RT_LOGITS_ALL},
                {12, 1, &next[2], K3RT_LOGITS_NONE},
                {13, 1, &next[3], K3RT_LOGITS_LAST}});
    calls = fakeForwardCalls() - before;
    EXPECT_EQ(rows.size(), size_t(6 * FAKE_VOCAB));
    for (size_t i = 0; i < 4; ++i)
      h[i].push_back(next[i]);
    EXPECT_TRUE(s.matches(rows, h[0], 1, 1, 0));
    EXPECT_TRUE(s.matches(rows, p, 0, 3, 1));
    EXPECT_TRUE(s.matches(rows, h[1], 5, 1, 4));
    EXPECT_TRUE(s.matches(rows, h[3], 14, 1, 5));
    // The states moved on: the next token of each sees its whole history.
    for (int64_t i = 0; i < 4; ++i) {
      std::vector<float> r = s.feed(10 + i, {1});
      h[size_t(i)].push_back(1);
      EXPECT_TRUE(s.matches(r, h[size_t(i)], int64_t(h[size_t(i)].size()) - 1,
                            1));
    }
    return rows;
  };
  long batchedCalls = 0, separateCalls = 0;
  std::vector<float> batched = run(false, batchedCalls);
  std::vector<float> separate = run(true, separateCalls);
  EXPECT_EQ(batchedCalls, 2);  // the four decode tokens, the prefill
  EXPECT_EQ(separateCalls, 5); // one per entry
  EXPECT_EQ(batched, separate);
}

//===----------------------------------------------------------------------===//
// Fork and copy-on-write
//===----------------------------------------------------------------------===//

TEST(SessionTest, ForkContinuesLikeAFreshSequenceWithTheSamePrefix) {
  FakeSession s;
  std::vector<int32_t> prefix = range(2, 6); // ends inside page 1
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, prefix);
  ASSERT_OK(k3rt_sequence_fork(s.get(), 1, 2));
  EXPECT_EQ(s.length(2), 6);
  std::vector<int32_t> x = {9, 8, 7}, y = {1, 2, 3, 4, 5};
  std::vector<float> rows = s.step(
      {{2, 3, x.data(), K3RT_LOGITS_ALL}, {1, 5, y.data(), K3RT_LOGITS_ALL}});
  EXPECT_TRUE(s.matches(rows, concat(prefix, x), 6, 3, 0));
  EXPECT_TRUE(s.matches(rows, concat(prefix, y), 6, 5, 3));

  // And a fresh sequence fed the prefix, then x, agrees bit for bit.
  ASSERT_OK(k3rt_sequence_add(s.get(), 3));
  s.feed(3, prefix);
  std::vector<float> fresh = s.feed(3, x);
  EXPECT_EQ(std::vector<float>(rows.begin(), rows.begin() + 3 * FAKE_VOCAB),
            fresh);
  EXPECT_EQ(s.readState(2, "kda.recurrent", 0),
            s.readState(3, "kda.recurrent", 0));
  EXPECT_EQ(s.readState(2, "mla.latent", 3), s.readState(3, "mla.latent", 3));
}

TEST(SessionTest, CopyOnWriteLeavesTheParentsPagesIntact) {
  FakeSession s(4, 16);
  std::vector<int32_t> prefix = range(3, 6);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, prefix); // pages 0 (full) and 1 (2 of 4 rows)
  EXPECT_EQ(s.info().free_pages, 14);
  std::vector<float> parentLatent = s.readState(1, "mla.latent", 1);
  std::vector<float> parentLatent3 = s.readState(1, "mla.latent", 3);
  ASSERT_OK(k3rt_sequence_fork(s.get(), 1, 2));
  EXPECT_EQ(s.info().free_pages, 14); // shared, nothing copied yet

  // The child writes into the shared partial page: it gets a copy.
  std::vector<int32_t> x = {30, 29};
  std::vector<float> rows = s.feed(2, x);
  EXPECT_TRUE(s.matches(rows, concat(prefix, x), 6, 2));
  EXPECT_EQ(s.info().free_pages, 13);
  EXPECT_EQ(s.readState(1, "mla.latent", 1), parentLatent);
  EXPECT_EQ(s.readState(1, "mla.latent", 3), parentLatent3);

  // The parent continues as if the child had never been.
  std::vector<int32_t> y = {7, 7, 7};
  rows = s.feed(1, y);
  EXPECT_TRUE(s.matches(rows, concat(prefix, y), 6, 3));
  // Its page 1 is its own again (the child copied), so only page 2 is new.
  EXPECT_EQ(s.info().free_pages, 12);
}

TEST(SessionTest, CopyOnWriteCountsPagesExactlyInOneBatch) {
  // Parent and child both write into the shared partial page in one step:
  // the first copies, the second is then sole owner; 1 free page suffices.
  FakeSession s(4, 3);
  std::vector<int32_t> prefix = range(1, 6); // pages 0 and 1
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, prefix);
  ASSERT_OK(k3rt_sequence_fork(s.get(), 1, 2));
  EXPECT_EQ(s.info().free_pages, 1);
  int32_t a = 3, b = 4;
  std::vector<float> rows =
      s.step({{1, 1, &a, K3RT_LOGITS_ALL}, {2, 1, &b, K3RT_LOGITS_ALL}});
  EXPECT_TRUE(s.matches(rows, concat(prefix, {a}), 6, 1, 0));
  EXPECT_TRUE(s.matches(rows, concat(prefix, {b}), 6, 1, 1));
  EXPECT_EQ(s.info().free_pages, 0);
}

TEST(SessionTest, ForkAtAPageBoundaryCopiesNothing) {
  FakeSession s(4, 16);
  std::vector<int32_t> prefix = range(4, 8); // exactly two pages
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, prefix);
  ASSERT_OK(k3rt_sequence_fork(s.get(), 1, 2));
  std::vector<float> rows = s.feed(2, {6});
  EXPECT_TRUE(s.matches(rows, concat(prefix, {6}), 8, 1));
  EXPECT_EQ(s.info().free_pages, 16 - 3);
  // Removing the parent keeps the shared pages alive for the child.
  ASSERT_OK(k3rt_sequence_remove(s.get(), 1));
  EXPECT_EQ(s.info().free_pages, 16 - 3);
  rows = s.feed(2, {9});
  EXPECT_TRUE(s.matches(rows, concat(prefix, {6, 9}), 9, 1));
  ASSERT_OK(k3rt_sequence_remove(s.get(), 2));
  EXPECT_EQ(s.info().free_pages, 16);
}

TEST(SessionTest, ForkOfAnEmptySequence) {
  FakeSession s;
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  ASSERT_OK(k3rt_sequence_fork(s.get(), 1, 2));
  std::vector<float> rows = s.feed(2, {3, 4});
  EXPECT_TRUE(s.matches(rows, {3, 4}, 0, 2));
  EXPECT_EQ(s.length(1), 0);
}

//===----------------------------------------------------------------------===//
// Slot and page reuse
//===----------------------------------------------------------------------===//

TEST(SessionTest, ARemovedSlotIsReusedFromZeros) {
  FakeSession s(1, 16);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  s.feed(1, range(5, 7));
  ASSERT_OK(k3rt_sequence_remove(s.get(), 1));
  ASSERT_OK(k3rt_sequence_add(s.get(), 2)); // the only slot: the same one
  for (const char *group :
       {"kda.recurrent", "kda.conv_q", "kda.conv_k", "kda.conv_v"})
    for (int64_t layer : {0, 2})
      for (float v : s.readState(2, group, layer))
        EXPECT_EQ(v, 0.0f) << group << " layer " << layer;
  std::vector<int32_t> fresh = {8, 1, 2};
  std::vector<float> rows = s.feed(2, fresh);
  EXPECT_TRUE(s.matches(rows, fresh, 0, 3));
}

TEST(SessionTest, PagesAreFreedAndReusedZeroed) {
  FakeSession s(2, 4);
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  ASSERT_OK(k3rt_sequence_add(s.get(), 2));
  s.feed(1, range(1, 16)); // all four pages, every row written
  EXPECT_EQ(s.info().free_pages, 0);
  int32_t tok = 3;
  k3rt_step_entry e = {2, 1, &tok, K3RT_LOGITS_LAST};
  float out[FAKE_VOCAB];
  EXPECT_ERROR(k3rt_session_step(s.get(), &e, 1, out, FAKE_VOCAB),
               K3RT_RESOURCE_EXHAUSTED, "out of MLA pages");
  ASSERT_OK(k3rt_sequence_remove(s.get(), 1));
  EXPECT_EQ(s.info().free_pages, 4);
  // The fake checks that rows past the write position are zero: pages
  // written by sequence 1 must be zeroed when handed to sequence 2.
  std::vector<int32_t> t = range(2, 13);
  std::vector<float> rows = s.feed(2, t);
  EXPECT_TRUE(s.matches(rows, t, 0, 13));
  for (int64_t i = 0; i < 13; ++i)
    EXPECT_EQ(rows[size_t(i) * FAKE_VOCAB + FAKE_F_STALE], 0);
}

TEST(SessionTest, ReadState) {
  FakeSession s;
  ASSERT_OK(k3rt_sequence_add(s.get(), 4));
  std::vector<int32_t> t = {3, 1, 4, 1, 5};
  s.feed(4, t);

  k3rt_state_shape shape{};
  std::vector<float> rec = s.readState(4, "kda.recurrent", 2, &shape);
  EXPECT_EQ(shape.rank, 3);
  EXPECT_EQ(shape.dims[0], 2);
  EXPECT_EQ(shape.count, 8);
  float hash = 0;
  for (int32_t x : t)
    hash = hash * 0.5f + float(x);
  EXPECT_EQ(rec,
            (std::vector<float>{14, 5, hash, 0 + 1 + 2 + 3 + 4, 0, 0, 0, 0}));

  // conv_k tail: [channels, 3], oldest first: 2 tok + channel.
  std::vector<float> conv = s.readState(4, "kda.conv_k", 0, &shape);
  EXPECT_EQ(shape.rank, 2);
  EXPECT_EQ(shape.dims[1], FAKE_TAPS);
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(conv[size_t(c * 3 + k)], float(2 * t[size_t(2 + k)] + c));

  // MLA: the first `length` rows, gathered across pages in order.
  std::vector<float> latent = s.readState(4, "mla.latent", 3, &shape);
  EXPECT_EQ(shape.rank, 2);
  EXPECT_EQ(shape.dims[0], 5);
  EXPECT_EQ(shape.dims[1], FAKE_WIDTH);
  for (int p = 0; p < 5; ++p) {
    std::vector<float> row(latent.begin() + p * FAKE_WIDTH,
                           latent.begin() + (p + 1) * FAKE_WIDTH);
    EXPECT_EQ(row, (std::vector<float>{float(t[size_t(p)]), float(p), 3,
                                       float(t[size_t(p)] + p), 1, 0}));
  }

  float small[4];
  EXPECT_ERROR(k3rt_sequence_read_state(s.get(), 4, "kda.recurrent", 0, small,
                                        4, nullptr),
               K3RT_INVALID_ARGUMENT, "holds 4 floats", "has 8");
  EXPECT_ERROR(k3rt_sequence_read_state(s.get(), 4, "kda.recurrent", 1, nullptr,
                                        0, nullptr),
               K3RT_NOT_FOUND, "no layer 1", "layers 0, 2");
  EXPECT_ERROR(
      k3rt_sequence_read_state(s.get(), 4, "kda.other", 0, nullptr, 0, nullptr),
      K3RT_NOT_FOUND, "no state group 'kda.other'");
  EXPECT_ERROR(k3rt_sequence_read_state(s.get(), 5, "kda.recurrent", 0, nullptr,
                                        0, nullptr),
               K3RT_NOT_FOUND, "sequence 5");
}

TEST(SessionTest, NonFiniteLogitsInDebugMode) {
  // A NaN in embed row 6 shows up in FAKE_F_EMBED of token 6.
  TempDir dir;
  std::vector<TensorData> t = fakeWeights();
  uint16_t nan = 0x7fc0;
  std::memcpy(&t[0].bytes[2 * (6 * 4)], &nan, 2);
  writeFile(dir.file("model.safetensors"), safetensorsBytes(t));
  Library lib = openFake();
  k3rt_weights *w = nullptr;
  ASSERT_OK(k3rt_weights_load(lib.get(), dir.path().c_str(), nullptr, &w));
  Weights weights(w);
  k3rt_session_options o{};
  o.struct_size = sizeof(o);
  o.max_sequences = 1;
  o.state_budget_bytes = 1 << 16;
  o.check_logits = 1;
  k3rt_session *raw = nullptr;
  ASSERT_OK(k3rt_session_create(lib.get(), weights.get(), &o, &raw));
  Session s(raw);
  ASSERT_OK(k3rt_sequence_add(s.get(), 0));
  int32_t tokens[2] = {5, 6};
  k3rt_step_entry e = {0, 2, tokens, K3RT_LOGITS_ALL};
  std::vector<float> out(2 * FAKE_VOCAB);
  EXPECT_ERROR(k3rt_session_step(s.get(), &e, 1, out.data(), out.size()),
               K3RT_DATA_LOSS, "sequence 0", "logit 17 of position 1");
  EXPECT_TRUE(std::isnan(out[FAKE_VOCAB + FAKE_F_EMBED]));
}

//===----------------------------------------------------------------------===//
// Bad calls (RUNTIME_NOTES §3, 17-24): a clear error, no state touched.
//===----------------------------------------------------------------------===//

class BadCallTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_OK(k3rt_sequence_add(s.get(), 1));
    ASSERT_OK(k3rt_sequence_add(s.get(), 2));
    history1 = range(1, 5);
    history2 = range(2, 3);
    s.feed(1, history1);
    s.feed(2, history2);
    before = snapshot();
    calls = fakeForwardCalls();
  }

  /// Everything observable about the session.
  std::vector<float> snapshot() {
    std::vector<float> all;
    k3rt_session_info i = s.info();
    for (int64_t v : {i.free_pages, i.free_slots, i.num_sequences})
      all.push_back(float(v));
    for (int64_t id : {1, 2}) {
      all.push_back(float(s.length(id)));
      for (const char *g : {"kda.recurrent", "kda.conv_q", "kda.conv_v"})
        for (int64_t layer : {0, 2}) {
          std::vector<float> v = s.readState(id, g, layer);
          all.insert(all.end(), v.begin(), v.end());
        }
      for (int64_t layer : {1, 3}) {
        std::vector<float> v = s.readState(id, "mla.latent", layer);
        all.insert(all.end(), v.begin(), v.end());
      }
    }
    return all;
  }

  k3rt_status *step(std::vector<k3rt_step_entry> e, size_t capacity = 1024) {
    std::vector<float> out(capacity);
    return k3rt_session_step(s.get(), e.data(), e.size(), out.data(),
                             out.size());
  }

  void expectUntouched() {
    EXPECT_EQ(fakeForwardCalls(), calls) << "k3_forward was called";
    EXPECT_EQ(snapshot(), before) << "the session state changed";
  }

  FakeSession s{3, 8};
  std::vector<int32_t> history1, history2;
  std::vector<float> before;
  long calls = 0;
  int32_t ok[2] = {4, 5};
};

// 17. Unknown id, or add of an existing id.
TEST_F(BadCallTest, UnknownSequence) {
  int64_t n;
  EXPECT_ERROR(k3rt_sequence_length(s.get(), 9, &n), K3RT_NOT_FOUND,
               "sequence 9 does not exist");
  EXPECT_ERROR(k3rt_sequence_remove(s.get(), 9), K3RT_NOT_FOUND, "sequence 9");
  EXPECT_ERROR(
      step({{1, 1, ok, K3RT_LOGITS_LAST}, {9, 1, ok, K3RT_LOGITS_LAST}}),
      K3RT_NOT_FOUND, "step entry 1: sequence 9 does not exist");
  expectUntouched();
}

TEST_F(BadCallTest, AddExisting) {
  EXPECT_ERROR(k3rt_sequence_add(s.get(), 1), K3RT_ALREADY_EXISTS,
               "sequence 1 already exists");
  expectUntouched();
}

// 18. Double remove, use after remove.
TEST_F(BadCallTest, DoubleRemoveAndUseAfterRemove) {
  ASSERT_OK(k3rt_sequence_remove(s.get(), 2));
  EXPECT_ERROR(k3rt_sequence_remove(s.get(), 2), K3RT_NOT_FOUND,
               "sequence 2 does not exist (it was removed)");
  EXPECT_ERROR(step({{2, 1, ok, K3RT_LOGITS_LAST}}), K3RT_NOT_FOUND,
               "(it was removed)");
  EXPECT_ERROR(k3rt_sequence_fork(s.get(), 2, 5), K3RT_NOT_FOUND,
               "(it was removed)");
  // Re-adding the id makes it a fresh, live sequence.
  ASSERT_OK(k3rt_sequence_add(s.get(), 2));
  EXPECT_EQ(s.length(2), 0);
}

// 19. Fork from a missing parent or into an existing child.
TEST_F(BadCallTest, BadForks) {
  EXPECT_ERROR(k3rt_sequence_fork(s.get(), 9, 5), K3RT_NOT_FOUND,
               "fork: sequence 9 does not exist");
  EXPECT_ERROR(k3rt_sequence_fork(s.get(), 1, 2), K3RT_ALREADY_EXISTS,
               "child sequence 2 already exists");
  EXPECT_ERROR(k3rt_sequence_fork(s.get(), 1, 1), K3RT_ALREADY_EXISTS);
  expectUntouched();
}

// 21. Empty step and zero-length entries.
TEST_F(BadCallTest, EmptyStep) {
  EXPECT_ERROR(step({}), K3RT_INVALID_ARGUMENT, "empty");
  EXPECT_ERROR(
      step({{1, 1, ok, K3RT_LOGITS_LAST}, {2, 0, ok, K3RT_LOGITS_LAST}}),
      K3RT_INVALID_ARGUMENT, "step entry 1 (sequence 2)", "n_tokens is 0");
  EXPECT_ERROR(step({{1, -3, ok, K3RT_LOGITS_LAST}}), K3RT_INVALID_ARGUMENT,
               "n_tokens is -3");
  EXPECT_ERROR(step({{1, 1, nullptr, K3RT_LOGITS_LAST}}), K3RT_INVALID_ARGUMENT,
               "tokens is NULL");
  EXPECT_ERROR(step({{1, 1, ok, 7}}), K3RT_INVALID_ARGUMENT,
               "unknown logits mode 7");
  expectUntouched();
}

TEST_F(BadCallTest, SameSequenceTwice) {
  EXPECT_ERROR(step({{1, 1, ok, K3RT_LOGITS_LAST},
                     {2, 1, ok, K3RT_LOGITS_LAST},
                     {1, 1, ok + 1, K3RT_LOGITS_LAST}}),
               K3RT_INVALID_ARGUMENT, "step entries 0 and 2", "sequence 1");
  expectUntouched();
}

// 22. Token ids outside [0, vocab).
TEST_F(BadCallTest, TokenOutsideTheVocabulary) {
  int32_t big[3] = {1, 2, FAKE_VOCAB};
  EXPECT_ERROR(
      step({{1, 1, ok, K3RT_LOGITS_LAST}, {2, 3, big, K3RT_LOGITS_LAST}}),
      K3RT_INVALID_ARGUMENT, "step entry 1 (sequence 2)", "token 2 is 32",
      "[0, 32)");
  int32_t negative[1] = {-1};
  EXPECT_ERROR(step({{1, 1, negative, K3RT_LOGITS_LAST}}),
               K3RT_INVALID_ARGUMENT, "token 0 is -1");
  expectUntouched();
}

// 23. Over the context window.
TEST_F(BadCallTest, OverTheContextWindow) {
  std::vector<int32_t> longer(FAKE_MAX_CONTEXT - 4, 1);
  EXPECT_ERROR(
      step({{2, 1, ok, K3RT_LOGITS_LAST},
            {1, int64_t(longer.size()), longer.data(), K3RT_LOGITS_NONE}}),
      K3RT_OUT_OF_RANGE, "step entry 1 (sequence 1)", "60 tokens after the 5",
      "context window of 64");
  expectUntouched();
}

TEST(SessionTest, ContextWindowFromTheOptions) {
  FakeSession s(1, 16, 6);
  ASSERT_OK(k3rt_sequence_add(s.get(), 0));
  s.feed(0, {1, 2, 3, 4, 5, 6}); // exactly the window
  int32_t tok = 1;
  k3rt_step_entry e = {0, 1, &tok, K3RT_LOGITS_NONE};
  EXPECT_ERROR(k3rt_session_step(s.get(), &e, 1, nullptr, 0), K3RT_OUT_OF_RANGE,
               "context window of 6");
}

// 23. Out of pages or slots: RESOURCE_EXHAUSTED, the others intact.
TEST_F(BadCallTest, OutOfPages) {
  // 8 pages: sequence 1 holds 2, sequence 2 holds 1; 5 are free.
  std::vector<int32_t> many(24, 3); // 6 new pages for sequence 2
  EXPECT_ERROR(step({{1, 2, ok, K3RT_LOGITS_LAST},
                     {2, int64_t(many.size()), many.data(), K3RT_LOGITS_LAST}}),
               K3RT_RESOURCE_EXHAUSTED, "step entry 1 (sequence 2",
               "out of MLA pages", "needs 6 new pages", "5 of 8 are free");
  expectUntouched();
  // The other sequences carry on exactly.
  std::vector<float> rows = s.feed(1, {ok[0], ok[1]});
  EXPECT_TRUE(s.matches(rows, concat(history1, {ok[0], ok[1]}), 5, 2));
}

TEST_F(BadCallTest, OutOfSlots) {
  ASSERT_OK(k3rt_sequence_add(s.get(), 3));
  EXPECT_ERROR(k3rt_sequence_add(s.get(), 4), K3RT_RESOURCE_EXHAUSTED,
               "no free sequence slot", "all 3");
  EXPECT_ERROR(k3rt_sequence_fork(s.get(), 1, 4), K3RT_RESOURCE_EXHAUSTED,
               "no free sequence slot");
  ASSERT_OK(k3rt_sequence_remove(s.get(), 3));
  before = snapshot();
  std::vector<float> rows = s.feed(2, {ok[0]});
  EXPECT_TRUE(s.matches(rows, concat(history2, {ok[0]}), 3, 1));
}

TEST_F(BadCallTest, LogitsBufferTooSmall) {
  std::vector<float> out(FAKE_VOCAB);
  std::vector<k3rt_step_entry> e = {{1, 2, ok, K3RT_LOGITS_ALL}};
  EXPECT_ERROR(k3rt_session_step(s.get(), e.data(), 1, out.data(), out.size()),
               K3RT_INVALID_ARGUMENT, "holds 32 floats", "2 rows");
  EXPECT_ERROR(k3rt_session_step(s.get(), e.data(), 1, nullptr, 0),
               K3RT_INVALID_ARGUMENT, "logits_out");
  expectUntouched();
}

// 24. Concurrent calls on one session.
TEST_F(BadCallTest, ConcurrentEntryIsRejected) {
  struct Gate {
    std::atomic<bool> entered{false}, release{false};
  } gate;
  setFakeForwardHook(
      [](void *user) {
        auto *g = static_cast<Gate *>(user);
        g->entered = true;
        while (!g->release)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      &gate);
  k3rt_status *inThread = nullptr;
  std::thread worker([&] {
    std::vector<float> out(FAKE_VOCAB);
    k3rt_step_entry e = {1, 1, ok, K3RT_LOGITS_LAST};
    inThread = k3rt_session_step(s.get(), &e, 1, out.data(), out.size());
  });
  while (!gate.entered)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The worker is inside k3_forward, holding the session.
  int64_t n;
  EXPECT_ERROR(k3rt_sequence_add(s.get(), 9), K3RT_FAILED_PRECONDITION,
               "in use by another call");
  EXPECT_ERROR(k3rt_sequence_length(s.get(), 1, &n), K3RT_FAILED_PRECONDITION);
  EXPECT_ERROR(step({{2, 1, ok, K3RT_LOGITS_LAST}}), K3RT_FAILED_PRECONDITION,
               "k3rt_session_step");
  gate.release = true;
  worker.join();
  setFakeForwardHook(nullptr, nullptr);
  EXPECT_OK(inThread);
  EXPECT_EQ(s.length(1), 6);
  EXPECT_EQ(s.length(2), 3);
}

} // namespace
