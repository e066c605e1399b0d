//===- serve.cpp - serve two sequences with k3rt (C++) ---------------------===//
//
// The C++ twin of serve.c, written against the versioned function table
// (k3rt_get_api), the way an application that loads k3rt with dlopen would
// call it, with RAII owners for the handles. Same scenario, same output:
// sequence 0 decodes greedily; sequence 1, forked after the prompt, joins
// a few steps later and decodes speculatively (verify steps + rollback of
// rejected drafts; the drafts: sequence 0's tokens, every 4th one wrong).
//
//   serve_cpp WEIGHTS_DIR [N_TOKENS]
//
//===----------------------------------------------------------------------===//

#include <k3rt/k3rt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace {

constexpr int kDrafts = 3;
const k3rt_api *api = nullptr;

void check(k3rt_status *s, const char *what) {
  if (!s)
    return;
  std::fprintf(stderr, "serve_cpp: %s: %s: %s\n", what,
               api->code_name(api->status_code(s)), api->status_message(s));
  api->status_free(s);
  std::exit(1);
}

int32_t argmax(const float *row, int64_t n) {
  return int32_t(std::max_element(row, row + n) - row);
}

constexpr int kHeadStart = 12; // steps sequence 0 runs alone

/// The draft for position `pos` of sequence 1, as in serve.c.
int32_t draft(const std::vector<int32_t> &hist0, size_t pos, int32_t last,
              int64_t vocab) {
  if (pos >= hist0.size())
    return last;
  return pos % 4 == 0 ? int32_t((hist0[pos] + 1) % vocab) : hist0[pos];
}

void print(const char *label, const std::vector<int32_t> &t, size_t from,
           size_t n) {
  std::printf("%s:", label);
  for (size_t i = from; i < from + n; ++i)
    std::printf(" %d", t[i]);
  std::printf("\n");
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: serve_cpp WEIGHTS_DIR [N_TOKENS]\n");
    return 2;
  }
  int want = argc > 2 ? std::atoi(argv[2]) : 24;
  if (want < 1 || want > 128)
    want = 24;
  // NULL if the runtime is older than this header.
  api = k3rt_get_api(K3RT_API_VERSION);
  if (!api) {
    std::fprintf(stderr, "serve_cpp: the k3rt runtime is older than API "
                         "version %d\n", K3RT_API_VERSION);
    return 1;
  }

  k3rt_library *rawLib = nullptr;
  check(api->library_open(nullptr, &rawLib), "open the linked model");
  std::unique_ptr<k3rt_library, void (*)(k3rt_library *)> lib(
      rawLib, api->library_release);
  k3rt_model_info info{};
  info.struct_size = sizeof(info);
  check(api->library_get_info(lib.get(), &info), "model info");
  const int64_t V = info.vocab_size;
  std::printf("model %s: %lld layers, vocab %lld\n", info.name,
              (long long)info.num_layers, (long long)V);

  k3rt_weights *rawWeights = nullptr;
  check(api->weights_load(lib.get(), argv[1], nullptr, &rawWeights),
        "load weights");
  std::unique_ptr<k3rt_weights, void (*)(k3rt_weights *)> weights(
      rawWeights, api->weights_release);

  k3rt_session_options o{};
  o.struct_size = sizeof(o);
  o.max_sequences = 2;
  o.state_budget_bytes = uint64_t(64) << 20;
  o.snapshot_slots = kDrafts + 1;
  o.max_verify_tokens = kDrafts + 1;
  k3rt_session *rawSession = nullptr;
  check(api->session_create(lib.get(), weights.get(), &o, &rawSession),
        "session");
  std::unique_ptr<k3rt_session, void (*)(k3rt_session *)> session(
      rawSession, api->session_release);
  k3rt_session *s = session.get();

  const std::vector<int32_t> prompt = {1, 17, 42, 99, 256, 311, 7, 64};
  std::vector<float> logits(size_t(V) * (kDrafts + 2));
  check(api->sequence_add(s, 0), "add");
  k3rt_step_entry e = {0, int64_t(prompt.size()), prompt.data(),
                       K3RT_LOGITS_LAST};
  check(api->session_step(s, &e, 1, logits.data(), logits.size()), "prefill");
  check(api->sequence_fork(s, 0, 1), "fork");
  std::vector<int32_t> hist0 = prompt, hist1 = prompt;
  int32_t last0 = argmax(logits.data(), V), last1 = last0;
  print("prompt", prompt, 0, prompt.size());

  const size_t np = prompt.size();
  int steps = 0, accepted = 0, rolled = 0;
  while (hist0.size() - np < size_t(want) || hist1.size() - np < size_t(want)) {
    std::vector<k3rt_step_entry> batch;
    std::vector<int32_t> verify;
    bool run0 = hist0.size() - np < size_t(want);
    bool run1 = hist1.size() - np < size_t(want) && steps >= kHeadStart;
    if (run0)
      batch.push_back({0, 1, &last0, K3RT_LOGITS_LAST});
    const int row1 = int(batch.size());
    if (run1) {
      verify.push_back(last1);
      for (int i = 1; i <= kDrafts; ++i)
        verify.push_back(draft(hist0, hist1.size() + size_t(i), last1, V));
      batch.push_back({1, int64_t(verify.size()), verify.data(),
                       K3RT_LOGITS_ALL | K3RT_STEP_VERIFY});
    }
    check(api->session_step(s, batch.data(), batch.size(), logits.data(),
                            logits.size()),
          "step");
    ++steps;
    if (run0) {
      hist0.push_back(last0);
      last0 = argmax(logits.data(), V);
    }
    if (!run1)
      continue;
    auto row = [&](int i) { return logits.data() + (row1 + i) * V; };
    hist1.push_back(last1);
    int j = 0;
    while (j < kDrafts && verify[size_t(1 + j)] == argmax(row(j), V))
      hist1.push_back(verify[size_t(1 + j++)]);
    last1 = argmax(row(j), V);
    accepted += j;
    rolled += kDrafts - j;
    check(api->sequence_rollback(s, 1, kDrafts - j), "rollback");
  }
  print("sequence 0 (greedy)", hist0, np, size_t(want));
  print("sequence 1 (fork, speculative)", hist1, np, size_t(want));
  std::printf("%d steps; sequence 1: %d drafts accepted, %d rolled back\n",
              steps, accepted, rolled);
  bool same = std::equal(hist0.begin() + long(np),
                         hist0.begin() + long(np) + want,
                         hist1.begin() + long(np));
  std::printf("identical: %s\n", same ? "yes" : "no");
  return same ? 0 : 1;
}
