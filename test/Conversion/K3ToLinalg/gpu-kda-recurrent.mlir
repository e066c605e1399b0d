// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(func.func(k3-gpu-kda-recurrent),canonicalize,cse)' | FileCheck %s

// @k3k_kda_recurrent after bufferization: q, k, v, g [T, H, D], beta
// [T, H], the state pool [S, H, V, K] as a strided view, slots, o.
// CHECK-LABEL: func.func @rec
// CHECK-SAME: (%[[Q:[^:]+]]: memref<?x?x?xf32>, %[[K:[^:]+]]: memref<?x?x?xf32>, %[[V:[^:]+]]: memref<?x?x?xf32>, %[[G:[^:]+]]: memref<?x?x?xf32>, %[[B:[^:]+]]: memref<?x?xf32>, %[[POOL:[^:]+]]: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %[[SLOTS:[^:]+]]: memref<?xi32>, %[[O:[^:]+]]: memref<?x?x?xf32>
// Run-time choice: rows of the pool contiguous (unit last stride, row
// stride a multiple of 4, 16-byte aligned start), q, k and g aligned,
// K = 64 or 128, and V a multiple of 4 (the rows of a warp).
// CHECK-DAG: %[[DK:.+]] = memref.dim %[[Q]], %c2
// CHECK-DAG: %[[DV:.+]] = memref.dim %[[V]], %c2
// CHECK-DAG: %{{.+}}, %[[OFF:.+]], %[[SZ:.+]]:4, %[[ST:.+]]:4 = memref.extract_strided_metadata %[[POOL]]
// CHECK-DAG: arith.remui %[[ST]]#2, %c4
// CHECK-DAG: arith.cmpi eq, %[[ST]]#3, %c1
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[Q]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[K]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[G]]
// CHECK-DAG: arith.cmpi eq, %[[DK]], %c64
// CHECK-DAG: %[[IS128:.+]] = arith.cmpi eq, %[[DK]], %c128
// CHECK-DAG: arith.remui %[[DV]], %c4
// CHECK: scf.if
// CHECK: %[[ROWS:.+]] = memref.reinterpret_cast %[[POOL]] to offset: [%[[OFF]]], sizes: [%[[SZ]]#0, %[[SZ]]#1, %[[SZ]]#2, %[[SZ]]#3], strides: [%[[ST]]#0, %[[ST]]#1, %[[ST]]#2, 1]
// CHECK: scf.if %[[IS128]] {
// One warp per (token, head) and 4 consecutive v, 8 warps per block: the
// lane's 4 elements of each of the 4 state rows, then of g, k and q, each
// one 16-byte load; α = exp(g) once for the 4 rows.
// CHECK: gpu.launch {{.*}} threads({{.*}}) in (%{{.+}} = %c256,
// CHECK: %[[SLOT:.+]] = memref.load %[[SLOTS]]
// CHECK: %[[SL:.+]] = arith.index_cast %[[SLOT]]
// CHECK-COUNT-4: vector.load %[[ROWS]][%[[SL]], {{.+}}] {alignment = 16 : i64} : memref<?x?x?x?xf32, strided<[?, ?, ?, 1], offset: ?>>, vector<4xf32>
// CHECK: vector.load %[[G]]{{.*}} vector<4xf32>
// CHECK: vector.load %[[K]]{{.*}} vector<4xf32>
// CHECK: vector.load %[[Q]]{{.*}} vector<4xf32>
// CHECK-COUNT-4: math.exp
// CHECK-NOT: math.exp
// CHECK: memref.load %[[B]]
// Each row: the lane's terms of k·(αS), the warp's xor tree; u = β (v -
// pred); the new row αS + k u and q·S over the warp; the row written back
// once, o by lane 0.
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.load %[[V]]
// CHECK: arith.subf
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: vector.store %{{.+}}, %[[ROWS]][%[[SL]], {{.+}}] {alignment = 16 : i64}
// CHECK: scf.if
// CHECK: memref.store %{{.+}}, %[[O]]
// CHECK-COUNT-3: vector.store %{{.+}}, %[[ROWS]][%[[SL]], {{.+}}] {alignment = 16 : i64}
// CHECK-NOT: vector.store %{{.+}}, %[[ROWS]]
// CHECK: } else {
// K = 64: two elements per lane (8-byte loads).
// CHECK: gpu.launch
// CHECK: vector.load %[[ROWS]]{{.*}} {alignment = 8 : i64} {{.*}} vector<2xf32>
// CHECK-COUNT-2: math.exp
// CHECK-NOT: math.exp
// CHECK: vector.store {{.*}} vector<2xf32>
// Otherwise the three loops.
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[O]][%c0, %c0, %c0]
// CHECK: return
func.func @rec(%qn: memref<?x?x?xf32>, %kn: memref<?x?x?xf32>, %vf: memref<?x?x?xf32>,
               %gg: memref<?x?x?xf32>, %bb: memref<?x?xf32>, %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>,
               %slots: memref<?xi32>, %o: memref<?x?x?xf32>, %vfirst: i1)
    attributes {k3.kda_recurrent} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  memref.store %z, %o[%c0, %c0, %c0] : memref<?x?x?xf32>
  return
}

// -----

// An unmarked function is left alone.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: gpu.launch
// CHECK: return
func.func @plain(%qn: memref<?x?x?xf32>) {
  return
}

// -----

// expected-error @+1 {{k3.kda_recurrent: expected (q, k, v, g [T, H, D], beta [T, H], f32 pool [S, H, V, K], i32 slots, o [T, H, V], ...) memrefs}}
func.func @bf16_state(%qn: memref<?x?x?xf32>, %kn: memref<?x?x?xf32>, %vf: memref<?x?x?xf32>,
                      %gg: memref<?x?x?xf32>, %bb: memref<?x?xf32>, %pool: memref<?x?x?x?xbf16>,
                      %slots: memref<?xi32>, %o: memref<?x?x?xf32>, %vfirst: i1)
    attributes {k3.kda_recurrent} {
  return
}

// -----

// expected-error @+1 {{k3.kda_recurrent: the function must return nothing}}
func.func @returns(%qn: memref<?x?x?xf32>, %kn: memref<?x?x?xf32>, %vf: memref<?x?x?xf32>,
                   %gg: memref<?x?x?xf32>, %bb: memref<?x?xf32>, %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>,
                   %slots: memref<?xi32>, %o: memref<?x?x?xf32>, %vfirst: i1) -> index
    attributes {k3.kda_recurrent} {
  %c0 = arith.constant 0 : index
  return %c0 : index
}
