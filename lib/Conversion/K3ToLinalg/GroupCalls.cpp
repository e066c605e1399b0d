//===- GroupCalls.cpp - independent kernel calls as one call -------------===//
//
// A decode step multiplies the same few tokens by several weight matrices
// in a row: a KDA layer's q, k, v, f_a, b and g projections (K3_SPEC §4.1),
// an MLA layer's q_a and kv_a (§5.1), an MLP's gate and up (§2). Each was
// a launch of its own, and a projection of one wave or less loses its ramp
// and tail (BENCHMARKS.md, eighteenth and twentieth sessions: 176 MB
// projections at 3.5-4.2 TB/s against 4.6 for the 19 waves of the LM head).
// Here the calls with one input become one call, whose few-token products
// k3-gpu-skinny-mma builds as one kernel over all the matrices' row blocks
// (`k3.product_group`), also across product functions: a MoE layer's f32
// router logits with its bf16 latent and shared-expert projections (§6).
// The three short convolutions of a KDA layer (§4.2) become one call of a
// kernel that runs all three (`k3.call_group`). Each output is computed
// exactly as by its own call.
//
// A product may take operands after (x, W) that its few and many functions
// take after y's buffer: the MoE router's bias, renorm, scaling and the
// routing's index, weight, order and rank buffers (Kernels/MoE.mlir
// @k3k_router_route),
// so that the skinny kernel that makes the router's scores also selects
// the experts. The group's few function takes them after the outputs, the
// members' in member order.
//
// An AttnRes and its norm (K3_SPEC §3.2) whose output only a product call
// or group reads become one call with it (`attn-res`): the few-token call
// takes the AttnRes operands after its own, and k3-gpu-skinny-mma makes
// the AttnRes in the product kernel's first blocks instead of a kernel of
// its own before it.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/CastInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

#include <optional>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GROUPCALLSPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr llvm::StringLiteral kProductAttr = "k3.product_group";
constexpr llvm::StringLiteral kGroupAttr = "k3.call_group";
constexpr llvm::StringLiteral kIntoAttr = "k3.into";
constexpr llvm::StringLiteral kSkinnyAttr = "k3.skinny_matmul";
constexpr llvm::StringLiteral kNormAttr = "k3.attn_res_norm";

/// A function marked `k3.product_group = {few, many, few_tokens}` and the
/// three functions it names: (x, W, a...) -> y, with few and many (x, W,
/// y's buffer, a...).
struct Product {
  func::FuncOp fn, few, many, fewTokens;
};

FailureOr<Product> productOf(func::FuncOp fn) {
  auto fail = [&](const Twine &why) {
    return fn.emitError() << kProductAttr << ": " << why, failure();
  };
  auto spec = fn->getAttrOfType<DictionaryAttr>(kProductAttr);
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
  if (type.getNumInputs() < 2 || type.getNumResults() != 1 ||
      !isa<RankedTensorType>(type.getResult(0)))
    return fail("expected (x, W, ...) -> y");
  Builder b(fn.getContext());
  // The products write y's buffer: (x, W, out, a...) -> ().
  auto out = cast<RankedTensorType>(type.getResult(0));
  SmallVector<Type> inputs = {type.getInput(0), type.getInput(1),
                              MemRefType::get(out.getShape(),
                                              out.getElementType())};
  llvm::append_range(inputs, type.getInputs().drop_front(2));
  FunctionType into = b.getFunctionType(inputs, {});
  if (p.few.getFunctionType() != into || p.many.getFunctionType() != into)
    return fail("'few' and 'many' must take (x, W, y's buffer) and then the "
                "product's other operands");
  if (p.fewTokens.getFunctionType() !=
      b.getFunctionType({b.getIndexType()}, {b.getI1Type()}))
    return fail("'few_tokens' must be (index) -> i1");
  return p;
}

/// A cast (tensor.cast, memref.cast) of one value, or null.
Operation *castOf(Value v) {
  Operation *op = v.getDefiningOp();
  return op && isa<CastOpInterface>(op) && op->getNumOperands() == 1 ? op
                                                                      : nullptr;
}

/// `v` without the casts it went through.
Value uncast(Value v) {
  while (Operation *cast = castOf(v))
    v = cast->getOperand(0);
  return v;
}

/// Whether `v` can be an operand of a call at `at`: defined before it, or
/// casts of a value defined before it (cast again there: materialize).
bool available(Value v, Operation *at, DominanceInfo &dom) {
  if (dom.properlyDominates(v, at))
    return true;
  Operation *cast = castOf(v);
  return cast && available(cast->getOperand(0), at, dom);
}
Value materialize(OpBuilder &b, Value v, Operation *at, DominanceInfo &dom) {
  if (dom.properlyDominates(v, at))
    return v;
  Operation *cast = castOf(v);
  IRMapping map;
  map.map(cast->getOperand(0), materialize(b, cast->getOperand(0), at, dom));
  return b.clone(*cast, map)->getResult(0);
}

/// The calls of `fn` in each block under `root` (program order).
SmallVector<SmallVector<func::CallOp>> callsByBlock(Operation *root,
                                                   func::FuncOp fn) {
  SmallVector<SmallVector<func::CallOp>> blocks;
  root->walk([&](Block *block) {
    SmallVector<func::CallOp> calls;
    for (Operation &op : *block)
      if (auto call = dyn_cast<func::CallOp>(op);
          call && call.getCallee() == fn.getSymName())
        calls.push_back(call);
    if (calls.size() > 1)
      blocks.push_back(std::move(calls));
  });
  return blocks;
}

/// Replaces `members` (calls of one function, in program order) by `fn`
/// called at the first with their operands one after the other.
void replaceByOne(ArrayRef<func::CallOp> members, func::FuncOp fn,
                  ValueRange leading, DominanceInfo &dom) {
  func::CallOp first = members.front();
  OpBuilder b(first);
  SmallVector<Value> operands(leading);
  for (func::CallOp call : members)
    for (Value v : call.getOperands().drop_front(leading.size()))
      operands.push_back(materialize(b, v, first, dom));
  auto call = func::CallOp::create(b, first.getLoc(), fn, operands);
  unsigned r = 0;
  for (func::CallOp member : members) {
    for (Value v : member.getResults())
      v.replaceAllUsesWith(call.getResult(r++));
    member.erase();
  }
}

/// `k3.call_group = @g` on `fn`: its calls n at a time as calls of @g.
LogicalResult groupFixed(ModuleOp module, func::FuncOp fn, DominanceInfo &dom) {
  auto ref = fn->getAttrOfType<FlatSymbolRefAttr>(kGroupAttr);
  auto g = ref ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(fn, ref)
               : func::FuncOp();
  FunctionType one = fn.getFunctionType();
  unsigned n = g && one.getNumInputs()
                   ? g.getFunctionType().getNumInputs() / one.getNumInputs()
                   : 0;
  SmallVector<Type> inputs, results;
  for (unsigned i = 0; i < n; ++i) {
    llvm::append_range(inputs, one.getInputs());
    llvm::append_range(results, one.getResults());
  }
  if (n < 2 ||
      g.getFunctionType() != FunctionType::get(fn.getContext(), inputs,
                                               results))
    return fn.emitError() << kGroupAttr
                          << ": expected a function that takes the "
                             "arguments of n >= 2 calls and returns their "
                             "results",
           failure();
  for (func::FuncOp caller : module.getOps<func::FuncOp>())
    for (ArrayRef<func::CallOp> calls : callsByBlock(caller, fn)) {
      // A call joins the chunk if its operands are available at the first
      // and nothing since the chunk's last may touch memory (the calls may
      // update state buffers in place: @k3k_short_conv's tails).
      SmallVector<func::CallOp> chunk;
      auto quiet = [](Operation *from, Operation *to) {
        return llvm::all_of(
            llvm::make_range(std::next(from->getIterator()), to->getIterator()),
            [](Operation &op) { return isMemoryEffectFree(&op); });
      };
      for (func::CallOp call : calls) {
        if (!chunk.empty() &&
            (!llvm::all_of(call.getOperands(),
                           [&](Value v) {
                             return available(v, chunk.front(), dom);
                           }) ||
             !quiet(chunk.back(), call)))
          chunk.clear();
        chunk.push_back(call);
        if (chunk.size() == n) {
          replaceByOne(chunk, g, {}, dom);
          chunk.clear();
        }
      }
    }
  return success();
}

/// The marks of the members' few-token functions, for their group's: a
/// mark all of them carry alike is copied; a dictionary mark whose entries
/// differ between them (k3.skinny_matmul's `out`: an f32 router beside bf16
/// projections) gets those entries as arrays, one value per member; a flag
/// (a bool entry) that some members lack is `false` for them (the router's
/// `route`). None if the members' marks cannot be merged.
std::optional<SmallVector<NamedAttribute>>
mergedMarks(ArrayRef<func::FuncOp> fews) {
  MLIRContext *ctx = func::FuncOp(fews.front()).getContext();
  SmallVector<NamedAttribute> marks;
  auto names = [](func::FuncOp f) {
    SmallVector<StringAttr> n;
    for (NamedAttribute a : f->getDiscardableAttrs())
      n.push_back(a.getName());
    return n;
  };
  for (func::FuncOp f : fews.drop_front())
    if (names(f) != names(fews.front()))
      return std::nullopt;
  for (NamedAttribute a : fews.front()->getDiscardableAttrs()) {
    SmallVector<Attribute> values;
    for (func::FuncOp f : fews)
      values.push_back(f->getAttr(a.getName()));
    if (llvm::all_equal(values)) {
      marks.push_back(a);
      continue;
    }
    // The entries' names in first appearance order.
    llvm::MapVector<StringAttr, SmallVector<Attribute>> byName;
    for (Attribute v : values) {
      auto d = dyn_cast<DictionaryAttr>(v);
      if (!d)
        return std::nullopt;
      for (NamedAttribute e : d)
        byName[e.getName()];
    }
    Attribute absent = BoolAttr::get(ctx, false);
    SmallVector<NamedAttribute> entries;
    for (auto &[name, each] : byName) {
      bool lacking = false, flags = true;
      for (Attribute v : values) {
        Attribute e = cast<DictionaryAttr>(v).get(name);
        lacking |= !e;
        flags &= !e || isa<BoolAttr>(e);
        each.push_back(e ? e : absent);
      }
      // Only a flag defaults to false; another entry must be everyone's.
      if (lacking && !flags)
        return std::nullopt;
      entries.emplace_back(name, llvm::all_equal(each)
                                     ? each.front()
                                     : ArrayAttr::get(ctx, each));
    }
    marks.emplace_back(a.getName(), DictionaryAttr::get(ctx, entries));
  }
  return marks;
}

/// `<a>_x<m>` for m calls of one function; `<a>_x<m>_<b>_x<n>...` (the
/// later names without their common `k3k_`) for runs of different ones.
std::string groupName(ArrayRef<func::FuncOp> members) {
  std::string name;
  for (size_t i = 0; i < members.size();) {
    size_t j = i;
    while (j < members.size() && members[j] == members[i])
      ++j;
    StringRef fn = func::FuncOp(members[i]).getSymName();
    if (i)
      name += "_" + fn.drop_front(fn.starts_with("k3k_") ? 4 : 0).str();
    else
      name += fn.str();
    name += "_x" + std::to_string(j - i);
    i = j;
  }
  return name;
}

/// A group function's operands from argument `at` of `body` on (the
/// calls' operands after x): each member's W and other operands, and a
/// buffer [T, N_i] for each of its products' results.
struct GroupOperands {
  SmallVector<Value> ws, bufs;
  SmallVector<ValueRange> rests;
};
GroupOperands groupOperands(OpBuilder &b, Location loc, Block *body,
                            unsigned at, ArrayRef<Product> members,
                            TypeRange results, Value t) {
  GroupOperands g;
  for (auto [p, type] : llvm::zip(members, results)) {
    Value w = body->getArgument(at);
    func::FuncOp fn = p.fn;
    unsigned n = fn.getFunctionType().getNumInputs() - 2;
    g.rests.push_back(body->getArguments().slice(at + 1, n));
    at += 1 + n;
    g.ws.push_back(w);
    auto out = cast<RankedTensorType>(type);
    g.bufs.push_back(memref::AllocOp::create(
        b, loc, MemRefType::get(out.getShape(), out.getElementType()),
        ValueRange{t, tensor::DimOp::create(b, loc, w, 0)}));
  }
  return g;
}

class Grouper {
public:
  Grouper(ModuleOp module, ArrayRef<Product> products) : module(module) {
    for (Product p : products)
      byName[p.fn.getSymName()] = p;
  }

  /// Groups the product calls in every block under `root`.
  void run(Operation *root, DominanceInfo &dom);
  /// The products that a call of `callee` computes: a product function's
  /// own, or a group's members; empty for any other function.
  SmallVector<Product> productsOf(StringRef callee) const {
    if (auto p = byName.find(callee); p != byName.end())
      return {p->second};
    if (auto g = groups.find(callee); g != groups.end())
      return g->second;
    return {};
  }
  /// The few-token function of `members` (a product's own, or the
  /// group's), or null.
  func::FuncOp fewOf(ArrayRef<Product> members) {
    return members.size() == 1 ? members.front().few : groupedFew(members);
  }

private:
  /// The group's function, made on first use (null if the members' few
  /// functions' marks do not merge).
  func::FuncOp grouped(ArrayRef<Product> members);
  /// Its few-token function: the members' few-token products, one call
  /// each, with their merged marks.
  func::FuncOp groupedFew(ArrayRef<Product> members);
  void group(ArrayRef<func::CallOp> calls, DominanceInfo &dom);

  ModuleOp module;
  llvm::StringMap<Product> byName;
  llvm::StringMap<SmallVector<Product>> groups;
};

/// One function of each member: its product function, its few-token one.
SmallVector<func::FuncOp> each(ArrayRef<Product> members,
                               func::FuncOp Product::*which) {
  return llvm::map_to_vector(members,
                             [&](const Product &p) { return p.*which; });
}

func::FuncOp Grouper::groupedFew(ArrayRef<Product> members) {
  SmallVector<func::FuncOp> fews = each(members, &Product::few);
  std::string name = groupName(fews);
  if (auto f = module.lookupSymbol<func::FuncOp>(name))
    return f;
  std::optional<SmallVector<NamedAttribute>> marks = mergedMarks(fews);
  if (!marks)
    return {};
  int64_t m = members.size();
  // (x, W_1 .. W_m, out_1 .. out_m, a_1..., ..., a_m...).
  SmallVector<Type> inputs{fews.front().getFunctionType().getInput(0)};
  for (func::FuncOp f : fews)
    inputs.push_back(f.getFunctionType().getInput(1));
  for (func::FuncOp f : fews)
    inputs.push_back(f.getFunctionType().getInput(2));
  for (func::FuncOp f : fews)
    llvm::append_range(inputs, f.getFunctionType().getInputs().drop_front(3));
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = fews.front().getLoc();
  auto f = func::FuncOp::create(b, loc, name, b.getFunctionType(inputs, {}));
  f.setPrivate();
  for (NamedAttribute a : *marks)
    f->setAttr(a.getName(), a.getValue());
  Block *body = f.addEntryBlock();
  b.setInsertionPointToStart(body);
  unsigned extra = 1 + 2 * m;
  for (int64_t i = 0; i < m; ++i) {
    SmallVector<Value> args{body->getArgument(0), body->getArgument(1 + i),
                            body->getArgument(1 + m + i)};
    unsigned n = fews[i].getFunctionType().getNumInputs() - 3;
    llvm::append_range(args, body->getArguments().slice(extra, n));
    extra += n;
    func::CallOp::create(b, loc, fews[i], args);
  }
  func::ReturnOp::create(b, loc);
  return f;
}

func::FuncOp Grouper::grouped(ArrayRef<Product> members) {
  SmallVector<func::FuncOp> fns = each(members, &Product::fn);
  std::string name = groupName(fns);
  if (auto f = module.lookupSymbol<func::FuncOp>(name))
    return f;
  func::FuncOp few = groupedFew(members);
  if (!few)
    return {};
  int64_t m = members.size();
  // (x, W_1, a_1..., ..., W_m, a_m...): the calls' operands after x.
  SmallVector<Type> inputs{fns.front().getFunctionType().getInput(0)},
      results;
  for (func::FuncOp fn : fns) {
    llvm::append_range(inputs, fn.getFunctionType().getInputs().drop_front());
    results.push_back(fn.getFunctionType().getResult(0));
  }
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = fns.front().getLoc();
  auto f = func::FuncOp::create(b, loc, name,
                                b.getFunctionType(inputs, results));
  f.setPrivate();
  groups[name] = SmallVector<Product>(members);
  Block *body = f.addEntryBlock();
  b.setInsertionPointToStart(body);
  Value x = body->getArgument(0);
  Value t = tensor::DimOp::create(b, loc, x, 0);
  GroupOperands g = groupOperands(b, loc, body, 1, members, results, t);
  SmallVector<Value> &ws = g.ws, &bufs = g.bufs;
  SmallVector<ValueRange> &rests = g.rests;
  SmallVector<Value> args{x};
  llvm::append_range(args, ws);
  llvm::append_range(args, bufs);
  for (ValueRange r : rests)
    llvm::append_range(args, r);
  Value isFew =
      func::CallOp::create(b, loc, members.front().fewTokens, t).getResult(0);
  // Both branches write the result buffers (as @k3k_linear).
  scf::IfOp::create(
      b, loc, isFew,
      [&](OpBuilder &tb, Location l) {
        func::CallOp::create(tb, l, few, args);
        scf::YieldOp::create(tb, l);
      },
      [&](OpBuilder &eb, Location l) {
        for (int64_t i = 0; i < m; ++i) {
          SmallVector<Value> one{x, args[1 + i], bufs[i]};
          llvm::append_range(one, rests[i]);
          func::CallOp::create(eb, l, members[i].many, one);
        }
        scf::YieldOp::create(eb, l);
      });
  SmallVector<Value> outs;
  for (int64_t i = 0; i < m; ++i)
    outs.push_back(bufferization::ToTensorOp::create(
        b, loc, results[i], bufs[i], /*restrict=*/true, /*writable=*/false));
  func::ReturnOp::create(b, loc, outs);
  return f;
}

void Grouper::group(ArrayRef<func::CallOp> calls, DominanceInfo &dom) {
  // The calls whose weight (and other operands) are available at the
  // first; the others keep their own call.
  func::CallOp first = calls.front();
  SmallVector<func::CallOp> members{first};
  for (func::CallOp call : calls.drop_front())
    if (llvm::all_of(call.getOperands().drop_front(),
                     [&](Value v) { return available(v, first, dom); }))
      members.push_back(call);
  if (members.size() < 2)
    return;
  SmallVector<Product> products;
  for (func::CallOp call : members)
    products.push_back(byName.lookup(call.getCallee()));
  if (func::FuncOp fn = grouped(products))
    replaceByOne(members, fn, first.getOperand(0), dom);
}

void Grouper::run(Operation *root, DominanceInfo &dom) {
  // By input and few-token predicate, in program order; collected first
  // (grouping erases calls).
  SmallVector<SmallVector<func::CallOp>> groups;
  root->walk([&](Block *block) {
    llvm::MapVector<std::tuple<Value, Type, Operation *>,
                    SmallVector<func::CallOp>>
        byX;
    for (Operation &op : *block) {
      auto call = dyn_cast<func::CallOp>(op);
      auto p = call ? byName.find(call.getCallee()) : byName.end();
      if (p == byName.end())
        continue;
      Value x = call.getOperand(0);
      byX[{uncast(x), x.getType(), p->second.fewTokens.getOperation()}]
          .push_back(call);
    }
    for (auto &[key, same] : byX)
      if (same.size() > 1)
        groups.push_back(std::move(same));
  });
  for (ArrayRef<func::CallOp> calls : groups)
    group(calls, dom);
}

/// `attn-res`: an AttnRes with its norm (a function marked `k3.into = @r`)
/// joined to the product call or group that alone reads its output.
class AttnResJoiner {
public:
  AttnResJoiner(ModuleOp module, Grouper &grouper)
      : module(module), grouper(grouper) {}

  /// Joins the AttnRes calls under `root` whose output is x of a product.
  void run(Operation *root);

private:
  /// `<r>_<few>`: x's buffer, the few function's operands after x, the
  /// AttnRes operands (`norm`'s inputs) and, `residual`, the sum's buffer;
  /// the body is `@r` then `few`. Null if `few` or `@r` lacks its mark.
  func::FuncOp fusedFew(func::FuncOp few, func::FuncOp rows, bool residual);
  /// `<a>_<g>` for the AttnRes function `norm` and product `callee`.
  func::FuncOp fused(func::FuncOp norm, func::FuncOp rows, StringRef callee,
                     ArrayRef<Product> members, func::FuncOp few);
  void join(func::CallOp norm, func::CallOp product);
  /// The call that `x` reaches as a product's x (see follow's body).
  func::CallOp follow(Value x, SmallVectorImpl<func::CallOp> &way);
  /// `layer` (reading the AttnRes output as operand `xAt`) as a call of a
  /// copy of its function that makes the AttnRes first (and returns its
  /// residual sum last); the new call.
  func::CallOp specialize(func::CallOp norm, func::CallOp layer, unsigned xAt);
  void process(func::CallOp norm);

  ModuleOp module;
  Grouper &grouper;
};

func::FuncOp AttnResJoiner::fusedFew(func::FuncOp few, func::FuncOp rows,
                                     bool residual) {
  auto spec = few->getAttrOfType<DictionaryAttr>(kSkinnyAttr);
  auto normSpec = rows->getAttrOfType<DictionaryAttr>(kNormAttr);
  auto xType = dyn_cast<RankedTensorType>(few.getFunctionType().getInput(0));
  if (!spec || !normSpec || !xType || spec.get("attn_res"))
    return {};
  StringRef fewName = few.getSymName(), rowsName = rows.getSymName();
  rowsName.consume_back("_rows");
  fewName.consume_front("k3k_");
  std::string name = (rowsName + "_" + fewName).str();
  if (auto f = module.lookupSymbol<func::FuncOp>(name))
    return f;
  FunctionType fewType = few.getFunctionType(), rowsType = rows.getFunctionType();
  unsigned operands = rowsType.getNumInputs() - (residual ? 2 : 1);
  auto xBuffer = MemRefType::get(xType.getShape(), xType.getElementType());
  SmallVector<Type> inputs{xBuffer};
  llvm::append_range(inputs, fewType.getInputs().drop_front());
  llvm::append_range(inputs, rowsType.getInputs().take_front(operands));
  if (residual)
    inputs.push_back(rowsType.getInputs().back());
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = few.getLoc();
  auto f = func::FuncOp::create(b, loc, name, b.getFunctionType(inputs, {}));
  f.setPrivate();
  for (NamedAttribute a : few->getDiscardableAttrs())
    f->setAttr(a.getName(), a.getValue());
  SmallVector<NamedAttribute> entries(normSpec.getValue());
  entries.emplace_back(b.getStringAttr("residual"), b.getBoolAttr(residual));
  NamedAttrList marks(spec);
  marks.set("attn_res", b.getDictionaryAttr(entries));
  f->setAttr(kSkinnyAttr, marks.getDictionary(b.getContext()));
  Block *body = f.addEntryBlock();
  b.setInsertionPointToStart(body);
  unsigned fewArgs = fewType.getNumInputs();
  SmallVector<Value> rowsArgs(
      body->getArguments().slice(fewArgs, operands));
  rowsArgs.push_back(body->getArgument(0));
  if (residual)
    rowsArgs.push_back(body->getArguments().back());
  func::CallOp::create(b, loc, rows, rowsArgs);
  SmallVector<Value> fewArgsV{bufferization::ToTensorOp::create(
      b, loc, xType, body->getArgument(0), /*restrict=*/true,
      /*writable=*/false)};
  llvm::append_range(fewArgsV, body->getArguments().slice(1, fewArgs - 1));
  func::CallOp::create(b, loc, few, fewArgsV);
  func::ReturnOp::create(b, loc);
  return f;
}

func::FuncOp AttnResJoiner::fused(func::FuncOp norm, func::FuncOp rows,
                                  StringRef callee, ArrayRef<Product> members,
                                  func::FuncOp few) {
  bool residual = norm.getNumResults() == 2;
  StringRef groupName = callee;
  groupName.consume_front("k3k_");
  std::string name = (norm.getSymName() + "_" + groupName).str();
  if (auto f = module.lookupSymbol<func::FuncOp>(name))
    return f;
  func::FuncOp fewFused = fusedFew(few, rows, residual);
  if (!fewFused)
    return {};
  auto group = module.lookupSymbol<func::FuncOp>(callee);
  FunctionType normType = norm.getFunctionType(),
               groupType = group.getFunctionType();
  // (AttnRes operands, the group's operands after x) -> (y..., [sum]).
  SmallVector<Type> inputs(normType.getInputs());
  llvm::append_range(inputs, groupType.getInputs().drop_front());
  SmallVector<Type> results(groupType.getResults());
  if (residual)
    results.push_back(normType.getResult(1));
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = norm.getLoc();
  auto f = func::FuncOp::create(b, loc, name,
                                b.getFunctionType(inputs, results));
  f.setPrivate();
  Block *body = f.addEntryBlock();
  b.setInsertionPointToStart(body);
  unsigned operands = normType.getNumInputs();
  ValueRange attn = body->getArguments().take_front(operands);
  // T and D of the AttnRes's last candidate (or residual term) [1, T, D].
  Value last = attn[1];
  Value t = tensor::DimOp::create(b, loc, last, 1);
  Value d = tensor::DimOp::create(b, loc, last, 2);
  auto xType = cast<RankedTensorType>(normType.getResult(0));
  Value x = memref::AllocOp::create(
      b, loc, MemRefType::get(xType.getShape(), xType.getElementType()),
      ValueRange{t, d});
  Value sum;
  if (residual) {
    auto sumType = cast<RankedTensorType>(normType.getResult(1));
    sum = memref::AllocOp::create(
        b, loc, MemRefType::get(sumType.getShape(), sumType.getElementType()),
        ValueRange{arith::ConstantIndexOp::create(b, loc, 1), t, d});
  }
  // The members' W and other operands, as Grouper::grouped's.
  GroupOperands g = groupOperands(b, loc, body, operands, members,
                                  groupType.getResults(), t);
  SmallVector<Value> &ws = g.ws, &bufs = g.bufs;
  SmallVector<ValueRange> &rests = g.rests;
  Value isFew =
      func::CallOp::create(b, loc, members.front().fewTokens, t).getResult(0);
  scf::IfOp::create(
      b, loc, isFew,
      [&](OpBuilder &tb, Location l) {
        SmallVector<Value> args{x};
        llvm::append_range(args, ws);
        llvm::append_range(args, bufs);
        for (ValueRange r : rests)
          llvm::append_range(args, r);
        llvm::append_range(args, attn);
        if (sum)
          args.push_back(sum);
        func::CallOp::create(tb, l, fewFused, args);
        scf::YieldOp::create(tb, l);
      },
      [&](OpBuilder &eb, Location l) {
        SmallVector<Value> args(attn);
        args.push_back(x);
        if (sum)
          args.push_back(sum);
        func::CallOp::create(eb, l, rows, args);
        Value xt = bufferization::ToTensorOp::create(
            eb, l, xType, x, /*restrict=*/true, /*writable=*/false);
        for (auto [p, w, buf, rest] : llvm::zip(members, ws, bufs, rests)) {
          SmallVector<Value> one{xt, w, buf};
          llvm::append_range(one, rest);
          func::CallOp::create(eb, l, p.many, one);
        }
        scf::YieldOp::create(eb, l);
      });
  SmallVector<Value> outs;
  for (auto [buf, type] : llvm::zip(bufs, groupType.getResults()))
    outs.push_back(bufferization::ToTensorOp::create(
        b, loc, type, buf, /*restrict=*/true, /*writable=*/false));
  if (sum)
    outs.push_back(bufferization::ToTensorOp::create(
        b, loc, normType.getResult(1), sum, /*restrict=*/true,
        /*writable=*/false));
  func::ReturnOp::create(b, loc, outs);
  return f;
}

/// The one operation other than casts, dims and selects on a constant that
/// reads `v` (through casts), with the operand it reads; none if another.
static std::optional<OpOperand *>
soleUse(Value v, const llvm::DenseMap<Value, llvm::APInt> *known = nullptr) {
  std::optional<OpOperand *> found;
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value at = work.pop_back_val();
    for (OpOperand &use : at.getUses()) {
      Operation *op = use.getOwner();
      if (isa<tensor::CastOp>(op)) {
        work.push_back(op->getResult(0));
        continue;
      }
      if (isa<tensor::DimOp>(op))
        continue;
      if (auto select = dyn_cast<arith::SelectOp>(op)) {
        llvm::APInt c;
        Value cond = select.getCondition();
        if (!matchPattern(cond, m_ConstantInt(&c)) && known &&
            known->count(cond))
          c = known->lookup(cond);
        if (use.getOperandNumber() != 0 && c.getBitWidth() &&
            (c.isZero() ? 2u : 1u) != use.getOperandNumber())
          continue;
      }
      if (found)
        return std::nullopt;
      found = &use;
    }
  }
  return found;
}

/// Inlines `call` (a single-block function ending in func.return) in place.
static void inlineAt(func::CallOp call, func::FuncOp callee) {
  IRMapping map;
  Block &body = callee.getBody().front();
  map.map(body.getArguments(), call.getOperands());
  OpBuilder b(call);
  for (Operation &op : body.without_terminator())
    b.clone(op, map);
  for (auto [r, v] : llvm::zip(call.getResults(),
                               body.getTerminator()->getOperands()))
    r.replaceAllUsesWith(map.lookupOrDefault(v));
  call.erase();
}

/// After `v`'s one reader joined the AttnRes: the selects on a constant
/// folded, the dims of `v` [T, D] taken from `last` [1, T, D] instead, and
/// the casts then unread erased.
static void dropShapeReaders(Value v, Value last) {
  llvm::SetVector<Operation *> users(llvm::from_range, v.getUsers());
  for (Operation *op : users) {
    if (auto select = dyn_cast<arith::SelectOp>(op)) {
      llvm::APInt c;
      if (matchPattern(select.getCondition(), m_ConstantInt(&c))) {
        select.replaceAllUsesWith(c.isZero() ? select.getFalseValue()
                                             : select.getTrueValue());
        select.erase();
      }
    } else if (auto dim = dyn_cast<tensor::DimOp>(op)) {
      std::optional<int64_t> k = dim.getConstantIndex();
      if (!k)
        continue;
      OpBuilder b(dim);
      dim.replaceAllUsesWith(
          tensor::DimOp::create(b, dim.getLoc(), last, *k + 1).getResult());
      dim.erase();
    } else if (isa<tensor::CastOp>(op)) {
      dropShapeReaders(op->getResult(0), last);
      if (op->use_empty())
        op->erase();
    }
  }
}

/// The operations between `from` and `to` that read `v` (or what they
/// make) into `later`, if all are pure and `to` reads none of them.
static bool movableAfter(Value v, Operation *from, Operation *to,
                         SmallVectorImpl<Operation *> &later) {
  llvm::SmallPtrSet<Value, 8> made{v};
  auto reads = [&](Operation *op) {
    return llvm::any_of(op->getOperands(),
                        [&](Value u) { return made.contains(u); });
  };
  for (Operation *op = from->getNextNode(); op != to; op = op->getNextNode()) {
    if (!reads(op))
      continue;
    if (!isMemoryEffectFree(op) || op->getNumRegions())
      return false;
    later.push_back(op);
    made.insert(op->result_begin(), op->result_end());
  }
  return !reads(to);
}

void AttnResJoiner::join(func::CallOp normCall, func::CallOp product) {
  auto norm = module.lookupSymbol<func::FuncOp>(normCall.getCallee());
  auto ref = norm->getAttrOfType<FlatSymbolRefAttr>(kIntoAttr);
  auto rows = ref ? module.lookupSymbol<func::FuncOp>(ref.getAttr())
                  : func::FuncOp();
  SmallVector<Product> members = grouper.productsOf(product.getCallee());
  if (!rows || members.empty())
    return;
  func::FuncOp few = grouper.fewOf(members);
  if (!few)
    return;
  // The residual sum's readers between the AttnRes and the product go
  // after it, where the sum is made now.
  SmallVector<Operation *> later;
  if (normCall.getNumResults() == 2 &&
      !movableAfter(normCall.getResult(1), normCall, product, later))
    return;
  func::FuncOp f = fused(norm, rows, product.getCallee(), members, few);
  if (!f)
    return;
  OpBuilder b(product);
  SmallVector<Value> args(normCall.getOperands());
  llvm::append_range(args, product.getOperands().drop_front());
  auto call = func::CallOp::create(
      b, b.getFusedLoc({normCall.getLoc(), product.getLoc()}), f, args);
  unsigned m = product.getNumResults();
  for (unsigned i = 0; i < m; ++i)
    product.getResult(i).replaceAllUsesWith(call.getResult(i));
  if (normCall.getNumResults() == 2)
    normCall.getResult(1).replaceAllUsesWith(call.getResult(m));
  Operation *after = call;
  for (Operation *op : later) {
    op->moveAfter(after);
    after = op;
  }
  product.erase();
  dropShapeReaders(normCall.getResult(0), normCall.getOperand(1));
  normCall.erase();
}

/// The call whose operand `x` reaches a product as its x through casts and
/// the functions that pass it on, or null: the calls on the way in `way`.
func::CallOp AttnResJoiner::follow(Value x, SmallVectorImpl<func::CallOp> &way) {
  // The callees' arguments that their calls on the way bind to constants
  // (a select on one is folded once the call is inlined).
  llvm::DenseMap<Value, llvm::APInt> known;
  for (Value v = x;;) {
    std::optional<OpOperand *> use = soleUse(v, &known);
    auto call = use ? dyn_cast<func::CallOp>((*use)->getOwner())
                    : func::CallOp();
    if (!call)
      return {};
    if (!grouper.productsOf(call.getCallee()).empty())
      return (*use)->getOperandNumber() == 0 ? call : func::CallOp();
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    // (K3: at most the model's layer body and the library's two fronts.)
    if (!callee || callee.isExternal() || !callee.getBody().hasOneBlock() ||
        !callee->getDiscardableAttrDictionary().empty() || way.size() == 8)
      return {};
    way.push_back(call);
    for (auto [arg, operand] :
         llvm::zip(callee.getArguments(), call.getOperands())) {
      llvm::APInt c;
      if (matchPattern(operand, m_ConstantInt(&c)))
        known[arg] = c;
      else if (known.count(operand))
        known[arg] = known.lookup(operand);
    }
    v = callee.getArgument((*use)->getOperandNumber());
  }
}

func::CallOp AttnResJoiner::specialize(func::CallOp normCall,
                                       func::CallOp layer, unsigned xAt) {
  auto norm = module.lookupSymbol<func::FuncOp>(normCall.getCallee());
  auto callee = module.lookupSymbol<func::FuncOp>(layer.getCallee());
  bool residual = normCall.getNumResults() == 2;
  std::string name = (callee.getSymName() + "_" + norm.getSymName() + "_" +
                      Twine(xAt))
                         .str();
  auto f = module.lookupSymbol<func::FuncOp>(name);
  FunctionType type = callee.getFunctionType();
  if (!f) {
    SmallVector<Type> inputs(norm.getFunctionType().getInputs());
    for (auto [i, t] : llvm::enumerate(type.getInputs()))
      if (i != xAt)
        inputs.push_back(t);
    SmallVector<Type> results(type.getResults());
    if (residual)
      results.push_back(normCall.getResult(1).getType());
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    f = func::FuncOp::create(b, callee.getLoc(), name,
                             b.getFunctionType(inputs, results));
    f.setPrivate();
    Block *body = f.addEntryBlock();
    b.setInsertionPointToStart(body);
    unsigned operands = norm.getNumArguments();
    auto inner = func::CallOp::create(
        b, normCall.getLoc(), norm, body->getArguments().take_front(operands));
    IRMapping map;
    Block &old = callee.getBody().front();
    Value x = inner.getResult(0);
    if (x.getType() != type.getInput(xAt))
      x = tensor::CastOp::create(b, layer.getLoc(), type.getInput(xAt), x);
    for (unsigned i = 0, at = operands; i < old.getNumArguments(); ++i)
      map.map(old.getArgument(i), i == xAt ? x : body->getArgument(at++));
    for (Operation &op : old.without_terminator())
      b.clone(op, map);
    SmallVector<Value> outs;
    for (Value v : old.getTerminator()->getOperands())
      outs.push_back(map.lookupOrDefault(v));
    if (residual)
      outs.push_back(inner.getResult(1));
    func::ReturnOp::create(b, callee.getLoc(), outs);
  }
  OpBuilder b(layer);
  SmallVector<Value> args(normCall.getOperands());
  for (auto [i, v] : llvm::enumerate(layer.getOperands()))
    if (i != xAt)
      args.push_back(v);
  auto call = func::CallOp::create(b, layer.getLoc(), f, args);
  call->setDiscardableAttrs(layer->getDiscardableAttrDictionary());
  for (auto [r, v] : llvm::zip(layer.getResults(), call.getResults()))
    r.replaceAllUsesWith(v);
  layer.erase();
  return call;
}

void AttnResJoiner::process(func::CallOp normCall) {
  SmallVector<func::CallOp> way;
  func::CallOp product = follow(normCall.getResult(0), way);
  if (!product)
    return;
  if (way.empty()) {
    if (product->getBlock() == normCall->getBlock())
      join(normCall, product);
    return;
  }
  // The first call on the way: the AttnRes moves into a copy of its
  // function (which keeps the library's functions and kernels as they
  // were), or, where x reaches the product there only through a select on
  // a constant of this call (the MoE front's latent flag), that call is
  // inlined first.
  func::CallOp layer = way.front();
  auto callee = module.lookupSymbol<func::FuncOp>(layer.getCallee());
  unsigned xAt = (*soleUse(normCall.getResult(0)))->getOperandNumber();
  SmallVector<func::CallOp> inside;
  auto parent = normCall->getParentOfType<func::FuncOp>();
  if (!parent.isPublic() && !follow(callee.getArgument(xAt), inside)) {
    inlineAt(layer, callee);
    process(normCall);
    return;
  }
  SmallVector<Operation *> later;
  if (normCall.getNumResults() == 2 &&
      !movableAfter(normCall.getResult(1), normCall, layer, later))
    return;
  func::CallOp call = specialize(normCall, layer, xAt);
  if (normCall.getNumResults() == 2)
    normCall.getResult(1).replaceAllUsesWith(call.getResults().back());
  Operation *after = call;
  for (Operation *op : later) {
    op->moveAfter(after);
    after = op;
  }
  dropShapeReaders(normCall.getResult(0), normCall.getOperand(1));
  normCall.erase();
  // Joined there once, for every call of the copy.
  auto f = module.lookupSymbol<func::FuncOp>(call.getCallee());
  if (auto inner = dyn_cast<func::CallOp>(f.getBody().front().front())) {
    auto fn = module.lookupSymbol<func::FuncOp>(inner.getCallee());
    if (fn && fn->hasAttr(kIntoAttr))
      process(inner);
  }
}

void AttnResJoiner::run(Operation *root) {
  SmallVector<func::CallOp> norms;
  root->walk([&](func::CallOp call) {
    auto fn = module.lookupSymbol<func::FuncOp>(call.getCallee());
    if (fn && fn->hasAttr(kIntoAttr))
      norms.push_back(call);
  });
  for (func::CallOp normCall : norms)
    process(normCall);
}

struct K3GroupCallsPass : k3::impl::K3GroupCallsPassBase<K3GroupCallsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Product> products;
    SmallVector<func::FuncOp> fixed;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn->hasAttr(kProductAttr)) {
        FailureOr<Product> p = productOf(fn);
        if (failed(p))
          return signalPassFailure();
        products.push_back(*p);
      }
      if (fn->hasAttr(kGroupAttr))
        fixed.push_back(fn);
    }
    DominanceInfo dom(module);
    Grouper grouper(module, products);
    SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
    for (func::FuncOp fn : fns)
      if (!fn.isExternal())
        grouper.run(fn, dom);
    for (func::FuncOp fn : fixed)
      if (failed(groupFixed(module, fn, dom)))
        return signalPassFailure();
    if (!attnRes)
      return;
    AttnResJoiner joiner(module, grouper);
    for (func::FuncOp fn : fns)
      if (!fn.isExternal())
        joiner.run(fn);
  }
};
} // namespace
