//===- KDAWarp.h - what the KDA decode kernels build alike ------*- C++ -*-===//
//
// k3-gpu-kda-recurrent and k3-gpu-kda-decode both update a KDA state a warp
// per few rows (K3_SPEC §4.5): the functions their marks name, the state
// pool's rows as the warps read them, and a warp's update of its rows;
// k3-gpu-gated-norm and k3-gpu-kda-decode both take the gated RMSNorm of a
// head in a warp (§4.7).
//
//===----------------------------------------------------------------------===//

#ifndef K3_CONVERSION_K3TOLINALG_KDAWARP_H
#define K3_CONVERSION_K3TOLINALG_KDAWARP_H

#include "TensorCore.h"

namespace mlir::k3 {

/// The functions a `k3.kda_recurrent` or `k3.kda_decode` mark names
/// (Kernels/Prelude.*, KDA.mlir): widen (act) -> f32, narrow (f32) -> act,
/// the norm's inv (f32, f32) -> f32, the gate (f32, f32, f32, i1, f32) ->
/// f32 and the sigmoid (f32) -> f32.
struct KDAFunctions {
  func::FuncOp widen, narrow, inv, gate, sigmoid;
};

/// Those of `f`'s mark `attr` for activation type `act`; otherwise an
/// error on `f` that names `attr`.
FailureOr<KDAFunctions> kdaFunctions(func::FuncOp f, StringRef attr,
                                     Type act);

/// A state pool [S, H, V, K] (f32, strided) whose rows the warps read P
/// elements a lane at a time: `ok` (built at the insertion point) holds
/// when it is value-first (`vfirst`) with contiguous rows, a row stride of
/// a multiple of 4 and a 16-byte aligned start; `rows` is the pool with a
/// static unit stride for the rows (vector loads and stores).
struct KDAStateRows {
  KDAStateRows(IndexMath &m, Value pool, Value vfirst);
  /// Builds the view (after the run-time choice on `ok`).
  Value view(IndexMath &m);

  Value pool, ok;
  memref::ExtractStridedMetadataOp meta;
};

/// A warp's update of state rows first .. first + n - 1 of head h in
/// `rows` (a KDAStateRows view) at slot `slot` (§4.5): lane `lane` holds
/// elements j0 .. j0 + P - 1 of each row `s[r]`, and the lane's elements
/// of the normalised q and k and of α in `qn`, `kn` and `alpha`, β in
/// `beta`. For each row c, u = β (v_c − k·(αS)[:, c]) (v_c from `value`),
/// S ← αS + k u stored, and o_c = q·S[:, c] handed to `output` in lane 0:
/// each sum the lane's P terms in order, then the warp's xor tree.
void kdaUpdateRows(IndexMath &m, Value rows, Value slot, Value h,
                   Value first, Value lane, Value j0,
                   ArrayRef<SmallVector<Value>> s, ArrayRef<Value> qn,
                   ArrayRef<Value> kn, ArrayRef<Value> alpha, Value beta,
                   function_ref<Value(Value c)> value,
                   function_ref<void(Value c, Value o)> output);

/// The gated RMSNorm of a head (§4.7) as the generic kernels take it
/// (Kernels/Dense.mlir, @k3k_gated_rms_norm_rows): the sum of squares of
/// the head's `dv` values (`value(col)`, f32), lane `lane` taking values
/// lane, lane + 32, ... in order from 0, then the warp's xor tree (the
/// same in every lane).
Value gatedNormSumSquares(IndexMath &m, Value lane, Value dv,
                          function_ref<Value(Value col)> value);

/// One value of it before rounding: x / sqrt(ss / df + eps) · γ · σ(z) with
/// the generic body's operations in its order (`df`: V as f32).
Value gatedNormValue(IndexMath &m, Value x, Value z, Value gamma, Value ss,
                     Value df, Value eps);

} // namespace mlir::k3

#endif // K3_CONVERSION_K3TOLINALG_KDAWARP_H
