//===- TestUtil.cpp - helpers for the k3rt tests --------------------------===//

#include "TestUtil.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace k3rt_test {

//===----------------------------------------------------------------------===//
// Status
//===----------------------------------------------------------------------===//

std::string describe(const k3rt_status *s) {
  if (!s)
    return "OK";
  return std::string(k3rt_code_name(k3rt_status_code(s))) + ": " +
         k3rt_status_message(s);
}

::testing::AssertionResult isOk(k3rt_status *raw) {
  Status s(raw);
  if (!s)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected OK, got " << describe(raw);
}

::testing::AssertionResult hasError(k3rt_status *raw, k3rt_code code,
                                    std::vector<std::string> parts) {
  Status s(raw);
  if (!s)
    return ::testing::AssertionFailure()
           << "expected " << k3rt_code_name(code) << ", got OK";
  if (k3rt_status_code(raw) != code)
    return ::testing::AssertionFailure()
           << "expected " << k3rt_code_name(code) << ", got " << describe(raw);
  std::string message = k3rt_status_message(raw);
  for (const std::string &p : parts)
    if (message.find(p) == std::string::npos)
      return ::testing::AssertionFailure()
             << "the message does not contain '" << p << "': " << message;
  return ::testing::AssertionSuccess() << describe(raw);
}

//===----------------------------------------------------------------------===//
// Fake library hooks
//===----------------------------------------------------------------------===//

/// The test's own handle on the fake library, never closed, so that the
/// fixture's counters and hook stay put while k3rt opens and closes it.
static void *fakeHandle() {
  static void *handle = dlopen(K3RT_FAKE_MODEL, RTLD_NOW | RTLD_LOCAL);
  return handle;
}

long fakeForwardCalls() {
  auto fn =
      reinterpret_cast<long (*)()>(dlsym(fakeHandle(), "k3fake_forward_calls"));
  return fn ? fn() : -1;
}

void setFakeForwardHook(void (*hook)(void *), void *user) {
  auto fn = reinterpret_cast<void (*)(void (*)(void *), void *)>(
      dlsym(fakeHandle(), "k3fake_set_forward_hook"));
  if (fn)
    fn(hook, user);
}

std::string fakeManifest() {
  auto fn = reinterpret_cast<const char *(*)()>(
      dlsym(fakeHandle(), "k3fake_builtin_manifest"));
  return fn ? fn() : std::string();
}

k3rt_status *openFakeWithManifest(const std::string &manifest, Library *out) {
  fakeHandle();
  setenv("K3FAKE_MANIFEST", manifest.c_str(), 1);
  k3rt_library *lib = nullptr;
  k3rt_status *s = k3rt_library_open(K3RT_FAKE_MODEL, &lib);
  unsetenv("K3FAKE_MANIFEST");
  if (out)
    out->reset(lib);
  else
    k3rt_library_release(lib);
  return s;
}

Library openFake() {
  EXPECT_NE(fakeHandle(), nullptr) << dlerror();
  k3rt_library *lib = nullptr;
  EXPECT_OK(k3rt_library_open(K3RT_FAKE_MODEL, &lib));
  return Library(lib);
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

static void removeTree(const std::string &path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR *d = opendir(path.c_str())) {
      while (dirent *e = readdir(d)) {
        std::string name = e->d_name;
        if (name != "." && name != "..")
          removeTree(path + "/" + name);
      }
      closedir(d);
    }
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

TempDir::TempDir() {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/k3rt-test-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()))
    dir = buf.data();
  EXPECT_FALSE(dir.empty()) << "mkdtemp failed";
}

TempDir::~TempDir() {
  if (!dir.empty())
    removeTree(dir);
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

std::string readFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static std::string lengthPrefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out;
}

static std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string safetensorsBytes(const std::vector<TensorData> &tensors) {
  std::string header = "{\"__metadata__\": {\"format\": \"pt\"}";
  std::string data;
  for (const TensorData &t : tensors) {
    header += ", " + jsonString(t.name) + ": {\"dtype\": \"" + t.dtype +
              "\", \"shape\": [";
    for (size_t i = 0; i < t.shape.size(); ++i)
      header += (i ? ", " : "") + std::to_string(t.shape[i]);
    header += "], \"data_offsets\": [" + std::to_string(data.size()) + ", " +
              std::to_string(data.size() + t.bytes.size()) + "]}";
    data += t.bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  return lengthPrefix(header.size()) + header + data;
}

std::string rawSafetensors(const std::string &header, const std::string &data) {
  return lengthPrefix(header.size()) + header + data;
}

uint16_t toBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}

float fromBF16(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

//===----------------------------------------------------------------------===//
// The fake model
//===----------------------------------------------------------------------===//

static std::string bf16Bytes(const std::vector<float> &values) {
  std::string out(values.size() * 2, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t b = toBF16(values[i]);
    std::memcpy(&out[2 * i], &b, 2);
  }
  return out;
}

static std::string f32Bytes(const std::vector<float> &values) {
  std::string out(values.size() * 4, '\0');
  if (!values.empty())
    std::memcpy(&out[0], values.data(), out.size());
  return out;
}

static const char *kExperts =
    "language_model.model.layers.1.block_sparse_moe.experts.";

std::vector<TensorData> fakeWeights() {
  std::vector<TensorData> t;
  std::vector<float> embed(FAKE_VOCAB * 4), lmHead(FAKE_VOCAB * 4);
  for (int tok = 0; tok < FAKE_VOCAB; ++tok)
    for (int j = 0; j < 4; ++j) {
      embed[size_t(tok * 4 + j)] = float((tok * 4 + j) % 13) * 0.25f;
      lmHead[size_t(tok * 4 + j)] = float((tok * 3 + j) % 11) * 0.5f;
    }
  t.push_back({"language_model.model.embed_tokens.weight",
               "BF16",
               {FAKE_VOCAB, 4},
               bf16Bytes(embed)});
  std::vector<float> conv(16);
  for (int i = 0; i < 16; ++i)
    conv[size_t(i)] = float(i + 1) * 0.125f;
  t.push_back({"language_model.model.layers.0.self_attn.q_conv1d.weight",
               "F32",
               {4, 1, 4},
               f32Bytes(conv)});
  t.push_back({"language_model.model.layers.0.self_attention_res_norm.weight",
               "BF16",
               {4},
               bf16Bytes({1, 1, 1, 1})});
  for (int e = 0; e < FAKE_EXPERTS; ++e) {
    std::string packed(64, '\0'), scale(4, '\0');
    for (int i = 0; i < 64; ++i)
      packed[size_t(i)] = char(((e * 64 + i) * 7) % 256);
    for (int i = 0; i < 4; ++i)
      scale[size_t(i)] = char(120 + e + i);
    t.push_back({kExperts + std::to_string(e) + ".w1.weight_packed",
                 "U8",
                 {4, 16},
                 packed});
    t.push_back({kExperts + std::to_string(e) + ".w1.weight_scale",
                 "U8",
                 {4, 1},
                 scale});
  }
  t.push_back({"language_model.lm_head.weight",
               "BF16",
               {FAKE_VOCAB, 4},
               bf16Bytes(lmHead)});
  return t;
}

size_t findTensor(const std::vector<TensorData> &tensors,
                  const std::string &name) {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name)
      return i;
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

FakeWeightSums fakeWeightSums(const std::vector<TensorData> &tensors) {
  FakeWeightSums s;
  const TensorData &embed =
      tensors[findTensor(tensors, "language_model.model.embed_tokens.weight")];
  const TensorData &lm =
      tensors[findTensor(tensors, "language_model.lm_head.weight")];
  auto bf = [](const TensorData &t, size_t i) {
    uint16_t b;
    std::memcpy(&b, &t.bytes[2 * i], 2);
    return fromBF16(b);
  };
  for (int tok = 0; tok < FAKE_VOCAB; ++tok) {
    s.embed[tok] = bf(embed, size_t(tok * 4)) + bf(embed, size_t(tok * 4 + 3));
    s.lmHead[tok] = bf(lm, size_t(tok * 4 + 1));
  }
  // The same float operations, in the same order, as FakeModel.c.
  for (int e = 0; e < FAKE_EXPERTS; ++e) {
    const TensorData &packed = tensors[findTensor(
        tensors, kExperts + std::to_string(e) + ".w1.weight_packed")];
    const TensorData &scale = tensors[findTensor(
        tensors, kExperts + std::to_string(e) + ".w1.weight_scale")];
    for (int i = 0; i < 64; ++i)
      s.experts += float(uint8_t(packed.bytes[size_t(i)])) * float(e + 1);
    for (int i = 0; i < 4; ++i)
      s.experts +=
          float(uint8_t(scale.bytes[size_t(i)])) * float(e + 1) * 1000.0f;
  }
  const TensorData &conv = tensors[findTensor(
      tensors, "language_model.model.layers.0.self_attn.q_conv1d.weight")];
  for (int i = 0; i < 16; ++i) {
    float f;
    std::memcpy(&f, &conv.bytes[size_t(4 * i)], 4);
    s.convWeight += f;
  }
  return s;
}

std::vector<float> referenceRow(const std::vector<int32_t> &h, int64_t p,
                                int64_t T, int64_t t,
                                const FakeWeightSums &sums) {
  std::vector<float> row(FAKE_VOCAB);
  int32_t tok = h[size_t(p)];
  for (int v = 0; v < FAKE_VOCAB; ++v)
    row[size_t(v)] = float(v) * 0.5f + float(tok);
  float sum = 0, count = 0, hash = 0, positions = 0, mlaTokens = 0,
        mlaPositions = 0;
  for (int64_t q = 0; q <= p; ++q) {
    sum += float(h[size_t(q)]);
    count += 1.0f;
    hash = hash * 0.5f + float(h[size_t(q)]);
    positions += float(q);
    mlaTokens += float(h[size_t(q)]);
    mlaPositions += float(q);
  }
  auto back = [&](int64_t k) -> int64_t { // token k positions back, or none
    return p - k >= 0 ? h[size_t(p - k)] : -1;
  };
  row[FAKE_F_TOKEN] = float(tok);
  row[FAKE_F_POSITION] = float(p);
  row[FAKE_F_SUM] = sum;
  row[FAKE_F_COUNT] = count;
  row[FAKE_F_HASH] = hash;
  row[FAKE_F_POSITION_SUM] = positions;
  row[FAKE_F_LAYER2] = sum + count * 1000.0f + hash * 0.25f;
  for (int i = 0; i < 3; ++i) { // channel 1 of conv_q: token + 1
    int64_t b = back(2 - i);
    row[size_t(FAKE_F_CONV_Q + i)] = b < 0 ? 0.0f : float(b + 1);
  }
  row[FAKE_F_CONV_K2] = back(2) < 0 ? 0.0f : float(2 * back(2));
  row[FAKE_F_CONV_V2] = float(p + 3);
  row[FAKE_F_MLA_TOKENS] = mlaTokens;
  row[FAKE_F_MLA_POSITIONS] = mlaPositions;
  row[FAKE_F_MLA_ROWS] = float(p + 1) + float(p + 1) * 100.0f;
  row[FAKE_F_STALE] = 0;
  row[FAKE_F_ERRORS] = 0;
  row[FAKE_F_EMBED] = sums.embed[tok];
  row[FAKE_F_LM_HEAD] = sums.lmHead[tok];
  row[FAKE_F_EXPERTS] = sums.experts;
  row[FAKE_F_CONV_WEIGHT] = sums.convWeight;
  int64_t len = p - t;
  row[FAKE_F_PAGES] = float((len + T + FAKE_PAGE - 1) / FAKE_PAGE);
  row[FAKE_F_SEGMENT] = float(T);
  row[FAKE_F_INDEX] = float(t);
  return row;
}

void writeFakeCheckpoint(const std::string &dir) {
  writeFile(dir + "/model.safetensors", safetensorsBytes(fakeWeights()));
}

//===----------------------------------------------------------------------===//
// FakeSession
//===----------------------------------------------------------------------===//

FakeSession::FakeSession(int32_t maxSequences, int64_t pages,
                         int64_t maxContext, SnapshotConfig snapshots) {
  writeFakeCheckpoint(dir.path());
  weightSums = fakeWeightSums(fakeWeights());
  lib = openFake();
  if (!lib)
    return;
  k3rt_weights *w = nullptr;
  EXPECT_OK(k3rt_weights_load(lib.get(), dir.path().c_str(), nullptr, &w));
  weights.reset(w);
  k3rt_model_info info{};
  info.struct_size = sizeof(info);
  EXPECT_OK(k3rt_library_get_info(lib.get(), &info));
  k3rt_session_options o{};
  o.struct_size = sizeof(o);
  o.max_sequences = maxSequences;
  o.max_context = maxContext;
  o.num_pages = pages;
  o.snapshot_interval = snapshots.interval;
  o.snapshot_slots = snapshots.snapshotSlots;
  o.max_verify_tokens = snapshots.maxVerifyTokens;
  o.state_budget_bytes =
      uint64_t(maxSequences + snapshots.snapshotSlots) * info.slot_bytes +
      uint64_t(pages ? pages : 1) * info.page_bytes;
  k3rt_session *s = nullptr;
  EXPECT_OK(k3rt_session_create(lib.get(), weights.get(), &o, &s));
  session.reset(s);
}

std::vector<float> FakeSession::step(const std::vector<k3rt_step_entry> &e) {
  std::vector<float> out(k3rt_step_logits_rows(e.data(), e.size()) *
                         FAKE_VOCAB);
  EXPECT_OK(k3rt_session_step(session.get(), e.data(), e.size(), out.data(),
                              out.size()));
  return out;
}

std::vector<float> FakeSession::feed(int64_t id,
                                     const std::vector<int32_t> &tokens) {
  return step({{id, int64_t(tokens.size()), tokens.data(), K3RT_LOGITS_ALL}});
}

int64_t FakeSession::length(int64_t id) {
  int64_t n = -1;
  EXPECT_OK(k3rt_sequence_length(session.get(), id, &n));
  return n;
}

k3rt_session_info FakeSession::info() {
  k3rt_session_info i{};
  i.struct_size = sizeof(i);
  EXPECT_OK(k3rt_session_get_info(session.get(), &i));
  return i;
}

std::vector<float> FakeSession::readState(int64_t id, const char *group,
                                          int64_t layer,
                                          k3rt_state_shape *shapeOut) {
  k3rt_state_shape shape{};
  shape.struct_size = sizeof(shape);
  EXPECT_OK(k3rt_sequence_read_state(session.get(), id, group, layer, nullptr,
                                     0, &shape));
  std::vector<float> out(size_t(shape.count));
  EXPECT_OK(k3rt_sequence_read_state(session.get(), id, group, layer,
                                     out.data(), out.size(), &shape));
  if (shapeOut)
    *shapeOut = shape;
  return out;
}

::testing::AssertionResult
FakeSession::matchesCalls(const std::vector<float> &rows,
                          const std::vector<int32_t> &history, int64_t len,
                          int64_t T, int64_t interval, size_t firstRow) const {
  for (int64_t t = 0; t < T; ++t) {
    int64_t p = len + t;
    int64_t a = std::max(len, p / interval * interval);
    int64_t b = std::min(len + T, (p / interval + 1) * interval);
    std::vector<float> want = referenceRow(history, p, b - a, p - a, weightSums);
    for (int v = 0; v < FAKE_VOCAB; ++v) {
      size_t at = (firstRow + size_t(t)) * FAKE_VOCAB + size_t(v);
      if (at >= rows.size())
        return ::testing::AssertionFailure() << "too few rows";
      if (rows[at] != want[size_t(v)])
        return ::testing::AssertionFailure()
               << "position " << p << " (row " << firstRow + size_t(t)
               << ", call [" << a << ", " << b << ")) feature " << v
               << ": got " << rows[at] << ", want " << want[size_t(v)];
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult
FakeSession::matches(const std::vector<float> &rows,
                     const std::vector<int32_t> &history, int64_t len,
                     int64_t T, size_t firstRow) const {
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> want = referenceRow(history, len + t, T, t, weightSums);
    for (int v = 0; v < FAKE_VOCAB; ++v) {
      size_t at = (firstRow + size_t(t)) * FAKE_VOCAB + size_t(v);
      if (at >= rows.size())
        return ::testing::AssertionFailure() << "too few rows";
      if (rows[at] != want[size_t(v)])
        return ::testing::AssertionFailure()
               << "position " << len + t << " (row " << firstRow + size_t(t)
               << ") feature " << v << ": got " << rows[at] << ", want "
               << want[size_t(v)];
    }
  }
  return ::testing::AssertionSuccess();
}

} // namespace k3rt_test
