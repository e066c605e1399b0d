//===- Pipelines.h - the pass pipelines k3c runs ----------------*- C++ -*-===//

#ifndef K3_PIPELINES_PIPELINES_H
#define K3_PIPELINES_PIPELINES_H

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace mlir::k3 {

/// Phase 2 (k3 transforms) on an imported module: canonicalization and CSE
/// over the k3 ops and the forward skeleton.
void buildK3TransformPipeline(OpPassManager &pm);

/// Registers the pipelines with k3-opt (`--k3-transform-pipeline`).
void registerK3Pipelines();

} // namespace mlir::k3

#endif // K3_PIPELINES_PIPELINES_H
