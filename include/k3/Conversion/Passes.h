//===- Passes.h - k3 conversion passes --------------------------*- C++ -*-===//

#ifndef K3_CONVERSION_PASSES_H
#define K3_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::k3 {

#define GEN_PASS_DECL
#include "k3/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "k3/Conversion/Passes.h.inc"

/// On a `memref.extract_aligned_pointer_as_index` in a kernel: memory is
/// only read through the pointer (k3::prefetchL2, the L2 prefetches of
/// k3-gpu-skinny-mma, k3-gpu-experts-mma and k3-gpu-kda-decode), so
/// k3-gpu-kernel-access counts it as a read, not as an unknown write.
inline constexpr llvm::StringLiteral kReadOnlyPointer = "k3.read_only";

} // namespace mlir::k3

#endif // K3_CONVERSION_PASSES_H
