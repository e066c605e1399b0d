//===- k3-run.cpp - run a k3c-compiled library on a prompt ----------------===//
//
//   k3-run LIB (--weights PATH | --random-weights SEED [--config CONFIG])
//          --prompt-ids 1,2,3 --max-new-tokens N [--decode-ids 5,6,7]
//          [--chunks 3,1,4] [--batch B] [--bench]
//          [--logits-out FILE.npy] [--state-out FILE.npz]
//
// Opens the library, loads the weights, prefills the prompt (in --chunks
// sizes, cycled, if given), then decodes N tokens: each decode step feeds
// one token (the argmax of the previous logits, or the next --decode-ids
// entry) and returns its logits. --logits-out gets float32 [1 + N, vocab]:
// row 0 is the last prompt position, row i the logits after feeding the
// i-th decode token. --state-out gets every state group of every layer
// right after the prefill, as float32 arrays named "<group>.<layer>" (the
// MLA latent as [prompt_len, width]). --batch B runs B identical sequences
// in every step (outputs are taken from the first). Errors print
// "k3-run: error: <message>" and exit 1.
//
// --random-weights SEED alone has the library make its weights from the
// seed (k3rt_weights_generate: in device memory for a GPU library, no file
// and no host copy). With --config CONFIG it instead runs `k3-weights CONFIG
// --seed SEED -o DIR` (the k3-weights next to this executable, or
// $K3RUN_K3_WEIGHTS) into a temporary directory, loads it and deletes it:
// the checkpoint the NumPy reference reads.
//
//===----------------------------------------------------------------------===//

#include "Npy.h"

#include "k3rt/k3rt.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

using namespace k3run;
using json = nlohmann::json;

namespace {

struct Options {
  std::string library;
  std::string weights;
  bool randomWeights = false;
  uint64_t seed = 0;
  std::string config;
  std::vector<int32_t> prompt;
  int64_t maxNewTokens = -1;
  std::vector<int32_t> decodeIds;
  bool haveDecodeIds = false;
  std::vector<int64_t> chunks;
  int64_t batch = 1;
  bool bench = false;
  std::string logitsOut;
  std::string stateOut;
};

[[noreturn]] void fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

void fail(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::fprintf(stderr, "k3-run: error: ");
  std::vfprintf(stderr, fmt, args);
  std::fprintf(stderr, "\n");
  va_end(args);
  std::exit(1);
}

/// Exits with the status message on error.
void check(k3rt_status *status) {
  if (!status)
    return;
  std::fprintf(stderr, "k3-run: error: %s\n", k3rt_status_message(status));
  k3rt_status_free(status);
  std::exit(1);
}

const char *usage =
    "usage: k3-run LIB (--weights PATH | --random-weights SEED [--config "
    "CONFIG])\n"
    "              --prompt-ids 1,2,3 --max-new-tokens N [--decode-ids "
    "5,6,7]\n"
    "              [--chunks 3,1,4] [--batch B] [--bench]\n"
    "              [--logits-out FILE.npy] [--state-out FILE.npz]\n";

bool parseInt(const std::string &s, int64_t &out) {
  if (s.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end)
    return false;
  out = v;
  return true;
}

std::vector<int64_t> parseList(const std::string &flag, const std::string &s) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t v;
    if (!parseInt(item, v))
      fail("%s: '%s' is not a comma-separated list of integers", flag.c_str(),
           s.c_str());
    out.push_back(v);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return out;
}

std::vector<int32_t> parseIds(const std::string &flag, const std::string &s) {
  std::vector<int32_t> ids;
  for (int64_t v : parseList(flag, s)) {
    // Range against the vocabulary is the runtime's check; here only i32.
    if (v < INT32_MIN || v > INT32_MAX)
      fail("%s: %lld does not fit a token id", flag.c_str(), (long long)v);
    ids.push_back(int32_t(v));
  }
  return ids;
}

Options parseArgs(int argc, char **argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], value;
    bool inlineValue = false;
    if (a.rfind("--", 0) == 0) {
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        inlineValue = true;
      }
    }
    auto next = [&]() -> std::string {
      if (inlineValue)
        return value;
      if (i + 1 >= args.size())
        fail("%s needs a value", a.c_str());
      return args[++i];
    };
    int64_t n;
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    } else if (a == "--weights") {
      o.weights = next();
    } else if (a == "--random-weights") {
      std::string v = next();
      if (!parseInt(v, n) || n < 0)
        fail("--random-weights: '%s' is not a non-negative integer seed",
             v.c_str());
      o.randomWeights = true;
      o.seed = uint64_t(n);
    } else if (a == "--config") {
      o.config = next();
    } else if (a == "--prompt-ids") {
      o.prompt = parseIds(a, next());
    } else if (a == "--max-new-tokens") {
      std::string v = next();
      if (!parseInt(v, n) || n < 0)
        fail("--max-new-tokens: '%s' is not a non-negative integer", v.c_str());
      o.maxNewTokens = n;
    } else if (a == "--decode-ids") {
      o.decodeIds = parseIds(a, next());
      o.haveDecodeIds = true;
    } else if (a == "--chunks") {
      o.chunks = parseList(a, next());
      for (int64_t c : o.chunks)
        if (c <= 0)
          fail("--chunks: chunk sizes must be positive");
    } else if (a == "--batch") {
      std::string v = next();
      if (!parseInt(v, n) || n <= 0 || n > INT32_MAX)
        fail("--batch: '%s' is not a positive integer", v.c_str());
      o.batch = n;
    } else if (a == "--bench") {
      o.bench = true;
    } else if (a == "--logits-out") {
      o.logitsOut = next();
    } else if (a == "--state-out") {
      o.stateOut = next();
    } else if (a.rfind("-", 0) == 0) {
      fail("unknown option '%s'\n%s", a.c_str(), usage);
    } else if (o.library.empty()) {
      o.library = a;
    } else {
      fail("unexpected argument '%s'\n%s", a.c_str(), usage);
    }
  }
  if (o.library.empty())
    fail("no library given\n%s", usage);
  if (o.weights.empty() == !o.randomWeights)
    fail("give exactly one of --weights PATH and --random-weights SEED");
  if (!o.config.empty() && !o.randomWeights)
    fail("--config is only used with --random-weights");
  if (o.prompt.empty())
    fail("--prompt-ids is required and must not be empty");
  if (o.maxNewTokens < 0)
    o.maxNewTokens = o.haveDecodeIds ? int64_t(o.decodeIds.size()) : 0;
  if (o.haveDecodeIds && int64_t(o.decodeIds.size()) < o.maxNewTokens)
    fail("--decode-ids has %zu ids, fewer than --max-new-tokens %lld",
         o.decodeIds.size(), (long long)o.maxNewTokens);
  return o;
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

struct Progress {
  std::chrono::steady_clock::time_point last;
  bool printed = false;
};

void onProgress(void *user, const char *stage, uint64_t done, uint64_t total) {
  auto *p = static_cast<Progress *>(user);
  auto now = std::chrono::steady_clock::now();
  // Only for checkpoints with many parts, at most once a second per stage
  // and always at the end of a stage.
  if (total < 4)
    return;
  if (done != total && p->printed && now - p->last < std::chrono::seconds(1))
    return;
  p->last = now;
  p->printed = true;
  std::fprintf(stderr, "k3-run: %s %" PRIu64 "/%" PRIu64 "\n", stage, done,
               total);
}

std::string selfDirectory() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return ".";
  buf[n] = '\0';
  std::string p = buf;
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

void removeTree(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..")
        continue;
      std::string path = dir + "/" + name;
      if (::unlink(path.c_str()) != 0)
        removeTree(path);
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

/// Runs k3-weights into a fresh temporary directory and returns it.
std::string generateWeights(const Options &o) {
  const char *env = std::getenv("K3RUN_K3_WEIGHTS");
  std::string tool = env && *env ? env : selfDirectory() + "/k3-weights";
  if (::access(tool.c_str(), X_OK) != 0)
    fail("--random-weights needs the k3-weights tool, not found at %s (set "
         "K3RUN_K3_WEIGHTS to its path)",
         tool.c_str());
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/k3-run-weights-XXXXXX";
  std::vector<char> dir(pattern.begin(), pattern.end());
  dir.push_back('\0');
  if (!::mkdtemp(dir.data()))
    fail("cannot create a temporary directory %s: %s", pattern.c_str(),
         std::strerror(errno));
  std::string seed = std::to_string(o.seed);
  std::vector<std::string> argvStrings = {tool, o.config, "--seed",
                                          seed, "-o",     dir.data()};
  std::vector<char *> argvPtrs;
  for (std::string &s : argvStrings)
    argvPtrs.push_back(&s[0]);
  argvPtrs.push_back(nullptr);
  pid_t pid;
  if (::posix_spawn(&pid, tool.c_str(), nullptr, nullptr, argvPtrs.data(),
                    environ) != 0)
    fail("cannot run %s", tool.c_str());
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    removeTree(dir.data());
    fail("%s %s --seed %s -o %s failed", tool.c_str(), o.config.c_str(),
         seed.c_str(), dir.data());
  }
  return dir.data();
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

int32_t argmax(const float *row, int64_t n) {
  int64_t best = 0;
  for (int64_t v = 1; v < n; ++v)
    if (row[v] > row[best])
      best = v;
  return int32_t(best);
}

double seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct RunResult {
  std::vector<float> logits; ///< [1 + N, V] of sequence 0
  std::vector<int32_t> generated;
  double prefillSeconds = 0, decodeSeconds = 0;
};

/// Prefill + decode over sequences 0..B-1 (added here, removed at the end
/// unless `keep`). `afterPrefill` runs right after the prefill.
template <typename Fn>
RunResult run(k3rt_session *session, const Options &o, int64_t V,
              Fn afterPrefill) {
  RunResult r;
  int64_t B = o.batch;
  for (int64_t b = 0; b < B; ++b)
    check(k3rt_sequence_add(session, b));
  std::vector<float> out(size_t(B * V));
  std::vector<k3rt_step_entry> entries(static_cast<size_t>(B));

  auto t0 = std::chrono::steady_clock::now();
  size_t at = 0, chunk = 0;
  while (at < o.prompt.size()) {
    size_t n = o.prompt.size() - at;
    if (!o.chunks.empty()) {
      n = std::min<size_t>(n, size_t(o.chunks[chunk % o.chunks.size()]));
      ++chunk;
    }
    bool last = at + n == o.prompt.size();
    for (int64_t b = 0; b < B; ++b)
      entries[size_t(b)] = {b, int64_t(n), o.prompt.data() + at,
                            last ? K3RT_LOGITS_LAST : K3RT_LOGITS_NONE};
    check(k3rt_session_step(session, entries.data(), entries.size(), out.data(),
                            out.size()));
    at += n;
  }
  auto t1 = std::chrono::steady_clock::now();
  r.prefillSeconds = seconds(t0, t1);
  r.logits.assign(out.begin(), out.begin() + V);
  afterPrefill();

  std::vector<int32_t> next(static_cast<size_t>(B));
  auto t2 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.maxNewTokens; ++i) {
    for (int64_t b = 0; b < B; ++b) {
      next[size_t(b)] = o.haveDecodeIds ? o.decodeIds[size_t(i)]
                                        : argmax(&out[size_t(b * V)], V);
      entries[size_t(b)] = {b, 1, &next[size_t(b)], K3RT_LOGITS_LAST};
    }
    r.generated.push_back(next[0]);
    check(k3rt_session_step(session, entries.data(), entries.size(), out.data(),
                            out.size()));
    r.logits.insert(r.logits.end(), out.begin(), out.begin() + V);
  }
  r.decodeSeconds = seconds(t2, std::chrono::steady_clock::now());
  for (int64_t b = 0; b < B; ++b)
    check(k3rt_sequence_remove(session, b));
  return r;
}

/// Every state group and layer of sequence 0, as float32 arrays.
std::vector<NpzMember> readStates(k3rt_session *session,
                                  const std::string &manifestText) {
  std::vector<NpzMember> members;
  json m = json::parse(manifestText, nullptr, false);
  if (m.is_discarded() || !m.is_object())
    fail("the library manifest is not JSON");
  auto state = m.find("state");
  if (state == m.end() || !state->is_object() || !state->contains("groups") ||
      !(*state)["groups"].is_array())
    fail("the library manifest has no state groups");
  for (const json &g : (*state)["groups"]) {
    if (!g.is_object() || !g.contains("kind") || !g["kind"].is_string() ||
        !g.contains("layers") || !g["layers"].is_array())
      fail("the library manifest has a malformed state group");
    std::string kind = g["kind"].get<std::string>();
    for (const json &l : g["layers"]) {
      if (!l.is_number_integer())
        fail("the library manifest has a malformed state group");
      int64_t layer = l.get<int64_t>();
      k3rt_state_shape shape{};
      shape.struct_size = sizeof(shape);
      check(k3rt_sequence_read_state(session, 0, kind.c_str(), layer, nullptr,
                                     0, &shape));
      NpzMember member;
      member.name = kind + "." + std::to_string(layer);
      member.shape.assign(shape.dims, shape.dims + shape.rank);
      member.data.resize(size_t(shape.count));
      check(k3rt_sequence_read_state(session, 0, kind.c_str(), layer,
                                     member.data.data(), member.data.size(),
                                     &shape));
      members.push_back(std::move(member));
    }
  }
  return members;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  check(k3rt_check_api_version(K3RT_API_VERSION));

  k3rt_library *library = nullptr;
  check(k3rt_library_open(o.library.c_str(), &library));
  k3rt_model_info info{};
  info.struct_size = sizeof(info);
  check(k3rt_library_get_info(library, &info));
  int64_t V = info.vocab_size;

  std::string weightsPath = o.weights, tempDir;
  bool generate = o.randomWeights && o.config.empty();
  if (o.randomWeights && !generate)
    weightsPath = tempDir = generateWeights(o);
  Progress progress;
  k3rt_weights_options wopts{};
  wopts.struct_size = sizeof(wopts);
  wopts.progress = onProgress;
  wopts.progress_user = &progress;
  k3rt_weights *weights = nullptr;
  auto loadStart = std::chrono::steady_clock::now();
  k3rt_status *loaded =
      generate ? k3rt_weights_generate(library, o.seed, &wopts, &weights)
               : k3rt_weights_load(library, weightsPath.c_str(), &wopts,
                                   &weights);
  // The mappings stay valid after the files are unlinked.
  if (!tempDir.empty())
    removeTree(tempDir);
  check(loaded);
  double loadSeconds = seconds(loadStart, std::chrono::steady_clock::now());

  // Pools for B sequences of the whole run.
  int64_t context = int64_t(o.prompt.size()) + o.maxNewTokens;
  int64_t pagesPerSequence =
      info.page_size ? (context + info.page_size - 1) / info.page_size : 0;
  k3rt_session_options sopts{};
  sopts.struct_size = sizeof(sopts);
  sopts.max_sequences = int32_t(o.batch);
  sopts.num_pages =
      info.page_size ? std::max<int64_t>(1, pagesPerSequence * o.batch) : 0;
  sopts.state_budget_bytes = uint64_t(o.batch) * info.slot_bytes +
                             uint64_t(sopts.num_pages) * info.page_bytes;
  if (sopts.state_budget_bytes == 0)
    sopts.state_budget_bytes = 1;
  k3rt_session *session = nullptr;
  check(k3rt_session_create(library, weights, &sopts, &session));
  k3rt_session_info sinfo{};
  sinfo.struct_size = sizeof(sinfo);
  check(k3rt_session_get_info(session, &sinfo));
  std::printf("device: %s\n", sinfo.device);

  if (o.bench) // warm-up, untimed
    run(session, o, V, [] {});
  std::vector<NpzMember> states;
  RunResult r = run(session, o, V, [&] {
    if (!o.stateOut.empty())
      states = readStates(session, info.manifest_json);
  });

  std::printf("generated:");
  for (int32_t t : r.generated)
    std::printf(" %d", t);
  std::printf("\n");
  int64_t prefillTokens = int64_t(o.prompt.size()) * o.batch;
  int64_t decodeTokens = o.maxNewTokens * o.batch;
  std::printf("prefill: %lld tokens in %.3f ms, %.1f tokens/s\n",
              (long long)prefillTokens, r.prefillSeconds * 1e3,
              r.prefillSeconds > 0 ? double(prefillTokens) / r.prefillSeconds
                                   : 0.0);
  std::printf("decode: %lld tokens in %.3f ms, %.1f tokens/s\n",
              (long long)decodeTokens, r.decodeSeconds * 1e3,
              r.decodeSeconds > 0 ? double(decodeTokens) / r.decodeSeconds
                                  : 0.0);
  if (o.bench)
    std::printf("bench: batch %lld, weights loaded in %.3f s, %.3f ms per "
                "decode step\n",
                (long long)o.batch, loadSeconds,
                o.maxNewTokens ? r.decodeSeconds * 1e3 / double(o.maxNewTokens)
                               : 0.0);

  if (!o.logitsOut.empty() &&
      !writeFile(o.logitsOut, npyBytes({1 + o.maxNewTokens, V}, r.logits)))
    fail("cannot write %s", o.logitsOut.c_str());
  if (!o.stateOut.empty()) {
    std::string bytes = npzBytes(states);
    if (bytes.empty() || !writeFile(o.stateOut, bytes))
      fail("cannot write %s", o.stateOut.c_str());
  }

  k3rt_session_release(session);
  k3rt_weights_release(weights);
  k3rt_library_release(library);
  return 0;
}
