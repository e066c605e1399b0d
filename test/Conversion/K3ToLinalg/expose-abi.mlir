// RUN: k3-opt %s --k3-expose-abi | FileCheck %s

// Tensor arguments become memrefs read through to_tensor; functions that
// return their own state buffers stop returning them (their callers use the
// buffers they passed); @forward writes the logits into a trailing buffer
// and gets a C interface.

// CHECK-LABEL: func.func private @body
// CHECK-SAME: (%[[X:.+]]: tensor<?x4xbf16>, %[[S:.+]]: memref<2x2xf32>) -> tensor<?x4xbf16>
// CHECK: return %[[X]] : tensor<?x4xbf16>
func.func private @body(%x: tensor<?x4xbf16>, %s: memref<2x2xf32>) -> (tensor<?x4xbf16>, memref<2x2xf32>) {
  return %x, %s : tensor<?x4xbf16>, memref<2x2xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[TOK:.+]]: memref<?xi32>, %[[W:.+]]: memref<8x4xbf16>, %[[ST:.+]]: memref<2x2xf32>, %[[OUT:.+]]: memref<?x8xf32>)
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK-DAG: %[[T:.+]] = bufferization.to_tensor %[[TOK]] restrict : memref<?xi32> to tensor<?xi32>
// CHECK-DAG: %[[WT:.+]] = bufferization.to_tensor %[[W]] restrict : memref<8x4xbf16> to tensor<8x4xbf16>
// CHECK: %[[R:.+]] = call @body(%{{.+}}, %[[ST]]) : (tensor<?x4xbf16>, memref<2x2xf32>) -> tensor<?x4xbf16>
// CHECK: bufferization.materialize_in_destination %{{.+}} in restrict writable %[[OUT]] : (tensor<?x8xf32>, memref<?x8xf32>) -> ()
// CHECK-NEXT: return{{$}}
func.func @forward(%tok: tensor<?xi32>, %w: tensor<8x4xbf16>, %st: memref<2x2xf32>) -> (tensor<?x8xf32>, memref<2x2xf32>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %tok, %c0 : tensor<?xi32>
  %x = tensor.empty(%t) : tensor<?x4xbf16>
  %y, %s1 = call @body(%x, %st) : (tensor<?x4xbf16>, memref<2x2xf32>) -> (tensor<?x4xbf16>, memref<2x2xf32>)
  %l = tensor.empty(%t) : tensor<?x8xf32>
  return %l, %s1 : tensor<?x8xf32>, memref<2x2xf32>
}
