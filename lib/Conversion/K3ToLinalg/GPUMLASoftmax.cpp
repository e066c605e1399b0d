//===- GPUMLASoftmax.cpp - the MLA decode softmax in one kernel -----------===//
//
// The absorbed MLA decode (K3_SPEC §5.3) takes softmax(s) over a token's
// n_i cached rows per head. The generic body of @k3k_mla_softmax
// (Kernels/MLA.mlir, marked `k3.mla_softmax`) is five kernels: the maxima of
// 512-row chunks, the maximum, exp(s - max) in place, the chunks' sums and
// the sum: 13.6 us of a batch-1 step's MLA layer on the H200 (BENCHMARKS.md,
// thirty-fourth session's trace), each a launch of one to a few blocks.
//
// This pass gives the function a second body: one block of 16 warps per
// (head, token). Warp w takes chunks w, w + 16, ...: its lanes' maxima, a
// max tree over the warp and one over the block's 16 warps (a maximum is
// the same in any order); then per chunk each lane takes the rows
// lo + lane + 32 k, stores exp(s - max) in place and adds them in that
// order, the warp's xor-shuffle tree stores the chunk's sum, and after a
// barrier warp 0 adds the chunks' sums, lane l the chunks l, l + 32, ...,
// then the tree. Those are the orders in which k3-gpu-warp-reduce splits
// the generic chunk and row sums over a warp (f32 terms: one per lane and
// iteration), so the exponentials and the sums have the generic kernels'
// bits. A lane's 16 rows of a chunk are loaded together.
//
// H200 (BENCHMARKS.md, thirty-fifth session, k3-group at an 8k context):
// 5.7 us per batch-1 step against the five kernels' 13 (four launches
// fewer per MLA layer); batch 8 0.023 ms, as the five (p is 26 MB there,
// read twice and written once either way); batch 64 0.18 ms against 0.24.
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

#include <limits>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUMLASOFTMAXPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr llvm::StringLiteral kAttr = "k3.mla_softmax";
constexpr int64_t kChunk = 512; // rows per chunk, as Kernels/MLA.mlir
constexpr int64_t kWarps = 16;
constexpr int64_t kPerLane = kChunk / 32; // a lane's rows of a chunk

/// p [T, NH, CAP], ntk [T], pmax, rowmax (unused here), psum [T, NH, C]
/// (the chunks' sums), rowsum [T, NH]. `maxima` [16] f32 in workgroup
/// memory holds the warps' maxima.
void build(OpBuilder &b, Location loc, Block &body, ArrayRef<Operation *> rest,
           memref::GlobalOp maxima) {
  k3::IndexMath k{b, loc};
  Value p = body.getArgument(0), ntk = body.getArgument(1),
        psum = body.getArgument(4), rowsum = body.getArgument(5);
  Value c0 = k.idx(0), c1 = k.idx(1);
  Value tokens = memref::DimOp::create(b, loc, p, 0);
  Value heads = memref::DimOp::create(b, loc, p, 1);
  Value chunks = memref::DimOp::create(b, loc, psum, 2);
  // The generic body's shapes: psum [T, NH, ⌈CAP / 512⌉], rowsum [T, NH].
  Value cap = memref::DimOp::create(b, loc, p, 2);
  Value ok = k.eq(chunks, k.ceilDiv(cap, k.idx(kChunk)));
  ok = k.both(ok, k.eq(memref::DimOp::create(b, loc, psum, 0), tokens));
  ok = k.both(ok, k.eq(memref::DimOp::create(b, loc, psum, 1), heads));
  ok = k.both(ok, k.eq(memref::DimOp::create(b, loc, rowsum, 0), tokens));
  ok = k.both(ok, k.eq(memref::DimOp::create(b, loc, rowsum, 1), heads));
  k3::guardBody(b, loc, rest, ok);

  auto launch = gpu::LaunchOp::create(b, loc, heads, tokens, c1,
                                      k.idx(kWarps * 32), c1, c1);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  Value tid = launch.getThreadIds().x;
  Value lane = k.rem(tid, 32), warp = k.div(tid, 32);
  Value h = launch.getBlockIds().x, i = launch.getBlockIds().y;
  Value shared = memref::GetGlobalOp::create(b, loc, maxima.getType(),
                                             maxima.getSymName());
  Value ninf = k.f32(-std::numeric_limits<double>::infinity());
  // The rows the generic body reads: below n_i and inside the chunks.
  Value n = k.min(memref::LoadOp::create(b, loc, ntk, ValueRange{i}),
                  k.mul(chunks, kChunk));
  Value lastRow = k.sub(arith::MaxUIOp::create(b, loc, n, c1), c1);

  // Warp w's chunks w, w + 16, ...: the lane's 16 rows of each (loaded
  // together, a row past n from row n - 1 and not used), folded by `f` into
  // the carried values.
  auto overChunks = [&](ValueRange init,
                        function_ref<SmallVector<Value>(
                            Value chunk, ArrayRef<Value> rows,
                            ArrayRef<Value> in, ArrayRef<Value> s, ValueRange)>
                            f) {
    return scf::ForOp::create(
               b, loc, warp, chunks, k.idx(kWarps), init,
               [&](OpBuilder &fb, Location, Value chunk, ValueRange acc) {
                 OpBuilder::InsertionGuard inner(b);
                 b.setInsertionPoint(fb.getInsertionBlock(),
                                     fb.getInsertionPoint());
                 Value lo = k.add(k.mul(chunk, kChunk), lane);
                 SmallVector<Value> rows, in, s;
                 for (int64_t r = 0; r < kPerLane; ++r) {
                   rows.push_back(k.add(lo, 32 * r));
                   in.push_back(k.lt(rows.back(), n));
                   s.push_back(memref::LoadOp::create(
                       b, loc, p,
                       ValueRange{i, h, k.min(rows.back(), lastRow)}));
                 }
                 scf::YieldOp::create(b, loc, f(chunk, rows, in, s, acc));
               })
        .getResults();
  };

  // The maximum: the lane's, the warp's, then the block's (a row past n
  // repeats row n - 1, which changes no maximum).
  Value mine = overChunks(ninf, [&](Value, ArrayRef<Value>, ArrayRef<Value>,
                                    ArrayRef<Value> s, ValueRange acc) {
    Value m = acc[0];
    for (Value v : s)
      m = arith::MaximumFOp::create(b, loc, m, v);
    return SmallVector<Value>{m};
  })[0];
  Value warpMaximum = k3::warpMax(b, loc, mine);
  k.storeIf(k.eq(lane, c0), warpMaximum, shared, {warp});
  gpu::BarrierOp::create(b, loc);
  Value max = ninf;
  for (int64_t w = 0; w < kWarps; ++w)
    max = arith::MaximumFOp::create(
        b, loc, max,
        memref::LoadOp::create(b, loc, shared, ValueRange{k.idx(w)}));

  // exp(s - max) in place; each chunk's sum (lane order, then the tree).
  overChunks({}, [&](Value chunk, ArrayRef<Value> rows, ArrayRef<Value> in,
                     ArrayRef<Value> s, ValueRange) {
    Value sum = k.f32(0.0);
    for (auto [row, ok, v] : llvm::zip(rows, in, s)) {
      Value e = math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, v,
                                                                  max));
      k.storeIf(ok, e, p, {i, h, row});
      sum = k.pick(ok, k.fadd(sum, e), sum);
    }
    Value total = k3::warpSum(b, loc, sum);
    k.storeIf(k.eq(lane, c0), total, psum, {i, h, chunk});
    return SmallVector<Value>{};
  });
  // The chunks' sums are the block's own stores: visible after a barrier.
  gpu::BarrierOp::create(b, loc);
  scf::IfOp::create(b, loc, k.eq(warp, c0), [&](OpBuilder &tb, Location) {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPoint(tb.getInsertionBlock(), tb.getInsertionPoint());
    Value part =
        scf::ForOp::create(
            b, loc, lane, chunks, k.idx(32), ValueRange{k.f32(0.0)},
            [&](OpBuilder &fb, Location l, Value chunk, ValueRange acc) {
              Value v = memref::LoadOp::create(fb, l, psum,
                                               ValueRange{i, h, chunk});
              scf::YieldOp::create(
                  fb, l, ValueRange{arith::AddFOp::create(fb, l, acc[0], v)});
            })
            .getResult(0);
    Value total = k3::warpSum(b, loc, part);
    k.storeIf(k.eq(lane, c0), total, rowsum, {i, h});
    scf::YieldOp::create(b, loc);
  });
  gpu::TerminatorOp::create(b, loc);
}

struct K3GPUMLASoftmaxPass
    : k3::impl::K3GPUMLASoftmaxPassBase<K3GPUMLASoftmaxPass> {
  using Base::Base;

  void runOnOperation() override {
    for (func::FuncOp f : k3::markedFunctions(getOperation(), kAttr))
      if (failed(rewrite(f)))
        return signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp f) {
    Block &body = f.getBody().front();
    auto memref = [&](unsigned a, int64_t rank) {
      auto m = a < body.getNumArguments()
                   ? dyn_cast<MemRefType>(body.getArgument(a).getType())
                   : MemRefType();
      return m && m.getRank() == rank && m.getLayout().isIdentity() &&
             m.getElementType() ==
                 (a == 1 ? Type(IndexType::get(f.getContext()))
                         : Type(Float32Type::get(f.getContext())));
    };
    if (body.getNumArguments() != 6 || !memref(0, 3) || !memref(1, 1) ||
        !memref(2, 3) || !memref(3, 2) || !memref(4, 3) || !memref(5, 2) ||
        !k3::returnsNothing(body))
      return f.emitError()
             << kAttr
             << ": expected (p [T, NH, CAP] f32, ntk [T] index, pmax [T, NH, "
                "C] f32, rowmax [T, NH] f32, psum [T, NH, C] f32, rowsum [T, "
                "NH] f32) and no results";
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder b(f.getContext());
    b.setInsertionPointToStart(&body);
    build(b, f.getLoc(), body, rest,
          k3::workgroupBuffer(getOperation(), "k3k_mla_softmax_maxima",
                              {kWarps}, b.getF32Type()));
    return success();
  }
};
} // namespace
