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
// Every block reads its slice of the tokens' x for each 16 rows of W, T /
// 16 of W's bytes again (through L2: about half at T = 8, BENCHMARKS.md
// thirty-seventh session). With `m-tiles=2`, from 4 tokens, a matrix not
// split over K (S = 1, N % 32 == 0) has blocks of 32 rows: a warp's two m16
// tiles take each B fragment of x once, and the ring's stages are the two
// 64-element halves of each chunk (rows of 128 bytes, the same swap of bit
// 2), so the workgroup memory and the bytes in flight per warp stay. The
// chunks, their order, the warps' order and S are those of 16-row blocks,
// so the sums are the same bits; split matrices keep 16 rows (their blocks
// are few). The block picks its body by its matrix. Slower on the H100
// (batch-8 products 1.573 -> 1.671 ms per step, BENCHMARKS.md forty-second
// session), so m-tiles=1 is the default.
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
// With the key `addend` (`{out = @o, addend}`, arguments (x, W, r [T, N],
// out)) each output is o(sum, r[t, n]): the MoE's round(round(R) + Sh)
// (Kernels/Dense.mlir @k3k_linear_add_few) made as R is stored, without
// the add's own kernel.
//
// With `combine_norm` as well (Kernels/MoE.mlir @k3k_latent_up_add_few:
// arguments y [T, k, D], ω [T, k], γ, eps, W_up, Sh, out) x is the latent
// RMSNorm of the experts' weighted sum (K3_SPEC §6.2), which was a kernel
// of its own (k3-gpu-attn-res-norm, a block of 1024 threads per token)
// before the product's. Now the launch's first 8 T blocks are those 32
// warps per token: each thread makes its pieces of r = round(Σ_s ω_s y_s)
// and stores them, each warp its sum of squares, and each block counts
// itself in a device counter. The product's blocks issue their first two
// stages of W, wait for the count, take each token's 1 / rms from its 32
// sums with the norm kernel's tree and normalise r as they read it into
// the B fragments: the norm kernel's terms, trees and element operations,
// so the same bits. The wait relies on blocks being dispatched in index
// order (the producers come first, so a waiting block never holds an SM a
// producer needs); the last product block resets the counts for the next
// launch. H200, per batch-1 step of K3's 4 MoE layers: 0.088 ms of three
// kernels (sum and norm, W_up, the add) -> 0.078 in one (BENCHMARKS.md,
// thirtieth session).
//
// With `attn_res` (k3-group-calls' few-token call of an AttnRes with its
// norm and the products of its output, K3_SPEC §3.1-3.2: arguments x's
// buffer, the W, the outputs, ..., then the blocks, the last candidate or
// the residual sum's terms a and b, γ, p, eps, the norm's γ and eps, and
// the sum's buffer) x is RMSNorm(AttnRes), which was a kernel of its own
// (k3-gpu-attn-res-norm, a block of 1024 threads per token) before the
// products'. The launch's first 8 T blocks are that block's 32 warps per
// token, each thread with its one 16-byte piece of the row (D <= 8192; the
// generic body otherwise): the residual sum round(a + b) stored, then per
// candidate the sums of v² and (γ ⊙ p)·v, each warp's tree stored [T, 2n,
// 32] and the block counted (count 2); once all 8 T have counted, every
// warp takes the trees over the 32 warps' sums (the AttnRes kernel's
// tree), the scores into its ring, the softmax, its piece of h = round(Σ_i
// α_i v_i) and its warp's sum of squares, then count 0; once all have
// counted, each thread normalises its piece with the token's 1 / rms (the
// norm kernel's tree over the 32 sums) into x's buffer, then count 3, which
// the product blocks wait for before they read x as it is (normalising it
// as they read it, as `combine_norm` does, every block redoing the whole
// row, made the fused KDA projections 11 us slower per layer than the two
// kernels: H100, BENCHMARKS.md fortieth session). The same terms,
// trees and order as the AttnRes kernel's, so the same bits. The 8 T
// producers wait for each other: they are the grid's first blocks (at most
// 128), so all of them are resident before any product block is.
//
// With `route` on one matrix (Kernels/MoE.mlir @k3k_router_route_few: the
// router's f32 scores, then the routing's bias, renorm, scaling, idx, wts,
// order and rank after the outputs) the launch also selects each token's
// experts (K3_SPEC §6.1), which was a kernel of its own (k3-gpu-route): T
// blocks placed right after the router's own blocks wait for a device
// counter that each router block adds to once its scores are stored
// (fence, barrier, atomic, as the producers above; two launches of the
// kernel never overlap: it writes its module's globals, which
// k3-gpu-kernel-access tells the runtime), then each selects one token's
// experts with its 128 threads, 8 experts a thread, as k3-gpu-route's
// block does with 1024 (RouteSelect.cpp: the same winners, sums and
// scaling, so the same bits). They are dispatched after every router block
// (index order), so their wait ends. Each counts itself once its experts
// are stored; the last groups the step's (token, slot) entries by expert
// for the experts' kernels, as @k3k_group_by_expert_into (a kernel of its
// own before), and resets the counts.
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

#include "RouteSelect.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/SymbolTable.h"

#include <cmath>

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
static_assert(kChunk >= 64 && kChunk <= 256, "whole rows per copy, 8 rows "
                                             "of 64 for the warps' sums");
static_assert(8 % kWarps == 0, "each warp adds whole entries");
constexpr int64_t kMaxTokens = 16; // two n8 tiles
// m-tiles=2: the fewest tokens for blocks of 32 rows. A 16-row block reads
// T / 16 of its W bytes again in x (through L2: at T = 8 half as much,
// Nsight Compute, BENCHMARKS.md thirty-seventh session); below 4 tokens
// that is small, and 32-row blocks halve the blocks in flight.
constexpr int64_t kTwoTilesFrom = 4;
// Split over K: the most blocks to aim for (one wave: 4 of 48 KB per SM of
// an H200; a second, partial wave measured slower), and the row blocks that
// have a counter (N <= 64K; N / 16 > kTargetBlocks / 2 is not split).
constexpr int64_t kTargetBlocks = 528, kCounters = 4096;
static_assert(kTargetBlocks <= kCounters, "a split product has counters");
constexpr llvm::StringLiteral kAttr = "k3.skinny_matmul";
// `combine_norm`: the blocks that make one token's weighted sum and its
// warps' sums of squares, as the 32 warps of k3-gpu-attn-res-norm's block
// of 1024 threads (8 blocks of 4 warps: the same terms, trees and order).
constexpr int64_t kNormThreads = 1024, kProducers = kNormThreads / (kWarps * 32);
constexpr int64_t kPer = 8; // bf16 elements per 16-byte piece
// Entries whose y a producer thread loads together (64 registers; 8
// against 4: the fused kernel 0.089 -> 0.085 ms per B=8 step, H200).
constexpr int64_t kSlotsAhead = 8;
// `attn_res`: the candidates whose scores a producer block keeps (as f32 in
// row 0 of its ring; K3: at most 9).
constexpr int64_t kMaxCandidates = 32;
static_assert(2 * kMaxCandidates <= kChunk, "the scores fit a ring row");

/// `combine_norm`'s operands: the experts' y [T, k, D] f32 and weights ω
/// [T, k], γ [D], eps, and the library's conversions.
struct CombineNorm {
  Value ys, wts, gamma, eps;
  k3::Conversions fns;
};

/// `attn_res`: the AttnRes operands (K3_SPEC §3.1: the blocks [n - 1, T, D],
/// the last candidate [1, T, D] or, `residual`, the terms a and b of the
/// sum round(a + b) that is the last candidate and is stored in `sum`; γ
/// [D], p [1, D], eps). Its norm's γ and eps are the CombineNorm's.
struct AttnRes {
  Value blocks, last, a, b, sum, gamma, p, eps;
};

/// `route`: the matrix whose output is the router's scores, the routing's
/// operands (ops.scores is that output) and the grouping's outputs.
struct Route {
  unsigned matrix;
  k3::RouteOperands ops;
  Value order, rank;
};
// `route`: experts per thread of a routing block (E <= 128 · 8).
constexpr int64_t kRoutePer = 8;
constexpr int64_t kMaxSlots = 32; // one weight per lane of a warp

/// Every count of `ready` (the norm's or the route's) to 0, for the next
/// launch; ends the region `b` builds in.
void resetCounts(OpBuilder &b, Location loc, Value ready) {
  Value zero = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0);
  for (int64_t i = 0; i < cast<MemRefType>(ready.getType()).getDimSize(0);
       ++i)
    memref::StoreOp::create(
        b, loc, zero, ready,
        ValueRange{arith::ConstantIndexOp::create(b, loc, i)});
  scf::YieldOp::create(b, loc);
}

class SkinnyKernel : k3::IndexMath {
public:
  /// The products of x by `ws` into `outs` (one launch for all); with an
  /// `addend` r (one matrix), each output is o(sum, r[t, n]).
  /// With `norm` (x null) x is RMSNorm(Σ_s ω_s y_s; γ), made by the
  /// launch's first blocks (see top); with `attnRes` as well (x its
  /// buffer) x is RMSNorm(AttnRes(...); γ).
  /// With `route`, the routing's blocks follow its matrix's (see top).
  /// `normGlobal`: the norm's counts (2, or 3 with attnRes); `readyGlobal`:
  /// the route's two.
  SkinnyKernel(OpBuilder &b, Location loc, int64_t maxTiles, int64_t prefetchL2,
               Value x, ValueRange ws, ValueRange outs,
               ArrayRef<func::FuncOp> outFns, Value addend,
               memref::GlobalOp ringGlobal, memref::GlobalOp countGlobal,
               std::optional<CombineNorm> norm = std::nullopt,
               memref::GlobalOp normGlobal = {},
               std::optional<Route> route = std::nullopt,
               memref::GlobalOp readyGlobal = {},
               std::optional<AttnRes> attnRes = std::nullopt)
      : IndexMath{b, loc}, maxTiles(maxTiles), prefetchL2(prefetchL2), x(x),
        ws(ws), outs(outs), outFns(outFns), addend(addend),
        ringGlobal(ringGlobal), countGlobal(countGlobal), norm(norm),
        normGlobal(normGlobal), readyGlobal(readyGlobal), route(route),
        attnRes(attnRes) {}

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
  /// `prefetch-l2`: thread r < rows() asks L2 for the next `prefetchL2`
  /// bytes of row r of the block's slice past the chunks the ring's first
  /// stages copy (one cp.async.bulk.prefetch.L2).
  void prefetchRows(Value tid);
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

  /// o(sum) of output i, or o(sum, r[tok, row]) with an addend.
  Value outValue(OpBuilder &ob, Location l, size_t i, Value sum, Value tok,
                 Value row) {
    SmallVector<Value> args = {sum};
    if (addend)
      args.push_back(
          memref::LoadOp::create(ob, l, addend, ValueRange{tok, row}));
    return func::CallOp::create(ob, l, outFns[i], args).getResult(0);
  }

  /// combine_norm, producer block `part` of `token`: the thread's pieces
  /// of r = round(Σ_s ω_s y_s) into x, its warp's sum of squares into
  /// `squares`, then the count of finished producers.
  void produce(Value token, Value part, Value tid, Value depth);
  /// attn_res, producer block `part` of `token`: as thread 128 part + tid
  /// of k3-gpu-attn-res-norm's block, its candidates' sums of squares and
  /// projections (the residual sum first), the warps' sums exchanged
  /// through `candidates` and count 2 of `normGlobal`; then the scores,
  /// the softmax and its piece of h into x, its warp's sum of squares of h
  /// into `squares`, and count 0.
  void produceAttnRes(Value token, Value part, Value tid, Value depth);
  /// combine_norm, a product block: waits for the producers of `tokens`
  /// tokens, then each token's 1 / rms from its 32 warp sums (the norm
  /// kernel's tree), through the ring; sets inv0, inv1.
  void awaitNorm(Value tid, Value tokens, Value depth);
  /// combine_norm: the 8 normalised elements k .. k + 7 of token `tok`,
  /// round(round(r · inv) · γ) (the norm kernel's element operations), as
  /// the mma's 4 bf16 pairs.
  SmallVector<Value> normalised(Value tok, Value inv, Value k);
  /// Thread 0 reads count `at` of `counts` until it is `need` (i32);
  /// then a barrier and a fence, so the block sees what was counted.
  void waitFor(Value tid, Value need, memref::GlobalOp counts, int64_t at = 0);
  /// Count 1 of `counts` for this block, one of the `waiters` blocks that
  /// wait; the last resets every count for the next launch.
  void finishWaiters(Value tid, Value waiters, memref::GlobalOp counts);
  /// Adds the block's 1 to count `at` of `counts` once its stores are
  /// visible on the GPU.
  void countDone(Value tid, memref::GlobalOp counts, int64_t at = 0);
  /// route: token `token`'s experts and weights, once the `need` router
  /// blocks are done; the last routing block groups the entries.
  void routeBlock(Value token, Value tid, Value need, Value tokens);
  /// route: @k3k_group_by_expert_into's order and rank of the T · k
  /// entries, entry q by thread q % 128.
  void groupByExpert(Value tid, Value tokens, Value slots);

  /// The products' part of a block (after the producers and routing):
  /// the W stages, the waits for the producers, the k loop for `tiles` m
  /// tiles, 8 maxTiles sums per lane (zeros for an absent tile).
  SmallVector<Value> products(int64_t tiles, Value tid, Value tokens,
                              Value producers, Value depth);

  // `m-tiles`: at most maxTiles m16 tiles of W per warp; mTiles, those of
  // the body being built: a block's rows are 16 mTiles, a stage kChunk /
  // mTiles elements of each (see top).
  int64_t maxTiles, mTiles = 1;
  int64_t prefetchL2;
  int64_t rows() const { return kRows * mTiles; }
  int64_t stageColumns() const { return kChunk / mTiles; }
  Value x;
  SmallVector<Value> ws, outs;
  SmallVector<func::FuncOp> outFns;
  Value addend;
  memref::GlobalOp ringGlobal, countGlobal;
  std::optional<CombineNorm> norm;
  memref::GlobalOp normGlobal, readyGlobal;
  std::optional<Route> route;
  std::optional<AttnRes> attnRes;
  Value squares, candidates, inv0, inv1;
  // This block's matrix (one of ws; its index), output (if the outputs are
  // alike), workspace and counter.
  Value w, matrix, out, partial, counter;
  // ring: the workgroup buffer [warps, stages, 16, kChunk]; stages: its
  // view [warps, stages, rows(), stageColumns()] for W.
  Value ring, stages, warp, lane, g, t, rowBase, tok0, tok1, mine;
  Value slices, slice, chunk0, sliceChunks;
  Value copyRow, copyPiece;
};

Value SkinnyKernel::issue(Value i) {
  // Stage i: part i % mTiles of local chunk i / mTiles.
  Value local = div(i, mTiles);
  Value valid = cmp(arith::CmpIPredicate::ult, local, mine);
  Value j = arith::SelectOp::create(b, loc, valid,
                                    add(warp, mul(local, kWarps)), idx(0));
  Value n = arith::SelectOp::create(b, loc, valid, idx(8), idx(0));
  Value stage = rem(i, kStages);
  Value col =
      add(add(mul(add(chunk0, j), kChunk), mul(rem(i, mTiles), stageColumns())),
          mul(copyPiece, 8));
  SmallVector<Value> tokens;
  const int64_t rowsPerCopy = 32 * 8 / stageColumns();
  for (int64_t q = 0; q < rows() / rowsPerCopy; ++q) {
    Value r = add(copyRow, rowsPerCopy * q);
    Value swapped = mul(
        arith::XOrIOp::create(b, loc, copyPiece, mul(rem(r, 2), 4)), 8);
    tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
        b, loc, stages, ValueRange{warp, stage, r, swapped}, w,
        ValueRange{add(rowBase, r), col}, b.getIndexAttr(8), n,
        b.getUnitAttr()));
  }
  return nvgpu::DeviceAsyncCreateGroupOp::create(
      b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), tokens);
}

void SkinnyKernel::prefetchRows(Value tid) {
  // The ring's first stages hold each warp's first local chunks: the
  // slice's first `issued` chunks.
  const int64_t issued = kWarps * llvm::divideCeil(kStages - 1, mTiles);
  Value rest = sub(sliceChunks, idx(issued));
  Value go = both(cmp(arith::CmpIPredicate::slt, tid, idx(rows())),
                  cmp(arith::CmpIPredicate::sgt, rest, idx(0)));
  scf::IfOp::create(b, loc, go, [&](OpBuilder &tb, Location) {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPoint(tb.getInsertionBlock(), tb.getInsertionPoint());
    // W's rows are contiguous (x and W 16-byte aligned, K % 128 == 0: the
    // body's condition), so a row's next bytes are one range.
    Value row = add(rowBase, tid);
    Value column = mul(add(chunk0, idx(issued)), kChunk);
    Value bytes =
        arith::MinSIOp::create(b, loc, mul(rest, 2 * kChunk), idx(prefetchL2));
    k3::prefetchL2(b, loc, w, {row, column}, bytes);
    scf::YieldOp::create(b, loc);
  });
}

SmallVector<Value> SkinnyKernel::compute(Value i, int64_t tiles,
                                         ValueRange acc) {
  auto bf16 = b.getBF16Type();
  auto i32x4 = VectorType::get({4}, b.getI32Type());
  Value stage = rem(i, kStages);
  Value k0 =
      add(mul(add(chunk0, add(warp, mul(div(i, mTiles), kWarps))), kChunk),
          mul(rem(i, mTiles), stageColumns()));
  Value parity = mul(rem(g, 2), 4);
  SmallVector<Value> next(acc);
  for (int64_t s = 0; s < stageColumns() / 32; ++s) {
    // Row g's and row g + 8's elements 32 s + 8 t .. + 7 of the stage (the
    // same parity, so the same swap) in each m tile, and the tokens' at
    // the same k, read once for all m tiles.
    Value piece = mul(arith::XOrIOp::create(b, loc, add(t, 4 * s), parity), 8);
    SmallVector<SmallVector<Value>> r0, r1;
    for (int64_t m = 0; m < mTiles; ++m) {
      r0.push_back(split(
          read(stages, {warp, stage, add(g, 16 * m), piece}, bf16, 8, i32x4),
          4));
      r1.push_back(split(read(stages, {warp, stage, add(g, 16 * m + 8), piece},
                              bf16, 8, i32x4),
                         4));
    }
    Value k = add(add(k0, 32 * s), mul(t, 8));
    for (int64_t tile = 0; tile < tiles; ++tile) {
      SmallVector<Value> xt =
          norm && !attnRes
              ? normalised(tile ? tok1 : tok0, tile ? inv1 : inv0, k)
              : split(read(x, {tile ? tok1 : tok0, k}, bf16, 8, i32x4), 4);
      for (int64_t m = 0; m < mTiles; ++m)
        for (int64_t h = 0; h < 2; ++h) {
          std::array<Value, 4> a = {r0[m][2 * h], r1[m][2 * h],
                                    r0[m][2 * h + 1], r1[m][2 * h + 1]};
          std::array<Value, 2> bx = {xt[2 * h], xt[2 * h + 1]};
          int64_t at = 4 * (2 * m + tile);
          llvm::copy(
              k3::mmaSyncBF16(b, loc, a, bx, ValueRange(next).slice(at, 4)),
              next.begin() + at);
        }
    }
  }
  return next;
}

SmallVector<Value> SkinnyKernel::sums(int64_t tiles) {
  Value zero =
      arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  // m tile m, n tile q at 4 (2 m + q) (zeros for an absent n tile).
  SmallVector<Value> acc(8 * mTiles, zero);
  scf::ForOp loop = k3::warpRingLoop(
      b, loc, mul(mine, mTiles), acc, kStages,
      [&](Value i, ValueRange) { return issue(i); },
      [&](Value i, ValueRange in) { return compute(i, tiles, in); });
  return SmallVector<Value>(loop.getResults());
}

SmallVector<Value> SkinnyKernel::products(int64_t tiles, Value tid,
                                          Value tokens, Value producers,
                                          Value depth) {
  mTiles = tiles;
  // W's stages: the ring as [warps, stages, rows(), stageColumns()].
  stages = ring;
  if (mTiles > 1) {
    auto type = cast<MemRefType>(ring.getType());
    SmallVector<int64_t> shape = {kWarps, kStages, rows(), stageColumns()};
    SmallVector<OpFoldResult> sizes, strides;
    for (int64_t d = 0, stride = 1; d < 4; ++d) {
      sizes.push_back(b.getIndexAttr(shape[d]));
      strides.insert(strides.begin(), b.getIndexAttr(stride));
      stride *= shape[3 - d];
    }
    stages = memref::ReinterpretCastOp::create(
        b, loc,
        MemRefType::get(shape, type.getElementType(),
                        MemRefLayoutAttrInterface(), type.getMemorySpace()),
        ring, b.getIndexAttr(0), sizes, strides);
  }
  // Copies: lane l takes 16 bytes (piece l % P, P pieces per row) of rows
  // l / P + (32 / P) q.
  copyRow = div(lane, stageColumns() / 8);
  copyPiece = rem(lane, stageColumns() / 8);
  Value group;
  for (int64_t i = 0; i < kStages - 1; ++i)
    group = issue(idx(i));
  if (prefetchL2)
    prefetchRows(tid);
  // combine_norm: the first stages of W are on their way while the
  // producers finish.
  if (attnRes)
    waitFor(tid, arith::IndexCastOp::create(b, loc, b.getI32Type(), producers),
            normGlobal, 3);
  else if (norm)
    awaitNorm(tid, tokens, depth);
  // One n8 tile of tokens for T <= 8, two above; a token's column is the
  // same mma either way.
  auto f32 = b.getF32Type();
  auto tileIf = scf::IfOp::create(
      b, loc, SmallVector<Type>(8 * mTiles, f32),
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
  SmallVector<Value> r(tileIf.getResults());
  r.resize(8 * maxTiles,
           arith::ConstantFloatOp::create(b, loc, f32, APFloat(0.0f)));
  return r;
}

void SkinnyKernel::build(SmallVectorImpl<Operation *> &rest) {
  Value c1 = idx(1);
  auto dim = [&](Value m, int64_t i) {
    return memref::DimOp::create(b, loc, m, i).getResult();
  };
  // attn_res: T and D of the last candidate (or its terms) [1, T, D].
  Value lastTerm = attnRes ? (attnRes->a ? attnRes->a : attnRes->last) : x;
  Value tokens = attnRes ? dim(lastTerm, 1) : dim(norm ? norm->ys : x, 0);
  Value depth = attnRes  ? dim(lastTerm, 2)
                : norm   ? dim(norm->ys, 2)
                         : dim(x, 1);
  Value ok = rem0(depth, kChunk);
  ok = both(ok, cmp(arith::CmpIPredicate::uge, tokens, c1));
  ok = both(ok, cmp(arith::CmpIPredicate::ule, tokens, idx(kMaxTokens)));
  Value candidateCount;
  if (attnRes) {
    // Every 16-byte piece of a row has a producer thread; the candidates'
    // shapes, x's buffer [T, D], γ, p [1, D] and the norm's γ; the
    // scores fit.
    const AttnRes &r = *attnRes;
    candidateCount = add(dim(r.blocks, 0), c1);
    ok = both(ok, cmp(arith::CmpIPredicate::ule, depth,
                      idx(kNormThreads * kPer)));
    ok = both(ok, cmp(arith::CmpIPredicate::ule, candidateCount,
                      idx(kMaxCandidates)));
    ok = both(ok, both(eq(dim(r.blocks, 1), tokens), eq(dim(r.blocks, 2), depth)));
    SmallVector<Value> terms = {lastTerm};
    if (r.a)
      terms.append({r.b, r.sum});
    for (Value m : terms) {
      ok = both(ok, both(eq(dim(m, 0), c1), aligned(m)));
      ok = both(ok, both(eq(dim(m, 1), tokens), eq(dim(m, 2), depth)));
    }
    ok = both(ok, both(aligned(r.blocks), aligned(x)));
    ok = both(ok, both(eq(dim(x, 0), tokens), eq(dim(x, 1), depth)));
    ok = both(ok, both(eq(dim(r.p, 0), c1), eq(dim(r.p, 1), depth)));
    for (Value m : {r.gamma, r.p, norm->gamma})
      ok = both(ok, aligned(m));
    for (Value m : {r.gamma, norm->gamma})
      ok = both(ok, eq(dim(m, 0), depth));
  } else if (norm) {
    // y's pieces of 8 f32 (32 bytes) and γ's of 8 bf16; ω [T, k] as y.
    ok = both(ok, both(aligned(norm->ys, 32), aligned(norm->gamma)));
    for (int64_t i = 0; i < 2; ++i)
      ok = both(ok, cmp(arith::CmpIPredicate::eq,
                        memref::DimOp::create(b, loc, norm->wts, i),
                        memref::DimOp::create(b, loc, norm->ys, i)));
    ok = both(ok, cmp(arith::CmpIPredicate::eq,
                      memref::DimOp::create(b, loc, norm->gamma, 0), depth));
  } else {
    ok = both(ok, aligned(x));
  }
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
  // Per matrix: row blocks, S, first block, first counter, workspace,
  // whether its blocks have 32 rows.
  SmallVector<std::array<Value, 6>> mats;
  Value blocks = idx(0), counters = idx(0);
  // route: the router's blocks and the first routing block.
  Value routerBlocks, routeFirst;
  for (Value n : rows) {
    Value rowBlocks = div(n, kRows);
    Value s = arith::MaxUIOp::create(
        b, loc,
        min(div(idx(kTargetBlocks),
                arith::MaxUIOp::create(b, loc, rowBlocks, c1)),
            div(chunks, kWarps)),
        c1);
    // m-tiles=2: from kTwoTilesFrom tokens, a matrix not split over K
    // (wide: its blocks fill the GPU either way) with N % 32 == 0 has
    // blocks of 32 rows; S is the same.
    Value two = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 0);
    if (maxTiles > 1) {
      two = both(both(eq(s, c1), rem0(n, 2 * kRows)),
                 cmp(arith::CmpIPredicate::uge, tokens, idx(kTwoTilesFrom)));
      rowBlocks = pick(two, div(n, 2 * kRows), rowBlocks);
    }
    mats.push_back({rowBlocks, s, blocks, counters, Value(), two});
    blocks = add(blocks, mul(rowBlocks, s));
    if (route && mats.size() == route->matrix + 1) {
      routerBlocks = mul(rowBlocks, s);
      routeFirst = blocks;
      blocks = add(blocks, tokens);
    }
    counters = add(counters, pick(cmp(arith::CmpIPredicate::ugt, s, c1),
                                  rowBlocks, idx(0)));
  }
  ok = both(ok, cmp(arith::CmpIPredicate::ule, counters, idx(kCounters)));
  if (addend)
    ok = both(ok, both(cmp(arith::CmpIPredicate::eq,
                           memref::DimOp::create(b, loc, addend, 0), tokens),
                       cmp(arith::CmpIPredicate::eq,
                           memref::DimOp::create(b, loc, addend, 1),
                           rows.front())));
  // route: E = the router's rows <= 128 · 8; 1 <= k <= 32 and k <= E; the
  // bias [E] and the outputs [T, k].
  if (route) {
    const k3::RouteOperands &r = route->ops;
    Value experts = rows[route->matrix];
    Value slots = memref::DimOp::create(b, loc, r.idx, 1);
    ok = both(ok, both(lt(idx(0), slots), lt(slots, idx(kMaxSlots + 1))));
    ok = both(ok, both(cmp(arith::CmpIPredicate::ule, slots, experts),
                       lt(experts, idx(kWarps * 32 * kRoutePer + 1))));
    ok = both(ok, eq(memref::DimOp::create(b, loc, r.bias, 0), experts));
    ok = both(ok, eq(memref::DimOp::create(b, loc, r.idx, 0), tokens));
    ok = both(ok, eq(memref::DimOp::create(b, loc, r.wts, 0), tokens));
    ok = both(ok, eq(memref::DimOp::create(b, loc, r.wts, 1), slots));
    Value entries = mul(tokens, slots);
    ok = both(ok, eq(memref::DimOp::create(b, loc, route->order, 0), entries));
    ok = both(ok, eq(memref::DimOp::create(b, loc, route->rank, 0), entries));
  }
  k3::guardBody(b, loc, rest, ok);
  // The slices' sums [S, T, N] (empty without a split).
  for (auto [mat, n] : llvm::zip(mats, rows))
    mat[4] = k3::sliceBuffer(b, loc, cmp(arith::CmpIPredicate::ugt, mat[1], c1),
                             mat[1], tokens, n);
  // combine_norm: r [T, D] and the warps' sums of squares [T, 32] in the
  // workspace; the producers' blocks before the products'.
  Value producers = idx(0);
  if (norm) {
    auto outType = cast<MemRefType>(outs[0].getType());
    if (!attnRes)
      x = memref::AllocOp::create(
          b, loc,
          MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic},
                          outType.getElementType()),
          ValueRange{tokens, depth});
    else
      // The warps' sums of squares and projections per candidate [T, 2n,
      // 32], as k3-gpu-attn-res-norm's rows 2i and 2i + 1.
      candidates = memref::AllocOp::create(
          b, loc,
          MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic,
                           kNormThreads / 32},
                          b.getF32Type()),
          ValueRange{tokens, mul(candidateCount, 2)});
    squares = memref::AllocOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic, kNormThreads / 32},
                                b.getF32Type()),
        ValueRange{tokens});
    producers = mul(tokens, kProducers);
  }
  auto launch = gpu::LaunchOp::create(b, loc, add(producers, blocks), c1, c1,
                                      idx(kWarps * 32), c1, c1);
  launch->setAttr("k3.mma_shape", b.getDenseI64ArrayAttr({16, 8, 16}));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  Value block = launch.getBlockIds().x;
  scf::IfOp producing;
  if (norm) {
    // Blocks dispatch in order, so the producers run before or beside
    // every block that waits for them.
    producing = scf::IfOp::create(b, loc,
                                  cmp(arith::CmpIPredicate::ult, block,
                                      producers),
                                  /*withElse=*/true);
    b.setInsertionPointToStart(producing.thenBlock());
    if (attnRes)
      produceAttnRes(div(block, kProducers), rem(block, kProducers),
                     launch.getThreadIds().x, depth);
    else
      produce(div(block, kProducers), rem(block, kProducers),
              launch.getThreadIds().x, depth);
    b.setInsertionPointToStart(producing.elseBlock());
    block = sub(block, producers);
  }
  // route: T blocks after the router's select the experts.
  scf::IfOp routing;
  if (route) {
    routing = scf::IfOp::create(
        b, loc,
        both(cmp(arith::CmpIPredicate::uge, block, routeFirst),
             lt(block, add(routeFirst, tokens))),
        /*withElse=*/true);
    b.setInsertionPointToStart(routing.thenBlock());
    routeBlock(sub(block, routeFirst), launch.getThreadIds().x,
               arith::IndexCastOp::create(b, loc, b.getI32Type(),
                                          routerBlocks),
               tokens);
    b.setInsertionPointToStart(routing.elseBlock());
  }
  // This block's matrix: the last whose first block is at or before it.
  w = ws[0];
  matrix = idx(0);
  out = outs[0];
  Value rowBlocks = mats[0][0], first = mats[0][2];
  slices = mats[0][1];
  counter = mats[0][3];
  partial = mats[0][4];
  Value two = mats[0][5];
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
    two = pick(here, mats[i][5], two);
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
  rowBase = mul(rowBlock, maxTiles > 1 ? pick(two, idx(2 * kRows), idx(kRows))
                                       : idx(kRows));
  // Token columns g and g + 8 (past T: token T - 1, not stored).
  Value last = arith::SubIOp::create(b, loc, tokens, c1);
  tok0 = arith::MinUIOp::create(b, loc, g, last);
  tok1 = arith::MinUIOp::create(b, loc, add(g, 8), last);
  // Slice s: chunks [s C / S, (s + 1) C / S) of the C = K / 128; warp w
  // takes its chunks w, w + 4, ...
  chunk0 = div(mul(slice, chunks), slices);
  sliceChunks = sub(div(mul(add(slice, 1), chunks), slices), chunk0);
  mine = div(sub(add(sliceChunks, kWarps - 1), warp), kWarps);
  SmallVector<Value> parts;
  if (maxTiles == 1) {
    parts = products(1, tid, tokens, producers, depth);
  } else {
    auto tilesIf = scf::IfOp::create(
        b, loc, SmallVector<Type>(8 * maxTiles, b.getF32Type()), two,
        /*withElse=*/true);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(tilesIf.thenBlock());
    scf::YieldOp::create(b, loc, products(2, tid, tokens, producers, depth));
    b.setInsertionPointToStart(tilesIf.elseBlock());
    scf::YieldOp::create(b, loc, products(1, tid, tokens, producers, depth));
    parts = tilesIf.getResults();
  }
  gpu::BarrierOp::create(b, loc);
  // Each warp's 8 sums per lane and m tile m through stage 0 of its ring
  // (16 bf16 of row lane / 4 + 8 m per lane), then warp w adds entries w,
  // w + kWarps, ... of each m tile of the warps in warp order.
  auto f32 = b.getF32Type();
  auto bf16x16 = VectorType::get({16}, b.getBF16Type());
  for (int64_t m = 0; m < maxTiles; ++m) {
    Value mineOut = vector::FromElementsOp::create(
        b, loc, VectorType::get({8}, f32), ArrayRef(parts).slice(8 * m, 8));
    vector::StoreOp::create(
        b, loc, vector::BitCastOp::create(b, loc, bf16x16, mineOut), ring,
        ValueRange{warp, idx(0), add(div(lane, 4), 8 * m),
                   mul(rem(lane, 4), 16)},
        /*nontemporal=*/false, llvm::MaybeAlign(16));
  }
  gpu::BarrierOp::create(b, loc);
  auto f32x1 = VectorType::get({1}, f32);
  SmallVector<std::array<Value, 3>> entries;
  Value one = cmp(arith::CmpIPredicate::eq, slices, c1);
  for (int64_t e0 = 0; e0 < 8 * maxTiles; e0 += kWarps) {
    int64_t m = e0 / 8;
    Value e = add(warp, e0 % 8);
    Value slot = add(mul(rem(lane, 4), 16), mul(e, 2));
    Value sum;
    for (int64_t v = 0; v < kWarps; ++v) {
      Value part = vector::ExtractOp::create(
          b, loc,
          read(ring, {idx(v), idx(0), add(div(lane, 4), 8 * m), slot},
               b.getBF16Type(), 2, f32x1),
          ArrayRef<int64_t>{0});
      sum = v ? arith::AddFOp::create(b, loc, sum, part).getResult() : part;
    }
    // Entry e of m tile m: token 2 t + 8 (e / 4) + e % 2 (tile e / 4), row
    // 16 m + g (+ 8 for e % 4 >= 2).
    Value tok = add(add(mul(t, 2), mul(div(e, 4), 8)), rem(e, 2));
    Value row = add(add(add(rowBase, 16 * m), g), mul(div(rem(e, 4), 2), 8));
    // (A split block has one m tile.)
    if (m == 0)
      entries.push_back({sum, tok, row});
    // S == 1: the output; else this slice's sum, for the last block.
    Value valid = cmp(arith::CmpIPredicate::ult, tok, tokens);
    scf::IfOp::create(
        b, loc, m ? both(valid, two) : valid, [&](OpBuilder &tb, Location l) {
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
  if (route) {
    // A router block's scores (its slice's, or all of a row block's in
    // the last slice's block) are stored: its count.
    scf::IfOp::create(b, loc, eq(matrix, idx(route->matrix)),
                      [&](OpBuilder &tb, Location) {
                        OpBuilder::InsertionGuard inner(b);
                        b.setInsertionPoint(tb.getInsertionBlock(),
                                            tb.getInsertionPoint());
                        countDone(tid, readyGlobal);
                        scf::YieldOp::create(b, loc);
                      });
    b.setInsertionPointAfter(routing);
  }
  // (Every block after the producers counts, routing blocks too.)
  if (norm) {
    finishWaiters(tid, blocks, normGlobal);
    b.setInsertionPointAfter(producing);
  }
  gpu::TerminatorOp::create(b, loc);
}

void SkinnyKernel::routeBlock(Value token, Value tid, Value need,
                              Value tokens) {
  waitFor(tid, need, readyGlobal);
  // The selection's pairs and scores in the ring (this block copies no
  // W): rows 0-3 of warp 0's first stage and row 0 of its second, each
  // i32 or f32 as two bf16.
  Value ringBuf = memref::GetGlobalOp::create(b, loc, ringGlobal.getType(),
                                              ringGlobal.getSymName());
  Type bf16 = b.getBF16Type();
  auto bf16x2 = VectorType::get({2}, bf16);
  auto put = [&](Value v, ValueRange at) {
    vector::StoreOp::create(
        b, loc,
        vector::BitCastOp::create(
            b, loc, bf16x2,
            vector::FromElementsOp::create(
                b, loc, VectorType::get({1}, v.getType()), v)),
        ringBuf, at, /*nontemporal=*/false, llvm::MaybeAlign(4));
  };
  auto get = [&](Type type, ValueRange at) -> Value {
    return vector::ExtractOp::create(
        b, loc, read(ringBuf, at, bf16, 2, VectorType::get({1}, type)),
        ArrayRef<int64_t>{0});
  };
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  k3::RouteScratch scratch{
      [&](Value buf, int64_t field, Value warp, Value v) {
        put(v, {idx(0), idx(0), add(mul(buf, 2), field), mul(warp, 2)});
      },
      [&](Value buf, int64_t field, Value warp) {
        return get(i32, {idx(0), idx(0), add(mul(buf, 2), field),
                         mul(warp, 2)});
      },
      [&](Value slot, Value v) {
        put(v, {idx(0), idx(1), idx(0), mul(slot, 2)});
      },
      [&](Value slot) {
        return get(f32, {idx(0), idx(1), idx(0), mul(slot, 2)});
      }};
  Value experts = memref::DimOp::create(b, loc, route->ops.scores, 1);
  Value slots = memref::DimOp::create(b, loc, route->ops.idx, 1);
  k3::routeToken(*this, route->ops, scratch, token, tid, kWarps * 32,
                 kRoutePer, experts, slots);
  // The token's experts visible on the GPU, then the block's count; the
  // last block's thread 0 tells its block through the ring.
  NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
  gpu::BarrierOp::create(b, loc);
  Value ready = memref::GetGlobalOp::create(b, loc, readyGlobal.getType(),
                                            readyGlobal.getSymName());
  Value first = eq(tid, idx(0));
  SmallVector<Value> flagAt = {idx(0), idx(1), idx(1), idx(0)};
  scf::IfOp::create(b, loc, first, [&](OpBuilder &tb, Location) {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPoint(tb.getInsertionBlock(), tb.getInsertionPoint());
    Value before = memref::AtomicRMWOp::create(
        b, loc, arith::AtomicRMWKind::addi,
        arith::ConstantIntOp::create(b, loc, i32, 1), ready,
        ValueRange{idx(1)});
    Value last = eq(arith::IndexCastOp::create(b, loc, b.getIndexType(), before),
                    sub(tokens, idx(1)));
    put(arith::ExtUIOp::create(b, loc, i32, last), flagAt);
    scf::YieldOp::create(b, loc);
  });
  gpu::BarrierOp::create(b, loc);
  Value last = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                     get(i32, flagAt),
                                     arith::ConstantIntOp::create(b, loc, i32, 0));
  // Every routing block has counted (so every router block had): the
  // step's experts, read after the counts; then the counts to 0.
  scf::IfOp::create(b, loc, last, [&](OpBuilder &tb, Location) {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPoint(tb.getInsertionBlock(), tb.getInsertionPoint());
    NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
    groupByExpert(tid, tokens, slots);
    scf::IfOp::create(b, loc, first, [&](OpBuilder &zb, Location zl) {
      resetCounts(zb, zl, ready);
    });
    scf::YieldOp::create(b, loc);
  });
}

void SkinnyKernel::groupByExpert(Value tid, Value tokens, Value slots) {
  // Entry q = t · k + s goes to #{q' : e_q' < e_q, or e_q' = e_q and q' <
  // q}; rank is the second term. Integer counts (the generic kernel's f32
  // counts are exact below 2^24 entries: the same numbers).
  Value c1 = idx(1), zero = idx(0);
  Value entries = mul(tokens, slots);
  Type i64 = b.getI64Type();
  scf::ForOp::create(
      b, loc, tid, entries, idx(kWarps * 32), ValueRange{},
      [&](OpBuilder &fb, Location, Value q, ValueRange) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        Value eq64 = memref::LoadOp::create(
            b, loc, route->ops.idx, ValueRange{div(q, slots), rem(q, slots)});
        auto outer = scf::ForOp::create(
            b, loc, zero, tokens, c1, ValueRange{zero, zero},
            [&](OpBuilder &ob, Location, Value t, ValueRange acc) {
              OpBuilder::InsertionGuard keep(b);
              b.setInsertionPoint(ob.getInsertionBlock(), ob.getInsertionPoint());
              auto row = scf::ForOp::create(
                  b, loc, zero, slots, c1, acc,
                  [&](OpBuilder &ib, Location, Value s, ValueRange counts) {
                    OpBuilder::InsertionGuard keep2(b);
                    b.setInsertionPoint(ib.getInsertionBlock(),
                                        ib.getInsertionPoint());
                    Value v = memref::LoadOp::create(b, loc, route->ops.idx,
                                                     ValueRange{t, s});
                    Value lower = cmp(arith::CmpIPredicate::slt, v, eq64);
                    Value tie = both(
                        cmp(arith::CmpIPredicate::eq, v, eq64),
                        lt(add(mul(t, slots), s), q));
                    scf::YieldOp::create(
                        b, loc,
                        ValueRange{add(counts[0], pick(lower, c1, zero)),
                                   add(counts[1], pick(tie, c1, zero))});
                  });
              scf::YieldOp::create(b, loc, row.getResults());
            });
        Value below = outer.getResult(0), ties = outer.getResult(1);
        Value pos = add(below, ties);
        memref::StoreOp::create(b, loc,
                                arith::IndexCastOp::create(b, loc, i64, q),
                                route->order, ValueRange{pos});
        memref::StoreOp::create(b, loc,
                                arith::IndexCastOp::create(b, loc, i64, ties),
                                route->rank, ValueRange{pos});
        scf::YieldOp::create(b, loc);
      });
}

void SkinnyKernel::countDone(Value tid, memref::GlobalOp counts,
                             int64_t at) {
  // Every thread's stores visible on the GPU before the count.
  NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
  gpu::BarrierOp::create(b, loc);
  Value ready = memref::GetGlobalOp::create(b, loc, counts.getType(),
                                            counts.getSymName());
  scf::IfOp::create(b, loc, cmp(arith::CmpIPredicate::eq, tid, idx(0)),
                    [&](OpBuilder &tb, Location l) {
                      Value one =
                          arith::ConstantIntOp::create(tb, l, tb.getI32Type(), 1);
                      memref::AtomicRMWOp::create(tb, l,
                                                  arith::AtomicRMWKind::addi,
                                                  one, ready, ValueRange{idx(at)});
                      scf::YieldOp::create(tb, l);
                    });
}

void SkinnyKernel::produce(Value token, Value part, Value tid, Value depth) {
  auto f32 = b.getF32Type();
  Value zero = arith::ConstantFloatOp::create(b, loc, f32, APFloat(0.0f));
  // Thread v of the norm kernel's block: pieces 8 v, 8 v + 8192, ...
  Value v = add(mul(part, kWarps * 32), tid);
  auto pieces = scf::ForOp::create(
      b, loc, mul(v, kPer), depth, idx(kNormThreads * kPer), ValueRange{zero},
      [&](OpBuilder &fb, Location, Value j0, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        // r = round(Σ_s ω_s y_s) (@k3k_experts_combine), the loads of
        // kSlotsAhead entries together.
        SmallVector<Value> sum = k3::weightedSumPiece(
            *this, norm->ys, norm->wts, token, j0, kPer, kSlotsAhead);
        SmallVector<Value> r;
        Value ss = acc[0];
        for (Value total : sum) {
          r.push_back(call(norm->fns.narrow, total));
          Value a = call(norm->fns.widen, r.back());
          ss = arith::AddFOp::create(b, loc, ss,
                                     arith::MulFOp::create(b, loc, a, a));
        }
        Value vec = vector::FromElementsOp::create(
            b, loc, VectorType::get({kPer}, r.front().getType()), r);
        vector::StoreOp::create(b, loc, vec, x, ValueRange{token, j0},
                                /*nontemporal=*/false, llvm::MaybeAlign(16));
        scf::YieldOp::create(b, loc, ss);
      });
  // Its warp's sum (the norm kernel's warp tree) at [token, 4 part + warp].
  Value total = k3::warpSum(b, loc, pieces.getResult(0));
  Value lane = rem(tid, 32), warp = div(tid, 32);
  scf::IfOp::create(b, loc, cmp(arith::CmpIPredicate::eq, lane, idx(0)),
                    [&](OpBuilder &tb, Location l) {
                      memref::StoreOp::create(
                          tb, l, total, squares,
                          ValueRange{token, add(mul(part, kWarps), warp)});
                      scf::YieldOp::create(tb, l);
                    });
  countDone(tid, normGlobal);
}

void SkinnyKernel::produceAttnRes(Value token, Value part, Value tid,
                                  Value depth) {
  const AttnRes &r = *attnRes;
  const k3::Conversions &fns = norm->fns;
  FloatType f32 = b.getF32Type();
  Value c0 = idx(0), c1 = idx(1), zero = this->f32(0.0);
  auto widen = [&](Value v) { return call(fns.widen, v); };
  // Thread v of the AttnRes kernel's block: piece v (D <= 1024 pieces); a
  // thread without one reads piece 0 and adds zeros, as that block's.
  Value v = add(mul(part, kWarps * 32), tid);
  Value lane = rem(tid, 32), warpOfToken = add(mul(part, kWarps), div(tid, 32));
  Value j0 = mul(v, kPer), has = lt(j0, depth), j = pick(has, j0, c0);
  auto vectorOf = [&](ValueRange elems) {
    return vector::FromElementsOp::create(
               b, loc, VectorType::get({kPer}, elems.front().getType()), elems)
        .getResult();
  };
  auto storeIf = [&](Value cond, ValueRange elems, Value m, ValueRange at) {
    scf::IfOp::create(b, loc, cond, [&](OpBuilder &tb, Location l) {
      vector::StoreOp::create(tb, l, vectorOf(elems), m, at,
                              /*nontemporal=*/false, llvm::MaybeAlign(16));
      scf::YieldOp::create(tb, l);
    });
  };
  SmallVector<Value> gw = loadVector(r.gamma, {j}, kPer),
                     pw = loadVector(r.p, {c0, j}, kPer);
  // The last candidate: the residual sum round(a + b), stored, or read.
  SmallVector<Value> lastPiece;
  if (r.a) {
    SmallVector<Value> xa = loadVector(r.a, {c0, token, j}, kPer),
                       xb = loadVector(r.b, {c0, token, j}, kPer);
    for (int64_t e = 0; e < kPer; ++e)
      lastPiece.push_back(
          call(fns.narrow, fadd(widen(xa[e]), widen(xb[e]))));
    storeIf(has, lastPiece, r.sum, {c0, token, j});
  } else {
    lastPiece = loadVector(r.last, {c0, token, j}, kPer);
  }
  Value lastVec = vectorOf(lastPiece);
  Value blocks = memref::DimOp::create(b, loc, r.blocks, c0);
  Value n = add(blocks, c1);
  auto candidate = [&](Value i) {
    auto choice = scf::IfOp::create(b, loc, TypeRange{lastVec.getType()},
                                    lt(i, blocks), /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(choice.thenBlock());
    scf::YieldOp::create(
        b, loc, vectorOf(loadVector(r.blocks, {i, token, j}, kPer)));
    b.setInsertionPointToStart(choice.elseBlock());
    scf::YieldOp::create(b, loc, lastVec);
    return choice.getResult(0);
  };
  auto elements = [&](Value vec) {
    SmallVector<Value> e;
    for (int64_t k = 0; k < kPer; ++k)
      e.push_back(vector::ExtractOp::create(b, loc, vec, ArrayRef<int64_t>{k}));
    return e;
  };
  SmallVector<Value> gp;
  for (int64_t e = 0; e < kPer; ++e)
    gp.push_back(fmul(arith::ExtFOp::create(b, loc, f32, gw[e]),
                      arith::ExtFOp::create(b, loc, f32, pw[e])));
  // Each candidate's sums of v² and (γ ⊙ p)·v (the kernel's terms in its
  // order), the warps' trees stored at rows 2i, 2i + 1.
  scf::ForOp::create(
      b, loc, c0, n, c1, ValueRange{},
      [&](OpBuilder &fb, Location, Value i, ValueRange) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        Value ss = zero, dot = zero;
        for (auto [e, x] : llvm::enumerate(elements(candidate(i)))) {
          Value a = widen(x);
          ss = fadd(ss, fmul(a, a));
          dot = fadd(dot, fmul(gp[e], a));
        }
        Value sums[2] = {k3::warpSum(b, loc, pick(has, ss, zero)),
                         k3::warpSum(b, loc, pick(has, dot, zero))};
        scf::IfOp::create(b, loc, eq(lane, c0), [&](OpBuilder &tb, Location l) {
          for (int64_t k = 0; k < 2; ++k)
            memref::StoreOp::create(
                tb, l, sums[k], candidates,
                ValueRange{token, add(mul(i, 2), idx(k)), warpOfToken});
          scf::YieldOp::create(tb, l);
        });
        scf::YieldOp::create(b, loc);
      });
  countDone(tid, normGlobal, 2);
  Value need = arith::IndexCastOp::create(
      b, loc, b.getI32Type(),
      mul(memref::DimOp::create(b, loc, x, c0), kProducers));
  waitFor(tid, need, normGlobal, 2);
  // s_i = ((γ ⊙ p)·v_i) / sqrt(mean(v_i²) + eps): lane l takes warp l's
  // sums, the tree over them (in every lane), thread 0 keeps s_i in f32
  // at elements 2i, 2i + 1 of its ring's row 0.
  Value ring = memref::GetGlobalOp::create(b, loc, ringGlobal.getType(),
                                           ringGlobal.getSymName());
  Value df = arith::SIToFPOp::create(
      b, loc, f32, arith::IndexCastOp::create(b, loc, b.getI64Type(), depth));
  auto f32x1 = VectorType::get({1}, f32);
  auto bf16x2 = VectorType::get({2}, b.getBF16Type());
  auto scoreAt = [&](Value i) {
    return SmallVector<Value>{c0, c0, c0, mul(i, 2)};
  };
  scf::ForOp::create(
      b, loc, c0, n, c1, ValueRange{},
      [&](OpBuilder &fb, Location, Value i, ValueRange) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        Value t[2];
        for (int64_t k = 0; k < 2; ++k)
          t[k] = k3::warpSum(
              b, loc,
              memref::LoadOp::create(
                  b, loc, candidates,
                  ValueRange{token, add(mul(i, 2), idx(k)), lane}));
        Value score = fmul(t[1], k3::invRMS(*this, t[0], df, r.eps));
        scf::IfOp::create(b, loc, eq(tid, c0), [&](OpBuilder &tb, Location l) {
          vector::StoreOp::create(
              tb, l,
              vector::BitCastOp::create(
                  tb, l, bf16x2,
                  vector::FromElementsOp::create(tb, l, f32x1, score)),
              ring, scoreAt(i), /*nontemporal=*/false, llvm::MaybeAlign(4));
          scf::YieldOp::create(tb, l);
        });
        scf::YieldOp::create(b, loc);
      });
  gpu::BarrierOp::create(b, loc);
  auto score = [&](Value i) -> Value {
    return vector::ExtractOp::create(
        b, loc,
        vector::BitCastOp::create(
            b, loc, f32x1,
            vector::LoadOp::create(b, loc, bf16x2, ring, scoreAt(i),
                                   /*nontemporal=*/false,
                                   llvm::MaybeAlign(4))),
        ArrayRef<int64_t>{0});
  };
  // α = softmax(s) in every thread, as the kernel's: the maximum, the sum
  // of exp(s_i - max), then exp(s_i - max) / sum per candidate.
  auto overCandidates = [&](Value init,
                            function_ref<Value(Value, Value)> step) {
    return scf::ForOp::create(
               b, loc, c0, n, c1, ValueRange{init},
               [&](OpBuilder &fb, Location, Value i, ValueRange acc) {
                 OpBuilder::InsertionGuard inner(b);
                 b.setInsertionPoint(fb.getInsertionBlock(),
                                     fb.getInsertionPoint());
                 scf::YieldOp::create(b, loc, step(i, acc[0]));
               })
        .getResult(0);
  };
  Value mx = overCandidates(this->f32(-INFINITY), [&](Value i, Value m) {
    return arith::MaximumFOp::create(b, loc, score(i), m).getResult();
  });
  auto ex = [&](Value i) {
    return math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, score(i), mx))
        .getResult();
  };
  Value total =
      overCandidates(zero, [&](Value i, Value acc) { return fadd(acc, ex(i)); });
  // h = round(Σ_i α_i v_i) into x; its warp's sum of squares.
  SmallVector<Value> init(kPer, zero);
  auto mix = scf::ForOp::create(
      b, loc, c0, n, c1, init,
      [&](OpBuilder &fb, Location, Value i, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        Value alpha = fdiv(ex(i), total);
        SmallVector<Value> hs;
        for (auto [e, xv] : llvm::enumerate(elements(candidate(i))))
          hs.push_back(fadd(acc[e], fmul(alpha, widen(xv))));
        scf::YieldOp::create(b, loc, hs);
      });
  SmallVector<Value> hn;
  Value ss = zero;
  for (int64_t e = 0; e < kPer; ++e) {
    hn.push_back(call(fns.narrow, mix.getResult(e)));
    Value a = widen(hn.back());
    ss = fadd(ss, fmul(a, a));
  }
  Value warpSum = k3::warpSum(b, loc, pick(has, ss, zero));
  scf::IfOp::create(b, loc, eq(lane, c0), [&](OpBuilder &tb, Location l) {
    memref::StoreOp::create(tb, l, warpSum, squares,
                            ValueRange{token, warpOfToken});
    scf::YieldOp::create(tb, l);
  });
  countDone(tid, normGlobal);
  // Once every producer's sums are stored: the token's 1 / rms from its 32
  // warps' sums (the norm kernel's tree), y = round(round(h · inv) · γ) of
  // the piece into x, and count 3, which the product blocks wait for (so
  // that they read x as it is, not normalising it in every block).
  SmallVector<Value> gn = loadVector(norm->gamma, {j}, kPer);
  waitFor(tid, need, normGlobal, 0);
  Value inv = k3::invRMS(
      *this,
      k3::warpSum(b, loc,
                  memref::LoadOp::create(b, loc, squares,
                                         ValueRange{token, lane})),
      df, norm->eps);
  SmallVector<Value> y;
  for (int64_t e = 0; e < kPer; ++e)
    y.push_back(k3::rmsNormValue(*this, fns, hn[e], inv, gn[e]));
  storeIf(has, y, x, {token, j});
  countDone(tid, normGlobal, 3);
}

void SkinnyKernel::waitFor(Value tid, Value need, memref::GlobalOp counts,
                           int64_t at) {
  Type i32 = b.getI32Type();
  Value ready = memref::GetGlobalOp::create(b, loc, counts.getType(),
                                            counts.getSymName());
  // Thread 0 reads the count (ld.acquire at GPU scope) until every
  // block counted has added its 1, with a pause between reads.
  scf::IfOp::create(
      b, loc, cmp(arith::CmpIPredicate::eq, tid, idx(0)),
      [&](OpBuilder &tb, Location l) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(tb.getInsertionBlock(), tb.getInsertionPoint());
        Value address = arith::IndexCastOp::create(
            b, loc, b.getI64Type(),
            add(memref::ExtractAlignedPointerAsIndexOp::create(b, loc, ready),
                idx(4 * at)));
        auto wait = scf::WhileOp::create(b, loc, TypeRange{}, ValueRange{});
        b.createBlock(&wait.getBefore());
        Value count =
            LLVM::InlineAsmOp::create(
                b, loc, i32, ValueRange{address},
                "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l",
                /*has_side_effects=*/true, /*is_align_stack=*/false,
                LLVM::tailcallkind::TailCallKind::None,
                /*asm_dialect=*/LLVM::AsmDialectAttr(),
                /*operand_attrs=*/ArrayAttr())
                .getResult(0);
        scf::ConditionOp::create(
            b, loc,
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, count,
                                  need),
            ValueRange{});
        b.createBlock(&wait.getAfter());
        NVVM::NanosleepOp::create(
            b, loc, arith::ConstantIntOp::create(b, loc, i32, 32));
        scf::YieldOp::create(b, loc);
        b.setInsertionPointAfter(wait);
        scf::YieldOp::create(b, loc);
      });
  gpu::BarrierOp::create(b, loc);
  // (What was counted is read after the count, in every thread.)
  NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
}

void SkinnyKernel::awaitNorm(Value tid, Value tokens, Value depth) {
  FloatType f32 = b.getF32Type();
  waitFor(tid,
          arith::IndexCastOp::create(b, loc, b.getI32Type(),
                                     mul(tokens, kProducers)),
          normGlobal);
  // 1 / rms of each token as the norm kernel's block: lane l takes warp l's
  // sum, the tree over them, 1 / sqrt(ss / D + eps). Warp w takes tokens
  // w, w + 4, ... (their loads first) and keeps them in warp 0's ring's
  // third stage, which no copy fills before the k loop (token t at
  // elements 2t, 2t + 1 of row 0).
  auto f32x1 = VectorType::get({1}, f32);
  auto bf16x2 = VectorType::get({2}, b.getBF16Type());
  Value lane = rem(tid, 32), warpId = div(tid, 32);
  Value df = arith::SIToFPOp::create(
      b, loc, f32, arith::IndexCastOp::create(b, loc, b.getI64Type(), depth));
  Value lastToken = sub(tokens, idx(1));
  SmallVector<Value> mineTokens, parts;
  for (int64_t i = 0; i < kMaxTokens / kWarps; ++i) {
    Value t = add(warpId, idx(kWarps * i));
    mineTokens.push_back(t);
    parts.push_back(memref::LoadOp::create(
        b, loc, squares,
        ValueRange{arith::MinUIOp::create(b, loc, t, lastToken), lane}));
  }
  for (auto [t, part] : llvm::zip(mineTokens, parts)) {
    Value ss = k3::warpSum(b, loc, part);
    Value inv = k3::invRMS(*this, ss, df, norm->eps);
    Value store = arith::AndIOp::create(
        b, loc, cmp(arith::CmpIPredicate::eq, lane, idx(0)),
        cmp(arith::CmpIPredicate::ult, t, tokens));
    scf::IfOp::create(b, loc, store, [&](OpBuilder &sb, Location) {
      OpBuilder::InsertionGuard keep(b);
      b.setInsertionPoint(sb.getInsertionBlock(), sb.getInsertionPoint());
      vector::StoreOp::create(
          b, loc,
          vector::BitCastOp::create(
              b, loc, bf16x2,
              vector::FromElementsOp::create(b, loc, f32x1, inv)),
          ring, ValueRange{idx(0), idx(2), idx(0), mul(t, 2)},
          /*nontemporal=*/false, llvm::MaybeAlign(4));
      scf::YieldOp::create(b, loc);
    });
  }
  gpu::BarrierOp::create(b, loc);
  auto inv = [&](Value tok) {
    return vector::ExtractOp::create(
        b, loc,
        read(ring, {idx(0), idx(2), idx(0), mul(tok, 2)}, b.getBF16Type(), 2,
             f32x1),
        ArrayRef<int64_t>{0});
  };
  inv0 = inv(tok0);
  inv1 = inv(tok1);
  // Read by every warp before warp 0's copies reach its third stage.
  gpu::BarrierOp::create(b, loc);
}

SmallVector<Value> SkinnyKernel::normalised(Value tok, Value inv, Value k) {
  SmallVector<Value> r = loadVector(x, {tok, k}, kPer);
  SmallVector<Value> w = loadVector(norm->gamma, {k}, kPer);
  SmallVector<Value> y;
  for (int64_t e = 0; e < kPer; ++e)
    y.push_back(k3::rmsNormValue(*this, norm->fns, r[e], inv, w[e]));
  Value vec = vector::FromElementsOp::create(
      b, loc, VectorType::get({kPer}, y.front().getType()), y);
  return split(vector::BitCastOp::create(
                   b, loc, VectorType::get({4}, b.getI32Type()), vec),
               4);
}

void SkinnyKernel::finishWaiters(Value tid, Value waiters,
                                 memref::GlobalOp counts) {
  // (Thread 0 counts after its own wait, and every thread of the block is
  // past that wait's barrier, so the count alone would do; the block's
  // stores are done first here, as in the measured build.)
  gpu::BarrierOp::create(b, loc);
  Value ready = memref::GetGlobalOp::create(b, loc, counts.getType(),
                                            counts.getSymName());
  scf::IfOp::create(
      b, loc, cmp(arith::CmpIPredicate::eq, tid, idx(0)),
      [&](OpBuilder &tb, Location l) {
        Value one = arith::ConstantIntOp::create(tb, l, tb.getI32Type(), 1);
        Value before = memref::AtomicRMWOp::create(
            tb, l, arith::AtomicRMWKind::addi, one, ready,
            ValueRange{arith::ConstantIndexOp::create(tb, l, 1)});
        Value last = arith::IndexCastOp::create(
            tb, l, tb.getI32Type(),
            arith::SubIOp::create(tb, l, waiters,
                                  arith::ConstantIndexOp::create(tb, l, 1)));
        // Every waiting block has passed its wait: both counts to 0.
        scf::IfOp::create(
            tb, l,
            arith::CmpIOp::create(tb, l, arith::CmpIPredicate::eq, before,
                                  last),
            [&](OpBuilder &zb, Location zl) { resetCounts(zb, zl, ready); });
        scf::YieldOp::create(tb, l);
      });
}

void SkinnyKernel::store(OpBuilder &ob, Location l, Value sum, Value tok,
                         Value row) {
  if (alike()) {
    Value r = outValue(ob, l, 0, sum, tok, row);
    memref::StoreOp::create(ob, l, r, out, ValueRange{tok, row});
    return;
  }
  SmallVector<int64_t> cases = llvm::to_vector(llvm::seq<int64_t>(outs.size()));
  auto which = scf::IndexSwitchOp::create(ob, l, TypeRange{}, matrix, cases,
                                          cases.size());
  auto fill = [&](Region &region, size_t i) {
    OpBuilder cb = OpBuilder::atBlockBegin(&region.emplaceBlock());
    if (i < outs.size()) {
      Value r = outValue(cb, l, i, sum, tok, row);
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
    // A stage's rows of 128 / m-tiles elements: at least 64 for the swap of
    // bit 2 of the piece index (see top).
    if (mTiles != 1 && mTiles != 2) {
      getOperation().emitError()
          << "k3-gpu-skinny-mma: m-tiles must be 1 or 2, got "
          << static_cast<int64_t>(mTiles);
      return signalPassFailure();
    }
    // cp.async.bulk.prefetch.L2 (PTX ISA 8.0, sm_90): whole 16-byte
    // pieces; the pieces of a row the ring copies are 256 bytes.
    if (prefetchL2 < 0 || prefetchL2 > 65536 || prefetchL2 % (2 * kChunk)) {
      getOperation().emitError()
          << "k3-gpu-skinny-mma: prefetch-l2 must be a multiple of "
          << 2 * kChunk << " from 0 to 65536, got "
          << static_cast<int64_t>(prefetchL2);
      return signalPassFailure();
    }
    if (prefetchL2 && sm < 90) {
      getOperation().emitError()
          << "k3-gpu-skinny-mma: prefetch-l2 needs sm_90 "
             "(cp.async.bulk.prefetch), the library targets sm_"
          << static_cast<int64_t>(sm);
      return signalPassFailure();
    }
    for (func::FuncOp f : k3::markedFunctions(getOperation(), kAttr))
      if (failed(rewrite(f)))
        return signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp f) {
    auto spec = f->getAttrOfType<DictionaryAttr>(kAttr);
    if (spec && spec.get("combine_norm"))
      return rewriteCombineNorm(f, spec);
    FailureOr<SmallVector<func::FuncOp>> outFns =
        k3::productOutFunctions(f, kAttr);
    if (failed(outFns))
      return failure();
    unsigned matrices = spec.get("addend") ? 1 : outFns->size();
    if (spec.get("route") && failed(checkRoute(f, spec, matrices)))
      return failure();
    Block &body = f.getBody().front();
    auto x = cast<MemRefType>(body.getArgument(0).getType());
    std::optional<CombineNorm> norm;
    std::optional<AttnRes> attnRes;
    if (spec.get("attn_res") &&
        failed(readAttnRes(f, spec, x.getElementType(), norm, attnRes)))
      return failure();
    // bf16 activations only (an f32 library keeps its CUDA-core kernels);
    // PTX ISA: mma.sync with .bf16 operands needs sm_80.
    if (!x.getElementType().isBF16() || sm < 80)
      return success();
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder builder(f.getContext());
    builder.setInsertionPointToStart(&body);
    // (x, W_1 .. W_m, out_1 .. out_m), or (x, W, r, out) with an addend.
    bool withAddend = spec.get("addend") != nullptr;
    unsigned m = withAddend ? 1 : outFns->size();
    std::optional<Route> route;
    if (std::optional<unsigned> routed = k3::routedMatrix(spec)) {
      Value scores = body.getArgument(1 + m + *routed);
      route = Route{*routed,
                    {scores, body.getArgument(1 + 2 * m),
                     body.getArgument(2 + 2 * m), body.getArgument(3 + 2 * m),
                     body.getArgument(4 + 2 * m), body.getArgument(5 + 2 * m)},
                    body.getArgument(6 + 2 * m),
                    body.getArgument(7 + 2 * m)};
    }
    ModuleOp module = getOperation();
    SkinnyKernel(
        builder, f.getLoc(), mTiles, prefetchL2, body.getArgument(0),
        body.getArguments().slice(1, m),
        body.getArguments().slice(withAddend ? 3 : 1 + m, m), *outFns,
        withAddend ? body.getArgument(2) : Value(),
        // The warps' cp.async rings, one workgroup buffer per block.
        k3::workgroupBuffer(module, "k3k_skinny_ring",
                            {kWarps, kStages, kRows, kChunk}),
        // The split products' counters, one per row block.
        k3::deviceCounters(module, "k3k_skinny_count", kCounters), norm,
        // attn_res: the producers' counts (done, waiting blocks
        // done, candidates' sums stored).
        attnRes ? k3::deviceCounters(module, "k3k_skinny_attn_res_ready", 4)
                : memref::GlobalOp(),
        route,
        // The router blocks' count and the routing blocks'.
        route ? k3::deviceCounters(module, "k3k_skinny_route_ready", 2)
              : memref::GlobalOp(),
        attnRes)
        .build(rest);
    return success();
  }

  /// `attn_res = {widen, narrow, round, residual}`: the AttnRes operands
  /// after all others (k3-group-calls), with x's buffer for h.
  LogicalResult readAttnRes(func::FuncOp f, DictionaryAttr spec, Type act,
                            std::optional<CombineNorm> &norm,
                            std::optional<AttnRes> &attnRes) {
    auto fail = [&](const Twine &why) {
      return f.emitError() << kAttr << ": " << why, failure();
    };
    Block &body = f.getBody().front();
    auto fns = dyn_cast<DictionaryAttr>(spec.get("attn_res"));
    Builder b(f.getContext());
    Type f32 = b.getF32Type();
    k3::Conversions conv{
        k3::namedFunction(f, fns, "widen", b.getFunctionType(act, f32)),
        k3::namedFunction(f, fns, "narrow", b.getFunctionType(f32, act)),
        k3::namedFunction(f, fns, "round", b.getFunctionType(f32, f32))};
    auto residual = fns ? fns.getAs<BoolAttr>("residual") : BoolAttr();
    if (!conv.widen || !conv.narrow || !conv.round || !residual)
      return fail("'attn_res' must be {widen = (act) -> f32, narrow = (f32) "
                  "-> act, round = (f32) -> f32, residual = bool}");
    unsigned n = k3::attnResOperands(spec);
    unsigned at = body.getNumArguments() - n;
    auto arg = [&](unsigned i) { return body.getArgument(at + i); };
    auto memref = [&](unsigned i, int64_t rank, Type element) {
      auto t = dyn_cast<MemRefType>(arg(i).getType());
      return t && t.getRank() == rank && t.getElementType() == element;
    };
    unsigned r = residual.getValue();
    Type bf16 = b.getBF16Type();
    bool ok = memref(0, 3, act) && memref(1, 3, act) &&
              (!r || memref(2, 3, act)) && memref(2 + r, 1, bf16) &&
              memref(3 + r, 2, bf16) && arg(4 + r).getType() == f32 &&
              memref(5 + r, 1, bf16) && arg(6 + r).getType() == f32 &&
              (!r || memref(8, 3, act));
    if (!ok)
      return fail("with 'attn_res', expected after the other operands the "
                  "blocks [n - 1, T, D], the last candidate [1, T, D] (with "
                  "'residual' its terms a and b), gamma [D] bf16, p [1, D] "
                  "bf16, eps f32, the norm's gamma [D] bf16 and eps f32 (with "
                  "'residual' then the sum's buffer [1, T, D])");
    attnRes = AttnRes{arg(0),
                      r ? Value() : arg(1),
                      r ? arg(1) : Value(),
                      r ? arg(2) : Value(),
                      r ? arg(8) : Value(),
                      arg(2 + r),
                      arg(3 + r),
                      arg(4 + r)};
    norm = CombineNorm{Value(), Value(), arg(5 + r), arg(6 + r), conv};
    return success();
  }

  /// `route`: one flagged matrix, no addend, and after the outputs (bias
  /// [E] f32, renorm i1, scaling f32, idx [T, k] i64, wts [T, k] f32, order
  /// and rank [T k] i64) with the flagged matrix's output f32 [T, E].
  LogicalResult checkRoute(func::FuncOp f, DictionaryAttr spec, unsigned m) {
    auto fail = [&](const Twine &why) {
      return f.emitError() << kAttr << ": " << why, failure();
    };
    Attribute flags = spec.get("route");
    auto isFlag = [](Attribute a) { return isa<BoolAttr>(a); };
    auto list = dyn_cast<ArrayAttr>(flags);
    if (!isFlag(flags) &&
        !(list && list.size() == m && llvm::all_of(list, isFlag)))
      return fail("'route' must be a bool or one bool per matrix");
    std::optional<unsigned> routed = k3::routedMatrix(spec);
    if (!routed)
      return success();
    if (list && llvm::count_if(list, [](Attribute a) {
          return cast<BoolAttr>(a).getValue();
        }) > 1)
      return fail("'route' may flag one matrix only");
    if (spec.get("addend"))
      return fail("'route' and 'addend' do not go together");
    Block &body = f.getBody().front();
    auto memref = [&](unsigned i, int64_t rank, Type element) {
      auto t = i < body.getNumArguments()
                   ? dyn_cast<MemRefType>(body.getArgument(i).getType())
                   : MemRefType();
      return t && t.getRank() == rank && t.getElementType() == element;
    };
    Builder b(f.getContext());
    Type f32 = b.getF32Type();
    unsigned at = 1 + 2 * m;
    if (body.getNumArguments() !=
            at + k3::kRouteOperands + k3::attnResOperands(spec) ||
        !memref(1 + m + *routed, 2, f32) || !memref(at, 1, f32) ||
        !body.getArgument(at + 1).getType().isInteger(1) ||
        body.getArgument(at + 2).getType() != f32 ||
        !memref(at + 3, 2, b.getI64Type()) || !memref(at + 4, 2, f32) ||
        !memref(at + 5, 1, b.getI64Type()) ||
        !memref(at + 6, 1, b.getI64Type()))
      return fail("with 'route', expected the routed matrix's output [T, E] "
                  "f32 and after the outputs (bias [E] f32, renorm i1, "
                  "scaling f32, idx [T, k] i64, weights [T, k] f32, order "
                  "[T k] i64, rank [T k] i64)");
    return success();
  }

  /// (y [T, k, D] f32, ω [T, k] f32, γ [D] bf16, eps f32, W [N, D] bf16,
  /// r [T, N], out [T, N]) with `out` (f32, r's type) -> out's and
  /// combine_norm = {widen, narrow, round}: @k3k_latent_up_add_few.
  LogicalResult rewriteCombineNorm(func::FuncOp f, DictionaryAttr spec) {
    auto fail = [&](const Twine &why) {
      return f.emitError() << kAttr << ": " << why, failure();
    };
    Block &body = f.getBody().front();
    auto memref = [&](unsigned i, int64_t rank) -> MemRefType {
      if (i >= body.getNumArguments())
        return {};
      auto t = dyn_cast<MemRefType>(body.getArgument(i).getType());
      return t && t.getRank() == rank ? t : MemRefType();
    };
    MemRefType ys = memref(0, 3), wts = memref(1, 2), gamma = memref(2, 1),
               w = memref(4, 2), r = memref(5, 2), out = memref(6, 2);
    Builder b(f.getContext());
    if (body.getNumArguments() != 7 || !spec.get("addend") || !ys ||
        !ys.getElementType().isF32() || !wts ||
        !wts.getElementType().isF32() || !gamma ||
        !gamma.getElementType().isBF16() ||
        body.getArgument(3).getType() != b.getF32Type() || !w ||
        !w.getElementType().isBF16() || !w.getLayout().isIdentity() || !r ||
        !out || r.getElementType() != out.getElementType())
      return fail("with 'combine_norm', expected 'addend' and (y [T, k, D] "
                  "f32, weights [T, k] f32, bf16 gamma [D], f32 eps, bf16 W "
                  "[N, D], addend [T, N], output [T, N]) memrefs");
    Type act = out.getElementType();
    auto lookup = [&](DictionaryAttr d, StringRef key, FunctionType type) {
      auto ref = d ? d.getAs<FlatSymbolRefAttr>(key) : nullptr;
      auto fn =
          ref ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(f, ref)
              : nullptr;
      return fn && fn.getFunctionType() == type ? fn : nullptr;
    };
    auto f32 = b.getF32Type();
    func::FuncOp outFn = lookup(spec, "out", b.getFunctionType({f32, act}, act));
    if (!outFn)
      return fail("with 'addend', 'out' must name a function (f32, the "
                  "addend's element type) -> the output's element type");
    auto fns = dyn_cast<DictionaryAttr>(spec.get("combine_norm"));
    CombineNorm norm{body.getArgument(0),
                     body.getArgument(1),
                     body.getArgument(2),
                     body.getArgument(3),
                     {lookup(fns, "widen", b.getFunctionType(act, f32)),
                      lookup(fns, "narrow", b.getFunctionType(f32, act)),
                      lookup(fns, "round", b.getFunctionType(f32, f32))}};
    if (!norm.fns.widen || !norm.fns.narrow || !norm.fns.round)
      return fail("'combine_norm' must be {widen = (act) -> f32, narrow = "
                  "(f32) -> act, round = (f32) -> f32}");
    if (!k3::returnsNothing(body))
      return fail("the function must return nothing");
    // bf16 activations only, sm_80 and later (as above).
    if (!act.isBF16() || sm < 80)
      return success();
    SmallVector<Operation *> rest = k3::bodyOps(body);
    OpBuilder builder(f.getContext());
    builder.setInsertionPointToStart(&body);
    ModuleOp module = getOperation();
    SkinnyKernel(
        builder, f.getLoc(), mTiles, prefetchL2, Value(), body.getArgument(4),
        body.getArgument(6), {outFn}, body.getArgument(5),
        k3::workgroupBuffer(module, "k3k_skinny_ring",
                            {kWarps, kStages, kRows, kChunk}),
        k3::deviceCounters(module, "k3k_skinny_count", kCounters), norm,
        // The producers' count and the product blocks'.
        k3::deviceCounters(module, "k3k_skinny_norm_ready", 2))
        .build(rest);
    return success();
  }
};
} // namespace
