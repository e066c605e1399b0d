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

LogicalResult mlir::k3::emitHostObject(ModuleOp module, StringRef objectPath) {
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
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, "x86-64-v2", "", options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  m->setTargetTriple(triple);
  m->setDataLayout(tm->createDataLayout());

  auto optimize = makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0,
                                            tm.get());
  if (llvm::Error err = optimize(m.get()))
    return module.emitError("LLVM optimization failed: ")
           << llvm::toString(std::move(err));

  std::error_code ec;
  llvm::ToolOutputFile out(objectPath, ec, llvm::sys::fs::OF_None);
  if (ec)
    return module.emitError("cannot write '") << objectPath << "': " << ec.message();
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, out.os(), nullptr,
                              llvm::CodeGenFileType::ObjectFile))
    return module.emitError("the x86-64 target cannot emit object files");
  pm.run(*m);
  out.keep();
  return success();
}

LogicalResult mlir::k3::linkHostLibrary(ModuleOp module, StringRef objectPath,
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
    os << "{ global: k3_abi_version; k3_manifest_json; k3_forward; local: *; };\n";
  }
  std::string versionScript = ("-Wl,--version-script=" + script).str();
  SmallVector<StringRef> args = {*cc,   "-shared", "-o",          outputPath,
                                 objectPath, versionScript, "-lm"};
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(*cc, args, std::nullopt, {}, 0, 0, &error);
  llvm::sys::fs::remove(script);
  if (rc != 0)
    return module.emitError("linking '") << outputPath << "' failed"
                                         << (error.empty() ? "" : ": ") << error;
  return success();
}
