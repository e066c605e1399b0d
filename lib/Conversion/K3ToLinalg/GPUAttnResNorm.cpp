//===- GPUAttnResNorm.cpp - AttnRes and its RMSNorm, a block per token ----===//
//
// K3_SPEC §3.2 normalises every AttnRes output (§3.1) before the mixer or
// FFN that reads it, and the last one before the head. The generic kernels
// (Kernels/Dense.mlir, @k3k_attn_res_norm_rows, marked `k3.attn_res_norm`)
// take ten launches of one to a few blocks for it, 16.5 us per sublayer of
// a batch-1 step on the H200 (BENCHMARKS.md, eleventh session's trace):
// the candidates' two sums, the mix, the norm's sum of squares and the
// norm. This pass gives the function a second body, chosen at run time: one
// block of 1024 threads per token, each thread holding 16-byte pieces of
// the row. Per candidate the block sums v² and (γ ⊙ p)·v (every
// candidate's warp trees, then one barrier, then the trees over the warps:
// 2 barriers in all, not 2n + 1); with the scores
// every thread takes the softmax itself (the same in every thread), mixes
// its pieces of h in candidate order, stores round(h), sums its squares,
// and after the block's sum normalises what it stored. A block sum is each
// thread's terms in order, then an xor-shuffle tree over the warp and one
// over the 32 warps' sums (the same in every lane: each step adds the same
// two values in both lanes of a pair). The element operations are the
// generic kernels', through the library's widen / narrow / round functions.
//
// Where the last candidate is a residual sum round(a + b) (§3.2 steps 4
// and 7; @k3k_attn_res_norm_add_rows, joined by k3-to-linalg), each thread
// makes and stores its pieces of the sum first: the add's own kernel (1.5
// us per sublayer of a batch-1 step on the H200) goes.
//
// A plain RMSNorm (§2; @k3k_rms_norm_rows, marked `k3.rms_norm`) took four
// launches of one block each at batch 1 (the sum of squares' fill,
// reduction and copy, then the norm: 5.2 us on the H200, BENCHMARKS.md
// fifteenth session's trace) and gets the same block per token: the sum
// of squares, then the norm of the thread's pieces. The MoE's latent
// RMSNorm of the experts' weighted sum (§6.2; @k3k_experts_combine_norm_rows,
// marked alike, with the experts' y [T, k, D] f32 and weights ω [T, k]
// instead of x) makes its pieces of r = round(Σ_s ω_s y_s) first, in slot
// order as the sum's own kernel did, and stores them where the norm then
// reads them: the weighted sum's kernel goes.
//
// Each kernel has two bodies, chosen in the kernel by D. Where every
// 16-byte piece of a row has a thread (D <= 1024 x 8 in bf16: K3's 7168),
// a thread loads its γ, p and the norm's γ first, keeps its piece of the
// row in registers (the residual sum, h, the weighted sum r) instead of
// reading back what it stored, and loads the next candidate before it
// takes this one's sums: the same terms and stores, so the same bits
// (H200: AttnRes 6.6 -> 5.9 us per launch, BENCHMARKS.md thirty-seventh
// session). Otherwise each thread loops over its pieces.
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

#include <cmath>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUATTNRESNORMPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
// One thread per lane of the warps' sums in blockSums: 32 warps.
constexpr int64_t kThreads = 1024, kWarps = kThreads / 32;
// Candidates a block keeps scores for (K3: at most 93 / 12 + 2 = 9).
constexpr int64_t kMaxCandidates = 32;
constexpr llvm::StringLiteral kAttr = "k3.attn_res_norm";
constexpr llvm::StringLiteral kNormAttr = "k3.rms_norm";

using k3::Conversions;

class AttnResNormKernel : k3::IndexMath {
public:
  /// (blocks, last, γ, p, eps, norm γ, norm eps, output), or with the last
  /// candidate a residual sum round(a + b) that the kernel stores first
  /// (@k3k_attn_res_norm_add_rows): (blocks, a, b, γ, ..., output, sum).
  AttnResNormKernel(OpBuilder &b, Location loc, Block &body, Conversions fns,
                    memref::GlobalOp sums, memref::GlobalOp scores)
      : IndexMath{b, loc}, fns(fns), sumsGlobal(sums), scoresGlobal(scores) {
    auto arg = [&](unsigned i) { return body.getArgument(i); };
    unsigned k = body.getNumArguments() == 10;
    v = arg(0);
    last = k ? arg(9) : arg(1);
    if (k) {
      addA = arg(1);
      addB = arg(2);
    }
    g = arg(2 + k);
    p = arg(3 + k);
    eps = arg(4 + k);
    gn = arg(5 + k);
    eps2 = arg(6 + k);
    out = arg(7 + k);
    act = cast<MemRefType>(v.getType()).getElementType();
    per = 16 / (act.getIntOrFloatBitWidth() / 8);
  }

  /// RMSNorm rows (`k3.rms_norm`): x [T, D], γ [D], eps, output [T, D].
  /// (x, γ, eps, output), or the weighted sum's (y, ω, γ, eps, output).
  AttnResNormKernel(OpBuilder &b, Location loc, Block &body, Conversions fns,
                    memref::GlobalOp sums)
      : IndexMath{b, loc}, fns(fns), sumsGlobal(sums) {
    unsigned k = body.getNumArguments() == 5;
    if (k) {
      ys = body.getArgument(0);
      wts = body.getArgument(1);
    } else {
      v = body.getArgument(0);
    }
    gn = body.getArgument(1 + k);
    eps2 = body.getArgument(2 + k);
    out = body.getArgument(3 + k);
    act = cast<MemRefType>(out.getType()).getElementType();
    per = 16 / (act.getIntOrFloatBitWidth() / 8);
  }

  void build(SmallVectorImpl<Operation *> &rest);
  void buildNorm(SmallVectorImpl<Operation *> &rest);

private:
  void kernel(Value n, Value tokens, Value d);
  /// The kernel's body where every piece of a row has a thread (D <= 1024
  /// x per, K3's 7168 in bf16): the same terms, sums and stores as the
  /// general body below, with the loads first and the row in registers.
  void onePiece(Value n);
  /// The general body: any D, each thread looping over its pieces.
  void anyPieces(Value n);
  /// Builds `one` where every piece of a row has a thread (D <= kThreads x
  /// per), else `any`, chosen in the kernel; then ends the kernel.
  void byPieces(function_ref<void()> one, function_ref<void()> any) {
    auto choice = scf::IfOp::create(
        b, loc, cmp(arith::CmpIPredicate::ule, d, idx(kThreads * per)),
        /*withElseRegion=*/true);
    b.setInsertionPointToStart(choice.thenBlock());
    one();
    b.setInsertionPointToStart(choice.elseBlock());
    any();
    b.setInsertionPointAfter(choice);
    gpu::TerminatorOp::create(b, loc);
  }
  /// After the candidates' warp sums: the scores (thread 0 keeps them in
  /// workgroup memory), then the softmax's maximum and sum in every thread.
  void scoresAndSoftmax(Value n);
  /// Candidate i's score, from workgroup memory.
  Value score(Value i) {
    return memref::LoadOp::create(b, loc, scores, ValueRange{i}).getResult();
  }
  /// exp(s_i - max).
  Value ex(Value i) {
    return math::ExpOp::create(b, loc,
                               arith::SubFOp::create(b, loc, score(i), mx))
        .getResult();
  }
  void normKernel(Value tokens, Value d);
  /// Enters a gpu.launch of one block of kThreads per token and sets the
  /// kernel's values (tid, token, d, df, sums); returns the launch.
  gpu::LaunchOp launchPerToken(Value tokens, Value dim);
  /// y = round(round(h · inv) · γn) over the thread's pieces of row
  /// `token` of `src`, stored into `out`.
  void normalise(Value src, Value inv);
  /// A bf16 weight as f32.
  Value widenW(Value w) {
    return arith::ExtFOp::create(b, loc, b.getF32Type(), w);
  }
  /// `per` consecutive elements of `m` at `at` (one aligned vector load).
  SmallVector<Value> load(Value m, ValueRange at) {
    return elements(loadVector(m, at));
  }
  /// The same load as one vector value (to carry through loops and ifs).
  Value loadVector(Value m, ValueRange at) {
    Type e = cast<MemRefType>(m.getType()).getElementType();
    return vector::LoadOp::create(
        b, loc, VectorType::get({per}, e), m, at, /*nontemporal=*/false,
        llvm::MaybeAlign(per * e.getIntOrFloatBitWidth() / 8));
  }
  /// The `per` elements of a loaded vector.
  SmallVector<Value> elements(Value vec) {
    SmallVector<Value> r;
    for (int64_t i = 0; i < per; ++i)
      r.push_back(vector::ExtractOp::create(b, loc, vec, ArrayRef<int64_t>{i}));
    return r;
  }
  /// Stores `elems` at m[at] where `cond` holds.
  void storeIf(Value cond, ValueRange elems, Value m, ValueRange at) {
    scf::IfOp::create(b, loc, cond, [&](OpBuilder &tb, Location l) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(scf::YieldOp::create(tb, l));
      store(elems, m, at);
    });
  }
  void store(ValueRange elems, Value m, ValueRange at) {
    Value vec = vector::FromElementsOp::create(
        b, loc, VectorType::get({per}, act), elems);
    vector::StoreOp::create(b, loc, vec, m, at, /*nontemporal=*/false,
                            llvm::MaybeAlign(16));
  }
  /// The block's sums of `parts` (one term per thread each), in every
  /// thread: a warp tree, then in every warp the tree over the 32 warps'
  /// sums. Starts with a barrier (the previous sums' reads are done).
  SmallVector<Value> blockSums(ValueRange parts);
  /// The first half of blockSums: each part's warp tree, stored by lane 0
  /// at sums[row + k][warp] (rows `row` to `row` + parts - 1).
  void warpSums(ValueRange parts, Value row);
  /// The second half, after a barrier: the tree over the 32 warps' sums of
  /// rows `row` to `row` + count - 1, in every thread.
  SmallVector<Value> totals(int64_t count, Value row);
  /// 1 / sqrt(ss / D + eps), as the generic kernels compute it.
  Value invRMS(Value ss, Value e) { return k3::invRMS(*this, ss, df, e); }
  /// An scf.for over [lb, ub) by `step` carrying `init`, its body built by
  /// `body` (induction variable, carried values) -> yielded values.
  scf::ForOp loop(Value lb, Value ub, Value step, ValueRange init,
                  function_ref<SmallVector<Value>(Value, ValueRange)> body);
  /// The loop over this thread's pieces [j0, j0 + per) of a row.
  scf::ForOp pieces(ValueRange init,
                    function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    return loop(mul(tid, per), d, idx(kThreads * per), init, body);
  }
  /// The loop over the candidates, carrying one value.
  Value candidates(Value n, Value init,
                   function_ref<Value(Value, Value)> step) {
    return loop(idx(0), n, idx(1), init,
                [&](Value i, ValueRange acc) {
                  return SmallVector<Value>{step(i, acc[0])};
                })
        .getResult(0);
  }

  /// Row `token`, elements j0.. of candidate i: v[i] for i < n - 1, else
  /// last[0].
  SmallVector<Value> loadCandidate(Value i, Value j0) {
    Value block = lt(i, memref::DimOp::create(b, loc, v, idx(0)));
    Value m = arith::SelectOp::create(b, loc, block, v, last);
    Value row = arith::SelectOp::create(b, loc, block, i, idx(0));
    return load(m, {row, token, j0});
  }

  // attn_res_norm: v = the blocks [n - 1, T, D], last [1, T, D] (with a
  // residual sum: a, b [1, T, D] and last their sum); rms_norm: v = x [T, D]
  // or, of the experts' weighted sum, ys [T, k, D] and wts [T, k]; and
  // last, g, p, eps unset.
  Value v, last, addA, addB, g, p, eps, gn, eps2, out, ys, wts;
  Conversions fns;
  memref::GlobalOp sumsGlobal, scoresGlobal;
  Type act;
  int64_t per;
  // In the kernel.
  Value tid, token, d, df, sums, scores, mx, total;
};

void AttnResNormKernel::build(SmallVectorImpl<Operation *> &rest) {
  Value c0 = idx(0), c1 = idx(1), c2 = idx(2);
  Value n = add(memref::DimOp::create(b, loc, v, c0), c1);
  Value tokens = memref::DimOp::create(b, loc, last, c1);
  Value dim = memref::DimOp::create(b, loc, last, c2);
  // Whole 16-byte pieces, aligned; at least one token; the blocks have the
  // last candidate's shape; the scores fit.
  Value ok = both(rem0(dim, per), lt(c0, tokens));
  ok = both(ok, eq(memref::DimOp::create(b, loc, last, c0), c1));
  ok = both(ok, both(eq(memref::DimOp::create(b, loc, v, c1), tokens),
                     eq(memref::DimOp::create(b, loc, v, c2), dim)));
  ok = both(ok, lt(n, idx(kMaxCandidates + 1)));
  ok = both(ok, both(both(aligned(v), aligned(last)), aligned(out)));
  for (Value m : {addA, addB})
    if (m) {
      ok = both(ok, aligned(m));
      for (int64_t i = 0; i < 3; ++i)
        ok = both(ok, eq(memref::DimOp::create(b, loc, m, i),
                         memref::DimOp::create(b, loc, last, i)));
    }
  for (Value w : {g, p, gn})
    ok = both(ok, aligned(w, 2 * per));
  k3::guardBody(b, loc, rest, ok);
  kernel(n, tokens, dim);
}

void AttnResNormKernel::buildNorm(SmallVectorImpl<Operation *> &rest) {
  Value c0 = idx(0), c1 = idx(1), c2 = idx(2);
  Value src = ys ? ys : v;
  Value tokens = memref::DimOp::create(b, loc, src, c0);
  Value dim = memref::DimOp::create(b, loc, src, ys ? c2 : c1);
  Value ok = both(rem0(dim, per), lt(c0, tokens));
  // (y's pieces are per f32 elements: 4 x per bytes.)
  ok = both(ok, both(aligned(src, ys ? 4 * per : 16), aligned(out)));
  ok = both(ok, aligned(gn, 2 * per));
  ok = both(ok, both(eq(memref::DimOp::create(b, loc, out, c0), tokens),
                     eq(memref::DimOp::create(b, loc, out, c1), dim)));
  if (ys)
    for (int64_t i = 0; i < 2; ++i)
      ok = both(ok, eq(memref::DimOp::create(b, loc, wts, i),
                       memref::DimOp::create(b, loc, ys, i)));
  k3::guardBody(b, loc, rest, ok);
  normKernel(tokens, dim);
}

gpu::LaunchOp AttnResNormKernel::launchPerToken(Value tokens, Value dim) {
  Value c1 = idx(1);
  auto launch =
      gpu::LaunchOp::create(b, loc, tokens, c1, c1, idx(kThreads), c1, c1);
  b.setInsertionPointToStart(&launch.getBody().front());
  tid = launch.getThreadIds().x;
  token = launch.getBlockIds().x;
  d = dim;
  df = arith::SIToFPOp::create(
      b, loc, b.getF32Type(),
      arith::IndexCastOp::create(b, loc, b.getI64Type(), d));
  sums = memref::GetGlobalOp::create(b, loc, sumsGlobal.getType(),
                                     sumsGlobal.getSymName());
  return launch;
}

void AttnResNormKernel::normalise(Value src, Value inv) {
  pieces({}, [&](Value j0, ValueRange) {
    SmallVector<Value> h = load(src, {token, j0}), w = load(gn, {j0});
    SmallVector<Value> y;
    for (int64_t e = 0; e < per; ++e)
      y.push_back(k3::rmsNormValue(*this, fns, h[e], inv, w[e]));
    store(y, out, {token, j0});
    return SmallVector<Value>{};
  });
}

void AttnResNormKernel::normKernel(Value tokens, Value dim) {
  OpBuilder::InsertionGuard guard(b);
  launchPerToken(tokens, dim);
  // The row's sum of squares (a block sum), then the norm of each piece:
  // the generic kernels' element operations, another order of the sum.
  // Of the experts' weighted sum: the thread's pieces of r = round(Σ_s ω_s
  // y_s) first (from 0, s ascending, a product then a sum, as
  // @k3k_experts_combine), stored in the output for the norm to read.
  auto piece = [&](Value j0) {
    SmallVector<Value> xs;
    if (!ys)
      return load(v, {token, j0});
    for (Value r : k3::weightedSumPiece(*this, ys, wts, token, j0, per,
                                        /*ahead=*/1))
      xs.push_back(call(fns.narrow, r));
    return xs;
  };
  auto squares = [&](ValueRange xs, Value ss) {
    for (Value x : xs) {
      Value a = call(fns.widen, x);
      ss = fadd(ss, fmul(a, a));
    }
    return ss;
  };
  Value c0 = idx(0), zero = f32(0.0);
  byPieces(
      [&] {
        // Every piece has a thread: the row stays in registers, γ first.
        Value j0 = mul(tid, per), has = lt(j0, d), j = pick(has, j0, c0);
        SmallVector<Value> w = load(gn, {j}), xs = piece(j);
        if (ys)
          storeIf(has, xs, out, {token, j});
        Value inv =
            invRMS(blockSums({pick(has, squares(xs, zero), zero)})[0], eps2);
        SmallVector<Value> y;
        for (int64_t e = 0; e < per; ++e)
          y.push_back(k3::rmsNormValue(*this, fns, xs[e], inv, w[e]));
        storeIf(has, y, out, {token, j});
      },
      [&] {
        // Any D: each thread loops over its pieces, twice.
        auto sums = pieces({zero}, [&](Value j0, ValueRange acc) {
          SmallVector<Value> xs = piece(j0);
          if (ys)
            store(xs, out, {token, j0});
          return SmallVector<Value>{squares(xs, acc[0])};
        });
        normalise(ys ? out : v,
                  invRMS(blockSums(sums.getResults())[0], eps2));
      });
}

void AttnResNormKernel::warpSums(ValueRange parts, Value row) {
  Value lane = rem(tid, 32), warp = div(tid, 32);
  SmallVector<Value> sumsOfWarp;
  for (Value part : parts)
    sumsOfWarp.push_back(k3::warpSum(b, loc, part));
  scf::IfOp::create(b, loc, eq(lane, idx(0)), [&](OpBuilder &tb, Location l) {
    for (auto [k, s] : llvm::enumerate(sumsOfWarp))
      memref::StoreOp::create(tb, l, s, sums,
                              ValueRange{add(row, idx(k)), warp});
    scf::YieldOp::create(tb, l);
  });
}

SmallVector<Value> AttnResNormKernel::totals(int64_t count, Value row) {
  Value lane = rem(tid, 32);
  SmallVector<Value> r;
  for (int64_t k = 0; k < count; ++k)
    r.push_back(
        k3::warpSum(b, loc,
                    memref::LoadOp::create(
                        b, loc, sums, ValueRange{add(row, idx(k)), lane})));
  return r;
}

SmallVector<Value> AttnResNormKernel::blockSums(ValueRange parts) {
  gpu::BarrierOp::create(b, loc);
  warpSums(parts, idx(0));
  gpu::BarrierOp::create(b, loc);
  return totals(parts.size(), idx(0));
}

scf::ForOp AttnResNormKernel::loop(
    Value lb, Value ub, Value step, ValueRange init,
    function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  auto l = scf::ForOp::create(b, loc, lb, ub, step, init);
  OpBuilder::InsertionGuard guard(b);
  Block *block = l.getBody();
  if (!block->empty()) // the terminator a loop without results gets
    block->back().erase();
  b.setInsertionPointToEnd(block);
  scf::YieldOp::create(b, loc,
                       body(l.getInductionVar(), l.getRegionIterArgs()));
  return l;
}

void AttnResNormKernel::kernel(Value n, Value tokens, Value dim) {
  OpBuilder::InsertionGuard guard(b);
  launchPerToken(tokens, dim);
  scores = memref::GetGlobalOp::create(b, loc, scoresGlobal.getType(),
                                       scoresGlobal.getSymName());
  byPieces([&] { onePiece(n); }, [&] { anyPieces(n); });
}

void AttnResNormKernel::scoresAndSoftmax(Value n) {
  Value c0 = idx(0), c1 = idx(1);
  gpu::BarrierOp::create(b, loc);
  loop(c0, n, c1, {}, [&](Value i, ValueRange) {
    SmallVector<Value> t = totals(2, mul(i, 2));
    Value s = fmul(t[1], invRMS(t[0], eps));
    scf::IfOp::create(b, loc, eq(tid, c0), [&](OpBuilder &tb, Location l) {
      memref::StoreOp::create(tb, l, s, scores, ValueRange{i});
      scf::YieldOp::create(tb, l);
    });
    return SmallVector<Value>{};
  });
  gpu::BarrierOp::create(b, loc);

  // α = softmax(s) in every thread, as the generic kernel: the maximum, the
  // sum of exp(s_i - max), then exp(s_i - max) / sum per candidate.
  mx = candidates(n, f32(-INFINITY), [&](Value i, Value m) {
    return arith::MaximumFOp::create(b, loc, score(i), m).getResult();
  });
  total =
      candidates(n, f32(0.0), [&](Value i, Value s) { return fadd(s, ex(i)); });
}

void AttnResNormKernel::onePiece(Value n) {
  Value c0 = idx(0), c1 = idx(1), zero = f32(0.0);
  Value j0 = mul(tid, per), has = lt(j0, d);
  // A thread without a piece reads piece 0 and adds zeros, as the general
  // body's empty loop leaves its sums.
  Value j = pick(has, j0, c0);
  SmallVector<Value> gw = load(g, {j}), pw = load(p, {c0, j}),
                     gnw = load(gn, {j});
  // The last candidate: the residual sum round(a + b), stored, or read.
  Value lastVec;
  if (addA) {
    SmallVector<Value> x = load(addA, {c0, token, j}),
                       y = load(addB, {c0, token, j}), sum;
    for (int64_t e = 0; e < per; ++e)
      sum.push_back(call(fns.narrow,
                         fadd(call(fns.widen, x[e]), call(fns.widen, y[e]))));
    storeIf(has, sum, last, {c0, token, j});
    lastVec = vector::FromElementsOp::create(
        b, loc, VectorType::get({per}, act), sum);
  } else {
    lastVec = loadVector(last, {c0, token, j});
  }
  Value blocks = memref::DimOp::create(b, loc, v, c0);
  Type vecType = lastVec.getType();
  // Candidate i's piece: a block's, loaded, or the last one's.
  auto candidate = [&](Value i) {
    auto choice = scf::IfOp::create(b, loc, TypeRange{vecType},
                                    lt(i, blocks), /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(choice.thenBlock());
    scf::YieldOp::create(b, loc, loadVector(v, {i, token, j}));
    b.setInsertionPointToStart(choice.elseBlock());
    scf::YieldOp::create(b, loc, lastVec);
    return choice.getResult(0);
  };
  // The next candidate's load goes out before this one's sums.
  auto following = [&](Value i) {
    return candidate(arith::MinUIOp::create(b, loc, add(i, c1), sub(n, c1)));
  };
  SmallVector<Value> gp;
  for (int64_t e = 0; e < per; ++e)
    gp.push_back(fmul(widenW(gw[e]), widenW(pw[e])));

  // The scores' sums (the general body's terms, in its order).
  loop(c0, n, c1, {candidate(c0)}, [&](Value i, ValueRange acc) {
    Value next = following(i);
    Value ss = zero, dot = zero;
    for (auto [e, x] : llvm::enumerate(elements(acc[0]))) {
      Value a = call(fns.widen, x);
      ss = fadd(ss, fmul(a, a));
      dot = fadd(dot, fmul(gp[e], a));
    }
    warpSums({pick(has, ss, zero), pick(has, dot, zero)}, mul(i, 2));
    return SmallVector<Value>{next};
  });
  scoresAndSoftmax(n);

  // h = round(Σ_i α_i v_i), stored; the sum of its squares.
  SmallVector<Value> init(per, zero);
  init.push_back(candidate(c0));
  auto mix = loop(c0, n, c1, init, [&](Value i, ValueRange acc) {
    Value next = following(i);
    Value alpha = fdiv(ex(i), total);
    SmallVector<Value> x = elements(acc.back()), hs;
    for (int64_t e = 0; e < per; ++e)
      hs.push_back(fadd(acc[e], fmul(alpha, call(fns.widen, x[e]))));
    hs.push_back(next);
    return hs;
  });
  SmallVector<Value> hn;
  Value ss = zero;
  for (int64_t e = 0; e < per; ++e) {
    hn.push_back(call(fns.narrow, mix.getResult(e)));
    Value a = call(fns.widen, hn.back());
    ss = fadd(ss, fmul(a, a));
  }
  storeIf(has, hn, out, {token, j});
  Value inv = invRMS(blockSums({pick(has, ss, zero)})[0], eps2);

  // y = round(round(h · inv) · γ) of the row in registers.
  SmallVector<Value> y;
  for (int64_t e = 0; e < per; ++e)
    y.push_back(k3::rmsNormValue(*this, fns, hn[e], inv, gnw[e]));
  storeIf(has, y, out, {token, j});
}

void AttnResNormKernel::anyPieces(Value n) {
  Value c0 = idx(0), c1 = idx(1);
  Value zero = f32(0.0);

  // The residual sum round(a + b) (as @k3k_add) into last: each thread
  // stores its own pieces, which only it reads below.
  if (addA)
    pieces({}, [&](Value j0, ValueRange) {
      SmallVector<Value> x = load(addA, {c0, token, j0}),
                         y = load(addB, {c0, token, j0}), sum;
      for (int64_t e = 0; e < per; ++e)
        sum.push_back(call(fns.narrow, fadd(call(fns.widen, x[e]),
                                            call(fns.widen, y[e]))));
      store(sum, last, {c0, token, j0});
      return SmallVector<Value>{};
    });

  // Scores s_i = ((γ ⊙ p)·v_i) / sqrt(mean(v_i²) + eps), kept by thread 0:
  // every candidate's warp sums first (rows 2i, 2i + 1 of the sums; no
  // barrier between candidates, so their loads overlap), then one barrier
  // and every candidate's tree over the warps (the same sums as one block
  // sum per candidate).
  loop(c0, n, c1, {}, [&](Value i, ValueRange) {
    auto partial = pieces({zero, zero}, [&](Value j0, ValueRange acc) {
      SmallVector<Value> x = loadCandidate(i, j0);
      SmallVector<Value> gw = load(g, {j0}), pw = load(p, {c0, j0});
      Value ss = acc[0], dot = acc[1];
      for (int64_t e = 0; e < per; ++e) {
        Value a = call(fns.widen, x[e]);
        ss = fadd(ss, fmul(a, a));
        dot = fadd(dot, fmul(fmul(widenW(gw[e]), widenW(pw[e])), a));
      }
      return SmallVector<Value>{ss, dot};
    });
    warpSums(partial.getResults(), mul(i, 2));
    return SmallVector<Value>{};
  });
  scoresAndSoftmax(n);

  // h = round(Σ_i α_i v_i), stored; the sum of its squares.
  auto mixed = pieces({zero}, [&](Value j0, ValueRange acc) {
    SmallVector<Value> h(per, zero);
    auto mix = loop(c0, n, c1, h, [&](Value i, ValueRange hs) {
      Value alpha = fdiv(ex(i), total);
      SmallVector<Value> x = loadCandidate(i, j0);
      SmallVector<Value> next;
      for (int64_t e = 0; e < per; ++e)
        next.push_back(fadd(hs[e], fmul(alpha, call(fns.widen, x[e]))));
      return next;
    });
    SmallVector<Value> hn;
    Value ss = acc[0];
    for (Value x : mix.getResults()) {
      hn.push_back(call(fns.narrow, x));
      Value a = call(fns.widen, hn.back());
      ss = fadd(ss, fmul(a, a));
    }
    store(hn, out, {token, j0});
    return SmallVector<Value>{ss};
  });
  Value inv = invRMS(blockSums(mixed.getResults())[0], eps2);

  // y = round(round(h · inv) · γ) over what this thread stored.
  normalise(out, inv);
}

struct K3GPUAttnResNormPass
    : k3::impl::K3GPUAttnResNormPassBase<K3GPUAttnResNormPass> {
  using Base::Base;

  void runOnOperation() override {
    for (func::FuncOp f : k3::markedFunctions(getOperation(), kAttr))
      if (failed(rewrite(f)))
        return signalPassFailure();
    for (func::FuncOp f : k3::markedFunctions(getOperation(), kNormAttr))
      if (failed(rewriteNorm(f)))
        return signalPassFailure();
  }

  /// The warps' sums in workgroup memory: two rows per candidate (one
  /// shape for both kernels: the global is shared by name).
  memref::GlobalOp sumsBuffer() {
    return k3::workgroupBuffer(getOperation(), "k3k_attn_res_sums",
                               {2 * kMaxCandidates, kWarps},
                               Builder(&getContext()).getF32Type());
  }

  /// The {widen, narrow, round} functions that `f`'s `attr` names for the
  /// activation type `act`, with `f` returning nothing; a diagnostic and
  /// failure otherwise.
  static FailureOr<Conversions> conversions(func::FuncOp f, StringRef attr,
                                            Type act) {
    auto fail = [&](const Twine &why) {
      f.emitError() << attr << ": " << why;
      return failure();
    };
    auto spec = f->getAttrOfType<DictionaryAttr>(attr);
    if (!spec)
      return fail("must be a dictionary {widen, narrow, round}");
    Builder t(f.getContext());
    Type f32 = t.getF32Type();
    auto lookup = [&](StringRef key, Type in, Type res) {
      return k3::namedFunction(f, spec, key, t.getFunctionType({in}, {res}));
    };
    Conversions fns{lookup("widen", act, f32), lookup("narrow", f32, act),
                    lookup("round", f32, f32)};
    if (!fns.widen || !fns.narrow || !fns.round)
      return fail("'widen', 'narrow' and 'round' must name functions "
                  "(act) -> f32, (f32) -> act and (f32) -> f32");
    if (!k3::returnsNothing(f.getBody().front()))
      return fail("the function must return nothing");
    return fns;
  }

  /// Argument `a` of `body` as an identity-layout memref of `rank`, or null.
  static MemRefType memref(Block &body, unsigned a, int64_t rank) {
    auto t = dyn_cast<MemRefType>(body.getArgument(a).getType());
    return t && t.getRank() == rank && t.getLayout().isIdentity() ? t : nullptr;
  }

  LogicalResult rewriteNorm(func::FuncOp f) {
    auto fail = [&](const Twine &why) {
      return f.emitError() << kNormAttr << ": " << why;
    };
    Block &body = f.getBody().front();
    // Of the experts' weighted sum (5 arguments): y and ω instead of x.
    unsigned n = body.getNumArguments(), k = n == 5;
    if (n != 4 && n != 5)
      return fail("expected (x [T, D], γ [D], eps, output [T, D]) or (y [T, "
                  "k, D], ω [T, k], γ [D], eps, output [T, D]) arguments");
    MemRefType x = memref(body, 0, k ? 3 : 2), g = memref(body, 1 + k, 1),
               out = memref(body, 3 + k, 2);
    MemRefType w = k ? memref(body, 1, 2) : nullptr;
    if (!x || !g || !out || !body.getArgument(2 + k).getType().isF32() ||
        (k && (!w || !x.getElementType().isF32() ||
               !w.getElementType().isF32())))
      return fail("expected identity-layout memrefs x [T, D] (or f32 y [T, "
                  "k, D] and ω [T, k]), γ [D], output [T, D] and f32 eps");
    Type act = out.getElementType();
    if ((!k && x.getElementType() != act) || !(act.isBF16() || act.isF32()) ||
        !g.getElementType().isBF16())
      return fail("expected bf16 or f32 activations and bf16 weights");
    FailureOr<Conversions> fns = conversions(f, kNormAttr, act);
    if (failed(fns))
      return failure();
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder b(f.getContext());
    b.setInsertionPointToStart(&body);
    AttnResNormKernel(b, f.getLoc(), body, *fns, sumsBuffer()).buildNorm(rest);
    return success();
  }

  LogicalResult rewrite(func::FuncOp f) {
    auto fail = [&](const Twine &why) {
      return f.emitError() << kAttr << ": " << why;
    };
    Block &body = f.getBody().front();
    auto isF32 = [&](unsigned a) {
      return body.getArgument(a).getType().isF32();
    };
    // With a residual sum (10 arguments): a and b after the blocks, the
    // sum [1, T, D] last.
    unsigned n = body.getNumArguments();
    if (n != 8 && n != 10)
      return fail("expected (blocks [n - 1, T, D], last [1, T, D], γ [D], "
                  "p [1, D], eps, norm γ [D], norm eps, output [T, D]) "
                  "arguments, or (blocks, a, b, γ, p, eps, norm γ, norm eps, "
                  "output, sum [1, T, D])");
    unsigned k = n == 10;
    MemRefType v = memref(body, 0, 3), last = memref(body, k ? 9 : 1, 3),
               g = memref(body, 2 + k, 1), p = memref(body, 3 + k, 2),
               gn = memref(body, 5 + k, 1), out = memref(body, 7 + k, 2);
    if (!v || !last || !g || !p || !gn || !out || !isF32(4 + k) ||
        !isF32(6 + k) ||
        (k && (memref(body, 1, 3) != v || memref(body, 2, 3) != v)))
      return fail("expected identity-layout memrefs blocks [n - 1, T, D], "
                  "last [1, T, D] (or a, b and sum), γ [D], p [1, D], norm "
                  "γ [D], output [T, D] and f32 eps");
    Type act = v.getElementType();
    if (last != v || out.getElementType() != act ||
        !(act.isBF16() || act.isF32()) ||
        !g.getElementType().isBF16() || !p.getElementType().isBF16() ||
        !gn.getElementType().isBF16())
      return fail("expected bf16 or f32 activations and bf16 weights");
    FailureOr<Conversions> fns = conversions(f, kAttr, act);
    if (failed(fns))
      return failure();
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder b(f.getContext());
    b.setInsertionPointToStart(&body);
    AttnResNormKernel(b, f.getLoc(), body, *fns, sumsBuffer(),
                      k3::workgroupBuffer(getOperation(), "k3k_attn_res_scores",
                                          {kMaxCandidates}, b.getF32Type()))
        .build(rest);
    return success();
  }
};
} // namespace
