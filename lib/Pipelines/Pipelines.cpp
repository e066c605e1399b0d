//===- Pipelines.cpp - the pass pipelines k3c runs ------------------------===//

#include "k3/Pipelines/Pipelines.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void mlir::k3::buildK3TransformPipeline(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void mlir::k3::registerK3Pipelines() {
  PassPipelineRegistration<>(
      "k3-transform-pipeline",
      "The k3 transform phase of k3c (canonicalize, CSE) on an imported module",
      [](OpPassManager &pm) { buildK3TransformPipeline(pm); });
}
