// RUN: k3-opt %s --split-input-file --k3-expose-abi | FileCheck %s

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

// -----

// Logits from a destination-passing wrapper (as @k3k_lm_head around
// @k3k_lm_head_rounded): the wrapped call writes into the logits argument
// itself, through a cast to its type; no materialize_in_destination (a copy)
// is left.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.+]]: memref<?x4xbf16>, %[[W:.+]]: memref<8x4xbf16>, %[[OUT:.+]]: memref<?x8xf32>)
// CHECK: %[[D:.+]] = memref.cast %[[OUT]] : memref<?x8xf32> to memref<?x?xf32>
// CHECK: call @rounded(%{{.+}}, %{{.+}}, %[[D]]) : (tensor<?x?xbf16>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
// CHECK-NOT: call @head
// CHECK-NOT: materialize_in_destination
// CHECK: return{{$}}
func.func private @rounded(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>)

func.func private @head(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?xbf16>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %out = memref.alloc(%t, %n) : memref<?x?xf32>
  func.call @rounded(%x, %w, %out) : (tensor<?x?xbf16>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  %y = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}

func.func @forward(%x: tensor<?x4xbf16>, %w: tensor<8x4xbf16>) -> tensor<?x8xf32> {
  %xc = tensor.cast %x : tensor<?x4xbf16> to tensor<?x?xbf16>
  %wc = tensor.cast %w : tensor<8x4xbf16> to tensor<?x?xbf16>
  %l = call @head(%xc, %wc) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>
  %lc = tensor.cast %l : tensor<?x?xf32> to tensor<?x8xf32>
  return %lc : tensor<?x8xf32>
}

// -----

// A wrapper that does more than pass its buffer on (here it also writes
// into it) keeps the copy.
// CHECK-LABEL: func.func @forward
// CHECK: call @head2
// CHECK: bufferization.materialize_in_destination
func.func private @rounded2(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>)

func.func private @head2(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?xbf16>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %out = memref.alloc(%t, %n) : memref<?x?xf32>
  func.call @rounded2(%x, %w, %out) : (tensor<?x?xbf16>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  %one = arith.constant 1.0 : f32
  memref.store %one, %out[%c0, %c0] : memref<?x?xf32>
  %y = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}

func.func @forward(%x: tensor<?x4xbf16>, %w: tensor<8x4xbf16>) -> tensor<?x8xf32> {
  %xc = tensor.cast %x : tensor<?x4xbf16> to tensor<?x?xbf16>
  %wc = tensor.cast %w : tensor<8x4xbf16> to tensor<?x?xbf16>
  %l = call @head2(%xc, %wc) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>
  %lc = tensor.cast %l : tensor<?x?xf32> to tensor<?x8xf32>
  return %lc : tensor<?x8xf32>
}
