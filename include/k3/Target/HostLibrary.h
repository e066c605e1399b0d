//===- HostLibrary.h - LLVM dialect -> object -> shared library -*- C++ -*-===//

#ifndef K3_TARGET_HOSTLIBRARY_H
#define K3_TARGET_HOSTLIBRARY_H

#include "mlir/Support/LLVM.h"

#include <string>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace mlir::k3 {

/// Translates a module in the LLVM dialect to LLVM IR and prints it.
LogicalResult printLLVMIR(ModuleOp module, raw_ostream &os);

/// Translates a module in the LLVM dialect and compiles it to three x86-64
/// (x86-64-v2) position-independent object files: the kernels and layer
/// bodies optimized at -O3 (objectPaths[0]), the per-layer glue of @forward
/// and the manifest entry points unoptimized (objectPaths[1]), which keeps
/// the compile time of deep models linear in depth, and k3_forward's
/// wrappers (the descriptors unpacked into @forward's arguments) with their
/// IR at -O1 (objectPaths[2]).
LogicalResult emitHostObjects(ModuleOp module, ArrayRef<std::string> objectPaths);

/// How many object paths emitHostObjects takes.
constexpr int kHostObjects = 3;

/// Links the objects into the shared library `outputPath` with the system C
/// compiler driver (`cc`), exporting only the k3_* entry points. The library
/// depends on libc and libm only.
LogicalResult linkHostLibrary(ModuleOp module, ArrayRef<std::string> objectPaths,
                              StringRef outputPath);

} // namespace mlir::k3

#endif // K3_TARGET_HOSTLIBRARY_H
