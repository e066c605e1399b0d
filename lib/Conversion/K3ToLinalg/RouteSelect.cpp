//===- RouteSelect.cpp - one token's top-k experts in a block -------------===//
//
// K3_SPEC §6.1 selects each token's k experts by the keys s + b, best
// first (equal keys by expert index), and weights them ω = s / (Σ_sel s +
// 1e-20) · scaling. A block picks the best remaining expert k times, as the
// spec states the order.
//
// Each expert's key is mapped to an unsigned word that orders as the
// keys do: a number's float bits made monotonic (sign flipped, negatives
// inverted; -0 as +0, which compare equal), then 1 for a NaN key (after
// every number: the generic kernels put NaN keys after the ranked experts,
// in expert order) and 0 for an expert already taken or past E. A thread
// with several experts takes its best word first (the lowest of its
// experts on a tie). A round is `redux.sync umax` of the words over each
// warp and `umin` of the indices that hold the maximum, lane 0's pair to
// workgroup memory, one barrier, and the same two reductions over the
// warps' pairs in every warp, so every thread knows the winner: the
// largest word and, among equals, the lowest expert, whatever the number
// of threads (the pairs alternate between two buffers: a warp writes round
// r + 2's only after round r + 1's barrier, which every warp passes after
// reading round r's). The winner's thread stores its index (0 for a NaN
// key) and keeps s (0 for a NaN key) for slot r, and takes the word 0.
// After the k rounds lane l of warp 0 takes slot l's weight, and the warp
// sums them and scales each as the generic kernel does (k3-gpu-warp-
// reduce's lanes and xor-shuffle tree): the same operations in the same
// order, so the same bits.
//
//===----------------------------------------------------------------------===//

#include "RouteSelect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace {
class Selection : k3::IndexMath {
public:
  Selection(OpBuilder &b, Location loc, const k3::RouteOperands &ops,
            const k3::RouteScratch &scratch)
      : IndexMath{b, loc}, ops(ops), scratch(scratch) {}

  void build(Value token, Value tid, int64_t threads, int64_t per,
             Value experts, Value slots);

private:
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

  const k3::RouteOperands &ops;
  const k3::RouteScratch &scratch;
};

void Selection::build(Value token, Value tid, int64_t threads, int64_t per,
                      Value experts, Value slots) {
  Value c1 = idx(1);
  Value lane = rem(tid, 32), warp = div(tid, 32);
  // Expert e_j = tid + threads · j: its score, key, word and index (e < E;
  // the others load expert 0's and hold the word 0).
  SmallVector<Value> es, scores, numbers, words, selves;
  for (int64_t j = 0; j < per; ++j) {
    Value ej = add(tid, threads * j);
    Value have = lt(ej, experts);
    Value e = pick(have, ej, idx(0));
    Value s = memref::LoadOp::create(b, loc, ops.scores, ValueRange{token, e});
    Value key = arith::AddFOp::create(
        b, loc, s, memref::LoadOp::create(b, loc, ops.bias, ValueRange{e}));
    Value number = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ORD,
                                         key, key);
    Value zero = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, key,
                                       f32(0.0));
    Value bits = arith::BitcastOp::create(b, loc, b.getI32Type(),
                                          pick(zero, f32(0.0), key));
    Value negative = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           bits, i32(0));
    Value ordered =
        pick(negative, arith::XOrIOp::create(b, loc, bits, i32(-1)),
             arith::OrIOp::create(b, loc, bits, i32(INT32_MIN)));
    es.push_back(e);
    scores.push_back(s);
    numbers.push_back(number);
    words.push_back(pick(have, pick(number, ordered, i32(1)), i32(0)));
    selves.push_back(toI32(ej));
  }

  auto rounds = scf::ForOp::create(b, loc, idx(0), slots, c1, words);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(rounds.getBody());
    Value r = rounds.getInductionVar();
    ValueRange w = rounds.getRegionIterArgs();
    Value buf = rem(r, 2);
    // The thread's best word (its lowest expert on a tie).
    Value word = w[0], self = selves[0];
    for (int64_t j = 1; j < per; ++j) {
      Value better = cmp(arith::CmpIPredicate::ugt, w[j], word);
      word = pick(better, w[j], word);
      self = pick(better, selves[j], self);
    }
    auto [top, at] = best(word, self);
    when(eq(lane, idx(0)), [&] {
      scratch.storePair(buf, 0, warp, top);
      scratch.storePair(buf, 1, warp, at);
    });
    gpu::BarrierOp::create(b, loc);
    // Lane l takes warp l's pair (the last warp's past the block's warps).
    int64_t warps = threads / 32;
    Value from = warps < 32 ? min(lane, idx(warps - 1)) : lane;
    Value warpTop = scratch.loadPair(buf, 0, from);
    Value warpAt = scratch.loadPair(buf, 1, from);
    Value winner = best(warpTop, warpAt).second;
    SmallVector<Value> next;
    for (int64_t j = 0; j < per; ++j) {
      Value won = eq(selves[j], winner);
      when(won, [&] {
        Value e64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), es[j]);
        Value zero64 = arith::ConstantIntOp::create(b, loc, b.getI64Type(), 0);
        memref::StoreOp::create(b, loc, pick(numbers[j], e64, zero64),
                                ops.idx, ValueRange{token, r});
        scratch.storeScore(r, pick(numbers[j], scores[j], f32(0.0)));
      });
      next.push_back(pick(won, i32(0), w[j]));
    }
    scf::YieldOp::create(b, loc, next);
  }
  gpu::BarrierOp::create(b, loc);

  // The weights (§6.1) in warp 0, lane l holding slot l: their sum as the
  // generic kernel takes it (k3-gpu-warp-reduce: each lane's terms from
  // 0, then an xor-shuffle tree), + 1e-20, then each slot's s / den with
  // renorm, times scaling.
  when(lt(tid, idx(32)), [&] {
    Value mine = lt(lane, slots);
    Value at = pick(mine, lane, sub(slots, c1));
    Value w = pick(mine, scratch.loadScore(at), f32(0.0));
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
          arith::MulFOp::create(b, loc, pick(ops.renorm, q, w), ops.scaling);
      memref::StoreOp::create(b, loc, scaled, ops.wts,
                              ValueRange{token, lane});
    });
  });
}
} // namespace

void k3::routeToken(IndexMath &m, const RouteOperands &ops,
                    const RouteScratch &scratch, Value token, Value tid,
                    int64_t threads, int64_t per, Value experts, Value slots) {
  Selection(m.b, m.loc, ops, scratch)
      .build(token, tid, threads, per, experts, slots);
}
