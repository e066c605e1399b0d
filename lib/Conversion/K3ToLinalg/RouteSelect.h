//===- RouteSelect.h - one token's top-k experts in a block ----*- C++ -*-===//
//
// k3-gpu-route (a block of 1024 threads per token) and k3-gpu-skinny-mma's
// `route` (the router's kernel's last blocks, 128 threads per token) select
// a token's experts and weigh them alike (K3_SPEC §6.1), so with the same
// bits. RouteSelect.cpp says how.
//
//===----------------------------------------------------------------------===//

#ifndef K3_CONVERSION_K3TOLINALG_ROUTESELECT_H
#define K3_CONVERSION_K3TOLINALG_ROUTESELECT_H

#include "TensorCore.h"

#include <functional>

namespace mlir::k3 {

/// The routing's operands: scores [T, E] f32, bias [E] f32, renorm i1,
/// scaling f32, and the outputs idx [T, k] i64 and wts [T, k] f32.
struct RouteOperands {
  Value scores, bias, renorm, scaling, idx, wts;
};

/// Where a block keeps the selection's workgroup scratch: each warp's
/// (word, index) pair of a round (i32, `field` 0 and 1) in two buffers
/// (`buf`), and the k selected scores (f32, `slot`).
struct RouteScratch {
  std::function<void(Value buf, int64_t field, Value warp, Value v)> storePair;
  std::function<Value(Value buf, int64_t field, Value warp)> loadPair;
  std::function<void(Value slot, Value s)> storeScore;
  std::function<Value(Value slot)> loadScore;
};

/// Token `token`'s k (`slots`) experts of E (`experts`) and their weights
/// into idx and wts by a block of `threads` threads, this one `tid`,
/// thread i holding experts i + threads · j for j < `per`. The caller's
/// guard holds E <= threads · per, 1 <= k <= 32 and k <= E.
void routeToken(IndexMath &m, const RouteOperands &ops,
                const RouteScratch &scratch, Value token, Value tid,
                int64_t threads, int64_t per, Value experts, Value slots);

} // namespace mlir::k3

#endif // K3_CONVERSION_K3TOLINALG_ROUTESELECT_H
