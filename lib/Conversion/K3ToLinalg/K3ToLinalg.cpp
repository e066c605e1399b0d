//===- K3ToLinalg.cpp - k3 ops -> kernels in linalg/scf/memref ------------===//
//
// Each k3 op becomes a call to a kernel function of Kernels/*.mlir (written
// in linalg, tensor, scf, memref, arith and math with dynamic shapes), after
// casting its operands to the kernel's dynamic types. State types become
// buffers updated in place, addressed per call (docs/ABI.md): a KDA state or
// conv tail is (pool of every sequence's state, slots of the call), an MLA
// cache (page pool, page tables, lengths); MXFP4 weights become (packed,
// scale) tensors.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"
#include "k3/Dialect/K3/IR/K3.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_CONVERTK3TOLINALGPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

#include "Kernels.inc"

/// Marks the stack of an AttnRes' blocks (AttnResLowering) until
/// shareAttnResStacks has run.
static constexpr llvm::StringLiteral kStackAttr = "k3.attn_res_stack";

//===----------------------------------------------------------------------===//
// Kernel library
//===----------------------------------------------------------------------===//

/// Parses the kernels for activation dtype `act` and copies every kernel
/// function the module does not define yet into it.
static LogicalResult importKernels(ModuleOp module, Type act) {
  std::string text = act.isF32() ? k3Kernel_Prelude_f32 : k3Kernel_Prelude_bf16;
  for (const char *k :
       {k3Kernel_Dense, k3Kernel_KDA, k3Kernel_MLA, k3Kernel_MoE,
        k3Kernel_Random})
    text += k;
  ParserConfig config(module.getContext());
  OwningOpRef<ModuleOp> kernels = parseSourceString<ModuleOp>(text, config);
  if (!kernels)
    return module.emitError("internal error: the k3 kernel library does not parse");
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  for (auto fn : kernels->getOps<func::FuncOp>())
    if (!module.lookupSymbol(fn.getSymName()))
      b.clone(*fn);
  return success();
}

/// The activation dtype of a module: the embedding's result element type.
static Type activationType(ModuleOp module) {
  Type act = BFloat16Type::get(module.getContext());
  module.walk([&](EmbeddingOp op) {
    act = op.getResult().getType().getElementType();
  });
  return act;
}

//===----------------------------------------------------------------------===//
// Type conversion
//===----------------------------------------------------------------------===//

namespace {
/// A pool [?, dims...] with any strides and offset: the runtime's slot pool
/// (docs/ABI.md) seen as the states of one kind and layer.
MemRefType poolType(ArrayRef<int64_t> dims, Type elem) {
  SmallVector<int64_t> shape = {ShapedType::kDynamic};
  llvm::append_range(shape, dims);
  SmallVector<int64_t> strides(shape.size(), ShapedType::kDynamic);
  return MemRefType::get(shape, elem,
                         StridedLayoutAttr::get(elem.getContext(),
                                                ShapedType::kDynamic, strides));
}

class K3TypeConverter : public TypeConverter {
public:
  K3TypeConverter() {
    addConversion([](Type t) { return t; });
    addConversion([](KDAStateType t, SmallVectorImpl<Type> &out) {
      bool vFirst = t.getLayout() == KDAStateLayout::ValueFirst;
      out.push_back(poolType({t.getHeads(),
                              vFirst ? t.getValueDim() : t.getKeyDim(),
                              vFirst ? t.getKeyDim() : t.getValueDim()},
                             t.getElementType()));
      out.push_back(MemRefType::get({ShapedType::kDynamic},
                                    IntegerType::get(t.getContext(), 32)));
      return success();
    });
    addConversion([](ConvStateType t, SmallVectorImpl<Type> &out) {
      out.push_back(
          poolType({t.getChannels(), t.getWidth()}, t.getElementType()));
      out.push_back(MemRefType::get({ShapedType::kDynamic},
                                    IntegerType::get(t.getContext(), 32)));
      return success();
    });
    addConversion([](MLACacheType t, SmallVectorImpl<Type> &out) {
      MLIRContext *ctx = t.getContext();
      int64_t dyn = ShapedType::kDynamic;
      out.push_back(MemRefType::get({dyn, t.getPageSize(), t.getTokenWidth()},
                                    t.getElementType()));
      out.push_back(MemRefType::get({dyn, dyn}, IntegerType::get(ctx, 32)));
      out.push_back(MemRefType::get({dyn}, IntegerType::get(ctx, 64)));
      return success();
    });
    addConversion([](MXFP4Type t, SmallVectorImpl<Type> &out) {
      Type i8 = IntegerType::get(t.getContext(), 8);
      SmallVector<int64_t> packed(t.getShape()), scale(t.getShape());
      packed.back() /= 2;
      scale.back() /= MXFP4Type::kGroupSize;
      out.push_back(RankedTensorType::get(packed, i8));
      out.push_back(RankedTensorType::get(scale, i8));
      return success();
    });
  }
};

/// Casts a ranked tensor or memref to the fully dynamic type kernels take
/// (a strided memref keeps a strided layout, all of it dynamic).
Value toDynamic(OpBuilder &b, Location loc, Value v) {
  if (auto t = dyn_cast<RankedTensorType>(v.getType())) {
    SmallVector<int64_t> dyn(t.getRank(), ShapedType::kDynamic);
    auto type = RankedTensorType::get(dyn, t.getElementType());
    return type == t ? v : tensor::CastOp::create(b, loc, type, v).getResult();
  }
  if (auto t = dyn_cast<MemRefType>(v.getType())) {
    SmallVector<int64_t> dyn(t.getRank(), ShapedType::kDynamic);
    auto type = t.getLayout().isIdentity()
                    ? MemRefType::get(dyn, t.getElementType())
                    : poolType(ArrayRef<int64_t>(dyn).drop_front(),
                               t.getElementType());
    return type == t ? v : memref::CastOp::create(b, loc, type, v).getResult();
  }
  return v;
}

/// An empty stand-in for an absent optional operand of a kernel.
Value absent(OpBuilder &b, Location loc, unsigned rank, Type elem) {
  SmallVector<int64_t> zeros(rank, 0);
  Value e = tensor::EmptyOp::create(b, loc, zeros, elem);
  return toDynamic(b, loc, e);
}

Value f32Const(OpBuilder &b, Location loc, double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value indexConst(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}
Value boolConst(OpBuilder &b, Location loc, bool v) {
  return arith::ConstantOp::create(b, loc, b.getBoolAttr(v));
}

/// Calls kernel `name` on `args` (cast to dynamic types) and casts its single
/// result to `resultType`.
Value callKernel(OpBuilder &b, Location loc, StringRef name,
                 ArrayRef<Value> args, Type resultType) {
  SmallVector<Value> operands;
  for (Value a : args)
    operands.push_back(toDynamic(b, loc, a));
  auto shaped = cast<RankedTensorType>(resultType);
  SmallVector<int64_t> dyn(shaped.getRank(), ShapedType::kDynamic);
  Type kernelResult = RankedTensorType::get(dyn, shaped.getElementType());
  auto call = func::CallOp::create(b, loc, name, TypeRange{kernelResult},
                                   operands);
  Value r = call.getResult(0);
  return r.getType() == resultType
             ? r
             : tensor::CastOp::create(b, loc, resultType, r).getResult();
}

double f64(FloatAttr a) { return a.getValueAsDouble(); }

//===----------------------------------------------------------------------===//
// Patterns
//===----------------------------------------------------------------------===//

template <typename Op>
struct KernelPattern : OpConversionPattern<Op> {
  using OpConversionPattern<Op>::OpConversionPattern;
  using OneToNOpAdaptor = typename OpConversionPattern<Op>::OneToNOpAdaptor;

  /// The single converted value of an operand that converts 1:1.
  static Value one(ValueRange r) { return r.front(); }
};

struct EmbeddingLowering : KernelPattern<EmbeddingOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(EmbeddingOp op, OpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    if (!op.getTokens().getType().getElementType().isInteger(32) ||
        !op.getTable().getType().getElementType().isBF16())
      return rewriter.notifyMatchFailure(op, "needs i32 tokens and a bf16 table");
    rewriter.replaceOp(op, callKernel(rewriter, op.getLoc(), "k3k_embedding",
                                      {a.getTokens(), a.getTable()},
                                      op.getType()));
    return success();
  }
};

template <typename Op>
struct ProjectionLowering : KernelPattern<Op> {
  ProjectionLowering(const TypeConverter &tc, MLIRContext *ctx, StringRef kernel)
      : KernelPattern<Op>(tc, ctx), kernel(kernel) {}
  LogicalResult
  matchAndRewrite(Op op, typename Op::Adaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    if (!op.getWeight().getType().getElementType().isBF16())
      return rewriter.notifyMatchFailure(op, "needs a bf16 weight");
    Type result = op.getType();
    if (kernel == "k3k_lm_head")
      result = RankedTensorType::get(op.getType().getShape(),
                                     rewriter.getF32Type());
    Value v = callKernel(rewriter, op.getLoc(), kernel,
                         {a.getInput(), a.getWeight()}, result);
    if (result != op.getType())
      return rewriter.notifyMatchFailure(op, "logits must be f32");
    rewriter.replaceOp(op, v);
    return success();
  }
  std::string kernel;
};

struct RMSNormLowering : KernelPattern<RMSNormOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(RMSNormOp op, OpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    if (op.getInput().getType().getRank() != 2 ||
        !op.getWeight().getType().getElementType().isBF16())
      return rewriter.notifyMatchFailure(op, "needs [T, D] input, bf16 weight");
    Location loc = op.getLoc();
    rewriter.replaceOp(
        op, callKernel(rewriter, loc, "k3k_rms_norm",
                       {a.getInput(), a.getWeight(),
                        f32Const(rewriter, loc, f64(op.getEpsAttr()))},
                       op.getType()));
    return success();
  }
};

struct GatedRMSNormLowering : KernelPattern<GatedRMSNormOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(GatedRMSNormOp op, OpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    if (!op.getWeight().getType().getElementType().isF32())
      return rewriter.notifyMatchFailure(op, "needs an f32 weight");
    Location loc = op.getLoc();
    rewriter.replaceOp(
        op, callKernel(rewriter, loc, "k3k_gated_rms_norm",
                       {a.getInput(), a.getGate(), a.getWeight(),
                        f32Const(rewriter, loc, f64(op.getEpsAttr()))},
                       op.getType()));
    return success();
  }
};

// K3_SPEC §3.1: the kernel takes the candidates as blocks [n - 1, T, D] and
// last [1, T, D]. The last is a view of its candidate, and so are the blocks
// when there is one; several are stacked (marked, so that shareAttnResStacks
// leaves one stack per list of blocks), none are an empty stack. §3.2: every
// AttnRes of a block has the same first candidates, the block outputs, and
// only the last changes.
struct AttnResLowering : KernelPattern<AttnResOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(AttnResOp op, OpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    if (!op.getNormWeight().getType().getElementType().isBF16() ||
        !op.getProjWeight().getType().getElementType().isBF16())
      return rewriter.notifyMatchFailure(op, "needs bf16 weights");
    Location loc = op.getLoc();
    auto candType = cast<RankedTensorType>(op.getCandidates().front().getType());
    int64_t d = candType.getDimSize(1);
    ValueRange cands = a.getCandidates();
    Value t = tensor::DimOp::create(rewriter, loc, cands.front(), 0);
    auto asStack = [&](Value c) -> Value {
      return tensor::ExpandShapeOp::create(
          rewriter, loc,
          RankedTensorType::get({1, ShapedType::kDynamic, d},
                                candType.getElementType()),
          c, ArrayRef<ReassociationIndices>{{0, 1}, {2}},
          ArrayRef<OpFoldResult>{rewriter.getIndexAttr(1), t,
                                 rewriter.getIndexAttr(d)});
    };
    ValueRange blocks = cands.drop_back();
    Value stack;
    if (blocks.size() == 1) {
      stack = asStack(blocks.front());
    } else {
      // (No blocks: an empty stack, the last candidate the only one.)
      stack = tensor::EmptyOp::create(
          rewriter, loc,
          ArrayRef<int64_t>{static_cast<int64_t>(blocks.size()),
                            ShapedType::kDynamic, d},
          candType.getElementType(), ValueRange{t});
      for (auto [i, c] : llvm::enumerate(blocks)) {
        SmallVector<OpFoldResult> offsets = {rewriter.getIndexAttr(i),
                                             rewriter.getIndexAttr(0),
                                             rewriter.getIndexAttr(0)};
        SmallVector<OpFoldResult> sizes = {rewriter.getIndexAttr(1), t,
                                           rewriter.getIndexAttr(d)};
        SmallVector<OpFoldResult> strides(3, rewriter.getIndexAttr(1));
        stack = tensor::InsertSliceOp::create(rewriter, loc, c, stack, offsets,
                                              sizes, strides);
      }
      if (!blocks.empty())
        stack.getDefiningOp()->setAttr(kStackAttr, rewriter.getUnitAttr());
    }
    rewriter.replaceOp(
        op, callKernel(rewriter, loc, "k3k_attn_res",
                       {stack, asStack(cands.back()), a.getNormWeight(),
                        a.getProjWeight(),
                        f32Const(rewriter, loc, f64(op.getEpsAttr()))},
                       op.getType()));
    return success();
  }
};

struct ShortConvLowering : KernelPattern<ShortConvOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(ShortConvOp op, OneToNOpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    if (op.getTail().getType().getElementType() !=
        op.getInput().getType().getElementType())
      return rewriter.notifyMatchFailure(op, "tail dtype must be the input's");
    ValueRange tail = a.getTail();
    Value y = callKernel(rewriter, op.getLoc(), "k3k_short_conv",
                         {one(a.getInput()), one(a.getWeight()), tail[0],
                          tail[1]},
                         op.getResult().getType());
    // The tails were updated in place in the pool.
    SmallVector<SmallVector<Value>> results = {{y}, llvm::to_vector(tail)};
    rewriter.replaceOpWithMultiple(op, results);
    return success();
  }
};

struct KDALowering : KernelPattern<KDAOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(KDAOp op, OneToNOpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    KDAStateType st = op.getState().getType();
    if (!st.getElementType().isF32())
      return rewriter.notifyMatchFailure(op, "needs an f32 state");
    Location loc = op.getLoc();
    bool softplus = op.getGateForm() == KDAGateForm::Softplus;
    double lb = op.getLowerBound() ? op.getLowerBound()->convertToDouble() : 0;
    ValueRange state = a.getState();
    Value o = callKernel(
        rewriter, loc, "k3k_kda",
        {one(a.getQuery()), one(a.getKey()), one(a.getValue()),
         one(a.getGate()), one(a.getBeta()), one(a.getALog()),
         one(a.getDtBias()), state[0], state[1],
         boolConst(rewriter, loc, softplus), f32Const(rewriter, loc, lb),
         f32Const(rewriter, loc, f64(op.getScaleAttr())),
         f32Const(rewriter, loc, f64(op.getL2EpsAttr())),
         indexConst(rewriter, loc, op.getChunkSize()),
         boolConst(rewriter, loc,
                   st.getLayout() == KDAStateLayout::ValueFirst)},
        op.getResult().getType());
    // The states were updated in place in the pool.
    SmallVector<SmallVector<Value>> results = {{o}, llvm::to_vector(state)};
    rewriter.replaceOpWithMultiple(op, results);
    return success();
  }
};

struct GatedMLALowering : KernelPattern<GatedMLAOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(GatedMLAOp op, OneToNOpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    ValueRange cache = a.getCache();
    bool hasGate = !a.getOutputGate().empty();
    Value gate = hasGate ? one(a.getOutputGate())
                         : absent(rewriter, loc, 2, rewriter.getBF16Type());
    Value y = callKernel(
        rewriter, loc, "k3k_gated_mla",
        {one(a.getInput()), one(a.getQAWeight()), one(a.getQANorm()),
         one(a.getQBWeight()), one(a.getKvAWeight()), one(a.getKvANorm()),
         one(a.getKvBWeight()), gate, boolConst(rewriter, loc, hasGate),
         cache[0], cache[1], cache[2], indexConst(rewriter, loc, op.getHeads()),
         indexConst(rewriter, loc, op.getNopeDim()),
         indexConst(rewriter, loc, op.getRopeDim()),
         indexConst(rewriter, loc, op.getVDim()),
         f32Const(rewriter, loc, f64(op.getScaleAttr())),
         f32Const(rewriter, loc, f64(op.getQNormEpsAttr())),
         f32Const(rewriter, loc, f64(op.getKvNormEpsAttr()))},
        op.getResult().getType());
    // The cache pages were written in place.
    SmallVector<SmallVector<Value>> results = {{y}, llvm::to_vector(cache)};
    rewriter.replaceOpWithMultiple(op, results);
    return success();
  }
};

bool isSilu(GLUActivation a) { return a == GLUActivation::Silu; }

struct GLUMLPLowering : KernelPattern<GLUMLPOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(GLUMLPOp op, OpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    rewriter.replaceOp(
        op, callKernel(rewriter, loc, "k3k_glu_mlp",
                       {a.getInput(), a.getGateWeight(), a.getUpWeight(),
                        a.getDownWeight(),
                        boolConst(rewriter, loc, isSilu(op.getActivation())),
                        f32Const(rewriter, loc, f64(op.getBetaAttr())),
                        f32Const(rewriter, loc, f64(op.getLinearBetaAttr()))},
                       op.getType()));
    return success();
  }
};

struct LatentMoELowering : KernelPattern<LatentMoEOp> {
  using KernelPattern::KernelPattern;
  LogicalResult
  matchAndRewrite(LatentMoEOp op, OneToNOpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type bf16 = rewriter.getBF16Type();
    auto opt = [&](ValueRange r, unsigned rank) -> Value {
      return r.empty() ? absent(rewriter, loc, rank, bf16) : one(r);
    };
    bool mxfp4 = isa<MXFP4Type>(op.getExpertGate().getType());
    SmallVector<Value> args = {
        one(a.getInput()), one(a.getRouterWeight()), one(a.getRouterBias()),
        opt(a.getLatentDown(), 2), opt(a.getLatentUp(), 2),
        boolConst(rewriter, loc, !a.getLatentDown().empty())};
    for (ValueRange w : {a.getExpertGate(), a.getExpertUp(), a.getExpertDown()})
      llvm::append_range(args, w);
    llvm::append_range(
        args, ArrayRef<Value>{
                  opt(a.getLatentNorm(), 1),
                  boolConst(rewriter, loc, !a.getLatentNorm().empty()),
                  f32Const(rewriter, loc, f64(op.getNormEpsAttr())),
                  opt(a.getSharedGate(), 2), opt(a.getSharedUp(), 2),
                  opt(a.getSharedDown(), 2),
                  boolConst(rewriter, loc, !a.getSharedGate().empty()),
                  indexConst(rewriter, loc, op.getTopK()),
                  boolConst(rewriter, loc, op.getRenormalize()),
                  f32Const(rewriter, loc, f64(op.getRoutedScalingFactorAttr())),
                  boolConst(rewriter, loc, isSilu(op.getActivation())),
                  f32Const(rewriter, loc, f64(op.getBetaAttr())),
                  f32Const(rewriter, loc, f64(op.getLinearBetaAttr()))});
    if (!mxfp4 && !cast<RankedTensorType>(op.getExpertGate().getType())
                       .getElementType()
                       .isBF16())
      return rewriter.notifyMatchFailure(op, "needs MXFP4 or bf16 experts");
    Value y = callKernel(rewriter, loc,
                         mxfp4 ? "k3k_latent_moe_mxfp4" : "k3k_latent_moe_bf16",
                         args, op.getType());
    rewriter.replaceOpWithMultiple(op, {{y}});
    return success();
  }
};

// §3.2 steps 4 and 7: the block partial sums, rounded to the activation dtype.
struct ResidualAddLowering : OpConversionPattern<arith::AddFOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(arith::AddFOp op, OpAdaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || type.getRank() != 2)
      return rewriter.notifyMatchFailure(op, "not a [T, D] activation add");
    rewriter.replaceOp(op, callKernel(rewriter, op.getLoc(), "k3k_add",
                                      {a.getLhs(), a.getRhs()}, type));
    return success();
  }
};

struct UnusedWeightLowering : OpConversionPattern<UnusedWeightOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(UnusedWeightOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.eraseOp(op);
    return success();
  }
};

/// The calls of kernel `callee` outside the kernel library's own functions
/// (k3k_*, which the joins below leave alone).
static SmallVector<func::CallOp> modelCalls(ModuleOp module,
                                            StringRef callee) {
  SmallVector<func::CallOp> calls;
  for (auto fn : module.getOps<func::FuncOp>())
    if (!fn.getSymName().starts_with("k3k_"))
      fn.walk([&](func::CallOp c) {
        if (c.getCallee() == callee)
          calls.push_back(c);
      });
  return calls;
}

/// §3.2: each mixer's and FFN's input and the output are RMSNorm(AttnRes).
/// Where the norm is the AttnRes output's only use, the two kernel calls
/// become one call of @k3k_attn_res_norm (on a GPU one kernel per token,
/// k3-gpu-attn-res-norm; elsewhere the two kernels). The kernel library's
/// own functions (k3k_*) are left alone.
static void joinAttnResNorm(ModuleOp module) {
  for (func::CallOp norm : modelCalls(module, "k3k_rms_norm")) {
    SmallVector<Operation *> joined = {norm};
    Value h = norm.getOperand(0);
    while (auto cast = h.getDefiningOp<tensor::CastOp>()) {
      joined.push_back(cast);
      h = cast.getSource();
    }
    auto res = h.getDefiningOp<func::CallOp>();
    if (!res || res.getCallee() != "k3k_attn_res" ||
        llvm::any_of(joined, [&](Operation *op) {
          return op != norm && !op->hasOneUse();
        }) ||
        !res->hasOneUse())
      continue;
    joined.push_back(res);
    OpBuilder b(norm);
    SmallVector<Value> args(res.getOperands());
    args.append({norm.getOperand(1), norm.getOperand(2)});
    auto call = func::CallOp::create(
        b, b.getFusedLoc({res.getLoc(), norm.getLoc()}), "k3k_attn_res_norm",
        norm.getResultTypes(), args);
    norm.replaceAllUsesWith(call.getResults());
    for (Operation *op : joined)
      op->erase();
  }
}

/// §3.2 steps 4 and 7: the last candidate of an AttnRes is mostly the
/// partial sum just made by a residual add (@k3k_add). Where the add's
/// other uses come after the AttnRes, @k3k_attn_res_norm_add makes the sum
/// itself and returns it for them: one kernel fewer per sublayer (the same
/// bits).
static void joinResidualAdds(ModuleOp module) {
  for (func::CallOp norm : modelCalls(module, "k3k_attn_res_norm")) {
    // last = casts(expand_shape(casts(@k3k_add(a, b)))): the view and the
    // casts above it read by nothing else (`upper`); the casts of the sum
    // below it (`lower`, from the view down) and the sum itself may have
    // other uses, all after the AttnRes, which makes the sum now.
    SmallVector<Operation *> upper, lower;
    Value v = norm.getOperand(1);
    auto strip = [&](SmallVectorImpl<Operation *> &into) {
      while (auto c = v.getDefiningOp<tensor::CastOp>()) {
        into.push_back(c);
        v = c.getSource();
      }
    };
    strip(upper);
    auto view = v.getDefiningOp<tensor::ExpandShapeOp>();
    if (!view)
      continue;
    upper.push_back(view);
    v = view.getSrc();
    strip(lower);
    auto add = v.getDefiningOp<func::CallOp>();
    if (!add || add.getCallee() != "k3k_add" ||
        add->getBlock() != norm->getBlock() ||
        llvm::any_of(upper, [](Operation *op) { return !op->hasOneUse(); }))
      continue;
    auto later = [&](Value val, Operation *link) {
      return llvm::all_of(val.getUses(), [&](OpOperand &use) {
        Operation *user =
            norm->getBlock()->findAncestorOpInBlock(*use.getOwner());
        return use.getOwner() == link || (user && norm->isBeforeInBlock(user));
      });
    };
    bool ok = later(add.getResult(0), lower.empty() ? view : lower.back());
    for (auto [i, c] : llvm::enumerate(lower))
      ok = ok && later(c->getResult(0), i ? lower[i - 1] : view);
    if (!ok)
      continue;
    OpBuilder b(norm);
    Location loc = add.getLoc();
    Type lastType = norm.getOperand(1).getType();
    auto asLast = [&](Value x) -> Value {
      // (The term itself where it went through casts from the view's type.)
      for (Value y = x; y && x.getType() != view.getSrcType();) {
        auto c = y.getDefiningOp<tensor::CastOp>();
        y = c ? c.getSource() : Value();
        if (y && y.getType() == view.getSrcType())
          x = y;
      }
      if (x.getType() != view.getSrcType())
        x = tensor::CastOp::create(b, loc, view.getSrcType(), x);
      x = tensor::ExpandShapeOp::create(b, loc, view.getResultType(), x,
                                        view.getReassociationIndices(),
                                        view.getMixedOutputShape());
      return x.getType() == lastType
                 ? x
                 : tensor::CastOp::create(b, loc, lastType, x).getResult();
    };
    SmallVector<Value> args = {norm.getOperand(0), asLast(add.getOperand(0)),
                               asLast(add.getOperand(1))};
    llvm::append_range(args, norm.getOperands().drop_front(2));
    auto call = func::CallOp::create(
        b, b.getFusedLoc({loc, norm.getLoc()}), "k3k_attn_res_norm_add",
        TypeRange{norm.getResult(0).getType(), lastType}, args);
    Value sum = tensor::CollapseShapeOp::create(
        b, loc, add.getResult(0).getType(), call.getResult(1),
        view.getReassociationIndices());
    norm.getResult(0).replaceAllUsesWith(call.getResult(0));
    norm.erase();
    for (Operation *op : upper)
      op->erase();
    // The casts' other uses read casts of the returned sum.
    b.setInsertionPointAfter(sum.getDefiningOp());
    Value from = sum;
    for (Operation *c : llvm::reverse(lower)) {
      from = tensor::CastOp::create(b, c->getLoc(), c->getResult(0).getType(),
                                    from);
      c->getResult(0).replaceAllUsesWith(from);
      c->erase();
    }
    add.getResult(0).replaceAllUsesWith(sum);
    add.erase();
  }
}

/// §3.2: the AttnRes of a block read the same block outputs, stacked by
/// AttnResLowering at each of them; the first stack of each list of
/// candidates serves the later ones, so a step copies each list once (K3:
/// 35 copies instead of one per candidate and AttnRes, 1002).
static void shareAttnResStacks(ModuleOp module) {
  module.walk([&](Block *block) {
    SmallVector<std::pair<SmallVector<Value>, Value>> first;
    for (auto stack :
         llvm::make_early_inc_range(block->getOps<tensor::InsertSliceOp>())) {
      if (!stack->removeAttr(kStackAttr))
        continue;
      SmallVector<Operation *> chain;
      SmallVector<Value> blocks;
      for (Value v = stack;
           auto insert = v.getDefiningOp<tensor::InsertSliceOp>();
           v = insert.getDest()) {
        chain.push_back(insert);
        blocks.insert(blocks.begin(), insert.getSource());
      }
      chain.push_back(chain.back()->getOperand(1).getDefiningOp());
      auto *seen =
          llvm::find_if(first, [&](auto &f) { return f.first == blocks; });
      if (seen == first.end()) {
        first.emplace_back(std::move(blocks), stack);
        continue;
      }
      stack.getResult().replaceAllUsesWith(seen->second);
      for (Operation *op : chain)
        if (op->use_empty())
          op->erase();
    }
  });
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct ConvertK3ToLinalgPass
    : k3::impl::ConvertK3ToLinalgPassBase<ConvertK3ToLinalgPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    if (failed(importKernels(module, activationType(module))))
      return signalPassFailure();

    K3TypeConverter converter;
    ConversionTarget target(*ctx);
    target.addLegalDialect<arith::ArithDialect, bufferization::BufferizationDialect,
                           linalg::LinalgDialect, math::MathDialect,
                           memref::MemRefDialect, scf::SCFDialect,
                           tensor::TensorDialect>();
    target.addIllegalDialect<K3Dialect>();
    target.addDynamicallyLegalOp<arith::AddFOp>(
        [](arith::AddFOp op) { return !isa<RankedTensorType>(op.getType()); });
    target.addDynamicallyLegalOp<func::FuncOp>([&](func::FuncOp op) {
      return converter.isSignatureLegal(op.getFunctionType()) &&
             converter.isLegal(&op.getBody());
    });
    target.addDynamicallyLegalOp<func::CallOp, func::ReturnOp>(
        [&](Operation *op) { return converter.isLegal(op); });

    RewritePatternSet patterns(ctx);
    patterns.add<EmbeddingLowering, RMSNormLowering, GatedRMSNormLowering,
                 AttnResLowering, ShortConvLowering, KDALowering,
                 GatedMLALowering, GLUMLPLowering, LatentMoELowering>(
        converter, ctx);
    patterns.add<ProjectionLowering<LinearOp>>(converter, ctx, "k3k_linear");
    patterns.add<ProjectionLowering<LMHeadOp>>(converter, ctx, "k3k_lm_head");
    patterns.add<ResidualAddLowering, UnusedWeightLowering>(converter, ctx);
    populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns,
                                                                   converter);
    populateCallOpTypeConversionPattern(patterns, converter);
    populateReturnOpTypeConversionPattern(patterns, converter);
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      return signalPassFailure();
    joinAttnResNorm(module);
    joinResidualAdds(module);
    shareAttnResStacks(module);
  }
};
} // namespace
