//===- GPUKernelAccess.cpp - what each kernel reads and writes ------------===//
//
// After outlining, each kernel `@k` gets the device constant `k_k3_access`:
// the module's character (`g`: it writes a global of its module in global
// memory) and one character per parameter as launched (`w`, `r` or `-`), from
// which the runtime (libk3rt_cuda) joins a call's kernels by the buffers they
// share instead of in one chain (Passes.td, K3GPUKernelAccessPass).
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUKERNELACCESSPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
/// The suffix of the constant the runtime looks for
/// (runtime/lib/cuda/MgpuRuntime.c).
constexpr llvm::StringLiteral kSuffix = "_k3_access";

enum class Use { None, Read, Write };

/// How a kernel uses the memory behind `root`, following it through views.
/// Anything whose effects are not known is a write.
Use memoryUse(Value root) {
  Use use = Use::None;
  SmallVector<Value> work{root};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (OpOperand &operand : v.getUses()) {
      Operation *user = operand.getOwner();
      auto view = dyn_cast<ViewLikeOpInterface>(user);
      if (view && view.getViewSource() == v) {
        for (Value r : user->getResults())
          if (isa<BaseMemRefType>(r.getType()))
            work.push_back(r);
        continue;
      }
      if (auto meta = dyn_cast<memref::ExtractStridedMetadataOp>(user)) {
        work.push_back(meta.getBaseBuffer());
        continue;
      }
      if (isa<memref::DimOp>(user))
        continue;
      auto effects = dyn_cast<MemoryEffectOpInterface>(user);
      // A raw pointer leaves what this pass can follow, unless it is
      // marked as only read through.
      if (isa<memref::ExtractAlignedPointerAsIndexOp>(user)) {
        if (!user->hasAttr(k3::kReadOnlyPointer))
          return Use::Write;
        use = Use::Read;
        continue;
      }
      if (!effects)
        return Use::Write;
      SmallVector<MemoryEffects::EffectInstance> list;
      effects.getEffects(list);
      bool touched = false;
      for (const MemoryEffects::EffectInstance &e : list) {
        if (e.getValue() && e.getValue() != v)
          continue;
        if (!isa<MemoryEffects::Read>(e.getEffect()))
          return Use::Write;
        touched = true;
        use = Use::Read;
      }
      // An op with no effect on v that makes memrefs of it (a cast the
      // interfaces above do not name): they alias v.
      if (!touched)
        for (Value r : user->getResults())
          if (isa<BaseMemRefType>(r.getType()))
            work.push_back(r);
    }
  }
  return use;
}

/// Whether `func` writes a global of its module in global memory (not
/// workgroup memory, which is per block).
bool writesModuleGlobal(gpu::GPUFuncOp func, gpu::GPUModuleOp module) {
  bool writes = false;
  func.walk([&](Operation *op) {
    if (auto get = dyn_cast<memref::GetGlobalOp>(op)) {
      auto global = module.lookupSymbol<memref::GlobalOp>(get.getNameAttr());
      if (global && global.getConstant())
        return;
      if (gpu::GPUDialect::isWorkgroupMemoryAddressSpace(
              get.getType().getMemorySpace()))
        return;
      if (memoryUse(get) == Use::Write)
        writes = true;
    } else if (auto addr = dyn_cast<LLVM::AddressOfOp>(op)) {
      auto global = module.lookupSymbol<LLVM::GlobalOp>(addr.getGlobalName());
      if (global && (global.getConstant() ||
                     global.getAddrSpace() ==
                         static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared)))
        return;
      writes = true;
    }
  });
  return writes;
}

/// The access string of `func` (Passes.td), or none when an argument is
/// neither a ranked memref nor a number (the runtime then orders the kernel
/// after every kernel before it).
std::optional<std::string> accessOf(gpu::GPUFuncOp func,
                                    gpu::GPUModuleOp module) {
  std::string access(1, writesModuleGlobal(func, module) ? 'g' : '-');
  for (BlockArgument arg : func.getArguments()) {
    auto memref = dyn_cast<MemRefType>(arg.getType());
    if (!memref) {
      if (!isa<IntegerType, IndexType, FloatType>(arg.getType()))
        return std::nullopt;
      access += '-';
      continue;
    }
    Use use = memoryUse(arg);
    char c = use == Use::Write ? 'w' : use == Use::Read ? 'r' : '-';
    // Allocated and aligned pointers, offset, sizes, strides.
    access += std::string(2, c);
    access += std::string(1 + 2 * memref.getRank(), '-');
  }
  return access;
}

struct K3GPUKernelAccessPass
    : k3::impl::K3GPUKernelAccessPassBase<K3GPUKernelAccessPass> {
  void runOnOperation() override {
    getOperation().walk([&](gpu::GPUModuleOp module) {
      OpBuilder b(module.getContext());
      SmallVector<gpu::GPUFuncOp> kernels;
      for (auto func : module.getOps<gpu::GPUFuncOp>())
        if (func.isKernel() && !func.isExternal())
          kernels.push_back(func);
      for (gpu::GPUFuncOp func : kernels) {
        std::string name = (func.getName() + kSuffix).str();
        if (module.lookupSymbol(name))
          continue;
        std::optional<std::string> access = accessOf(func, module);
        if (!access)
          continue;
        auto type = LLVM::LLVMArrayType::get(b.getI8Type(), access->size());
        b.setInsertionPointToEnd(module.getBody());
        LLVM::GlobalOp::create(
            b, func.getLoc(), type, /*isConstant=*/true,
            LLVM::Linkage::External, name, b.getStringAttr(*access),
            /*alignment=*/1,
            static_cast<unsigned>(NVVM::NVVMMemorySpace::Global));
      }
    });
  }
};
} // namespace
