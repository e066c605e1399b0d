//===- GPUFatbin.cpp - every target's cubin and PTX in one fatbin ---------===//
//
// The NVVM serializer makes one object per target; the host code embeds one
// object per gpu.binary. With several targets (--target=sm_90,sm_100), this
// pass assembles each target's PTX with ptxas and packs the cubins and the
// PTX into a single fatbin with fatbinary, as nvcc does for several
// -gencode options; the driver then loads the cubin of the GPU it runs on.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cstdlib>
#include <optional>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUFATBINPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
/// A temporary file, removed when it goes out of scope.
struct TempFile {
  SmallString<128> path;
  TempFile() = default;
  TempFile(const TempFile &) = delete;
  ~TempFile() {
    if (!path.empty())
      llvm::sys::fs::remove(path);
  }
  LogicalResult create(StringRef suffix) {
    return success(!llvm::sys::fs::createTemporaryFile("k3c", suffix, path));
  }
};

/// A CUDA toolkit program: $CUDA_HOME/bin (or CUDA_ROOT, CUDA_PATH), the
/// usual install location, then PATH.
std::optional<std::string> findTool(StringRef name) {
  SmallVector<std::string> dirs;
  for (const char *env : {"CUDA_HOME", "CUDA_ROOT", "CUDA_PATH"})
    if (const char *dir = std::getenv(env))
      dirs.push_back(dir);
  dirs.push_back("/usr/local/cuda");
  for (const std::string &dir : dirs) {
    SmallString<128> path(dir);
    llvm::sys::path::append(path, "bin", name);
    if (llvm::sys::fs::can_execute(path))
      return std::string(path);
  }
  if (llvm::ErrorOr<std::string> found = llvm::sys::findProgramByName(name))
    return *found;
  return std::nullopt;
}

/// Runs `tool args...`; its output goes into the error if it fails.
LogicalResult runTool(Operation *op, StringRef tool,
                      ArrayRef<std::string> args) {
  TempFile log;
  if (failed(log.create("log")))
    return op->emitError("k3-gpu-fatbin: cannot create a temporary file");
  SmallVector<StringRef> argv = {tool};
  for (const std::string &a : args)
    argv.push_back(a);
  std::optional<StringRef> redirects[] = {std::nullopt, log.path.str(),
                                          log.path.str()};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(tool, argv, /*Env=*/std::nullopt,
                                     redirects, /*SecondsToWait=*/0,
                                     /*MemoryLimit=*/0, &message);
  if (rc == 0)
    return success();
  std::string output;
  if (auto buffer = llvm::MemoryBuffer::getFile(log.path))
    output = (*buffer)->getBuffer().trim().str();
  return op->emitError() << "k3-gpu-fatbin: " << tool << " failed (exit "
                         << rc << (message.empty() ? "" : ", " + message)
                         << ")" << (output.empty() ? "" : ": " + output);
}

LogicalResult writeFile(StringRef path, StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return failure();
  os << bytes;
  os.close();
  return success(!os.has_error());
}

struct K3GPUFatbinPass
    : public k3::impl::K3GPUFatbinPassBase<K3GPUFatbinPass> {
  using Base::Base;

  LogicalResult pack(gpu::BinaryOp binary, StringRef ptxas,
                     StringRef fatbinary) {
    SmallVector<std::unique_ptr<TempFile>> files;
    auto temp = [&](StringRef suffix) -> TempFile * {
      files.push_back(std::make_unique<TempFile>());
      return succeeded(files.back()->create(suffix)) ? files.back().get()
                                                     : nullptr;
    };
    std::vector<std::string> images;
    for (Attribute a : binary.getObjects()) {
      auto object = cast<gpu::ObjectAttr>(a);
      auto target = dyn_cast<NVVM::NVVMTargetAttr>(object.getTarget());
      if (!target || object.getFormat() != gpu::CompilationTarget::Assembly)
        return binary.emitError(
            "k3-gpu-fatbin: expects PTX of NVVM targets (run "
            "gpu-module-to-binary with format=isa first)");
      StringRef chip = target.getChip();
      if (!chip.consume_front("sm_"))
        return binary.emitError() << "k3-gpu-fatbin: target chip '"
                                  << target.getChip() << "' is not sm_NN";
      TempFile *ptx = temp("ptx"), *cubin = temp("cubin");
      if (!ptx || !cubin ||
          failed(writeFile(ptx->path, object.getObject().getValue())))
        return binary.emitError("k3-gpu-fatbin: cannot write a temporary "
                                "file");
      if (failed(runTool(binary, ptxas,
                         {"-arch=sm_" + chip.str(),
                          "-O" + std::to_string(optLevel), ptx->path.str().str(),
                          "-o", cubin->path.str().str()})))
        return failure();
      images.push_back("--image3=kind=elf,sm=" + chip.str() +
                       ",file=" + cubin->path.str().str());
      images.push_back("--image3=kind=ptx,sm=" + chip.str() +
                       ",file=" + ptx->path.str().str());
    }
    TempFile *out = temp("fatbin");
    if (!out)
      return binary.emitError("k3-gpu-fatbin: cannot create a temporary "
                              "file");
    std::vector<std::string> args = {"-64", "--compress=false",
                                     "--create=" + out->path.str().str()};
    args.insert(args.end(), images.begin(), images.end());
    if (failed(runTool(binary, fatbinary, args)))
      return failure();
    auto bytes = llvm::MemoryBuffer::getFile(out->path, /*IsText=*/false);
    if (!bytes)
      return binary.emitError("k3-gpu-fatbin: cannot read the fatbin");
    auto first = cast<gpu::ObjectAttr>(binary.getObjects()[0]);
    auto packed = gpu::ObjectAttr::get(
        &getContext(), first.getTarget(), gpu::CompilationTarget::Fatbin,
        StringAttr::get(&getContext(), (*bytes)->getBuffer()),
        first.getProperties(), first.getKernels());
    binary.setObjectsAttr(ArrayAttr::get(&getContext(), {packed}));
    return success();
  }

  void runOnOperation() override {
    SmallVector<gpu::BinaryOp> binaries;
    getOperation()->walk([&](gpu::BinaryOp b) { binaries.push_back(b); });
    if (binaries.empty())
      return;
    std::optional<std::string> ptxas = findTool("ptxas");
    std::optional<std::string> fatbinary = findTool("fatbinary");
    if (!ptxas || !fatbinary) {
      getOperation().emitError()
          << "k3-gpu-fatbin: the CUDA toolkit's " << (!ptxas ? "ptxas" : "fatbinary")
          << " was not found (set CUDA_HOME to the toolkit)";
      return signalPassFailure();
    }
    for (gpu::BinaryOp b : binaries)
      if (failed(pack(b, *ptxas, *fatbinary)))
        return signalPassFailure();
  }
};
} // namespace
