//===- k3-opt.cpp - the k3 optimizer driver -------------------------------===//
//
// The MLIR registry plus MlirOptMain: every upstream dialect and pass, the k3
// dialect and every k3 pass and pipeline.
//
//===----------------------------------------------------------------------===//

#include "k3/Dialect/K3/IR/K3.h"
#include "k3/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::k3::registerK3Passes();
  mlir::k3::registerK3Pipelines();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  registry.insert<mlir::k3::K3Dialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "k3 optimizer driver\n", registry));
}
