//===- Driver.cpp - k3c's phases ------------------------------------------===//

#include "k3/Driver/Driver.h"
#include "k3/Dialect/K3/IR/K3.h"
#include "k3/Frontend/HF/Config.h"
#include "k3/Pipelines/Pipelines.h"
#include "k3/Target/HostLibrary.h"
#include "k3/Target/Manifest.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Chrono.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>

using namespace mlir;
using namespace mlir::k3;

llvm::Expected<std::vector<std::string>>
mlir::k3::parseTargets(StringRef spec) {
  std::vector<std::string> targets;
  SmallVector<StringRef> parts;
  spec.split(parts, ',');
  for (StringRef p : parts) {
    p = p.trim();
    StringRef digits = p;
    unsigned sm = 0;
    bool isSM = digits.consume_front("sm_") && !digits.empty() &&
                !digits.getAsInteger(10, sm) && sm >= 50;
    std::string t = p.str();
    if (t != "host" && !isSM)
      return llvm::createStringError(
          "unknown target '%s' in --target (expected 'host' or 'sm_<NN>', "
          "e.g. sm_90, or a comma list of SM targets)",
          t.c_str());
    if (llvm::is_contained(targets, t))
      return llvm::createStringError("target '%s' is listed twice in --target",
                                     t.c_str());
    targets.push_back(t);
  }
  if (targets.empty())
    return llvm::createStringError("--target is empty");
  if (targets.size() > 1 && llvm::is_contained(targets, "host"))
    return llvm::createStringError(
        "--target=host cannot be combined with GPU targets");
  return targets;
}

namespace {
/// Prints "k3c: <phase> <ms> ms" when progress lines are on.
class Phase {
public:
  Phase(const CompileOptions &o, TimingScope &parent, StringRef name)
      : on(o.progress), name(name), scope(parent.nest(name)),
        start(std::chrono::steady_clock::now()) {}
  /// Prints the phase's line; a phase that failed prints none.
  void done() {
    if (!on)
      return;
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    llvm::errs() << llvm::format("k3c: %-9s %8.1f ms\n", name.str().c_str(), ms);
  }
  TimingScope &timing() { return scope; }

private:
  bool on;
  StringRef name;
  TimingScope scope;
  std::chrono::steady_clock::time_point start;
};
} // namespace

/// Writes `options.outputPath` with `write`; the file is kept only if
/// writing succeeded (no partial output).
/// Applies the standard pass manager options. Unless a reproducer path was
/// given (--mlir-pass-pipeline-crash-reproducer), a failing or crashing pass
/// writes a reproducer to a fresh temporary file, and the error names the
/// pass, the operation and that file ("Pipeline failed while executing
/// [`Pass` on 'op' operation: @name]: reproducer generated at `PATH`"),
/// runnable with `k3-opt PATH --run-reproducer`.
static LogicalResult applyPassOptions(PassManager &pm) {
  if (failed(applyPassManagerCLOptions(pm)))
    return failure();
  auto &opts = llvm::cl::getRegisteredOptions();
  auto it = opts.find("mlir-pass-pipeline-crash-reproducer");
  if (it != opts.end() && it->second->getNumOccurrences())
    return success();
  SmallString<128> path;
  llvm::sys::fs::getPotentiallyUniqueTempFileName("k3c-reproducer", "mlir", path);
  pm.enableCrashReproducerGeneration(path, /*genLocalReproducer=*/false);
  return success();
}

static LogicalResult
writeOutput(Location loc, const CompileOptions &options,
            llvm::function_ref<LogicalResult(raw_ostream &)> write) {
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out =
      openOutputFile(options.outputPath, &error);
  if (!out)
    return emitError(loc) << "cannot open output '" << options.outputPath
                          << "': " << error;
  if (failed(write(out->os())))
    return failure();
  out->os().flush();
  if (out->os().has_error()) {
    out->os().clear_error();
    return emitError(loc) << "cannot write output '" << options.outputPath
                          << "'";
  }
  out->keep();
  return success();
}

LogicalResult mlir::k3::compile(MLIRContext &context,
                                const CompileOptions &options,
                                TimingScope &timing) {
  // Every dialect, interface model (bufferization, LLVM translation) and
  // extension the lowering pipelines rely on.
  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  registry.insert<K3Dialect>();
  context.appendDialectRegistry(registry);
  context.loadDialect<K3Dialect, func::FuncDialect, tensor::TensorDialect,
                      arith::ArithDialect>();
  // Errors name the op's location; a dump of the op (for a whole model, the
  // whole module) only on request.
  auto &opts = llvm::cl::getRegisteredOptions();
  auto printOp = opts.find("mlir-print-op-on-diagnostic");
  if (printOp == opts.end() || !printOp->second->getNumOccurrences())
    context.printOpOnDiagnostic(false);
  // Messages below name the file themselves.
  Location inputLoc = UnknownLoc::get(&context);

  // Phase 1: import (config.json) or parse (a .mlir k3 module).
  OwningOpRef<ModuleOp> module;
  {
    Phase phase(options, timing, "import");
    if (StringRef(options.inputPath).ends_with(".mlir")) {
      module = parseSourceFile<ModuleOp>(options.inputPath, &context);
      if (!module)
        return failure();
    } else {
      llvm::Expected<hf::TextConfig> config = hf::loadConfig(options.inputPath, options.strictConfig);
      if (!config)
        return emitError(inputLoc) << llvm::toString(config.takeError());
      if (!options.modelName.empty())
        config->name = options.modelName;
      if (options.epDegree != 1) {
        if (options.epDegree < 1 || !config->numExperts ||
            config->numExperts % options.epDegree != 0)
          return emitError(inputLoc)
                 << "--ep-degree " << options.epDegree << " does not divide "
                 << "the " << config->numExperts
                 << " routed experts (num_experts) of " << options.inputPath;
        return emitError(inputLoc)
               << "--ep-degree " << options.epDegree
               << ": expert-parallel libraries are not implemented in this "
                  "k3c; compile every expert into one library "
                  "(--ep-degree=1)";
      }
      module = hf::importModel(context, *config, options.import);
    }
    if (failed(verify(*module)))
      return failure();
    phase.done();
  }

  // Phase 2: k3 transforms.
  {
    Phase phase(options, timing, "transform");
    PassManager pm(&context);
    if (failed(applyPassOptions(pm)))
      return failure();
    pm.enableTiming(phase.timing());
    buildK3TransformPipeline(pm);
    if (failed(pm.run(*module)))
      return failure();
    phase.done();
  }

  // Outputs of the k3 level.
  if (options.emit == EmitKind::K3 || options.emit == EmitKind::Manifest ||
      options.emit == EmitKind::Weights || options.emit == EmitKind::Summary) {
    Phase phase(options, timing, "emit");
    if (failed(writeOutput(inputLoc, options, [&](raw_ostream &os) -> LogicalResult {
          if (options.emit == EmitKind::K3) {
            module->print(os);
            os << "\n";
            return success();
          }
          FailureOr<ModelInfo> info = describeModel(*module);
          if (failed(info))
            return failure();
          if (options.emit == EmitKind::Manifest)
            os << manifestJSON(*info, options.targets) << "\n";
          else if (options.emit == EmitKind::Weights)
            printWeightList(*info, os);
          else
            printSummary(*info, os);
          return success();
        })))
      return failure();
    phase.done();
    return success();
  }

  bool gpu = options.targets.front() != "host";
  if (options.emit == EmitKind::PTX && !gpu)
    return emitError(inputLoc)
           << "--emit=ptx needs a GPU target (--target=sm_90, ...)";
  // The NVVM target finds ptxas and libdevice through CUDA_ROOT, CUDA_HOME
  // or CUDA_PATH; default to the usual install location.
  if (gpu && !getenv("CUDA_ROOT") && !getenv("CUDA_HOME") &&
      !getenv("CUDA_PATH") && llvm::sys::fs::exists("/usr/local/cuda"))
    setenv("CUDA_HOME", "/usr/local/cuda", /*overwrite=*/0);

  // Phase 3: lower. The manifest is taken from the k3 module first.
  {
    Phase phase(options, timing, "lower");
    FailureOr<ModelInfo> info = describeModel(*module);
    if (failed(info))
      return failure();
    (*module)->setAttr("k3.manifest",
                       StringAttr::get(&context,
                                       manifestJSON(*info, options.targets)));
    PassManager pm(&context);
    if (failed(applyPassOptions(pm)))
      return failure();
    pm.enableTiming(phase.timing());
    if (options.emit == EmitKind::Linalg)
      buildK3ToLinalgPipeline(pm, options.lowering);
    else if (gpu ? failed(buildGPULoweringPipeline(
                       pm, options.targets, options.emit == EmitKind::PTX,
                       options.lowering))
                 : failed(buildHostLoweringPipeline(pm, options.lowering)))
      return emitError(inputLoc) << "internal error: bad lowering pipeline";
    if (failed(pm.run(*module)))
      return failure();
    phase.done();
  }

  if (options.emit == EmitKind::Linalg || options.emit == EmitKind::LLVMIR ||
      options.emit == EmitKind::PTX) {
    Phase phase(options, timing, "emit");
    if (failed(writeOutput(inputLoc, options, [&](raw_ostream &os) -> LogicalResult {
          if (options.emit == EmitKind::LLVMIR)
            return printLLVMIR(*module, os);
          if (options.emit == EmitKind::PTX) {
            // One section per kernel module and target, in module order.
            for (auto binary : module->getOps<gpu::BinaryOp>())
              for (Attribute a : binary.getObjects()) {
                auto object = cast<gpu::ObjectAttr>(a);
                auto target = cast<NVVM::NVVMTargetAttr>(object.getTarget());
                os << "// ---- " << binary.getSymName() << " ("
                   << target.getChip() << ")\n"
                   << object.getObject().getValue() << "\n";
              }
            return success();
          }
          module->print(os);
          return success();
        })))
      return failure();
    phase.done();
    return success();
  }

  // Phases 4 and 5: codegen (object files) and link (shared library).
  std::vector<std::string> objects;
  llvm::scope_exit removeObjects([&] {
    for (const std::string &o : objects)
      llvm::sys::fs::remove(o);
  });
  for (int i = 0; i < kHostObjects; ++i) {
    SmallString<128> object;
    if (llvm::sys::fs::createTemporaryFile("k3c", "o", object))
      return emitError(inputLoc) << "cannot create a temporary object file";
    objects.push_back(object.str().str());
  }
  {
    Phase phase(options, timing, "codegen");
    if (failed(emitHostObjects(*module, objects)))
      return failure();
    phase.done();
  }
  {
    Phase phase(options, timing, "link");
    if (failed(linkHostLibrary(*module, objects, options.outputPath)))
      return failure();
    phase.done();
  }
  return success();
}
