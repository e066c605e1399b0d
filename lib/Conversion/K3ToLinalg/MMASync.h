//===- MMASync.h - bf16 mma.sync for the tensor-core passes -----*- C++ -*-===//
//
// The one tensor-core instruction k3-gpu-mma, k3-gpu-experts-mma and
// k3-gpu-skinny-mma build.
//
//===----------------------------------------------------------------------===//

#ifndef K3_CONVERSION_K3TOLINALG_MMASYNC_H
#define K3_CONVERSION_K3TOLINALG_MMASYNC_H

#include "mlir/IR/Builders.h"

#include <array>

namespace mlir::k3 {

/// d = a · b + c with one `nvvm.mma.sync` m16n8k16, bf16 operands and f32
/// accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k16"): `a` four
/// i32 (pairs of bf16, row-major A), `bx` two (column-major B), `c` four
/// f32. Returns d's four f32.
std::array<Value, 4> mmaSyncBF16(OpBuilder &b, Location loc, ValueRange a,
                                 ValueRange bx, ValueRange c);

} // namespace mlir::k3

#endif // K3_CONVERSION_K3TOLINALG_MMASYNC_H
