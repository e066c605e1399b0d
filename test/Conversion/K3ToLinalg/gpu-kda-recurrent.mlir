// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(func.func(k3-gpu-kda-recurrent),canonicalize,cse)' | FileCheck %s

// @k3k_kda_step after bufferization: q, k, v, f [T, H, D], the pre-sigmoid
// beta [T, H], A_log, δ, the state pool [S, H, V, K] as a strided view,
// slots, out [T, H, V], softplus, lower bound, scale, L2 eps, value-first;
// the library's functions named by the attribute.
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[Q:[^:]+]]: memref<?x?x?xbf16>, %[[K:[^:]+]]: memref<?x?x?xbf16>, %[[V:[^:]+]]: memref<?x?x?xbf16>, %[[F:[^:]+]]: memref<?x?x?xbf16>, %[[B:[^:]+]]: memref<?x?xbf16>, %[[AL:[^:]+]]: memref<?xf32>, %[[DT:[^:]+]]: memref<?xf32>, %[[POOL:[^:]+]]: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %[[SLOTS:[^:]+]]: memref<?xi32>, %[[OUT:[^:]+]]: memref<?x?x?xbf16>, %[[SP:[^:]+]]: i1, %[[LB:[^:]+]]: f32, %[[SC:[^:]+]]: f32, %[[EPS:[^:]+]]: f32, %[[VF:[^:]+]]: i1)
// Run-time choice: a value-first pool whose rows are contiguous (unit last
// stride, row stride a multiple of 4, 16-byte aligned start), K = 64 or
// 128, V a multiple of 4 (the rows of a warp), q, k and f 8-byte aligned,
// k and f of q's shape.
// CHECK-DAG: %[[DK:.+]] = memref.dim %[[Q]], %c2
// CHECK-DAG: %[[DV:.+]] = memref.dim %[[V]], %c2
// CHECK-DAG: %{{.+}}, %[[OFF:.+]], %[[SZ:.+]]:4, %[[ST:.+]]:4 = memref.extract_strided_metadata %[[POOL]]
// CHECK-DAG: %[[UNIT:.+]] = arith.cmpi eq, %[[ST]]#3, %c1
// CHECK-DAG: arith.andi %[[VF]], %[[UNIT]]
// CHECK-DAG: arith.remui %[[ST]]#2, %c4
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[Q]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[K]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[F]]
// CHECK-DAG: arith.remui %{{.+}}, %c8
// CHECK-DAG: memref.dim %[[F]], %c2
// CHECK-DAG: arith.cmpi eq, %[[DK]], %c64
// CHECK-DAG: %[[IS128:.+]] = arith.cmpi eq, %[[DK]], %c128
// CHECK-DAG: arith.remui %[[DV]], %c4
// CHECK: scf.if
// CHECK: %[[ROWS:.+]] = memref.reinterpret_cast %[[POOL]] to offset: [%[[OFF]]], sizes: [%[[SZ]]#0, %[[SZ]]#1, %[[SZ]]#2, %[[SZ]]#3], strides: [%[[ST]]#0, %[[ST]]#1, %[[ST]]#2, 1]
// CHECK: scf.if %[[IS128]] {
// One warp per (token, head) and 4 consecutive v, 8 warps per block: the
// lane's 4 elements of each of the 4 state rows first ...
// CHECK: gpu.launch {{.*}} threads(%[[TID:[^,]+]], {{.*}}) in (%{{.+}} = %c256,
// CHECK: %[[LANE:.+]] = arith.remui %[[TID]], %c32
// CHECK: %[[SLOT:.+]] = memref.load %[[SLOTS]]
// CHECK: %[[SL:.+]] = arith.index_cast %[[SLOT]]
// CHECK-COUNT-4: vector.load %[[ROWS]][%[[SL]], {{.+}}] {alignment = 16 : i64} : memref<?x?x?x?xf32, strided<[?, ?, ?, 1], offset: ?>>, vector<4xf32>
// ... then the norms' sums of squares, lane l taking q and k elements l,
// l + 32, l + 64, l + 96 in order from 0, each warp's xor tree, and the
// factors (q's scaled) ...
// CHECK: %[[Q0:.+]] = memref.load %[[Q]][%{{.+}}, %{{.+}}, %[[LANE]]]
// CHECK: %[[QW:.+]] = func.call @widen(%[[Q0]])
// CHECK: %[[QQ:.+]] = arith.mulf %[[QW]], %[[QW]]
// CHECK: arith.addf %[[QQ]], %cst
// CHECK: %[[J1:.+]] = arith.addi %[[LANE]], %c32
// CHECK: memref.load %[[Q]][%{{.+}}, %{{.+}}, %[[J1]]]
// CHECK: arith.addi %[[LANE]], %c64
// CHECK: arith.addi %[[LANE]], %c96
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: %[[QI:.+]] = func.call @inv(%{{.+}}, %[[EPS]])
// CHECK: %[[QS:.+]] = arith.mulf %[[QI]], %[[SC]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: %[[KI:.+]] = func.call @inv(%{{.+}}, %[[EPS]])
// ... the lane's 4 elements of q, k and f (8-byte loads): q·factor,
// k·factor, α = exp(gate(f, δ, A_log)) ...
// CHECK: vector.load %[[Q]]{{.*}} {alignment = 8 : i64} : memref<?x?x?xbf16>, vector<4xbf16>
// CHECK: vector.load %[[K]]{{.*}} {alignment = 8 : i64} : memref<?x?x?xbf16>, vector<4xbf16>
// CHECK: vector.load %[[F]]{{.*}} {alignment = 8 : i64} : memref<?x?x?xbf16>, vector<4xbf16>
// CHECK: %[[A:.+]] = memref.load %[[AL]]
// CHECK: arith.mulf %{{.+}}, %[[QS]]
// CHECK: arith.mulf %{{.+}}, %[[KI]]
// CHECK: %[[D0:.+]] = memref.load %[[DT]]
// CHECK: %[[G:.+]] = func.call @gate(%{{.+}}, %[[D0]], %[[A]], %[[SP]], %[[LB]])
// CHECK: math.exp %[[G]]
// CHECK-COUNT-3: func.call @gate
// CHECK: %[[BV:.+]] = memref.load %[[B]]
// CHECK: %[[BW:.+]] = func.call @widen(%[[BV]])
// CHECK: %[[BETA:.+]] = func.call @sig(%[[BW]])
// Each row: the lane's terms of k·(αS), the warp's xor tree; u = β (v -
// pred); the new row αS + k u and q·S over the warp; the row written back
// once, o narrowed and stored by lane 0.
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.load %[[V]]
// CHECK: arith.subf
// CHECK: arith.mulf %[[BETA]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: vector.store %{{.+}}, %[[ROWS]][%[[SL]], {{.+}}] {alignment = 16 : i64}
// CHECK: scf.if
// CHECK: %[[O:.+]] = func.call @narrow(
// CHECK: memref.store %[[O]], %[[OUT]]
// CHECK-COUNT-3: vector.store %{{.+}}, %[[ROWS]][%[[SL]], {{.+}}] {alignment = 16 : i64}
// CHECK-NOT: vector.store %{{.+}}, %[[ROWS]]
// CHECK: } else {
// K = 64: two elements per lane (8-byte state loads, 4-byte q, k, f loads).
// CHECK: gpu.launch
// CHECK: vector.load %[[ROWS]]{{.*}} {alignment = 8 : i64} {{.*}} vector<2xf32>
// CHECK: vector.load %[[Q]]{{.*}} {alignment = 4 : i64} : memref<?x?x?xbf16>, vector<2xbf16>
// CHECK-COUNT-2: func.call @gate
// CHECK-NOT: func.call @gate
// CHECK: vector.store {{.*}} vector<2xf32>
// Otherwise the generic body.
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[OUT]][%c0, %c0, %c0]
// CHECK: return
func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @inv(%s: f32, %e: f32) -> f32 {
  %a = arith.addf %s, %e : f32
  %r = math.rsqrt %a : f32
  return %r : f32
}
func.func private @gate(%f: f32, %d: f32, %a: f32, %sp: i1, %lb: f32) -> f32 {
  %x = arith.addf %f, %d : f32
  %r = arith.mulf %x, %a : f32
  return %r : f32
}
func.func private @sig(%x: f32) -> f32 {
  return %x : f32
}
func.func @step(%q: memref<?x?x?xbf16>, %k: memref<?x?x?xbf16>, %v: memref<?x?x?xbf16>, %f: memref<?x?x?xbf16>,
                %beta: memref<?x?xbf16>, %alog: memref<?xf32>, %dt: memref<?xf32>,
                %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
                %out: memref<?x?x?xbf16>, %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1)
    attributes {k3.kda_recurrent = {widen = @widen, narrow = @narrow, inv = @inv, gate = @gate, sigmoid = @sig}} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  memref.store %z, %out[%c0, %c0, %c0] : memref<?x?x?xbf16>
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

// expected-error @+1 {{k3.kda_recurrent: expected (q, k, v, f [T, H, D], beta [T, H], a_log, dt, pool [S, H, V, K], slots, out [T, H, V], softplus, lower bound, scale, l2 eps, value-first) arguments}}
func.func @short(%q: memref<?x?x?xf32>) attributes {k3.kda_recurrent = {}} {
  return
}

// -----

// expected-error @+1 {{k3.kda_recurrent: expected bf16 or f32 memrefs q, k, v, f, beta and out, f32 a_log, dt and pool, i32 slots, i1 softplus, f32 lower bound, scale and l2 eps, i1 value-first}}
func.func @bf16_state(%q: memref<?x?x?xbf16>, %k: memref<?x?x?xbf16>, %v: memref<?x?x?xbf16>, %f: memref<?x?x?xbf16>,
                      %beta: memref<?x?xbf16>, %alog: memref<?xf32>, %dt: memref<?xf32>,
                      %pool: memref<?x?x?x?xbf16>, %slots: memref<?xi32>,
                      %out: memref<?x?x?xbf16>, %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1)
    attributes {k3.kda_recurrent = {}} {
  return
}

// -----

// The out in another type than q.
// expected-error @+1 {{k3.kda_recurrent: expected bf16 or f32 memrefs q, k, v, f, beta and out}}
func.func @mixed(%q: memref<?x?x?xbf16>, %k: memref<?x?x?xbf16>, %v: memref<?x?x?xbf16>, %f: memref<?x?x?xbf16>,
                 %beta: memref<?x?xbf16>, %alog: memref<?xf32>, %dt: memref<?xf32>,
                 %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
                 %out: memref<?x?x?xf32>, %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1)
    attributes {k3.kda_recurrent = {}} {
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @inv(%s: f32, %e: f32) -> f32 {
  %a = arith.addf %s, %e : f32
  %r = math.rsqrt %a : f32
  return %r : f32
}
func.func private @gate(%f: f32, %d: f32, %a: f32, %sp: i1, %lb: f32) -> f32 {
  %x = arith.addf %f, %d : f32
  %r = arith.mulf %x, %a : f32
  return %r : f32
}
func.func private @sig(%x: f32) -> f32 {
  return %x : f32
}
// The gate with another signature.
// expected-error @+1 {{k3.kda_recurrent: must be a dictionary naming functions widen (act) -> f32, narrow (f32) -> act, inv (f32, f32) -> f32, gate (f32, f32, f32, i1, f32) -> f32 and sigmoid (f32) -> f32}}
func.func @bad_gate(%q: memref<?x?x?xbf16>, %k: memref<?x?x?xbf16>, %v: memref<?x?x?xbf16>, %f: memref<?x?x?xbf16>,
                %beta: memref<?x?xbf16>, %alog: memref<?xf32>, %dt: memref<?xf32>,
                %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
                %out: memref<?x?x?xbf16>, %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1)
    attributes {k3.kda_recurrent = {widen = @widen, narrow = @narrow, inv = @inv, gate = @sig, sigmoid = @sig}} {
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @inv(%s: f32, %e: f32) -> f32 {
  %a = arith.addf %s, %e : f32
  %r = math.rsqrt %a : f32
  return %r : f32
}
func.func private @gate(%f: f32, %d: f32, %a: f32, %sp: i1, %lb: f32) -> f32 {
  %x = arith.addf %f, %d : f32
  %r = arith.mulf %x, %a : f32
  return %r : f32
}
func.func private @sig(%x: f32) -> f32 {
  return %x : f32
}
// expected-error @+1 {{k3.kda_recurrent: the function must return nothing}}
func.func @returns(%q: memref<?x?x?xbf16>, %k: memref<?x?x?xbf16>, %v: memref<?x?x?xbf16>, %f: memref<?x?x?xbf16>,
                %beta: memref<?x?xbf16>, %alog: memref<?xf32>, %dt: memref<?xf32>,
                %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
                %out: memref<?x?x?xbf16>, %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1) -> index
    attributes {k3.kda_recurrent = {widen = @widen, narrow = @narrow, inv = @inv, gate = @gate, sigmoid = @sig}} {
  %c0 = arith.constant 0 : index
  return %c0 : index
}
