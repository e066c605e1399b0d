//===- EmitLibraryEntries.cpp - the library's exported C functions --------===//
//
// docs/ABI.md: k3_abi_version(), k3_manifest_json(), k3_forward(void **)
// and k3_fill_random(...), added to a module already in the LLVM dialect.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"
#include "k3/Target/Manifest.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3EMITLIBRARYENTRIESPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct K3EmitLibraryEntriesPass
    : k3::impl::K3EmitLibraryEntriesPassBase<K3EmitLibraryEntriesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    auto impl = module.lookupSymbol<LLVM::LLVMFuncOp>("_mlir_ciface_forward");
    auto manifest = module->getAttrOfType<StringAttr>("k3.manifest");
    if (!impl || !manifest) {
      module.emitError("k3-emit-library-entries needs _mlir_ciface_forward "
                       "and the k3.manifest attribute");
      return signalPassFailure();
    }
    // @forward is glue: one call per layer body and kernel, with thousands of
    // descriptor arguments for a deep model. Optimizing it buys nothing and
    // dominates compile time (K3: minutes), so LLVM leaves it as is.
    for (StringRef name : {"forward", "_mlir_ciface_forward"}) {
      if (auto fn = module.lookupSymbol<LLVM::LLVMFuncOp>(name)) {
        Builder attrs(ctx);
        fn.setPassthroughAttr(attrs.getArrayAttr(
            {attrs.getStringAttr("noinline"), attrs.getStringAttr("optnone")}));
      }
    }

    Location loc = module.getLoc();
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64);
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    Type voidTy = LLVM::LLVMVoidType::get(ctx);

    // uint32_t k3_abi_version(void)
    {
      auto fn = LLVM::LLVMFuncOp::create(b, loc, "k3_abi_version",
                                         LLVM::LLVMFunctionType::get(i32, {}));
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(fn.addEntryBlock(b));
      Value v = LLVM::ConstantOp::create(b, loc, i32, k3::kLibraryAbiVersion);
      LLVM::ReturnOp::create(b, loc, v);
    }
    // const char *k3_manifest_json(void)
    {
      std::string text = manifest.str();
      text.push_back('\0');
      auto arrayTy = LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8),
                                              text.size());
      auto global = LLVM::GlobalOp::create(
          b, loc, arrayTy, /*isConstant=*/true, LLVM::Linkage::Internal,
          "k3_manifest_text", b.getStringAttr(text));
      auto fn = LLVM::LLVMFuncOp::create(b, loc, "k3_manifest_json",
                                         LLVM::LLVMFunctionType::get(ptr, {}));
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(fn.addEntryBlock(b));
      Value addr = LLVM::AddressOfOp::create(b, loc, global);
      LLVM::ReturnOp::create(b, loc, addr);
    }
    // void k3_forward(void **args): args[i] -> i-th descriptor pointer.
    {
      auto fn = LLVM::LLVMFuncOp::create(
          b, loc, "k3_forward", LLVM::LLVMFunctionType::get(voidTy, {ptr}));
      OpBuilder::InsertionGuard g(b);
      Block *entry = fn.addEntryBlock(b);
      b.setInsertionPointToStart(entry);
      SmallVector<Value> operands;
      unsigned n = impl.getFunctionType().getNumParams();
      for (unsigned i = 0; i < n; ++i) {
        if (impl.getFunctionType().getParamType(i) != ptr) {
          impl.emitError("every argument of k3_forward must be a memref");
          return signalPassFailure();
        }
        Value slot = LLVM::GEPOp::create(
            b, loc, ptr, ptr, entry->getArgument(0),
            ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
        operands.push_back(LLVM::LoadOp::create(b, loc, ptr, slot));
      }
      LLVM::CallOp::create(b, loc, impl, operands);
      LLVM::ReturnOp::create(b, loc, ValueRange{});
      (void)i64;
    }
    // void k3_fill_random(memref descriptor *words, uint64_t seed,
    //                     uint64_t stream, int32_t kind, int32_t range,
    //                     int32_t off, float scale) (Kernels/Random.mlir).
    if (auto fill =
            module.lookupSymbol<LLVM::LLVMFuncOp>("_mlir_ciface_fill_random")) {
      auto fn = LLVM::LLVMFuncOp::create(b, loc, "k3_fill_random",
                                         fill.getFunctionType());
      OpBuilder::InsertionGuard g(b);
      Block *entry = fn.addEntryBlock(b);
      b.setInsertionPointToStart(entry);
      LLVM::CallOp::create(b, loc, fill, entry->getArguments());
      LLVM::ReturnOp::create(b, loc, ValueRange{});
    }
  }
};
} // namespace
