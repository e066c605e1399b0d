//===- GPUKDADecode.cpp - a KDA layer's decode step in one kernel ---------===//
//
// The token mixing of a KDA layer for tokens that each have their own
// state (K3_SPEC §4.2–4.7, a decode step or batch): the short convolutions
// of q, k and v with their tails' update, the L2 norms, the gate and β, the
// delta-rule update and read-out of the fp32 state, and the gated RMSNorm.
// In the kernel library (Kernels/KDA.mlir, @k3k_kda_decode, marked
// `k3.kda_decode`) those are three kernels: the convolutions, the step
// (k3-gpu-kda-recurrent, a warp per 4 rows of a head) and the norm
// (k3-gpu-gated-norm, a warp per head), each a launch on a decode step's
// critical path. This pass gives the function a second body, chosen at run
// time, of one kernel with a block per (token, head), so that the block
// holds the whole head:
//   1. each warp loads its 8 rows of the state (option `rows`; lane l
//      elements P l .. P l + P - 1, P = K / 32), as k3-gpu-kda-recurrent's,
//      and with them the gate's, β's and the norm's z and γ, which do not
//      wait for the convolutions (two fewer dependent round trips to
//      memory: B = 2 0.044 -> 0.041 ms, B = 4 0.066 -> 0.061, H200,
//      BENCHMARKS.md thirtieth session);
//   2. the block's threads convolve the head's 2K + V channels (one thread
//      per channel, the generic kernel's operations in its order), keep
//      the rounded outputs in workgroup memory and shift the channel's
//      tail, which no other block reads;
//   3. each warp makes q, k, g and β and updates its rows exactly as
//      k3-gpu-kda-recurrent's warps do, o rounded into workgroup memory;
//   4. each warp takes the head's sum of squares of o as k3-gpu-gated-norm's
//      warp does and normalises its rows' values.
// The same bits as the three kernels, in one launch. A block's registers
// fill an SM, so an SM runs a batch's blocks one after another (with
// `prefetch-next`, sm_90, warp 0 asks L2 for the state of the block that
// comes next on its SM while its own loads wait): up to 8
// tokens (option `max-tokens`) the kernel is faster than the three, at 64
// slower (H200, BENCHMARKS.md thirty-second session), and larger batches
// keep them.
//
//===----------------------------------------------------------------------===//

#include "KDAWarp.h"
#include "TensorCore.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUKDADECODEPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr int64_t kLanes = 32;
// The V the kernel is built for (a launch of static size each, so that
// ptxas fits its registers to the block) and the largest K; the workgroup
// buffer holds q at 0, k at kMaxK, v at 2 kMaxK, o at 2 kMaxK + kMaxV (f32).
constexpr int64_t kValues[] = {64, 128};
constexpr int64_t kMaxK = 128, kMaxV = 128;
// The short convolutions' width (K3_SPEC §4.2, short_conv_kernel_size).
constexpr int64_t kTaps = 4;
constexpr llvm::StringLiteral kAttr = "k3.kda_decode";

/// One short convolution's arguments: x [T, C], w [C, 1, W], the tails
/// [S, C, W - 1], slots.
struct Conv {
  Value x, w, pool, slots;
};

class DecodeKernel : k3::IndexMath {
public:
  DecodeKernel(OpBuilder &b, Location loc, Block &body, k3::KDAFunctions fns,
               memref::GlobalOp buffer, int64_t rows, int64_t maxTokens,
               bool prefetchNext)
      : IndexMath{b, loc}, fns(fns), buffer(buffer), rows(rows),
        maxTokens(maxTokens), prefetchNext(prefetchNext) {
    auto arg = [&](unsigned n) { return body.getArgument(n); };
    for (unsigned s = 0; s < 3; ++s)
      conv[s] = {arg(4 * s), arg(4 * s + 1), arg(4 * s + 2), arg(4 * s + 3)};
    f = arg(12), beta = arg(13), alog = arg(14), dt = arg(15);
    pool = arg(16), slots = arg(17), z = arg(18), gamma = arg(19);
    eps = arg(20), out = arg(21), softplus = arg(22), lb = arg(23);
    scale = arg(24), l2eps = arg(25), vfirst = arg(26);
  }

  void build(SmallVectorImpl<Operation *> &rest);

private:
  void launch(int64_t per, int64_t values, Value st, Value tokens,
              Value heads, Value dk);
  /// Channel `c` of convolution `cv` for token i: its output, rounded and
  /// widened, into the workgroup buffer at `at`, then its tail shifted.
  void convolve(const Conv &cv, Value i, Value c, Value at);
  Value widen(Value x) { return call(fns.widen, x); }
  Value narrow(Value x) { return call(fns.narrow, x); }
  Value scalar(Value m, ValueRange indices) {
    return memref::LoadOp::create(b, loc, m, indices);
  }
  Value shared(Value at) { return scalar(smem, {at}); }
  void store(Value v, Value m, ValueRange indices) {
    memref::StoreOp::create(b, loc, v, m, indices);
  }
  Value dim(Value m, int64_t d) { return memref::DimOp::create(b, loc, m, d); }
  Value warpSum(Value x) { return k3::warpSum(b, loc, x); }
  /// `scf.if cond { then() }` at the insertion point.
  void when(Value cond, function_ref<void()> then) {
    auto op = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
  }

  k3::KDAFunctions fns;
  memref::GlobalOp buffer;
  int64_t rows, maxTokens;
  bool prefetchNext;
  Value smem;
  Conv conv[3];
  Value f, beta, alog, dt, pool, slots, z, gamma, eps, out, softplus, lb,
      scale, l2eps, vfirst;
};

void DecodeKernel::build(SmallVectorImpl<Operation *> &rest) {
  Value c1 = idx(1);
  Value tokens = dim(f, 0), heads = dim(f, 1), dk = dim(f, 2);
  Value dv = dim(z, 2);
  // The state pool as k3-gpu-kda-recurrent takes it: value-first, rows
  // contiguous and 16-byte aligned, of [S, H, V, K]; K = 64 or 128.
  k3::KDAStateRows pooled(*this, pool, vfirst);
  memref::ExtractStridedMetadataOp meta = pooled.meta;
  Value ok = pooled.ok;
  ok = both(ok, eq(meta.getSizes()[1], heads));
  ok = both(ok, eq(meta.getSizes()[2], dv));
  ok = both(ok, eq(meta.getSizes()[3], dk));
  Value is64 = eq(dk, idx(64)), is128 = eq(dk, idx(128));
  ok = both(ok, arith::OrIOp::create(b, loc, is64, is128));
  // V one of kValues; f of q's rows, aligned for P-element loads; β, z,
  // out and γ of the head's shapes.
  Value vOk = eq(dv, idx(kValues[0]));
  for (int64_t v : ArrayRef(kValues).drop_front())
    vOk = arith::OrIOp::create(b, loc, vOk, eq(dv, idx(v)));
  ok = both(ok, vOk);
  int64_t bytes = cast<MemRefType>(f.getType()).getElementTypeBitWidth() / 8;
  ok = both(ok, aligned(f, 4 * bytes));
  ok = both(ok, eq(dim(beta, 0), tokens));
  ok = both(ok, eq(dim(beta, 1), heads));
  for (Value m : {z, out}) {
    ok = both(ok, eq(dim(m, 0), tokens));
    ok = both(ok, eq(dim(m, 1), heads));
    ok = both(ok, eq(dim(m, 2), dv));
  }
  ok = both(ok, eq(dim(gamma, 0), dv));
  // Each convolution: [T, H·D] inputs, weights [H·D, 1, kTaps], tails
  // [S, H·D, kTaps - 1], and a slot per state slot (every token a segment
  // of its own, as the KDA's).
  for (unsigned s = 0; s < 3; ++s) {
    const Conv &cv = conv[s];
    Value ch = mul(heads, s == 2 ? dv : dk);
    ok = both(ok, eq(dim(cv.x, 0), tokens));
    ok = both(ok, eq(dim(cv.x, 1), ch));
    ok = both(ok, eq(dim(cv.w, 0), ch));
    ok = both(ok, eq(dim(cv.w, 1), c1));
    ok = both(ok, eq(dim(cv.w, 2), idx(kTaps)));
    ok = both(ok, eq(dim(cv.pool, 1), ch));
    ok = both(ok, eq(dim(cv.pool, 2), idx(kTaps - 1)));
    ok = both(ok, eq(dim(cv.slots, 0), dim(slots, 0)));
  }
  if (maxTokens > 0)
    ok = both(ok, cmp(arith::CmpIPredicate::ule, tokens, idx(maxTokens)));
  k3::guardBody(b, loc, rest, ok);

  Value st = pooled.view(*this);
  // One launch per (K, V): K = 128 or 64 (P = 4 or 2), then each V.
  auto which = scf::IfOp::create(b, loc, is128, /*withElseRegion=*/true);
  for (int64_t per : {4, 2}) {
    b.setInsertionPoint(per == 4 ? which.thenBlock()->getTerminator()
                                 : which.elseBlock()->getTerminator());
    for (int64_t v : kValues) {
      auto isV = scf::IfOp::create(b, loc, eq(dv, idx(v)), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(isV.thenBlock()->getTerminator());
      launch(per, v, st, tokens, heads, dk);
    }
  }
}

void DecodeKernel::convolve(const Conv &cv, Value i, Value c, Value at) {
  Value c0 = idx(0);
  Value sl = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                        scalar(cv.slots, {i}));
  // The window: the tail's kTaps - 1 entries, then the token; its loads
  // and the weights' issued together.
  SmallVector<Value> u, w;
  for (int64_t j = 0; j + 1 < kTaps; ++j)
    u.push_back(scalar(cv.pool, {sl, c, idx(j)}));
  u.push_back(scalar(cv.x, {i, c}));
  for (int64_t j = 0; j < kTaps; ++j)
    w.push_back(scalar(cv.w, {c, c0, idx(j)}));
  // y = round(SiLU(Σ_j w[c, 0, j] · u_j)), the sum from 0 in j order.
  Value acc = f32(0.0);
  for (int64_t j = 0; j < kTaps; ++j)
    acc = fadd(acc, fmul(w[j], widen(u[j])));
  Value y = fmul(acc, call(fns.sigmoid, acc));
  store(widen(narrow(y)), smem, {at});
  // The new tail: entry j takes input j + 1.
  for (int64_t j = 0; j + 1 < kTaps; ++j)
    store(u[j + 1], cv.pool, {sl, c, idx(j)});
}

void DecodeKernel::launch(int64_t per, int64_t values, Value st,
                          Value tokens, Value heads, Value dk) {
  Value c1 = idx(1);
  // A block of V / rows warps holds the head.
  Value dv = idx(values), warps = idx(values / rows);
  auto launch = gpu::LaunchOp::create(b, loc, mul(tokens, heads), c1, c1,
                                      idx(kLanes), warps, c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  smem = memref::GetGlobalOp::create(b, loc, buffer.getType(),
                                     buffer.getSymName());
  Value lane = launch.getThreadIds().x, warp = launch.getThreadIds().y;
  Value blk = launch.getBlockIds().x;
  Value i = div(blk, heads), h = rem(blk, heads);
  Value sl = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                        scalar(slots, {i}));
  Value first = mul(warp, rows);
  Value j0 = mul(lane, per);
  // 1. The warp's rows of Sᵀ, loaded first.
  SmallVector<SmallVector<Value>> s;
  for (int64_t r = 0; r < rows; ++r)
    s.push_back(loadVector(st, {sl, h, add(first, r), j0}, per));
  // `prefetch-next`: warp 0 asks L2 for the state of the block that runs
  // next on this SM (an SM holds one block; blocks start in index order,
  // so about blk + the SMs), a row per lane at a time, while this block
  // waits for its own.
  if (prefetchNext) {
    Value sms = arith::IndexCastOp::create(
        b, loc, b.getIndexType(), NVVM::SmDimOp::create(b, loc, b.getI32Type()));
    Value next = add(blk, sms);
    when(both(eq(warp, idx(0)), lt(next, mul(tokens, heads))), [&] {
      Value ni = div(next, heads), nh = rem(next, heads);
      Value nsl = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                             scalar(slots, {ni}));
      Value rowBytes = mul(dk, idx(4));
      for (int64_t r = 0; r < values; r += kLanes)
        k3::prefetchL2(b, loc, st, {nsl, nh, add(lane, idx(r)), idx(0)},
                       rowBytes);
    });
  }
  // α = exp(g) of the lane's elements (§4.4), β, and the norm's z and γ of
  // the lane's value (lane < rows): none waits for the convolutions, so
  // their loads go out with the state's.
  SmallVector<Value> fa = loadVector(f, {i, h, j0}, per);
  Value al = scalar(alog, {h});
  SmallVector<Value> alpha;
  for (int64_t e = 0; e < per; ++e) {
    Value db = scalar(dt, {add(mul(h, dk), add(j0, idx(e)))});
    Value g = call(fns.gate, {widen(fa[e]), db, al, softplus, lb});
    alpha.push_back(math::ExpOp::create(b, loc, g));
  }
  Value bv = call(fns.sigmoid, widen(scalar(beta, {i, h})));
  Value mine = add(first, min(lane, idx(rows - 1)));
  Value zMine = scalar(z, {i, h, mine}), gMine = scalar(gamma, {mine});

  // 2. The head's channels of q, k and v (§4.2), a thread each.
  Value kAt = idx(kMaxK), vAt = idx(2 * kMaxK), oAt = idx(2 * kMaxK + kMaxV);
  Value twoK = add(dk, dk);
  Value threads = mul(warps, idx(kLanes));
  Value tid = add(mul(warp, idx(kLanes)), lane);
  scf::ForOp::create(
      b, loc, tid, add(twoK, dv), threads, ValueRange{},
      [&](OpBuilder &, Location, Value e, ValueRange) {
        auto isQ = scf::IfOp::create(b, loc, lt(e, dk), true);
        {
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPoint(isQ.thenBlock()->getTerminator());
          convolve(conv[0], i, add(mul(h, dk), e), e);
          b.setInsertionPoint(isQ.elseBlock()->getTerminator());
          auto isK = scf::IfOp::create(b, loc, lt(e, twoK), true);
          b.setInsertionPoint(isK.thenBlock()->getTerminator());
          Value jk = sub(e, dk);
          convolve(conv[1], i, add(mul(h, dk), jk), add(kAt, jk));
          b.setInsertionPoint(isK.elseBlock()->getTerminator());
          Value jv = sub(e, twoK);
          convolve(conv[2], i, add(mul(h, dv), jv), add(vAt, jv));
        }
        scf::YieldOp::create(b, loc);
      });
  gpu::BarrierOp::create(b, loc);

  // 3. k3-gpu-kda-recurrent's warp, q, k and v from the workgroup buffer:
  // the norms' sums of squares, lane l's elements l, l + 32, ... in order,
  // then the warp's tree (§4.3).
  Value qs = f32(0.0), ks = qs;
  for (int64_t m = 0; m < per; ++m) {
    Value j = add(lane, idx(kLanes * m));
    Value qv = shared(j), kv = shared(add(kAt, j));
    qs = fadd(qs, fmul(qv, qv));
    ks = fadd(ks, fmul(kv, kv));
  }
  Value qinv = fmul(call(fns.inv, {warpSum(qs), l2eps}), scale);
  Value kinv = call(fns.inv, {warpSum(ks), l2eps});
  SmallVector<Value> qn, kn;
  for (int64_t e = 0; e < per; ++e) {
    Value j = add(j0, idx(e));
    qn.push_back(fmul(shared(j), qinv));
    kn.push_back(fmul(shared(add(kAt, j)), kinv));
  }
  k3::kdaUpdateRows(
      *this, st, sl, h, first, lane, j0, s, qn, kn, alpha, bv,
      [&](Value c) { return shared(add(vAt, c)); },
      [&](Value c, Value o) { store(widen(narrow(o)), smem, {add(oAt, c)}); });
  gpu::BarrierOp::create(b, loc);

  // 4. The gated RMSNorm (§4.7) as k3-gpu-gated-norm's warp: the head's sum
  // of squares, lane l's values l, l + 32, ... in order, then the tree;
  // lane r < rows normalises value first + r.
  Value ss = k3::gatedNormSumSquares(
      *this, lane, dv, [&](Value col) { return shared(add(oAt, col)); });
  Value di = arith::IndexCastOp::create(b, loc, b.getI64Type(), dv);
  Value df = arith::SIToFPOp::create(b, loc, b.getF32Type(), di);
  when(lt(lane, idx(rows)), [&] {
    Value x = shared(add(oAt, mine));
    store(narrow(k3::gatedNormValue(*this, x, widen(zMine), gMine, ss, df,
                                    eps)),
          out, {i, h, mine});
  });
  b.setInsertionPointToEnd(&launch.getBody().front());
  gpu::TerminatorOp::create(b, loc);
}

struct K3GPUKDADecodePass
    : k3::impl::K3GPUKDADecodePassBase<K3GPUKDADecodePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (func::FuncOp f : k3::markedFunctions(module, kAttr))
      if (failed(rewrite(module, f)))
        return signalPassFailure();
  }

  LogicalResult rewrite(ModuleOp module, func::FuncOp f) {
    if (rows != 4 && rows != 8)
      return module.emitError("k3-gpu-kda-decode: rows must be 4 or 8"),
             failure();
    // cp.async.bulk.prefetch.L2: PTX ISA 8.0, sm_90.
    if (prefetchNext && sm < 90)
      return module.emitError() << "k3-gpu-kda-decode: prefetch-next needs "
                                   "sm_90 (cp.async.bulk.prefetch), not sm_"
                                << static_cast<int64_t>(sm),
             failure();
    auto fail = [&](const Twine &why) {
      return f.emitError() << kAttr << ": " << why, failure();
    };
    Block &body = f.getBody().front();
    Builder t(f.getContext());
    Type f32 = t.getF32Type(), i1 = t.getI1Type();
    auto arg = [&](unsigned n) { return body.getArgument(n).getType(); };
    // A memref of `rank` (identity layout unless `strided`) and `element`.
    auto memref = [&](unsigned n, int64_t rank, Type element,
                      bool strided = false) {
      auto m = dyn_cast<MemRefType>(arg(n));
      return m && m.getRank() == rank && m.getElementType() == element &&
             (strided || m.getLayout().isIdentity());
    };
    if (body.getNumArguments() != 27)
      return fail("expected (x [T, C], w [C, 1, W], tails [S, C, W - 1], "
                  "slots) of q, k and v, then f [T, H, K], beta [T, H], "
                  "a_log, dt, pool [S, H, V, K], slots, z [T, H, V], gamma, "
                  "eps, out [T, H, V], softplus, lower bound, scale, l2 eps, "
                  "value-first");
    auto ft = dyn_cast<MemRefType>(arg(12));
    Type act = ft ? ft.getElementType() : Type();
    bool ok = act && (act.isBF16() || act.isF32());
    for (unsigned s = 0; ok && s < 3; ++s)
      ok = memref(4 * s, 2, act) && memref(4 * s + 1, 3, f32) &&
           memref(4 * s + 2, 3, act, true) &&
           memref(4 * s + 3, 1, t.getI32Type());
    ok = ok && memref(12, 3, act) && memref(13, 2, act) &&
         memref(14, 1, f32) && memref(15, 1, f32) &&
         memref(16, 4, f32, true) && memref(17, 1, t.getI32Type()) &&
         memref(18, 3, act) && memref(19, 1, f32) && arg(20) == f32 &&
         memref(21, 3, act) && arg(22) == i1 && arg(23) == f32 &&
         arg(24) == f32 && arg(25) == f32 && arg(26) == i1;
    if (!ok)
      return fail("expected bf16 or f32 memrefs x, tails, f, beta, z and out, "
                  "f32 weights, a_log, dt, pool and gamma, i32 slots, f32 "
                  "eps, lower bound, scale and l2 eps, i1 softplus and "
                  "value-first");
    if (!k3::returnsNothing(body))
      return fail("the function must return nothing");
    FailureOr<k3::KDAFunctions> fns = k3::kdaFunctions(f, kAttr, act);
    if (failed(fns))
      return failure();
    memref::GlobalOp buffer = k3::workgroupBuffer(
        module, "k3k_kda_decode_head", {2 * kMaxK + 2 * kMaxV}, f32);
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder builder(f.getContext());
    builder.setInsertionPointToStart(&body);
    DecodeKernel(builder, f.getLoc(), body, *fns, buffer, rows, maxTokens,
                 prefetchNext)
        .build(rest);
    return success();
  }
};
} // namespace
