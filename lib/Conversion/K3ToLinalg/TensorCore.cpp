//===- TensorCore.cpp - helpers of the tensor-core passes -----------------===//

#include "TensorCore.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;

std::array<Value, 4> mlir::k3::mmaSyncBF16(OpBuilder &b, Location loc,
                                           ValueRange a, ValueRange bx,
                                           ValueRange c) {
  Type f32 = b.getF32Type();
  auto result =
      LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
  auto mma = NVVM::MmaOp::create(
      b, loc, result, a, bx, c, {16, 8, 16}, std::nullopt, std::nullopt,
      std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16,
                                    NVVM::MMATypes::bf16},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  std::array<Value, 4> d;
  for (int64_t e = 0; e < 4; ++e)
    d[e] = LLVM::ExtractValueOp::create(b, loc, mma.getResult(),
                                        ArrayRef<int64_t>{e});
  return d;
}

SmallVector<func::FuncOp> mlir::k3::markedFunctions(Operation *root,
                                                    StringRef attr) {
  SmallVector<func::FuncOp> marked;
  root->walk([&](func::FuncOp f) {
    if (f->hasAttr(attr) && !f.isExternal())
      marked.push_back(f);
  });
  return marked;
}

bool mlir::k3::returnsNothing(Block &body) {
  return body.mightHaveTerminator() &&
         isa<func::ReturnOp>(body.getTerminator()) &&
         body.getTerminator()->getNumOperands() == 0;
}

func::FuncOp mlir::k3::namedFunction(func::FuncOp f, DictionaryAttr spec,
                                     StringRef key, FunctionType type) {
  auto ref = spec ? spec.getAs<FlatSymbolRefAttr>(key) : nullptr;
  auto fn =
      ref ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(f, ref) : nullptr;
  return fn && fn.getFunctionType() == type ? fn : nullptr;
}

namespace {
/// productOutFunction(s): `several` allows m >= 1 matrices and an array of
/// `out` functions, one per matrix.
FailureOr<SmallVector<func::FuncOp>> outFunctions(func::FuncOp f,
                                                  StringRef attr,
                                                  bool several) {
  auto fail = [&](const Twine &why) {
    return f.emitError() << attr << ": " << why, failure();
  };
  auto spec = f->getAttrOfType<DictionaryAttr>(attr);
  Attribute outAttr = spec ? spec.get("out") : nullptr;
  SmallVector<FlatSymbolRefAttr> refs;
  if (auto ref = dyn_cast_or_null<FlatSymbolRefAttr>(outAttr))
    refs.push_back(ref);
  else if (auto list = dyn_cast_or_null<ArrayAttr>(outAttr); list && several)
    for (Attribute a : list)
      refs.push_back(dyn_cast<FlatSymbolRefAttr>(a));
  if (refs.empty() || llvm::is_contained(refs, nullptr))
    return fail(several ? "expected a dictionary {out = @function} or {out "
                          "= [@function, ...]} (one per matrix)"
                        : "expected a dictionary {out = @function}");
  Block &body = f.getBody().front();
  // `route`: the routing's operands after the outputs.
  unsigned args = body.getNumArguments();
  if (unsigned n = k3::attnResOperands(spec); args >= n)
    args -= n;
  if (k3::routedMatrix(spec) && args >= k3::kRouteOperands)
    args -= k3::kRouteOperands;
  unsigned m = args / 2;
  auto matrix = [&](unsigned i, bool identity) {
    auto t = dyn_cast<MemRefType>(body.getArgument(i).getType());
    return t && t.getRank() == 2 && (!identity || t.getLayout().isIdentity());
  };
  auto element = [&](unsigned i) {
    return cast<MemRefType>(body.getArgument(i).getType()).getElementType();
  };
  Builder b(f.getContext());
  if (spec.get("addend")) {
    // (x, W, r, out): each output is out(sum, r[t, n]).
    if (!several || args != 4 || refs.size() != 1 || !matrix(0, true) ||
        !matrix(1, true) || !element(1).isBF16() || !matrix(2, false) ||
        !matrix(3, false))
      return fail("with 'addend', expected (x [T, K], bf16 W [N, K], addend "
                  "[T, N], output [T, N]) memrefs and one 'out' function");
    auto outFn = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(f, refs[0]);
    if (!outFn || outFn.getFunctionType() !=
                      b.getFunctionType({b.getF32Type(), element(2)},
                                        {element(3)}))
      return fail("with 'addend', 'out' must name a function (f32, the "
                  "addend's element type) -> the output's element type");
    if (!k3::returnsNothing(body))
      return fail("the function must return nothing");
    return SmallVector<func::FuncOp>{outFn};
  }
  bool ok = args % 2 == 1 && m >= 1 && (several || m == 1) && matrix(0, true);
  for (unsigned i = 1; ok && i <= m; ++i)
    ok = matrix(i, true) && matrix(m + i, false) &&
         cast<MemRefType>(body.getArgument(i).getType())
             .getElementType()
             .isBF16() &&
         (refs.size() > 1 || body.getArgument(m + i).getType() ==
                                  body.getArgument(m + 1).getType());
  if (!ok)
    return fail(several ? "expected (x [T, K], bf16 W_1 [N_1, K] ..., outputs "
                          "[T, N_1] ...) memrefs, as many outputs as W"
                        : "expected (x [T, K], bf16 W [N, K], output [T, N]) "
                          "memrefs");
  if (refs.size() > 1 && refs.size() != m)
    return fail("expected one 'out' function per matrix (" + Twine(m) +
                "), not " + Twine(refs.size()));
  SmallVector<func::FuncOp> outFns;
  for (unsigned i = 0; i < m; ++i) {
    auto out = cast<MemRefType>(body.getArgument(m + 1 + i).getType());
    FlatSymbolRefAttr ref = refs[refs.size() > 1 ? i : 0];
    auto outFn = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(f, ref);
    if (!outFn || outFn.getFunctionType() !=
                      b.getFunctionType({b.getF32Type()},
                                        {out.getElementType()}))
      return fail("'out' must name a function (f32) -> the output's element "
                  "type");
    outFns.push_back(outFn);
  }
  if (!k3::returnsNothing(body))
    return fail("the function must return nothing");
  return outFns;
}
} // namespace

std::optional<unsigned> mlir::k3::routedMatrix(DictionaryAttr spec) {
  Attribute route = spec ? spec.get("route") : nullptr;
  auto on = [](Attribute a) {
    auto flag = dyn_cast_or_null<BoolAttr>(a);
    return flag && flag.getValue();
  };
  if (on(route))
    return 0;
  if (auto list = dyn_cast_or_null<ArrayAttr>(route))
    for (auto [i, a] : llvm::enumerate(list))
      if (on(a))
        return i;
  return std::nullopt;
}

unsigned mlir::k3::attnResOperands(DictionaryAttr spec) {
  auto fns = spec ? spec.getAs<DictionaryAttr>("attn_res") : DictionaryAttr();
  if (!fns)
    return 0;
  auto residual = fns.getAs<BoolAttr>("residual");
  return residual && residual.getValue() ? 9 : 7;
}

FailureOr<func::FuncOp> mlir::k3::productOutFunction(func::FuncOp f,
                                                     StringRef attr) {
  FailureOr<SmallVector<func::FuncOp>> fns =
      outFunctions(f, attr, /*several=*/false);
  if (failed(fns))
    return failure();
  return fns->front();
}

FailureOr<SmallVector<func::FuncOp>>
mlir::k3::productOutFunctions(func::FuncOp f, StringRef attr) {
  return outFunctions(f, attr, /*several=*/true);
}

SmallVector<Operation *> mlir::k3::bodyOps(Block &body) {
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  return ops;
}

void mlir::k3::guardBody(OpBuilder &b, Location loc,
                         ArrayRef<Operation *> rest, Value cond) {
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/true);
  for (Operation *op : rest)
    op->moveBefore(ifOp.elseBlock()->getTerminator());
  b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
}

/// `v` combined over a warp's 32 lanes by an xor-shuffle tree (offsets 16
/// to 1): v = combine(v, the partner lane's v).
template <typename CombineOp>
static Value warpTree(OpBuilder &b, Location loc, Value v) {
  Value width = arith::ConstantIntOp::create(b, loc, 32, 32);
  for (int64_t offset = 16; offset > 0; offset /= 2) {
    Value off = arith::ConstantIntOp::create(b, loc, offset, 32);
    v = CombineOp::create(
        b, loc, v,
        gpu::ShuffleOp::create(b, loc, v, off, width, gpu::ShuffleMode::XOR)
            .getShuffleResult());
  }
  return v;
}

Value mlir::k3::warpSum(OpBuilder &b, Location loc, Value v) {
  return warpTree<arith::AddFOp>(b, loc, v);
}

Value mlir::k3::warpMax(OpBuilder &b, Location loc, Value v) {
  return warpTree<arith::MaximumFOp>(b, loc, v);
}

SmallVector<Value> mlir::k3::IndexMath::loadVector(Value m, ValueRange indices,
                                                  int64_t n) {
  Type e = cast<MemRefType>(m.getType()).getElementType();
  Value vec = vector::LoadOp::create(
      b, loc, VectorType::get({n}, e), m, indices, /*nontemporal=*/false,
      llvm::MaybeAlign(n * e.getIntOrFloatBitWidth() / 8));
  SmallVector<Value> r;
  for (int64_t i = 0; i < n; ++i)
    r.push_back(vector::ExtractOp::create(b, loc, vec, ArrayRef<int64_t>{i}));
  return r;
}

memref::GlobalOp mlir::k3::workgroupBuffer(ModuleOp module, StringRef name,
                                           ArrayRef<int64_t> shape,
                                           Type element) {
  if (auto g = module.lookupSymbol<memref::GlobalOp>(name))
    return g;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  Attribute shared = gpu::AddressSpaceAttr::get(
      b.getContext(), gpu::GPUDialect::getWorkgroupAddressSpace());
  auto type = MemRefType::get(shape, element ? element : b.getBF16Type(),
                              MemRefLayoutAttrInterface(), shared);
  return memref::GlobalOp::create(
      b, module.getLoc(), b.getStringAttr(name), b.getStringAttr("private"),
      TypeAttr::get(type), /*initial_value=*/Attribute(),
      /*constant=*/UnitAttr(), b.getI64IntegerAttr(16));
}

scf::ForOp mlir::k3::warpRingLoop(
    OpBuilder &b, Location loc, Value n, ValueRange init, int64_t stages,
    function_ref<Value(Value, ValueRange)> issue,
    function_ref<SmallVector<Value>(Value, ValueRange)> compute) {
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
  return scf::ForOp::create(
      b, loc, c0, n, c1, init,
      [&](OpBuilder &fb, Location, Value i, ValueRange carried) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        Value all = arith::ConstantIntOp::create(b, loc, b.getI32Type(), -1);
        NVVM::SyncWarpOp::create(b, loc, all);
        Value ahead = issue(
            arith::AddIOp::create(
                b, loc, i, arith::ConstantIndexOp::create(b, loc, stages - 1)),
            carried);
        nvgpu::DeviceAsyncWaitOp::create(b, loc, ahead,
                                         b.getI32IntegerAttr(stages - 1));
        NVVM::SyncWarpOp::create(b, loc, all);
        scf::YieldOp::create(b, loc, compute(i, carried));
      });
}

void mlir::k3::boundLaunch(gpu::LaunchOp launch, int64_t blocks) {
  auto f = launch->getParentOfType<func::FuncOp>();
  MLIRContext *ctx = launch.getContext();
  NamedAttrList bounds;
  if (auto old = f->getAttrOfType<DictionaryAttr>("k3.launch_bounds"))
    bounds.append(old.getValue());
  std::string name = (f.getName() + "_mma_kernel").str();
  if (!bounds.empty())
    name += "_" + std::to_string(bounds.getAttrs().size());
  launch.setFunctionAttr(SymbolRefAttr::get(ctx, name));
  bounds.set(name, IntegerAttr::get(IntegerType::get(ctx, 64), blocks));
  f->setAttr("k3.launch_bounds", bounds.getDictionary(ctx));
}

void mlir::k3::prefetchL2(OpBuilder &b, Location loc, Value m,
                          ValueRange indices, Value bytes) {
  auto type = cast<MemRefType>(m.getType());
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, m);
  auto base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, m);
  base->setAttr(kReadOnlyPointer, b.getUnitAttr());
  Value element = meta.getOffset();
  for (auto [i, stride] : llvm::zip(indices, meta.getStrides()))
    element = arith::AddIOp::create(b, loc, element,
                                    arith::MulIOp::create(b, loc, i, stride));
  Value size =
      arith::ConstantIndexOp::create(b, loc, type.getElementTypeBitWidth() / 8);
  Value address = arith::IndexCastOp::create(
      b, loc, b.getI64Type(),
      arith::AddIOp::create(b, loc, base,
                            arith::MulIOp::create(b, loc, element, size)));
  NVVM::CpAsyncBulkPrefetchOp::create(
      b, loc,
      LLVM::IntToPtrOp::create(
          b, loc, LLVM::LLVMPointerType::get(b.getContext(), 1), address),
      arith::IndexCastOp::create(b, loc, b.getI32Type(), bytes), Value());
}

memref::GlobalOp mlir::k3::deviceCounters(ModuleOp module, StringRef name,
                                          int64_t n) {
  if (auto g = module.lookupSymbol<memref::GlobalOp>(name))
    return g;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  Attribute global =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Global);
  auto type =
      MemRefType::get({n}, b.getI32Type(), MemRefLayoutAttrInterface(), global);
  return memref::GlobalOp::create(
      b, module.getLoc(), b.getStringAttr(name), b.getStringAttr("private"),
      TypeAttr::get(type),
      DenseElementsAttr::get(RankedTensorType::get({n}, b.getI32Type()),
                             ArrayRef<Attribute>{b.getI32IntegerAttr(0)}),
      /*constant=*/UnitAttr(), b.getI64IntegerAttr(4));
}

void mlir::k3::finishSplitTile(OpBuilder &b, Location loc,
                               memref::GlobalOp counters, Value tile,
                               Value slices, function_ref<Value()> isFirst,
                               Value flag, ValueRange flagAt,
                               function_ref<void()> last) {
  // Every thread's sums are visible on the GPU before the count.
  NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
  gpu::BarrierOp::create(b, loc);
  Value counts = memref::GetGlobalOp::create(b, loc, counters.getType(),
                                             counters.getSymName());
  Value first = isFirst();
  auto bf16 = b.getBF16Type();
  scf::IfOp::create(b, loc, first, [&](OpBuilder &fb, Location fl) {
    Value one = arith::ConstantIntOp::create(fb, fl, fb.getI32Type(), 1);
    Value before = memref::AtomicRMWOp::create(
        fb, fl, arith::AtomicRMWKind::addi, one, counts, ValueRange{tile});
    Value need = arith::IndexCastOp::create(
        fb, fl, fb.getI32Type(),
        arith::SubIOp::create(fb, fl, slices,
                              arith::ConstantIndexOp::create(fb, fl, 1)));
    Value isLast = arith::CmpIOp::create(fb, fl, arith::CmpIPredicate::eq,
                                         before, need);
    Value verdict = arith::SelectOp::create(
        fb, fl, isLast,
        arith::ConstantOp::create(fb, fl, fb.getFloatAttr(bf16, 1.0)),
        arith::ConstantOp::create(fb, fl, fb.getFloatAttr(bf16, 0.0)));
    memref::StoreOp::create(fb, fl, verdict, flag, flagAt);
    scf::YieldOp::create(fb, fl);
  });
  gpu::BarrierOp::create(b, loc);
  Value isLast = arith::CmpFOp::create(
      b, loc, arith::CmpFPredicate::OEQ,
      memref::LoadOp::create(b, loc, flag, flagAt),
      arith::ConstantOp::create(b, loc, b.getFloatAttr(bf16, 1.0)));
  scf::IfOp::create(b, loc, isLast, [&](OpBuilder &lb, Location ll) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(lb.getInsertionBlock(), lb.getInsertionPoint());
    // The other blocks' sums after their counts.
    NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
    last();
    scf::IfOp::create(b, loc, first, [&](OpBuilder &zb, Location zl) {
      Value zero = arith::ConstantIntOp::create(zb, zl, zb.getI32Type(), 0);
      memref::StoreOp::create(zb, zl, zero, counts, ValueRange{tile});
      scf::YieldOp::create(zb, zl);
    });
    scf::YieldOp::create(b, loc);
  });
}

Value mlir::k3::addSlices(OpBuilder &b, Location loc, Value partial,
                          Value from, Value to, Value init, Value i, Value j) {
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  auto loop = scf::ForOp::create(
      b, loc, from, to, one, ValueRange{init},
      [&](OpBuilder &fb, Location fl, Value z, ValueRange acc) {
        Value v = memref::LoadOp::create(fb, fl, partial, ValueRange{z, i, j});
        scf::YieldOp::create(
            fb, fl, ValueRange{arith::AddFOp::create(fb, fl, acc[0], v)});
      });
  return loop.getResult(0);
}

Value mlir::k3::sliceBuffer(OpBuilder &b, Location loc, Value split,
                            Value slices, Value rows, Value cols) {
  Value parts = arith::SelectOp::create(
      b, loc, split, slices, arith::ConstantIndexOp::create(b, loc, 0));
  auto type = MemRefType::get(
      {ShapedType::kDynamic, ShapedType::kDynamic, ShapedType::kDynamic},
      b.getF32Type());
  return memref::AllocOp::create(b, loc, type,
                                 ValueRange{parts, rows, cols});
}

Value mlir::k3::invRMS(IndexMath &m, Value ss, Value df, Value eps) {
  Value mean = m.fdiv(ss, df);
  return m.fdiv(m.f32(1.0),
                math::SqrtOp::create(m.b, m.loc, m.fadd(mean, eps)));
}

Value mlir::k3::rmsNormValue(IndexMath &m, const Conversions &fns, Value h,
                             Value inv, Value gamma) {
  Value r = m.call(fns.round, m.fmul(m.call(fns.widen, h), inv));
  Value g = arith::ExtFOp::create(m.b, m.loc, m.b.getF32Type(), gamma);
  return m.call(fns.narrow, m.fmul(r, g));
}

SmallVector<Value> mlir::k3::weightedSumPiece(IndexMath &m, Value ys,
                                              Value wts, Value token,
                                              Value j0, int64_t per,
                                              int64_t ahead) {
  OpBuilder &b = m.b;
  Location loc = m.loc;
  Value entries = memref::DimOp::create(b, loc, ys, 1);
  auto slots = [&](Value from, Value to, int64_t step, ValueRange init) {
    return scf::ForOp::create(
        b, loc, from, to, m.idx(step), init,
        [&](OpBuilder &sb, Location, Value s0, ValueRange part) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(sb.getInsertionBlock(), sb.getInsertionPoint());
          SmallVector<Value> w;
          SmallVector<SmallVector<Value>> y;
          for (int64_t u = 0; u < step; ++u) {
            Value s = u ? m.add(s0, m.idx(u)) : s0;
            w.push_back(memref::LoadOp::create(b, loc, wts,
                                               ValueRange{token, s}));
            y.push_back(m.loadVector(ys, {token, s, j0}, per));
          }
          SmallVector<Value> next(part);
          for (int64_t u = 0; u < step; ++u)
            for (int64_t e = 0; e < per; ++e)
              next[e] = m.fadd(next[e], m.fmul(w[u], y[u][e]));
          scf::YieldOp::create(b, loc, next);
        });
  };
  SmallVector<Value> zeros(per, m.f32(0.0));
  if (ahead <= 1)
    return slots(m.idx(0), entries, 1, zeros).getResults();
  Value most = m.mul(m.div(entries, ahead), ahead);
  return slots(most, entries, 1,
               slots(m.idx(0), most, ahead, zeros).getResults())
      .getResults();
}
