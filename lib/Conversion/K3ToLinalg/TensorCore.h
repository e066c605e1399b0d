//===- TensorCore.h - helpers of the tensor-core passes ---------*- C++ -*-===//
//
// What the kernel-building passes (k3-gpu-mma, -experts-mma, -skinny-mma,
// -kda-recurrent, -mla-mma, -attn-res-norm) build alike: the marked kernel
// functions they rewrite, the bf16 mma.sync instruction, the 16-byte
// aligned workgroup buffers their cp.async copies fill, the k loop of a
// warp's cp.async ring, warp sums, and index arithmetic.
//
//===----------------------------------------------------------------------===//

#ifndef K3_CONVERSION_K3TOLINALG_TENSORCORE_H
#define K3_CONVERSION_K3TOLINALG_TENSORCORE_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <array>
#include <optional>

namespace mlir::gpu {
class LaunchOp;
} // namespace mlir::gpu

namespace mlir::k3 {

/// The functions under `root` that carry attribute `attr` and have a body
/// (the kernel library's functions a kernel-building pass rewrites).
SmallVector<func::FuncOp> markedFunctions(Operation *root, StringRef attr);

/// Whether function body `body` ends in a `func.return` of nothing.
bool returnsNothing(Block &body);

/// The function that entry `key` of `f`'s mark `spec` names (`{key = @g}`),
/// if it has type `type`; otherwise null.
func::FuncOp namedFunction(func::FuncOp f, DictionaryAttr spec, StringRef key,
                           FunctionType type);

/// The `out` function of a product function marked `attr = {out = @f}`
/// (`k3.skinny_matmul`, `k3.mma_matmul`): `f` takes the product's f32 sum
/// to the output's element type; the arguments are x [T, K], bf16 W [N, K]
/// and the output [T, N] (memrefs, x and W with identity layouts) and the
/// function returns nothing. Otherwise an error on `f` that names `attr`.
FailureOr<func::FuncOp> productOutFunction(func::FuncOp f, StringRef attr);

/// The same for the products of x by several matrices: arguments x, W_1 ..
/// W_m and outputs 1 .. m (m >= 1), `out` one function for all (outputs
/// of one type) or an array of one per matrix (`out = [@f_1, ..., @f_m]`,
/// as k3-group-calls writes it for different products of one x), then the
/// routing's operands with `route` (routedMatrix). With the
/// key `addend` the arguments are (x, W, r [T, N], output) and `out` is
/// (f32 sum, r's element) -> the output's element.
FailureOr<SmallVector<func::FuncOp>> productOutFunctions(func::FuncOp f,
                                                         StringRef attr);

/// The matrix of a `k3.skinny_matmul` mark whose product also routes
/// (`route = true`, or an array of flags, one per matrix, as k3-group-calls
/// merges the marks): the first flagged one, if any. Its kernel takes the
/// routing's kRouteOperands operands after the outputs (bias [E], renorm,
/// scaling, idx [T, k], wts [T, k], order and rank [T · k]:
/// Kernels/MoE.mlir @k3k_router_route).
std::optional<unsigned> routedMatrix(DictionaryAttr spec);
constexpr unsigned kRouteOperands = 7;

/// The operands after all others of a `k3.skinny_matmul` function marked
/// `attn_res = {..., residual}` (k3-group-calls): the AttnRes's blocks,
/// its last candidate (with `residual` the terms a and b of that sum), γ,
/// p, eps, the norm's γ and eps, and with `residual` the sum's buffer: 7 or
/// 9; 0 without `attn_res`.
unsigned attnResOperands(DictionaryAttr spec);

/// The operations of `body` before its terminator: the generic body that a
/// kernel-building pass moves into the `else` of its run-time choice.
SmallVector<Operation *> bodyOps(Block &body);

/// The run-time choice: `scf.if cond { ... } else { rest }`, with `rest`
/// moved into the `else` and `b` left at the end of the `then` block.
void guardBody(OpBuilder &b, Location loc, ArrayRef<Operation *> rest,
               Value cond);

/// d = a · b + c with one `nvvm.mma.sync` m16n8k16, bf16 operands and f32
/// accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k16"): `a` four
/// i32 (pairs of bf16, row-major A), `bx` two (column-major B), `c` four
/// f32. Returns d's four f32.
std::array<Value, 4> mmaSyncBF16(OpBuilder &b, Location loc, ValueRange a,
                                 ValueRange bx, ValueRange c);

/// The private workgroup-memory `memref.global` `name` of `module` (shape
/// `shape`, `element`: bf16 when null), 16-byte aligned for cp.async and
/// 16-byte fragment reads: created on first use, then shared by every kernel
/// that names it (kernel outlining copies it into each kernel's module).
memref::GlobalOp workgroupBuffer(ModuleOp module, StringRef name,
                                 ArrayRef<int64_t> shape,
                                 Type element = nullptr);

/// The private `memref.global` `name` of `module`: `n` i32 counters in
/// device memory, zero when the module is loaded (each kernel's module gets
/// its own copy at outlining). A split-K kernel counts its finished blocks
/// per output tile there, and the last block resets the count.
memref::GlobalOp deviceCounters(ModuleOp module, StringRef name, int64_t n);

/// Names `launch`'s kernel `<function>_mma_kernel` (`_1`, `_2`, ... after
/// the first so named in its function) and records in the function's
/// `k3.launch_bounds` that the kernel's registers must allow `blocks`
/// resident blocks per SM, which k3-gpu-launch-bounds makes
/// `.minnctapersm` after outlining (outlining drops the launch's own
/// attributes).
void boundLaunch(gpu::LaunchOp launch, int64_t blocks);

/// Asks L2 for `bytes` (i32-sized index, a multiple of 16) of the
/// contiguous memref `m` from element `indices` on (16-byte aligned): one
/// `nvvm.cp.async.bulk.prefetch` (sm_90). m's pointer is marked
/// k3::kReadOnlyPointer, so k3-gpu-kernel-access still sees a read.
void prefetchL2(OpBuilder &b, Location loc, Value m, ValueRange indices,
                Value bytes);

/// The end of a split-K block, after its partial sums are stored: fences
/// them, counts the block in element `tile` of `counters` (a
/// deviceCounters global), and in the block that finished its output tile
/// last (`slices` blocks per tile) fences again and builds `last` for every
/// thread, then resets the count for the next launch. Thread 0 (`isFirst`
/// builds the test) counts and passes the verdict to the block as a bf16 at
/// `flagAt` of `flag`, workgroup memory the block no longer reads. (The
/// CUDA programming guide's "threadfence reduction", with fences on both
/// sides.)
void finishSplitTile(OpBuilder &b, Location loc, memref::GlobalOp counters,
                     Value tile, Value slices, function_ref<Value()> isFirst,
                     Value flag, ValueRange flagAt,
                     function_ref<void()> last);

/// The f32 workspace [slices, rows, cols] of a split product's partial
/// sums, empty without a split (`split`: slices > 1).
Value sliceBuffer(OpBuilder &b, Location loc, Value split, Value slices,
                  Value rows, Value cols);

/// `init` + partial[from, i, j] + ... + partial[to - 1, i, j], added in
/// slice order (the split-K kernels' deterministic sum of their slices).
Value addSlices(OpBuilder &b, Location loc, Value partial, Value from,
                Value to, Value init, Value i, Value j);

/// The k loop of a warp that streams its operands through a cp.async ring
/// of `stages` stages (the copies of steps 0 .. stages - 2 issued before):
/// step i waits until every lane is done with the stage that step
/// i + stages - 1 refills, issues that step's copies (`issue(i + stages -
/// 1, carried)`, one async group), waits until step i's have arrived (at
/// most stages - 1 groups pending) in every lane, and yields `compute(i,
/// carried)`. Over [0, n), carrying `init`; `b` builds the body and is
/// restored after.
scf::ForOp warpRingLoop(
    OpBuilder &b, Location loc, Value n, ValueRange init, int64_t stages,
    function_ref<Value(Value, ValueRange)> issue,
    function_ref<SmallVector<Value>(Value, ValueRange)> compute);

/// The f32 sum of `v` over a warp's 32 lanes by an xor-shuffle tree, the
/// same in every lane.
Value warpSum(OpBuilder &b, Location loc, Value v);

/// The f32 maximum (arith.maximumf) of `v` over a warp's 32 lanes by the
/// same tree, in every lane.
Value warpMax(OpBuilder &b, Location loc, Value v);

/// Index and f32 arithmetic at a builder's insertion point, for the
/// address computations and element operations of the kernels these passes
/// build.
struct IndexMath {
  OpBuilder &b;
  Location loc;

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value add(Value l, Value r) { return arith::AddIOp::create(b, loc, l, r); }
  Value add(Value l, int64_t r) { return r ? add(l, idx(r)) : l; }
  Value sub(Value l, Value r) { return arith::SubIOp::create(b, loc, l, r); }
  Value mul(Value l, Value r) { return arith::MulIOp::create(b, loc, l, r); }
  Value mul(Value l, int64_t r) { return mul(l, idx(r)); }
  Value div(Value l, Value r) { return arith::DivUIOp::create(b, loc, l, r); }
  Value div(Value l, int64_t r) { return div(l, idx(r)); }
  Value ceilDiv(Value l, Value r) {
    return arith::CeilDivUIOp::create(b, loc, l, r);
  }
  Value rem(Value l, Value r) { return arith::RemUIOp::create(b, loc, l, r); }
  Value rem(Value l, int64_t r) { return rem(l, idx(r)); }
  Value min(Value l, Value r) { return arith::MinUIOp::create(b, loc, l, r); }
  Value cmp(arith::CmpIPredicate p, Value l, Value r) {
    return arith::CmpIOp::create(b, loc, p, l, r);
  }
  Value lt(Value l, Value r) { return cmp(arith::CmpIPredicate::ult, l, r); }
  Value eq(Value l, Value r) { return cmp(arith::CmpIPredicate::eq, l, r); }
  Value both(Value l, Value r) { return arith::AndIOp::create(b, loc, l, r); }
  Value pick(Value c, Value t, Value f) {
    return arith::SelectOp::create(b, loc, c, t, f);
  }
  Value rem0(Value v, int64_t m) {
    return cmp(arith::CmpIPredicate::eq, rem(v, m), idx(0));
  }
  Value fadd(Value l, Value r) { return arith::AddFOp::create(b, loc, l, r); }
  Value fmul(Value l, Value r) { return arith::MulFOp::create(b, loc, l, r); }
  Value fdiv(Value l, Value r) { return arith::DivFOp::create(b, loc, l, r); }
  Value f32(double v) {
    return arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                          APFloat(static_cast<float>(v)));
  }
  /// The one result of calling `f` (a library function: widen, narrow...).
  Value call(func::FuncOp f, ValueRange args) {
    return func::CallOp::create(b, loc, f, args).getResult(0);
  }
  /// `n` consecutive elements of `m` at `indices` (one vector load,
  /// aligned to its size), as scalars.
  SmallVector<Value> loadVector(Value m, ValueRange indices, int64_t n);
  /// Stores `v` at m[indices] where `cond` holds.
  void storeIf(Value cond, Value v, Value m, ValueRange indices) {
    scf::IfOp::create(b, loc, cond, [&](OpBuilder &ib, Location l) {
      memref::StoreOp::create(ib, l, v, m, indices);
      scf::YieldOp::create(ib, l);
    });
  }
  /// Whether memref `m`'s base address is `bytes`-byte aligned.
  Value aligned(Value m, int64_t bytes = 16) {
    return rem0(memref::ExtractAlignedPointerAsIndexOp::create(b, loc, m),
                bytes);
  }
};

/// The library's conversions of the activation dtype (Kernels/Prelude.*).
struct Conversions {
  func::FuncOp widen, narrow, round;
};

/// RMSNorm's 1 / sqrt(ss / D + eps) (K3_SPEC §2), as the generic kernels
/// compute it; `df` is D as f32.
Value invRMS(IndexMath &m, Value ss, Value df, Value eps);

/// RMSNorm's value of one element: narrow(round(widen(h) · inv) · γ) (γ
/// bf16), the generic kernels' operations (k3-gpu-attn-res-norm's norms and
/// k3-gpu-skinny-mma's `combine_norm` make the same bits with it).
Value rmsNormValue(IndexMath &m, const Conversions &fns, Value h, Value inv,
                   Value gamma);

/// The f32 sums Σ_s ω[token, s] · y[token, s, j0 + e], e < per, from 0 in s
/// order (@k3k_experts_combine before its rounding), the loads of `ahead`
/// entries issued together and the rest one at a time: the same sums for
/// any `ahead`.
SmallVector<Value> weightedSumPiece(IndexMath &m, Value ys, Value wts,
                                    Value token, Value j0, int64_t per,
                                    int64_t ahead);

} // namespace mlir::k3

#endif // K3_CONVERSION_K3TOLINALG_TENSORCORE_H
