//===- Manifest.h - what a compiled model needs at run time -----*- C++ -*-===//
//
// The manifest describes an imported k3 module to the runtime and to users:
// every checkpoint tensor (name, shape, dtype, quantization), the layer map,
// the AttnRes schedule, the state groups with their shapes and sizes, and the
// parameter totals. It is derived from the IR, so it cannot drift from what
// is compiled.
//
//===----------------------------------------------------------------------===//

#ifndef K3_TARGET_MANIFEST_H
#define K3_TARGET_MANIFEST_H

#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace mlir::k3 {

/// One checkpoint tensor, after expanding expert stacks and MXFP4 pairs.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;        ///< bf16, f16, f32 or u8
  std::string quantization; ///< none, mxfp4.packed or mxfp4.scale
  int64_t bytes = 0;
};

/// A weight reference of the IR (one k3.weight op), possibly a stack of
/// `experts` tensors named by replacing `{e}`.
struct WeightGroup {
  std::string name;           ///< as in the IR, with `{e}` for a stack
  int64_t experts = 0;        ///< 0 unless an expert stack
  std::vector<TensorInfo> tensors; ///< one, or packed + scale (per expert)
  int64_t parameters = 0;     ///< logical elements of the whole group
  int64_t activeParameters = 0; ///< read per token (expert share, no embedding)
  bool used = true; ///< false: in the checkpoint, never read (k3.unused_weight)
};

struct LayerInfo {
  int64_t index = 0;
  std::string mixer; ///< kda | mla
  std::string ffn;   ///< dense | moe
  int64_t preMixerCandidates = 0; ///< 0: AttnRes skipped
  int64_t preFFNCandidates = 0;
  bool blockBoundary = false; ///< P_in stored as a block (K3_SPEC §3.2)
};

struct StateGroup {
  std::string kind;             ///< kda.recurrent, kda.conv_q, ..., mla.latent
  std::vector<int64_t> layers;
  std::vector<int64_t> shape;   ///< per layer: per sequence, or per token
  std::vector<std::string> dims; ///< names of the shape's dimensions
  std::string dtype;
  std::string layout;
  bool perToken = false;        ///< grows with the sequence (paged)
  int64_t pageSize = 0;
  int64_t chunkSize = 0;        ///< KDA prefill chunk (kda.recurrent only)
  int64_t bytesPerLayer = 0;    ///< per sequence, or per token if perToken
};

/// One argument of the library's k3_forward (docs/ABI.md), in call order.
struct AbiArg {
  std::string role;  ///< tokens, weight, state or logits
  std::string name;  ///< weight: checkpoint name; state: group kind
  std::string part;  ///< packed/scale (MXFP4), pool/page_table/length (MLA)
  int64_t layer = -1; ///< state: its layer
  std::vector<int64_t> shape; ///< -1: known at run time
  std::string dtype;
};

struct ModelInfo {
  std::string name, modelType, configHash;
  int64_t vocabSize = 0, hiddenSize = 0, maxContext = 0, attnResBlockSize = 0;
  int64_t numExperts = 0, topK = 0;
  std::string expertFormat; ///< bf16 or mxfp4
  std::vector<LayerInfo> layers;
  int64_t outputCandidates = 0;
  std::vector<WeightGroup> weights;
  std::vector<StateGroup> states;
  int64_t tensorCount = 0, weightBytes = 0;
  int64_t totalParameters = 0, activeParameters = 0;
  std::vector<AbiArg> abi;
};

/// Version of the library ABI the manifest's "abi" section describes.
inline constexpr int kLibraryAbiVersion = 2;

/// Reads the model description off an imported module. Emits a diagnostic
/// on the module and fails if it is not an imported k3 model.
FailureOr<ModelInfo> describeModel(ModuleOp module);

/// The manifest as JSON text (format version 1). `targets` are recorded.
std::string manifestJSON(const ModelInfo &info,
                         ArrayRef<std::string> targets);

/// Every checkpoint tensor, one per line: name, dtype, shape, quantization.
void printWeightList(const ModelInfo &info, llvm::raw_ostream &os);

/// A human-readable summary: layer map, AttnRes, parameters, state sizes.
void printSummary(const ModelInfo &info, llvm::raw_ostream &os);

} // namespace mlir::k3

#endif // K3_TARGET_MANIFEST_H
