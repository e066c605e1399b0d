//===- TensorCore.h - helpers of the tensor-core passes ---------*- C++ -*-===//
//
// What k3-gpu-mma, k3-gpu-experts-mma and k3-gpu-skinny-mma build alike:
// the bf16 mma.sync instruction and the 16-byte aligned workgroup buffers
// their cp.async copies fill.
//
//===----------------------------------------------------------------------===//

#ifndef K3_CONVERSION_K3TOLINALG_TENSORCORE_H
#define K3_CONVERSION_K3TOLINALG_TENSORCORE_H

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <array>

namespace mlir::k3 {

/// d = a · b + c with one `nvvm.mma.sync` m16n8k16, bf16 operands and f32
/// accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k16"): `a` four
/// i32 (pairs of bf16, row-major A), `bx` two (column-major B), `c` four
/// f32. Returns d's four f32.
std::array<Value, 4> mmaSyncBF16(OpBuilder &b, Location loc, ValueRange a,
                                 ValueRange bx, ValueRange c);

/// The private workgroup-memory `memref.global` `name` of `module` (shape
/// `shape`, bf16), 16-byte aligned for cp.async and 16-byte fragment reads:
/// created on first use, then shared by every kernel that names it
/// (kernel outlining copies it into each kernel's module).
memref::GlobalOp workgroupBuffer(ModuleOp module, StringRef name,
                                 ArrayRef<int64_t> shape);

} // namespace mlir::k3

#endif // K3_CONVERSION_K3TOLINALG_TENSORCORE_H
