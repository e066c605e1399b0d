//===- ConfigTest.cpp - config.json parsing and validation ----------------===//

#include "k3/Frontend/HF/Config.h"

#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

using namespace mlir::k3::hf;

namespace {

const char *kK3 = K3C_SOURCE_DIR "/models/kimi-k3/config.json";
const char *kTiny = K3C_SOURCE_DIR "/models/k3-tiny/config.json";

std::string errorOf(llvm::StringRef json) {
  llvm::Expected<TextConfig> c = parseConfig(json, "cfg");
  if (c)
    return "";
  return llvm::toString(c.takeError());
}

TEST(ConfigTest, KimiK3Values) {
  llvm::Expected<TextConfig> c = loadConfig(kK3);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  // K3_SPEC §1.1.
  EXPECT_EQ(c->name, "kimi-k3");
  EXPECT_EQ(c->modelType, "kimi_k3");
  EXPECT_EQ(c->tensorPrefix, "language_model.");
  EXPECT_EQ(c->vocabSize, 163840);
  EXPECT_EQ(c->hiddenSize, 7168);
  EXPECT_EQ(c->numLayers, 93);
  EXPECT_EQ(c->hiddenAct, "situ");
  EXPECT_DOUBLE_EQ(c->situBeta, 4.0);
  EXPECT_DOUBLE_EQ(c->situLinearBeta, 25.0);
  EXPECT_EQ(c->attnResBlockSize, 12);
  EXPECT_EQ(c->numExperts, 896);
  EXPECT_EQ(c->topK, 16);
  EXPECT_EQ(c->numSharedExperts, 2);
  EXPECT_EQ(c->moeIntermediateSize, 3072);
  EXPECT_EQ(c->latentSize, 3584);
  EXPECT_TRUE(c->latentNorm);
  EXPECT_EQ(c->mlaHeads, 96);
  EXPECT_EQ(c->qLoraRank, 1536);
  EXPECT_EQ(c->kvLoraRank, 512);
  EXPECT_EQ(c->qkNopeHeadDim, 128);
  EXPECT_EQ(c->qkRopeHeadDim, 64);
  EXPECT_EQ(c->vHeadDim, 128);
  EXPECT_DOUBLE_EQ(c->mlaNormEps, 1e-6); // K3_SPEC §11.1 default
  EXPECT_EQ(c->kdaHeads, 96);
  EXPECT_EQ(c->kdaHeadDim, 128);
  EXPECT_EQ(c->convKernel, 4);
  ASSERT_TRUE(c->gateLowerBound.has_value());
  EXPECT_DOUBLE_EQ(*c->gateLowerBound, -5.0);
  EXPECT_TRUE(c->fullRankOutputGate);
  EXPECT_TRUE(c->mxfp4Experts);
  EXPECT_EQ(c->quantGroupSize, 32);
  EXPECT_EQ(c->configHash.size(), 64u);
}

TEST(ConfigTest, KimiK3LayerMap) {
  llvm::Expected<TextConfig> c = loadConfig(kK3);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  // K3_SPEC §1.2: KDA iff l <= 90 and l mod 4 != 3; layers 91 and 92 MLA.
  ASSERT_EQ(c->mixers.size(), 93u);
  for (int l = 0; l < 93; ++l) {
    Mixer expected = (l <= 90 && l % 4 != 3) ? Mixer::KDA : Mixer::MLA;
    EXPECT_EQ(c->mixers[l], expected) << "layer " << l;
    EXPECT_EQ(c->ffns[l], l == 0 ? FFN::Dense : FFN::MoE) << "layer " << l;
  }
  EXPECT_EQ(c->countMixer(Mixer::KDA), 69);
  EXPECT_EQ(c->countMixer(Mixer::MLA), 24);
}

TEST(ConfigTest, BareTextConfigHasNoPrefix) {
  llvm::Expected<TextConfig> c = loadConfig(kTiny);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  auto buf = llvm::MemoryBuffer::getFile(kTiny);
  ASSERT_TRUE(bool(buf));
  // Cut the text_config object out of the wrapper and parse it alone.
  std::string text = (*buf)->getBuffer().str();
  size_t start = text.find("\"text_config\": {");
  ASSERT_NE(start, std::string::npos);
  start = text.find('{', start);
  int depth = 0;
  size_t end = start;
  for (; end < text.size(); ++end) {
    depth += text[end] == '{' ? 1 : text[end] == '}' ? -1 : 0;
    if (depth == 0)
      break;
  }
  llvm::Expected<TextConfig> bare =
      parseConfig(text.substr(start, end - start + 1), "bare");
  ASSERT_TRUE(bool(bare)) << llvm::toString(bare.takeError());
  EXPECT_EQ(bare->modelType, "kimi_linear");
  EXPECT_EQ(bare->tensorPrefix, "");
  EXPECT_EQ(bare->mixers, c->mixers);
  EXPECT_EQ(bare->configHash, c->configHash);
}

TEST(ConfigTest, SyntaxErrorsHaveLineAndColumn) {
  EXPECT_EQ(errorOf("{\n  \"model_type\": \"kimi_k3\",\n  oops\n}"),
            "cfg: line 3, column 3: not valid JSON: syntax error while "
            "parsing object key - invalid literal; expected string literal");
  EXPECT_EQ(errorOf("[1, 2]"), "cfg: top level must be a JSON object, got array");
  EXPECT_NE(errorOf("{\"model_type\": \"kimi_\xff\"}").find("not valid JSON"),
            std::string::npos);
}

TEST(ConfigTest, DuplicateKeysAreRejected) {
  EXPECT_EQ(errorOf("{\"model_type\": \"kimi_k3\", \"text_config\": "
                    "{\"hidden_size\": 1, \"hidden_size\": 2}}"),
            "cfg: duplicate key 'text_config.hidden_size'");
}

// Found by fuzz-config (10-minute run): a key with an escaped newline made
// a two-line message. Input bytes are escaped; the message is one line.
TEST(ConfigTest, ControlCharactersInKeysAreEscaped) {
  EXPECT_EQ(errorOf("{\"a\\nb\": 1, \"a\\nb\": 2}"),
            "cfg: duplicate key 'a\\nb'");
  EXPECT_EQ(errorOf("{\"x\\u0001\": 1, \"x\\u0001\": 2}"),
            "cfg: duplicate key 'x\\x01'");
}

TEST(ConfigTest, UnknownModelType) {
  EXPECT_EQ(errorOf("{\"model_type\": \"llama\"}"),
            "cfg: key 'model_type': unknown model_type 'llama' (k3c compiles "
            "'kimi_k3' and 'kimi_linear')");
  EXPECT_EQ(errorOf("{}"), "cfg: missing required key 'model_type'");
}

} // namespace
