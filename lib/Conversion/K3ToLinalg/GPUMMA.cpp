//===- GPUMMA.cpp - bf16 matrix products on tensor cores ------------------===//
//
// A k3 linear layer in a bf16 library is, after bufferization, the
// linalg.generic C[i, j] += f32(X[i, k]) * f32(W[j, k]) over bf16 X [T, K],
// bf16 W [N, K] and f32 C [T, N] (k3k_matmul_f32). At decode (a few rows)
// k3-gpu-warp-reduce streams W through the warps; a prefill of many rows
// re-reads W per row that way. This pass gives the product a second kernel,
// taken at run time when T >= min-rows, K % 64 == 0 and X and W are 16-byte
// aligned: one block per tile-m x tile-n tile of C (64 x 128 by default),
// a warp per 32 x 32 of it, the X and W tiles (64 elements of K) copied
// into rings of `stages` stages in shared memory with cp.async (the next
// stages - 1 k steps in flight while the current one's mma run; static
// globals when the rings fit 48 KB, else the kernel's dynamic shared
// memory, which the runtime opts the kernel into), and the products on the
// tensor cores with mma.sync m16n8k16 (bf16 in, f32 accumulate: bf16 x bf16
// products are exact in f32, so only the order of the f32 sums differs from
// the scalar kernel). Otherwise the generic runs as before.
//
// Tile width: a decode batch of 64 tokens is one row of tiles, and every
// block reads its X tile through L2 as well as its W tile; Nsight Compute
// found the 64 x 64 kernel bound by L2 (75% busy, DRAM 45%, H200 batch-64
// step). 128 rows of W per block halve X's share: batch-64 products 4.36
// -> 4.02 ms, prefill 198 -> 173 ms (BENCHMARKS.md fifteenth session; 256
// and 128 x 128 were slower, as were more stages or fewer blocks).
//
// A `k3.mma_matmul` function (Kernels/Dense.mlir: the rounded linear
// layers and logits of 16 tokens and more) gets the kernel for its whole
// body, storing out(sum) itself: no zeroed f32 output before it and no
// rounding kernel after (batch-64 decode step 24.05 -> 23.19 ms of kernels
// with the wider tile, prefill 1648 -> 1578 ms).
//
// With `min-blocks` the launch names its kernel (`<function>_mma_kernel`,
// then `_1`, ... for a function's later launches) and records in the
// function's `k3.launch_bounds` the blocks per SM its registers must allow
// (k3-gpu-launch-bounds). Neither that nor more stages made a batch-64 step
// faster (H100, BENCHMARKS.md forty-second session), so it is off.
//
// With `ldmatrix` a warp reads its fragments of a k16 step with four
// ldmatrix.x4 (two A tiles, four B tiles) instead of 16 four-byte loads of
// workgroup memory: lane 8 q + i gives the address of row i of matrix q
// and takes, in word j, the pair of matrix j that the loads would give (PTX
// ISA, "Warp-level matrix load instruction: ldmatrix"), so the sums are the
// same bits. The padded rows (144 bytes) keep each matrix's 8 rows in
// distinct banks. Off until measured.
//
// A product with at most half `target-blocks` tiles (a decode batch: a
// few dozen rows against a long W) is split over K as well, into slices of
// at least kMinSliceSteps k steps: each block writes its slice's partial
// tile, and a second loop adds the slices in order (deterministic). With
// the `fuse-slices` option there is no second kernel: the tile's last block
// to finish, found with a counter per tile as in k3-gpu-skinny-mma's split,
// adds C and the slices in the same order. It computes the same bits but
// was much slower on the H200 (batch-64 products 7.76 against 4.97 ms,
// BENCHMARKS.md twelfth session), so it is off.
//
// Stores: a lane's d0, d1 (and d2, d3) are two adjacent columns of one
// row, stored together (8 bytes of a partial tile or of an f32 C, 4 of a
// bf16 out(sum)) where both are inside, N is even and the buffer aligned,
// else one by one. With a store per value each store instruction of a warp
// wrote half of every 32-byte sector it touched: H200 batch-64 step, the
// many-token products 2.359 -> 2.169 ms, the rounded logits 0.762 -> 0.743
// (BENCHMARKS.md, twenty-fourth session).
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
// K step, warp tile (rows of X, rows of W), shared row padding. The block
// tile is an option (`tile-m` x `tile-n`, 64 x 128 by default), one warp
// per 32 x 32 of it.
constexpr int64_t kTileK = 64;
constexpr int64_t kWarpM = 32, kWarpN = 32;
static_assert(kWarpN / 8 % 2 == 0, "ldmatrix.x4 loads B tiles in pairs");
// Shared rows of 72 bf16 (144 bytes): the 8 rows a fragment load touches
// fall in distinct banks, and every row stays 16-byte aligned.
constexpr int64_t kPad = 8;
// Stages of the X and W rings (cp.async, option `stages`, 2 by default):
// one k step in flight while the other one's mma run. Rings of at most 48
// KB are static workgroup memory (64 x 64 tiles: 2 x 2 x 9 KB), larger ones
// dynamic (64 x 128: 2 x 27 KB). Against k steps of 32 in three stages (the
// same bytes in flight, twice the barriers), a batch-64 decode step's
// products took 4.26 ms instead of 4.98 (BENCHMARKS.md, twelfth session).
constexpr int64_t kStaticBytes = 48 * 1024;
/// Workgroup memory a block may have on compute capability `sm` (x10),
/// opted in (CUDA C++ Programming Guide, "Technical Specifications per
/// Compute Capability": 163 KB on 8.0 and 8.7, 227 KB on 9.0 and 10.x,
/// 99 KB on 8.6, 8.9 and 12.x).
int64_t mostSharedBytes(int64_t sm) {
  if (sm == 80 || sm == 87)
    return 163 * 1024;
  if (sm >= 90 && sm < 120)
    return 227 * 1024;
  return 99 * 1024;
}
// Split-K (option `target-blocks`): the most blocks a split product may
// have, and the fewest k steps of a slice. A decode batch's product is
// split into as many slices as keep its blocks within the target: 396 by
// default, the blocks of 64 x 128 (256 threads of 69 registers: three per
// SM) an H200 holds at once, so a split product runs in one wave. Rounding
// the slices up to reach 528 made 1.1 to 1.45 waves: batch-64 linear
// layers 2.63 -> 2.35 ms (BENCHMARKS.md seventeenth session). Earlier:
// 528 against 1056, batch-64 products 2.73 -> 2.65 ms, prefill 105 -> 97
// ms (fifteenth session); 1056 against 288 for the 64 x 64 tile, batch-64
// decode step 53.6 -> 52.3 ms (seventh session).
constexpr int64_t kMinSliceSteps = 8;
constexpr llvm::StringLiteral kAttr = "k3.mma_matmul";

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

/// The block tile and the rings: `tileM` x `tileN` of C per block, one
/// warp per 32 x 32 of it; the X and W tiles (`tileM` and `tileN` rows of
/// 64 + 8 bf16) in rings of `stages` stages, in the static globals `x` and
/// `w` when both fit 48 KB, else (null globals) in the kernel's dynamic
/// workgroup memory, X's ring first. `minBlocks` (0: none): the resident
/// blocks per SM the kernel's registers must allow (k3-gpu-launch-bounds).
/// `ldmatrix`: the fragments read with ldmatrix.x4 instead of 4-byte loads.
struct Layout {
  int64_t tileM, tileN, stages, minBlocks;
  bool ldmatrix;
  memref::GlobalOp x, w;

  int64_t threads() const { return tileM / kWarpM * (tileN / kWarpN) * 32; }
  static int64_t stageBytes(int64_t rows) { return rows * (kTileK + kPad) * 2; }
  int64_t ringBytes() const {
    return stages * (stageBytes(tileM) + stageBytes(tileN));
  }
  bool dynamic() const { return !x; }
};

/// Builds the tensor-core kernel for `op` (X, W, C) in the current block.
class MMAKernel : k3::IndexMath {
public:
  /// `counters` (fuse-slices): the last block of a tile adds the slices;
  /// null: a second kernel does.
  /// `outFn` (a `k3.mma_matmul` function's): C[m][n] = out(sum), C not
  /// read; null: C[m][n] += sum.
  MMAKernel(OpBuilder &b, Location loc, Value x, Value w, Value c,
            func::FuncOp outFn, Layout layout, int64_t targetBlocks,
            memref::GlobalOp counters)
      : IndexMath{b, loc}, x(x), w(w), c(c), outFn(outFn), layout(layout),
        targetBlocks(targetBlocks), counters(counters) {}

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

  /// Copies this thread's 16-byte pieces of rows [r0, r0 + `rows`) x
  /// [k0, k0 + 64) of `src` into stage `stage` of `tile` with cp.async
  /// (zeros for rows >= `limit` or `valid` false); returns the copies.
  SmallVector<Value> copy(Value src, Value tile, Value stage, Value r0,
                          Value k0, Value limit, Value valid, int64_t rows);
  /// Four 8 x 8 matrices of a shared tile with one ldmatrix.x4, each lane
  /// giving the address of its row (`row`, `col`) and taking word j of
  /// matrix j: the fragment registers the pair() loads would give.
  std::array<Value, 4> matrices(Value tile, Value stage, Value row, Value col);
  /// Two adjacent bf16 of a shared tile as the i32 a fragment register holds.
  Value pair(Value tile, Value stage, Value row, Value col);

  /// What C[m][n] becomes for the sum `sum` of its products (one slice).
  Value result(OpBuilder &ob, Location ol, Value sum, Value m, Value n) {
    if (outFn)
      return func::CallOp::create(ob, ol, outFn, sum).getResult(0);
    return arith::AddFOp::create(
        ob, ol, memref::LoadOp::create(ob, ol, c, ValueRange{m, n}), sum);
  }
  /// What C[m][n] becomes for the slices' partial tiles, added in slice
  /// order: out(p0 + p1 + ...), or C[m][n] + p0 + p1 + ...
  Value sliceResult(OpBuilder &ob, Location ol, Value partial, Value slices,
                    Value m, Value n) {
    auto at = [&](int64_t v) {
      return arith::ConstantIndexOp::create(ob, ol, v);
    };
    if (!outFn)
      return k3::addSlices(
          ob, ol, partial, at(0), slices,
          memref::LoadOp::create(ob, ol, c, ValueRange{m, n}), m, n);
    Value first =
        memref::LoadOp::create(ob, ol, partial, ValueRange{at(0), m, n});
    Value sum = k3::addSlices(ob, ol, partial, at(1), slices, first, m, n);
    return func::CallOp::create(ob, ol, outFn, sum).getResult(0);
  }

  Value x, w, c;
  func::FuncOp outFn;
  Layout layout;
  int64_t targetBlocks;
  memref::GlobalOp counters;
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
            memref::StoreOp::create(
                b, loc,
                sliceResult(b, loc, partial, slices, m, n), c,
                ValueRange{m, n});
            scf::YieldOp::create(b, loc);
          });
          scf::YieldOp::create(b, loc);
        });
  });
}

SmallVector<Value> MMAKernel::copy(Value src, Value tile, Value stage,
                                   Value r0, Value k0, Value limit,
                                   Value valid, int64_t rows) {
  SmallVector<Value> copies;
  Value last = arith::SubIOp::create(b, loc, limit, idx(1));
  const int64_t threads = layout.threads();
  for (int64_t part = 0; part < rows * kTileK / 8 / threads; ++part) {
    Value piece = add(tid, part * threads);
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

std::array<Value, 4> MMAKernel::matrices(Value tile, Value stage, Value row,
                                         Value col) {
  Value m = nvgpu::LdMatrixOp::create(
      b, loc, VectorType::get({4, 2}, b.getBF16Type()), tile,
      ValueRange{stage, row, col}, /*transpose=*/false, /*numTiles=*/4);
  std::array<Value, 4> words;
  for (int64_t j = 0; j < 4; ++j) {
    Value v = vector::ExtractOp::create(b, loc, m, ArrayRef<int64_t>{j});
    Value w = vector::BitCastOp::create(
        b, loc, VectorType::get({1}, b.getI32Type()), v);
    words[j] = vector::ExtractOp::create(b, loc, w, ArrayRef<int64_t>{0});
  }
  return words;
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
  const int64_t tileM = layout.tileM, tileN = layout.tileN;
  Value gridX = arith::CeilDivUIOp::create(b, loc, rows, idx(tileM));
  Value gridY = arith::CeilDivUIOp::create(b, loc, cols, idx(tileN));
  // Split-K: slices = min(floor(target / tiles), steps / min steps), at
  // least one; each slice a whole number of k steps.
  Value steps = arith::CeilDivUIOp::create(b, loc, depth, idx(kTileK));
  Value want =
      arith::DivUIOp::create(b, loc, idx(targetBlocks), mul(gridX, gridY));
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
  Value shared;
  if (layout.dynamic())
    shared = arith::ConstantIntOp::create(b, loc, b.getI32Type(),
                                          layout.ringBytes());
  auto launch = gpu::LaunchOp::create(b, loc, gridX, gridY, slices,
                                      idx(layout.threads()), c1, c1, shared);
  launch->setAttr("k3.tile_sizes",
                  b.getDenseI64ArrayAttr({tileM, tileN, kTileK}));
  launch->setAttr("k3.mma_shape", b.getDenseI64ArrayAttr({16, 8, 16}));
  if (layout.minBlocks)
    k3::boundLaunch(launch, layout.minBlocks);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  const int64_t stages = layout.stages;
  Value xs, ws;
  if (layout.dynamic()) {
    // The kernel has no static workgroup memory, so the dynamic bytes are
    // the whole window (MLIR's lowering declares them as a zero-sized
    // workgroup global, PTX `.shared .align 16 .b8 __dynamic_shmem__0`).
    Attribute space = gpu::AddressSpaceAttr::get(
        b.getContext(), gpu::GPUDialect::getWorkgroupAddressSpace());
    Value bytes = gpu::DynamicSharedMemoryOp::create(
        b, loc,
        MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                        MemRefLayoutAttrInterface(), space));
    auto ring = [&](int64_t rows, int64_t at) {
      auto type = MemRefType::get({stages, rows, kTileK + kPad},
                                  b.getBF16Type(), MemRefLayoutAttrInterface(),
                                  space);
      return memref::ViewOp::create(b, loc, type, bytes, idx(at),
                                    ValueRange{});
    };
    xs = ring(tileM, 0);
    ws = ring(tileN, stages * Layout::stageBytes(tileM));
  } else {
    auto ring = [&](memref::GlobalOp g) {
      return memref::GetGlobalOp::create(b, loc, g.getType(), g.getSymName());
    };
    xs = ring(layout.x);
    ws = ring(layout.w);
  }
  tid = launch.getThreadIds().x;
  Value m0 = mul(launch.getBlockIds().x, idx(tileM));
  Value n0 = mul(launch.getBlockIds().y, idx(tileN));
  Value slice = launch.getBlockIds().z;
  Value kBegin = mul(slice, sliceK);
  Value kEnd = arith::MinUIOp::create(b, loc, add(kBegin, sliceK), depth);
  Value warp = arith::DivUIOp::create(b, loc, tid, idx(32));
  Value lane = arith::RemUIOp::create(b, loc, tid, idx(32));
  Value g = arith::DivUIOp::create(b, loc, lane, idx(4));
  Value t2 = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(2));
  // ldmatrix: lane 8 q + i addresses row i of matrix q (A: rows + 8 (q % 2),
  // k + 8 (q / 2); B: n tile + q / 2, k + 8 (q % 2)).
  Value aRow, aCol, bRow, bCol;
  if (layout.ldmatrix) {
    Value q = arith::DivUIOp::create(b, loc, lane, idx(8));
    Value i = arith::RemUIOp::create(b, loc, lane, idx(8));
    Value qLow = mul(arith::RemUIOp::create(b, loc, q, idx(2)), idx(8));
    Value qHigh = mul(arith::DivUIOp::create(b, loc, q, idx(2)), idx(8));
    aRow = add(i, qLow), aCol = qHigh;
    bRow = add(i, qHigh), bCol = qLow;
  }
  // Warp (wm, wn) of the tileM / 32 x tileN / 32 computes C rows wm*32..,
  // cols wn*32.. of the block tile: 2 x 4 mma tiles of 16 x 8.
  constexpr int64_t tilesM = kWarpM / 16, tilesN = kWarpN / 8;
  Value wm = mul(arith::DivUIOp::create(b, loc, warp, idx(tileN / kWarpN)),
                 idx(kWarpM));
  Value wn = mul(arith::RemUIOp::create(b, loc, warp, idx(tileN / kWarpN)),
                 idx(kWarpN));

  Value zero =
      arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  SmallVector<Value> inits(tilesM * tilesN * 4, zero);
  // Stage s of the rings holds k step s % stages of the slice; the first
  // stages - 1 steps are copied before the loop, each iteration copies the
  // step stages - 1 ahead (zeros past the slice) and waits for its own.
  auto stepOf = [&](Value kk) {
    return arith::DivUIOp::create(
        b, loc, arith::SubIOp::create(b, loc, kk, kBegin), idx(kTileK));
  };
  auto issue = [&](Value step) {
    Value k0 = add(kBegin, mul(step, idx(kTileK)));
    Value valid =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, k0, kEnd);
    k0 = arith::SelectOp::create(b, loc, valid, k0, kBegin);
    Value stage = arith::RemUIOp::create(b, loc, step, idx(stages));
    SmallVector<Value> copies =
        copy(x, xs, stage, m0, k0, rows, valid, tileM);
    llvm::append_range(copies,
                       copy(w, ws, stage, n0, k0, cols, valid, tileN));
    return nvgpu::DeviceAsyncCreateGroupOp::create(
               b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()),
               copies)
        .getResult();
  };
  Value group;
  for (int64_t s = 0; s < stages - 1; ++s)
    group = issue(idx(s));
  auto loop = scf::ForOp::create(
      b, loc, kBegin, kEnd, idx(kTileK), inits,
      [&](OpBuilder &body, Location, Value k0, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(body.getInsertionBlock(), body.getInsertionPoint());
        Value step = stepOf(k0);
        // Every thread is done with the stage the copies below refill.
        gpu::BarrierOp::create(b, loc);
        Value ahead = issue(add(step, stages - 1));
        nvgpu::DeviceAsyncWaitOp::create(b, loc, ahead,
                                         b.getI32IntegerAttr(stages - 1));
        gpu::BarrierOp::create(b, loc);
        Value stage = arith::RemUIOp::create(b, loc, step, idx(stages));
        SmallVector<Value> next(acc);
        for (int64_t kk = 0; kk < kTileK; kk += 16) {
          Value ca = add(t2, kk), cb = add(t2, kk + 8);
          SmallVector<std::array<Value, 4>> as;
          SmallVector<std::array<Value, 2>> bs;
          if (layout.ldmatrix) {
            // Lane 8 q + i gives row i of matrix q: A's matrices are (rows
            // 0-7, 8-15) x (k 0-7, 8-15) in a0..a3 order, B's (n tile ni,
            // ni + 1) x (k 0-7, 8-15).
            for (int64_t mi = 0; mi < tilesM; ++mi)
              as.push_back(matrices(xs, stage, add(add(wm, mi * 16), aRow),
                                    add(aCol, kk)));
            for (int64_t ni = 0; ni < tilesN; ni += 2) {
              std::array<Value, 4> m = matrices(
                  ws, stage, add(add(wn, ni * 8), bRow), add(bCol, kk));
              bs.push_back({m[0], m[1]});
              bs.push_back({m[2], m[3]});
            }
          } else {
            for (int64_t mi = 0; mi < tilesM; ++mi) {
              Value r = add(wm, mi * 16);
              Value r8 = add(r, 8);
              r = add(r, g);
              r8 = add(r8, g);
              as.push_back({pair(xs, stage, r, ca), pair(xs, stage, r8, ca),
                            pair(xs, stage, r, cb), pair(xs, stage, r8, cb)});
            }
            for (int64_t ni = 0; ni < tilesN; ++ni) {
              Value r = add(add(wn, ni * 8), g);
              bs.push_back({pair(ws, stage, r, ca), pair(ws, stage, r, cb)});
            }
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

  // C[m][n] += D (or the slice's partial tile = D), inside the bounds. A
  // lane's values e = 0, 1 (and 2, 3) are columns n, n + 1 of one row: one
  // store of the pair where both are inside and the rows keep its
  // alignment, else one store per value.
  Type cType = cast<MemRefType>(c.getType()).getElementType();
  Value even = eq(rem(cols, 2), idx(0));
  Value pairs = arith::SelectOp::create(
      b, loc, split, both(even, aligned(partial, 8)),
      both(even, aligned(c, 2 * cType.getIntOrFloatBitWidth() / 8)));
  for (int64_t mi = 0; mi < tilesM; ++mi)
    for (int64_t ni = 0; ni < tilesN; ++ni)
      for (int64_t h = 0; h < 2; ++h) {
        Value m = add(add(add(m0, wm), g), mi * 16 + 8 * h);
        Value n = add(add(add(n0, wn), t2), ni * 8);
        Value d0 = loop.getResult((mi * tilesN + ni) * 4 + 2 * h);
        Value d1 = loop.getResult((mi * tilesN + ni) * 4 + 2 * h + 1);
        Value row = lt(m, rows);
        auto pair = scf::IfOp::create(
            b, loc, both(pairs, both(row, lt(add(n, 1), cols))),
            /*withElse=*/true);
        OpBuilder::InsertionGuard inner(b);
        // Values d at (m, n), (m, n + 1), ...: the slice's partial tile or
        // C, one vector store for a pair.
        auto store = [&](ArrayRef<Value> d, Value n) {
          auto put = [&](ArrayRef<Value> v, Value to, ValueRange at) {
            if (v.size() == 1) {
              memref::StoreOp::create(b, loc, v[0], to, at);
              return;
            }
            Value pair = vector::FromElementsOp::create(
                b, loc, VectorType::get({2}, v[0].getType()), v);
            int64_t bytes = 2 * v[0].getType().getIntOrFloatBitWidth() / 8;
            vector::StoreOp::create(b, loc, pair, to, at,
                                    /*nontemporal=*/false,
                                    llvm::MaybeAlign(bytes));
          };
          auto where = scf::IfOp::create(b, loc, split, /*withElse=*/true);
          b.setInsertionPoint(where.thenBlock()->getTerminator());
          put(d, partial, ValueRange{slice, m, n});
          b.setInsertionPoint(where.elseBlock()->getTerminator());
          SmallVector<Value> r;
          for (auto [e, v] : llvm::enumerate(d))
            r.push_back(result(b, loc, v, m, e ? add(n, e) : n));
          put(r, c, ValueRange{m, n});
        };
        b.setInsertionPoint(pair.thenBlock()->getTerminator());
        store({d0, d1}, n);
        for (int64_t e = 0; e < 2; ++e) {
          b.setInsertionPoint(pair.elseBlock()->getTerminator());
          Value ne = e ? add(n, e) : n;
          auto in = scf::IfOp::create(b, loc, both(row, lt(ne, cols)),
                                      /*withElse=*/false);
          b.setInsertionPoint(in.thenBlock()->getTerminator());
          store({e ? d1 : d0}, ne);
        }
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

  // C[m][n] gets the slices' partial tiles, in slice order (a parallel loop
  // that the GPU mapping makes a kernel).
  b.setInsertionPointAfter(launch);
  scf::IfOp::create(b, loc, split, [&](OpBuilder &tb, Location l) {
    Value c0 = arith::ConstantIndexOp::create(tb, l, 0);
    Value one = arith::ConstantIndexOp::create(tb, l, 1);
    scf::ParallelOp::create(
        tb, l, ValueRange{c0, c0}, ValueRange{rows, cols},
        ValueRange{one, one}, [&](OpBuilder &pb, Location pl, ValueRange ij) {
          memref::StoreOp::create(
              pb, pl, sliceResult(pb, pl, partial, slices, ij[0], ij[1]), c,
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
    for (auto [name, tile] : {std::pair{"tile-m", int64_t(tileM)},
                              std::pair{"tile-n", int64_t(tileN)}})
      if (tile != 64 && tile != 128 && tile != 256) {
        getOperation()->emitError("k3-gpu-mma: ")
            << name << " must be 64, 128 or 256, got " << tile;
        return signalPassFailure();
      }
    Layout layout{tileM, tileN, stages, minBlocks, ldmatrix, nullptr, nullptr};
    // At most 512 threads: 80 registers each (ptxas) fit a block.
    if (layout.threads() > 512) {
      getOperation()->emitError("k3-gpu-mma: a tile of ")
          << layout.tileM << " x " << layout.tileN << " needs "
          << layout.threads() << " threads, more than 512";
      return signalPassFailure();
    }
    // The oldest target's limit (`sm`).
    if (stages < 2 || layout.ringBytes() > mostSharedBytes(sm)) {
      getOperation()->emitError("k3-gpu-mma: stages must be at least 2 and ")
          << "the rings at most " << mostSharedBytes(sm) << " bytes (sm_"
          << static_cast<int64_t>(sm) << "); "
          << static_cast<int64_t>(stages) << " stages of " << layout.tileM
          << " x " << layout.tileN << " tiles are " << layout.ringBytes();
      return signalPassFailure();
    }
    if (minBlocks < 0 || minBlocks > 32) {
      getOperation()->emitError(
          "k3-gpu-mma: min-blocks must be from 0 to 32, got ")
          << static_cast<int64_t>(minBlocks);
      return signalPassFailure();
    }
    if (targetBlocks < 1) {
      getOperation()->emitError(
          "k3-gpu-mma: target-blocks must be at least 1, got ")
          << static_cast<int64_t>(targetBlocks);
      return signalPassFailure();
    }
    SmallVector<std::pair<func::FuncOp, func::FuncOp>> marked; // (f, out)
    for (func::FuncOp f : k3::markedFunctions(getOperation(), kAttr)) {
      FailureOr<func::FuncOp> out = k3::productOutFunction(f, kAttr);
      if (failed(out))
        return signalPassFailure();
      marked.push_back({f, *out});
    }
    // PTX ISA: mma.sync with .bf16 operands needs sm_80.
    if (sm < 80)
      return;
    SmallVector<linalg::GenericOp> products;
    getOperation()->walk([&](linalg::GenericOp op) {
      // A product inside a `k3.skinny_matmul` function has fewer than 16
      // rows (k3-gpu-skinny-mma's); one inside a `k3.mma_matmul` function
      // is what runs when the function's kernel cannot.
      auto func = op->getParentOfType<func::FuncOp>();
      if (!op->getParentOfType<gpu::LaunchOp>() &&
          !(func && (func->hasAttr("k3.skinny_matmul") || func->hasAttr(kAttr))) &&
          isBF16Product(op))
        products.push_back(op);
    });
    for (linalg::GenericOp op : products) {
      OpBuilder b(op);
      build(b, op.getLoc(), op.getDpsInputs()[0], op.getDpsInputs()[1],
            op.getDpsInits()[0], nullptr, {op.getOperation()});
    }
    for (auto [f, outFn] : marked) {
      Block &body = f.getBody().front();
      // bf16 activations only: an f32 library keeps its kernels.
      if (!cast<MemRefType>(body.getArgument(0).getType())
               .getElementType()
               .isBF16())
        continue;
      SmallVector<Operation *> rest = k3::bodyOps(body);
      OpBuilder b = OpBuilder::atBlockBegin(&body);
      build(b, f.getLoc(), body.getArgument(0), body.getArgument(1),
            body.getArgument(2), outFn, rest);
    }
  }

  /// if (T >= min-rows && K % 64 == 0 && X, W 16-byte aligned, and with
  /// `outFn` W's K is X's) the tensor-core kernel, storing C[m][n] =
  /// out(sum) with `outFn`, else C[m][n] += sum; else `rest` as before.
  void build(OpBuilder &b, Location loc, Value x, Value w, Value c,
             func::FuncOp outFn, ArrayRef<Operation *> rest) {
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
    // (A generic's operands agree; a function's arguments may not.)
    if (outFn)
      ok = arith::AndIOp::create(
          b, loc, ok,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, depth,
                                memref::DimOp::create(b, loc, w, 1)));
    for (Value m : {x, w})
      ok = arith::AndIOp::create(
          b, loc, ok,
          eq0(memref::ExtractAlignedPointerAsIndexOp::create(b, loc, m), 16));
    k3::guardBody(b, loc, rest, ok);
    // Rings of X and W tiles in workgroup memory: static globals when they
    // fit 48 KB, else the kernel's dynamic workgroup memory.
    Layout layout{tileM, tileN, stages, minBlocks, ldmatrix, nullptr, nullptr};
    if (layout.ringBytes() <= kStaticBytes)
      for (auto [ring, name, tile] :
           {std::tuple{&layout.x, "k3k_mma_x", layout.tileM},
            std::tuple{&layout.w, "k3k_mma_w", layout.tileN}})
        *ring = k3::workgroupBuffer(getOperation(), name,
                                    {stages, tile, kTileK + kPad});
    // fuse-slices: a split product has fewer than target-blocks tiles, each
    // with a counter.
    memref::GlobalOp counters;
    if (fuseSlices)
      counters = k3::deviceCounters(getOperation(), "k3k_mma_count",
                                    targetBlocks);
    MMAKernel(b, loc, x, w, c, outFn, layout, targetBlocks, counters)
        .build(rows, cols, depth);
  }
};
} // namespace
