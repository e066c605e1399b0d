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
// The selection and the weights are RouteSelect.cpp's (k3-gpu-skinny-mma's
// `route` makes them the same way with 128 threads).
//
//===----------------------------------------------------------------------===//

#include "RouteSelect.h"
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
  Value pairs = memref::GetGlobalOp::create(b, loc, pairsGlobal.getType(),
                                            pairsGlobal.getSymName());
  Value weights = memref::GetGlobalOp::create(
      b, loc, weightsGlobal.getType(), weightsGlobal.getSymName());
  k3::RouteScratch scratch{
      [&](Value buf, int64_t field, Value warp, Value v) {
        memref::StoreOp::create(b, loc, v, pairs,
                                ValueRange{buf, idx(field), warp});
      },
      [&](Value buf, int64_t field, Value warp) -> Value {
        return memref::LoadOp::create(b, loc, pairs,
                                      ValueRange{buf, idx(field), warp});
      },
      [&](Value slot, Value s) {
        memref::StoreOp::create(b, loc, s, weights, ValueRange{slot});
      },
      [&](Value slot) -> Value {
        return memref::LoadOp::create(b, loc, weights, ValueRange{slot});
      }};
  k3::routeToken(*this,
                 {scores, bias, renorm, scaling, idxOut, wtsOut}, scratch,
                 token, tid, kThreads, /*per=*/1, experts, slots);
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
