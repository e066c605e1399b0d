//===- KDAWarp.cpp - what the KDA decode kernels build alike --------------===//

#include "KDAWarp.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

FailureOr<k3::KDAFunctions> k3::kdaFunctions(func::FuncOp f, StringRef attr,
                                             Type act) {
  Builder t(f.getContext());
  Type f32 = t.getF32Type(), i1 = t.getI1Type();
  auto spec = f->getAttrOfType<DictionaryAttr>(attr);
  auto lookup = [&](StringRef key, TypeRange in, Type res) {
    return namedFunction(f, spec, key, t.getFunctionType(in, {res}));
  };
  KDAFunctions fns{lookup("widen", {act}, f32), lookup("narrow", {f32}, act),
                   lookup("inv", {f32, f32}, f32),
                   lookup("gate", {f32, f32, f32, i1, f32}, f32),
                   lookup("sigmoid", {f32}, f32)};
  if (!fns.widen || !fns.narrow || !fns.inv || !fns.gate || !fns.sigmoid)
    return f.emitError() << attr
                         << ": must be a dictionary naming functions widen "
                            "(act) -> f32, narrow (f32) -> act, inv (f32, "
                            "f32) -> f32, gate (f32, f32, f32, i1, f32) -> "
                            "f32 and sigmoid (f32) -> f32",
           failure();
  return fns;
}

k3::KDAStateRows::KDAStateRows(IndexMath &m, Value pool, Value vfirst)
    : pool(pool) {
  OpBuilder &b = m.b;
  Value c0 = m.idx(0), c1 = m.idx(1);
  meta = memref::ExtractStridedMetadataOp::create(b, m.loc, pool);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, m.loc, pool);
  Value start = m.add(base, m.mul(meta.getOffset(), m.idx(4)));
  ok = m.both(vfirst, m.eq(meta.getStrides()[3], c1));
  ok = m.both(ok, m.eq(m.rem(meta.getStrides()[2], m.idx(4)), c0));
  ok = m.both(ok, m.eq(m.rem(start, m.idx(16)), c0));
}

Value k3::KDAStateRows::view(IndexMath &m) {
  OpBuilder &b = m.b;
  SmallVector<OpFoldResult> sizes, strides;
  for (int64_t d = 0; d < 4; ++d) {
    sizes.push_back(meta.getSizes()[d]);
    strides.push_back(d == 3 ? OpFoldResult(b.getIndexAttr(1))
                             : OpFoldResult(meta.getStrides()[d]));
  }
  int64_t dyn = ShapedType::kDynamic;
  auto rowsType = MemRefType::get(
      {dyn, dyn, dyn, dyn}, b.getF32Type(),
      StridedLayoutAttr::get(b.getContext(), dyn, {dyn, dyn, dyn, 1}));
  return memref::ReinterpretCastOp::create(b, m.loc, rowsType, pool,
                                           meta.getOffset(), sizes, strides);
}

void k3::kdaUpdateRows(IndexMath &m, Value rows, Value slot, Value h,
                       Value first, Value lane, Value j0,
                       ArrayRef<SmallVector<Value>> s, ArrayRef<Value> qn,
                       ArrayRef<Value> kn, ArrayRef<Value> alpha, Value beta,
                       function_ref<Value(Value c)> value,
                       function_ref<void(Value c, Value o)> output) {
  OpBuilder &b = m.b;
  Location loc = m.loc;
  int64_t per = qn.size();
  for (int64_t r = 0, n = s.size(); r < n; ++r) {
    Value c = m.add(first, r);
    // u = β (v − k·(αS)[:, c]): this lane's terms in k order, then the warp.
    SmallVector<Value> as;
    Value part;
    for (int64_t e = 0; e < per; ++e) {
      as.push_back(m.fmul(alpha[e], s[r][e]));
      Value term = m.fmul(kn[e], as.back());
      part = e ? m.fadd(part, term) : term;
    }
    Value pred = warpSum(b, loc, part);
    Value vv = value(c);
    Value u = m.fmul(beta, arith::SubFOp::create(b, loc, vv, pred));
    // S ← αS + k u (stored), o = q·S[:, c].
    SmallVector<Value> next;
    for (int64_t e = 0; e < per; ++e) {
      next.push_back(m.fadd(as[e], m.fmul(kn[e], u)));
      Value term = m.fmul(qn[e], next.back());
      part = e ? m.fadd(part, term) : term;
    }
    Value total = warpSum(b, loc, part);
    Value vec = vector::FromElementsOp::create(
        b, loc, VectorType::get({per}, b.getF32Type()), next);
    vector::StoreOp::create(b, loc, vec, rows, ValueRange{slot, h, c, j0},
                            /*nontemporal=*/false, llvm::MaybeAlign(4 * per));
    auto lane0 = scf::IfOp::create(b, loc, m.eq(lane, m.idx(0)),
                                   /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(lane0.thenBlock()->getTerminator());
    output(c, total);
  }
}

Value k3::gatedNormSumSquares(IndexMath &m, Value lane, Value dv,
                              function_ref<Value(Value col)> value) {
  auto sum = scf::ForOp::create(
      m.b, m.loc, lane, dv, m.idx(32), ValueRange{m.f32(0.0)},
      [&](OpBuilder &, Location, Value col, ValueRange acc) {
        Value x = value(col);
        scf::YieldOp::create(m.b, m.loc, m.fadd(acc[0], m.fmul(x, x)));
      });
  return warpSum(m.b, m.loc, sum.getResult(0));
}

Value k3::gatedNormValue(IndexMath &m, Value x, Value z, Value gamma,
                         Value ss, Value df, Value eps) {
  OpBuilder &b = m.b;
  Value me = m.fadd(m.fdiv(ss, df), eps);
  Value inv = m.fdiv(m.f32(1.0), math::SqrtOp::create(b, m.loc, me));
  Value nw = m.fmul(m.fmul(x, inv), gamma);
  Value ex = math::ExpOp::create(b, m.loc, arith::NegFOp::create(b, m.loc, z));
  Value sig = m.fdiv(m.f32(1.0), m.fadd(m.f32(1.0), ex));
  return m.fmul(nw, sig);
}
