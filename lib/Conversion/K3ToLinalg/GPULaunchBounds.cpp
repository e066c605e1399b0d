//===- GPULaunchBounds.cpp - occupancy a kernel's registers must allow ----===//
//
// A pass that builds a launch and wants its kernel to leave room for a
// number of resident blocks per SM names the kernel (gpu.launch's
// `function`) and records `k3.launch_bounds = {name = blocks}` on the
// function that holds the launch: gpu-kernel-outlining drops the launch's
// own attributes. After outlining, each kernel so named gets
// nvvm.minctasm, PTX .minnctapersm (with the .maxntid that outlining's
// known_block_size gives), from which ptxas caps the registers per thread.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPULAUNCHBOUNDSPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr llvm::StringLiteral kAttr = "k3.launch_bounds";

struct K3GPULaunchBoundsPass
    : k3::impl::K3GPULaunchBoundsPassBase<K3GPULaunchBoundsPass> {
  void runOnOperation() override {
    auto result = getOperation().walk([&](func::FuncOp f) {
      Attribute attr = f->getAttr(kAttr);
      if (!attr)
        return WalkResult::advance();
      auto bounds = dyn_cast<DictionaryAttr>(attr);
      auto fail = [&](const Twine &why) {
        f.emitError() << kAttr << ": " << why;
        return WalkResult::interrupt();
      };
      if (!bounds)
        return fail("expected a dictionary {kernel name = blocks per SM}");
      for (NamedAttribute entry : bounds) {
        auto blocks = dyn_cast<IntegerAttr>(entry.getValue());
        if (!blocks || blocks.getInt() < 1 || blocks.getInt() > 32)
          return fail("blocks per SM of '" + entry.getName().strref() +
                      "' must be an integer from 1 to 32");
      }
      llvm::StringSet<> bounded;
      OpBuilder b(f.getContext());
      f.walk([&](gpu::LaunchFuncOp launch) {
        StringRef name = launch.getKernelName().getValue();
        auto blocks = bounds.getAs<IntegerAttr>(name);
        if (!blocks)
          return;
        // (The launch's verifier has found its kernel.)
        auto kernel = SymbolTable::lookupNearestSymbolFrom<gpu::GPUFuncOp>(
            launch, launch.getKernel());
        kernel->setAttr("nvvm.minctasm", b.getI32IntegerAttr(blocks.getInt()));
        bounded.insert(name);
      });
      for (NamedAttribute entry : bounds)
        if (!bounded.contains(entry.getName().strref()))
          return fail("the function launches no kernel '" +
                      entry.getName().strref() + "'");
      f->removeAttr(kAttr);
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
