//===- GroupProducts.cpp - products of one input as one call -------------===//
//
// A decode step multiplies the same few tokens by several weight matrices
// in a row: a KDA layer's q, k, v, f_a, b and g projections (K3_SPEC §4.1),
// an MLA layer's q_a and kv_a (§5.1), an MLP's gate and up (§2). Each was
// a launch of its own, and a projection of one wave or less loses its ramp
// and tail (BENCHMARKS.md, eighteenth and twentieth sessions: 176 MB
// projections at 3.5-4.2 TB/s against 4.6 for the 19 waves of the LM head).
// Here the calls with one input become one call, whose few-token products
// k3-gpu-skinny-mma builds as one kernel over all the matrices' row blocks.
// Each output is summed exactly as by its own call.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GROUPPRODUCTSPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr llvm::StringLiteral kAttr = "k3.product_group";

/// A function marked `k3.product_group = {few, many, few_tokens}` and the
/// three functions it names.
struct Product {
  func::FuncOp fn, few, many, fewTokens;
};

FailureOr<Product> productOf(func::FuncOp fn) {
  auto fail = [&](const Twine &why) {
    return fn.emitError() << kAttr << ": " << why, failure();
  };
  auto spec = fn->getAttrOfType<DictionaryAttr>(kAttr);
  auto lookup = [&](StringRef key) {
    auto ref = spec ? spec.getAs<FlatSymbolRefAttr>(key) : nullptr;
    return ref ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(fn, ref)
               : func::FuncOp();
  };
  Product p{fn, lookup("few"), lookup("many"), lookup("few_tokens")};
  if (!p.few || !p.many || !p.fewTokens)
    return fail("expected {few = @f, many = @m, few_tokens = @p} naming "
                "functions");
  FunctionType type = fn.getFunctionType();
  if (type.getNumInputs() != 2 || type.getNumResults() != 1 ||
      !isa<RankedTensorType>(type.getResult(0)))
    return fail("expected (x, W) -> y");
  Builder b(fn.getContext());
  // The products write y's buffer: (x, W, out) -> ().
  auto out = cast<RankedTensorType>(type.getResult(0));
  FunctionType into = b.getFunctionType(
      {type.getInput(0), type.getInput(1),
       MemRefType::get(out.getShape(), out.getElementType())},
      {});
  if (p.few.getFunctionType() != into || p.many.getFunctionType() != into)
    return fail("'few' and 'many' must take (x, W, y's buffer)");
  if (p.fewTokens.getFunctionType() !=
      b.getFunctionType({b.getIndexType()}, {b.getI1Type()}))
    return fail("'few_tokens' must be (index) -> i1");
  return p;
}

/// `v` without the `tensor.cast`s it went through.
Value uncast(Value v) {
  while (auto cast = v.getDefiningOp<tensor::CastOp>())
    v = cast.getSource();
  return v;
}

class Grouper {
public:
  Grouper(ModuleOp module, const Product &p) : module(module), p(p) {}

  /// Groups the calls of `p.fn` in every block under `root`.
  void run(Operation *root, DominanceInfo &dom);

private:
  /// `<name>_x<m>`, made on first use.
  func::FuncOp grouped(int64_t m);
  /// `<few>_x<m>`: the m few-token products, one call each.
  func::FuncOp groupedFew(int64_t m);
  void group(ArrayRef<func::CallOp> calls, DominanceInfo &dom);

  ModuleOp module;
  Product p;
};

func::FuncOp Grouper::groupedFew(int64_t m) {
  std::string name = (p.few.getSymName() + "_x" + Twine(m)).str();
  if (auto f = module.lookupSymbol<func::FuncOp>(name))
    return f;
  FunctionType one = p.few.getFunctionType();
  SmallVector<Type> inputs{one.getInput(0)};
  inputs.append(m, one.getInput(1));
  inputs.append(m, one.getInput(2));
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = p.few.getLoc();
  auto f = func::FuncOp::create(b, loc, name,
                                b.getFunctionType(inputs, {}));
  f.setPrivate();
  // The few-token function's own marks (k3.skinny_matmul).
  for (NamedAttribute a : p.few->getDiscardableAttrs())
    f->setAttr(a.getName(), a.getValue());
  Block *body = f.addEntryBlock();
  b.setInsertionPointToStart(body);
  for (int64_t i = 0; i < m; ++i)
    func::CallOp::create(b, loc, p.few,
                         ValueRange{body->getArgument(0),
                                    body->getArgument(1 + i),
                                    body->getArgument(1 + m + i)});
  func::ReturnOp::create(b, loc);
  return f;
}

func::FuncOp Grouper::grouped(int64_t m) {
  std::string name = (p.fn.getSymName() + "_x" + Twine(m)).str();
  if (auto f = module.lookupSymbol<func::FuncOp>(name))
    return f;
  func::FuncOp few = groupedFew(m);
  FunctionType one = p.fn.getFunctionType();
  SmallVector<Type> inputs{one.getInput(0)};
  inputs.append(m, one.getInput(1));
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = p.fn.getLoc();
  auto f = func::FuncOp::create(
      b, loc, name,
      b.getFunctionType(inputs, SmallVector<Type>(m, one.getResult(0))));
  f.setPrivate();
  Block *body = f.addEntryBlock();
  b.setInsertionPointToStart(body);
  Value x = body->getArgument(0);
  Value t = tensor::DimOp::create(b, loc, x, 0);
  auto out = cast<RankedTensorType>(one.getResult(0));
  auto bufferType = MemRefType::get(out.getShape(), out.getElementType());
  SmallVector<Value> args{x}, bufs;
  for (int64_t i = 0; i < m; ++i) {
    Value w = body->getArgument(1 + i);
    args.push_back(w);
    Value n = tensor::DimOp::create(b, loc, w, 0);
    bufs.push_back(
        memref::AllocOp::create(b, loc, bufferType, ValueRange{t, n}));
  }
  llvm::append_range(args, bufs);
  Value isFew = func::CallOp::create(b, loc, p.fewTokens, t).getResult(0);
  // Both branches write the result buffers (as @k3k_linear).
  scf::IfOp::create(
      b, loc, isFew,
      [&](OpBuilder &tb, Location l) {
        func::CallOp::create(tb, l, few, args);
        scf::YieldOp::create(tb, l);
      },
      [&](OpBuilder &eb, Location l) {
        for (int64_t i = 0; i < m; ++i)
          func::CallOp::create(eb, l, p.many,
                               ValueRange{x, args[1 + i], bufs[i]});
        scf::YieldOp::create(eb, l);
      });
  SmallVector<Value> results;
  for (Value buf : bufs)
    results.push_back(bufferization::ToTensorOp::create(
        b, loc, out, buf, /*restrict=*/true, /*writable=*/false));
  func::ReturnOp::create(b, loc, results);
  return f;
}

void Grouper::group(ArrayRef<func::CallOp> calls, DominanceInfo &dom) {
  func::CallOp first = calls.front();
  // The calls whose weight is (or is a cast of) a value defined before
  // the first; the others keep their own call.
  SmallVector<func::CallOp> members{first};
  for (func::CallOp call : calls.drop_front()) {
    Value w = call.getOperand(1);
    if (dom.properlyDominates(w, first) ||
        (w.getDefiningOp<tensor::CastOp>() &&
         dom.properlyDominates(
             w.getDefiningOp<tensor::CastOp>().getSource(), first)))
      members.push_back(call);
  }
  if (members.size() < 2)
    return;
  OpBuilder b(first);
  SmallVector<Value> operands{first.getOperand(0)};
  for (func::CallOp call : members) {
    Value w = call.getOperand(1);
    if (!dom.properlyDominates(w, first))
      w = tensor::CastOp::create(
          b, call.getLoc(), w.getType(),
          w.getDefiningOp<tensor::CastOp>().getSource());
    operands.push_back(w);
  }
  func::FuncOp fn = grouped(members.size());
  auto call = func::CallOp::create(b, first.getLoc(), fn, operands);
  for (auto [i, member] : llvm::enumerate(members)) {
    member.getResult(0).replaceAllUsesWith(call.getResult(i));
    member.erase();
  }
}

void Grouper::run(Operation *root, DominanceInfo &dom) {
  // The calls of each block, by input (in program order), collected first:
  // grouping erases calls and makes functions.
  SmallVector<SmallVector<func::CallOp>> groups;
  root->walk([&](Block *block) {
    llvm::MapVector<std::pair<Value, Type>, SmallVector<func::CallOp>> byX;
    for (Operation &op : *block)
      if (auto call = dyn_cast<func::CallOp>(op);
          call && call.getCallee() == p.fn.getSymName()) {
        Value x = call.getOperand(0);
        byX[{uncast(x), x.getType()}].push_back(call);
      }
    for (auto &[key, calls] : byX)
      if (calls.size() > 1)
        groups.push_back(std::move(calls));
  });
  for (ArrayRef<func::CallOp> calls : groups)
    group(calls, dom);
}

struct K3GroupProductsPass
    : k3::impl::K3GroupProductsPassBase<K3GroupProductsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Product> products;
    for (auto fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr(kAttr)) {
        FailureOr<Product> p = productOf(fn);
        if (failed(p))
          return signalPassFailure();
        products.push_back(*p);
      }
    DominanceInfo dom(module);
    for (const Product &p : products) {
      Grouper grouper(module, p);
      SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
      for (func::FuncOp fn : fns)
        if (!fn.isExternal())
          grouper.run(fn, dom);
    }
  }
};
} // namespace
