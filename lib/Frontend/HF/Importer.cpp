//===- Importer.cpp - TextConfig -> k3 module -----------------------------===//
//
// The module has one public entry point, @forward, over one segment of T
// tokens of one sequence:
//
//   func.func @forward(%tokens: tensor<?xi32>, <state of every layer>)
//       -> (tensor<?xVxbf16> logits, <new state of every layer>)
//
// and one private body per layer kind (@kda_mixer, @mla_mixer, @dense_ffn,
// @moe_ffn) that @forward calls once per layer with that layer's weights, so
// the IR grows by a few ops per layer, not by a layer body. @forward itself
// carries the Block AttnRes recurrence of K3_SPEC §3.2.
//
//===----------------------------------------------------------------------===//

#include "k3/Frontend/HF/Importer.h"
#include "k3/Dialect/K3/IR/K3.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>
#include <map>

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::hf;

namespace {

/// A weight of a layer body: its checkpoint name relative to
/// "model.layers.<l>." and its type.
struct WeightSpec {
  std::string name;
  Type type;
};

class ModelBuilder {
public:
  ModelBuilder(MLIRContext &ctx, const TextConfig &c, const ImportOptions &o)
      : ctx(ctx), c(c), opts(o), bf16(BFloat16Type::get(&ctx)),
        f32(Float32Type::get(&ctx)), actType(o.f32Activations ? f32 : bf16) {}

  OwningOpRef<ModuleOp> build();

private:
  MLIRContext &ctx;
  const TextConfig &c;
  const ImportOptions &opts;
  Type bf16, f32;
  Type actType; ///< activation dtype
  ModuleOp module;

  //===--- Types ----------------------------------------------------------===//

  /// Activations [T, n] (T dynamic).
  RankedTensorType act(int64_t n) {
    return RankedTensorType::get({ShapedType::kDynamic, n}, actType);
  }
  RankedTensorType act(int64_t h, int64_t d) {
    return RankedTensorType::get({ShapedType::kDynamic, h, d}, actType);
  }
  RankedTensorType tensor(ArrayRef<int64_t> shape, Type elem = {}) {
    return RankedTensorType::get(shape, elem ? elem : bf16);
  }
  KDAStateType kdaStateType() {
    return KDAStateType::get(&ctx, c.kdaHeads, c.kdaHeadDim, c.kdaHeadDim, f32,
                             opts.kdaStateValueFirst ? KDAStateLayout::ValueFirst
                                                     : KDAStateLayout::KeyFirst);
  }
  ConvStateType convStateType() {
    return ConvStateType::get(&ctx, c.kdaHeads * c.kdaHeadDim,
                              c.convKernel - 1, actType);
  }
  MLACacheType mlaCacheType() {
    return MLACacheType::get(&ctx, c.kvLoraRank, c.qkRopeHeadDim, actType,
                             opts.mlaPageSize);
  }

  /// An expert stack [E, rows, cols]: MXFP4 or bf16 per the config (§7.1).
  Type expertType(int64_t rows, int64_t cols) {
    if (c.mxfp4Experts)
      return MXFP4Type::get(&ctx, {c.numExperts, rows, cols});
    return tensor({c.numExperts, rows, cols});
  }
  std::string expertName(StringRef w) {
    return "block_sparse_moe.experts.{e}." + w.str() +
           (c.mxfp4Experts ? "" : ".weight");
  }
  int64_t latentWidth() const {
    return c.latentSize ? c.latentSize : c.hiddenSize;
  }

  //===--- Weights of each body (K3_SPEC §1.4) ---------------------------===//

  SmallVector<WeightSpec> kdaWeights();
  SmallVector<WeightSpec> mlaWeights();
  SmallVector<WeightSpec> denseWeights();
  SmallVector<WeightSpec> moeWeights();

  //===--- Bodies ---------------------------------------------------------===//

  func::FuncOp buildKDAMixer();
  func::FuncOp buildMLAMixer();
  func::FuncOp buildDenseFFN();
  func::FuncOp buildMoEFFN();
  void buildForward(func::FuncOp kda, func::FuncOp mla, func::FuncOp dense,
                    func::FuncOp moe);

  /// Creates a private function taking `x` [T, D], then `weights`, then
  /// `states`, returning [T, D] then `states`; returns the function and a
  /// map from weight name to block argument.
  func::FuncOp makeBody(StringRef name, ArrayRef<WeightSpec> weights,
                        ArrayRef<Type> states,
                        std::map<std::string, Value> &args);

  std::string layerName(int64_t l, StringRef suffix) const {
    return c.tensorPrefix + "model.layers." + std::to_string(l) + "." +
           suffix.str();
  }
  std::string modelName(StringRef suffix) const {
    return c.tensorPrefix + suffix.str();
  }

  Location nameLoc(const Twine &name) {
    return NameLoc::get(StringAttr::get(&ctx, name));
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// Weight lists
//===----------------------------------------------------------------------===//

SmallVector<WeightSpec> ModelBuilder::kdaWeights() {
  int64_t d = c.hiddenSize, hk = c.kdaHeads * c.kdaHeadDim;
  // A_log is stored zero-padded to a multiple of 128 entries; entry h is
  // used for head h (K3_SPEC §4.3, §11.1).
  int64_t aLog = (c.kdaHeads + 127) / 128 * 128;
  SmallVector<WeightSpec> w = {
      {"self_attn.q_proj.weight", tensor({hk, d})},
      {"self_attn.k_proj.weight", tensor({hk, d})},
      {"self_attn.v_proj.weight", tensor({hk, d})},
      {"self_attn.q_conv1d.weight", tensor({hk, 1, c.convKernel}, f32)},
      {"self_attn.k_conv1d.weight", tensor({hk, 1, c.convKernel}, f32)},
      {"self_attn.v_conv1d.weight", tensor({hk, 1, c.convKernel}, f32)},
      {"self_attn.f_a_proj.weight", tensor({c.forgetGateRank, d})},
      {"self_attn.f_b_proj.weight", tensor({hk, c.forgetGateRank})},
      {"self_attn.b_proj.weight", tensor({c.kdaHeads, d})},
      {"self_attn.A_log", tensor({aLog}, f32)},
      {"self_attn.dt_bias", tensor({hk}, f32)},
  };
  if (c.fullRankOutputGate) {
    w.push_back({"self_attn.g_proj.weight", tensor({hk, d})});
  } else {
    w.push_back({"self_attn.g_a_proj.weight", tensor({c.outputGateRank, d})});
    w.push_back({"self_attn.g_b_proj.weight", tensor({hk, c.outputGateRank})});
  }
  w.push_back({"self_attn.o_norm.weight", tensor({c.kdaHeadDim}, f32)});
  w.push_back({"self_attn.o_proj.weight", tensor({d, hk})});
  return w;
}

SmallVector<WeightSpec> ModelBuilder::mlaWeights() {
  int64_t d = c.hiddenSize, h = c.mlaHeads;
  SmallVector<WeightSpec> w = {
      {"self_attn.q_a_proj.weight", tensor({c.qLoraRank, d})},
      {"self_attn.q_a_layernorm.weight", tensor({c.qLoraRank})},
      {"self_attn.q_b_proj.weight",
       tensor({h * (c.qkNopeHeadDim + c.qkRopeHeadDim), c.qLoraRank})},
      {"self_attn.kv_a_proj_with_mqa.weight",
       tensor({c.kvLoraRank + c.qkRopeHeadDim, d})},
      {"self_attn.kv_a_layernorm.weight", tensor({c.kvLoraRank})},
      {"self_attn.kv_b_proj.weight",
       tensor({h * (c.qkNopeHeadDim + c.vHeadDim), c.kvLoraRank})},
  };
  if (c.mlaOutputGate)
    w.push_back({"self_attn.g_proj.weight", tensor({h * c.vHeadDim, d})});
  w.push_back({"self_attn.o_proj.weight", tensor({d, h * c.vHeadDim})});
  return w;
}

SmallVector<WeightSpec> ModelBuilder::denseWeights() {
  int64_t d = c.hiddenSize, i = c.intermediateSize;
  return {{"mlp.gate_proj.weight", tensor({i, d})},
          {"mlp.up_proj.weight", tensor({i, d})},
          {"mlp.down_proj.weight", tensor({d, i})}};
}

SmallVector<WeightSpec> ModelBuilder::moeWeights() {
  int64_t d = c.hiddenSize, l = latentWidth(), i = c.moeIntermediateSize,
          s = c.numSharedExperts * c.moeIntermediateSize;
  SmallVector<WeightSpec> w = {
      {"block_sparse_moe.gate.weight", tensor({c.numExperts, d})},
      {"block_sparse_moe.gate.e_score_correction_bias",
       tensor({c.numExperts}, f32)},
  };
  if (c.latentSize) {
    w.push_back({"block_sparse_moe.routed_expert_down_proj.weight",
                 tensor({l, d})});
    w.push_back({"block_sparse_moe.routed_expert_up_proj.weight",
                 tensor({d, l})});
  }
  w.push_back({expertName("w1"), expertType(i, l)});
  w.push_back({expertName("w3"), expertType(i, l)});
  w.push_back({expertName("w2"), expertType(l, i)});
  if (c.latentNorm)
    w.push_back({"block_sparse_moe.routed_expert_norm.weight", tensor({l})});
  if (s) {
    w.push_back({"block_sparse_moe.shared_experts.gate_proj.weight",
                 tensor({s, d})});
    w.push_back({"block_sparse_moe.shared_experts.up_proj.weight",
                 tensor({s, d})});
    w.push_back({"block_sparse_moe.shared_experts.down_proj.weight",
                 tensor({d, s})});
  }
  return w;
}

//===----------------------------------------------------------------------===//
// Bodies
//===----------------------------------------------------------------------===//

func::FuncOp ModelBuilder::makeBody(StringRef name,
                                    ArrayRef<WeightSpec> weights,
                                    ArrayRef<Type> states,
                                    std::map<std::string, Value> &args) {
  SmallVector<Type> inputs = {act(c.hiddenSize)}, results = {act(c.hiddenSize)};
  for (const WeightSpec &w : weights)
    inputs.push_back(w.type);
  llvm::append_range(inputs, states);
  llvm::append_range(results, states);
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  auto fn = func::FuncOp::create(b, nameLoc(name), name,
                                 b.getFunctionType(inputs, results));
  fn.setPrivate();
  Block *entry = fn.addEntryBlock();
  args["x"] = entry->getArgument(0);
  for (auto [i, w] : llvm::enumerate(weights))
    args[w.name] = entry->getArgument(i + 1);
  for (auto [i, s] : llvm::enumerate(states))
    args["state" + std::to_string(i)] =
        entry->getArgument(1 + weights.size() + i);
  return fn;
}

// K3_SPEC §4: projections, short convolutions, the KDA core, gated output
// norm and the output projection.
func::FuncOp ModelBuilder::buildKDAMixer() {
  std::map<std::string, Value> a;
  Type conv = convStateType();
  func::FuncOp fn = makeBody("kda_mixer", kdaWeights(),
                             {kdaStateType(), conv, conv, conv}, a);
  ImplicitLocOpBuilder b(fn.getLoc(), &fn.front(), fn.front().begin());
  int64_t h = c.kdaHeads, dk = c.kdaHeadDim, hk = h * dk;
  Value x = a["x"];

  auto linear = [&](Value in, StringRef w, int64_t n) -> Value {
    return LinearOp::create(b, act(n), in, a[w.str()]);
  };
  // §4.1–4.2: q̂, k̂, v̂ then causal conv + SiLU, each with its tail.
  SmallVector<Value> conved, tails;
  for (auto [stream, i] : {std::pair{"q", 1}, {"k", 2}, {"v", 3}}) {
    Value proj = linear(x, "self_attn." + std::string(stream) + "_proj.weight", hk);
    auto op = ShortConvOp::create(
        b, act(hk), conv, proj,
        a["self_attn." + std::string(stream) + "_conv1d.weight"],
        a["state" + std::to_string(i)]);
    conved.push_back(op.getResult());
    tails.push_back(op.getNewTail());
  }
  // §4.1: forget gate f = W_fb W_fa x, beta logits, output gate z.
  Value f = linear(linear(x, "self_attn.f_a_proj.weight", c.forgetGateRank),
                   "self_attn.f_b_proj.weight", hk);
  Value beta = linear(x, "self_attn.b_proj.weight", h);
  Value z = c.fullRankOutputGate
                ? linear(x, "self_attn.g_proj.weight", hk)
                : linear(linear(x, "self_attn.g_a_proj.weight", c.outputGateRank),
                         "self_attn.g_b_proj.weight", hk);

  // Split heads: [T, H*d] -> [T, H, d] (head-major packing, §1.4).
  Value t = tensor::DimOp::create(b, x, 0);
  SmallVector<ReassociationIndices> split = {{0}, {1, 2}};
  auto heads = [&](Value v) -> Value {
    return tensor::ExpandShapeOp::create(
        b, act(h, dk), v, split,
        ArrayRef<OpFoldResult>{t, b.getIndexAttr(h), b.getIndexAttr(dk)});
  };

  // §4.3–4.6: gate, beta, L2 norm, scale and the delta rule.
  std::optional<double> lb = c.gateLowerBound;
  auto kda = KDAOp::create(
      b, act(h, dk), kdaStateType(), heads(conved[0]), heads(conved[1]),
      heads(conved[2]), heads(f), beta, a["self_attn.A_log"],
      a["self_attn.dt_bias"], a["state0"],
      KDAGateFormAttr::get(&ctx, lb ? KDAGateForm::LowerBoundSigmoid
                                    : KDAGateForm::Softplus),
      lb ? b.getF64FloatAttr(*lb) : FloatAttr(),
      b.getF64FloatAttr(1.0 / std::sqrt(double(dk))), b.getF64FloatAttr(1e-6),
      b.getI64IntegerAttr(opts.kdaChunkSize));

  // §4.7: per-head RMSNorm gated by σ(z), then W_o.
  Value y = GatedRMSNormOp::create(b, act(h, dk), kda.getResult(), heads(z),
                                   a["self_attn.o_norm.weight"],
                                   b.getF64FloatAttr(c.rmsNormEps));
  Value flat = tensor::CollapseShapeOp::create(b, act(hk), y, split);
  Value out = linear(flat, "self_attn.o_proj.weight", c.hiddenSize);
  func::ReturnOp::create(
      b, ValueRange{out, kda.getNewState(), tails[0], tails[1], tails[2]});
  return fn;
}

// K3_SPEC §5: the gated NoPE MLA op, then the output projection.
func::FuncOp ModelBuilder::buildMLAMixer() {
  std::map<std::string, Value> a;
  func::FuncOp fn = makeBody("mla_mixer", mlaWeights(), {mlaCacheType()}, a);
  ImplicitLocOpBuilder b(fn.getLoc(), &fn.front(), fn.front().begin());
  int64_t hv = c.mlaHeads * c.vHeadDim;
  Value gate = c.mlaOutputGate ? a["self_attn.g_proj.weight"] : Value();
  auto mla = GatedMLAOp::create(
      b, act(hv), mlaCacheType(), a["x"], a["self_attn.q_a_proj.weight"],
      a["self_attn.q_a_layernorm.weight"], a["self_attn.q_b_proj.weight"],
      a["self_attn.kv_a_proj_with_mqa.weight"],
      a["self_attn.kv_a_layernorm.weight"], a["self_attn.kv_b_proj.weight"],
      a["state0"], gate, c.mlaHeads, c.qkNopeHeadDim, c.qkRopeHeadDim,
      c.vHeadDim,
      llvm::APFloat(1.0 / std::sqrt(double(c.qkNopeHeadDim + c.qkRopeHeadDim))),
      llvm::APFloat(c.mlaNormEps), llvm::APFloat(c.mlaNormEps));
  Value out = LinearOp::create(b, act(c.hiddenSize), mla.getResult(),
                               a["self_attn.o_proj.weight"]);
  func::ReturnOp::create(b, ValueRange{out, mla.getNewCache()});
  return fn;
}

GLUActivationAttr activationAttr(MLIRContext &ctx, const TextConfig &c) {
  return GLUActivationAttr::get(&ctx, c.hiddenAct == "situ"
                                          ? GLUActivation::Situ
                                          : GLUActivation::Silu);
}

// K3_SPEC §6.4: the dense SiTU MLP.
func::FuncOp ModelBuilder::buildDenseFFN() {
  std::map<std::string, Value> a;
  func::FuncOp fn = makeBody("dense_ffn", denseWeights(), {}, a);
  ImplicitLocOpBuilder b(fn.getLoc(), &fn.front(), fn.front().begin());
  Value out = GLUMLPOp::create(
      b, act(c.hiddenSize), a["x"], a["mlp.gate_proj.weight"],
      a["mlp.up_proj.weight"], a["mlp.down_proj.weight"],
      activationAttr(ctx, c), b.getF64FloatAttr(c.situBeta),
      b.getF64FloatAttr(c.situLinearBeta));
  func::ReturnOp::create(b, out);
  return fn;
}

// K3_SPEC §6.1–6.3: Stable LatentMoE.
func::FuncOp ModelBuilder::buildMoEFFN() {
  std::map<std::string, Value> a;
  func::FuncOp fn = makeBody("moe_ffn", moeWeights(), {}, a);
  ImplicitLocOpBuilder b(fn.getLoc(), &fn.front(), fn.front().begin());
  auto opt = [&](StringRef name) -> Value {
    auto it = a.find(name.str());
    return it == a.end() ? Value() : it->second;
  };
  Value out = LatentMoEOp::create(
      b, act(c.hiddenSize), a["x"], a["block_sparse_moe.gate.weight"],
      a["block_sparse_moe.gate.e_score_correction_bias"],
      opt("block_sparse_moe.routed_expert_down_proj.weight"),
      opt("block_sparse_moe.routed_expert_up_proj.weight"),
      a[expertName("w1")], a[expertName("w3")], a[expertName("w2")],
      opt("block_sparse_moe.routed_expert_norm.weight"),
      opt("block_sparse_moe.shared_experts.gate_proj.weight"),
      opt("block_sparse_moe.shared_experts.up_proj.weight"),
      opt("block_sparse_moe.shared_experts.down_proj.weight"),
      b.getI64IntegerAttr(c.numExperts), b.getI64IntegerAttr(c.topK),
      b.getF64FloatAttr(c.routedScalingFactor), b.getBoolAttr(c.renormalize),
      b.getF64FloatAttr(c.rmsNormEps), activationAttr(ctx, c),
      b.getF64FloatAttr(c.situBeta), b.getF64FloatAttr(c.situLinearBeta));
  func::ReturnOp::create(b, out);
  return fn;
}

//===----------------------------------------------------------------------===//
// The forward pass: embedding, Block AttnRes over the layers, head
//===----------------------------------------------------------------------===//

void ModelBuilder::buildForward(func::FuncOp kda, func::FuncOp mla,
                                func::FuncOp dense, func::FuncOp moe) {
  MLIRContext *ctxp = &ctx;
  int64_t d = c.hiddenSize;
  Type actD = act(d);

  // Signature: tokens, then per layer (in order) its state; results: logits,
  // then the new states in the same order. Each state carries its layer and
  // kind so the runtime can allocate it.
  SmallVector<Type> inputs = {RankedTensorType::get({ShapedType::kDynamic},
                                                    IntegerType::get(ctxp, 32))};
  SmallVector<DictionaryAttr> stateAttrs;
  auto addState = [&](Type t, int64_t l, StringRef kind) {
    inputs.push_back(t);
    Builder b(ctxp);
    stateAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("k3.layer", b.getI64IntegerAttr(l)),
         b.getNamedAttr("k3.state", b.getStringAttr(kind))}));
  };
  for (int64_t l = 0; l < c.numLayers; ++l) {
    if (c.mixers[l] == Mixer::KDA) {
      addState(kdaStateType(), l, "kda.recurrent");
      addState(convStateType(), l, "kda.conv_q");
      addState(convStateType(), l, "kda.conv_k");
      addState(convStateType(), l, "kda.conv_v");
    } else {
      addState(mlaCacheType(), l, "mla.latent");
    }
  }
  // Logits are f32 holding values rounded to the activation dtype (§3.2).
  SmallVector<Type> results = {
      tensor({ShapedType::kDynamic, c.vocabSize}, f32)};
  results.append(inputs.begin() + 1, inputs.end());

  OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
  auto fn = func::FuncOp::create(mb, nameLoc("forward"), kForwardFuncName,
                                 mb.getFunctionType(inputs, results));
  Block *entry = fn.addEntryBlock();
  for (auto [i, attrs] : llvm::enumerate(stateAttrs)) {
    fn.setArgAttrs(i + 1, attrs);
    fn.setResultAttrs(i + 1, attrs);
  }
  ImplicitLocOpBuilder b(fn.getLoc(), entry, entry->begin());

  auto weight = [&](const std::string &name, Type t) -> Value {
    return WeightOp::create(b, t, name);
  };
  auto attnRes = [&](ArrayRef<Value> candidates, int64_t l, StringRef site,
                     const std::string &normName,
                     const std::string &projName) -> Value {
    Value g = weight(normName, tensor({d}));
    Value p = weight(projName, tensor({1, d}));
    auto op = AttnResOp::create(b, actD, candidates, g, p,
                                b.getF64FloatAttr(c.rmsNormEps));
    op->setAttr("k3.layer", b.getI64IntegerAttr(l));
    op->setAttr("k3.site", b.getStringAttr(site));
    return op;
  };

  // §3.2: x0 = embedding (no scaling).
  b.setLoc(nameLoc("embed_tokens"));
  Value table = weight(modelName("model.embed_tokens.weight"),
                       tensor({c.vocabSize, d}));
  Value x0 = EmbeddingOp::create(b, actD, entry->getArgument(0), table);

  SmallVector<Value> blocks; // B: stored block representations
  Value partial = x0;        // P handed from layer to layer
  SmallVector<Value> newStates;
  unsigned stateArg = 1;
  for (int64_t l = 0; l < c.numLayers; ++l) {
    b.setLoc(nameLoc("layers." + Twine(l)));
    auto lw = [&](StringRef suffix, Type t) {
      return weight(layerName(l, suffix), t);
    };
    // 1. Pre-mixer AttnRes over B ∪ [P_in] (skipped while B is empty).
    Value h = partial;
    if (blocks.empty()) {
      // The checkpoint still holds this operator's weights (§1.4).
      OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
      for (auto [suffix, type] :
           {std::pair<StringRef, Type>{"self_attention_res_norm.weight",
                                       tensor({d})},
            {"self_attention_res_proj.weight", tensor({1, d})}})
        UnusedWeightOp::create(mb, b.getLoc(), mb.getStringAttr(layerName(l, suffix)),
                               TypeAttr::get(type));
    } else {
      SmallVector<Value> cands(blocks);
      cands.push_back(partial);
      h = attnRes(cands, l, "mixer",
                  layerName(l, "self_attention_res_norm.weight"),
                  layerName(l, "self_attention_res_proj.weight"));
    }
    // 2. Block boundary: store P_in, start an empty partial sum.
    bool boundary = l % c.attnResBlockSize == 0;
    if (boundary)
      blocks.push_back(partial);

    // 3. Mixer on RMSNorm(h).
    Value xn = RMSNormOp::create(b, actD, h,
                                 lw("input_layernorm.weight", tensor({d})),
                                 b.getF64FloatAttr(c.rmsNormEps));
    bool isKDA = c.mixers[l] == Mixer::KDA;
    func::FuncOp mixer = isKDA ? kda : mla;
    SmallVector<Value> operands = {xn};
    for (const WeightSpec &w : isKDA ? kdaWeights() : mlaWeights())
      operands.push_back(lw(w.name, w.type));
    unsigned numStates = isKDA ? 4 : 1;
    for (unsigned i = 0; i < numStates; ++i)
      operands.push_back(entry->getArgument(stateArg++));
    auto call = func::CallOp::create(b, mixer, operands);
    call->setAttr("k3.layer", b.getI64IntegerAttr(l));
    llvm::append_range(newStates, call.getResults().drop_front());

    // 4. P = a, or P + a inside a block (bf16 add).
    Value a = call.getResult(0);
    partial = boundary ? a : arith::AddFOp::create(b, partial, a).getResult();

    // 5.–6. Pre-FFN AttnRes over B ∪ [P], then the FFN on RMSNorm(h').
    SmallVector<Value> cands(blocks);
    cands.push_back(partial);
    Value h2 = attnRes(cands, l, "ffn", layerName(l, "mlp_res_norm.weight"),
                       layerName(l, "mlp_res_proj.weight"));
    Value xn2 = RMSNormOp::create(
        b, actD, h2, lw("post_attention_layernorm.weight", tensor({d})),
        b.getF64FloatAttr(c.rmsNormEps));
    bool isMoE = c.isMoELayer(l);
    SmallVector<Value> ffnOperands = {xn2};
    for (const WeightSpec &w : isMoE ? moeWeights() : denseWeights())
      ffnOperands.push_back(lw(w.name, w.type));
    auto ffn = func::CallOp::create(b, isMoE ? moe : dense, ffnOperands);
    ffn->setAttr("k3.layer", b.getI64IntegerAttr(l));

    // 7. P = P + m.
    partial = arith::AddFOp::create(b, partial, ffn.getResult(0));
  }

  // Output AttnRes over B ∪ [P], final norm, LM head (§3.2).
  b.setLoc(nameLoc("output"));
  SmallVector<Value> cands(blocks);
  cands.push_back(partial);
  Value hOut = attnRes(cands, c.numLayers, "output",
                       modelName("model.output_attn_res_norm.weight"),
                       modelName("model.output_attn_res_proj.weight"));
  Value y = RMSNormOp::create(b, actD, hOut,
                              weight(modelName("model.norm.weight"), tensor({d})),
                              b.getF64FloatAttr(c.rmsNormEps));
  Value head = c.tieWordEmbeddings
                   ? table
                   : weight(modelName("lm_head.weight"), tensor({c.vocabSize, d}));
  Value logits = LMHeadOp::create(b, results[0], y, head);
  SmallVector<Value> rets = {logits};
  llvm::append_range(rets, newStates);
  func::ReturnOp::create(b, rets);
}

OwningOpRef<ModuleOp> ModelBuilder::build() {
  ctx.loadDialect<K3Dialect, func::FuncDialect, tensor::TensorDialect,
                  arith::ArithDialect>();
  OwningOpRef<ModuleOp> owned = ModuleOp::create(nameLoc(c.name));
  module = *owned;
  Builder b(&ctx);
  module->setAttr("k3.model", b.getStringAttr(c.name));
  module->setAttr("k3.model_type", b.getStringAttr(c.modelType));
  module->setAttr("k3.config_hash", b.getStringAttr(c.configHash));
  module->setAttr("k3.max_context", b.getI64IntegerAttr(c.maxPositionEmbeddings));
  module->setAttr("k3.attn_res_block_size",
                  b.getI64IntegerAttr(c.attnResBlockSize));

  func::FuncOp kda, mla, dense, moe;
  if (c.countMixer(Mixer::KDA))
    kda = buildKDAMixer();
  if (c.countMixer(Mixer::MLA))
    mla = buildMLAMixer();
  if (c.countFFN(FFN::Dense))
    dense = buildDenseFFN();
  if (c.countFFN(FFN::MoE))
    moe = buildMoEFFN();
  buildForward(kda, mla, dense, moe);
  return owned;
}

OwningOpRef<ModuleOp> mlir::k3::hf::importModel(MLIRContext &context,
                                                const TextConfig &config,
                                                const ImportOptions &options) {
  return ModelBuilder(context, config, options).build();
}
