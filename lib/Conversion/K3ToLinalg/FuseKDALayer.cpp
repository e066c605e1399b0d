//===- FuseKDALayer.cpp - a KDA layer's token mixing as one call ----------===//
//
// A KDA layer convolves its q, k and v projections (K3_SPEC §4.2), runs
// the KDA core on them (§4.3–4.6) and normalises the output with the gated
// RMSNorm (§4.7): after convert-k3-to-linalg, three calls of the short
// convolution, one of the KDA and one of the norm, with casts and the
// [T, H·D] -> [T, H, D] reshapes between them. A decode step makes five
// small kernels of them, each a launch and a wait on the critical path.
// Here the chain becomes one call of the function marked
// `k3.kda_layer = {conv, kda, norm}` (Kernels/KDA.mlir: @k3k_kda_layer),
// which the decode step runs as one kernel (k3-gpu-kda-decode) and a
// prefill chunk as the calls it had.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEKDALAYERPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr llvm::StringLiteral kAttr = "k3.kda_layer";

/// The marked function and the three it names.
struct Layer {
  func::FuncOp fn, conv, kda, norm;
};

/// `v` without the `tensor.cast`s it went through, each its value's only
/// use.
Value uncast(Value v) {
  while (auto cast = v.getDefiningOp<tensor::CastOp>()) {
    if (!cast.getSource().hasOneUse())
      break;
    v = cast.getSource();
  }
  return v;
}

/// The call of `callee` whose one result becomes `v` through casts and at
/// most one reshape of its last dimension in two ([T, C] -> [T, H, D]),
/// each the only use of what it takes.
func::CallOp producer(Value v, func::FuncOp callee, bool reshaped) {
  if (!v.hasOneUse())
    return {};
  v = uncast(v);
  if (reshaped) {
    auto expand = v.getDefiningOp<tensor::ExpandShapeOp>();
    if (!expand || expand.getSrcType().getRank() != 2 ||
        expand.getResultType().getRank() != 3 ||
        expand.getReassociationIndices() !=
            SmallVector<ReassociationIndices>{{0}, {1, 2}} ||
        !expand.getSrc().hasOneUse())
      return {};
    v = uncast(expand.getSrc());
  }
  auto call = v.getDefiningOp<func::CallOp>();
  return call && call.getCallee() == callee.getSymName() &&
                 call->getNumResults() == 1 && v.hasOneUse()
             ? call
             : func::CallOp();
}

/// Replaces the chain that ends in `norm` (a call of layer.norm) by one
/// call of layer.fn, if the chain is whole: its o the only use of a KDA
/// call's result, whose q, k and v are each the only use of a
/// convolution's, all in one block, and the state buffers (the calls'
/// memref arguments) used by nothing else.
void fuse(Layer layer, func::CallOp norm) {
  func::CallOp kda = producer(norm.getOperand(0), layer.kda, false);
  if (!kda || kda->getBlock() != norm->getBlock() || kda.getNumOperands() < 3)
    return;
  SmallVector<func::CallOp> convs;
  for (unsigned i = 0; i < 3; ++i) {
    func::CallOp conv = producer(kda.getOperand(i), layer.conv, true);
    if (!conv || conv->getBlock() != norm->getBlock() ||
        llvm::is_contained(convs, conv))
      return;
    convs.push_back(conv);
  }
  SmallVector<Operation *> calls = {convs[0], convs[1], convs[2], kda, norm};
  SmallVector<Value> args;
  for (func::CallOp conv : convs)
    llvm::append_range(args, conv.getOperands());
  llvm::append_range(args, kda.getOperands().drop_front(3));
  llvm::append_range(args, norm.getOperands().drop_front(1));
  // The calls move to the norm's place: their buffers (tails, states) may
  // have no other users for that to keep the order of every access.
  for (Value v : args)
    if (isa<MemRefType>(v.getType()))
      for (Operation *user : v.getUsers())
        if (!llvm::is_contained(calls, user))
          return;
  if (TypeRange(ValueRange(args)) != layer.fn.getArgumentTypes() ||
      norm.getResultTypes() != layer.fn.getResultTypes())
    return;
  OpBuilder b(norm);
  auto fused = func::CallOp::create(b, norm.getLoc(), layer.fn, args);
  norm.getResult(0).replaceAllUsesWith(fused.getResult(0));
  // The chain's casts and reshapes die with it.
  for (Operation *call : llvm::reverse(calls)) {
    SmallVector<Value> inputs(call->getOperands());
    call->erase();
    for (Value in : inputs)
      for (Operation *op = in.getDefiningOp();
           op && op->use_empty() &&
           isa<tensor::CastOp, tensor::ExpandShapeOp>(op);) {
        Value src = op->getOperand(0);
        op->erase();
        op = src.getDefiningOp();
      }
  }
}

struct K3FuseKDALayerPass
    : k3::impl::K3FuseKDALayerPassBase<K3FuseKDALayerPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Layer> layers;
    for (auto fn : module.getOps<func::FuncOp>()) {
      auto spec = fn->getAttrOfType<DictionaryAttr>(kAttr);
      if (!fn->hasAttr(kAttr))
        continue;
      auto lookup = [&](StringRef key) {
        auto ref = spec ? spec.getAs<FlatSymbolRefAttr>(key) : nullptr;
        return ref ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(fn, ref)
                   : func::FuncOp();
      };
      Layer l{fn, lookup("conv"), lookup("kda"), lookup("norm")};
      if (!l.conv || !l.kda || !l.norm) {
        fn.emitError() << kAttr
                       << ": expected {conv = @c, kda = @k, norm = @n} "
                          "naming functions";
        return signalPassFailure();
      }
      layers.push_back(l);
    }
    for (Layer &l : layers) {
      SmallVector<func::CallOp> norms;
      module.walk([&](func::CallOp call) {
        if (call.getCallee() == l.norm.getSymName() &&
            call->getNumResults() == 1 && call.getNumOperands() >= 1)
          norms.push_back(call);
      });
      for (func::CallOp norm : norms)
        fuse(l, norm);
    }
  }
};
} // namespace
