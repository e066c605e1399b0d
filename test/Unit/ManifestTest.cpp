//===- ManifestTest.cpp - model description of imported configs -----------===//
//
// The numbers K3_SPEC §1 states for Kimi K3, read off the imported module.
//
//===----------------------------------------------------------------------===//

#include "k3/Frontend/HF/Importer.h"
#include "k3/Target/Manifest.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::k3;

namespace {

struct Imported {
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  ModelInfo info;
};

std::unique_ptr<Imported> import(const char *path) {
  auto out = std::make_unique<Imported>();
  auto config = hf::loadConfig(path);
  EXPECT_TRUE(bool(config));
  if (!config)
    return nullptr;
  out->module = hf::importModel(out->context, *config, hf::ImportOptions());
  EXPECT_TRUE(succeeded(verify(*out->module)));
  FailureOr<ModelInfo> info = describeModel(*out->module);
  EXPECT_TRUE(succeeded(info));
  if (failed(info))
    return nullptr;
  out->info = *info;
  return out;
}

TEST(ManifestTest, KimiK3Totals) {
  auto m = import(K3C_SOURCE_DIR "/models/kimi-k3/config.json");
  ASSERT_TRUE(m);
  const ModelInfo &info = m->info;
  // K3_SPEC §1.4: 497,052 text tensors; 2.779 T total, 104.2 B active
  // per token without the embedding table.
  EXPECT_EQ(info.tensorCount, 497052);
  EXPECT_EQ(info.totalParameters, 2779484478208);
  EXPECT_EQ(info.activeParameters, 104189600512);
  EXPECT_EQ(info.layers.size(), 93u);
  EXPECT_EQ(info.outputCandidates, 9);

  // K3_SPEC §4.8, §5.3: 6 MiB of fp32 KDA state per layer, 1152 B of latent
  // cache per token and MLA layer.
  int64_t kdaRecurrent = 0, mlaPerToken = 0;
  for (const StateGroup &s : info.states) {
    if (s.kind == "kda.recurrent") {
      EXPECT_EQ(s.layers.size(), 69u);
      EXPECT_EQ(s.bytesPerLayer, 6 * 1024 * 1024);
      EXPECT_EQ(s.layout, "value_first");
      kdaRecurrent += s.bytesPerLayer * s.layers.size();
    }
    if (s.kind == "mla.latent") {
      EXPECT_EQ(s.layers.size(), 24u);
      EXPECT_EQ(s.bytesPerLayer, 1152);
      mlaPerToken += s.bytesPerLayer * s.layers.size();
    }
  }
  EXPECT_EQ(kdaRecurrent, int64_t(414) * 1024 * 1024);
  EXPECT_EQ(mlaPerToken, 27648);
}

TEST(ManifestTest, KimiK3AttnResSchedule) {
  auto m = import(K3C_SOURCE_DIR "/models/kimi-k3/config.json");
  ASSERT_TRUE(m);
  // K3_SPEC §3.3: (pre-mixer, pre-FFN) candidate counts.
  using Counts = std::pair<int64_t, int64_t>;
  auto counts = [&](int l) {
    const LayerInfo &li = m->info.layers[l];
    return Counts(li.preMixerCandidates, li.preFFNCandidates);
  };
  EXPECT_EQ(counts(0), Counts(0, 2));
  for (int l = 1; l <= 11; ++l)
    EXPECT_EQ(counts(l), Counts(2, 2));
  EXPECT_EQ(counts(12), Counts(2, 3));
  EXPECT_EQ(counts(13), Counts(3, 3));
  EXPECT_EQ(counts(84), Counts(8, 9));
  for (int l = 85; l <= 92; ++l)
    EXPECT_EQ(counts(l), Counts(9, 9));
  // Stored blocks grow by one at every boundary: ceil(l / 12) at layer l.
  for (int l = 1; l < 93; ++l)
    EXPECT_EQ(counts(l).first, (l + 11) / 12 + 1) << "layer " << l;
}

TEST(ManifestTest, ExpertTensorsExpand) {
  auto m = import(K3C_SOURCE_DIR "/models/k3-tiny/config.json");
  ASSERT_TRUE(m);
  int64_t stacks = 0;
  for (const WeightGroup &g : m->info.weights) {
    if (!g.experts)
      continue;
    ++stacks;
    EXPECT_EQ(g.experts, 8);
    ASSERT_EQ(g.tensors.size(), 2u);
    EXPECT_EQ(g.tensors[0].quantization, "mxfp4.packed");
    EXPECT_EQ(g.tensors[1].quantization, "mxfp4.scale");
    // Packed is [N, K/2], scales [N, K/32].
    EXPECT_EQ(g.tensors[0].shape.back() * 2, g.tensors[1].shape.back() * 32);
  }
  EXPECT_EQ(stacks, 7 * 3); // 7 MoE layers x (w1, w3, w2)
}

} // namespace
