//===- GPUKDARecurrent.cpp - the KDA decode step in one kernel ------------===//
//
// The KDA step of tokens that each have their own state (K3_SPEC §4.3–4.5,
// a decode step or batch): q and k L2-normalised (q scaled), the log-decay
// g, β = σ(b), then S ← (I − β k kᵀ) Diag(α) S + β k vᵀ and o = Sᵀ q. In the
// kernel library (Kernels/KDA.mlir, @k3k_kda_step, marked
// `k3.kda_recurrent`) that is @k3k_kda_prepare's two parallel loops (the
// norms, then every element), three loops over the states seen as Sᵀ
// [S, H, V, K], each of which reads every state row (the fp32 state, 6.3
// MB per K3 layer, read three times and written once), and the rounding of
// o. For a value-first pool (rows contiguous) with K = 64 or 128, this
// pass gives the function a second body, chosen at run time, of one kernel:
// one warp per (token, head) and kRows consecutive v, lane l holding
// elements P l .. P l + P - 1 of each row in registers (P = K / 32; 8- or
// 16-byte loads and stores), so the state is read once and written once.
// The warp loads its rows first, then makes its head's normalised q and k,
// α = exp(g) and β itself through the functions the attribute names (the
// library's widen, narrow, the norm's 1 / sqrt, the gate, the sigmoid):
// each norm's sum of squares is lane l's terms l, l + 32, ... in order,
// then an xor-shuffle tree over the warp, as the generic kernels' warp split
// takes it. Each row's two sums over k are each lane's terms in order, then
// the tree (the same in every lane), as with one row per warp; o is
// rounded as it is stored. The same bits as the generic kernels, in one
// launch instead of four.
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
  RecurrentKernel(OpBuilder &b, Location loc, Block &body, k3::KDAFunctions fns)
      : IndexMath{b, loc}, fns(fns) {
    auto arg = [&](unsigned n) { return body.getArgument(n); };
    q = arg(0), k = arg(1), v = arg(2), f = arg(3), beta = arg(4);
    alog = arg(5), dt = arg(6), pool = arg(7), slots = arg(8), out = arg(9);
    softplus = arg(10), lb = arg(11), scale = arg(12), l2eps = arg(13);
    vfirst = arg(14);
  }

  void build(SmallVectorImpl<Operation *> &rest);
  /// The kernel for rows of 32 `per` elements (`per` per lane).
  void launch(int64_t per, Value st, Value tokens, Value heads, Value dk,
              Value dv);

private:
  Value widen(Value x) { return call(fns.widen, x); }
  SmallVector<Value> load(Value m, ValueRange indices, int64_t n) {
    return loadVector(m, indices, n);
  }
  Value scalar(Value m, ValueRange indices) {
    return memref::LoadOp::create(b, loc, m, indices);
  }
  Value warpSum(Value x) { return k3::warpSum(b, loc, x); }

  k3::KDAFunctions fns;
  Value q, k, v, f, beta, alog, dt, pool, slots, out, softplus, lb, scale,
      l2eps, vfirst;
};

void RecurrentKernel::build(SmallVectorImpl<Operation *> &rest) {
  Value c0 = idx(0), c1 = idx(1), c2 = idx(2);
  Value tokens = memref::DimOp::create(b, loc, q, c0);
  Value heads = memref::DimOp::create(b, loc, q, c1);
  Value dk = memref::DimOp::create(b, loc, q, c2);
  Value dv = memref::DimOp::create(b, loc, v, c2);
  // A value-first pool whose rows (its last dimension) are contiguous and
  // 16-byte aligned; k and f of q's shape; q, k and f rows that a lane
  // reads P elements of at a time.
  k3::KDAStateRows pooled(*this, pool, vfirst);
  Value ok = pooled.ok;
  Value is64 = eq(dk, idx(64)), is128 = eq(dk, idx(128));
  ok = both(ok, arith::OrIOp::create(b, loc, is64, is128));
  ok = both(ok, rem0(dv, kRows));
  int64_t bytes =
      cast<MemRefType>(q.getType()).getElementTypeBitWidth() / 8;
  for (Value m : {q, k, f})
    ok = both(ok, aligned(m, 4 * bytes));
  for (Value m : {k, f})
    for (int64_t d = 0; d < 3; ++d)
      ok = both(ok, eq(memref::DimOp::create(b, loc, m, d),
                       memref::DimOp::create(b, loc, q, d)));
  k3::guardBody(b, loc, rest, ok);

  Value st = pooled.view(*this);
  auto which = scf::IfOp::create(b, loc, is128, /*withElseRegion=*/true);
  b.setInsertionPoint(which.thenBlock()->getTerminator());
  launch(4, st, tokens, heads, dk, dv);
  b.setInsertionPoint(which.elseBlock()->getTerminator());
  launch(2, st, tokens, heads, dk, dv);
}

void RecurrentKernel::launch(int64_t per, Value st, Value tokens,
                             Value heads, Value dk, Value dv) {
  Value c1 = idx(1);
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
  // of slots[i], loaded first.
  Value perHead = div(dv, idx(kRows));
  Value first = mul(rem(group, perHead), idx(kRows));
  Value h = rem(div(group, perHead), heads);
  Value i = div(group, mul(perHead, heads));
  Value sl = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                        scalar(slots, {i}));
  Value j0 = mul(lane, idx(per));
  SmallVector<SmallVector<Value>> s;
  for (int64_t r = 0; r < kRows; ++r)
    s.push_back(load(st, {sl, h, add(first, r), j0}, per));

  // §4.3: the norms' sums of squares, lane l taking elements l, l + 32, ...
  // in order (the generic kernels' warp split), then the warp's tree.
  Value qs = arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                            APFloat(0.0f));
  Value ks = qs;
  for (int64_t m = 0; m < per; ++m) {
    Value j = add(lane, idx(kLanes * m));
    Value qv = widen(scalar(q, {i, h, j})), kv = widen(scalar(k, {i, h, j}));
    qs = fadd(qs, fmul(qv, qv));
    ks = fadd(ks, fmul(kv, kv));
  }
  Value qinv = fmul(call(fns.inv, {warpSum(qs), l2eps}), scale);
  Value kinv = call(fns.inv, {warpSum(ks), l2eps});
  // The lane's elements of the normalised q and k, α = exp(g) (§4.4) and β.
  SmallVector<Value> qa = load(q, {i, h, j0}, per),
                     ka = load(k, {i, h, j0}, per),
                     fa = load(f, {i, h, j0}, per);
  Value al = scalar(alog, {h});
  SmallVector<Value> qn, kn, alpha;
  for (int64_t e = 0; e < per; ++e) {
    qn.push_back(fmul(widen(qa[e]), qinv));
    kn.push_back(fmul(widen(ka[e]), kinv));
    Value db = scalar(dt, {add(mul(h, dk), add(j0, idx(e)))});
    Value g = call(fns.gate, {widen(fa[e]), db, al, softplus, lb});
    alpha.push_back(math::ExpOp::create(b, loc, g));
  }
  Value bv = call(fns.sigmoid, widen(scalar(beta, {i, h})));
  k3::kdaUpdateRows(
      *this, st, sl, h, first, lane, j0, s, qn, kn, alpha, bv,
      [&](Value c) { return widen(scalar(v, {i, h, c})); },
      [&](Value c, Value o) {
        memref::StoreOp::create(b, loc, call(fns.narrow, o), out,
                                ValueRange{i, h, c});
      });
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
    Builder t(f.getContext());
    Type f32 = t.getF32Type(), i1 = t.getI1Type();
    auto arg = [&](unsigned n) { return body.getArgument(n).getType(); };
    // An identity-layout memref of `rank` (any layout for the pool).
    auto memref = [&](unsigned n, int64_t rank) -> MemRefType {
      auto m = dyn_cast<MemRefType>(arg(n));
      return m && m.getRank() == rank &&
                     (n == 7 || m.getLayout().isIdentity())
                 ? m
                 : MemRefType();
    };
    if (body.getNumArguments() != 15)
      return fail("expected (q, k, v, f [T, H, D], beta [T, H], a_log, dt, "
                  "pool [S, H, V, K], slots, out [T, H, V], softplus, lower "
                  "bound, scale, l2 eps, value-first) arguments");
    MemRefType qt = memref(0, 3);
    Type act = qt ? qt.getElementType() : Type();
    auto isAct = [&](MemRefType m) { return m && m.getElementType() == act; };
    auto isF32 = [&](MemRefType m) { return m && m.getElementType() == f32; };
    auto slotsType = memref(8, 1);
    if (!act || !(act.isBF16() || act.isF32()) || !isAct(memref(1, 3)) ||
        !isAct(memref(2, 3)) || !isAct(memref(3, 3)) ||
        !isAct(memref(4, 2)) || !isF32(memref(5, 1)) ||
        !isF32(memref(6, 1)) || !isF32(memref(7, 4)) || !slotsType ||
        !slotsType.getElementType().isInteger(32) || !isAct(memref(9, 3)) ||
        arg(10) != i1 || arg(11) != f32 || arg(12) != f32 ||
        arg(13) != f32 || arg(14) != i1)
      return fail("expected bf16 or f32 memrefs q, k, v, f, beta and out, f32 "
                  "a_log, dt and pool, i32 slots, i1 softplus, f32 lower "
                  "bound, scale and l2 eps, i1 value-first");
    if (!k3::returnsNothing(body))
      return fail("the function must return nothing");
    FailureOr<k3::KDAFunctions> fns = k3::kdaFunctions(f, kAttr, act);
    if (failed(fns))
      return signalPassFailure();
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder builder(f.getContext());
    builder.setInsertionPointToStart(&body);
    RecurrentKernel(builder, f.getLoc(), body, *fns).build(rest);
  }
};
} // namespace
