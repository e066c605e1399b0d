//===- GPUKDARecurrent.cpp - the KDA decode step in one pass over S -------===//
//
// The KDA recurrence of tokens that each have their own state (K3_SPEC
// §4.5, a decode step or batch): S ← (I − β k kᵀ) Diag(α) S + β k vᵀ,
// o = Sᵀ q. In the kernel library (Kernels/KDA.mlir, @k3k_kda_recurrent,
// marked `k3.kda_recurrent`) it is three parallel loops over the states
// seen as Sᵀ [S, H, V, K], each of which reads every state row: the
// prediction k·(αS)[:, v], the update, and the read-out (the fp32 state,
// 6.3 MB per K3 layer, read three times and written once). For a pool
// whose rows are contiguous (the value-first layout) with K = 64 or 128,
// this pass gives the function a second body, chosen at run time: one warp
// per (token, head) and kRows consecutive v, lane l holding elements
// P l .. P l + P - 1 of each row in registers (P = K / 32; 8- or 16-byte
// loads and stores), so the state is read once and written once. The
// warp loads its rows together (kRows x 512 bytes in flight for K = 128)
// and q, k and exp(g) once for them (one row per warp read them for
// every row). Each row's two sums over k are each lane's terms in order,
// then an xor-shuffle tree over the warp (the same in every lane), as
// with one row per warp: the same bits.
//
//===----------------------------------------------------------------------===//

#include "TensorCore.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUKDARECURRENTPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr int64_t kWarps = 8, kLanes = 32;
// Rows of the state (values v) per warp; V % kRows == 0 takes the kernel.
constexpr int64_t kRows = 4;
constexpr llvm::StringLiteral kAttr = "k3.kda_recurrent";

class RecurrentKernel : k3::IndexMath {
public:
  RecurrentKernel(OpBuilder &b, Location loc, Block &body)
      : IndexMath{b, loc}, qn(body.getArgument(0)), kn(body.getArgument(1)),
        vf(body.getArgument(2)), gg(body.getArgument(3)),
        bb(body.getArgument(4)), pool(body.getArgument(5)),
        slots(body.getArgument(6)), o(body.getArgument(7)) {}

  void build(SmallVectorImpl<Operation *> &rest);
  /// The kernel for rows of 32 `per` elements (`per` per lane).
  void launch(int64_t per, Value st, Value tokens, Value heads, Value dv);

private:
  Value fadd(Value l, Value r) { return arith::AddFOp::create(b, loc, l, r); }
  Value fmul(Value l, Value r) { return arith::MulFOp::create(b, loc, l, r); }
  /// `n` consecutive f32 of `m` at `indices`, as scalars.
  SmallVector<Value> load(Value m, ValueRange indices, int64_t n) {
    Value v = vector::LoadOp::create(
        b, loc, VectorType::get({n}, b.getF32Type()), m, indices,
        /*nontemporal=*/false, llvm::MaybeAlign(4 * n));
    SmallVector<Value> r;
    for (int64_t e = 0; e < n; ++e)
      r.push_back(vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{e}));
    return r;
  }
  Value warpSum(Value v) { return k3::warpSum(b, loc, v); }

  Value qn, kn, vf, gg, bb, pool, slots, o;
};

void RecurrentKernel::build(SmallVectorImpl<Operation *> &rest) {
  Value c0 = idx(0), c1 = idx(1), c2 = idx(2);
  Value tokens = memref::DimOp::create(b, loc, qn, c0);
  Value heads = memref::DimOp::create(b, loc, qn, c1);
  Value dk = memref::DimOp::create(b, loc, qn, c2);
  Value dv = memref::DimOp::create(b, loc, vf, c2);
  // The pool's rows (its last dimension) contiguous and 16-byte aligned.
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, pool);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, pool);
  Value start = add(base, mul(meta.getOffset(), idx(4)));
  Value ok = both(eq(meta.getStrides()[3], c1),
                  eq(rem(meta.getStrides()[2], idx(4)), c0));
  ok = both(ok, eq(rem(start, idx(16)), c0));
  for (Value m : {qn, kn, gg})
    ok = both(ok, aligned(m));
  Value is64 = eq(dk, idx(64)), is128 = eq(dk, idx(128));
  ok = both(ok, arith::OrIOp::create(b, loc, is64, is128));
  ok = both(ok, rem0(dv, kRows));
  k3::guardBody(b, loc, rest, ok);

  // The pool with a static unit stride for the rows (vector loads).
  SmallVector<OpFoldResult> sizes, strides;
  for (int64_t d = 0; d < 4; ++d) {
    sizes.push_back(meta.getSizes()[d]);
    strides.push_back(d == 3 ? OpFoldResult(b.getIndexAttr(1))
                             : OpFoldResult(meta.getStrides()[d]));
  }
  int64_t dyn = ShapedType::kDynamic;
  auto rowsType = MemRefType::get(
      {dyn, dyn, dyn, dyn}, b.getF32Type(),
      StridedLayoutAttr::get(b.getContext(), dyn, {dyn, dyn, dyn, 1}));
  Value st = memref::ReinterpretCastOp::create(
      b, loc, rowsType, pool, meta.getOffset(), sizes, strides);
  auto which = scf::IfOp::create(b, loc, is128, /*withElseRegion=*/true);
  b.setInsertionPoint(which.thenBlock()->getTerminator());
  launch(4, st, tokens, heads, dv);
  b.setInsertionPoint(which.elseBlock()->getTerminator());
  launch(2, st, tokens, heads, dv);
}

void RecurrentKernel::launch(int64_t per, Value st, Value tokens,
                             Value heads, Value dv) {
  Value c0 = idx(0), c1 = idx(1);
  Value groups = div(mul(mul(tokens, heads), dv), idx(kRows));
  auto launch = gpu::LaunchOp::create(
      b, loc, arith::CeilDivUIOp::create(b, loc, groups, idx(kWarps)), c1, c1,
      idx(kWarps * kLanes), c1, c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  Value tid = launch.getThreadIds().x;
  Value lane = rem(tid, idx(kLanes));
  Value group = add(mul(launch.getBlockIds().x, idx(kWarps)),
                    div(tid, idx(kLanes)));
  auto active = scf::IfOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, group, groups),
      /*withElseRegion=*/false);
  b.setInsertionPoint(active.thenBlock()->getTerminator());
  // Rows (token i, head h, values c0 .. c0 + kRows - 1) of Sᵀ in the state
  // of slots[i].
  Value perHead = div(dv, idx(kRows));
  Value first = mul(rem(group, perHead), idx(kRows));
  Value h = rem(div(group, perHead), heads);
  Value i = div(group, mul(perHead, heads));
  Value sl = arith::IndexCastOp::create(
      b, loc, b.getIndexType(),
      memref::LoadOp::create(b, loc, slots, ValueRange{i}));
  Value j0 = mul(lane, idx(per));
  SmallVector<SmallVector<Value>> s;
  for (int64_t r = 0; r < kRows; ++r)
    s.push_back(load(st, {sl, h, add(first, r), j0}, per));
  SmallVector<Value> g = load(gg, {i, h, j0}, per);
  SmallVector<Value> k = load(kn, {i, h, j0}, per);
  SmallVector<Value> q = load(qn, {i, h, j0}, per);
  SmallVector<Value> alpha;
  for (int64_t e = 0; e < per; ++e)
    alpha.push_back(math::ExpOp::create(b, loc, g[e]));
  Value beta = memref::LoadOp::create(b, loc, bb, ValueRange{i, h});
  for (int64_t r = 0; r < kRows; ++r) {
    Value c = add(first, r);
    // u = β (v − k·(αS)[:, c]): this lane's terms in k order, then the warp.
    SmallVector<Value> as;
    Value part;
    for (int64_t e = 0; e < per; ++e) {
      as.push_back(fmul(alpha[e], s[r][e]));
      Value term = fmul(k[e], as.back());
      part = e ? fadd(part, term) : term;
    }
    Value pred = warpSum(part);
    Value v = memref::LoadOp::create(b, loc, vf, ValueRange{i, h, c});
    Value u = fmul(beta, arith::SubFOp::create(b, loc, v, pred));
    // S ← αS + k u (stored), o = q·S[:, c].
    SmallVector<Value> next;
    for (int64_t e = 0; e < per; ++e) {
      next.push_back(fadd(as[e], fmul(k[e], u)));
      Value term = fmul(q[e], next.back());
      part = e ? fadd(part, term) : term;
    }
    Value total = warpSum(part);
    Value vec = vector::FromElementsOp::create(
        b, loc, VectorType::get({per}, b.getF32Type()), next);
    vector::StoreOp::create(b, loc, vec, st, ValueRange{sl, h, c, j0},
                            /*nontemporal=*/false, llvm::MaybeAlign(4 * per));
    scf::IfOp::create(b, loc, eq(lane, c0), [&](OpBuilder &tb, Location l) {
      memref::StoreOp::create(tb, l, total, o, ValueRange{i, h, c});
      scf::YieldOp::create(tb, l);
    });
  }
  b.setInsertionPointToEnd(&launch.getBody().front());
  gpu::TerminatorOp::create(b, loc);
}

struct K3GPUKDARecurrentPass
    : k3::impl::K3GPUKDARecurrentPassBase<K3GPUKDARecurrentPass> {
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
    auto memref = [&](unsigned n, int64_t rank) {
      auto t = n < body.getNumArguments()
                   ? dyn_cast<MemRefType>(body.getArgument(n).getType())
                   : MemRefType();
      return t && t.getRank() == rank && t.getElementType().isF32() &&
             (rank == 4 || t.getLayout().isIdentity());
    };
    if (body.getNumArguments() != 9 || !memref(0, 3) || !memref(1, 3) ||
        !memref(2, 3) || !memref(3, 3) || !memref(4, 2) || !memref(5, 4) ||
        !memref(7, 3) ||
        !isa<MemRefType>(body.getArgument(6).getType()) ||
        !cast<MemRefType>(body.getArgument(6).getType())
             .getElementType()
             .isInteger(32))
      return fail("expected (q, k, v, g [T, H, D], beta [T, H], f32 pool "
                  "[S, H, V, K], i32 slots, o [T, H, V], ...) memrefs");
    if (!k3::returnsNothing(body))
      return fail("the function must return nothing");
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder builder(f.getContext());
    builder.setInsertionPointToStart(&body);
    RecurrentKernel(builder, f.getLoc(), body).build(rest);
  }
};
} // namespace
