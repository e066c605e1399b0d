//===- GPUWarpReduce.cpp - reduction loops split over a warp's lanes -------===//
//
// After convert-linalg-to-parallel-loops each kernel is an scf.parallel over
// its outputs; a reduction (a linear layer's dot product, an RMS norm's sum of
// squares, an attention score) is a sequential scf.for in each iteration, so
// one thread walks a whole weight row and the 32 threads of a warp touch 32
// rows at a time. This pass gives such a loop a lane dimension: the warp
// shares one output, each lane takes every 32nd term, consecutive lanes read
// consecutive elements, and gpu.shuffle combines the partial sums. Loads
// of bf16 rows become 16-byte vectors, chunk reads of the kernel source
// (MXFP4 groups) 16-byte-aligned vector loads, a fill right before is folded
// into the sum, and steps with very few outputs are split over slices
// (split-K); the pass description in Passes.td has the details.
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUWARPREDUCEPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
constexpr int64_t kLanes = 32;

/// What ops (and everything they call or hold) do to memory, with each
/// callee looked at once per pass run.
class Effects {
public:
  /// At most reads memory: it may run in every lane, or once per term,
  /// without changing the result.
  bool readOnly(Operation *op, unsigned depth = 0) {
    if (depth > 16)
      return false;
    if (auto call = dyn_cast<func::CallOp>(op))
      return viaCallee(call, readOnlyCallees, /*unknown=*/false,
                       [&](Operation *inner) {
                         return readOnly(inner, depth + 1);
                       });
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

  /// Reads memory somewhere.
  bool reads(Operation *op, unsigned depth = 0) {
    if (depth > 16)
      return true;
    if (auto call = dyn_cast<func::CallOp>(op))
      return !viaCallee(call, readFreeCallees, /*unknown=*/false,
                        [&](Operation *inner) {
                          return !reads(inner, depth + 1);
                        });
    if (auto iface = dyn_cast<MemoryEffectOpInterface>(op))
      if (iface.hasEffect<MemoryEffects::Read>())
        return true;
    for (Region &region : op->getRegions())
      for (Operation &inner : region.getOps())
        if (reads(&inner, depth + 1))
          return true;
    return false;
  }

private:
  /// `all(op)` over the body of the function `call` calls, cached in
  /// `cache`; `unknown` for an external or missing callee (and, while it is
  /// being looked at, for a recursive one).
  bool viaCallee(func::CallOp call, llvm::DenseMap<Operation *, bool> &cache,
                 bool unknown, function_ref<bool(Operation *)> all) {
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        call, call.getCalleeAttr());
    if (!callee || callee.isExternal())
      return unknown;
    auto [it, fresh] = cache.try_emplace(callee, unknown);
    if (!fresh)
      return it->second;
    bool ok = llvm::all_of(callee.getBody().getOps(),
                           [&](Operation &inner) { return all(&inner); });
    cache[callee] = ok;
    return ok;
  }

  llvm::DenseMap<Operation *, bool> readOnlyCallees, readFreeCallees;
};

bool isZero(Value v) {
  FloatAttr attr;
  return matchPattern(v, m_Constant(&attr)) && attr.getValue().isZero() &&
         !attr.getValue().isNegative();
}

/// A reduction loop of a kernel and what it sums.
struct Reduction {
  scf::ForOp loop;
  /// Per sum: the term added each iteration (an iter_arg's, or, in the
  /// linalg form, the one summed into a stored element).
  SmallVector<Value> terms;
  /// Per sum: a maximum (arith.maximumf, exact in any order) instead of a
  /// sum.
  SmallVector<bool> isMax;
  /// The linalg form (one pair per output of the linalg.generic):
  /// `C[idx] = C[idx] + term` through these.
  SmallVector<memref::LoadOp> loads;
  SmallVector<memref::StoreOp> stores;
  SmallVector<bool> loadFirst;
  /// Per output of the linalg form: the constant a parallel loop right
  /// before the root filled it with (a linalg.fill), or null. The sum is
  /// then added to the constant and the fill loop goes (one launch less).
  SmallVector<Value> fillValues;
  SmallVector<scf::ParallelOp> fills;
  /// The scf.ifs between the fills and the root, innermost first (the
  /// root alone in one branch of each: k3-gpu-mma's and split-K's run-time
  /// choices): their other branches get a copy of the fills.
  SmallVector<scf::IfOp> fillsAbove;
  /// Ops of the loop body that the split loop does not clone.
  llvm::SmallPtrSet<Operation *, 8> skip;
};

/// The linalg form: a loop without results whose body reads and writes
/// elements (indices invariant in the loop, one per output of the
/// linalg.generic) as `C = C + term`.
bool matchLinalgForm(Reduction &r, Effects &effects) {
  scf::ForOp loop = r.loop;
  for (Operation &op : loop.getBody()->without_terminator()) {
    if (auto store = dyn_cast<memref::StoreOp>(op))
      r.stores.push_back(store);
    else if (!effects.readOnly(&op))
      return false;
  }
  if (r.stores.empty())
    return false;
  for (memref::StoreOp store : r.stores) {
    if (!store.getValue().getType().isF32())
      return false;
    auto add = store.getValue().getDefiningOp<arith::AddFOp>();
    if (!add || add->getBlock() != loop.getBody() || !add->hasOneUse())
      return false;
    memref::LoadOp found;
    for (unsigned i = 0; i < 2 && !found; ++i) {
      auto load = add->getOperand(i).getDefiningOp<memref::LoadOp>();
      if (load && load.getMemRef() == store.getMemRef() &&
          llvm::equal(load.getIndices(), store.getIndices()) &&
          load->hasOneUse()) {
        found = load;
        r.loadFirst.push_back(i == 0);
        r.terms.push_back(add->getOperand(1 - i));
        r.isMax.push_back(false);
      }
    }
    if (!found)
      return false;
    r.loads.push_back(found);
    for (Value index : store.getIndices())
      if (!loop.isDefinedOutsideOfLoop(index))
        return false;
    if (!loop.isDefinedOutsideOfLoop(store.getMemRef()))
      return false;
    r.skip.insert(found);
    r.skip.insert(add);
    r.skip.insert(store);
  }
  // The elements are read in the loop only through their own loads, and
  // two outputs are distinct buffers.
  for (auto [i, store] : llvm::enumerate(r.stores)) {
    for (Operation &op : loop.getBody()->without_terminator())
      if (auto other = dyn_cast<memref::LoadOp>(op))
        if (other != r.loads[i] && other.getMemRef() == store.getMemRef())
          return false;
    for (memref::StoreOp later : ArrayRef(r.stores).drop_front(i + 1))
      if (later.getMemRef() == store.getMemRef())
        return false;
  }
  return true;
}

/// The iter_args form: f32 sums `acc = acc + term` or maxima
/// `acc = maximumf(acc, term)`, read after the loop.
bool matchIterArgsForm(Reduction &r, Effects &effects) {
  scf::ForOp loop = r.loop;
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  for (Operation &op : loop.getBody()->without_terminator())
    if (!effects.readOnly(&op))
      return false;
  for (auto [i, arg] : llvm::enumerate(loop.getRegionIterArgs())) {
    if (!arg.getType().isF32() || !arg.hasOneUse())
      return false;
    Operation *combine = yield.getOperand(i).getDefiningOp();
    if (!combine || !isa<arith::AddFOp, arith::MaximumFOp>(combine) ||
        combine->getBlock() != loop.getBody() || !combine->hasOneUse())
      return false;
    if (combine->getOperand(0) == arg)
      r.terms.push_back(combine->getOperand(1));
    else if (combine->getOperand(1) == arg)
      r.terms.push_back(combine->getOperand(0));
    else
      return false;
    r.isMax.push_back(isa<arith::MaximumFOp>(combine));
    r.skip.insert(combine);
  }
  return true;
}

/// True if `v` is computed (within `scope`) from `iv`.
bool dependsOn(Value v, Value iv, Block *scope, unsigned depth = 0) {
  if (v == iv)
    return true;
  Operation *def = v.getDefiningOp();
  if (!def || depth > 8 || !scope->getParentOp()->isAncestor(def))
    return false;
  for (Value operand : def->getOperands())
    if (dependsOn(operand, iv, scope, depth + 1))
      return true;
  return false;
}

/// Whether splitting the loop over lanes makes the warp's reads contiguous:
/// some load walks its last (contiguous) dimension with the loop, and none
/// of the loads that move with the loop has the innermost parallel
/// dimension in its last index, which thread x already makes contiguous
/// (e.g. ō = Σ_j p_j c_j over a [tokens, rank] cache).
bool splitCoalesces(scf::ParallelOp root, scf::ForOp loop) {
  Value inner = root.getInductionVars().back();
  Block *scope = root.getBody();
  bool alongLoop = false;
  WalkResult result = loop.getBody()->walk([&](Operation *op) {
    Value last;
    if (auto load = dyn_cast<memref::LoadOp>(op))
      last = load.getIndices().empty() ? Value() : load.getIndices().back();
    else if (auto extract = dyn_cast<tensor::ExtractOp>(op))
      last = extract.getIndices().empty() ? Value()
                                          : extract.getIndices().back();
    bool moves = llvm::any_of(op->getOperands(), [&](Value v) {
      return dependsOn(v, loop.getInductionVar(), scope);
    });
    if (!last || !moves)
      return WalkResult::advance();
    if (dependsOn(last, inner, scope))
      return WalkResult::interrupt();
    alongLoop |= dependsOn(last, loop.getInductionVar(), scope);
    return WalkResult::advance();
  });
  return !result.wasInterrupted() && alongLoop;
}

/// `store` writes the element of `par`'s iteration: its indices are the
/// loop's induction variables, in order.
bool storesOwnElement(scf::ParallelOp par, memref::StoreOp store) {
  return llvm::equal(store.getIndices(), par.getInductionVars());
}

/// The fills of the linalg form's outputs: the parallel loops right before
/// the root (nothing but side-effect-free ops in between) that store one
/// constant into every element the root accumulates into, over the same
/// iteration space, and do nothing else.
void matchFills(scf::ParallelOp root, Reduction &r) {
  r.fillValues.assign(r.stores.size(), Value());
  for (memref::StoreOp store : r.stores)
    if (!storesOwnElement(root, store))
      return;
  // Up through the scf.ifs whose branch holds nothing else with effects.
  Operation *inner = root;
  Operation *op = root->getPrevNode();
  while (true) {
    for (; op && isMemoryEffectFree(op); op = op->getPrevNode()) {
    }
    auto branch = dyn_cast<scf::IfOp>(inner->getParentOp());
    if (op || !branch || branch.getElseRegion().empty() ||
        !llvm::all_of(inner->getBlock()->without_terminator(),
                      [&](Operation &o) {
                        return &o == inner || isMemoryEffectFree(&o);
                      }))
      break;
    r.fillsAbove.push_back(branch);
    inner = branch;
    op = branch->getPrevNode();
  }
  for (; op; op = op->getPrevNode()) {
    if (isMemoryEffectFree(op))
      continue;
    auto fill = dyn_cast<scf::ParallelOp>(op);
    if (!fill || fill.getNumReductions() != 0 ||
        fill.getLowerBound() != root.getLowerBound() ||
        fill.getUpperBound() != root.getUpperBound() ||
        fill.getStep() != root.getStep() ||
        !llvm::hasSingleElement(fill.getBody()->without_terminator()))
      return;
    auto store = dyn_cast<memref::StoreOp>(fill.getBody()->front());
    FloatAttr value;
    if (!store || !storesOwnElement(fill, store) ||
        !matchPattern(store.getValue(), m_Constant(&value)))
      return;
    bool used = false;
    for (auto [i, out] : llvm::enumerate(r.stores))
      if (out.getMemRef() == store.getMemRef() && !r.fillValues[i]) {
        r.fillValues[i] = store.getValue();
        used = true;
      }
    if (!used)
      return;
    r.fills.push_back(fill);
  }
}

/// The body of `root`: read-only setup, the reduction loop, then anything.
std::optional<Reduction> match(scf::ParallelOp root, Effects &effects) {
  if (root.getNumReductions() != 0 || root->hasAttr("k3.warp_lanes") ||
      root->hasAttr("k3.split_k"))
    return std::nullopt;
  Reduction r;
  for (Operation &op : root.getBody()->without_terminator()) {
    if (auto loop = dyn_cast<scf::ForOp>(op)) {
      r.loop = loop;
      break;
    }
    if (!effects.readOnly(&op))
      return std::nullopt;
  }
  if (!r.loop || !splitCoalesces(root, r.loop))
    return std::nullopt;
  bool ok = r.loop.getNumResults() == 0 ? matchLinalgForm(r, effects)
                                        : matchIterArgsForm(r, effects);
  if (!ok)
    return std::nullopt;
  matchFills(root, r);
  return r;
}

/// `a + t`, or `maximumf(a, t)` for a maximum.
Value combineSum(OpBuilder &b, Location loc, Value a, Value t, bool max) {
  return max ? arith::MaximumFOp::create(b, loc, a, t).getResult()
             : arith::AddFOp::create(b, loc, a, t).getResult();
}

/// Where a sum (0.0) or a maximum (-inf) starts.
Value identityOf(OpBuilder &b, Location loc, bool max) {
  return arith::ConstantFloatOp::create(
      b, loc, b.getF32Type(),
      max ? APFloat::getInf(APFloat::IEEEsingle(), /*Negative=*/true)
          : APFloat(0.0f));
}

/// The u-th of a lane's terms per iteration: `iv + u · width`.
Value nthTerm(OpBuilder &b, Location loc, Value iv, Value width, int64_t u) {
  if (u == 0)
    return iv;
  return arith::AddIOp::create(
      b, loc, iv,
      arith::MulIOp::create(b, loc, width,
                            arith::ConstantIndexOp::create(b, loc, u)));
}

/// Sum (or maximum) of `v` over the 32 lanes of the warp, in every lane.
Value warpCombine(OpBuilder &b, Location loc, Value v, bool max) {
  Value width = arith::ConstantIntOp::create(b, loc, kLanes, 32);
  for (int64_t offset = kLanes / 2; offset > 0; offset /= 2) {
    Value off = arith::ConstantIntOp::create(b, loc, offset, 32);
    auto shuffle =
        gpu::ShuffleOp::create(b, loc, v, off, width, gpu::ShuffleMode::XOR);
    Value other = shuffle.getShuffleResult();
    v = combineSum(b, loc, v, other, max);
  }
  return v;
}

bool isNegInf(Value v) {
  FloatAttr attr;
  return matchPattern(v, m_Constant(&attr)) && attr.getValue().isInfinity() &&
         attr.getValue().isNegative();
}

/// Bytes a lane loads at once in the vector form (ld.global.v4.b32).
constexpr int64_t kVectorBytes = 16;

/// Loads of the loop body that walk their contiguous dimension with the
/// loop (`A[..., k]`, the other indices and A from outside the loop, A of
/// identity layout) and hold elements of at most 2 bytes: with a unit step,
/// a lane can take consecutive terms with one vector load of each. None if
/// anything else in the body reads memory at a place that moves with the
/// loop (an MXFP4 element decoded in a callee): those reads would lose
/// their coalescing. f32 rows stay one term per lane: on the H200 the MLA
/// scores over the f32 cache took 3.5 ms per decode step with 16-byte
/// vectors against 2.3 ms without, while the bf16 weight rows of the linear
/// layers went from 3.8 to 3.0 ms.
SmallVector<memref::LoadOp> vectorLoads(scf::ForOp loop, Effects &effects) {
  SmallVector<memref::LoadOp> loads;
  if (getConstantIntValue(loop.getStep()) != 1)
    return loads;
  Block *body = loop.getBody();
  Value iv = loop.getInductionVar();
  for (Operation &op : body->without_terminator()) {
    auto load = dyn_cast<memref::LoadOp>(op);
    if (load && !load.getIndices().empty() && load.getIndices().back() == iv) {
      MemRefType type = load.getMemRefType();
      unsigned bits = type.getElementTypeBitWidth();
      if (type.getLayout().isIdentity() && bits % 8 == 0 && bits <= 16 &&
          loop.isDefinedOutsideOfLoop(load.getMemRef()) &&
          llvm::all_of(load.getIndices().drop_back(), [&](Value v) {
            return loop.isDefinedOutsideOfLoop(v);
          })) {
        loads.push_back(load);
        continue;
      }
    }
    bool moves = llvm::any_of(op.getOperands(), [&](Value v) {
      return dependsOn(v, iv, body);
    });
    if (moves && effects.reads(&op))
      return {};
  }
  return loads;
}

/// Terms per vector: 16 bytes of the widest element loaded (8 bf16, 4 f32).
int64_t vectorTerms(ArrayRef<memref::LoadOp> loads) {
  int64_t bytes = 1;
  for (memref::LoadOp load : loads)
    bytes = std::max<int64_t>(bytes,
                              load.getMemRefType().getElementTypeBitWidth() / 8);
  return kVectorBytes / bytes;
}

/// An in-bounds, unmasked 1-D read along the last dimension of a memref of
/// identity layout: a plain vector load.
bool isRowRead(vector::TransferReadOp read) {
  auto type = dyn_cast<MemRefType>(read.getBase().getType());
  return type && type.getLayout().isIdentity() && !read.getMask() &&
         read.getVectorType().getRank() == 1 &&
         read.getPermutationMap().isMinorIdentity() &&
         llvm::all_of(read.getInBoundsValues(), [](bool b) { return b; });
}

/// Reads of one whole chunk per iteration of the loop: `A[..., iv · C]` as
/// a 1-D vector (an MXFP4 group's 16 packed bytes, its 32 activations), in
/// bounds, A of identity layout and from outside the loop, C elements a
/// multiple of 16 bytes. LLVM cannot know their alignment and loads them
/// element by element; with A 16-byte aligned and its rows a multiple of 16
/// bytes (checked at run time) each is 16-byte aligned and becomes
/// 16-byte loads.
SmallVector<vector::TransferReadOp> chunkReads(scf::ForOp loop) {
  SmallVector<vector::TransferReadOp> reads;
  Value iv = loop.getInductionVar();
  for (Operation &op : loop.getBody()->without_terminator()) {
    auto read = dyn_cast<vector::TransferReadOp>(op);
    if (!read || !isRowRead(read))
      continue;
    auto type = cast<MemRefType>(read.getBase().getType());
    if (type.getElementTypeBitWidth() % 8 != 0 ||
        !loop.isDefinedOutsideOfLoop(read.getBase()) ||
        !llvm::all_of(read.getIndices().drop_back(), [&](Value v) {
          return loop.isDefinedOutsideOfLoop(v);
        }))
      continue;
    int64_t bytes = type.getElementTypeBitWidth() / 8;
    auto mul = read.getIndices().back().getDefiningOp<arith::MulIOp>();
    if (!mul)
      continue;
    std::optional<int64_t> c;
    if (mul.getLhs() == iv)
      c = getConstantIntValue(mul.getRhs());
    else if (mul.getRhs() == iv)
      c = getConstantIntValue(mul.getLhs());
    int64_t vecBytes = read.getVectorType().getNumElements() * bytes;
    if (c && *c > 0 && (*c * bytes) % kVectorBytes == 0 &&
        vecBytes % kVectorBytes == 0)
      reads.push_back(read);
  }
  return reads;
}

void split(scf::ParallelOp root, Reduction &r, int64_t unroll,
           bool vectorize, Effects &effects) {
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
  par->setAttr("k3.warp_unroll", b.getI64IntegerAttr(unroll));

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
  SmallVector<Value> inits;
  for (bool max : r.isMax)
    inits.push_back(identityOf(nb, loc, max));
  // Chunk reads that `terms` makes plain vector loads, with the alignment
  // known in the branch being built (16 bytes where that was checked).
  llvm::DenseMap<Operation *, int64_t> chunkAlign;
  // `copies` consecutive terms of this lane (k, k + stride, ...): all
  // their loads first, so that a lane has `copies` loads in flight, then
  // combined in order.
  auto terms = [&](OpBuilder &fb, Location l, Value iv, ValueRange acc,
                   int64_t copies) {
    SmallVector<SmallVector<Value>> perCopy;
    for (int64_t u = 0; u < copies; ++u) {
      map.map(loop.getInductionVar(), nthTerm(fb, l, iv, stride, u));
      for (Operation &op : loop.getBody()->without_terminator()) {
        if (r.skip.contains(&op))
          continue;
        auto read = dyn_cast<vector::TransferReadOp>(op);
        auto chunk = read ? chunkAlign.find(read) : chunkAlign.end();
        if (chunk == chunkAlign.end()) {
          fb.clone(op, map);
          continue;
        }
        SmallVector<Value> idx;
        for (Value i : read.getIndices())
          idx.push_back(map.lookupOrDefault(i));
        map.map(read.getResult(),
                vector::LoadOp::create(fb, l, read.getVectorType(),
                                       map.lookupOrDefault(read.getBase()),
                                       idx, /*nontemporal=*/false,
                                       llvm::MaybeAlign(chunk->second)));
      }
      perCopy.emplace_back();
      for (Value term : r.terms)
        perCopy.back().push_back(map.lookupOrDefault(term));
    }
    SmallVector<Value> next(acc);
    for (ArrayRef<Value> copy : perCopy)
      for (auto [a, t, max] : llvm::zip(next, copy, r.isMax))
        a = combineSum(fb, l, a, t, max);
    scf::YieldOp::create(fb, l, next);
  };
  // The main loop takes `unroll` terms per iteration while all are in range;
  // the rest loop the remaining ones, one per iteration. [from, to) are the
  // lane's first term and the end; `width` the step of one term.
  auto loops = [&](OpBuilder &ob, Value from, Value to, Value width,
                   ValueRange init, auto &&body,
                   int64_t unroll) -> ValueRange {
    if (unroll == 1)
      return scf::ForOp::create(
                 ob, loc, from, to, width, init,
                 [&](OpBuilder &fb, Location l, Value iv, ValueRange acc) {
                   body(fb, l, iv, acc, 1);
                 })
          .getResults();
    Value unrollC = arith::ConstantIndexOp::create(ob, loc, unroll);
    Value widthU = arith::MulIOp::create(ob, loc, width, unrollC);
    Value toMain = arith::SubIOp::create(
        ob, loc, to,
        arith::MulIOp::create(
            ob, loc, width,
            arith::ConstantIndexOp::create(ob, loc, unroll - 1)));
    auto mainLoop = scf::ForOp::create(
        ob, loc, from, toMain, widthU, init,
        [&](OpBuilder &fb, Location l, Value iv, ValueRange acc) {
          body(fb, l, iv, acc, unroll);
        });
    Value span = arith::SubIOp::create(ob, loc, toMain, from);
    Value any =
        arith::CmpIOp::create(ob, loc, arith::CmpIPredicate::sgt, span, c0);
    Value trips = arith::SelectOp::create(
        ob, loc, any, arith::CeilDivSIOp::create(ob, loc, span, widthU), c0);
    Value rest = arith::AddIOp::create(
        ob, loc, from, arith::MulIOp::create(ob, loc, trips, widthU));
    return scf::ForOp::create(
               ob, loc, rest, to, width, mainLoop.getResults(),
               [&](OpBuilder &fb, Location l, Value iv, ValueRange acc) {
                 body(fb, l, iv, acc, 1);
               })
        .getResults();
  };
  Value ub = map.lookupOrDefault(loop.getUpperBound());
  SmallVector<memref::LoadOp> vecLoads;
  if (vectorize)
    vecLoads = vectorLoads(loop, effects);
  SmallVector<Value> partials;
  auto isMultiple = [&](Value v, int64_t m) {
    return arith::CmpIOp::create(
        nb, loc, arith::CmpIPredicate::eq,
        arith::RemUIOp::create(nb, loc, v,
                               arith::ConstantIndexOp::create(nb, loc, m)),
        c0);
  };
  auto scalarLoops = [&](OpBuilder &ob, int64_t copies) {
    return loops(ob, lb, ub, stride, inits,
                 [&](OpBuilder &fb, Location l, Value iv, ValueRange acc,
                     int64_t n) { terms(fb, l, iv, acc, n); },
                 copies);
  };
  SmallVector<vector::TransferReadOp> chunks;
  if (vecLoads.empty())
    chunks = chunkReads(loop);
  if (vecLoads.empty() && chunks.empty()) {
    partials = llvm::to_vector(scalarLoops(nb, unroll));
  } else if (vecLoads.empty()) {
    // A chunk is already many terms per lane (an MXFP4 group: 16 bytes of
    // each weight row and 32 activations): one per iteration keeps the
    // registers of the decode in check (ptxas: 159 for the experts' first
    // stage, 173 with two).
    int64_t chunkUnroll = 1;
    // One term per lane and iteration as above; the chunk reads 16-byte
    // aligned where every such row is.
    Value aligned;
    for (vector::TransferReadOp read : chunks) {
      Value m = map.lookupOrDefault(read.getBase());
      auto type = cast<MemRefType>(read.getBase().getType());
      Value ptr = memref::ExtractAlignedPointerAsIndexOp::create(nb, loc, m);
      Value ok = isMultiple(ptr, kVectorBytes);
      if (type.getRank() > 1)
        ok = arith::AndIOp::create(
            nb, loc, ok,
            isMultiple(memref::DimOp::create(nb, loc, m, type.getRank() - 1),
                       kVectorBytes / (type.getElementTypeBitWidth() / 8)));
      aligned = aligned ? arith::AndIOp::create(nb, loc, aligned, ok) : ok;
    }
    SmallVector<Type> types(inits.size(), nb.getF32Type());
    auto choice = scf::IfOp::create(nb, loc, types, aligned,
                                    /*withElseRegion=*/true);
    OpBuilder ab = OpBuilder::atBlockEnd(choice.thenBlock());
    for (vector::TransferReadOp read : chunks)
      chunkAlign[read] = kVectorBytes;
    scf::YieldOp::create(ab, loc, scalarLoops(ab, chunkUnroll));
    OpBuilder eb = OpBuilder::atBlockEnd(choice.elseBlock());
    for (vector::TransferReadOp read : chunks)
      chunkAlign[read] =
          cast<MemRefType>(read.getBase().getType()).getElementTypeBitWidth() /
          8;
    scf::YieldOp::create(eb, loc, scalarLoops(eb, chunkUnroll));
    chunkAlign.clear();
    choice->setAttr("k3.warp_aligned_chunks",
                    nb.getI64IntegerAttr(chunks.size()));
    par->setAttr("k3.warp_unroll", nb.getI64IntegerAttr(chunkUnroll));
    partials = llvm::to_vector_of<Value>(choice.getResults());
  } else {
    // Lane l takes the V consecutive terms at lb0 + V l + 32 V m with
    // one vector load per load of the body, while whole chunks of 32 V
    // terms remain, then the last (ub - lb0) % 32 V one at a time as above.
    // Taken
    // when every such row is aligned for its vector load: the base
    // pointer, the row length and lb0 all at multiples of the vector.
    Value lb0 = map.lookupOrDefault(loop.getLowerBound());
    int64_t v = vectorTerms(vecLoads);
    auto alignment = [&](memref::LoadOp load) {
      return v * load.getMemRefType().getElementTypeBitWidth() / 8;
    };
    Value vec = arith::ConstantIndexOp::create(nb, loc, v);
    Value aligned = arith::CmpIOp::create(
        nb, loc, arith::CmpIPredicate::eq,
        arith::RemUIOp::create(nb, loc, lb0, vec), c0);
    for (memref::LoadOp load : vecLoads) {
      Value m = map.lookupOrDefault(load.getMemRef());
      Value ptr = memref::ExtractAlignedPointerAsIndexOp::create(nb, loc, m);
      aligned = arith::AndIOp::create(
          nb, loc, aligned,
          isMultiple(ptr, alignment(load)));
      int64_t rank = load.getMemRefType().getRank();
      if (rank > 1)
        aligned = arith::AndIOp::create(
            nb, loc, aligned,
            isMultiple(memref::DimOp::create(nb, loc, m, rank - 1), v));
    }
    Value chunk = arith::ConstantIndexOp::create(nb, loc, kLanes * v);
    // A vector is already V terms in flight: half as many vectors per
    // iteration as the one-term form takes terms keeps the registers (and
    // so the warps per SM) of a memory-bound kernel in check.
    int64_t vectorUnroll = std::max<int64_t>(1, unroll / 2);
    Value full = arith::AddIOp::create(
        nb, loc, lb0,
        arith::MulIOp::create(
            nb, loc,
            arith::DivSIOp::create(
                nb, loc,
                arith::MaxSIOp::create(
                    nb, loc, arith::SubIOp::create(nb, loc, ub, lb0), c0),
                chunk),
            chunk));
    // V consecutive terms from each of `copies` chunks: the vector
    // loads of all first, then the terms in order.
    auto vectorTerms = [&](OpBuilder &fb, Location l, Value iv,
                           ValueRange acc, int64_t copies) {
      SmallVector<llvm::DenseMap<Operation *, Value>> loaded(copies);
      SmallVector<Value> starts;
      for (int64_t u = 0; u < copies; ++u) {
        Value k = nthTerm(fb, l, iv, chunk, u);
        starts.push_back(k);
        for (memref::LoadOp load : vecLoads) {
          SmallVector<Value> idx;
          for (Value i : load.getIndices().drop_back())
            idx.push_back(map.lookupOrDefault(i));
          idx.push_back(k);
          auto type = VectorType::get({v}, load.getType());
          loaded[u][load] = vector::LoadOp::create(
              fb, l, type, map.lookupOrDefault(load.getMemRef()), idx,
              /*nontemporal=*/false,
              llvm::MaybeAlign(alignment(load)));
        }
      }
      SmallVector<Value> next(acc);
      for (int64_t u = 0; u < copies; ++u)
        for (int64_t j = 0; j < v; ++j) {
          Value k = j == 0 ? starts[u]
                           : arith::AddIOp::create(
                                 fb, l, starts[u],
                                 arith::ConstantIndexOp::create(fb, l, j));
          map.map(loop.getInductionVar(), k);
          for (Operation &op : loop.getBody()->without_terminator()) {
            if (r.skip.contains(&op))
              continue;
            auto it = loaded[u].find(&op);
            if (it == loaded[u].end()) {
              fb.clone(op, map);
              continue;
            }
            map.map(op.getResult(0),
                    vector::ExtractOp::create(fb, l, it->second,
                                              ArrayRef<int64_t>{j}));
          }
          for (auto [a, term, max] : llvm::zip(next, r.terms, r.isMax)) {
            Value t = map.lookupOrDefault(term);
            a = combineSum(fb, l, a, t, max);
          }
        }
      scf::YieldOp::create(fb, l, next);
    };
    SmallVector<Type> types(inits.size(), nb.getF32Type());
    auto choice = scf::IfOp::create(nb, loc, types, aligned,
                                    /*withElseRegion=*/true);
    {
      OpBuilder vb = OpBuilder::atBlockEnd(choice.thenBlock());
      Value first = arith::AddIOp::create(
          vb, loc, lb0, arith::MulIOp::create(vb, loc, lane, vec));
      ValueRange vectorParts =
          loops(vb, first, full, chunk, inits, vectorTerms, vectorUnroll);
      Value tailFrom = arith::AddIOp::create(vb, loc, full, lane);
      ValueRange tail = loops(
          vb, tailFrom, ub, stride, vectorParts,
          [&](OpBuilder &fb, Location l, Value iv, ValueRange acc,
              int64_t copies) { terms(fb, l, iv, acc, copies); },
          unroll);
      scf::YieldOp::create(vb, loc, tail);
    }
    {
      OpBuilder sb = OpBuilder::atBlockEnd(choice.elseBlock());
      scf::YieldOp::create(sb, loc, scalarLoops(sb, unroll));
    }
    choice->setAttr("k3.warp_vector", nb.getI64IntegerAttr(v));
    partials = llvm::to_vector_of<Value>(choice.getResults());
  }

  SmallVector<Value> sums;
  for (auto [partial, max] : llvm::zip(partials, r.isMax))
    sums.push_back(warpCombine(nb, loc, partial, max));

  // Lane 0 finishes the iteration as the original did.
  Value first = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::eq, lane,
                                      c0);
  auto once = scf::IfOp::create(nb, loc, first, /*withElseRegion=*/false);
  OpBuilder tb = OpBuilder::atBlockTerminator(once.thenBlock());
  if (!r.stores.empty()) {
    for (auto [store, first, sum, filled] :
         llvm::zip(r.stores, r.loadFirst, sums, r.fillValues)) {
      Value memref = map.lookupOrDefault(store.getMemRef());
      SmallVector<Value> idx;
      for (Value i : store.getIndices())
        idx.push_back(map.lookupOrDefault(i));
      // The element as the fill left it: its constant (materialized here,
      // kernels take no constants from outside), else a load.
      Value c = filled ? tb.clone(*filled.getDefiningOp())->getResult(0)
                       : memref::LoadOp::create(tb, loc, memref, idx)
                             .getResult();
      Value s = first ? arith::AddFOp::create(tb, loc, c, sum)
                      : arith::AddFOp::create(tb, loc, sum, c);
      memref::StoreOp::create(tb, loc, s, memref, idx);
    }
  } else {
    for (auto [result, init, sum, max] :
         llvm::zip(loop.getResults(), loop.getInitArgs(), sums, r.isMax)) {
      bool identity = max ? isNegInf(init) : isZero(init);
      map.map(result, identity ? sum
                               : combineSum(tb, loc, map.lookupOrDefault(init),
                                            sum, max));
    }
  }
  for (++it; it != root.getBody()->end(); ++it)
    if (!isa<scf::ReduceOp>(*it))
      tb.clone(*it, map);
  root.erase();
  if (!r.stores.empty() &&
      llvm::all_of(r.fillValues, [](Value v) { return bool(v); })) {
    for (scf::ParallelOp fill : r.fills) {
      for (scf::IfOp branch : r.fillsAbove) {
        Region &other = branch.getThenRegion().isAncestor(par->getParentRegion())
                            ? branch.getElseRegion()
                            : branch.getThenRegion();
        OpBuilder ob = OpBuilder::atBlockBegin(&other.front());
        ob.clone(*fill);
      }
      fill.erase();
    }
    par->setAttr("k3.warp_fused_fill", b.getUnitAttr());
  }
}

/// Slices of a reduction with few outputs (split-K): each output's terms
/// are cut into kSlices consecutive slices of a multiple of kSliceTerms
/// terms (32 lanes x 8-term vectors, so that slices keep the vector form's
/// alignment), summed by a warp each, then added in slice order by a second
/// loop. Taken at run time when the step has fewer than kFewOutputs outputs
/// and at least kSlices * kSliceTerms terms per output: the AttnRes scores
/// of a decode step (a few candidates, two 7168-term sums each) otherwise
/// keep a few warps of the whole GPU busy (15 us on the H200, 3.4 us
/// split). With 1024 as the bound, the 96- and 128-row projections and the
/// RMS norms split too, but their second launch cost more than it saved
/// (decode step 4.04 -> 4.29 ms).
constexpr int64_t kSlices = 8;
constexpr int64_t kSliceTerms = 256;
constexpr int64_t kFewOutputs = 64;

/// Ceil division of non-negative index values.
Value ceilDiv(OpBuilder &b, Location loc, Value a, Value d) {
  return arith::CeilDivUIOp::create(b, loc, a, d);
}

/// The split-K form of `root` (see kSlices): `scf.if (few outputs, long
/// sums) { slices; combine } else { root }`. The slice loop is an ordinary
/// iter_args reduction that `split` gives lanes; the combine loop is marked
/// `k3.split_k` and left alone.
void splitK(scf::ParallelOp root, Reduction &r) {
  scf::ForOp loop = r.loop;
  for (Value v : {loop.getLowerBound(), loop.getUpperBound(), loop.getStep()})
    if (!root.isDefinedOutsideOfLoop(v))
      return;
  Location loc = root.getLoc();
  OpBuilder b(root);
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
  Value outputs = c1;
  for (auto [lb, ub, st] : llvm::zip(root.getLowerBound(),
                                     root.getUpperBound(), root.getStep()))
    outputs = arith::MulIOp::create(
        b, loc, outputs,
        ceilDiv(b, loc, arith::SubIOp::create(b, loc, ub, lb), st));
  Value terms = ceilDiv(
      b, loc,
      arith::SubIOp::create(b, loc, loop.getUpperBound(),
                            loop.getLowerBound()),
      loop.getStep());
  Value slices = arith::ConstantIndexOp::create(b, loc, kSlices);
  Value quantum = arith::ConstantIndexOp::create(b, loc, kSliceTerms);
  Value few = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ult, outputs,
      arith::ConstantIndexOp::create(b, loc, kFewOutputs));
  Value longSums = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::uge, terms,
      arith::ConstantIndexOp::create(b, loc, kSlices * kSliceTerms));
  auto choice = scf::IfOp::create(b, loc,
                                  arith::AndIOp::create(b, loc, few, longSums),
                                  /*withElseRegion=*/true);
  root->moveBefore(choice.elseBlock()->getTerminator());

  OpBuilder tb = OpBuilder::atBlockTerminator(choice.thenBlock());
  Value perSlice = arith::MulIOp::create(
      tb, loc, ceilDiv(tb, loc, ceilDiv(tb, loc, terms, slices), quantum),
      quantum);
  SmallVector<Value> parts;
  for (size_t i = 0; i < r.terms.size(); ++i)
    parts.push_back(memref::AllocOp::create(
        tb, loc, MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic},
                                 tb.getF32Type()),
        ValueRange{outputs, slices}));
  SmallVector<Value> identities;
  for (bool max : r.isMax)
    identities.push_back(identityOf(tb, loc, max));
  auto combine = [&](OpBuilder &fb, Value a, Value t, bool max) {
    return combineSum(fb, loc, a, t, max);
  };
  // The output's row in the partial sums: its iteration, linearized.
  auto linear = [&](OpBuilder &fb, ValueRange ivs) {
    Value lin = c0;
    for (auto [iv, lb, ub, st] :
         llvm::zip(ivs, root.getLowerBound(), root.getUpperBound(),
                   root.getStep())) {
      Value extent =
          ceilDiv(fb, loc, arith::SubIOp::create(fb, loc, ub, lb), st);
      Value pos = arith::DivUIOp::create(
          fb, loc, arith::SubIOp::create(fb, loc, iv, lb), st);
      lin = arith::AddIOp::create(
          fb, loc, arith::MulIOp::create(fb, loc, lin, extent), pos);
    }
    return lin;
  };
  auto cloneSetup = [&](OpBuilder &fb, IRMapping &m) {
    for (Operation &op : root.getBody()->without_terminator()) {
      if (&op == loop.getOperation())
        break;
      fb.clone(op, m);
    }
  };

  // The slices: (outputs..., slice) in parallel, each an iter_args sum.
  SmallVector<Value> lbs(root.getLowerBound()), ubs(root.getUpperBound()),
      steps(root.getStep());
  lbs.push_back(c0);
  ubs.push_back(slices);
  steps.push_back(c1);
  auto sliced = scf::ParallelOp::create(tb, loc, lbs, ubs, steps);
  {
    IRMapping m;
    for (auto [from, to] :
         llvm::zip(root.getInductionVars(), sliced.getInductionVars()))
      m.map(from, to);
    OpBuilder ab = OpBuilder::atBlockTerminator(sliced.getBody());
    cloneSetup(ab, m);
    Value s = sliced.getInductionVars().back();
    Value step = loop.getStep();
    Value first = arith::AddIOp::create(
        ab, loc, loop.getLowerBound(),
        arith::MulIOp::create(ab, loc,
                              arith::MulIOp::create(ab, loc, s, perSlice),
                              step));
    Value end = arith::MinUIOp::create(
        ab, loc, loop.getUpperBound(),
        arith::AddIOp::create(ab, loc, first,
                              arith::MulIOp::create(ab, loc, perSlice, step)));
    auto sums = scf::ForOp::create(
        ab, loc, first, end, step, identities,
        [&](OpBuilder &fb, Location l, Value iv, ValueRange acc) {
          m.map(loop.getInductionVar(), iv);
          for (Operation &op : loop.getBody()->without_terminator())
            if (!r.skip.contains(&op))
              fb.clone(op, m);
          SmallVector<Value> next;
          for (auto [a, term, max] : llvm::zip(acc, r.terms, r.isMax))
            next.push_back(combine(fb, a, m.lookupOrDefault(term), max));
          scf::YieldOp::create(fb, l, next);
        });
    Value lin = linear(ab, ValueRange(sliced.getInductionVars()).drop_back());
    for (auto [part, sum] : llvm::zip(parts, sums.getResults()))
      memref::StoreOp::create(ab, loc, sum, part, ValueRange{lin, s});
  }

  // The combination: per output, the slices in order, then what followed
  // the loop.
  auto whole = scf::ParallelOp::create(tb, loc, root.getLowerBound(),
                                       root.getUpperBound(), root.getStep());
  whole->setAttr("k3.split_k", tb.getI64IntegerAttr(kSlices));
  IRMapping m;
  for (auto [from, to] :
       llvm::zip(root.getInductionVars(), whole.getInductionVars()))
    m.map(from, to);
  OpBuilder wb = OpBuilder::atBlockTerminator(whole.getBody());
  cloneSetup(wb, m);
  Value lin = linear(wb, whole.getInductionVars());
  auto totals = scf::ForOp::create(
      wb, loc, c0, slices, c1, identities,
      [&](OpBuilder &fb, Location l, Value s, ValueRange acc) {
        SmallVector<Value> next;
        for (auto [a, part, max] : llvm::zip(acc, parts, r.isMax))
          next.push_back(combine(
              fb, a, memref::LoadOp::create(fb, l, part, ValueRange{lin, s}),
              max));
        scf::YieldOp::create(fb, l, next);
      });
  if (!r.stores.empty()) {
    for (auto [load, store, first, total] :
         llvm::zip(r.loads, r.stores, r.loadFirst, totals.getResults())) {
      Value c = wb.clone(*load, m)->getResult(0);
      Value v = first ? arith::AddFOp::create(wb, loc, c, total)
                      : arith::AddFOp::create(wb, loc, total, c);
      m.map(store.getValue(), v);
      wb.clone(*store, m);
    }
  } else {
    for (auto [result, init, total, max] :
         llvm::zip(loop.getResults(), loop.getInitArgs(), totals.getResults(),
                   r.isMax)) {
      Value start = m.lookupOrDefault(init);
      bool identity = max ? isNegInf(init) : isZero(init);
      m.map(result, identity ? total : combine(wb, start, total, max));
    }
  }
  bool after = false;
  for (Operation &op : root.getBody()->without_terminator()) {
    if (after)
      wb.clone(op, m);
    after |= &op == loop.getOperation();
  }
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
    if (unroll < 1 || unroll > 16) {
      getOperation()->emitError("k3-gpu-warp-reduce: unroll must be in "
                                "[1, 16], got ")
          << static_cast<int64_t>(unroll);
      return signalPassFailure();
    }
    Effects effects;
    if (splitK)
      for (scf::ParallelOp root : roots)
        if (std::optional<Reduction> r = match(root, effects))
          ::splitK(root, *r);
    roots.clear();
    getOperation()->walk([&](scf::ParallelOp op) {
      if (!op->getParentOfType<scf::ParallelOp>())
        roots.push_back(op);
    });
    for (scf::ParallelOp root : roots)
      if (std::optional<Reduction> r = match(root, effects))
        split(root, *r, unroll, vectorize, effects);
    // Any other in-bounds 1-D read of a contiguous row is a plain vector
    // load of unknown alignment (what the NVVM lowering expects).
    getOperation()->walk([](vector::TransferReadOp read) {
      if (!isRowRead(read))
        return;
      OpBuilder b(read);
      read.replaceAllUsesWith(vector::LoadOp::create(
                                  b, read.getLoc(), read.getVectorType(),
                                  read.getBase(), read.getIndices())
                                  .getResult());
      read.erase();
    });
  }
};
} // namespace
