//===- Passes.h - k3 conversion passes --------------------------*- C++ -*-===//

#ifndef K3_CONVERSION_PASSES_H
#define K3_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::k3 {

#define GEN_PASS_DECL
#include "k3/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "k3/Conversion/Passes.h.inc"

} // namespace mlir::k3

#endif // K3_CONVERSION_PASSES_H
