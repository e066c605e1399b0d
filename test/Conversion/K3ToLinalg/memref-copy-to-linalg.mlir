// RUN: k3-opt %s --k3-memref-copy-to-linalg | FileCheck %s

// Strided copies left by bufferization become linalg.copy (then loops), so
// the library needs no MLIR runtime support library.

// CHECK-LABEL: func.func @copy
// CHECK-NOT: memref.copy
// CHECK: linalg.copy ins(%{{.+}} : memref<?x64xbf16>) outs(%{{.+}} : memref<?x64xbf16, strided<[64, 1], offset: ?>>)
func.func @copy(%a: memref<?x64xbf16>, %b: memref<?x64xbf16, strided<[64, 1], offset: ?>>) {
  memref.copy %a, %b : memref<?x64xbf16> to memref<?x64xbf16, strided<[64, 1], offset: ?>>
  return
}

// Contiguous (identity-layout) buffers are copied as one flat row.
// CHECK-LABEL: func.func @contiguous
// CHECK: %[[S:.+]] = memref.collapse_shape %{{.+}} {{\[}}[0, 1]] : memref<?x3xbf16> into memref<?xbf16>
// CHECK: %[[T:.+]] = memref.collapse_shape %{{.+}} {{\[}}[0, 1]] : memref<?x3xbf16> into memref<?xbf16>
// CHECK: linalg.copy ins(%[[S]] : memref<?xbf16>) outs(%[[T]] : memref<?xbf16>)
func.func @contiguous(%a: memref<?x3xbf16>, %b: memref<?x3xbf16>) {
  memref.copy %a, %b : memref<?x3xbf16> to memref<?x3xbf16>
  return
}
