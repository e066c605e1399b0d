//===- Passes.h - k3 dialect transforms -------------------------*- C++ -*-===//

#ifndef K3_DIALECT_K3_TRANSFORMS_PASSES_H
#define K3_DIALECT_K3_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::k3 {

#define GEN_PASS_DECL
#include "k3/Dialect/K3/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "k3/Dialect/K3/Transforms/Passes.h.inc"

} // namespace mlir::k3

#endif // K3_DIALECT_K3_TRANSFORMS_PASSES_H
