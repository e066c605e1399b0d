// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-route,canonicalize,cse)' | FileCheck %s
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-route{sm=75})' | FileCheck %s --check-prefix=OLD

// Below sm_80 (no redux.sync) the generic body stays.
// OLD-LABEL: func.func @route
// OLD-NOT: gpu.launch
// OLD: return

// @k3k_route_rows after bufferization: the router's scores [T, E], the
// bias [E], renorm, scaling, and the outputs idx and weights [T, k].
// CHECK-LABEL: memref.global "private" @k3k_route_pairs : memref<2x2x32xi32, #gpu.address_space<workgroup>>
// CHECK: memref.global "private" @k3k_route_weights : memref<32xf32, #gpu.address_space<workgroup>>
// CHECK-LABEL: func.func @route
// CHECK-SAME: (%[[S:[^:]+]]: memref<?x?xf32>, %[[B:[^:]+]]: memref<?xf32>, %[[RN:[^:]+]]: i1, %[[SC:[^:]+]]: f32, %[[IDX:[^:]+]]: memref<?x?xi64>, %[[W:[^:]+]]: memref<?x?xf32>)
// CHECK-DAG: %[[TINY:.+]] = arith.constant 9.99999968E-21 : f32
// CHECK-DAG: %[[F0:.+]] = arith.constant 0.000000e+00 : f32
// Run-time choice: T >= 1, 1 <= k <= 32, k <= E <= 1024, bias [E],
// outputs [T, k].
// CHECK-DAG: %[[T:.+]] = memref.dim %[[S]], %c0
// CHECK-DAG: %[[E:.+]] = memref.dim %[[S]], %c1
// CHECK-DAG: %[[K:.+]] = memref.dim %[[IDX]], %c1
// CHECK-DAG: arith.cmpi ugt, %[[T]], %c0
// CHECK-DAG: arith.cmpi ugt, %[[K]], %c0
// CHECK-DAG: arith.cmpi ult, %[[K]], %c33
// CHECK-DAG: arith.cmpi ult, %[[E]], %c1025
// CHECK-DAG: arith.cmpi ule, %[[K]], %[[E]]
// CHECK-DAG: %[[BE:.+]] = memref.dim %[[B]], %c0
// CHECK-DAG: arith.cmpi eq, %[[BE]], %[[E]]
// CHECK-DAG: %[[IT:.+]] = memref.dim %[[IDX]], %c0
// CHECK-DAG: arith.cmpi eq, %[[IT]], %[[T]]
// CHECK-DAG: %[[WT:.+]] = memref.dim %[[W]], %c0
// CHECK-DAG: arith.cmpi eq, %[[WT]], %[[T]]
// CHECK-DAG: %[[WK:.+]] = memref.dim %[[W]], %c1
// CHECK-DAG: arith.cmpi eq, %[[WK]], %[[K]]
// CHECK: scf.if
// One block of 1024 threads per token.
// CHECK: gpu.launch blocks(%[[TOK:[^,]+]], {{.*}} in (%{{.+}} = %[[T]], %{{.+}} = %c1, %{{.+}} = %c1) threads(%[[TID:[^,]+]], {{.*}} in (%{{.+}} = %c1024,
// CHECK: %[[PAIRS:.+]] = memref.get_global @k3k_route_pairs
// CHECK: %[[WS:.+]] = memref.get_global @k3k_route_weights
// CHECK: %[[LANE:.+]] = arith.remui %[[TID]], %c32
// CHECK: %[[WARP:.+]] = arith.divui %[[TID]], %c32
// Thread e's expert (threads past E load expert 0's) and its key s + b.
// CHECK: %[[HAVE:.+]] = arith.cmpi ult, %[[TID]], %[[E]]
// CHECK: %[[EI:.+]] = arith.select %[[HAVE]], %[[TID]], %c0
// CHECK: %[[SV:.+]] = memref.load %[[S]][%[[TOK]], %[[EI]]]
// CHECK: %[[BV:.+]] = memref.load %[[B]][%[[EI]]]
// CHECK: %[[KEY:.+]] = arith.addf %[[SV]], %[[BV]] : f32
// The word: -0 as +0, float bits made monotonic, 1 for NaN, 0 past E.
// CHECK: %[[NUM:.+]] = arith.cmpf ord, %[[KEY]], %[[KEY]]
// CHECK: %[[ZERO:.+]] = arith.cmpf oeq, %[[KEY]], %[[F0]]
// CHECK: %[[K0:.+]] = arith.select %[[ZERO]], %[[F0]], %[[KEY]]
// CHECK: %[[BITS:.+]] = arith.bitcast %[[K0]] : f32 to i32
// CHECK: %[[NEG:.+]] = arith.cmpi slt, %[[BITS]], %c0_i32
// CHECK: %[[POS:.+]] = arith.ori %[[BITS]], %c-2147483648_i32
// CHECK: %[[INV:.+]] = arith.xori %[[BITS]], %c-1_i32
// CHECK: %[[ORD:.+]] = arith.select %[[NEG]], %[[INV]], %[[POS]]
// CHECK: %[[W1:.+]] = arith.select %[[NUM]], %[[ORD]], %c1_i32
// CHECK: %[[WORD:.+]] = arith.select %[[HAVE]], %[[W1]], %c0_i32
// CHECK: %[[SELF:.+]] = arith.index_castui %[[TID]] : index to i32
// k rounds: the warp's best word and lowest index holding it, lane 0's
// pair to buffer r mod 2, one barrier, the same over the warps' pairs.
// CHECK: scf.for %[[R:.+]] = %c0 to %[[K]] step %c1 iter_args(%[[CUR:.+]] = %[[WORD]]) -> (i32) {
// CHECK:   %[[BUF:.+]] = arith.remui %[[R]], %c2
// CHECK:   %[[TOP:.+]] = nvvm.redux.sync umax %[[CUR]], %c-1_i32
// CHECK:   %[[HOLD:.+]] = arith.cmpi eq, %[[CUR]], %[[TOP]]
// CHECK:   %[[CAND:.+]] = arith.select %[[HOLD]], %[[SELF]], %c-1_i32
// CHECK:   %[[AT:.+]] = nvvm.redux.sync umin %[[CAND]], %c-1_i32
// CHECK:   %[[L0:.+]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK:   scf.if %[[L0]] {
// CHECK:     memref.store %[[TOP]], %[[PAIRS]][%[[BUF]], %c0, %[[WARP]]]
// CHECK:     memref.store %[[AT]], %[[PAIRS]][%[[BUF]], %c1, %[[WARP]]]
// CHECK:   }
// CHECK:   gpu.barrier
// CHECK:   %[[PT:.+]] = memref.load %[[PAIRS]][%[[BUF]], %c0, %[[LANE]]]
// CHECK:   %[[PA:.+]] = memref.load %[[PAIRS]][%[[BUF]], %c1, %[[LANE]]]
// CHECK:   %[[TOP2:.+]] = nvvm.redux.sync umax %[[PT]], %c-1_i32
// CHECK:   %[[HOLD2:.+]] = arith.cmpi eq, %[[PT]], %[[TOP2]]
// CHECK:   %[[CAND2:.+]] = arith.select %[[HOLD2]], %[[PA]], %c-1_i32
// CHECK:   %[[WIN:.+]] = nvvm.redux.sync umin %[[CAND2]], %c-1_i32
// The winner writes slot r: its expert and s (expert 0 and 0 for a NaN
// key), and takes the word 0.
// CHECK:   %[[WON:.+]] = arith.cmpi eq, %[[SELF]], %[[WIN]]
// CHECK:   scf.if %[[WON]] {
// CHECK:     %[[E64:.+]] = arith.index_cast %[[EI]] : index to i64
// CHECK:     %[[EV:.+]] = arith.select %[[NUM]], %[[E64]], %c0_i64
// CHECK:     memref.store %[[EV]], %[[IDX]][%[[TOK]], %[[R]]]
// CHECK:     %[[SW:.+]] = arith.select %[[NUM]], %[[SV]], %[[F0]]
// CHECK:     memref.store %[[SW]], %[[WS]][%[[R]]]
// CHECK:   }
// CHECK:   %[[NEXT:.+]] = arith.select %[[WON]], %c0_i32, %[[CUR]]
// CHECK:   scf.yield %[[NEXT]]
// CHECK: }
// CHECK: gpu.barrier
// Warp 0, lane l slot l: the weights' sum as the generic kernel takes it
// (0 + the lane's term, then the xor-shuffle tree), + 1e-20, ω = s / den
// with renorm, times scaling.
// CHECK: %[[W0:.+]] = arith.cmpi ult, %[[TID]], %c32
// CHECK: scf.if %[[W0]] {
// CHECK:   %[[MINE:.+]] = arith.cmpi ult, %[[LANE]], %[[K]]
// CHECK:   %[[LAST:.+]] = arith.subi %[[K]], %c1
// CHECK:   %[[AT:.+]] = arith.select %[[MINE]], %[[LANE]], %[[LAST]]
// CHECK:   %[[WL:.+]] = memref.load %[[WS]][%[[AT]]]
// CHECK:   %[[WM:.+]] = arith.select %[[MINE]], %[[WL]], %[[F0]]
// CHECK:   %[[P0:.+]] = arith.addf %[[WM]], %[[F0]] : f32
// CHECK:   %[[S16:.+]], %{{.+}} = gpu.shuffle xor %[[P0]], %c16_i32, %c32_i32
// CHECK:   %[[P1:.+]] = arith.addf %[[P0]], %[[S16]]
// CHECK:   %[[S8:.+]], %{{.+}} = gpu.shuffle xor %[[P1]], %c8_i32, %c32_i32
// CHECK:   %[[P2:.+]] = arith.addf %[[P1]], %[[S8]]
// CHECK:   %[[S4:.+]], %{{.+}} = gpu.shuffle xor %[[P2]], %c4_i32, %c32_i32
// CHECK:   %[[P3:.+]] = arith.addf %[[P2]], %[[S4]]
// CHECK:   %[[S2:.+]], %{{.+}} = gpu.shuffle xor %[[P3]], %c2_i32, %c32_i32
// CHECK:   %[[P4:.+]] = arith.addf %[[P3]], %[[S2]]
// CHECK:   %[[S1:.+]], %{{.+}} = gpu.shuffle xor %[[P4]], %c1_i32, %c32_i32
// CHECK:   %[[TOT:.+]] = arith.addf %[[P4]], %[[S1]]
// CHECK:   scf.if %[[MINE]] {
// CHECK:     %[[DEN:.+]] = arith.addf %[[TOT]], %[[TINY]] : f32
// CHECK:     %[[Q:.+]] = arith.divf %[[WM]], %[[DEN]] : f32
// CHECK:     %[[WN:.+]] = arith.select %[[RN]], %[[Q]], %[[WM]] : f32
// CHECK:     %[[OUT:.+]] = arith.mulf %[[WN]], %[[SC]] : f32
// CHECK:     memref.store %[[OUT]], %[[W]][%[[TOK]], %[[LANE]]]
// CHECK:   }
// CHECK: }
// CHECK: gpu.terminator
// Other shapes: the generic body.
// CHECK: } else {
// CHECK:   memref.store %[[F0]], %[[W]][%c0, %c0]
// CHECK: }
func.func @route(%s: memref<?x?xf32>, %b: memref<?xf32>, %renorm: i1, %scaling: f32,
                 %idx: memref<?x?xi64>, %w: memref<?x?xf32>)
    attributes {k3.route} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  memref.store %z, %w[%c0, %c0] : memref<?x?xf32>
  return
}

// -----

// Without the mark, nothing changes.
// CHECK-LABEL: func.func @unmarked
// CHECK-NOT: gpu.launch
// CHECK: return
func.func @unmarked(%s: memref<?x?xf32>, %b: memref<?xf32>, %renorm: i1, %scaling: f32,
                    %idx: memref<?x?xi64>, %w: memref<?x?xf32>) {
  return
}

// -----

// expected-error @+1 {{k3.route: expected (scores [T, E] f32, bias [E] f32, renorm i1, scaling f32, idx [T, k] i64, weights [T, k] f32) arguments}}
func.func @route_idx_i32(%s: memref<?x?xf32>, %b: memref<?xf32>, %renorm: i1, %scaling: f32,
                         %idx: memref<?x?xi32>, %w: memref<?x?xf32>)
    attributes {k3.route} {
  return
}

// -----

// expected-error @+1 {{k3.route: expected (scores [T, E] f32, bias [E] f32, renorm i1, scaling f32, idx [T, k] i64, weights [T, k] f32) arguments}}
func.func @route_five(%s: memref<?x?xf32>, %b: memref<?xf32>, %renorm: i1, %scaling: f32,
                      %idx: memref<?x?xi64>)
    attributes {k3.route} {
  return
}

// -----

// expected-error @+1 {{k3.route: the function must return nothing}}
func.func @route_returns(%s: memref<?x?xf32>, %b: memref<?xf32>, %renorm: i1, %scaling: f32,
                         %idx: memref<?x?xi64>, %w: memref<?x?xf32>) -> f32
    attributes {k3.route} {
  return %scaling : f32
}
