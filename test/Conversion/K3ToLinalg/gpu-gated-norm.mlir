// RUN: k3-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect --pass-pipeline='builtin.module(func.func(k3-gpu-gated-norm),canonicalize,cse)' | FileCheck %s

// @k3k_gated_rms_norm_rows after bufferization (K3_SPEC §4.7): o and z
// [T, H, V], γ [V], eps, out; the library's conversions named by the
// attribute.
func.func private @widen(%a: bf16) -> f32 {
  %f = arith.extf %a : bf16 to f32
  return %f : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %b = arith.truncf %a : f32 to bf16
  return %b : bf16
}
// CHECK-LABEL: func.func @norm
// CHECK-SAME: (%[[O:[^:]+]]: memref<?x?x?xbf16>, %[[Z:[^:]+]]: memref<?x?x?xbf16>, %[[G:[^:]+]]: memref<?xf32>, %[[EPS:[^:]+]]: f32, %[[OUT:[^:]+]]: memref<?x?x?xbf16>)
// Run-time choice: V a multiple of 32, z, out and γ of o's shape.
// CHECK-DAG: %[[T:.+]] = memref.dim %[[O]], %c0
// CHECK-DAG: %[[H:.+]] = memref.dim %[[O]], %c1
// CHECK-DAG: %[[V:.+]] = memref.dim %[[O]], %c2
// CHECK-DAG: arith.remui %[[V]], %c32
// CHECK-DAG: memref.dim %[[Z]], %c2
// CHECK-DAG: memref.dim %[[OUT]], %c2
// CHECK-DAG: memref.dim %[[G]], %c0
// CHECK: scf.if
// One warp (32 x 8 threads: 8 warps per block) per (token, head) ...
// CHECK: %[[ROWS:.+]] = arith.muli %[[T]], %[[H]]
// CHECK: %[[NB:.+]] = arith.ceildivui %[[ROWS]], %c8
// CHECK: gpu.launch blocks(%[[BX:[^,]+]], {{.*}} in (%{{.+}} = %[[NB]], {{.*}} threads(%[[LANE:[^,]+]], %[[WY:[^,]+]], {{.*}} in (%{{.+}} = %c32, %{{.+}} = %c8,
// CHECK: %[[R0:.+]] = arith.muli %[[BX]], %c8
// CHECK: %[[ROW:.+]] = arith.addi %[[R0]], %[[WY]]
// CHECK: %[[IN:.+]] = arith.cmpi ult, %[[ROW]], %[[ROWS]]
// CHECK: scf.if %[[IN]] {
// CHECK: %[[I:.+]] = arith.divui %[[ROW]], %[[H]]
// CHECK: %[[HD:.+]] = arith.remui %[[ROW]], %[[H]]
// ... the sum of squares: lane l's values l, l + 32, ... in order from 0,
// then the warp's xor tree ...
// CHECK: %[[SS:.+]] = scf.for %[[C:.+]] = %[[LANE]] to %[[V]] step %c32 iter_args(%[[ACC:.+]] = %cst
// CHECK: %[[X:.+]] = memref.load %[[O]][%[[I]], %[[HD]], %[[C]]]
// CHECK: %[[XF:.+]] = func.call @widen(%[[X]])
// CHECK: %[[SQ:.+]] = arith.mulf %[[XF]], %[[XF]]
// CHECK: %[[NEXT:.+]] = arith.addf %[[ACC]], %[[SQ]]
// CHECK: scf.yield %[[NEXT]]
// CHECK: gpu.shuffle  xor %[[SS]], %c16_i32, %c32_i32
// CHECK-COUNT-4: gpu.shuffle  xor
// CHECK: %[[S:.+]] = arith.addf
// CHECK: %[[VI:.+]] = arith.index_cast %[[V]] : index to i64
// CHECK: %[[VF:.+]] = arith.sitofp %[[VI]] : i64 to f32
// ... and each value normalised as the generic body does it:
// round(o / sqrt(s / V + eps) · γ · (1 / (1 + exp(-z)))).
// CHECK: scf.for %[[C2:.+]] = %[[LANE]] to %[[V]] step %c32 {
// CHECK: %[[X2:.+]] = func.call @widen
// CHECK: %[[ZF:.+]] = func.call @widen
// CHECK: %[[W:.+]] = memref.load %[[G]][%[[C2]]]
// CHECK: %[[M:.+]] = arith.divf %[[S]], %[[VF]]
// CHECK: %[[ME:.+]] = arith.addf %[[M]], %[[EPS]]
// CHECK: %[[RT:.+]] = math.sqrt %[[ME]]
// CHECK: %[[INV:.+]] = arith.divf %cst{{.*}}, %[[RT]]
// CHECK: %[[N:.+]] = arith.mulf %[[X2]], %[[INV]]
// CHECK: %[[NW:.+]] = arith.mulf %[[N]], %[[W]]
// CHECK: %[[NZ:.+]] = arith.negf %[[ZF]]
// CHECK: %[[EX:.+]] = math.exp %[[NZ]]
// CHECK: %[[DEN:.+]] = arith.addf %[[EX]], %cst
// CHECK: %[[SIG:.+]] = arith.divf %cst{{.*}}, %[[DEN]]
// CHECK: %[[Y:.+]] = arith.mulf %[[NW]], %[[SIG]]
// CHECK: %[[YB:.+]] = func.call @narrow(%[[Y]])
// CHECK: memref.store %[[YB]], %[[OUT]][%[[I]], %[[HD]], %[[C2]]]
// CHECK: gpu.terminator
// Otherwise the generic body, as it was.
// CHECK: } else {
// CHECK-NEXT: "test.generic_body"
func.func @norm(%o: memref<?x?x?xbf16>, %z: memref<?x?x?xbf16>, %g: memref<?xf32>, %eps: f32, %out: memref<?x?x?xbf16>)
    attributes {k3.gated_rms_norm = {widen = @widen, narrow = @narrow}} {
  "test.generic_body"() : () -> ()
  return
}

// -----

// Unmarked functions are left alone.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: gpu.launch
func.func @plain(%o: memref<?x?x?xf32>) {
  return
}

// -----

// expected-error @+1 {{k3.gated_rms_norm: expected (o [T, H, V], z [T, H, V], gamma [V], eps, out [T, H, V]) arguments}}
func.func @short(%o: memref<?x?x?xf32>) attributes {k3.gated_rms_norm = {}} {
  return
}

// -----

// expected-error @+1 {{k3.gated_rms_norm: expected bf16 or f32 memrefs o, z and out, f32 gamma and eps}}
func.func @bf16_gamma(%o: memref<?x?x?xbf16>, %z: memref<?x?x?xbf16>, %g: memref<?xbf16>, %eps: f32, %out: memref<?x?x?xbf16>)
    attributes {k3.gated_rms_norm = {}} {
  return
}

// -----

// expected-error @+1 {{k3.gated_rms_norm: expected bf16 or f32 memrefs o, z and out, f32 gamma and eps}}
func.func @mixed(%o: memref<?x?x?xbf16>, %z: memref<?x?x?xf32>, %g: memref<?xf32>, %eps: f32, %out: memref<?x?x?xbf16>)
    attributes {k3.gated_rms_norm = {}} {
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %f = arith.extf %a : bf16 to f32
  return %f : f32
}
// expected-error @+1 {{k3.gated_rms_norm: must be a dictionary naming functions widen (act) -> f32 and narrow (f32) -> act}}
func.func @no_narrow(%o: memref<?x?x?xbf16>, %z: memref<?x?x?xbf16>, %g: memref<?xf32>, %eps: f32, %out: memref<?x?x?xbf16>)
    attributes {k3.gated_rms_norm = {widen = @widen, narrow = @widen}} {
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %f = arith.extf %a : bf16 to f32
  return %f : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %b = arith.truncf %a : f32 to bf16
  return %b : bf16
}
// expected-error @+1 {{k3.gated_rms_norm: the function must return nothing}}
func.func @returns(%o: memref<?x?x?xbf16>, %z: memref<?x?x?xbf16>, %g: memref<?xf32>, %eps: f32, %out: memref<?x?x?xbf16>) -> f32
    attributes {k3.gated_rms_norm = {widen = @widen, narrow = @narrow}} {
  return %eps : f32
}
