//===- HostLibrary.cpp - LLVM dialect -> object -> shared library ---------===//

#include "k3/Target/HostLibrary.h"

#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Transforms/Utils/Cloning.h"
#include "llvm/TargetParser/Triple.h"

using namespace mlir;

static std::unique_ptr<llvm::Module> translate(ModuleOp module,
                                               llvm::LLVMContext &ctx) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  module.getContext()->appendDialectRegistry(registry);
  return translateModuleToLLVMIR(module, ctx, "k3");
}

LogicalResult mlir::k3::printLLVMIR(ModuleOp module, raw_ostream &os) {
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = translate(module, ctx);
  if (!m)
    return module.emitError("cannot translate the module to LLVM IR");
  m->print(os, nullptr);
  return success();
}

/// The glue that calls layer bodies and kernels once per layer: huge for a
/// deep model (K3: ~130k LLVM instructions) and not worth optimizing.
static bool isGlue(const llvm::GlobalValue &gv) {
  StringRef n = gv.getName();
  return n == "forward" || n == "k3_abi_version" || n == "k3_manifest_json" ||
         n == "k3_manifest_text";
}

/// The entry point's wrappers, which unpack the caller's memref descriptors
/// into @forward's scalar arguments before its first launch: straight-line
/// code of a few loads and stores per argument, on the critical path of
/// every call. Unoptimized, each value went through its own stack slot:
/// a batch-1 k3_forward of k3-group's sm_90 library took 98 us on this
/// machine's host under the stand-in driver, 84 us with the wrappers'
/// IR at -O1 (BENCHMARKS.md, thirty-sixth session); full K3's codegen
/// 7.0 -> 10.3 s.
static bool isEntry(const llvm::GlobalValue &gv) {
  StringRef n = gv.getName();
  return n == "_mlir_ciface_forward" || n == "k3_forward";
}

static LogicalResult emitObject(ModuleOp module, llvm::Module &m,
                                 llvm::TargetMachine &tm, StringRef path) {
  std::error_code ec;
  llvm::ToolOutputFile out(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return module.emitError("cannot write '") << path << "': " << ec.message();
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, out.os(), nullptr,
                             llvm::CodeGenFileType::ObjectFile))
    return module.emitError("the x86-64 target cannot emit object files");
  pm.run(m);
  out.keep();
  return success();
}

LogicalResult mlir::k3::emitHostObjects(ModuleOp module,
                                        ArrayRef<std::string> objectPaths) {
  if (objectPaths.size() != kHostObjects)
    return module.emitError("emitHostObjects: expected ")
           << kHostObjects << " object paths";
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = translate(module, ctx);
  if (!m)
    return module.emitError("cannot translate the module to LLVM IR");

  // A portable x86-64 baseline: libraries built here run on other hosts.
  llvm::Triple triple("x86_64-pc-linux-gnu");
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return module.emitError("no x86-64 target in LLVM: ") << error;
  auto makeTM = [&](llvm::CodeGenOptLevel level) {
    return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
        triple, "x86-64-v2", "", llvm::TargetOptions(), llvm::Reloc::PIC_,
        std::nullopt, level));
  };
  std::unique_ptr<llvm::TargetMachine> fast =
      makeTM(llvm::CodeGenOptLevel::Aggressive);
  std::unique_ptr<llvm::TargetMachine> plain =
      makeTM(llvm::CodeGenOptLevel::None);
  m->setTargetTriple(triple);
  m->setDataLayout(fast->createDataLayout());
  // Both halves call across the split: give every definition external
  // linkage (the link step exports only the k3_* entry points).
  for (llvm::Function &f : *m)
    if (!f.isDeclaration())
      f.setLinkage(llvm::GlobalValue::ExternalLinkage);
  // GPU module handles and binaries are referenced across the split too.
  for (llvm::GlobalVariable &g : m->globals())
    if (!g.isDeclaration() && !g.getName().starts_with("llvm."))
      g.setLinkage(llvm::GlobalValue::ExternalLinkage);

  // Kernels and layer bodies: optimized at -O3.
  llvm::ValueToValueMapTy kernelMap, glueMap;
  std::unique_ptr<llvm::Module> kernels = llvm::CloneModule(
      *m, kernelMap, [](const llvm::GlobalValue *gv) {
        return !isGlue(*gv) && !isEntry(*gv);
      });
  auto optimize = makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0,
                                            fast.get());
  if (llvm::Error err = optimize(kernels.get()))
    return module.emitError("LLVM optimization failed: ")
           << llvm::toString(std::move(err));
  if (failed(emitObject(module, *kernels, *fast, objectPaths[0])))
    return failure();

  // The glue: compiled as is.
  std::unique_ptr<llvm::Module> glue = llvm::CloneModule(
      *m, glueMap, [](const llvm::GlobalValue *gv) { return isGlue(*gv); });
  if (failed(emitObject(module, *glue, *plain, objectPaths[1])))
    return failure();

  // The entry wrappers: their IR optimized at -O1 (each value straight
  // from the descriptor to @forward's argument), code generated as the
  // glue's (fast instruction selection: linear in the argument count).
  llvm::ValueToValueMapTy entryMap;
  std::unique_ptr<llvm::Module> entry = llvm::CloneModule(
      *m, entryMap, [](const llvm::GlobalValue *gv) { return isEntry(*gv); });
  auto optimizeEntry =
      makeOptimizingTransformer(/*optLevel=*/1, /*sizeLevel=*/0, plain.get());
  if (llvm::Error err = optimizeEntry(entry.get()))
    return module.emitError("LLVM optimization failed: ")
           << llvm::toString(std::move(err));
  return emitObject(module, *entry, *plain, objectPaths[2]);
}

LogicalResult mlir::k3::linkHostLibrary(ModuleOp module,
                                        ArrayRef<std::string> objectPaths,
                                        StringRef outputPath) {
  llvm::ErrorOr<std::string> cc = llvm::sys::findProgramByName("cc");
  if (!cc)
    return module.emitError("cannot link: no C compiler driver 'cc' on PATH "
                            "(install gcc or clang)");
  // Export the k3_* entry points only.
  SmallString<128> script;
  if (llvm::sys::fs::createTemporaryFile("k3c-exports", "map", script))
    return module.emitError("cannot create a temporary file");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(script, ec);
    if (ec)
      return module.emitError("cannot write ") << script;
    os << "{ global: k3_abi_version; k3_manifest_json; k3_forward; "
          "k3_fill_random; local: *; };\n";
  }
  std::string versionScript = ("-Wl,--version-script=" + script).str();
  SmallVector<StringRef> args = {*cc, "-shared", "-o", outputPath};
  for (const std::string &o : objectPaths)
    args.push_back(o);
  args.push_back(versionScript);
  args.push_back("-lm");
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(*cc, args, std::nullopt, {}, 0, 0, &error);
  llvm::sys::fs::remove(script);
  if (rc != 0)
    return module.emitError("linking '") << outputPath << "' failed"
                                         << (error.empty() ? "" : ": ") << error;
  return success();
}
