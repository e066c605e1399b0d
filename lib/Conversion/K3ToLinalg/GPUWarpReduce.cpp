//===- GPUWarpReduce.cpp - reduction loops split over a warp's lanes -------===//
//
// After convert-linalg-to-parallel-loops each kernel is an scf.parallel over
// its outputs; a reduction (a linear layer's dot product, an RMS norm's sum of
// squares, an attention score) is a sequential scf.for in each iteration, so
// one thread walks a whole weight row and the 32 threads of a warp touch 32
// rows at a time. This pass gives such a loop a lane dimension: the warp
// shares one output, each lane takes every 32nd term, consecutive lanes read
// consecutive elements, and gpu.shuffle combines the partial sums.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUWARPREDUCEPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr int64_t kLanes = 32;

/// True if `op` (and everything it calls or holds) at most reads memory: it
/// may run in every lane, or once per term, without changing the result.
bool readOnly(Operation *op, unsigned depth = 0) {
  if (depth > 16)
    return false;
  if (auto call = dyn_cast<func::CallOp>(op)) {
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        op, call.getCalleeAttr());
    if (!callee || callee.isExternal())
      return false;
    for (Operation &inner : callee.getBody().getOps())
      if (!readOnly(&inner, depth + 1))
        return false;
    return true;
  }
  if (auto iface = dyn_cast<MemoryEffectOpInterface>(op)) {
    SmallVector<MemoryEffects::EffectInstance> effects;
    iface.getEffects(effects);
    for (const MemoryEffects::EffectInstance &e : effects)
      if (!isa<MemoryEffects::Read>(e.getEffect()))
        return false;
  } else if (!op->hasTrait<OpTrait::HasRecursiveMemoryEffects>()) {
    return false;
  }
  for (Region &region : op->getRegions())
    for (Operation &inner : region.getOps())
      if (!readOnly(&inner, depth + 1))
        return false;
  return true;
}

bool isZero(Value v) {
  FloatAttr attr;
  return matchPattern(v, m_Constant(&attr)) && attr.getValue().isZero() &&
         !attr.getValue().isNegative();
}

/// A reduction loop of a kernel and what it sums.
struct Reduction {
  scf::ForOp loop;
  /// Per sum: the term added each iteration (an iter_arg's, or, in the
  /// linalg form, the one summed into `store`'s element).
  SmallVector<Value> terms;
  /// The linalg form: `C[idx] = C[idx] + term` through these.
  memref::LoadOp load;
  memref::StoreOp store;
  bool loadFirst = true;
  /// Ops of the loop body that the split loop does not clone.
  llvm::SmallPtrSet<Operation *, 8> skip;
};

/// The linalg form: a loop without results whose body reads and writes one
/// element (indices invariant in the loop) as `C = C + term`.
bool matchLinalgForm(Reduction &r) {
  scf::ForOp loop = r.loop;
  for (Operation &op : loop.getBody()->without_terminator()) {
    if (auto store = dyn_cast<memref::StoreOp>(op)) {
      if (r.store)
        return false;
      r.store = store;
    } else if (!readOnly(&op)) {
      return false;
    }
  }
  if (!r.store || !r.store.getValue().getType().isF32())
    return false;
  auto add = r.store.getValue().getDefiningOp<arith::AddFOp>();
  if (!add || add->getBlock() != loop.getBody() || !add->hasOneUse())
    return false;
  for (unsigned i = 0; i < 2; ++i) {
    auto load = add->getOperand(i).getDefiningOp<memref::LoadOp>();
    if (load && load.getMemRef() == r.store.getMemRef() &&
        llvm::equal(load.getIndices(), r.store.getIndices()) &&
        load->hasOneUse()) {
      r.load = load;
      r.loadFirst = i == 0;
      r.terms.push_back(add->getOperand(1 - i));
    }
  }
  if (!r.load)
    return false;
  for (Value index : r.store.getIndices())
    if (!loop.isDefinedOutsideOfLoop(index))
      return false;
  if (!loop.isDefinedOutsideOfLoop(r.store.getMemRef()))
    return false;
  // The element is not read in the loop other than through `load`.
  for (Operation &op : loop.getBody()->without_terminator())
    if (auto other = dyn_cast<memref::LoadOp>(op))
      if (other != r.load && other.getMemRef() == r.store.getMemRef())
        return false;
  r.skip.insert(r.load);
  r.skip.insert(add);
  r.skip.insert(r.store);
  return true;
}

/// The iter_args form: f32 sums `acc = acc + term`, read after the loop.
bool matchIterArgsForm(Reduction &r) {
  scf::ForOp loop = r.loop;
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  for (Operation &op : loop.getBody()->without_terminator())
    if (!readOnly(&op))
      return false;
  for (auto [i, arg] : llvm::enumerate(loop.getRegionIterArgs())) {
    if (!arg.getType().isF32() || !arg.hasOneUse())
      return false;
    auto add = yield.getOperand(i).getDefiningOp<arith::AddFOp>();
    if (!add || add->getBlock() != loop.getBody() || !add->hasOneUse())
      return false;
    if (add.getLhs() == arg)
      r.terms.push_back(add.getRhs());
    else if (add.getRhs() == arg)
      r.terms.push_back(add.getLhs());
    else
      return false;
    r.skip.insert(add);
  }
  return true;
}

/// The body of `root`: read-only setup, the reduction loop, then anything.
std::optional<Reduction> match(scf::ParallelOp root) {
  if (root.getNumReductions() != 0 || root->hasAttr("k3.warp_lanes"))
    return std::nullopt;
  Reduction r;
  for (Operation &op : root.getBody()->without_terminator()) {
    if (auto loop = dyn_cast<scf::ForOp>(op)) {
      r.loop = loop;
      break;
    }
    if (!readOnly(&op))
      return std::nullopt;
  }
  if (!r.loop)
    return std::nullopt;
  bool ok = r.loop.getNumResults() == 0 ? matchLinalgForm(r)
                                        : matchIterArgsForm(r);
  return ok ? std::optional<Reduction>(std::move(r)) : std::nullopt;
}

/// Sum of `v` over the 32 lanes of the warp, in every lane.
Value warpSum(OpBuilder &b, Location loc, Value v) {
  Value width = arith::ConstantIntOp::create(b, loc, kLanes, 32);
  for (int64_t offset = kLanes / 2; offset > 0; offset /= 2) {
    Value off = arith::ConstantIntOp::create(b, loc, offset, 32);
    auto shuffle =
        gpu::ShuffleOp::create(b, loc, v, off, width, gpu::ShuffleMode::XOR);
    v = arith::AddFOp::create(b, loc, v, shuffle.getShuffleResult());
  }
  return v;
}

void split(scf::ParallelOp root, Reduction &r) {
  Location loc = root.getLoc();
  OpBuilder b(root);
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  Value lanes = arith::ConstantIndexOp::create(b, loc, kLanes);
  Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
  SmallVector<Value> lbs(root.getLowerBound()), ubs(root.getUpperBound()),
      steps(root.getStep());
  lbs.push_back(c0);
  ubs.push_back(lanes);
  steps.push_back(c1);
  auto par = scf::ParallelOp::create(b, loc, lbs, ubs, steps);
  par->setAttr("k3.warp_lanes", b.getI64IntegerAttr(kLanes));

  IRMapping map;
  for (auto [from, to] :
       llvm::zip(root.getInductionVars(), par.getInductionVars()))
    map.map(from, to);
  Value lane = par.getInductionVars().back();
  OpBuilder nb = OpBuilder::atBlockTerminator(par.getBody());
  Block::iterator it = root.getBody()->begin();
  for (; &*it != r.loop.getOperation(); ++it)
    nb.clone(*it, map);

  // Lane l takes the terms k = lb + (l + 32 m) step.
  scf::ForOp loop = r.loop;
  Value step = map.lookupOrDefault(loop.getStep());
  Value lb = arith::AddIOp::create(
      nb, loc, map.lookupOrDefault(loop.getLowerBound()),
      arith::MulIOp::create(nb, loc, lane, step));
  Value stride = arith::MulIOp::create(nb, loc, step, lanes);
  Value zero = arith::ConstantFloatOp::create(nb, loc, nb.getF32Type(),
                                              APFloat(0.0f));
  SmallVector<Value> inits(r.terms.size(), zero);
  auto split = scf::ForOp::create(
      nb, loc, lb, map.lookupOrDefault(loop.getUpperBound()), stride, inits,
      [&](OpBuilder &fb, Location l, Value iv, ValueRange acc) {
        map.map(loop.getInductionVar(), iv);
        for (Operation &op : loop.getBody()->without_terminator())
          if (!r.skip.contains(&op))
            fb.clone(op, map);
        SmallVector<Value> next;
        for (auto [a, term] : llvm::zip(acc, r.terms))
          next.push_back(
              arith::AddFOp::create(fb, l, a, map.lookupOrDefault(term)));
        scf::YieldOp::create(fb, l, next);
      });

  SmallVector<Value> sums;
  for (Value partial : split.getResults())
    sums.push_back(warpSum(nb, loc, partial));

  // Lane 0 finishes the iteration as the original did.
  Value first = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::eq, lane,
                                      c0);
  auto once = scf::IfOp::create(nb, loc, first, /*withElseRegion=*/false);
  OpBuilder tb = OpBuilder::atBlockTerminator(once.thenBlock());
  if (r.store) {
    Value memref = map.lookupOrDefault(r.store.getMemRef());
    SmallVector<Value> idx;
    for (Value i : r.store.getIndices())
      idx.push_back(map.lookupOrDefault(i));
    Value c = memref::LoadOp::create(tb, loc, memref, idx);
    Value s = r.loadFirst ? arith::AddFOp::create(tb, loc, c, sums[0])
                          : arith::AddFOp::create(tb, loc, sums[0], c);
    memref::StoreOp::create(tb, loc, s, memref, idx);
  } else {
    for (auto [result, init, sum] :
         llvm::zip(loop.getResults(), loop.getInitArgs(), sums))
      map.map(result, isZero(init) ? sum
                                   : arith::AddFOp::create(
                                         tb, loc, map.lookupOrDefault(init),
                                         sum)
                                         .getResult());
  }
  for (++it; it != root.getBody()->end(); ++it)
    if (!isa<scf::ReduceOp>(*it))
      tb.clone(*it, map);
  root.erase();
}

struct K3GPUWarpReducePass
    : k3::impl::K3GPUWarpReducePassBase<K3GPUWarpReducePass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<scf::ParallelOp> roots;
    getOperation()->walk([&](scf::ParallelOp op) {
      if (!op->getParentOfType<scf::ParallelOp>())
        roots.push_back(op);
    });
    for (scf::ParallelOp root : roots)
      if (std::optional<Reduction> r = match(root))
        split(root, *r);
  }
};
} // namespace
