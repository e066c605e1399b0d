// An example pass test: k3.rms_norm lowered by --convert-k3-to-linalg.
// RUN: k3-opt %s --convert-k3-to-linalg | FileCheck %s

// The op becomes a call to its kernel on dynamically shaped operands, with
// eps as an f32 constant; the kernel itself is linalg.
// CHECK-LABEL: func.func @norm
// CHECK: %[[EPS:.+]] = arith.constant 9.99999997E-7 : f32
// CHECK: call @k3k_rms_norm(%{{.+}}, %{{.+}}, %[[EPS]]) : (tensor<?x?xbf16>, tensor<?xbf16>, f32) -> tensor<?x?xbf16>
// CHECK-NOT: k3.rms_norm
// CHECK: func.func private @k3k_rms_norm(
// CHECK: linalg.generic
func.func @norm(%x: tensor<?x16xbf16>, %g: tensor<16xbf16>) -> tensor<?x16xbf16> {
  %y = k3.rms_norm %x, %g {eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}
