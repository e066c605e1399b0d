//===- Driver.h - everything k3c does, callable from tests ------*- C++ -*-===//
//
// k3c is a thin main over this library: it parses flags into CompileOptions
// and calls compile().
//
//===----------------------------------------------------------------------===//

#ifndef K3_DRIVER_DRIVER_H
#define K3_DRIVER_DRIVER_H

#include "k3/Frontend/HF/Importer.h"
#include "k3/Pipelines/Pipelines.h"

#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
class TimingScope;
} // namespace mlir

namespace mlir::k3 {

/// What k3c writes (`--emit=`), in phase order.
enum class EmitKind {
  K3,       ///< the k3 module after the k3 transform phase
  Manifest, ///< the manifest JSON
  Weights,  ///< every checkpoint tensor, one per line
  Summary,  ///< layer map, parameter counts, state sizes
  Linalg,   ///< after lowering to linalg/scf/memref with the library ABI
  LLVMIR,   ///< LLVM IR of the host library
  PTX,      ///< the PTX of every GPU kernel module (GPU targets)
  Library,  ///< the shared library (the default for -o *.so)
};

struct CompileOptions {
  std::string inputPath;        ///< config.json, or a .mlir k3 module
  std::string outputPath = "-"; ///< "-" for stdout
  EmitKind emit = EmitKind::K3;
  std::vector<std::string> targets = {"host"};
  std::string modelName;        ///< overrides the config folder's name
  bool strictConfig = false;    ///< unknown config keys are errors
  /// Expert-parallel degree the library is compiled for: must divide the
  /// experts (RUNTIME_NOTES §3 item 5); only 1 is implemented.
  int64_t epDegree = 1;
  hf::ImportOptions import;
  bool progress = false;        ///< one line per phase on stderr
  /// The lowering's choices (k3-gpu-dependent-launch, ...).
  LoweringOptions lowering;
};

/// Parses a `--target` value: "host", or a comma list of "sm_<NN>".
llvm::Expected<std::vector<std::string>> parseTargets(StringRef spec);

/// Runs k3c's phases up to `options.emit` and writes the output file only if
/// every phase succeeded. Errors are reported through the context's
/// diagnostic handler; returns failure on any error.
LogicalResult compile(MLIRContext &context, const CompileOptions &options,
                      TimingScope &timing);

} // namespace mlir::k3

#endif // K3_DRIVER_DRIVER_H
