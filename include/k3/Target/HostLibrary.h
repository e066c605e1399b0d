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

/// Translates, optimizes (-O3) and compiles a module in the LLVM dialect to
/// an x86-64 (x86-64-v2) position-independent object file.
LogicalResult emitHostObject(ModuleOp module, StringRef objectPath);

/// Links `objectPath` into the shared library `outputPath` with the system C
/// compiler driver (`cc`), exporting only the k3_* entry points. The library
/// depends on libc and libm only.
LogicalResult linkHostLibrary(ModuleOp module, StringRef objectPath,
                              StringRef outputPath);

} // namespace mlir::k3

#endif // K3_TARGET_HOSTLIBRARY_H
