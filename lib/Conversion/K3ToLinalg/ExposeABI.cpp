//===- ExposeABI.cpp - @forward with the library calling convention -------===//
//
// docs/ABI.md: every argument of k3_forward is a memref descriptor; states
// are updated in place; the logits are written into the last argument.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3EXPOSEABIPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
/// A function result that returns one of the function's own buffer
/// arguments (state updated in place) is dropped; at every call site its
/// users take the buffer passed in instead.
LogicalResult dropInPlaceResults(ModuleOp module, func::FuncOp fn) {
  if (fn.isExternal() || !fn.getBody().hasOneBlock())
    return success();
  auto ret = cast<func::ReturnOp>(fn.front().getTerminator());
  SmallVector<std::pair<unsigned, unsigned>> dropped; // (result, argument)
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto arg = dyn_cast<BlockArgument>(v);
    if (arg && arg.getOwner() == &fn.front() && isa<MemRefType>(v.getType()))
      dropped.push_back({i, arg.getArgNumber()});
  }
  if (dropped.empty())
    return success();
  llvm::BitVector drop(fn.getNumResults());
  for (auto [r, a] : dropped)
    drop.set(r);

  auto uses = SymbolTable::getSymbolUses(fn, module);
  for (const SymbolTable::SymbolUse &use : *uses) {
    auto call = dyn_cast<func::CallOp>(use.getUser());
    if (!call)
      return fn.emitError("state-returning function used by a non-call");
    OpBuilder b(call);
    SmallVector<Type> types;
    for (unsigned i = 0; i < call.getNumResults(); ++i)
      if (!drop.test(i))
        types.push_back(call.getResult(i).getType());
    auto newCall = func::CallOp::create(b, call.getLoc(), call.getCallee(),
                                        types, call.getOperands());
    newCall->setAttrs(call->getAttrs());
    unsigned next = 0;
    for (unsigned i = 0; i < call.getNumResults(); ++i) {
      if (drop.test(i))
        continue;
      call.getResult(i).replaceAllUsesWith(newCall.getResult(next++));
    }
    for (auto [r, a] : dropped)
      call.getResult(r).replaceAllUsesWith(call.getOperand(a));
    call.erase();
  }
  SmallVector<Value> kept;
  for (unsigned i = 0; i < ret.getNumOperands(); ++i)
    if (!drop.test(i))
      kept.push_back(ret.getOperand(i));
  OpBuilder b(ret);
  func::ReturnOp::create(b, ret.getLoc(), kept);
  ret.erase();
  if (failed(fn.eraseResults(drop)))
    return failure();
  return success();
}

/// The call inside `fn` that writes its result, when `fn` is a
/// destination-passing wrapper: it allocates a buffer, passes it as the last
/// operand of one call whose other operands are `fn`'s arguments in order,
/// and returns it (`bufferization.to_tensor ... restrict`); everything else
/// in it is free of memory effects. Null otherwise.
func::CallOp writerOf(func::FuncOp fn) {
  if (fn.isExternal() || !fn.getBody().hasOneBlock() ||
      fn.getNumResults() != 1)
    return nullptr;
  Block &body = fn.front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  auto toTensor = ret.getOperand(0).getDefiningOp<bufferization::ToTensorOp>();
  auto alloc = toTensor ? toTensor.getBuffer().getDefiningOp<memref::AllocOp>()
                        : nullptr;
  if (!alloc || !toTensor.getRestrict())
    return nullptr;
  func::CallOp writer;
  for (Operation *user : alloc->getUsers()) {
    if (user == toTensor)
      continue;
    auto call = dyn_cast<func::CallOp>(user);
    if (writer || !call || call.getNumResults() != 0 ||
        call.getNumOperands() != body.getNumArguments() + 1 ||
        call.getOperands().back() != alloc.getResult() ||
        !llvm::equal(call.getOperands().drop_back(), body.getArguments()))
      return nullptr;
    writer = call;
  }
  for (Operation &op : body)
    if (&op != alloc && &op != writer && &op != toTensor && &op != ret &&
        !isMemoryEffectFree(&op))
      return nullptr;
  return writer;
}

/// The logits written where they go: when `store`'s tensor is (up to
/// casts) the result of a call of a destination-passing wrapper (as
/// @k3k_lm_head around @k3k_lm_head_rounded, Kernels/Dense.mlir), the
/// wrapped call is made with the logits argument as its destination
/// instead (where the wrapper was called: the destination is an argument
/// of @forward), so that no copy of the logits follows.
void writeInPlace(ModuleOp module,
                  bufferization::MaterializeInDestinationOp store) {
  Value source = store.getSource();
  SmallVector<tensor::CastOp> casts;
  while (auto cast = source.getDefiningOp<tensor::CastOp>()) {
    casts.push_back(cast);
    source = cast.getSource();
  }
  auto call = source.getDefiningOp<func::CallOp>();
  auto fn = call ? module.lookupSymbol<func::FuncOp>(call.getCallee())
                 : nullptr;
  func::CallOp writer = fn ? writerOf(fn) : nullptr;
  if (!writer || !call->hasOneUse() ||
      llvm::any_of(casts, [](tensor::CastOp c) { return !c->hasOneUse(); }))
    return;
  Value dest = store.getDest();
  Type want = writer.getOperands().back().getType();
  if (!memref::CastOp::areCastCompatible(dest.getType(), want))
    return;
  OpBuilder b(call);
  if (dest.getType() != want)
    dest = memref::CastOp::create(b, store.getLoc(), want, dest);
  SmallVector<Value> operands(call.getOperands());
  operands.push_back(dest);
  func::CallOp::create(b, call.getLoc(), writer.getCallee(), TypeRange{},
                       operands);
  store.erase();
  for (tensor::CastOp c : casts)
    c.erase();
  call.erase();
}

struct K3ExposeABIPass : k3::impl::K3ExposeABIPassBase<K3ExposeABIPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto fn : llvm::to_vector(module.getOps<func::FuncOp>()))
      if (fn.getSymName() != "forward" &&
          failed(dropInPlaceResults(module, fn)))
        return signalPassFailure();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward || !forward.getBody().hasOneBlock()) {
      module.emitError("k3-expose-abi needs a one-block @forward");
      return signalPassFailure();
    }
    Block &entry = forward.front();
    auto ret = cast<func::ReturnOp>(entry.getTerminator());
    if (ret.getNumOperands() == 0 ||
        !isa<RankedTensorType>(ret.getOperand(0).getType())) {
      forward.emitError("@forward must return the logits first");
      return signalPassFailure();
    }
    // The other results are state buffers: convert-k3-to-linalg makes every
    // state op update its argument buffer in place and return it, so these
    // are the caller's buffers and need not be returned.
    for (Value v : ret.getOperands().drop_front()) {
      if (!isa<MemRefType>(v.getType())) {
        forward.emitError("a state result of @forward is not a buffer");
        return signalPassFailure();
      }
    }

    // Tensor arguments become memrefs read through to_tensor.
    OpBuilder b = OpBuilder::atBlockBegin(&entry);
    for (BlockArgument arg : entry.getArguments()) {
      auto t = dyn_cast<RankedTensorType>(arg.getType());
      if (!t)
        continue;
      arg.setType(MemRefType::get(t.getShape(), t.getElementType()));
      auto toTensor = bufferization::ToTensorOp::create(b, arg.getLoc(), t, arg,
                                                        /*restrict=*/true);
      arg.replaceAllUsesExcept(toTensor.getResult(), toTensor);
    }

    // The logits go into a trailing output buffer.
    Value logits = ret.getOperand(0);
    auto lt = cast<RankedTensorType>(logits.getType());
    unsigned outIndex = entry.getNumArguments();
    Builder attrs(module.getContext());
    if (failed(forward.insertArgument(
            outIndex, MemRefType::get(lt.getShape(), lt.getElementType()),
            attrs.getDictionaryAttr(
                attrs.getNamedAttr("k3.abi", attrs.getStringAttr("logits"))),
            forward.getLoc())))
      return signalPassFailure();
    b.setInsertionPoint(ret);
    auto store = bufferization::MaterializeInDestinationOp::create(
        b, ret.getLoc(), logits, forward.getArgument(outIndex));
    store.setRestrict(true);
    store.setWritable(true);
    func::ReturnOp::create(b, ret.getLoc());
    ret.erase();
    writeInPlace(module, store);

    forward.setType(FunctionType::get(module.getContext(),
                                      entry.getArgumentTypes(), {}));
    // The manifest describes the arguments; LLVM has no use for the tags.
    for (unsigned i = 0, e = forward.getNumArguments(); i < e; ++i)
      forward.setArgAttrs(i, attrs.getDictionaryAttr({}));
    forward->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  }
};
} // namespace
