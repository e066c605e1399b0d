//===- K3Ops.cpp - k3 op verifiers ----------------------------------------===//
//
// Every invariant of an op lives in its verifier; messages name the operand
// and the numbers at fault so a user can trace them back to config.json.
//
//===----------------------------------------------------------------------===//

#include "k3/Dialect/K3/IR/K3.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::k3;

#define GET_OP_CLASSES
#include "k3/Dialect/K3/IR/K3Ops.cpp.inc"

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

static ArrayRef<int64_t> shapeOf(Value v) {
  if (auto t = dyn_cast<RankedTensorType>(v.getType()))
    return t.getShape();
  if (auto t = dyn_cast<MXFP4Type>(v.getType()))
    return t.getShape();
  return {};
}

static std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

/// Two dimensions agree if either is dynamic or they are equal.
static bool dimsAgree(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// Checks `dims` of `what` against `expected` (dynamic entries of `expected`
/// match anything) and reports the first mismatch.
static LogicalResult expectShape(Operation *op, StringRef what, Value v,
                                 ArrayRef<int64_t> expected) {
  ArrayRef<int64_t> got = shapeOf(v);
  auto show = [](ArrayRef<int64_t> s) {
    std::string out = "[";
    for (auto [i, d] : llvm::enumerate(s))
      out += (i ? ", " : "") + dimStr(d);
    return out + "]";
  };
  if (got.size() != expected.size())
    return op->emitOpError() << what << " must have shape " << show(expected)
                             << ", got " << show(got);
  for (auto [g, e] : llvm::zip(got, expected))
    if (!dimsAgree(g, e))
      return op->emitOpError() << what << " must have shape " << show(expected)
                               << ", got " << show(got);
  return success();
}

static LogicalResult expectPositive(Operation *op, StringRef what, double v) {
  if (!(v > 0.0))
    return op->emitOpError() << what << " must be positive, got " << v;
  return success();
}

static Type elementTypeOf(Value v) {
  return cast<ShapedType>(v.getType()).getElementType();
}

//===----------------------------------------------------------------------===//
// WeightOp
//===----------------------------------------------------------------------===//

LogicalResult WeightOp::verify() {
  StringRef name = getName();
  if (name.empty())
    return emitOpError("needs a checkpoint tensor name");
  size_t first = name.find("{e}");
  if (first != StringRef::npos && name.find("{e}", first + 1) != StringRef::npos)
    return emitOpError() << "name '" << name << "' has more than one '{e}'";
  ArrayRef<int64_t> shape = shapeOf(getResult());
  if (isExpertStack() && shape.size() < 2)
    return emitOpError() << "expert stack '" << name
                         << "' needs a leading expert dimension";
  if (auto t = dyn_cast<RankedTensorType>(getType())) {
    Type e = t.getElementType();
    if (!e.isBF16() && !e.isF16() && !e.isF32())
      return emitOpError() << "weight '" << name
                           << "' must be bf16, f16, f32 or !k3.mxfp4, got "
                           << e;
  }
  return success();
}

LogicalResult UnusedWeightOp::verify() {
  if (getName().empty())
    return emitOpError("needs a checkpoint tensor name");
  Type e = cast<RankedTensorType>(getType()).getElementType();
  if (!e.isBF16() && !e.isF16() && !e.isF32())
    return emitOpError() << "weight '" << getName()
                         << "' must be bf16, f16 or f32, got " << e;
  return success();
}

//===----------------------------------------------------------------------===//
// Embedding, linear, LM head
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  ArrayRef<int64_t> table = shapeOf(getTable());
  if (failed(expectShape(*this, "result", getResult(),
                         {shapeOf(getTokens())[0], table[1]})))
    return failure();
  Type tableType = elementTypeOf(getTable()), result = elementTypeOf(getResult());
  if (result != tableType && !result.isF32())
    return emitOpError("result element type must be the table's or f32");
  return success();
}

/// y[T, N] = x[T, K] · W[N, K]ᵀ, shared by linear and lm_head.
static LogicalResult verifyProjection(Operation *op, Value x, Value w,
                                      Value y) {
  ArrayRef<int64_t> xs = shapeOf(x), ws = shapeOf(w);
  if (!dimsAgree(xs[1], ws[1]))
    return op->emitOpError() << "input width " << dimStr(xs[1])
                             << " does not match the weight's in-features "
                             << ws[1] << " (weights are [out, in])";
  return expectShape(op, "result", y, {xs[0], ws[0]});
}

LogicalResult LinearOp::verify() {
  return verifyProjection(*this, getInput(), getWeight(), getResult());
}

LogicalResult LMHeadOp::verify() {
  return verifyProjection(*this, getInput(), getWeight(), getResult());
}

//===----------------------------------------------------------------------===//
// Norms and AttnRes
//===----------------------------------------------------------------------===//

LogicalResult RMSNormOp::verify() {
  if (getInput().getType() != getResult().getType())
    return emitOpError("result type must equal the input type");
  if (failed(expectShape(*this, "weight", getWeight(),
                         {shapeOf(getInput()).back()})))
    return failure();
  return expectPositive(*this, "eps", getEps().convertToDouble());
}

LogicalResult GatedRMSNormOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (failed(expectShape(*this, "gate", getGate(), in)) ||
      failed(expectShape(*this, "result", getResult(), in)) ||
      failed(expectShape(*this, "weight", getWeight(), {in[2]})))
    return failure();
  return expectPositive(*this, "eps", getEps().convertToDouble());
}

LogicalResult AttnResOp::verify() {
  if (getCandidates().empty())
    return emitOpError("needs at least one candidate");
  Type type = getCandidates().front().getType();
  for (auto [i, c] : llvm::enumerate(getCandidates()))
    if (c.getType() != type)
      return emitOpError() << "candidate " << i << " has type " << c.getType()
                           << " but candidate 0 has " << type;
  if (getResult().getType() != type)
    return emitOpError("result type must equal the candidates' type");
  int64_t d = shapeOf(getCandidates().front())[1];
  if (failed(expectShape(*this, "norm weight", getNormWeight(), {d})) ||
      failed(expectShape(*this, "pseudo-query projection", getProjWeight(),
                         {1, d})))
    return failure();
  return expectPositive(*this, "eps", getEps().convertToDouble());
}

//===----------------------------------------------------------------------===//
// KDA
//===----------------------------------------------------------------------===//

LogicalResult ShortConvOp::verify() {
  ConvStateType tail = getTail().getType();
  int64_t c = tail.getChannels();
  if (failed(expectShape(*this, "input", getInput(), {ShapedType::kDynamic, c})))
    return failure();
  // Kernel width W = tail width + 1 (the tail holds the W-1 previous inputs).
  if (failed(expectShape(*this, "weight", getWeight(),
                         {c, 1, tail.getWidth() + 1})))
    return failure();
  if (getNewTail().getType() != tail)
    return emitOpError("new tail type must equal the tail type");
  return expectShape(*this, "result", getResult(), shapeOf(getInput()));
}

LogicalResult KDAOp::verify() {
  KDAStateType state = getState().getType();
  int64_t h = state.getHeads(), dk = state.getKeyDim(),
          dv = state.getValueDim();
  ArrayRef<int64_t> q = shapeOf(getQuery());
  if (!dimsAgree(q[1], h))
    return emitOpError() << "query has " << q[1] << " heads but the state has "
                         << h;
  if (!dimsAgree(q[2], dk))
    return emitOpError() << "query head dim " << q[2]
                         << " does not match the state's key_dim " << dk;
  int64_t t = q[0];
  if (failed(expectShape(*this, "key", getKey(), {t, h, dk})) ||
      failed(expectShape(*this, "value", getValue(), {t, h, dv})) ||
      failed(expectShape(*this, "gate", getGate(), {t, h, dk})) ||
      failed(expectShape(*this, "beta", getBeta(), {t, h})) ||
      failed(expectShape(*this, "dt_bias", getDtBias(), {h * dk})) ||
      failed(expectShape(*this, "result", getResult(), {t, h, dv})))
    return failure();
  int64_t nA = shapeOf(getALog())[0];
  if (!ShapedType::isDynamic(nA) && nA < h)
    return emitOpError() << "a_log has " << nA << " entries, fewer than the "
                         << h << " heads";
  if (getNewState().getType() != state)
    return emitOpError("new state type must equal the state type");
  std::optional<double> lb;
  if (getLowerBound())
    lb = getLowerBound()->convertToDouble();
  if (getGateForm() == KDAGateForm::LowerBoundSigmoid) {
    if (!lb)
      return emitOpError("gate form lower_bound_sigmoid needs a lower_bound");
    if (!(*lb < 0.0))
      return emitOpError() << "lower_bound must be negative, got " << *lb;
  } else if (lb) {
    return emitOpError("gate form softplus takes no lower_bound");
  }
  if (failed(expectPositive(*this, "scale", getScale().convertToDouble())) ||
      failed(expectPositive(*this, "l2_eps", getL2Eps().convertToDouble())))
    return failure();
  int64_t chunk = getChunkSize();
  if (chunk <= 0 || !llvm::isPowerOf2_64(chunk))
    return emitOpError() << "chunk_size must be a positive power of two, got "
                         << chunk;
  return success();
}

//===----------------------------------------------------------------------===//
// Gated MLA
//===----------------------------------------------------------------------===//

LogicalResult GatedMLAOp::verify() {
  int64_t h = getHeads(), dn = getNopeDim(), dr = getRopeDim(),
          dv = getVDim();
  if (h <= 0 || dn <= 0 || dr < 0 || dv <= 0)
    return emitOpError() << "needs heads, nope_dim, v_dim > 0 and rope_dim >= 0"
                            ", got "
                         << h << ", " << dn << ", " << dv << ", " << dr;
  MLACacheType cache = getCache().getType();
  if (cache.getRopeDim() != dr)
    return emitOpError() << "cache rope_dim " << cache.getRopeDim()
                         << " does not match rope_dim " << dr;
  int64_t r = cache.getLatentDim();
  ArrayRef<int64_t> x = shapeOf(getInput());
  int64_t d = x[1];
  int64_t rq = shapeOf(getQANorm())[0];
  if (failed(expectShape(*this, "q_a weight", getQAWeight(), {rq, d})) ||
      failed(expectShape(*this, "q_b weight", getQBWeight(), {h * (dn + dr), rq})) ||
      failed(expectShape(*this, "kv_a weight", getKvAWeight(), {r + dr, d})) ||
      failed(expectShape(*this, "kv_a norm", getKvANorm(), {r})) ||
      failed(expectShape(*this, "kv_b weight", getKvBWeight(), {h * (dn + dv), r})) ||
      failed(expectShape(*this, "result", getResult(), {x[0], h * dv})))
    return failure();
  if (getOutputGate() &&
      failed(expectShape(*this, "output gate weight", getOutputGate(), {h * dv, d})))
    return failure();
  if (getNewCache().getType() != cache)
    return emitOpError("new cache type must equal the cache type");
  if (failed(expectPositive(*this, "scale", getScale().convertToDouble())) ||
      failed(expectPositive(*this, "q_norm_eps", getQNormEps().convertToDouble())) ||
      failed(expectPositive(*this, "kv_norm_eps", getKvNormEps().convertToDouble())))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// MLPs and LatentMoE
//===----------------------------------------------------------------------===//

static LogicalResult verifyActivation(Operation *op, GLUActivation act,
                                      double beta, double linearBeta) {
  if (act != GLUActivation::Situ)
    return success();
  if (failed(expectPositive(op, "beta", beta)))
    return failure();
  return expectPositive(op, "linear_beta", linearBeta);
}

LogicalResult GLUMLPOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput());
  int64_t d = x[1], i = shapeOf(getGateWeight())[0];
  if (failed(expectShape(*this, "gate weight", getGateWeight(), {i, d})) ||
      failed(expectShape(*this, "up weight", getUpWeight(), {i, d})) ||
      failed(expectShape(*this, "down weight", getDownWeight(), {d, i})) ||
      failed(expectShape(*this, "result", getResult(), x)))
    return failure();
  return verifyActivation(*this, getActivation(), getBeta().convertToDouble(),
                          getLinearBeta().convertToDouble());
}

LogicalResult LatentMoEOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput());
  int64_t d = x[1];
  int64_t e = getNumExperts(), k = getTopK();
  if (e <= 0)
    return emitOpError() << "num_experts must be positive, got " << e;
  if (k <= 0 || k > e)
    return emitOpError() << "top_k " << k << " must be in [1, num_experts = "
                         << e << "]";
  if (failed(expectShape(*this, "router weight", getRouterWeight(), {e, d})) ||
      failed(expectShape(*this, "router bias", getRouterBias(), {e})))
    return failure();
  int64_t l = d;
  if (getLatentDown()) {
    l = shapeOf(getLatentDown())[0];
    if (failed(expectShape(*this, "latent down weight", getLatentDown(), {l, d})) ||
        failed(expectShape(*this, "latent up weight", getLatentUp(), {d, l})))
      return failure();
  }
  int64_t i = shapeOf(getExpertGate()).size() == 3 ? shapeOf(getExpertGate())[1]
                                                   : ShapedType::kDynamic;
  if (failed(expectShape(*this, "expert gate weights", getExpertGate(), {e, i, l})) ||
      failed(expectShape(*this, "expert up weights", getExpertUp(), {e, i, l})) ||
      failed(expectShape(*this, "expert down weights", getExpertDown(), {e, l, i})))
    return failure();
  if (getLatentNorm()) {
    if (failed(expectShape(*this, "latent norm weight", getLatentNorm(), {l})) ||
        failed(expectPositive(*this, "norm_eps", getNormEps().convertToDouble())))
      return failure();
  }
  if (getSharedGate()) {
    int64_t s = shapeOf(getSharedGate())[0];
    if (failed(expectShape(*this, "shared gate weight", getSharedGate(), {s, d})) ||
        failed(expectShape(*this, "shared up weight", getSharedUp(), {s, d})) ||
        failed(expectShape(*this, "shared down weight", getSharedDown(), {d, s})))
      return failure();
  }
  if (failed(expectPositive(*this, "routed_scaling_factor",
                            getRoutedScalingFactor().convertToDouble())))
    return failure();
  if (failed(expectShape(*this, "result", getResult(), x)))
    return failure();
  return verifyActivation(*this, getActivation(), getBeta().convertToDouble(),
                          getLinearBeta().convertToDouble());
}
