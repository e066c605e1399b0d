//===- GPUGatedNorm.cpp - KDA's gated RMSNorm, a warp per head ------------===//
//
// K3_SPEC §4.7 normalises each head of the KDA output: y = round(RMSNorm(o)
// · γ · σ(z)) over the head's V values. The generic kernels
// (Kernels/Dense.mlir, @k3k_gated_rms_norm_rows, marked
// `k3.gated_rms_norm`) take two launches for it: the sums of squares (one
// warp per head, GPUWarpReduce) and the elementwise norm (2 kernels of
// 1.7 us per KDA layer of a batch-1 step on the H200, BENCHMARKS.md
// twenty-eighth session). This pass gives the function a second body,
// chosen at run time (V a multiple of 32): one warp per
// (token, head), lane l holding values l, l + 32, ...; the sum of squares
// is the lane's terms in that order, then an xor-shuffle tree over the
// warp, as the generic kernels' warp split takes it, and each lane then
// normalises its values with the generic body's operations in its order.
// The same bits, in one launch.
//
//===----------------------------------------------------------------------===//

#include "KDAWarp.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUGATEDNORMPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr int64_t kWarps = 8, kLanes = 32;
constexpr llvm::StringLiteral kAttr = "k3.gated_rms_norm";

class GatedNormKernel : k3::IndexMath {
public:
  GatedNormKernel(OpBuilder &b, Location loc, Block &body, func::FuncOp widen,
                  func::FuncOp narrow)
      : IndexMath{b, loc}, widenFn(widen), narrowFn(narrow) {
    o = body.getArgument(0), z = body.getArgument(1), g = body.getArgument(2);
    eps = body.getArgument(3), out = body.getArgument(4);
  }

  void build(SmallVectorImpl<Operation *> &rest);

private:
  func::FuncOp widenFn, narrowFn;
  Value o, z, g, eps, out;
};

void GatedNormKernel::build(SmallVectorImpl<Operation *> &rest) {
  Value c0 = idx(0), c1 = idx(1), c2 = idx(2);
  Value tokens = memref::DimOp::create(b, loc, o, c0);
  Value heads = memref::DimOp::create(b, loc, o, c1);
  Value d = memref::DimOp::create(b, loc, o, c2);
  // z and out of o's shape, γ of V values, V a multiple of 32.
  Value ok = rem0(d, kLanes);
  for (Value m : {z, out})
    for (int64_t i = 0; i < 3; ++i)
      ok = both(ok, eq(memref::DimOp::create(b, loc, m, i),
                       memref::DimOp::create(b, loc, o, i)));
  ok = both(ok, eq(memref::DimOp::create(b, loc, g, c0), d));
  k3::guardBody(b, loc, rest, ok);

  Value rows = mul(tokens, heads);
  auto launch = gpu::LaunchOp::create(b, loc, ceilDiv(rows, idx(kWarps)), c1,
                                      c1, idx(kLanes), idx(kWarps), c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  Value lane = launch.getThreadIds().x;
  Value row = add(mul(launch.getBlockIds().x, idx(kWarps)),
                  launch.getThreadIds().y);
  // A warp is active or not as a whole (its shuffles see every lane).
  auto active = scf::IfOp::create(b, loc, lt(row, rows),
                                  /*withElseRegion=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  Value i = div(row, heads), h = rem(row, heads);
  auto value = [&](Value m, Value col) {
    Value x = memref::LoadOp::create(b, loc, m, ValueRange{i, h, col});
    return call(widenFn, x);
  };
  // The sum of squares: lane l's values l, l + 32, ... in order from 0,
  // then the warp's tree (the generic kernels' warp split).
  Value s = k3::gatedNormSumSquares(*this, lane, d,
                                    [&](Value col) { return value(o, col); });
  // Each value: the generic body's operations, in its order (Dense.mlir).
  Value di = arith::IndexCastOp::create(b, loc, b.getI64Type(), d);
  Value df = arith::SIToFPOp::create(b, loc, b.getF32Type(), di);
  scf::ForOp::create(
      b, loc, lane, d, idx(kLanes), ValueRange{},
      [&](OpBuilder &, Location, Value col, ValueRange) {
        Value x = value(o, col), zf = value(z, col);
        Value w = memref::LoadOp::create(b, loc, g, ValueRange{col});
        Value y = k3::gatedNormValue(*this, x, zf, w, s, df, eps);
        memref::StoreOp::create(b, loc, call(narrowFn, y), out,
                                ValueRange{i, h, col});
        scf::YieldOp::create(b, loc);
      });
  b.setInsertionPointToEnd(&launch.getBody().front());
  gpu::TerminatorOp::create(b, loc);
}

struct K3GPUGatedNormPass
    : k3::impl::K3GPUGatedNormPassBase<K3GPUGatedNormPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp f = getOperation();
    if (!f->hasAttr(kAttr) || f.isExternal())
      return;
    auto fail = [&](const Twine &why) {
      f.emitError() << kAttr << ": " << why;
      signalPassFailure();
    };
    Block &body = f.getBody().front();
    Builder t(f.getContext());
    Type f32 = t.getF32Type();
    auto memref = [&](unsigned n, int64_t rank) {
      auto m = dyn_cast<MemRefType>(body.getArgument(n).getType());
      return m && m.getRank() == rank && m.getLayout().isIdentity()
                 ? m
                 : MemRefType();
    };
    if (body.getNumArguments() != 5)
      return fail("expected (o [T, H, V], z [T, H, V], gamma [V], eps, out "
                  "[T, H, V]) arguments");
    MemRefType ot = memref(0, 3);
    Type act = ot ? ot.getElementType() : Type();
    auto isAct = [&](MemRefType m) { return m && m.getElementType() == act; };
    MemRefType gt = memref(2, 1);
    if (!act || !(act.isBF16() || act.isF32()) || !isAct(memref(1, 3)) ||
        !gt || gt.getElementType() != f32 ||
        body.getArgument(3).getType() != f32 || !isAct(memref(4, 3)))
      return fail("expected bf16 or f32 memrefs o, z and out, f32 gamma and "
                  "eps");
    if (!k3::returnsNothing(body))
      return fail("the function must return nothing");
    auto spec = f->getAttrOfType<DictionaryAttr>(kAttr);
    func::FuncOp widen =
        k3::namedFunction(f, spec, "widen", t.getFunctionType({act}, {f32}));
    func::FuncOp narrow =
        k3::namedFunction(f, spec, "narrow", t.getFunctionType({f32}, {act}));
    if (!widen || !narrow)
      return fail("must be a dictionary naming functions widen (act) -> f32 "
                  "and narrow (f32) -> act");
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder builder(f.getContext());
    builder.setInsertionPointToStart(&body);
    GatedNormKernel(builder, f.getLoc(), body, widen, narrow).build(rest);
  }
};
} // namespace
