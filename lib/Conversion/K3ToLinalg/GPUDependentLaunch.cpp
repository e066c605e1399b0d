//===- GPUDependentLaunch.cpp - kernels that launch before their turn -----===//
//
// Programmatic dependent launch (sm_90): every kernel waits for the kernel
// before it with griddepcontrol.wait at its entry, so the runtime may
// dispatch it before that kernel has finished (a programmatic graph edge);
// the module's `k3_dependent_launch` global tells the runtime it may.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUDEPENDENTLAUNCHPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
/// The marker the runtime looks for (runtime/lib/cuda/MgpuRuntime.c).
constexpr llvm::StringLiteral kMarker = "k3_dependent_launch";

struct K3GPUDependentLaunchPass
    : k3::impl::K3GPUDependentLaunchPassBase<K3GPUDependentLaunchPass> {
  using Base::Base;

  void runOnOperation() override {
    if (sm < 90)
      return;
    getOperation().walk([&](gpu::GPUModuleOp module) {
      OpBuilder b(module.getContext());
      bool any = false;
      for (auto func : module.getOps<gpu::GPUFuncOp>()) {
        if (!func.isKernel() || func.isExternal())
          continue;
        b.setInsertionPointToStart(&func.getBody().front());
        for (auto kind : {NVVM::GridDepActionKind::wait,
                          NVVM::GridDepActionKind::launch_dependents})
          NVVM::GriddepcontrolOp::create(b, func.getLoc(), kind);
        any = true;
      }
      if (!any || module.lookupSymbol(kMarker))
        return;
      b.setInsertionPointToEnd(module.getBody());
      auto i32 = b.getI32Type();
      LLVM::GlobalOp::create(b, module.getLoc(), i32, /*isConstant=*/false,
                             LLVM::Linkage::External, kMarker,
                             b.getI32IntegerAttr(1), /*alignment=*/4,
                             /*addrSpace=*/1);
    });
  }
};
} // namespace
