//===- MemRefCopyToLinalg.cpp - memref.copy -> linalg.copy ----------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3MEMREFCOPYTOLINALGPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct CopyToLinalg : OpRewritePattern<memref::CopyOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(memref::CopyOp op,
                                PatternRewriter &rewriter) const override {
    Value source = op.getSource(), target = op.getTarget();
    auto from = cast<MemRefType>(source.getType());
    auto to = cast<MemRefType>(target.getType());
    // Contiguous buffers are copied as one row: a GPU kernel over all their
    // elements, not one thread per element of a short innermost dimension
    // (a KDA conv tail is [channels, 3]).
    if (from.getRank() > 1 && from.getLayout().isIdentity() &&
        to.getLayout().isIdentity()) {
      SmallVector<ReassociationIndices> all(1);
      for (int64_t i = 0; i < from.getRank(); ++i)
        all[0].push_back(i);
      source = memref::CollapseShapeOp::create(rewriter, op.getLoc(), source,
                                               all);
      target = memref::CollapseShapeOp::create(rewriter, op.getLoc(), target,
                                               all);
    }
    rewriter.replaceOpWithNewOp<linalg::CopyOp>(op, source, target);
    return success();
  }
};

struct K3MemRefCopyToLinalgPass
    : k3::impl::K3MemRefCopyToLinalgPassBase<K3MemRefCopyToLinalgPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<CopyToLinalg>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
