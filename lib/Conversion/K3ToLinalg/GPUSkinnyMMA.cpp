//===- GPUSkinnyMMA.cpp - few-token products on tensor cores --------------===//
//
// A decode step multiplies 1 to 15 tokens by each weight matrix: the bytes
// of W are the whole cost, and on CUDA cores a batch of 8 tokens is 8 FMAs
// per weight element (k3k_matmul_tok8: bound by instruction issue,
// BENCHMARKS.md seventh session). A function marked
// `k3.skinny_matmul = {out = @o}` (Kernels/Dense.mlir: @k3k_matmul_few,
// @k3k_linear_few), with arguments x [T, K] and W [N, K] (bf16) and the
// output [T, N], gets here a second body for T <= 16 on the tensor cores.
//
// A block of 4 warps owns 16 rows of W and splits K between its warps in
// chunks of 128 elements, interleaved (warp w takes chunks w, w + 4, ...),
// so that the block streams 1 KB of each row at a time. Each warp copies its
// chunks into its own ring of 3 stages in workgroup memory with cp.async
// (each instruction 2 whole 256-byte row pieces; two stages in flight while
// it computes the third), then reads the mma.sync m16n8k16 A fragments
// from there and the tokens (one or two n8 tiles, B) from global memory.
// The 16-byte pieces of odd rows are stored with bit 2 of their index
// flipped (piece c at c ^ 4), so that the fragment reads of a quarter warp
// (rows g, g + 1, 64 bytes each) meet no bank twice. At the end the warps'
// sums go through the ring and each output is `o` of the 4 warps' parts
// added in warp order.
//
// Narrow outputs (K3: the routers' 896, MLA kv_a's 576, b_proj's 96) would
// leave most of the GPU idle with one block per 16 rows, so K is also split
// into S slices of whole chunks, S by N and K only (at most kTargetBlocks
// blocks, at least one chunk per warp of a slice): block (r, s) sums slice
// s of rows r as above and stores the sums in a workspace; the last block
// of r to finish (a counter per row block in device memory, fences before
// and after it, reset by that block for the next launch) adds the slices'
// sums in slice order and stores `o` of them. One kernel, no second pass.
//
// Several matrices against the same x (k3-group-calls' `<few>_x<m>`:
// (x, W_1 .. W_m, out_1 .. out_m)) are one launch: the grid is the
// matrices' blocks one after the other, each matrix split as it would be
// alone (the same sums), and a block selects its W, output, workspace and
// counters. A decode step's projections of one input then run as one
// kernel of several waves instead of several of one wave or less (H200,
// twenty-first session: batch-1 kernels 2.506 -> 2.410 ms). The outputs
// may differ in element type (`out` one function per matrix: a MoE layer's
// f32 router logits beside its bf16 projections); a block then stores
// through a switch on its matrix.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16", .bf16):
// lane = 4 g + t; a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1],
// a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g],
// b1 = B[2t+8, 2t+9][g]; d0, d1 = D[g][2t, 2t+1], d2, d3 = D[g+8][2t, 2t+1].
// The k order of each 32-element step is permuted alike in A and B so that
// lane t's operands are elements 8t..8t+7 of its rows (one 16-byte read
// each): mma 0 takes (8t, 8t+1) as k = (2t, 2t+1) and (8t+2, 8t+3) as
// (2t+8, 2t+9), mma 1 (8t+4, 8t+5) and (8t+6, 8t+7).
//
// Numerics (docs/NUMERICS.md): bf16 x bf16 products are exact in f32; the
// tensor cores add them 16 at a time in their own order, a warp's steps in
// k order, the warps in order. The split depends on K only and a token's
// sums on its own column only, so a sequence's outputs are the same
// whatever the other tokens of the step (decode batch == one call per
// sequence, bit for bit).
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
#include "mlir/IR/SymbolTable.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUSKINNYMMAPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
// 16 rows x 128 elements per stage (256 bytes of each row: 4 KB), 3 stages
// per warp, 4 warps: 48 KB of workgroup memory per block, the static limit
// (H200, session 9: 64-element chunks, 8 warps or 4 stages measured slower).
constexpr int64_t kRows = 16, kWarps = 4, kChunk = 128, kStages = 3;
// Rows of a chunk that one copy instruction (32 lanes x 16 bytes) covers.
constexpr int64_t kRowsPerCopy = 256 / kChunk;
static_assert(kChunk >= 64 && kChunk <= 256, "whole rows per copy, 8 rows "
                                             "of 64 for the warps' sums");
static_assert(8 % kWarps == 0, "each warp adds whole entries");
constexpr int64_t kMaxTokens = 16; // two n8 tiles
// Split over K: the most blocks to aim for (one wave: 4 of 48 KB per SM of
// an H200; a second, partial wave measured slower), and the row blocks that
// have a counter (N <= 64K; N / 16 > kTargetBlocks / 2 is not split).
constexpr int64_t kTargetBlocks = 528, kCounters = 4096;
static_assert(kTargetBlocks <= kCounters, "a split product has counters");
constexpr llvm::StringLiteral kAttr = "k3.skinny_matmul";

class SkinnyKernel : k3::IndexMath {
public:
  /// The products of x by `ws` into `outs` (one launch for all).
  SkinnyKernel(OpBuilder &b, Location loc, Value x, ValueRange ws,
               ValueRange outs, ArrayRef<func::FuncOp> outFns,
               memref::GlobalOp ringGlobal, memref::GlobalOp countGlobal)
      : IndexMath{b, loc}, x(x), ws(ws), outs(outs), outFns(outFns),
        ringGlobal(ringGlobal), countGlobal(countGlobal) {}

  void build(SmallVectorImpl<Operation *> &rest);

private:
  /// `n` values of `type` from `m` at `indices` as `as` (a bitcast).
  Value read(Value m, ValueRange indices, Type type, int64_t n,
             VectorType as) {
    Value v = vector::LoadOp::create(b, loc, VectorType::get({n}, type), m,
                                     indices, /*nontemporal=*/false,
                                     llvm::MaybeAlign(std::min<int64_t>(
                                         16, n * type.getIntOrFloatBitWidth() /
                                                 8)));
    return vector::BitCastOp::create(b, loc, as, v);
  }
  SmallVector<Value> split(Value v, int64_t n) {
    SmallVector<Value> r;
    for (int64_t j = 0; j < n; ++j)
      r.push_back(vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{j}));
    return r;
  }
  /// Copies local chunk `i` of this warp (zeros past its last) into its
  /// stage, as one cp.async group (its token).
  Value issue(Value i);
  /// The mma of local chunk `i` (stage i % 3) for `tiles` n8 tiles.
  SmallVector<Value> compute(Value i, int64_t tiles, ValueRange acc);
  /// The k loop for `tiles` n8 tiles: 8 sums per lane (4 per tile, zero for
  /// an absent tile).
  SmallVector<Value> sums(int64_t tiles);

  /// Stores `o(sum)` at (tok, row) of this block's output: with outputs of
  /// one type and one `o`, the selected output; otherwise a switch on the
  /// block's matrix (an f32 router and bf16 projections in one launch).
  void store(OpBuilder &ob, Location l, Value sum, Value tok, Value row);
  /// S > 1: this block's sums go to the workspace; the last block of the
  /// row block adds them (see top). `entries` are (sum, token, row).
  void combine(ArrayRef<std::array<Value, 3>> entries, Value tokens);

  /// Whether every output has one type and one `o`.
  bool alike() const {
    return llvm::all_of(llvm::zip(outs, outFns), [&](auto o) {
      return std::get<0>(o).getType() == outs[0].getType() &&
             std::get<1>(o) == outFns[0];
    });
  }

  Value x;
  SmallVector<Value> ws, outs;
  SmallVector<func::FuncOp> outFns;
  memref::GlobalOp ringGlobal, countGlobal;
  // This block's matrix (one of ws; its index), output (if the outputs are
  // alike), workspace and counter.
  Value w, matrix, out, partial, counter;
  Value ring, warp, lane, g, t, rowBase, tok0, tok1, mine;
  Value slices, slice, chunk0;
  Value copyRow, copyPiece;
};

Value SkinnyKernel::issue(Value i) {
  Value valid = cmp(arith::CmpIPredicate::ult, i, mine);
  Value j = arith::SelectOp::create(b, loc, valid, add(warp, mul(i, kWarps)),
                                    idx(0));
  Value n = arith::SelectOp::create(b, loc, valid, idx(8), idx(0));
  Value stage = rem(i, kStages);
  Value col = add(mul(add(chunk0, j), kChunk), mul(copyPiece, 8));
  SmallVector<Value> tokens;
  for (int64_t q = 0; q < kRows / kRowsPerCopy; ++q) {
    Value r = add(copyRow, kRowsPerCopy * q);
    Value swapped = mul(
        arith::XOrIOp::create(b, loc, copyPiece, mul(rem(r, 2), 4)), 8);
    tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
        b, loc, ring, ValueRange{warp, stage, r, swapped}, w,
        ValueRange{add(rowBase, r), col}, b.getIndexAttr(8), n,
        b.getUnitAttr()));
  }
  return nvgpu::DeviceAsyncCreateGroupOp::create(
      b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), tokens);
}

SmallVector<Value> SkinnyKernel::compute(Value i, int64_t tiles,
                                         ValueRange acc) {
  auto bf16 = b.getBF16Type();
  auto i32x4 = VectorType::get({4}, b.getI32Type());
  Value stage = rem(i, kStages);
  Value k0 = mul(add(chunk0, add(warp, mul(i, kWarps))), kChunk);
  Value parity = mul(rem(g, 2), 4);
  SmallVector<Value> next(acc);
  for (int64_t s = 0; s < kChunk / 32; ++s) {
    // Row g's and row g + 8's elements 32 s + 8 t .. + 7 of the chunk (the
    // same parity, so the same swap), and the tokens' at the same k.
    Value piece = mul(arith::XOrIOp::create(b, loc, add(t, 4 * s), parity), 8);
    SmallVector<Value> r0 = split(
        read(ring, {warp, stage, g, piece}, bf16, 8, i32x4), 4);
    SmallVector<Value> r1 = split(
        read(ring, {warp, stage, add(g, 8), piece}, bf16, 8, i32x4), 4);
    Value k = add(add(k0, 32 * s), mul(t, 8));
    for (int64_t tile = 0; tile < tiles; ++tile) {
      SmallVector<Value> xt =
          split(read(x, {tile ? tok1 : tok0, k}, bf16, 8, i32x4), 4);
      for (int64_t h = 0; h < 2; ++h) {
        std::array<Value, 4> a = {r0[2 * h], r1[2 * h], r0[2 * h + 1],
                                  r1[2 * h + 1]};
        std::array<Value, 2> bx = {xt[2 * h], xt[2 * h + 1]};
        llvm::copy(k3::mmaSyncBF16(b, loc, a, bx,
                                   ValueRange(next).slice(4 * tile, 4)),
                   next.begin() + 4 * tile);
      }
    }
  }
  return next;
}

SmallVector<Value> SkinnyKernel::sums(int64_t tiles) {
  Value zero =
      arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  SmallVector<Value> acc(4 * tiles, zero);
  scf::ForOp loop = k3::warpRingLoop(
      b, loc, mine, acc, kStages, [&](Value i, ValueRange) { return issue(i); },
      [&](Value i, ValueRange in) { return compute(i, tiles, in); });
  SmallVector<Value> r(loop.getResults());
  r.resize(8, zero);
  return r;
}

void SkinnyKernel::build(SmallVectorImpl<Operation *> &rest) {
  Value c1 = idx(1);
  Value tokens = memref::DimOp::create(b, loc, x, 0);
  Value depth = memref::DimOp::create(b, loc, x, 1);
  Value ok = rem0(depth, kChunk);
  ok = both(ok, cmp(arith::CmpIPredicate::uge, tokens, c1));
  ok = both(ok, cmp(arith::CmpIPredicate::ule, tokens, idx(kMaxTokens)));
  ok = both(ok, aligned(x));
  SmallVector<Value> rows;
  for (Value m : ws) {
    rows.push_back(memref::DimOp::create(b, loc, m, 0));
    ok = both(ok, both(rem0(rows.back(), kRows), aligned(m)));
    ok = both(ok, cmp(arith::CmpIPredicate::eq,
                      memref::DimOp::create(b, loc, m, 1), depth));
  }
  // Per matrix i: S_i = kTargetBlocks / row blocks (one wave of its own),
  // at most chunks / 4, at least 1, so that its sums are the same alone or
  // with the others; its blocks follow those of matrices 0 .. i - 1 in
  // the grid, and a split one's counters those of the split ones before.
  Value chunks = div(depth, kChunk);
  // Per matrix: row blocks, S, first block, first counter, workspace.
  SmallVector<std::array<Value, 5>> mats;
  Value blocks = idx(0), counters = idx(0);
  for (Value n : rows) {
    Value rowBlocks = div(n, kRows);
    Value s = arith::MaxUIOp::create(
        b, loc,
        min(div(idx(kTargetBlocks),
                arith::MaxUIOp::create(b, loc, rowBlocks, c1)),
            div(chunks, kWarps)),
        c1);
    mats.push_back({rowBlocks, s, blocks, counters, Value()});
    blocks = add(blocks, mul(rowBlocks, s));
    counters = add(counters, pick(cmp(arith::CmpIPredicate::ugt, s, c1),
                                  rowBlocks, idx(0)));
  }
  ok = both(ok, cmp(arith::CmpIPredicate::ule, counters, idx(kCounters)));
  k3::guardBody(b, loc, rest, ok);
  // The slices' sums [S, T, N] (empty without a split).
  for (auto [mat, n] : llvm::zip(mats, rows))
    mat[4] = k3::sliceBuffer(b, loc, cmp(arith::CmpIPredicate::ugt, mat[1], c1),
                             mat[1], tokens, n);
  auto launch = gpu::LaunchOp::create(b, loc, blocks, c1, c1,
                                      idx(kWarps * 32), c1, c1);
  launch->setAttr("k3.mma_shape", b.getDenseI64ArrayAttr({16, 8, 16}));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  // This block's matrix: the last whose first block is at or before it.
  Value block = launch.getBlockIds().x;
  w = ws[0];
  matrix = idx(0);
  out = outs[0];
  Value rowBlocks = mats[0][0], first = mats[0][2];
  slices = mats[0][1];
  counter = mats[0][3];
  partial = mats[0][4];
  for (size_t i = 1; i < mats.size(); ++i) {
    Value here = cmp(arith::CmpIPredicate::uge, block, mats[i][2]);
    w = pick(here, ws[i], w);
    matrix = pick(here, idx(i), matrix);
    if (alike())
      out = pick(here, outs[i], out);
    rowBlocks = pick(here, mats[i][0], rowBlocks);
    slices = pick(here, mats[i][1], slices);
    first = pick(here, mats[i][2], first);
    counter = pick(here, mats[i][3], counter);
    partial = pick(here, mats[i][4], partial);
  }
  // Its blocks: row block fastest, then slice.
  Value local = sub(block, first);
  Value rowBlock = rem(local, rowBlocks);
  slice = div(local, rowBlocks);
  counter = add(counter, rowBlock);
  ring = memref::GetGlobalOp::create(b, loc, ringGlobal.getType(),
                                     ringGlobal.getSymName());
  Value tid = launch.getThreadIds().x;
  warp = div(tid, 32);
  lane = rem(tid, 32);
  g = div(lane, 4);
  t = rem(lane, 4);
  rowBase = mul(rowBlock, kRows);
  // Token columns g and g + 8 (past T: token T - 1, not stored).
  Value last = arith::SubIOp::create(b, loc, tokens, c1);
  tok0 = arith::MinUIOp::create(b, loc, g, last);
  tok1 = arith::MinUIOp::create(b, loc, add(g, 8), last);
  // Slice s: chunks [s C / S, (s + 1) C / S) of the C = K / 128; warp w
  // takes its chunks w, w + 4, ...
  chunk0 = div(mul(slice, chunks), slices);
  Value sliceChunks = sub(div(mul(add(slice, 1), chunks), slices), chunk0);
  mine = div(sub(add(sliceChunks, kWarps - 1), warp), kWarps);
  // Copies: lane l takes 16 bytes (piece l % P, P pieces per row) of rows
  // l / P + (32 / P) q.
  copyRow = div(lane, kChunk / 8);
  copyPiece = rem(lane, kChunk / 8);
  Value group;
  for (int64_t i = 0; i < kStages - 1; ++i)
    group = issue(idx(i));
  // One n8 tile of tokens for T <= 8, two above; a token's column is the
  // same mma either way.
  auto f32 = b.getF32Type();
  auto tileIf = scf::IfOp::create(
      b, loc, SmallVector<Type>(8, f32),
      cmp(arith::CmpIPredicate::ule, tokens, idx(8)), /*withElse=*/true);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(tileIf.thenBlock());
    scf::YieldOp::create(b, loc, sums(1));
    b.setInsertionPointToStart(tileIf.elseBlock());
    scf::YieldOp::create(b, loc, sums(2));
  }
  // (cp.async.wait_group 0: the token only orders the op.)
  nvgpu::DeviceAsyncWaitOp::create(b, loc, group, b.getI32IntegerAttr(0));
  gpu::BarrierOp::create(b, loc);
  // Each warp's 8 sums per lane through stage 0 of its ring (16 bf16 of row
  // lane / 4 per lane), then warp w adds entries w, w + kWarps, ... of the
  // warps in warp order.
  auto bf16x16 = VectorType::get({16}, b.getBF16Type());
  Value mineOut = vector::FromElementsOp::create(
      b, loc, VectorType::get({8}, f32), tileIf.getResults());
  vector::StoreOp::create(
      b, loc, vector::BitCastOp::create(b, loc, bf16x16, mineOut), ring,
      ValueRange{warp, idx(0), div(lane, 4), mul(rem(lane, 4), 16)},
      /*nontemporal=*/false, llvm::MaybeAlign(16));
  gpu::BarrierOp::create(b, loc);
  auto f32x1 = VectorType::get({1}, f32);
  SmallVector<std::array<Value, 3>> entries;
  Value one = cmp(arith::CmpIPredicate::eq, slices, c1);
  for (int64_t e0 = 0; e0 < 8; e0 += kWarps) {
    Value e = add(warp, e0);
    Value slot = add(mul(rem(lane, 4), 16), mul(e, 2));
    Value sum;
    for (int64_t v = 0; v < kWarps; ++v) {
      Value part = vector::ExtractOp::create(
          b, loc,
          read(ring, {idx(v), idx(0), div(lane, 4), slot}, b.getBF16Type(), 2,
               f32x1),
          ArrayRef<int64_t>{0});
      sum = v ? arith::AddFOp::create(b, loc, sum, part).getResult() : part;
    }
    // Entry e: token 2 t + 8 (e / 4) + e % 2 (tile e / 4), row g (+ 8 for
    // e % 4 >= 2).
    Value tok = add(add(mul(t, 2), mul(div(e, 4), 8)), rem(e, 2));
    Value row = add(add(rowBase, g), mul(div(rem(e, 4), 2), 8));
    entries.push_back({sum, tok, row});
    // S == 1: the output; else this slice's sum, for the last block.
    scf::IfOp::create(
        b, loc, cmp(arith::CmpIPredicate::ult, tok, tokens),
        [&](OpBuilder &tb, Location l) {
          scf::IfOp::create(
              tb, l, one,
              [&](OpBuilder &ob, Location ol) {
                store(ob, ol, sum, tok, row);
                scf::YieldOp::create(ob, ol);
              },
              [&](OpBuilder &pb, Location pl) {
                memref::StoreOp::create(pb, pl, sum, partial,
                                        ValueRange{slice, tok, row});
                scf::YieldOp::create(pb, pl);
              });
          scf::YieldOp::create(tb, l);
        });
  }
  combine(entries, tokens);
  gpu::TerminatorOp::create(b, loc);
}

void SkinnyKernel::store(OpBuilder &ob, Location l, Value sum, Value tok,
                         Value row) {
  if (alike()) {
    Value r = func::CallOp::create(ob, l, outFns[0], sum).getResult(0);
    memref::StoreOp::create(ob, l, r, out, ValueRange{tok, row});
    return;
  }
  SmallVector<int64_t> cases = llvm::to_vector(llvm::seq<int64_t>(outs.size()));
  auto which = scf::IndexSwitchOp::create(ob, l, TypeRange{}, matrix, cases,
                                          cases.size());
  auto fill = [&](Region &region, size_t i) {
    OpBuilder cb = OpBuilder::atBlockBegin(&region.emplaceBlock());
    if (i < outs.size()) {
      Value r = func::CallOp::create(cb, l, outFns[i], sum).getResult(0);
      memref::StoreOp::create(cb, l, r, outs[i], ValueRange{tok, row});
    }
    scf::YieldOp::create(cb, l);
  };
  for (size_t i = 0; i < cases.size(); ++i)
    fill(which.getCaseRegions()[i], i);
  fill(which.getDefaultRegion(), outs.size());
}

void SkinnyKernel::combine(ArrayRef<std::array<Value, 3>> entries,
                           Value tokens) {
  Value c1 = idx(1);
  auto split = scf::IfOp::create(
      b, loc, cmp(arith::CmpIPredicate::ugt, slices, c1), /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(split.thenBlock()->getTerminator());
  auto first = [&] {
    return cmp(arith::CmpIPredicate::eq, add(mul(warp, 32), lane), idx(0));
  };
  SmallVector<Value> flagAt(4, idx(0));
  // The verdict goes through the ring, whose reads are done.
  k3::finishSplitTile(b, loc, countGlobal, counter, slices, first, ring,
                      flagAt, [&] {
    for (const std::array<Value, 3> &e : entries) {
      Value tok = e[1], row = e[2];
      scf::IfOp::create(
          b, loc, cmp(arith::CmpIPredicate::ult, tok, tokens),
          [&](OpBuilder &tb, Location) {
            OpBuilder::InsertionGuard inner(b);
            b.setInsertionPoint(tb.getInsertionBlock(), tb.getInsertionPoint());
            // Slices added in slice order, from slice 0's sum.
            Value s0 = memref::LoadOp::create(b, loc, partial,
                                              ValueRange{idx(0), tok, row});
            Value total =
                k3::addSlices(b, loc, partial, c1, slices, s0, tok, row);
            store(b, loc, total, tok, row);
            scf::YieldOp::create(b, loc);
          });
    }
  });
}

struct K3GPUSkinnyMMAPass
    : k3::impl::K3GPUSkinnyMMAPassBase<K3GPUSkinnyMMAPass> {
  using Base::Base;

  void runOnOperation() override {
    for (func::FuncOp f : k3::markedFunctions(getOperation(), kAttr))
      if (failed(rewrite(f)))
        return signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp f) {
    FailureOr<SmallVector<func::FuncOp>> outFns =
        k3::productOutFunctions(f, kAttr);
    if (failed(outFns))
      return failure();
    Block &body = f.getBody().front();
    auto x = cast<MemRefType>(body.getArgument(0).getType());
    // bf16 activations only (an f32 library keeps its CUDA-core kernels);
    // PTX ISA: mma.sync with .bf16 operands needs sm_80.
    if (!x.getElementType().isBF16() || sm < 80)
      return success();
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder builder(f.getContext());
    builder.setInsertionPointToStart(&body);
    unsigned m = body.getNumArguments() / 2;
    SkinnyKernel(builder, f.getLoc(), body.getArgument(0),
                 body.getArguments().slice(1, m),
                 body.getArguments().slice(1 + m, m), *outFns,
                 // The warps' cp.async rings, one workgroup buffer per block.
                 k3::workgroupBuffer(getOperation(), "k3k_skinny_ring",
                                     {kWarps, kStages, kRows, kChunk}),
                 // The split products' counters, one per row block.
                 k3::deviceCounters(getOperation(), "k3k_skinny_count",
                                    kCounters))
        .build(rest);
    return success();
  }
};
} // namespace
