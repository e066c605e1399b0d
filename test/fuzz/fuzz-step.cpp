//===- fuzz-step.cpp - libFuzzer target: the k3rt step API ----------------===//
//
// Drives a session of a real k3c-compiled k3-tiny library (K3_FUZZ_LIB, its
// weights in K3_FUZZ_WEIGHTS) with the call sequence the input encodes:
// add, add with prefix, remove, fork, fork_at, step (prefill, decode,
// verify; several entries), rollback, info, read_state, match_prefix,
// drop_snapshots, with random ids, lengths, positions and tokens (in and out
// of the vocabulary). Every call either succeeds or returns a status with a
// message; a shadow of each sequence's length must agree with the runtime
// after every call. A crash, a sanitizer report or a disagreement is a
// finding.
//
//===----------------------------------------------------------------------===//

#include "k3rt/k3rt.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace {

k3rt_library *lib;
k3rt_weights *weights;
int64_t vocab;

[[noreturn]] void fail(const char *what) {
  std::fprintf(stderr, "fuzz-step: %s\n", what);
  std::abort();
}

/// True if OK; a failure must carry a message.
bool ok(k3rt_status *s) {
  if (!s)
    return true;
  const char *m = k3rt_status_message(s);
  if (k3rt_status_code(s) == K3RT_OK || !m || !*m)
    fail("an error status without a message");
  k3rt_status_free(s);
  return false;
}

struct Input {
  const uint8_t *p, *end;
  bool empty() const { return p >= end; }
  uint8_t u8() { return p < end ? *p++ : 0; }
  int64_t id() { return int64_t(u8() % 7) - 1; } // -1 .. 5
  /// Mostly small, sometimes negative or huge.
  int64_t len() {
    uint8_t b = u8();
    if (b < 200)
      return b % 12;
    if (b < 230)
      return -int64_t(b % 4) - 1;
    return int64_t(1) << (b % 63);
  }
  int32_t token() {
    uint8_t b = u8();
    if (b < 240)
      return int32_t((b * 7 + u8()) % vocab);
    switch (b % 4) {
    case 0: return -1;
    case 1: return int32_t(vocab);
    case 2: return INT32_MAX;
    default: return INT32_MIN;
    }
  }
};

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  const char *libPath = std::getenv("K3_FUZZ_LIB");
  const char *wPath = std::getenv("K3_FUZZ_WEIGHTS");
  if (!libPath || !wPath)
    fail("set K3_FUZZ_LIB and K3_FUZZ_WEIGHTS (a k3-tiny library and its weights)");
  if (!ok(k3rt_library_open(libPath, &lib)))
    fail("cannot open K3_FUZZ_LIB");
  if (!ok(k3rt_weights_load(lib, wPath, nullptr, &weights)))
    fail("cannot load K3_FUZZ_WEIGHTS");
  k3rt_model_info info{};
  info.struct_size = sizeof(info);
  if (!ok(k3rt_library_get_info(lib, &info)))
    fail("model info");
  vocab = info.vocab_size;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Input in{data, data + size};
  k3rt_session_options o{};
  o.struct_size = sizeof(o);
  uint8_t mode = in.u8();
  o.max_sequences = 1 + mode % 4;
  o.max_context = 48;
  o.num_pages = (mode & 16) ? 6 : 0;
  o.state_budget_bytes = uint64_t(8) << 20;
  if (mode & 32) {
    o.snapshot_interval = 4;
    o.snapshot_slots = 4;
    o.max_verify_tokens = (mode & 64) ? 4 : 0;
  }
  k3rt_session *s = nullptr;
  if (!ok(k3rt_session_create(lib, weights, &o, &s)))
    return 0;

  std::map<int64_t, int64_t> length; // the shadow
  auto expectLength = [&](int64_t id) {
    int64_t n = -1;
    bool live = ok(k3rt_sequence_length(s, id, &n));
    auto it = length.find(id);
    if (live != (it != length.end()) || (live && n != it->second))
      fail("sequence length disagrees with the shadow");
  };

  int64_t budget = 160; // tokens stepped per input
  for (int ops = 0; !in.empty() && ops < 64; ++ops) {
    switch (in.u8() % 11) {
    case 0: {
      int64_t id = in.id();
      if (ok(k3rt_sequence_add(s, id)))
        length[id] = 0;
      expectLength(id);
      break;
    }
    case 1: {
      int64_t id = in.id();
      std::vector<int32_t> t(size_t(in.u8() % 16));
      for (int32_t &x : t)
        x = in.token();
      int64_t reused = -1;
      if (ok(k3rt_sequence_add_with_prefix(s, id, t.data(), int64_t(t.size()), &reused))) {
        if (reused < 0 || reused > int64_t(t.size()))
          fail("reused outside [0, n]");
        length[id] = reused;
      }
      expectLength(id);
      break;
    }
    case 2: {
      int64_t id = in.id();
      if (ok(k3rt_sequence_remove(s, id)))
        length.erase(id);
      expectLength(id);
      break;
    }
    case 3: {
      int64_t p = in.id(), c = in.id();
      if (ok(k3rt_sequence_fork(s, p, c)))
        length[c] = length.at(p);
      expectLength(c);
      break;
    }
    case 4: {
      int64_t p = in.id(), c = in.id(), pos = in.len() - 1;
      if (ok(k3rt_sequence_fork_at(s, p, c, pos)))
        length[c] = pos < 0 ? length.at(p) : pos;
      expectLength(p);
      expectLength(c);
      break;
    }
    case 5: {
      size_t n = 1 + in.u8() % 3;
      std::vector<std::vector<int32_t>> toks(n);
      std::vector<k3rt_step_entry> e(n);
      for (size_t i = 0; i < n; ++i) {
        int64_t len = in.len();
        size_t real = size_t(len > 0 && len < 16 ? len : 0);
        toks[i].resize(real);
        for (int32_t &x : toks[i])
          x = in.token();
        uint8_t m = in.u8();
        e[i] = {in.id(), len, real ? toks[i].data() : nullptr,
                int32_t(m % 3) | ((m & 8) ? K3RT_STEP_VERIFY : 0)};
        if (len > 16) // a length the tokens do not back: must be rejected
          e[i].tokens = nullptr;
      }
      int64_t total = 0;
      for (auto &x : e)
        total += x.n_tokens > 0 && x.n_tokens < 16 ? x.n_tokens : 0;
      if (total > budget)
        break;
      budget -= total;
      size_t rows = k3rt_step_logits_rows(e.data(), e.size());
      size_t count = rows * size_t(vocab);
      if (rows < 64 && (in.u8() & 7) == 0 && count)
        --count; // too small a buffer must be rejected
      std::vector<float> logits(rows < 64 ? rows * size_t(vocab) : 0);
      if (ok(k3rt_session_step(s, e.data(), e.size(), logits.data(),
                               rows < 64 ? count : 0))) {
        for (auto &x : e)
          length.at(x.seq_id) += x.n_tokens;
      }
      for (auto &x : e)
        expectLength(x.seq_id);
      break;
    }
    case 6: {
      int64_t id = in.id(), n = in.len();
      if (ok(k3rt_sequence_rollback(s, id, n)))
        length.at(id) -= n;
      expectLength(id);
      break;
    }
    case 7: {
      int64_t id = in.id();
      k3rt_sequence_info si{};
      si.struct_size = sizeof(si);
      if (ok(k3rt_sequence_get_info(s, id, &si)) && si.length != length.at(id))
        fail("sequence info length disagrees with the shadow");
      k3rt_session_info info{};
      info.struct_size = sizeof(info);
      if (!ok(k3rt_session_get_info(s, &info)))
        fail("session info");
      if (info.free_pages < 0 || info.free_pages > info.num_pages ||
          info.num_sequences != int64_t(length.size()))
        fail("session info disagrees");
      break;
    }
    case 8: {
      static const char *groups[] = {"kda", "conv", "mla", "nope", ""};
      int64_t id = in.id(), layer = int64_t(in.u8() % 10) - 1;
      std::vector<float> out(size_t(in.u8()) * 64);
      k3rt_state_shape sh{};
      sh.struct_size = sizeof(sh);
      ok(k3rt_sequence_read_state(s, id, groups[in.u8() % 5], layer, out.data(),
                                  out.size(), &sh));
      break;
    }
    case 9: {
      std::vector<int32_t> t(size_t(in.u8() % 16));
      for (int32_t &x : t)
        x = in.token();
      int64_t reusable = -1;
      if (ok(k3rt_session_match_prefix(s, t.data(), int64_t(t.size()), &reusable)) &&
          (reusable < 0 || reusable > int64_t(t.size())))
        fail("reusable outside [0, n]");
      break;
    }
    case 10:
      if (!ok(k3rt_session_drop_snapshots(s)))
        fail("drop_snapshots failed");
      break;
    }
  }
  k3rt_session_release(s);
  return 0;
}
