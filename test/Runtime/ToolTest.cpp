//===- ToolTest.cpp - k3-run on the fake library --------------------------===//

#include "TestUtil.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <sys/stat.h>
#include <sys/wait.h>

using namespace k3rt_test;

namespace {

struct RunResult {
  int exitCode = -1;
  std::string output; ///< stdout and stderr
};

RunResult runTool(const std::string &args, const std::string &env = "") {
  RunResult r;
  std::string cmd = env + " " K3RT_K3_RUN " " + args + " 2>&1";
  FILE *p = popen(cmd.c_str(), "r");
  if (!p)
    return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
    r.output.append(buf, n);
  int status = pclose(p);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

struct Array {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Parses a float32 .npy (format 1.0, C order).
bool parseNpy(const std::string &bytes, Array &out) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0 ||
      bytes[6] != 1 || bytes[7] != 0)
    return false;
  size_t len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
  if ((10 + len) % 64 != 0 || bytes.size() < 10 + len)
    return false;
  std::string header = bytes.substr(10, len);
  if (header.find("'descr': '<f4'") == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos ||
      header.back() != '\n')
    return false;
  size_t open = header.find("'shape': (");
  size_t close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos)
    return false;
  std::string dims = header.substr(open + 10, close - open - 10);
  out.shape.clear();
  int64_t count = 1;
  for (size_t at = 0; at < dims.size();) {
    size_t comma = dims.find(',', at);
    std::string d = dims.substr(
        at, comma == std::string::npos ? std::string::npos : comma - at);
    if (d.find_first_not_of(' ') != std::string::npos) {
      out.shape.push_back(std::atoll(d.c_str()));
      count *= out.shape.back();
    }
    if (comma == std::string::npos)
      break;
    at = comma + 1;
  }
  if (bytes.size() != 10 + len + size_t(count) * 4)
    return false;
  out.data.resize(size_t(count));
  if (count)
    std::memcpy(out.data.data(), bytes.data() + 10 + len, size_t(count) * 4);
  return true;
}

uint32_t get32(const std::string &b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint16_t get16(const std::string &b, size_t at) {
  uint16_t v;
  std::memcpy(&v, b.data() + at, 2);
  return v;
}

/// Parses a stored .npz (the members' local headers in order, then the
/// central directory and its end record).
bool parseNpz(const std::string &b, std::map<std::string, Array> &out) {
  size_t at = 0;
  while (at + 30 <= b.size() && get32(b, at) == 0x04034b50) {
    if (get16(b, at + 8) != 0) // stored
      return false;
    uint32_t size = get32(b, at + 18);
    if (get32(b, at + 22) != size)
      return false;
    uint16_t nameLen = get16(b, at + 26), extra = get16(b, at + 28);
    std::string name = b.substr(at + 30, nameLen);
    if (name.size() < 4 || name.substr(name.size() - 4) != ".npy")
      return false;
    Array a;
    if (!parseNpy(b.substr(at + 30 + nameLen + extra, size), a))
      return false;
    out[name.substr(0, name.size() - 4)] = a;
    at += 30 + nameLen + extra + size;
  }
  // Central directory entries, then the end record.
  size_t entries = 0;
  while (at + 46 <= b.size() && get32(b, at) == 0x02014b50) {
    at += 46 + get16(b, at + 28) + get16(b, at + 30) + get16(b, at + 32);
    ++entries;
  }
  return entries == out.size() && at + 22 == b.size() &&
         get32(b, at) == 0x06054b50 && get16(b, at + 10) == entries;
}

int32_t argmax(const std::vector<float> &row) {
  size_t best = 0;
  for (size_t v = 1; v < row.size(); ++v)
    if (row[v] > row[best])
      best = v;
  return int32_t(best);
}

class ToolTest : public ::testing::Test {
protected:
  void SetUp() override {
    writeFakeCheckpoint(dir.path());
    sums = fakeWeightSums(fakeWeights());
  }

  std::string base() {
    return std::string(K3RT_FAKE_MODEL) + " --weights " + dir.path();
  }

  TempDir dir, out;
  FakeWeightSums sums;
};

TEST_F(ToolTest, GreedyDecodeLogitsAndState) {
  std::string npy = out.file("logits.npy"), npz = out.file("state.npz");
  RunResult r = runTool(base() +
                        " --prompt-ids 1,2,3,4,5,6 --max-new-tokens 3 "
                        "--chunks 4,1 --logits-out " +
                        npy + " --state-out " + npz);
  ASSERT_EQ(r.exitCode, 0) << r.output;

  // Chunks 4, 1, then the last token alone (the list is cycled).
  std::vector<int32_t> history = {1, 2, 3, 4, 5, 6};
  std::vector<std::vector<float>> rows = {referenceRow(history, 5, 1, 0, sums)};
  std::vector<int32_t> generated;
  for (int i = 0; i < 3; ++i) {
    int32_t next = argmax(rows.back());
    generated.push_back(next);
    history.push_back(next);
    rows.push_back(
        referenceRow(history, int64_t(history.size()) - 1, 1, 0, sums));
  }
  std::string line = "generated:";
  for (int32_t g : generated)
    line += " " + std::to_string(g);
  EXPECT_NE(r.output.find(line + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prefill: 6 tokens in "), std::string::npos);
  EXPECT_NE(r.output.find("decode: 3 tokens in "), std::string::npos);

  Array logits;
  ASSERT_TRUE(parseNpy(readFile(npy), logits));
  EXPECT_EQ(logits.shape, (std::vector<int64_t>{4, FAKE_VOCAB}));
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(
        std::vector<float>(logits.data.begin() + long(i) * FAKE_VOCAB,
                           logits.data.begin() + long(i + 1) * FAKE_VOCAB),
        rows[i])
        << "row " << i;

  std::map<std::string, Array> state;
  ASSERT_TRUE(parseNpz(readFile(npz), state));
  std::vector<std::string> names;
  for (auto &[name, a] : state)
    names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "kda.conv_k.0", "kda.conv_k.2", "kda.conv_q.0", "kda.conv_q.2",
                "kda.conv_v.0", "kda.conv_v.2", "kda.recurrent.0",
                "kda.recurrent.2", "mla.latent.1", "mla.latent.3"}));
  // Taken right after the prefill of 1..6.
  float hash = 0;
  for (int t = 1; t <= 6; ++t)
    hash = hash * 0.5f + float(t);
  EXPECT_EQ(state["kda.recurrent.2"].shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(state["kda.recurrent.2"].data,
            (std::vector<float>{21, 6, hash, 15, 0, 0, 0, 0}));
  EXPECT_EQ(state["kda.conv_q.0"].shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(state["kda.conv_q.0"].data[0], 4.0f); // channel 0: 4, 5, 6
  EXPECT_EQ(state["mla.latent.3"].shape, (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(std::vector<float>(state["mla.latent.3"].data.begin() + 30,
                               state["mla.latent.3"].data.end()),
            (std::vector<float>{6, 5, 3, 11, 1, 0}));
}

TEST_F(ToolTest, DecodeIdsAreFedInsteadOfTheArgmax) {
  std::string npy = out.file("l.npy");
  RunResult r = runTool(base() +
                        " --prompt-ids 3,1 --decode-ids 7,8 "
                        "--max-new-tokens 2 --logits-out " +
                        npy);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("generated: 7 8\n"), std::string::npos);
  Array logits;
  ASSERT_TRUE(parseNpy(readFile(npy), logits));
  ASSERT_EQ(logits.shape, (std::vector<int64_t>{3, FAKE_VOCAB}));
  std::vector<float> last(logits.data.begin() + 2 * FAKE_VOCAB,
                          logits.data.end());
  EXPECT_EQ(last, referenceRow({3, 1, 7, 8}, 3, 1, 0, sums));
}

TEST_F(ToolTest, BatchGivesTheSameResult) {
  std::string one = out.file("1.npy"), three = out.file("3.npy");
  std::string args = " --prompt-ids 5,9,2,2,7 --max-new-tokens 4 --chunks 2";
  RunResult a = runTool(base() + args + " --logits-out " + one);
  RunResult b =
      runTool(base() + args + " --batch 3 --bench --logits-out " + three);
  ASSERT_EQ(a.exitCode, 0) << a.output;
  ASSERT_EQ(b.exitCode, 0) << b.output;
  EXPECT_EQ(readFile(one), readFile(three));
  EXPECT_NE(b.output.find("prefill: 15 tokens"), std::string::npos);
  EXPECT_NE(b.output.find("bench: batch 3"), std::string::npos);
}

TEST_F(ToolTest, ErrorsAreStatusMessages) {
  RunResult r = runTool(base() + " --prompt-ids 1,99 --max-new-tokens 1");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("k3-run: error: step entry 0 (sequence 0): token 1 "
                          "is 99, outside the vocabulary [0, 32)"),
            std::string::npos)
      << r.output;

  r = runTool(std::string(K3RT_FAKE_MODEL) +
              " --weights /nonexistent --prompt-ids 1");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("k3-run: error: weights path /nonexistent does "
                          "not exist"),
            std::string::npos)
      << r.output;

  r = runTool(std::string(K3RT_FAKE_MODEL) + " --weights " + dir.path());
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("k3-run: error: --prompt-ids is required"),
            std::string::npos);

  r = runTool(base() + " --prompt-ids 1 --decode-ids 1 --max-new-tokens 2");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("fewer than --max-new-tokens"), std::string::npos);

  r = runTool(base() + " --prompt-ids 1,x");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("k3-run: error: --prompt-ids: '1,x' is not a "
                          "comma-separated list of integers"),
            std::string::npos);
}

TEST_F(ToolTest, ContextWindowIsEnforced) {
  std::string ids = "1";
  for (int i = 1; i < FAKE_MAX_CONTEXT; ++i)
    ids += ",1";
  RunResult r =
      runTool(base() + " --prompt-ids " + ids + " --max-new-tokens 1");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("k3-run: error: step entry 0 (sequence 0): 1 "
                          "tokens after the 64 already processed exceed the "
                          "context window of 64"),
            std::string::npos)
      << r.output;
}

TEST_F(ToolTest, RandomWeightsRunK3Weights) {
  // A stand-in k3-weights: logs its arguments and writes the fake weights.
  std::string script = out.file("k3-weights"), log = out.file("args.log");
  writeFile(script, "#!/bin/sh\necho \"$@\" > " + log + "\ncp " +
                        dir.file("model.safetensors") +
                        " \"$5/model.safetensors\"\n");
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  std::string env = "K3RUN_K3_WEIGHTS=" + script;
  RunResult r = runTool(std::string(K3RT_FAKE_MODEL) +
                            " --random-weights 42 --config cfg.json "
                            "--prompt-ids 1,2 --max-new-tokens 1",
                        env);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  std::string args = readFile(log);
  ASSERT_EQ(args.rfind("cfg.json --seed 42 -o ", 0), 0u) << args;
  // The temporary directory is gone afterwards.
  std::string tmp = args.substr(std::strlen("cfg.json --seed 42 -o "));
  tmp.pop_back();
  struct stat st;
  EXPECT_NE(stat(tmp.c_str(), &st), 0) << tmp << " was left behind";

  // Without --config the library makes the weights (k3_fill_random); the
  // stand-in library has none.
  r = runTool(std::string(K3RT_FAKE_MODEL) +
                  " --random-weights 42 --prompt-ids 1",
              env);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("has no k3_fill_random"), std::string::npos)
      << r.output;
}

} // namespace
