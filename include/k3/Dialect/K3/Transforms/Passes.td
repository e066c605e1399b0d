//===- Passes.td - k3 dialect transforms -------------------*- tablegen -*-===//

#ifndef K3_DIALECT_K3_TRANSFORMS_PASSES_TD
#define K3_DIALECT_K3_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def K3WeightsToArgumentsPass : Pass<"k3-weights-to-arguments", "::mlir::ModuleOp"> {
  let summary = "Turn the k3.weight references of @forward into arguments";
  let description = [{
    Each `k3.weight` op of @forward becomes an argument of @forward, inserted
    after the tokens in the order the ops appear (the order of the manifest's
    weights), and tagged `{k3.weight = "<checkpoint name>"}`. The runtime
    binds the weights by passing their buffers; nothing is embedded.
  }];
}

#endif // K3_DIALECT_K3_TRANSFORMS_PASSES_TD
