//===- WeightsTest.cpp - checkpoints against the manifest, 12-16 ----------===//

#include "TestUtil.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

using namespace k3rt_test;
using json = nlohmann::json;

namespace {

const char *kEmbed = "language_model.model.embed_tokens.weight";
const char *kLmHead = "language_model.lm_head.weight";
const char *kConv = "language_model.model.layers.0.self_attn.q_conv1d.weight";
const char *kUnused =
    "language_model.model.layers.0.self_attention_res_norm.weight";
std::string expert(int e, const char *part) {
  return "language_model.model.layers.1.block_sparse_moe.experts." +
         std::to_string(e) + ".w1.weight_" + part;
}

class WeightsTest : public ::testing::Test {
protected:
  void SetUp() override { lib = openFake(); }

  k3rt_status *loadPath(const std::string &path, Weights *out = nullptr,
                        const k3rt_weights_options *options = nullptr) {
    k3rt_weights *w = nullptr;
    k3rt_status *s = k3rt_weights_load(lib.get(), path.c_str(), options, &w);
    if (out)
      out->reset(w);
    else
      k3rt_weights_release(w);
    return s;
  }

  /// Writes `tensors` as the single-file checkpoint and loads it.
  k3rt_status *load(const std::vector<TensorData> &tensors,
                    Weights *out = nullptr,
                    const k3rt_weights_options *options = nullptr) {
    writeFile(dir.file("model.safetensors"), safetensorsBytes(tensors));
    return loadPath(dir.path(), out, options);
  }

  /// Writes `shards` and an index mapping each tensor to its shard.
  void writeSharded(const std::vector<std::vector<TensorData>> &shards) {
    std::string map;
    for (size_t i = 0; i < shards.size(); ++i) {
      std::string name = "model-0000" + std::to_string(i + 1) + ".safetensors";
      writeFile(dir.file(name), safetensorsBytes(shards[i]));
      for (const TensorData &t : shards[i])
        map += std::string(map.empty() ? "" : ", ") + "\"" + t.name + "\": \"" +
               name + "\"";
    }
    writeIndex("{" + map + "}");
  }

  void writeIndex(const std::string &weightMap) {
    writeFile(dir.file("model.safetensors.index.json"),
              "{\"metadata\": {\"total_size\": 0}, \"weight_map\": " +
                  weightMap + "}");
  }

  k3rt_weights_info info(const Weights &w) {
    k3rt_weights_info i{};
    i.struct_size = sizeof(i);
    EXPECT_OK(k3rt_weights_get_info(w.get(), &i));
    return i;
  }

  TempDir dir;
  Library lib;
};

TEST_F(WeightsTest, LoadsADirectoryWithOneFile) {
  Weights w;
  ASSERT_OK(load(fakeWeights(), &w));
  k3rt_weights_info i = info(w);
  EXPECT_EQ(i.num_shards, 1);
  EXPECT_EQ(i.num_tensors, 10);
  EXPECT_EQ(i.num_ignored, 0);
  EXPECT_EQ(i.mapped_bytes, uint64_t(safetensorsBytes(fakeWeights()).size()));
  // The two expert stacks (3 x 64 + 3 x 4 bytes) are assembled; the rest
  // is used in place (the writer pads the header to 8 bytes).
  EXPECT_EQ(i.copied_bytes, 3u * 64u + 3u * 4u);
}

TEST_F(WeightsTest, LoadsASingleFilePath) {
  std::string file = dir.file("weights.safetensors");
  writeFile(file, safetensorsBytes(fakeWeights()));
  EXPECT_OK(loadPath(file));
}

TEST_F(WeightsTest, LoadsShardsThroughTheIndex) {
  std::vector<TensorData> all = fakeWeights();
  std::vector<std::vector<TensorData>> shards(3);
  for (size_t i = 0; i < all.size(); ++i)
    shards[i % 3].push_back(all[i]);
  writeSharded(shards);
  Weights w;
  ASSERT_OK(loadPath(dir.path(), &w));
  EXPECT_EQ(info(w).num_shards, 3);
  // The index file itself is accepted as the path too.
  EXPECT_OK(loadPath(dir.file("model.safetensors.index.json")));
}

TEST_F(WeightsTest, ReportsProgress) {
  std::vector<TensorData> all = fakeWeights();
  std::vector<std::vector<TensorData>> shards(2);
  for (size_t i = 0; i < all.size(); ++i)
    shards[i % 2].push_back(all[i]);
  writeSharded(shards);
  std::vector<std::string> seen;
  k3rt_weights_options o{};
  o.struct_size = sizeof(o);
  o.progress_user = &seen;
  o.progress = [](void *user, const char *stage, uint64_t done,
                  uint64_t total) {
    static_cast<std::vector<std::string> *>(user)->push_back(
        std::string(stage) + " " + std::to_string(done) + "/" +
        std::to_string(total));
  };
  ASSERT_OK(loadPath(dir.path(), nullptr, &o));
  std::vector<std::string> want = {"validate 1/2", "validate 2/2",
                                   "map 1/2",      "map 2/2",
                                   "assemble 1/2", "assemble 2/2"};
  EXPECT_EQ(seen, want);
}

TEST_F(WeightsTest, IgnoresVisionTowerAndProjector) {
  std::vector<TensorData> t = fakeWeights();
  t.push_back({"vision_tower.patch_embed.proj.weight", "BF16", {2}, "abcd"});
  t.push_back({"mm_projector.proj.0.weight", "F32", {1}, "abcd"});
  t.push_back({"language_model.vision_tower.encoder.x", "U8", {1}, "a"});
  t.push_back({"multi_modal_projector.linear.weight", "U8", {1}, "a"});
  Weights w;
  ASSERT_OK(load(t, &w));
  EXPECT_EQ(info(w).num_ignored, 4);
}

// 12. A dtype other than the manifest's.
TEST_F(WeightsTest, WrongDtype) {
  std::vector<TensorData> t = fakeWeights();
  TensorData &embed = t[findTensor(t, kEmbed)];
  embed.dtype = "F32";
  embed.bytes = std::string(FAKE_VOCAB * 4 * 4, '\0');
  EXPECT_ERROR(load(t), K3RT_INVALID_ARGUMENT, "1 with the wrong dtype",
               std::string(kEmbed) + " (F32, expected BF16)");
}

TEST_F(WeightsTest, PackedExpertAsBF16) {
  std::vector<TensorData> t = fakeWeights();
  TensorData &packed = t[findTensor(t, expert(1, "packed"))];
  packed.dtype = "BF16";
  packed.shape = {4, 8};
  EXPECT_ERROR(load(t), K3RT_INVALID_ARGUMENT,
               expert(1, "packed") + " (BF16, expected U8)",
               expert(1, "packed") + " ([4, 8], expected [4, 16])");
}

// 13. A shape other than the manifest's, including a transposed weight.
TEST_F(WeightsTest, TransposedWeight) {
  std::vector<TensorData> t = fakeWeights();
  t[findTensor(t, kLmHead)].shape = {4, FAKE_VOCAB};
  EXPECT_ERROR(load(t), K3RT_INVALID_ARGUMENT, "1 with the wrong shape",
               std::string(kLmHead) + " ([4, 32], expected [32, 4]; "
                                      "transposed?)");
}

// 14. Missing, unexpected and duplicated tensors, all in one message.
TEST_F(WeightsTest, MissingAndUnexpectedInOneMessage) {
  std::vector<TensorData> t = fakeWeights();
  t.erase(t.begin() + long(findTensor(t, kConv)));
  t.erase(t.begin() + long(findTensor(t, expert(2, "scale"))));
  t.erase(t.begin() + long(findTensor(t, kUnused))); // unused is expected too
  t.push_back({"language_model.model.extra.weight", "U8", {1}, "a"});
  t.push_back({"language_model.lm_head.bias", "U8", {1}, "a"});
  EXPECT_ERROR(load(t), K3RT_INVALID_ARGUMENT,
               "does not match library model 'fake-tiny'", "3 missing: ", kConv,
               expert(2, "scale"), kUnused,
               "2 unexpected: ", "language_model.model.extra.weight",
               "language_model.lm_head.bias");
}

TEST_F(WeightsTest, LongListsAreCapped) {
  std::vector<TensorData> t = fakeWeights();
  for (int i = 0; i < 25; ++i)
    t.push_back({"language_model.extra." + std::to_string(i), "U8", {1}, "a"});
  EXPECT_ERROR(load(t), K3RT_INVALID_ARGUMENT,
               "25 unexpected: ", "language_model.extra.19", "and 5 more");
}

TEST_F(WeightsTest, EverythingMissing) {
  EXPECT_ERROR(load({{"x", "U8", {1}, "a"}}), K3RT_INVALID_ARGUMENT,
               "10 missing", "1 unexpected: x");
}

TEST_F(WeightsTest, DuplicatedAcrossShards) {
  std::vector<TensorData> all = fakeWeights();
  std::vector<TensorData> second = {all[findTensor(all, kLmHead)]};
  writeFile(dir.file("a.safetensors"), safetensorsBytes(all));
  writeFile(dir.file("b.safetensors"), safetensorsBytes(second));
  std::string map;
  for (const TensorData &x : all)
    map += std::string(map.empty() ? "" : ", ") + "\"" + x.name +
           "\": \"a.safetensors\"";
  writeIndex("{" + map + ", \"other\": \"b.safetensors\"}");
  EXPECT_ERROR(loadPath(dir.path()), K3RT_INVALID_ARGUMENT,
               "1 duplicated across shards: ", std::string(kLmHead) + " (in ",
               "a.safetensors and ", "b.safetensors)",
               "listed in the index but absent from their shard: other");
}

TEST_F(WeightsTest, ShardPathEscapesTheModelDirectory) {
  TempDir outside;
  writeFile(outside.file("evil.safetensors"), safetensorsBytes(fakeWeights()));
  std::string relative = "../" +
                         outside.path().substr(outside.path().rfind('/') + 1) +
                         "/evil.safetensors";
  writeIndex("{\"" + std::string(kEmbed) + "\": \"" + relative + "\"}");
  EXPECT_ERROR(loadPath(dir.path()), K3RT_INVALID_ARGUMENT,
               "escapes the model directory");
  writeIndex("{\"" + std::string(kEmbed) + "\": \"" +
             outside.file("evil.safetensors") + "\"}");
  EXPECT_ERROR(loadPath(dir.path()), K3RT_INVALID_ARGUMENT,
               "escapes the model directory");
  // A symlink inside the directory that points out of it.
  ASSERT_EQ(symlink(outside.file("evil.safetensors").c_str(),
                    dir.file("link.safetensors").c_str()),
            0);
  writeIndex("{\"" + std::string(kEmbed) + "\": \"link.safetensors\"}");
  EXPECT_ERROR(loadPath(dir.path()), K3RT_INVALID_ARGUMENT,
               "escapes the model directory", "resolves to");
}

TEST_F(WeightsTest, MissingShard) {
  writeIndex("{\"" + std::string(kEmbed) + "\": \"gone.safetensors\"}");
  EXPECT_ERROR(loadPath(dir.path()), K3RT_NOT_FOUND, "gone.safetensors",
               "does not exist");
}

TEST_F(WeightsTest, BadIndex) {
  writeFile(dir.file("model.safetensors.index.json"), "{\"weight_map\": 3}");
  EXPECT_ERROR(loadPath(dir.path()), K3RT_INVALID_ARGUMENT, "weight_map");
  writeFile(dir.file("model.safetensors.index.json"), "not json");
  EXPECT_ERROR(loadPath(dir.path()), K3RT_INVALID_ARGUMENT, "not a JSON");
}

// A tensor whose data is not aligned to its element size is copied.
TEST_F(WeightsTest, MisalignedTensorIsCopied) {
  std::vector<TensorData> t = fakeWeights();
  // A 1-byte tensor first shifts everything after it by one byte.
  t.insert(t.begin(), {"vision_tower.pad", "U8", {1}, "x"});
  Weights w;
  ASSERT_OK(load(t, &w));
  // embed (256) + q_conv1d (64) + lm_head (256) copied, plus the stacks.
  EXPECT_EQ(info(w).copied_bytes, 256u + 64u + 256u + 3u * 64u + 3u * 4u);
}

TEST_F(WeightsTest, ManifestAlignmentIsHonoured) {
  json m = json::parse(fakeManifest(), nullptr, false);
  m["abi"]["args"][1]["alignment"] = 4096; // the embedding table
  Library aligned;
  ASSERT_OK(openFakeWithManifest(m.dump(), &aligned));
  lib = std::move(aligned);
  Weights w;
  ASSERT_OK(load(fakeWeights(), &w));
  EXPECT_EQ(info(w).copied_bytes, 256u + 3u * 64u + 3u * 4u);
}

// 16. NaN/Inf: not checked by default (safetensors does not either),
// rejected with check_finite.
TEST_F(WeightsTest, NonFiniteValuesOnRequest) {
  std::vector<TensorData> t = fakeWeights();
  TensorData &conv = t[findTensor(t, kConv)];
  float nan = std::nanf("");
  std::memcpy(&conv.bytes[4 * 5], &nan, 4);
  t[findTensor(t, expert(0, "scale"))].bytes[2] = char(0xff);
  EXPECT_OK(load(t));
  k3rt_weights_options o{};
  o.struct_size = sizeof(o);
  o.check_finite = 1;
  EXPECT_ERROR(load(t, nullptr, &o), K3RT_DATA_LOSS,
               "2 tensors hold NaN or Inf", std::string(kConv) + " (element 5)",
               expert(0, "scale") + " (element 2)");
  EXPECT_OK(load(fakeWeights(), nullptr, &o));
}

TEST_F(WeightsTest, StackIsAssembledInExpertOrder) {
  // The fake folds (e + 1) x bytes over the stack into a logit, so a wrong
  // order or a missing expert changes FAKE_F_EXPERTS.
  FakeSession s;
  ASSERT_OK(k3rt_sequence_add(s.get(), 1));
  std::vector<float> rows = s.feed(1, {3});
  EXPECT_EQ(rows[FAKE_F_EXPERTS], s.sums().experts);
  EXPECT_EQ(rows[FAKE_F_EMBED], s.sums().embed[3]);
  EXPECT_EQ(rows[FAKE_F_LM_HEAD], s.sums().lmHead[3]);
  EXPECT_EQ(rows[FAKE_F_CONV_WEIGHT], s.sums().convWeight);
  EXPECT_EQ(rows[FAKE_F_ERRORS], 0);
}

TEST_F(WeightsTest, WeightsOutliveTheirFiles) {
  Weights w;
  ASSERT_OK(load(fakeWeights(), &w));
  // The mapping is private and read-only; deleting the file is harmless.
  ASSERT_EQ(unlink(dir.file("model.safetensors").c_str()), 0);
  k3rt_session_options o{};
  o.struct_size = sizeof(o);
  o.max_sequences = 1;
  o.state_budget_bytes = 1 << 20;
  k3rt_session *raw = nullptr;
  ASSERT_OK(k3rt_session_create(lib.get(), w.get(), &o, &raw));
  Session s(raw);
  ASSERT_OK(k3rt_sequence_add(s.get(), 0));
  int32_t tok = 5;
  k3rt_step_entry e = {0, 1, &tok, K3RT_LOGITS_LAST};
  std::vector<float> out(FAKE_VOCAB);
  ASSERT_OK(k3rt_session_step(s.get(), &e, 1, out.data(), out.size()));
  EXPECT_EQ(out[FAKE_F_EMBED], fakeWeightSums(fakeWeights()).embed[5]);
}

} // namespace

namespace {
// k3rt_weights_generate: bad arguments, and a library without the generated
// fill kernel (the stand-in library has none; the real one is exercised by
// test/e2e/random-weights.test on the host and run-e2e.py on a GPU).
TEST_F(WeightsTest, GenerateRejectsBadCallsAndLibrariesWithoutFill) {
  k3rt_weights *w = nullptr;
  EXPECT_ERROR(k3rt_weights_generate(nullptr, 1, nullptr, &w),
               K3RT_INVALID_ARGUMENT, "library and out must not be NULL");
  EXPECT_ERROR(k3rt_weights_generate(lib.get(), 1, nullptr, nullptr),
               K3RT_INVALID_ARGUMENT, "library and out must not be NULL");
  EXPECT_ERROR(k3rt_weights_generate(lib.get(), 1, nullptr, &w),
               K3RT_FAILED_PRECONDITION, "has no k3_fill_random",
               "use k3rt_weights_load");
  EXPECT_EQ(w, nullptr);
}
} // namespace
