// k3.mma_matmul functions that k3-gpu-mma rejects (gpu-mma.mlir, BADFN).

func.func private @narrow(%v: f32) -> bf16 {
  %r = arith.truncf %v : f32 to bf16
  return %r : bf16
}
// W is not bf16.
func.func @f32_weights(%x: memref<?x?xbf16>, %w: memref<?x?xf32>, %out: memref<?x?xbf16>)
    attributes {k3.mma_matmul = {out = @narrow}} {
  return
}

// -----

// No out function.
func.func @no_out(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.mma_matmul = {}} {
  return
}

// -----

// The out function's result is not the output's element type.
func.func private @widen(%v: f32) -> f32 {
  return %v : f32
}
func.func @wrong_out(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.mma_matmul = {out = @widen}} {
  return
}

// -----

func.func private @narrow(%v: f32) -> bf16 {
  %r = arith.truncf %v : f32 to bf16
  return %r : bf16
}
// A result.
func.func @returns(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>) -> index
    attributes {k3.mma_matmul = {out = @narrow}} {
  %c0 = arith.constant 0 : index
  return %c0 : index
}
