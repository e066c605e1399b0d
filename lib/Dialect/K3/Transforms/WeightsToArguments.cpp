//===- WeightsToArguments.cpp - k3.weight -> @forward arguments -----------===//

#include "k3/Dialect/K3/IR/K3.h"
#include "k3/Dialect/K3/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3WEIGHTSTOARGUMENTSPASS
#include "k3/Dialect/K3/Transforms/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {
struct K3WeightsToArgumentsPass
    : k3::impl::K3WeightsToArgumentsPassBase<K3WeightsToArgumentsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward || forward.isExternal()) {
      module.emitError("k3-weights-to-arguments needs a @forward function");
      return signalPassFailure();
    }
    SmallVector<WeightOp> weights;
    forward.walk([&](WeightOp op) { weights.push_back(op); });
    if (llvm::any_of(module.getOps<func::FuncOp>(), [&](func::FuncOp fn) {
          return fn != forward &&
                 fn.walk([](WeightOp) { return WalkResult::interrupt(); })
                     .wasInterrupted();
        })) {
      module.emitError("k3.weight ops must all be in @forward");
      return signalPassFailure();
    }
    // Insert after the tokens (argument 0), in IR order.
    Builder b(module.getContext());
    unsigned index = 1;
    for (WeightOp op : weights) {
      if (failed(forward.insertArgument(
              index, op.getType(),
              b.getDictionaryAttr(
                  b.getNamedAttr("k3.weight", op.getNameAttr())),
              op.getLoc())))
        return signalPassFailure();
      op.getResult().replaceAllUsesWith(forward.getArgument(index));
      op.erase();
      ++index;
    }
  }
};
} // namespace
