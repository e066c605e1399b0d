//===- GPUMLAMMA.cpp - MLA decode attention on tensor cores ---------------===//
//
// The absorbed MLA decode (K3_SPEC §5.3) scores each cached row c_j against
// the q̂ of every head, s[h, j] = q̂_h · c_j, and sums ō_h = Σ_j p[h, j] c_j:
// with 96 heads on a row of 576 elements that is about 100 multiply-adds
// per byte of cache, compute-bound on CUDA cores (BENCHMARKS.md, ninth
// session: 60 us each for the 9.4 MB of one 8k context). Here both are
// mma.sync m16n8k16 products with the cache in bf16, as it is stored.
//
// q̂ and p are f32. Each is split into three bf16 parts, x = hi + mid + lo
// with hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid) (round to
// nearest; exact short of underflow: 3 x 8 significant bits cover f32's
// 24), and each part is one mma against the same cache fragment into the
// same accumulator, so every product is exact in f32 and only the order of
// the sum is the tensor cores'.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16", .bf16):
// lane = 4 g + t; a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1],
// a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g],
// b1 = B[2t+8, 2t+9][g]; d0, d1 = D[g][2t, 2t+1], d2, d3 = D[g+8][2t, 2t+1].
//
// Scores (`k3.mla_scores`): A = the q̂ parts of 16 heads, B = 8 cache rows
// (n = row, k = element). A warp takes 32 heads (two m tiles) and 32 rows
// (four n tiles); the k order of each 32-element step is permuted alike in
// A and B (mma 0 takes elements 8t, 8t+1 as k = 2t, 2t+1 and 8t+2, 8t+3 as
// 2t+8, 2t+9; mma 1 the next four), so that a lane reads 8 consecutive
// elements (16 bytes) of its cache rows and of its heads' parts. The parts
// come from a [T, 3, heads, R + dr] bf16 copy of q̂ made first (a parallel
// loop: 1/64 of the cache's size per token).
//
// Weighted sums (`k3.mla_wsum`): A = the p parts of 16 heads (k = row),
// B = 16 cache rows (k = row, n = column). A block of 4 warps takes 32
// heads and 4 x 64 columns; lane g reads columns 8g .. 8g+7 of rows 2t,
// 2t+1, 2t+8, 2t+9 (16 bytes each) and n tile q takes column 8g + q of
// each, so that the pairs along k are two rows' elements put side by side
// in registers. p is split once per block and step
// (`nvvm.convert.f32x2.to.bf16x2`, round to nearest): warp w splits word
// a_w of every lane's fragments into workgroup memory (two stages, one
// barrier per step), and each lane reads its 4 words back in one 16-byte
// read (H200: 1.22 ms at B=64 against 1.67 with each warp splitting all of
// them itself, and 2.26 with a precomputed copy of the parts). The slices of
// the context are the CUDA-core stage's (about 256 rows, at most the output's
// slice count, from the token's own length).
//
// Both stream their operands through cp.async rings in workgroup memory,
// so that several steps are in flight without holding them in registers
// (BENCHMARKS.md, eighteenth session: global-load stalls when the next
// step's operands were carried in registers; nineteenth: the rings make
// the scores 0.82 -> 0.61 ms and the sums 1.26 -> 1.20 ms at B=64, at the
// same 4 blocks per SM). Scores: a block's ring holds per step 32 elements
// of its 128 cache rows and of its 32 heads' q̂ parts (each part loaded
// once per block, not per warp), `score-stages` stages, one barrier per
// step. Sums: each warp's ring holds per step 16 rows x 64 columns of the
// cache (16-byte pieces swizzled by row: lanes 2t read rows 32 banks apart
// otherwise) and the 4 p each lane splits, `sum-stages` stages. A row past
// the slice or the token's length is copied as zeros (its p is zero, its
// score not stored).
//
// Stores: a lane's sums for one head are 8 consecutive columns (value e
// of its 8 n tiles), stored as two 16-byte pieces, and its scores for one
// head two consecutive rows, one 8-byte piece. With a 4-byte store per
// value, the partial sums' stores were the sums kernel's most frequent L2
// request (Nsight Compute, B = 64: 100 M write sectors for 403 MB, L2 85%
// busy): H200 sums B = 64 1.21 -> 0.71 ms, B = 8 0.183 -> 0.096, B = 1
// 0.034 -> 0.021; scores B = 64 0.614 -> 0.576 (BENCHMARKS.md,
// twenty-fourth session).
//
// Numerics (docs/NUMERICS.md, "MLA decode"): a score or a slice's sum adds
// exact products 16 rows or elements at a time in the hardware's order, the
// steps in order; nothing depends on the other tokens of a decode batch.
//
//===----------------------------------------------------------------------===//

#include "TensorCore.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUMLAMMAPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr int64_t kParts = 3;      // bf16 parts of an f32
constexpr int64_t kWarpHeads = 32; // two m16 tiles
constexpr int64_t kTiles = 8;      // n8 tiles per warp
constexpr int64_t kScoreRows = 32; // scores: cache rows per warp
constexpr int64_t kScoreTiles = kScoreRows / 8;
constexpr int64_t kScoreWarps = 4;  // scores: warps per block
constexpr int64_t kSumColumns = 64; // weighted sums: columns per warp
constexpr int64_t kSumWarps = 4;    // weighted sums: warps per block (a_0..a_3)
constexpr int64_t kSumRows = 16;    // weighted sums: cache rows per step
// The most stages that keep a kernel's workgroup memory within the 48 KB
// of static workgroup memory a kernel may have (CUDA C++ programming
// guide, "Shared Memory"): the sums' rings of 4 stages and the split p take
// 46 KB, the scores' ring of 3 stages 42 KB.
constexpr int64_t kMaxSumStages = 4;
constexpr int64_t kMaxScoreStages = 3;
constexpr int64_t kSliceRows = 256; // rows per slice, as Kernels/MLA.mlir
constexpr llvm::StringLiteral kScores = "k3.mla_scores";
constexpr llvm::StringLiteral kSums = "k3.mla_wsum";

/// What both kernels build: lanes, loads as i32 words, the f32 split.
struct MLAKernel : k3::IndexMath {
  Value lane, warp, g, t;

  void threads(gpu::LaunchOp launch) {
    Value tid = launch.getThreadIds().x;
    warp = div(tid, 32);
    lane = rem(tid, 32);
    g = div(lane, 4);
    t = rem(lane, 4);
  }
  /// 8 bf16 at `indices` of `m` (16-byte aligned), as 4 i32 words.
  SmallVector<Value> words(Value m, ValueRange indices) {
    Value v = vector::LoadOp::create(
        b, loc, VectorType::get({8}, b.getBF16Type()), m, indices,
        /*nontemporal=*/false, llvm::MaybeAlign(16));
    v = vector::BitCastOp::create(b, loc, VectorType::get({4}, b.getI32Type()),
                                  v);
    SmallVector<Value> r;
    for (int64_t k = 0; k < 4; ++k)
      r.push_back(vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{k}));
    return r;
  }
  /// The i32 word of a vector<2xbf16>.
  Value word(Value v2) {
    Value w = vector::BitCastOp::create(
        b, loc, VectorType::get({1}, b.getI32Type()), v2);
    return vector::ExtractOp::create(b, loc, w, ArrayRef<int64_t>{0});
  }
  /// (x0, x1) rounded to a bf16 pair (x0 in the low half) as an i32 word,
  /// and what the rounding left of each.
  Value roundPair(Value &x0, Value &x1) {
    Value w = word(NVVM::ConvertF32x2ToBF16x2Op::create(
        b, loc, VectorType::get({2}, b.getBF16Type()), x1, x0,
        /*random_bits=*/Value(), NVVM::FPRoundingMode::RN));
    Type i32 = b.getI32Type();
    Value lo = arith::ShLIOp::create(
        b, loc, w, arith::ConstantIntOp::create(b, loc, i32, 16));
    Value hi = arith::AndIOp::create(
        b, loc, w,
        arith::ConstantIntOp::create(b, loc, i32, int32_t(0xFFFF0000u)));
    x0 = arith::SubFOp::create(
        b, loc, x0, arith::BitcastOp::create(b, loc, b.getF32Type(), lo));
    x1 = arith::SubFOp::create(
        b, loc, x1, arith::BitcastOp::create(b, loc, b.getF32Type(), hi));
    return w;
  }
  /// The three bf16 parts of the pair (x0, x1): hi, mid, lo words.
  std::array<Value, kParts> parts(Value x0, Value x1) {
    std::array<Value, kParts> r;
    for (int64_t k = 0; k < kParts; ++k)
      r[k] = roundPair(x0, x1);
    return r;
  }
  /// Accumulator tile `tile` (4 f32 of `acc`) += a · bx, one mma.
  void mma(SmallVectorImpl<Value> &acc, int64_t tile, ArrayRef<Value> a,
           ArrayRef<Value> bx) {
    std::array<Value, 4> d =
        k3::mmaSyncBF16(b, loc, a, bx, ValueRange(acc).slice(4 * tile, 4));
    llvm::copy(d, acc.begin() + 4 * tile);
  }
  Value load(Value m, ValueRange indices) {
    return memref::LoadOp::create(b, loc, m, indices);
  }
};

/// Stores the bf16 parts hi, mid, lo of `x` at buf[ix[0], part, ix[1],
/// ix[2]].
void storeParts(OpBuilder &b, Location loc, Value x, Value buf, ValueRange ix) {
  for (int64_t part = 0; part < kParts; ++part) {
    Value h = arith::TruncFOp::create(b, loc, b.getBF16Type(), x);
    Value at = arith::ConstantIndexOp::create(b, loc, part);
    memref::StoreOp::create(b, loc, h, buf,
                            ValueRange{ix[0], at, ix[1], ix[2]});
    if (part + 1 < kParts)
      x = arith::SubFOp::create(
          b, loc, x, arith::ExtFOp::create(b, loc, b.getF32Type(), h));
  }
}

/// Scores: qt [T, W, HP] f32, pool [rows, W] bf16, rows [T, CAP] index,
/// ntk [T] index, p [T, NH, CAP] f32, scale f32. `ring` [stages, 128 + 3 x
/// 32, 32] bf16 is the block's cp.async ring: per step the 128 cache rows'
/// and the 32 heads' q̂ parts' 32 elements.
void buildScores(OpBuilder &builder, Location loc, Block &body,
                 ArrayRef<Operation *> rest, memref::GlobalOp ringGlobal) {
  MLAKernel k{{builder, loc}};
  OpBuilder &b = builder;
  Value qt = body.getArgument(0), pool = body.getArgument(1),
        rows = body.getArgument(2), ntk = body.getArgument(3),
        p = body.getArgument(4), scale = body.getArgument(5);
  int64_t stages = ringGlobal.getType().getDimSize(0);
  constexpr int64_t blockRows = kScoreRows * kScoreWarps;
  Value c0 = k.idx(0), c1 = k.idx(1);
  Value tokens = memref::DimOp::create(b, loc, p, 0);
  Value heads = memref::DimOp::create(b, loc, p, 1);
  Value cap = memref::DimOp::create(b, loc, p, 2);
  Value width = memref::DimOp::create(b, loc, pool, 1);
  Value ok = k.both(k.rem0(width, 32), k.aligned(pool));
  ok = k.both(ok, k.both(k.rem0(cap, blockRows), k.aligned(p, 8)));
  k3::guardBody(b, loc, rest, ok);

  // The q̂ parts, heads padded to 32 (a padded head repeats the last).
  Value padded = k.mul(k.ceilDiv(heads, k.idx(kWarpHeads)), kWarpHeads);
  Value last = k.sub(heads, c1);
  auto bf16 = b.getBF16Type();
  auto dyn = ShapedType::kDynamic;
  Value qs = memref::AllocOp::create(
      b, loc, MemRefType::get({dyn, kParts, dyn, dyn}, bf16),
      ValueRange{tokens, padded, width}, b.getI64IntegerAttr(16));
  scf::ParallelOp::create(
      b, loc, ValueRange{c0, c0, c0}, ValueRange{tokens, padded, width},
      ValueRange{c1, c1, c1}, [&](OpBuilder &pb, Location l, ValueRange ix) {
        k3::IndexMath m{pb, l};
        Value x = memref::LoadOp::create(
            pb, l, qt, ValueRange{ix[0], ix[2], m.min(ix[1], last)});
        storeParts(pb, l, x, qs, ix);
      });

  auto launch = gpu::LaunchOp::create(b, loc, k.div(cap, blockRows),
                                      k.div(padded, kWarpHeads), tokens,
                                      k.idx(kScoreWarps * 32), c1, c1);
  launch->setAttr("k3.mma_shape", b.getDenseI64ArrayAttr({16, 8, 16}));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  k.threads(launch);
  Value ring = memref::GetGlobalOp::create(b, loc, ringGlobal.getType(),
                                           ringGlobal.getSymName());
  Value i = launch.getBlockIds().z;
  Value h0 = k.mul(launch.getBlockIds().y, kWarpHeads);
  Value jb = k.mul(launch.getBlockIds().x, blockRows);
  Value n = k.load(ntk, {i});
  // Blocks wholly past the token's rows have nothing to store.
  auto live = scf::IfOp::create(b, loc, k.lt(jb, n), /*withElse=*/false);
  b.setInsertionPoint(live.thenBlock()->getTerminator());
  // The copies of a step: thread x brings elements 8 (x % 4) .. + 7 of the
  // step's 32 of ring rows x / 4 + 32 c (c < 7): the block's cache rows
  // (c < 4; zeros past n) and the q̂ parts (c - 4) of its heads.
  Value tid = launch.getThreadIds().x;
  Value copyRow = k.div(tid, 4), copyPiece = k.mul(k.rem(tid, 4), 8);
  SmallVector<Value> poolRow, rowLive;
  for (int64_t c = 0; c < 4; ++c) {
    Value j = k.add(jb, k.add(copyRow, 32 * c));
    rowLive.push_back(k.lt(j, n));
    poolRow.push_back(k.load(rows, {i, k.min(j, k.sub(n, c1))}));
  }
  Value steps = k.div(width, 32);
  auto issue = [&](Value s) {
    Value stage = k.rem(s, stages);
    // Past the last step: zeros (never read), from the last step's address.
    Value inside = k.lt(s, steps);
    Value e = k.add(k.mul(k.min(s, k.sub(steps, c1)), 32), copyPiece);
    SmallVector<Value> copies;
    for (int64_t c = 0; c < 4; ++c)
      copies.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, ring, ValueRange{stage, k.add(copyRow, 32 * c), copyPiece},
          pool, ValueRange{poolRow[c], e}, b.getIndexAttr(8),
          k.pick(k.both(inside, rowLive[c]), k.idx(8), c0), b.getUnitAttr()));
    for (int64_t part = 0; part < kParts; ++part)
      copies.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, ring,
          ValueRange{stage, k.add(copyRow, blockRows + 32 * part), copyPiece},
          qs, ValueRange{i, k.idx(part), k.add(h0, copyRow), e},
          b.getIndexAttr(8), k.pick(inside, k.idx(8), c0), b.getUnitAttr()));
    return nvgpu::DeviceAsyncCreateGroupOp::create(
        b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), copies);
  };
  // Steps 0 .. stages - 2 in flight before the loop; step s waits for its
  // copies (stages - 2 groups may stay pending), passes a barrier (its
  // copies are visible to the block, and every warp is done with step s -
  // 1's stage), then refills that stage with step s + stages - 1.
  // (The waits name the last of these groups: a token only orders a wait.)
  Value group;
  for (int64_t s = 0; s + 1 < stages; ++s)
    group = issue(k.idx(s));
  // Warp w: rows 32 w .. + 31 of the block; lane: cache rows g + 8 q (n
  // tile q) and parts of heads g + 16 mt + 8 r, elements 8t .. 8t+7 of the
  // step.
  Value j0 = k.add(jb, k.mul(k.warp, kScoreRows));
  Value e8 = k.mul(k.t, 8);
  SmallVector<Value> init(2 * kScoreTiles * 4, k.f32(0.0));
  auto loop = scf::ForOp::create(
      b, loc, c0, steps, c1, init,
      [&](OpBuilder &fb, Location, Value s, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        Value stage = k.rem(s, stages);
        nvgpu::DeviceAsyncWaitOp::create(b, loc, group,
                                         b.getI32IntegerAttr(stages - 2));
        gpu::BarrierOp::create(b, loc);
        issue(k.add(s, stages - 1));
        SmallVector<Value> next(acc);
        auto words = [&](Value row) { return k.words(ring, {stage, row, e8}); };
        SmallVector<Value> cache;
        for (int64_t q = 0; q < kScoreTiles; ++q)
          llvm::append_range(cache, words(k.add(k.mul(k.warp, kScoreRows),
                                                k.add(k.g, 8 * q))));
        for (int64_t mt = 0; mt < 2; ++mt)
          for (int64_t part = 0; part < kParts; ++part) {
            SmallVector<Value> r0 =
                words(k.add(k.g, blockRows + 32 * part + 16 * mt));
            SmallVector<Value> r1 =
                words(k.add(k.g, blockRows + 32 * part + 16 * mt + 8));
            for (int64_t q = 0; q < kScoreTiles; ++q)
              for (int64_t half = 0; half < 2; ++half) {
                std::array<Value, 4> a = {r0[2 * half], r1[2 * half],
                                          r0[2 * half + 1], r1[2 * half + 1]};
                std::array<Value, 2> bx = {cache[4 * q + 2 * half],
                                           cache[4 * q + 2 * half + 1]};
                k.mma(next, mt * kScoreTiles + q, a, bx);
              }
          }
        scf::YieldOp::create(b, loc, next);
      });
  // The copies issued past the last step land before the block ends.
  nvgpu::DeviceAsyncWaitOp::create(b, loc, group, b.getI32IntegerAttr(0));
  // Tile q's values are rows 2t, 2t+1 (d0, d1 and d2, d3) of heads g and
  // g + 8: one 8-byte store per pair (scalar stores made one L2 write of 4
  // bytes each), the first alone where only it is below n.
  for (int64_t mt = 0; mt < 2; ++mt)
    for (int64_t q = 0; q < kScoreTiles; ++q)
      for (int64_t e = 0; e < 4; e += 2) {
        Value h = k.add(h0, k.add(k.g, 16 * mt + 8 * (e / 2)));
        Value j = k.add(j0, k.add(k.mul(k.t, 2), 8 * q));
        Value j1 = k.add(j, k.idx(1));
        SmallVector<Value> v;
        for (int64_t x = e; x < e + 2; ++x)
          v.push_back(arith::MulFOp::create(
              b, loc, loop.getResult(4 * (mt * kScoreTiles + q) + x), scale));
        Value head = k.lt(h, heads);
        auto pair = scf::IfOp::create(b, loc, k.both(head, k.lt(j1, n)),
                                      /*withElse=*/true);
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(pair.thenBlock()->getTerminator());
        Value both = vector::FromElementsOp::create(
            b, loc, VectorType::get({2}, b.getF32Type()), v);
        vector::StoreOp::create(b, loc, both, p, ValueRange{i, h, j},
                                /*nontemporal=*/false, llvm::MaybeAlign(8));
        b.setInsertionPoint(pair.elseBlock()->getTerminator());
        k.storeIf(k.both(head, k.lt(j, n)), v[0], p, {i, h, j});
      }
  b.setInsertionPointAfter(live);
  gpu::TerminatorOp::create(b, loc);
}

/// Weighted sums: p [T, NH, CAP] f32, pool [rows, W] bf16, rows [T, CAP]
/// index, ntk [T] index, partial [T, NH, S, R] f32. `cacheRing` [warps,
/// stages, 16, 64] bf16 and `pRing` [warps, stages, 32 lanes, 4] f32 are
/// the warps' cp.async rings; `split` [2, 2, 3, 32 lanes, 4] i32 holds the
/// A words of two steps in turn, [step % 2][m tile][part][lane][a_k]: warp
/// w stores word a_w of each lane, each lane reads its 4 words at once.
void buildSums(OpBuilder &builder, Location loc, Block &body,
               ArrayRef<Operation *> rest, memref::GlobalOp cacheRing,
               memref::GlobalOp pRing, memref::GlobalOp split) {
  MLAKernel k{{builder, loc}};
  OpBuilder &b = builder;
  Value p = body.getArgument(0), pool = body.getArgument(1),
        rows = body.getArgument(2), ntk = body.getArgument(3),
        partial = body.getArgument(4);
  int64_t stages = cacheRing.getType().getDimSize(1);
  Value c0 = k.idx(0), c1 = k.idx(1);
  Value tokens = memref::DimOp::create(b, loc, p, 0);
  Value heads = memref::DimOp::create(b, loc, p, 1);
  Value cap = memref::DimOp::create(b, loc, p, 2);
  Value slices = memref::DimOp::create(b, loc, partial, 2);
  Value columns = memref::DimOp::create(b, loc, partial, 3);
  Value width = memref::DimOp::create(b, loc, pool, 1);
  Value ok = k.both(k.rem0(columns, kSumColumns), k.rem0(width, 8));
  ok = k.both(ok, k.both(k.aligned(pool), k.aligned(partial)));
  k3::guardBody(b, loc, rest, ok);

  Value padded = k.mul(k.ceilDiv(heads, k.idx(kWarpHeads)), kWarpHeads);
  // Blocks of 4 warps of 64 columns (a block per (slice, column block)
  // along x; warps past R only help split p).
  Value warps = k.div(columns, kSumColumns);
  Value columnBlocks = k.ceilDiv(warps, k.idx(kSumWarps));
  auto launch = gpu::LaunchOp::create(b, loc, k.mul(slices, columnBlocks),
                                      k.div(padded, kWarpHeads), tokens,
                                      k.idx(kSumWarps * 32), c1, c1);
  launch->setAttr("k3.mma_shape", b.getDenseI64ArrayAttr({16, 8, 16}));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  k.threads(launch);
  Value shared =
      memref::GetGlobalOp::create(b, loc, split.getType(), split.getSymName());
  Value cring = memref::GetGlobalOp::create(b, loc, cacheRing.getType(),
                                            cacheRing.getSymName());
  Value pring =
      memref::GetGlobalOp::create(b, loc, pRing.getType(), pRing.getSymName());
  Value i = launch.getBlockIds().z;
  Value h0 = k.mul(launch.getBlockIds().y, kWarpHeads);
  Value slice =
      arith::DivUIOp::create(b, loc, launch.getBlockIds().x, columnBlocks);
  Value columnBlock =
      arith::RemUIOp::create(b, loc, launch.getBlockIds().x, columnBlocks);
  Value col0 = k.mul(k.add(k.mul(columnBlock, kSumWarps), k.warp), kSumColumns);
  Value active = k.lt(col0, columns);
  Value colRead = k.min(col0, k.sub(columns, k.idx(kSumColumns)));
  // The slice's rows [js, je) (empty past the token's slice count).
  Value n = k.load(ntk, {i});
  Value count = k.min(k.ceilDiv(n, k.idx(kSliceRows)), slices);
  Value size = k.ceilDiv(n, count);
  Value js = k.mul(slice, size);
  Value je = k.min(k.add(js, size), n);
  Value len = arith::SelectOp::create(b, loc, k.lt(js, je), k.sub(je, js), c0);
  Value last = k.sub(heads, c1), jlast = k.sub(n, c1), plast = k.sub(cap, c1);
  // Warp w splits fragment word a_w of every lane for both m tiles: head g
  // (+ 8 for odd w) of the m tile, rows 2t, 2t+1 (+ 8 for w >= 2); past
  // NH: the last head (not stored).
  Value myHead = k.add(k.g, k.mul(k.rem(k.warp, 2), 8));
  Value myRow = k.add(k.mul(k.t, 2), k.mul(k.div(k.warp, 2), 8));
  // The copies of a step: lane l brings columns 8 (l % 8) .. + 7 of the
  // warp's 64 of rows l / 8 + 4 q (q < 4; zeros past the slice) and the 4 p
  // it splits (zero past the slice).
  Value copyRow = k.div(k.lane, 8), copyPiece = k.mul(k.rem(k.lane, 8), 8);
  auto firstRow = [&](Value s) { return k.add(js, k.mul(s, kSumRows)); };
  // Columns c .. c + 7 (c % 8 == 0) of ring row r sit at (c / 8 xor (r &
  // 6)) * 8, so that the 8 lanes of a 16-byte read phase (g < 2, rows 2t +
  // {0, 1, 8, 9}) find 8 different bank quads.
  auto swizzled = [&](Value r, Value c) {
    return k.mul(
        arith::XOrIOp::create(b, loc, k.div(c, 8),
                              arith::AndIOp::create(b, loc, r, k.idx(6))),
        8);
  };
  // The pool rows of the lane's cache copies of step s, loaded a step
  // before the copies are issued.
  auto poolRows = [&](Value s) {
    SmallVector<Value> at;
    for (int64_t q = 0; q < 4; ++q) {
      Value j = k.add(firstRow(s), k.add(copyRow, 4 * q));
      at.push_back(k.load(rows, {i, k.min(j, jlast)}));
    }
    return at;
  };
  auto issue = [&](Value s, ValueRange at) -> Value {
    Value stage = k.rem(s, stages);
    SmallVector<Value> copies;
    for (int64_t q = 0; q < 4; ++q) {
      Value r = k.add(copyRow, 4 * q);
      Value j = k.add(firstRow(s), r);
      copies.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, cring, ValueRange{k.warp, stage, r, swizzled(r, copyPiece)},
          pool, ValueRange{at[q], k.add(colRead, copyPiece)}, b.getIndexAttr(8),
          k.pick(k.lt(j, je), k.idx(8), c0), b.getUnitAttr()));
    }
    for (int64_t mt = 0; mt < 2; ++mt)
      for (int64_t e = 0; e < 2; ++e) {
        Value j = k.add(k.add(firstRow(s), myRow), e);
        Value h = k.min(k.add(h0, k.add(myHead, 16 * mt)), last);
        copies.push_back(nvgpu::DeviceAsyncCopyOp::create(
            b, loc, pring, ValueRange{k.warp, stage, k.lane, k.idx(2 * mt + e)},
            p, ValueRange{i, h, k.min(j, plast)}, b.getIndexAttr(1),
            k.pick(k.lt(j, je), c1, c0), UnitAttr()));
      }
    return nvgpu::DeviceAsyncCreateGroupOp::create(
        b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), copies);
  };
  // Steps 0 .. stages - 2 in flight before the loop; step s issues step
  // s + stages - 1 (the pool rows of which it carries) and loads the pool
  // rows of the step after (k3::warpRingLoop).
  Value steps = k.ceilDiv(len, k.idx(kSumRows));
  // (The last wait names the last of these groups: a token only orders a
  // wait.)
  Value group;
  for (int64_t s = 0; s + 1 < stages; ++s)
    group = issue(k.idx(s), poolRows(k.idx(s)));
  constexpr int64_t accs = 2 * kTiles * 4;
  SmallVector<Value> init(accs, k.f32(0.0));
  llvm::append_range(init, poolRows(k.idx(stages - 1)));
  // The pool rows of step s + stages, loaded right after step s's copies
  // are issued (before the wait: off the mma's registers).
  SmallVector<Value> after;
  scf::ForOp loop = k3::warpRingLoop(
      b, loc, steps, init, stages,
      [&](Value ahead, ValueRange carried) {
        Value copies = issue(ahead, carried.drop_front(accs));
        after = poolRows(k.add(ahead, 1));
        return copies;
      },
      [&](Value s, ValueRange carried) {
        SmallVector<Value> next(carried.take_front(accs));
        Value stage = k.rem(s, stages), half = k.rem(s, 2);
        Value pv =
            vector::LoadOp::create(b, loc, VectorType::get({4}, b.getF32Type()),
                                   pring, ValueRange{k.warp, stage, k.lane, c0},
                                   /*nontemporal=*/false, llvm::MaybeAlign(16));
        for (int64_t mt = 0; mt < 2; ++mt) {
          auto el = [&](int64_t e) {
            return vector::ExtractOp::create(b, loc, pv,
                                             ArrayRef<int64_t>{2 * mt + e});
          };
          std::array<Value, kParts> w = k.parts(el(0), el(1));
          for (int64_t part = 0; part < kParts; ++part)
            memref::StoreOp::create(
                b, loc, w[part], shared,
                ValueRange{half, k.idx(mt), k.idx(part), k.lane, k.warp});
        }
        gpu::BarrierOp::create(b, loc);
        // The lane's cache rows 2t, 2t+1, 2t+8, 2t+9, columns 8g .. 8g+7.
        SmallVector<Value> cache;
        for (int64_t r : {0, 1, 8, 9}) {
          Value row = k.add(k.mul(k.t, 2), r);
          cache.push_back(vector::LoadOp::create(
              b, loc, VectorType::get({8}, b.getBF16Type()), cring,
              ValueRange{k.warp, stage, row, swizzled(row, k.mul(k.g, 8))},
              /*nontemporal=*/false, llvm::MaybeAlign(16)));
        }
        // B of tile q: column 8g + q of rows (2t, 2t+1) and (2t+8, 2t+9).
        auto pair = [&](Value x, Value y, int64_t q) {
          auto el = [&](Value v) {
            return vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{q});
          };
          return k.word(vector::FromElementsOp::create(
              b, loc, VectorType::get({2}, b.getBF16Type()),
              ValueRange{el(x), el(y)}));
        };
        SmallVector<std::array<Value, 2>> bt;
        for (int64_t q = 0; q < kTiles; ++q)
          bt.push_back(
              {pair(cache[0], cache[1], q), pair(cache[2], cache[3], q)});
        // a0 / a1: rows 2t, 2t+1 of heads g / g + 8; a2 / a3: rows 2t+8,
        // 2t+9.
        for (int64_t mt = 0; mt < 2; ++mt)
          for (int64_t part = 0; part < kParts; ++part) {
            Value words = vector::LoadOp::create(
                b, loc, VectorType::get({4}, b.getI32Type()), shared,
                ValueRange{half, k.idx(mt), k.idx(part), k.lane, c0},
                /*nontemporal=*/false, llvm::MaybeAlign(16));
            std::array<Value, 4> av;
            for (int64_t w = 0; w < 4; ++w)
              av[w] = vector::ExtractOp::create(b, loc, words,
                                                ArrayRef<int64_t>{w});
            for (int64_t q = 0; q < kTiles; ++q)
              k.mma(next, mt * kTiles + q, av, bt[q]);
          }
        llvm::append_range(next, after);
        return next;
      });
  // The copies issued past the last step land before the block exits.
  nvgpu::DeviceAsyncWaitOp::create(b, loc, group, b.getI32IntegerAttr(0));
  // Tile q's values are columns 8 (2t) + q and 8 (2t + 1) + q (d0, d1 and
  // d2, d3): value e of the 8 tiles is 8 consecutive columns of one head,
  // stored as two 16-byte pieces (scalar stores made one L2 write of 4 bytes
  // each, the kernel's most frequent L2 request).
  for (int64_t mt = 0; mt < 2; ++mt)
    for (int64_t e = 0; e < 4; ++e) {
      Value h = k.add(h0, k.add(k.g, 16 * mt + 8 * (e / 2)));
      Value col = k.add(col0, k.mul(k.add(k.mul(k.t, 2), e % 2), 8));
      auto store = scf::IfOp::create(b, loc, k.both(active, k.lt(h, heads)),
                                     /*withElse=*/false);
      OpBuilder::InsertionGuard inner(b);
      b.setInsertionPoint(store.thenBlock()->getTerminator());
      for (int64_t q0 = 0; q0 < kTiles; q0 += 4) {
        SmallVector<Value> v;
        for (int64_t q = q0; q < q0 + 4; ++q)
          v.push_back(loop.getResult(4 * (mt * kTiles + q) + e));
        Value piece = vector::FromElementsOp::create(
            b, loc, VectorType::get({4}, b.getF32Type()), v);
        vector::StoreOp::create(b, loc, piece, partial,
                                ValueRange{i, h, slice, k.add(col, q0)},
                                /*nontemporal=*/false, llvm::MaybeAlign(16));
      }
    }
  gpu::TerminatorOp::create(b, loc);
}

struct K3GPUMLAMMAPass : k3::impl::K3GPUMLAMMAPassBase<K3GPUMLAMMAPass> {
  using Base::Base;

  void runOnOperation() override {
    for (auto [name, value, most] :
         {std::tuple<StringRef, int64_t, int64_t>{"score-stages", scoreStages,
                                                  kMaxScoreStages},
          {"sum-stages", sumStages, kMaxSumStages}})
      if (value < 2 || value > most) {
        getOperation().emitError()
            << "k3-gpu-mla-mma: " << name << " must be in [2, " << most
            << "], got " << value;
        return signalPassFailure();
      }
    for (StringRef attr : {kScores, kSums})
      for (func::FuncOp f : k3::markedFunctions(getOperation(), attr))
        if (failed(rewrite(f, attr == kScores)))
          return signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp f, bool scores) {
    Block &body = f.getBody().front();
    auto type = [&](unsigned a) {
      return a < body.getNumArguments() ? body.getArgument(a).getType()
                                        : Type();
    };
    auto memref = [&](unsigned a, int64_t rank, Type elt) {
      auto m = dyn_cast_or_null<MemRefType>(type(a));
      return m && m.getRank() == rank && m.getLayout().isIdentity() &&
             (!elt || m.getElementType() == elt);
    };
    Builder b(f.getContext());
    Type f32 = b.getF32Type(), index = b.getIndexType();
    bool cache =
        memref(1, 2, Type()) && memref(2, 2, index) && memref(3, 1, index);
    if (scores && !(body.getNumArguments() == 6 && memref(0, 3, f32) && cache &&
                    memref(4, 3, f32) && type(5) == f32))
      return f.emitError() << kScores
                           << ": expected (qt [T, W, HP] f32, pool [rows, W], "
                              "rows [T, CAP] index, ntk [T] index, p [T, NH, "
                              "CAP] f32, scale f32)";
    if (!scores && !(body.getNumArguments() == 5 && memref(0, 3, f32) &&
                     cache && memref(4, 4, f32)))
      return f.emitError() << kSums
                           << ": expected (p [T, NH, CAP] f32, pool [rows, W], "
                              "rows [T, CAP] index, ntk [T] index, partial [T, "
                              "NH, S, R] f32)";
    // A bf16 cache only (an f32 library keeps its CUDA-core kernels); PTX
    // ISA: mma.sync with .bf16 operands and cvt.rn.bf16x2.f32 need sm_80.
    if (!cast<MemRefType>(type(1)).getElementType().isBF16() || sm < 80)
      return success();
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder builder(f.getContext());
    builder.setInsertionPointToStart(&body);
    if (scores) {
      buildScores(
          builder, f.getLoc(), body, rest,
          k3::workgroupBuffer(
              getOperation(),
              "k3k_mla_scores_ring" + std::to_string(scoreStages),
              {scoreStages, kScoreRows * kScoreWarps + kParts * 32, 32}));
      return success();
    }
    // The rings' names carry the stage count: one global per shape.
    std::string stages = std::to_string(sumStages);
    buildSums(
        builder, f.getLoc(), body, rest,
        k3::workgroupBuffer(getOperation(), "k3k_mla_wsum_cache" + stages,
                            {kSumWarps, sumStages, kSumRows, kSumColumns}),
        k3::workgroupBuffer(getOperation(), "k3k_mla_wsum_p" + stages,
                            {kSumWarps, sumStages, 32, 4}, f32),
        k3::workgroupBuffer(getOperation(), "k3k_mla_wsum_split",
                            {2, 2, kParts, 32, 4}, b.getI32Type()));
    return success();
  }
};
} // namespace
