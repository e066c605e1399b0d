//===- Pipelines.h - the pass pipelines k3c runs ----------------*- C++ -*-===//

#ifndef K3_PIPELINES_PIPELINES_H
#define K3_PIPELINES_PIPELINES_H

#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <string>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace mlir::k3 {

/// The lowering's choices that k3c gives as flags: the defaults are the
/// measured best (BENCHMARKS.md); the others are there to measure them.
struct LoweringOptions {
  /// Each sublayer's input AttnRes and norm made in the kernel of the
  /// products that read it (k3-group-calls `attn-res`; `k3c
  /// --join-attn-res`).
  bool joinAttnRes = false;
  /// GPU: m16 tiles of W per warp of the few-token products, 1 or 2
  /// (k3-gpu-skinny-mma `m-tiles`; `k3c --gpu-skinny-m-tiles`).
  int64_t skinnyMTiles = 1;
  /// GPU: bytes of each row of W their blocks ask L2 for before they wait
  /// (k3-gpu-skinny-mma `prefetch-l2`; `k3c --gpu-skinny-prefetch-l2`).
  int64_t skinnyPrefetchL2 = 0;
  /// GPU: loop iterations ahead whose codes the MXFP4 experts' warps ask
  /// L2 for (k3-gpu-experts-mma `prefetch-l2`; `k3c
  /// --gpu-experts-prefetch-l2`).
  int64_t expertsPrefetchL2 = 0;
  /// GPU: the KDA decode's blocks ask L2 for the next block's state
  /// (k3-gpu-kda-decode `prefetch-next`; `k3c --gpu-kda-prefetch-next`).
  bool kdaPrefetchNext = false;
  /// GPU: each kernel may be dispatched while the one before it finishes
  /// (k3-gpu-dependent-launch; `k3c --gpu-dependent-launch`).
  bool dependentLaunch = false;
  /// GPU: stages of the many-token products' rings, the most blocks of a
  /// split product and the blocks per SM their registers must allow
  /// (k3-gpu-mma `stages`, `target-blocks`, `min-blocks`; `k3c
  /// --gpu-mma-stages`, `--gpu-mma-target-blocks`, `--gpu-mma-min-blocks`).
  int64_t mmaStages = 2;
  int64_t mmaTargetBlocks = 396;
  int64_t mmaMinBlocks = 0;
  /// GPU: their fragments read with ldmatrix (k3-gpu-mma `ldmatrix`; `k3c
  /// --gpu-mma-ldmatrix`).
  bool mmaLdmatrix = false;
};

/// Phase 2 (k3 transforms) on an imported module: canonicalization and CSE.
void buildK3TransformPipeline(OpPassManager &pm);

/// Phase 3a: weights to arguments, k3 -> kernels, the library ABI.
void buildK3ToLinalgPipeline(OpPassManager &pm,
                             const LoweringOptions &options = {});

/// Phase 3 for the host: everything down to the LLVM dialect, with the
/// library's entry points; the module needs a `k3.manifest` attribute.
LogicalResult buildHostLoweringPipeline(OpPassManager &pm,
                                        const LoweringOptions &options = {});

/// Phase 3 for NVIDIA GPUs `chips` (sm_90, or several): the host glue and
/// kernel launches in the LLVM dialect, the kernels compiled to one fatbin
/// per GPU module with a cubin and the PTX of every chip; the module needs a
/// `k3.manifest` attribute. With `stopAtPTX` the pipeline ends with the PTX
/// of every chip in the `gpu.binary` objects (`k3c --emit=ptx`).
LogicalResult buildGPULoweringPipeline(OpPassManager &pm,
                                       ArrayRef<std::string> chips,
                                       bool stopAtPTX = false,
                                       const LoweringOptions &options = {});

/// Registers the upstream passes the pipelines name (idempotent).
void registerUpstreamPasses();

/// Registers every k3 pass with the global registry (for k3-opt).
void registerK3Passes();

/// Registers the pipelines with k3-opt.
void registerK3Pipelines();

} // namespace mlir::k3

#endif // K3_PIPELINES_PIPELINES_H
