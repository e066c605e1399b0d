//===- GPUDeviceAlloc.cpp - kernel temporaries in device memory -----------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUDEVICEALLOCPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct AllocToGPU : OpRewritePattern<memref::AllocOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(memref::AllocOp op,
                                PatternRewriter &rewriter) const override {
    if (op->getParentOfType<gpu::GPUModuleOp>() ||
        op->getParentOfType<gpu::LaunchOp>())
      return rewriter.notifyMatchFailure(op, "inside a kernel");
    auto alloc = gpu::AllocOp::create(
        rewriter, op.getLoc(), op.getType(), /*asyncToken=*/Type(),
        /*asyncDependencies=*/ValueRange(), op.getDynamicSizes(),
        op.getSymbolOperands(), /*hostShared=*/false);
    rewriter.replaceOp(op, alloc.getMemref());
    return success();
  }
};

struct K3GPUDeviceAllocPass
    : k3::impl::K3GPUDeviceAllocPassBase<K3GPUDeviceAllocPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<AllocToGPU>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
