//===- GPURoute.cpp - top-k routing, a block per token ---------------------===//
//
// K3_SPEC §6.1 selects each token's k experts by the keys s + b, best
// first (equal keys by expert index), and weights them ω = s / (Σ_sel s +
// 1e-20) · scaling. The generic kernels (Kernels/MoE.mlir,
// @k3k_route_rows, marked `k3.route`) rank every expert by counting the
// experts before it, a pass over all E keys for each of the T · E experts,
// then scale the weights in a second kernel: on the H200 45 us per MoE
// layer at a batch of 64 and 13 us at batch 1 (BENCHMARKS.md, twenty-sixth
// session). This pass gives the function a second body, chosen at run time:
// one block of 1024 threads per token, thread e holding expert e, that
// picks the best remaining expert k times, as the spec states the order.
//
// Each expert's key is mapped to an unsigned word that orders as the
// keys do: a number's float bits made monotonic (sign flipped, negatives
// inverted; -0 as +0, which compare equal), then 1 for a NaN key (after
// every number: the generic kernels put NaN keys after the ranked experts,
// in expert order) and 0 for an expert already taken or past E. A round
// is `redux.sync umax` of the words over each warp and `umin` of the
// indices that hold the maximum, lane 0's pair to workgroup memory, one
// barrier, and the same two reductions over the 32 warps' pairs in every
// warp, so every thread knows the winner (the pairs alternate between two
// buffers: a warp writes round r + 2's only after round r + 1's barrier,
// which every warp passes after reading round r's). The winner stores its
// index (0 for a NaN key) and keeps s (0 for a NaN key) in workgroup memory
// for slot r, and takes the word 0. After the k rounds lane l of warp 0
// takes slot l's weight, and the warp sums them and scales each as the
// generic kernel does (k3-gpu-warp-reduce's lanes and xor-shuffle tree):
// the same operations in the same order, so the same bits.
//
//===----------------------------------------------------------------------===//

#include "TensorCore.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUROUTEPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
// One thread per expert; the warps' pairs fill one warp's lanes.
constexpr int64_t kThreads = 1024, kWarps = kThreads / 32;
// Slots a token may have: one weight per lane of a warp.
constexpr int64_t kMaxSlots = 32;
constexpr llvm::StringLiteral kAttr = "k3.route";

class RouteKernel : k3::IndexMath {
public:
  /// (scores [T, E], bias [E], renorm, scaling, idx [T, k], wts [T, k]).
  RouteKernel(OpBuilder &b, Location loc, Block &body,
              memref::GlobalOp pairs, memref::GlobalOp weights)
      : IndexMath{b, loc}, pairsGlobal(pairs), weightsGlobal(weights) {
    scores = body.getArgument(0);
    bias = body.getArgument(1);
    renorm = body.getArgument(2);
    scaling = body.getArgument(3);
    idxOut = body.getArgument(4);
    wtsOut = body.getArgument(5);
  }

  void build(ArrayRef<Operation *> rest);

private:
  void kernel(Value tokens, Value experts, Value slots);
  Value i32(int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
  }
  Value toI32(Value v) {
    return arith::IndexCastUIOp::create(b, loc, b.getI32Type(), v);
  }
  Value redux(NVVM::ReduxKind kind, Value v) {
    return NVVM::ReduxOp::create(b, loc, b.getI32Type(), v, kind, i32(-1));
  }
  /// The reductions of a round: the largest word and the lowest index
  /// that holds it.
  std::pair<Value, Value> best(Value word, Value index) {
    Value top = redux(NVVM::ReduxKind::UMAX, word);
    Value mine = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                       word, top);
    Value at = redux(NVVM::ReduxKind::UMIN, pick(mine, index, i32(-1)));
    return {top, at};
  }
  /// `then` in an scf.if on `cond`, with no results.
  void when(Value cond, function_ref<void()> then) {
    OpBuilder::InsertionGuard guard(b);
    auto op = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
    b.setInsertionPointToStart(op.thenBlock());
    then();
  }

  Value scores, bias, renorm, scaling, idxOut, wtsOut;
  memref::GlobalOp pairsGlobal, weightsGlobal;
};

void RouteKernel::build(ArrayRef<Operation *> rest) {
  Value c0 = idx(0), c1 = idx(1);
  Value tokens = memref::DimOp::create(b, loc, scores, c0);
  Value experts = memref::DimOp::create(b, loc, scores, c1);
  Value slots = memref::DimOp::create(b, loc, idxOut, c1);
  // At least one token; 1 <= k <= 32 and k <= E <= 1024; the outputs
  // [T, k] and the bias [E].
  Value ok = both(lt(c0, tokens), lt(c0, slots));
  ok = both(ok, both(lt(slots, idx(kMaxSlots + 1)),
                     lt(experts, idx(kThreads + 1))));
  ok = both(ok, cmp(arith::CmpIPredicate::ule, slots, experts));
  ok = both(ok, eq(memref::DimOp::create(b, loc, bias, c0), experts));
  ok = both(ok, eq(memref::DimOp::create(b, loc, idxOut, c0), tokens));
  ok = both(ok, eq(memref::DimOp::create(b, loc, wtsOut, c0), tokens));
  ok = both(ok, eq(memref::DimOp::create(b, loc, wtsOut, c1), slots));
  k3::guardBody(b, loc, rest, ok);
  kernel(tokens, experts, slots);
}

void RouteKernel::kernel(Value tokens, Value experts, Value slots) {
  OpBuilder::InsertionGuard guard(b);
  Value c1 = idx(1);
  auto launch =
      gpu::LaunchOp::create(b, loc, tokens, c1, c1, idx(kThreads), c1, c1);
  b.setInsertionPointToStart(&launch.getBody().front());
  Value tid = launch.getThreadIds().x, token = launch.getBlockIds().x;
  Value lane = rem(tid, 32), warp = div(tid, 32);
  Value pairs = memref::GetGlobalOp::create(b, loc, pairsGlobal.getType(),
                                            pairsGlobal.getSymName());
  Value weights = memref::GetGlobalOp::create(
      b, loc, weightsGlobal.getType(), weightsGlobal.getSymName());

  // Thread e's expert: its score, key and word (e < E; the others load
  // expert 0's and hold the word 0).
  Value have = lt(tid, experts);
  Value e = pick(have, tid, idx(0));
  Value s = memref::LoadOp::create(b, loc, scores, ValueRange{token, e});
  Value key = arith::AddFOp::create(
      b, loc, s, memref::LoadOp::create(b, loc, bias, ValueRange{e}));
  Value number = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ORD,
                                       key, key);
  Value zero = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, key,
                                     f32(0.0));
  Value bits = arith::BitcastOp::create(b, loc, b.getI32Type(),
                                        pick(zero, f32(0.0), key));
  Value negative =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, bits, i32(0));
  Value ordered = pick(negative, arith::XOrIOp::create(b, loc, bits, i32(-1)),
                       arith::OrIOp::create(b, loc, bits, i32(INT32_MIN)));
  Value word = pick(have, pick(number, ordered, i32(1)), i32(0));
  Value self = toI32(tid);

  auto rounds = scf::ForOp::create(b, loc, idx(0), slots, c1, word);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(rounds.getBody());
    Value r = rounds.getInductionVar();
    Value w = rounds.getRegionIterArg(0);
    Value buf = rem(r, 2);
    auto [top, at] = best(w, self);
    when(eq(lane, idx(0)), [&] {
      memref::StoreOp::create(b, loc, top, pairs, ValueRange{buf, idx(0), warp});
      memref::StoreOp::create(b, loc, at, pairs, ValueRange{buf, c1, warp});
    });
    gpu::BarrierOp::create(b, loc);
    Value warpTop =
        memref::LoadOp::create(b, loc, pairs, ValueRange{buf, idx(0), lane});
    Value warpAt =
        memref::LoadOp::create(b, loc, pairs, ValueRange{buf, c1, lane});
    Value winner = best(warpTop, warpAt).second;
    Value won = eq(self, winner);
    when(won, [&] {
      Value e64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), e);
      Value zero64 =
          arith::ConstantIntOp::create(b, loc, b.getI64Type(), 0);
      memref::StoreOp::create(b, loc, pick(number, e64, zero64), idxOut,
                              ValueRange{token, r});
      memref::StoreOp::create(b, loc, pick(number, s, f32(0.0)), weights,
                              ValueRange{r});
    });
    scf::YieldOp::create(b, loc, pick(won, i32(0), w));
  }
  gpu::BarrierOp::create(b, loc);

  // The weights (§6.1) in warp 0, lane l holding slot l: their sum as the
  // generic kernel takes it (k3-gpu-warp-reduce: each lane's terms from
  // 0, then an xor-shuffle tree), + 1e-20, then each slot's s / den with
  // renorm, times scaling.
  when(lt(tid, idx(32)), [&] {
    Value mine = lt(lane, slots);
    Value at = pick(mine, lane, sub(slots, c1));
    Value w = pick(mine, memref::LoadOp::create(b, loc, weights, at),
                   f32(0.0));
    Value total = arith::AddFOp::create(b, loc, f32(0.0), w);
    for (int64_t offset = 16; offset > 0; offset /= 2) {
      Value other = gpu::ShuffleOp::create(b, loc, total, i32(offset),
                                           i32(32), gpu::ShuffleMode::XOR)
                        .getShuffleResult();
      total = arith::AddFOp::create(b, loc, total, other);
    }
    when(mine, [&] {
      Value den = arith::AddFOp::create(b, loc, total, f32(1.0e-20));
      Value q = arith::DivFOp::create(b, loc, w, den);
      Value scaled =
          arith::MulFOp::create(b, loc, pick(renorm, q, w), scaling);
      memref::StoreOp::create(b, loc, scaled, wtsOut, ValueRange{token, lane});
    });
  });
  gpu::TerminatorOp::create(b, loc);
}

struct K3GPURoutePass : k3::impl::K3GPURoutePassBase<K3GPURoutePass> {
  using Base::Base;

  void runOnOperation() override {
    for (func::FuncOp f : k3::markedFunctions(getOperation(), kAttr))
      if (failed(rewrite(f)))
        return signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp f) {
    auto fail = [&](const Twine &why) {
      return f.emitError() << kAttr << ": " << why;
    };
    Block &body = f.getBody().front();
    auto memref = [&](unsigned a, int64_t rank, Type element) {
      auto t = dyn_cast<MemRefType>(body.getArgument(a).getType());
      return t && t.getRank() == rank && t.getElementType() == element;
    };
    Builder t(f.getContext());
    Type f32 = t.getF32Type();
    if (body.getNumArguments() != 6 || !memref(0, 2, f32) ||
        !memref(1, 1, f32) ||
        !body.getArgument(2).getType().isInteger(1) ||
        !body.getArgument(3).getType().isF32() ||
        !memref(4, 2, t.getI64Type()) || !memref(5, 2, f32))
      return fail("expected (scores [T, E] f32, bias [E] f32, renorm i1, "
                  "scaling f32, idx [T, k] i64, weights [T, k] f32) "
                  "arguments");
    if (!k3::returnsNothing(body))
      return fail("the function must return nothing");
    if (sm < 80)
      return success();
    ModuleOp module = getOperation();
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder b(f.getContext());
    b.setInsertionPointToStart(&body);
    RouteKernel(b, f.getLoc(), body,
                k3::workgroupBuffer(module, "k3k_route_pairs",
                                    {2, 2, kWarps}, t.getI32Type()),
                k3::workgroupBuffer(module, "k3k_route_weights", {kMaxSlots},
                                    f32))
        .build(rest);
    return success();
  }
};
} // namespace
