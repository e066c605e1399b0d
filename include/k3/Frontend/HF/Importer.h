//===- Importer.h - TextConfig -> k3 module ---------------------*- C++ -*-===//
//
// Builds the k3 module of a validated config: the exact layer map, the
// AttnRes schedule, shared bodies for layers of one kind, and a symbolic
// reference (checkpoint name, shape, dtype, quantization) for every weight.
//
//===----------------------------------------------------------------------===//

#ifndef K3_FRONTEND_HF_IMPORTER_H
#define K3_FRONTEND_HF_IMPORTER_H

#include "k3/Frontend/HF/Config.h"

#include "mlir/IR/OwningOpRef.h"

namespace mlir {
class MLIRContext;
class ModuleOp;
} // namespace mlir

namespace mlir::k3::hf {

/// Choices the config does not fix; recorded in the IR (and the manifest).
struct ImportOptions {
  /// KDA chunk length C of the WY/UT prefill form (K3_SPEC §4.6).
  int64_t kdaChunkSize = 64;
  /// Tokens per MLA latent-cache page.
  int64_t mlaPageSize = 64;
  /// KDA state as Sᵀ ([H, V, K], the official layout) or S ([H, K, V]).
  bool kdaStateValueFirst = true;
  /// Activation dtype: bf16 as in K3, or f32 (docs/NUMERICS.md). The conv
  /// tails and the MLA cache store activations, so they follow it.
  bool f32Activations = false;
};

/// Names of the entry point and the shared bodies in an imported module.
inline constexpr const char *kForwardFuncName = "forward";

/// Builds the k3 module for `config`. The module is not verified here.
OwningOpRef<ModuleOp> importModel(MLIRContext &context,
                                  const TextConfig &config,
                                  const ImportOptions &options);

} // namespace mlir::k3::hf

#endif // K3_FRONTEND_HF_IMPORTER_H
