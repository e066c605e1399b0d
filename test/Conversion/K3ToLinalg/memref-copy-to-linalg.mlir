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
