//===- GPUMMA.cpp - bf16 matrix products on tensor cores ------------------===//
//
// A k3 linear layer in a bf16 library is, after bufferization, the
// linalg.generic C[i, j] += f32(X[i, k]) * f32(W[j, k]) over bf16 X [T, K],
// bf16 W [N, K] and f32 C [T, N] (k3k_matmul_f32). At decode (a few rows)
// k3-gpu-warp-reduce streams W through the warps; a prefill of many rows
// re-reads W per row that way. This pass gives the product a second kernel,
// taken at run time when T >= min-rows, K % 64 == 0 and X and W are 16-byte
// aligned: one block per 64x64 tile of C, four warps of 32x32, the X and W
// tiles (64 x 64 each) copied into two-stage rings in shared memory with
// cp.async (the next k step in flight while the current one's mma run), and
// the products on the tensor cores with mma.sync m16n8k16 (bf16 in, f32
// accumulate: bf16 x bf16 products are exact in f32, so only the order of
// the f32 sums differs from the scalar kernel). Otherwise the generic runs as
// before. A product with fewer than kTargetBlocks tiles (a decode batch: a
// few dozen rows against a long W) is split over K as well, into slices of
// at least kMinSliceSteps k steps: each block writes its slice's partial
// tile, and a second loop adds the slices in order (deterministic). With
// the `fuse-slices` option there is no second kernel: the tile's last block
// to finish, found with a counter per tile as in k3-gpu-skinny-mma's split,
// adds C and the slices in the same order. It computes the same bits but
// was much slower on the H200 (batch-64 products 7.76 against 4.97 ms,
// BENCHMARKS.md twelfth session), so it is off.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16" with
// .bf16): lane = 4 g + t; A (16 x 16, row) a0 = A[g][2t, 2t+1],
// a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9];
// B (16 x 8, col) b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]; since W is
// [N, K] row-major, B[k][n] = W[n][k] and each register is two adjacent
// elements of a W row. D (16 x 8 f32) d0, d1 = D[g][2t, 2t+1],
// d2, d3 = D[g+8][2t, 2t+1].
//
//===----------------------------------------------------------------------===//

#include "TensorCore.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUMMAPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
// Block tile (rows of X, rows of W, K step), warps, shared row padding.
constexpr int64_t kTileM = 64, kTileN = 64, kTileK = 64;
constexpr int64_t kThreads = 128;
constexpr int64_t kWarpM = 32, kWarpN = 32;
// Shared rows of 72 bf16 (144 bytes): the 8 rows a fragment load touches
// fall in distinct banks, and every row stays 16-byte aligned.
constexpr int64_t kPad = 8;
// Stages of the X and W rings (cp.async): one k step in flight while the
// other one's mma run; 2 x 2 x 9 KB of workgroup memory (static: 48 KB at
// most, so three stages do not fit). Against k steps of 32 in three stages
// (the same bytes in flight, twice the barriers), a batch-64 decode step's
// products took 4.26 ms instead of 4.98 (BENCHMARKS.md, twelfth session).
constexpr int64_t kStages = 2;
// Split-K: blocks to aim for, and the fewest k steps of a slice. A block
// has 8 KB of W in flight (cp.async: batch-64 decode step 34.3 -> 33.3 ms,
// BENCHMARKS.md ninth session; 4 KB through registers before),
// so a decode batch's product is bound by the blocks in flight: eight per
// SM of an H200 (288 before: batch-64 decode step 53.6 -> 52.3 ms, seventh
// session; 2112 was no better).
constexpr int64_t kTargetBlocks = 1056, kMinSliceSteps = 8;
// copy() copies both tiles with the same 128 threads, 16 bytes each.
static_assert(kTileM == kTileN && kTileM * kTileK / 8 % kThreads == 0,
              "X and W tiles are staged alike, whole 16-byte pieces per thread");
static_assert((kTileM / kWarpM) * (kTileN / kWarpN) * 32 == kThreads,
              "one warp per 32x32 piece of the block tile");

/// `v` is `arith.extf` of `arg` from bf16, or a call of a function that is
/// exactly that (k3k_widen of a bf16 library).
bool isWiden(Value v, Value arg) {
  Operation *def = v.getDefiningOp();
  if (!def || def->getNumOperands() != 1 || def->getOperand(0) != arg)
    return false;
  if (isa<arith::ExtFOp>(def))
    return true;
  auto call = dyn_cast<func::CallOp>(def);
  if (!call)
    return false;
  auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
      call, call.getCalleeAttr());
  if (!callee || callee.isExternal() || !callee.getBody().hasOneBlock())
    return false;
  Block &body = callee.getBody().front();
  if (body.getOperations().size() != 2)
    return false;
  auto ext = dyn_cast<arith::ExtFOp>(body.front());
  auto ret = dyn_cast<func::ReturnOp>(body.back());
  return ext && ret && ext.getIn() == body.getArgument(0) &&
         ret.getNumOperands() == 1 && ret.getOperand(0) == ext.getResult();
}

/// C[i, j] += widen(X[i, k]) * widen(W[j, k]), bf16 X and W, f32 C.
bool isBF16Product(linalg::GenericOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumDpsInputs() != 2 ||
      op.getNumDpsInits() != 1 || op.getNumLoops() != 3)
    return false;
  auto type = [&](Value v) { return cast<MemRefType>(v.getType()); };
  MemRefType x = type(op.getDpsInputs()[0]), w = type(op.getDpsInputs()[1]),
             c = type(op.getDpsInits()[0]);
  if (!x.getElementType().isBF16() || !w.getElementType().isBF16() ||
      !c.getElementType().isF32() || x.getRank() != 2 || w.getRank() != 2 ||
      c.getRank() != 2 || !x.getLayout().isIdentity() ||
      !w.getLayout().isIdentity() || !c.getLayout().isIdentity())
    return false;
  MLIRContext *ctx = op.getContext();
  AffineExpr i, j, k;
  bindDims(ctx, i, j, k);
  SmallVector<AffineMap> maps = {AffineMap::get(3, 0, {i, k}, ctx),
                                 AffineMap::get(3, 0, {j, k}, ctx),
                                 AffineMap::get(3, 0, {i, j}, ctx)};
  if (op.getIndexingMapsArray() != maps)
    return false;
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  if (iters[0] != utils::IteratorType::parallel ||
      iters[1] != utils::IteratorType::parallel ||
      iters[2] != utils::IteratorType::reduction)
    return false;
  Block &body = op.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add)
    return false;
  Value acc = body.getArgument(2), a = body.getArgument(0),
        b = body.getArgument(1);
  Value prod = add.getLhs() == acc   ? add.getRhs()
               : add.getRhs() == acc ? add.getLhs()
                                     : Value();
  auto mul = prod ? prod.getDefiningOp<arith::MulFOp>() : nullptr;
  if (!mul)
    return false;
  return (isWiden(mul.getLhs(), a) && isWiden(mul.getRhs(), b)) ||
         (isWiden(mul.getLhs(), b) && isWiden(mul.getRhs(), a));
}

/// Builds the tensor-core kernel for `op` (X, W, C) in the current block.
class MMAKernel : k3::IndexMath {
public:
  /// `counters` (fuse-slices): the last block of a tile adds the slices;
  /// null: a second kernel does.
  MMAKernel(OpBuilder &b, Location loc, Value x, Value w, Value c,
            memref::GlobalOp xRing, memref::GlobalOp wRing,
            memref::GlobalOp counters)
      : IndexMath{b, loc}, x(x), w(w), c(c), xRing(xRing), wRing(wRing),
        counters(counters) {}

  void build(Value rows, Value cols, Value depth);

private:
  /// C[m][n] += the slices' partial tiles in slice order, for this
  /// thread's `count` elements (`at(i)`: m, n, in bounds; built in a loop,
  /// so that they are not held in registers from the stores), by the last
  /// block of the tile to finish (fuse-slices; the pattern of
  /// k3-gpu-skinny-mma's split).
  void addSlicesInBlock(int64_t count,
                        function_ref<std::array<Value, 3>(Value)> at,
                        Value partial, Value slices, Value tile, Value ring);

  /// Copies this thread's 16-byte pieces of rows [r0, r0 + 64) x
  /// [k0, k0 + 32) of `src` into stage `stage` of `tile` with cp.async
  /// (zeros for rows >= `limit` or `valid` false); returns the copies.
  SmallVector<Value> copy(Value src, Value tile, Value stage, Value r0,
                          Value k0, Value limit, Value valid);
  /// Two adjacent bf16 of a shared tile as the i32 a fragment register holds.
  Value pair(Value tile, Value stage, Value row, Value col);

  Value x, w, c;
  memref::GlobalOp xRing, wRing, counters;
  Value tid;
};

void MMAKernel::addSlicesInBlock(int64_t count,
                                 function_ref<std::array<Value, 3>(Value)> at,
                                 Value partial, Value slices, Value tile,
                                 Value ring) {
  // The verdict goes through the X ring, whose reads are done.
  SmallVector<Value> flagAt(3, idx(0));
  k3::finishSplitTile(
      b, loc, counters, tile, slices, [&] { return eq(tid, idx(0)); }, ring,
      flagAt, [&] {
    scf::ForOp::create(
        b, loc, idx(0), idx(count), idx(1), ValueRange{},
        [&](OpBuilder &eb, Location, Value i, ValueRange) {
          OpBuilder::InsertionGuard in1(b);
          b.setInsertionPoint(eb.getInsertionBlock(), eb.getInsertionPoint());
          auto [m, n, in] = at(i);
          scf::IfOp::create(b, loc, in, [&](OpBuilder &tb, Location) {
            OpBuilder::InsertionGuard in2(b);
            b.setInsertionPoint(tb.getInsertionBlock(),
                                tb.getInsertionPoint());
            Value sum = memref::LoadOp::create(b, loc, c, ValueRange{m, n});
            memref::StoreOp::create(
                b, loc,
                k3::addSlices(b, loc, partial, idx(0), slices, sum, m, n), c,
                ValueRange{m, n});
            scf::YieldOp::create(b, loc);
          });
          scf::YieldOp::create(b, loc);
        });
  });
}

constexpr int64_t kPieces = kTileM * kTileK / 8 / kThreads; // per thread

SmallVector<Value> MMAKernel::copy(Value src, Value tile, Value stage,
                                   Value r0, Value k0, Value limit,
                                   Value valid) {
  SmallVector<Value> copies;
  Value last = arith::SubIOp::create(b, loc, limit, idx(1));
  for (int64_t part = 0; part < kPieces; ++part) {
    Value piece = add(tid, part * kThreads);
    Value r = arith::DivUIOp::create(b, loc, piece, idx(kTileK / 8));
    Value col =
        mul(arith::RemUIOp::create(b, loc, piece, idx(kTileK / 8)), idx(8));
    Value row = add(r0, r);
    Value in = arith::AndIOp::create(
        b, loc, valid,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, limit));
    // Past the rows: no bytes read (from a row that exists), zeros stored.
    Value from = arith::MinUIOp::create(b, loc, row, last);
    Value n = arith::SelectOp::create(b, loc, in, idx(8), idx(0));
    copies.push_back(nvgpu::DeviceAsyncCopyOp::create(
        b, loc, tile, ValueRange{stage, r, col}, src,
        ValueRange{from, add(k0, col)}, b.getIndexAttr(8), n,
        b.getUnitAttr()));
  }
  return copies;
}

Value MMAKernel::pair(Value tile, Value stage, Value row, Value col) {
  auto vec2 = VectorType::get({2}, b.getBF16Type());
  Value v = vector::LoadOp::create(b, loc, vec2, tile,
                                   ValueRange{stage, row, col},
                                   /*nontemporal=*/false, llvm::MaybeAlign(4));
  Value i = vector::BitCastOp::create(b, loc,
                                      VectorType::get({1}, b.getI32Type()), v);
  return vector::ExtractOp::create(b, loc, i, ArrayRef<int64_t>{0});
}

void MMAKernel::build(Value rows, Value cols, Value depth) {
  Value c1 = idx(1);
  Value gridX = arith::CeilDivUIOp::create(b, loc, rows, idx(kTileM));
  Value gridY = arith::CeilDivUIOp::create(b, loc, cols, idx(kTileN));
  // Split-K: slices = min(ceil(target / tiles), steps / min steps), at least
  // one; each slice a whole number of k steps.
  Value steps = arith::CeilDivUIOp::create(b, loc, depth, idx(kTileK));
  Value want = arith::CeilDivUIOp::create(b, loc, idx(kTargetBlocks),
                                          mul(gridX, gridY));
  Value most = arith::DivUIOp::create(b, loc, steps, idx(kMinSliceSteps));
  Value slices = arith::MaxUIOp::create(
      b, loc, arith::MinUIOp::create(b, loc, want, most), c1);
  Value sliceK = mul(arith::CeilDivUIOp::create(b, loc, steps, slices),
                     idx(kTileK));
  slices = arith::CeilDivUIOp::create(b, loc, depth, sliceK);
  Value split =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, slices, c1);
  // The partial tiles [slices, rows, cols] (empty without a split).
  Value partial = k3::sliceBuffer(b, loc, split, slices, rows, cols);
  auto launch = gpu::LaunchOp::create(b, loc, gridX, gridY, slices,
                                      idx(kThreads), c1, c1);
  launch->setAttr("k3.tile_sizes",
                  b.getDenseI64ArrayAttr({kTileM, kTileN, kTileK}));
  launch->setAttr("k3.mma_shape", b.getDenseI64ArrayAttr({16, 8, 16}));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  auto ring = [&](memref::GlobalOp g) {
    return memref::GetGlobalOp::create(b, loc, g.getType(), g.getSymName());
  };
  Value xs = ring(xRing), ws = ring(wRing);
  tid = launch.getThreadIds().x;
  Value m0 = mul(launch.getBlockIds().x, idx(kTileM));
  Value n0 = mul(launch.getBlockIds().y, idx(kTileN));
  Value slice = launch.getBlockIds().z;
  Value kBegin = mul(slice, sliceK);
  Value kEnd = arith::MinUIOp::create(b, loc, add(kBegin, sliceK), depth);
  Value warp = arith::DivUIOp::create(b, loc, tid, idx(32));
  Value lane = arith::RemUIOp::create(b, loc, tid, idx(32));
  Value g = arith::DivUIOp::create(b, loc, lane, idx(4));
  Value t2 = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(2));
  // Warp (wm, wn) of the 2 x 2 computes C rows wm*32.., cols wn*32.. of the
  // block tile: 2 x 4 mma tiles of 16 x 8.
  constexpr int64_t tilesM = kWarpM / 16, tilesN = kWarpN / 8;
  Value wm = mul(arith::DivUIOp::create(b, loc, warp, idx(kTileN / kWarpN)),
                 idx(kWarpM));
  Value wn = mul(arith::RemUIOp::create(b, loc, warp, idx(kTileN / kWarpN)),
                 idx(kWarpN));

  Value zero =
      arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  SmallVector<Value> inits(tilesM * tilesN * 4, zero);
  // Stage s of the rings holds k step s % kStages of the slice; the first
  // kStages - 1 steps are copied before the loop, each iteration copies the
  // step kStages - 1 ahead (zeros past the slice) and waits for its own.
  auto stepOf = [&](Value kk) {
    return arith::DivUIOp::create(
        b, loc, arith::SubIOp::create(b, loc, kk, kBegin), idx(kTileK));
  };
  auto issue = [&](Value step) {
    Value k0 = add(kBegin, mul(step, idx(kTileK)));
    Value valid =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, k0, kEnd);
    k0 = arith::SelectOp::create(b, loc, valid, k0, kBegin);
    Value stage = arith::RemUIOp::create(b, loc, step, idx(kStages));
    SmallVector<Value> copies = copy(x, xs, stage, m0, k0, rows, valid);
    llvm::append_range(copies, copy(w, ws, stage, n0, k0, cols, valid));
    return nvgpu::DeviceAsyncCreateGroupOp::create(
               b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()),
               copies)
        .getResult();
  };
  Value group;
  for (int64_t s = 0; s < kStages - 1; ++s)
    group = issue(idx(s));
  auto loop = scf::ForOp::create(
      b, loc, kBegin, kEnd, idx(kTileK), inits,
      [&](OpBuilder &body, Location, Value k0, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(body.getInsertionBlock(), body.getInsertionPoint());
        Value step = stepOf(k0);
        // Every thread is done with the stage the copies below refill.
        gpu::BarrierOp::create(b, loc);
        Value ahead = issue(add(step, kStages - 1));
        nvgpu::DeviceAsyncWaitOp::create(b, loc, ahead,
                                         b.getI32IntegerAttr(kStages - 1));
        gpu::BarrierOp::create(b, loc);
        Value stage = arith::RemUIOp::create(b, loc, step, idx(kStages));
        SmallVector<Value> next(acc);
        for (int64_t kk = 0; kk < kTileK; kk += 16) {
          Value ca = add(t2, kk), cb = add(t2, kk + 8);
          SmallVector<std::array<Value, 4>> as;
          for (int64_t mi = 0; mi < tilesM; ++mi) {
            Value r = add(wm, mi * 16);
            Value r8 = add(r, 8);
            r = add(r, g);
            r8 = add(r8, g);
            as.push_back({pair(xs, stage, r, ca), pair(xs, stage, r8, ca),
                          pair(xs, stage, r, cb), pair(xs, stage, r8, cb)});
          }
          SmallVector<std::array<Value, 2>> bs;
          for (int64_t ni = 0; ni < tilesN; ++ni) {
            Value r = add(add(wn, ni * 8), g);
            bs.push_back({pair(ws, stage, r, ca), pair(ws, stage, r, cb)});
          }
          for (int64_t mi = 0; mi < tilesM; ++mi)
            for (int64_t ni = 0; ni < tilesN; ++ni) {
              int64_t base = (mi * tilesN + ni) * 4;
              llvm::copy(k3::mmaSyncBF16(b, loc, as[mi], bs[ni],
                                         ValueRange(next).slice(base, 4)),
                         next.begin() + base);
            }
        }
        scf::YieldOp::create(b, loc, next);
      });
  // No copy outlives the kernel (the last groups only store zeros).
  nvgpu::DeviceAsyncWaitOp::create(b, loc, group, b.getI32IntegerAttr(0));

  // C[m][n] += D (or the slice's partial tile = D), inside the bounds.
  for (int64_t mi = 0; mi < tilesM; ++mi)
    for (int64_t ni = 0; ni < tilesN; ++ni)
      for (int64_t e = 0; e < 4; ++e) {
        Value m = add(add(add(m0, wm), g), mi * 16 + (e >= 2 ? 8 : 0));
        Value n = add(add(add(n0, wn), t2), ni * 8 + (e % 2));
        Value in = arith::AndIOp::create(
            b, loc,
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, m, rows),
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, n, cols));
        Value d = loop.getResult((mi * tilesN + ni) * 4 + e);
        scf::IfOp::create(b, loc, in, [&](OpBuilder &tb, Location l) {
          scf::IfOp::create(
              tb, l, split,
              [&](OpBuilder &sb, Location sl) {
                memref::StoreOp::create(sb, sl, d, partial,
                                        ValueRange{slice, m, n});
                scf::YieldOp::create(sb, sl);
              },
              [&](OpBuilder &cb, Location cl) {
                Value old = memref::LoadOp::create(cb, cl, c, ValueRange{m, n});
                Value sum = arith::AddFOp::create(cb, cl, old, d);
                memref::StoreOp::create(cb, cl, sum, c, ValueRange{m, n});
                scf::YieldOp::create(cb, cl);
              });
          scf::YieldOp::create(tb, l);
        });
      }
  if (counters) {
    auto fused = scf::IfOp::create(b, loc, split, /*withElse=*/false);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPoint(fused.thenBlock()->getTerminator());
    // Element i = (mi, ni, e) of the thread's tiles, as stored above.
    auto at = [&](Value i) -> std::array<Value, 3> {
      Value e = rem(i, 4);
      Value m = add(add(add(m0, wm), g),
                    add(mul(div(i, 4 * tilesN), 16), mul(div(e, 2), 8)));
      Value n = add(add(add(n0, wn), t2),
                    add(mul(rem(div(i, 4), tilesN), 8), rem(e, 2)));
      return {m, n, both(lt(m, rows), lt(n, cols))};
    };
    addSlicesInBlock(tilesM * tilesN * 4, at, partial, slices,
                     add(mul(launch.getBlockIds().x, gridY),
                         launch.getBlockIds().y),
                     xs);
  }
  gpu::TerminatorOp::create(b, loc);
  if (counters)
    return;

  // C[m][n] += the slices' partial tiles, in slice order (a parallel loop
  // that the GPU mapping makes a kernel).
  b.setInsertionPointAfter(launch);
  scf::IfOp::create(b, loc, split, [&](OpBuilder &tb, Location l) {
    Value c0 = arith::ConstantIndexOp::create(tb, l, 0);
    Value one = arith::ConstantIndexOp::create(tb, l, 1);
    scf::ParallelOp::create(
        tb, l, ValueRange{c0, c0}, ValueRange{rows, cols},
        ValueRange{one, one}, [&](OpBuilder &pb, Location pl, ValueRange ij) {
          Value sum = memref::LoadOp::create(pb, pl, c, ij);
          memref::StoreOp::create(
              pb, pl,
              k3::addSlices(pb, pl, partial, c0, slices, sum, ij[0], ij[1]), c,
              ij);
        });
    scf::YieldOp::create(tb, l);
  });
  // Like every kernel temporary, the partial tiles live in the call's
  // workspace (k3-gpu-device-alloc), released with it.
}

struct K3GPUMMAPass : k3::impl::K3GPUMMAPassBase<K3GPUMMAPass> {
  using Base::Base;

  void runOnOperation() override {
    if (minRows < 1) {
      getOperation()->emitError("k3-gpu-mma: min-rows must be at least 1, got ")
          << static_cast<int64_t>(minRows);
      return signalPassFailure();
    }
    // PTX ISA: mma.sync with .bf16 operands needs sm_80.
    if (sm < 80)
      return;
    SmallVector<linalg::GenericOp> products;
    getOperation()->walk([&](linalg::GenericOp op) {
      // A product inside a `k3.skinny_matmul` function has fewer than 16
      // rows (k3-gpu-skinny-mma's).
      auto func = op->getParentOfType<func::FuncOp>();
      if (!op->getParentOfType<gpu::LaunchOp>() &&
          !(func && func->hasAttr("k3.skinny_matmul")) && isBF16Product(op))
        products.push_back(op);
    });
    for (linalg::GenericOp op : products)
      rewrite(op);
  }

  /// if (T >= min-rows && K % 64 == 0 && X, W 16-byte aligned) tensor cores
  /// else the generic.
  void rewrite(linalg::GenericOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    Value x = op.getDpsInputs()[0], w = op.getDpsInputs()[1],
          c = op.getDpsInits()[0];
    auto cst = [&](int64_t v) {
      return arith::ConstantIndexOp::create(b, loc, v);
    };
    auto eq0 = [&](Value v, int64_t m) {
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                   arith::RemUIOp::create(b, loc, v, cst(m)),
                                   cst(0));
    };
    Value rows = memref::DimOp::create(b, loc, x, 0);
    Value depth = memref::DimOp::create(b, loc, x, 1);
    Value cols = memref::DimOp::create(b, loc, w, 0);
    Value ok = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, rows,
                                     cst(minRows));
    ok = arith::AndIOp::create(b, loc, ok, eq0(depth, kTileK));
    for (Value m : {x, w})
      ok = arith::AndIOp::create(
          b, loc, ok,
          eq0(memref::ExtractAlignedPointerAsIndexOp::create(b, loc, m), 16));
    k3::guardBody(b, loc, {op.getOperation()}, ok);
    // Rings of X and W tiles in workgroup memory.
    auto ring = [&](StringRef name) {
      return k3::workgroupBuffer(getOperation(), name,
                                 {kStages, kTileM, kTileK + kPad});
    };
    // fuse-slices: a split product has fewer than kTargetBlocks tiles, each
    // with a counter.
    memref::GlobalOp counters;
    if (fuseSlices)
      counters = k3::deviceCounters(getOperation(), "k3k_mma_count",
                                    kTargetBlocks);
    MMAKernel(b, loc, x, w, c, ring("k3k_mma_x"), ring("k3k_mma_w"), counters)
        .build(rows, cols, depth);
  }
};
} // namespace
