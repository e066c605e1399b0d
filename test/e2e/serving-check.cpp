//===- serving-check.cpp - batching and fork on a real compiled model -----===//
//
// Drives k3rt with a k3c library and its weights:
//  * two sequences batched in the same steps (a prefill chunk of one next
//    to a decode token of the other) give the logits each gives alone;
//  * a sequence forked mid-page continues exactly like a fresh sequence fed
//    the same tokens, and the parent is not disturbed by the child;
//  * a decode batch (the decode entries of a step run as one call, each
//    token its own sequence: docs/ABI.md) gives the logits and states of
//    one call per entry (K3RT_SEPARATE_DECODE=1), for sequences of
//    different lengths and pages, next to a prefill chunk in the same step;
//  * two sessions driven from two threads at once (k3rt.h: distinct
//    sessions may run concurrently; on a GPU their calls take turns) give
//    the logits each gives alone.
// Chunking is the same in the runs compared, so the logits must be equal
// bit for bit. Prints the differences and PASS or FAIL.
//
//===----------------------------------------------------------------------===//

#include "k3rt/k3rt.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(k3rt_status *s, const char *what) {
  std::fprintf(stderr, "serving-check: %s: %s\n", what, k3rt_status_message(s));
  std::exit(2);
}
#define CHECK(call, what)                                                      \
  do {                                                                         \
    if (k3rt_status *s_ = (call))                                              \
      die(s_, what);                                                           \
  } while (0)

struct Model {
  k3rt_library *lib = nullptr;
  k3rt_weights *weights = nullptr;
  int64_t vocab = 0;
};

k3rt_session *newSession(Model &m) {
  k3rt_session_options o{};
  o.struct_size = sizeof(o);
  o.max_sequences = 16;
  o.state_budget_bytes = uint64_t(256) << 20;
  k3rt_session *s = nullptr;
  CHECK(k3rt_session_create(m.lib, m.weights, &o, &s), "session");
  return s;
}

using Chunk = std::vector<int32_t>;
using Logits = std::vector<float>;

/// Runs `entries` (seq id, chunk) as one step, each asking for its last row.
std::vector<Logits> step(Model &m, k3rt_session *s,
                         const std::vector<std::pair<int64_t, Chunk>> &work) {
  std::vector<k3rt_step_entry> entries;
  for (const auto &[id, chunk] : work)
    entries.push_back({id, (int64_t)chunk.size(), chunk.data(), K3RT_LOGITS_LAST});
  std::vector<float> out(entries.size() * m.vocab);
  CHECK(k3rt_session_step(s, entries.data(), entries.size(), out.data(), out.size()),
        "step");
  std::vector<Logits> rows;
  for (size_t i = 0; i < entries.size(); ++i)
    rows.emplace_back(out.begin() + i * m.vocab, out.begin() + (i + 1) * m.vocab);
  return rows;
}

double maxDiff(const std::vector<Logits> &a, const std::vector<Logits> &b) {
  if (a.size() != b.size())
    return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j)
      d = std::fmax(d, std::fabs(double(a[i][j]) - double(b[i][j])));
  return d;
}

Chunk seqTokens(int n, int seed, int64_t vocab) {
  Chunk c;
  for (int i = 0; i < n; ++i)
    c.push_back(int32_t((seed * 131 + i * 37 + 11) % vocab));
  return c;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: serving-check LIB WEIGHTS\n");
    return 2;
  }
  Model m;
  CHECK(k3rt_library_open(argv[1], &m.lib), "open library");
  CHECK(k3rt_weights_load(m.lib, argv[2], nullptr, &m.weights), "load weights");
  k3rt_model_info info{};
  info.struct_size = sizeof(info);
  CHECK(k3rt_library_get_info(m.lib, &info), "model info");
  m.vocab = info.vocab_size;

  // A: sequence 1 (prefill 10 = 6 + 4, then decodes) and sequence 2
  // (prefill 7 = 3 + 4, then decodes), alone and then batched.
  Chunk a = seqTokens(10, 1, m.vocab), b = seqTokens(7, 2, m.vocab);
  Chunk a1(a.begin(), a.begin() + 6), a2(a.begin() + 6, a.end());
  Chunk b1(b.begin(), b.begin() + 3), b2(b.begin() + 3, b.end());
  std::vector<Logits> aloneA, aloneB, batched;
  {
    k3rt_session *s = newSession(m);
    CHECK(k3rt_sequence_add(s, 1), "add");
    for (const Chunk &c : {a1, a2, Chunk{5}, Chunk{6}})
      aloneA.push_back(step(m, s, {{1, c}})[0]);
    k3rt_session_release(s);
  }
  {
    k3rt_session *s = newSession(m);
    CHECK(k3rt_sequence_add(s, 2), "add");
    for (const Chunk &c : {b1, b2, Chunk{7}, Chunk{8}})
      aloneB.push_back(step(m, s, {{2, c}})[0]);
    k3rt_session_release(s);
  }
  std::vector<Logits> batchA, batchB;
  {
    k3rt_session *s = newSession(m);
    CHECK(k3rt_sequence_add(s, 1), "add");
    CHECK(k3rt_sequence_add(s, 2), "add");
    // Steps mix a prefill chunk of one sequence with another's chunk or
    // decode token; sequence 2 starts one step later.
    auto r = step(m, s, {{1, a1}});
    batchA.push_back(r[0]);
    r = step(m, s, {{2, b1}, {1, a2}});
    batchB.push_back(r[0]);
    batchA.push_back(r[1]);
    r = step(m, s, {{1, Chunk{5}}, {2, b2}});
    batchA.push_back(r[0]);
    batchB.push_back(r[1]);
    r = step(m, s, {{2, Chunk{7}}, {1, Chunk{6}}});
    batchB.push_back(r[0]);
    batchA.push_back(r[1]);
    r = step(m, s, {{2, Chunk{8}}});
    batchB.push_back(r[0]);
    k3rt_session_release(s);
  }
  double dBatch = std::fmax(maxDiff(aloneA, batchA), maxDiff(aloneB, batchB));
  std::printf("batched vs alone: max abs diff %g over %zu rows\n", dBatch,
              batchA.size() + batchB.size());

  // B: fork at length 11 (mid-page for any page size > 11 or not a
  // divisor), then parent and child continue with different tokens.
  Chunk p = seqTokens(9, 3, m.vocab);
  std::vector<Logits> child, fresh, parentAfter, parentAlone;
  {
    k3rt_session *s = newSession(m);
    CHECK(k3rt_sequence_add(s, 10), "add");
    step(m, s, {{10, p}});
    step(m, s, {{10, Chunk{1}}});
    step(m, s, {{10, Chunk{2}}});
    CHECK(k3rt_sequence_fork(s, 10, 11), "fork");
    for (int32_t t : {3, 4, 5}) {
      auto r = step(m, s, {{11, Chunk{t}}, {10, Chunk{int32_t(t + 20)}}});
      child.push_back(r[0]);
      parentAfter.push_back(r[1]);
    }
    k3rt_session_release(s);
  }
  {
    k3rt_session *s = newSession(m);
    CHECK(k3rt_sequence_add(s, 12), "add");
    CHECK(k3rt_sequence_add(s, 13), "add");
    step(m, s, {{12, p}, {13, p}});
    step(m, s, {{12, Chunk{1}}, {13, Chunk{1}}});
    step(m, s, {{12, Chunk{2}}, {13, Chunk{2}}});
    for (int32_t t : {3, 4, 5}) {
      fresh.push_back(step(m, s, {{12, Chunk{t}}})[0]);
      parentAlone.push_back(step(m, s, {{13, Chunk{int32_t(t + 20)}}})[0]);
    }
    k3rt_session_release(s);
  }
  double dFork = maxDiff(child, fresh), dParent = maxDiff(parentAfter, parentAlone);
  std::printf("forked child vs fresh sequence: max abs diff %g\n", dFork);
  std::printf("parent after fork vs undisturbed: max abs diff %g\n", dParent);

  // C: eleven sequences of different lengths decode together for four
  // steps (one of them also prefilling a chunk in the first), batched and
  // then with one call per decode entry; logits and every layer's state
  // compared. Eleven: more than one block of 8 tokens where a kernel takes
  // tokens 8 at a time (the MLA decode's q̂).
  const int kSeqs = 11;
  const int lengths[kSeqs] = {1, 3, 9, 17, 30, 2, 5, 12, 21, 8, 40};
  auto runC = [&](bool separate, std::vector<Logits> &rows,
                  std::vector<float> &states) {
    if (separate)
      setenv("K3RT_SEPARATE_DECODE", "1", 1);
    k3rt_session *s = newSession(m);
    unsetenv("K3RT_SEPARATE_DECODE");
    for (int i = 0; i < kSeqs; ++i) {
      CHECK(k3rt_sequence_add(s, 30 + i), "add");
      Chunk c = seqTokens(lengths[i], 40 + i, m.vocab);
      step(m, s, {{30 + i, c}});
    }
    for (int k = 0; k < 4; ++k) {
      std::vector<std::pair<int64_t, Chunk>> work;
      for (int i = 0; i < kSeqs; ++i)
        work.push_back({30 + i, Chunk{int32_t((7 * k + 13 * i + 1) % m.vocab)}});
      if (k == 0) { // a prefill chunk of another sequence in the same step
        CHECK(k3rt_sequence_add(s, 60), "add");
        work.insert(work.begin() + 2, {60, seqTokens(6, 70, m.vocab)});
      }
      for (Logits &r : step(m, s, work))
        rows.push_back(std::move(r));
    }
    for (int i = 0; i < kSeqs; ++i)
      for (int64_t l = 0; l < info.num_layers; ++l)
        for (const char *g : {"kda.recurrent", "kda.conv_q", "mla.latent"}) {
          k3rt_state_shape shape{};
          shape.struct_size = sizeof(shape);
          if (k3rt_status *st =
                  k3rt_sequence_read_state(s, 30 + i, g, l, nullptr, 0, &shape)) {
            k3rt_status_free(st); // not a layer of this group
            continue;
          }
          size_t at = states.size();
          states.resize(at + size_t(shape.count));
          CHECK(k3rt_sequence_read_state(s, 30 + i, g, l, states.data() + at,
                                         size_t(shape.count), nullptr),
                "read state");
        }
    k3rt_session_release(s);
  };
  std::vector<Logits> batchedRows, separateRows;
  std::vector<float> batchedStates, separateStates;
  runC(false, batchedRows, batchedStates);
  runC(true, separateRows, separateStates);
  double dDecode = maxDiff(batchedRows, separateRows);
  double dStates = maxDiff({batchedStates}, {separateStates});
  std::printf("decode batch of %d vs one call each: max abs diff %g over %zu "
              "rows, states %g over %zu values\n",
              kSeqs, dDecode, batchedRows.size(), dStates,
              batchedStates.size());

  // D: sequences A and B of part A in two sessions, each driven by its own
  // thread, several rounds at once; every round must give A's and B's
  // logits alone, bit for bit.
  constexpr int kRounds = 6;
  std::vector<Logits> concA, concB;
  auto drive = [&](int64_t id, const std::vector<Chunk> &chunks,
                   std::vector<Logits> &out) {
    for (int round = 0; round < kRounds; ++round) {
      k3rt_session *s = newSession(m);
      CHECK(k3rt_sequence_add(s, id), "add");
      for (const Chunk &c : chunks)
        out.push_back(step(m, s, {{id, c}})[0]);
      k3rt_session_release(s);
    }
  };
  {
    std::thread ta(drive, 1, std::vector<Chunk>{a1, a2, Chunk{5}, Chunk{6}},
                   std::ref(concA));
    std::thread tb(drive, 2, std::vector<Chunk>{b1, b2, Chunk{7}, Chunk{8}},
                   std::ref(concB));
    ta.join();
    tb.join();
  }
  std::vector<Logits> wantA, wantB;
  for (int round = 0; round < kRounds; ++round) {
    wantA.insert(wantA.end(), aloneA.begin(), aloneA.end());
    wantB.insert(wantB.end(), aloneB.begin(), aloneB.end());
  }
  double dConc = std::fmax(maxDiff(wantA, concA), maxDiff(wantB, concB));
  std::printf("two sessions from two threads vs alone: max abs diff %g over "
              "%zu rows\n",
              dConc, concA.size() + concB.size());

  k3rt_weights_release(m.weights);
  k3rt_library_release(m.lib);
  bool ok = dBatch == 0 && dFork == 0 && dParent == 0 && dDecode == 0 &&
            dStates == 0 && !batchedStates.empty() && dConc == 0;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
