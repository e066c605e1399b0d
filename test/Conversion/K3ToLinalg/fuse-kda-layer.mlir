// RUN: k3-opt %s --split-input-file --verify-diagnostics --k3-fuse-kda-layer | FileCheck %s

// The library's shapes (Kernels/KDA.mlir): a convolution (x, w, tails,
// slots) -> y, the KDA (q, k, v, f, beta, a_log, dt, pool, slots, the
// scalars) -> o, the gated norm (o, z, gamma, eps) -> out, and the layer
// that takes all their arguments but q, k, v and o.
func.func private @conv(%x: tensor<?x?xbf16>, %w: tensor<?x?x?xf32>, %p: memref<?x?x?xbf16>, %s: memref<?xi32>) -> tensor<?x?xbf16>
func.func private @kda(%q: tensor<?x?x?xbf16>, %k: tensor<?x?x?xbf16>, %v: tensor<?x?x?xbf16>, %f: tensor<?x?x?xbf16>,
                       %pool: memref<?x?x?x?xf32>, %slots: memref<?xi32>, %scale: f32) -> tensor<?x?x?xbf16>
func.func private @norm(%o: tensor<?x?x?xbf16>, %z: tensor<?x?x?xbf16>, %eps: f32) -> tensor<?x?x?xbf16>
func.func private @layer(%xq: tensor<?x?xbf16>, %wq: tensor<?x?x?xf32>, %pq: memref<?x?x?xbf16>, %sq: memref<?xi32>,
                         %xk: tensor<?x?xbf16>, %wk: tensor<?x?x?xf32>, %pk: memref<?x?x?xbf16>, %sk: memref<?xi32>,
                         %xv: tensor<?x?xbf16>, %wv: tensor<?x?x?xf32>, %pv: memref<?x?x?xbf16>, %sv: memref<?xi32>,
                         %f: tensor<?x?x?xbf16>, %pool: memref<?x?x?x?xf32>, %slots: memref<?xi32>, %scale: f32,
                         %z: tensor<?x?x?xbf16>, %eps: f32) -> tensor<?x?x?xbf16>
    attributes {k3.kda_layer = {conv = @conv, kda = @kda, norm = @norm}}

// The chain as convert-k3-to-linalg leaves it (casts, [T, H·D] -> [T, H, D]
// reshapes) becomes one call at the norm's place; the casts and reshapes
// between the calls go, the projections' stay.
// CHECK-LABEL: func.func @mixer
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x8xbf16>, %[[W:[^:]+]]: tensor<8x1x4xf32>, %[[PQ:[^:]+]]: memref<?x?x?xbf16>, %[[PK:[^:]+]]: memref<?x?x?xbf16>, %[[PV:[^:]+]]: memref<?x?x?xbf16>, %[[S:[^:]+]]: memref<?xi32>, %[[F:[^:]+]]: tensor<?x?x?xbf16>, %[[POOL:[^:]+]]: memref<?x?x?x?xf32>, %[[Z:[^:]+]]: tensor<?x?x?xbf16>)
// CHECK-DAG: %[[EPS:.+]] = arith.constant 9.99999974E-6 : f32
// CHECK-DAG: %[[SCALE:.+]] = arith.constant 5.000000e-01 : f32
// CHECK: %[[XC:.+]] = tensor.cast %[[X]] : tensor<?x8xbf16> to tensor<?x?xbf16>
// CHECK: %[[WC:.+]] = tensor.cast %[[W]] : tensor<8x1x4xf32> to tensor<?x?x?xf32>
// CHECK-NOT: call @conv
// CHECK-NOT: call @kda
// CHECK-NOT: tensor.expand_shape
// CHECK: %[[Y:.+]] = call @layer(%[[XC]], %[[WC]], %[[PQ]], %[[S]], %[[XC]], %[[WC]], %[[PK]], %[[S]], %[[XC]], %[[WC]], %[[PV]], %[[S]], %[[F]], %[[POOL]], %[[S]], %[[SCALE]], %[[Z]], %[[EPS]])
// CHECK-NOT: call @norm
// CHECK: return %[[Y]]
func.func @mixer(%x: tensor<?x8xbf16>, %w: tensor<8x1x4xf32>, %pq: memref<?x?x?xbf16>, %pk: memref<?x?x?xbf16>,
                 %pv: memref<?x?x?xbf16>, %s: memref<?xi32>, %f: tensor<?x?x?xbf16>, %pool: memref<?x?x?x?xf32>,
                 %z: tensor<?x?x?xbf16>) -> tensor<?x?x?xbf16> {
  %c0 = arith.constant 0 : index
  %eps = arith.constant 1.0e-5 : f32
  %scale = arith.constant 0.5 : f32
  %t = tensor.dim %x, %c0 : tensor<?x8xbf16>
  %xc = tensor.cast %x : tensor<?x8xbf16> to tensor<?x?xbf16>
  %wc = tensor.cast %w : tensor<8x1x4xf32> to tensor<?x?x?xf32>
  %yq = call @conv(%xc, %wc, %pq, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %yqc = tensor.cast %yq : tensor<?x?xbf16> to tensor<?x8xbf16>
  %yk = call @conv(%xc, %wc, %pk, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %ykc = tensor.cast %yk : tensor<?x?xbf16> to tensor<?x8xbf16>
  %yv = call @conv(%xc, %wc, %pv, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %yvc = tensor.cast %yv : tensor<?x?xbf16> to tensor<?x8xbf16>
  %q3 = tensor.expand_shape %yqc [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x8xbf16> into tensor<?x2x4xbf16>
  %k3 = tensor.expand_shape %ykc [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x8xbf16> into tensor<?x2x4xbf16>
  %v3 = tensor.expand_shape %yvc [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x8xbf16> into tensor<?x2x4xbf16>
  %q = tensor.cast %q3 : tensor<?x2x4xbf16> to tensor<?x?x?xbf16>
  %k = tensor.cast %k3 : tensor<?x2x4xbf16> to tensor<?x?x?xbf16>
  %v = tensor.cast %v3 : tensor<?x2x4xbf16> to tensor<?x?x?xbf16>
  %o = call @kda(%q, %k, %v, %f, %pool, %s, %scale) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, memref<?x?x?x?xf32>, memref<?xi32>, f32) -> tensor<?x?x?xbf16>
  %y = call @norm(%o, %z, %eps) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, f32) -> tensor<?x?x?xbf16>
  return %y : tensor<?x?x?xbf16>
}

// A convolution read elsewhere too, a KDA output read elsewhere too, and a
// state buffer another op touches keep their calls.
// CHECK-LABEL: func.func @shared
// CHECK-COUNT-3: call @conv
// CHECK: call @kda
// CHECK: call @norm
// CHECK-NOT: call @layer
// CHECK-LABEL: func.func @read_twice
// CHECK: call @kda
// CHECK: call @norm
// CHECK-NOT: call @layer
// CHECK-LABEL: func.func @pool_touched
// CHECK: call @kda
// CHECK: call @norm
// CHECK-NOT: call @layer
func.func @shared(%x: tensor<?x8xbf16>, %w: tensor<?x?x?xf32>, %p: memref<?x?x?xbf16>, %s: memref<?xi32>,
                  %f: tensor<?x?x?xbf16>, %pool: memref<?x?x?x?xf32>, %z: tensor<?x?x?xbf16>, %eps: f32, %scale: f32)
    -> (tensor<?x?x?xbf16>, tensor<?x?xbf16>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x8xbf16>
  %xc = tensor.cast %x : tensor<?x8xbf16> to tensor<?x?xbf16>
  %yq = call @conv(%xc, %w, %p, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %yk = call @conv(%xc, %w, %p, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %yv = call @conv(%xc, %w, %p, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %q = tensor.expand_shape %yq [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x?xbf16> into tensor<?x?x?xbf16>
  %k = tensor.expand_shape %yk [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x?xbf16> into tensor<?x?x?xbf16>
  %v = tensor.expand_shape %yv [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x?xbf16> into tensor<?x?x?xbf16>
  %o = call @kda(%q, %k, %v, %f, %pool, %s, %scale) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, memref<?x?x?x?xf32>, memref<?xi32>, f32) -> tensor<?x?x?xbf16>
  %y = call @norm(%o, %z, %eps) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, f32) -> tensor<?x?x?xbf16>
  return %y, %yq : tensor<?x?x?xbf16>, tensor<?x?xbf16>
}
func.func @read_twice(%q: tensor<?x?x?xbf16>, %f: tensor<?x?x?xbf16>, %pool: memref<?x?x?x?xf32>, %s: memref<?xi32>,
                      %z: tensor<?x?x?xbf16>, %eps: f32, %scale: f32) -> (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>) {
  %o = call @kda(%q, %q, %q, %f, %pool, %s, %scale) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, memref<?x?x?x?xf32>, memref<?xi32>, f32) -> tensor<?x?x?xbf16>
  %y = call @norm(%o, %z, %eps) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, f32) -> tensor<?x?x?xbf16>
  return %y, %o : tensor<?x?x?xbf16>, tensor<?x?x?xbf16>
}
func.func @pool_touched(%x: tensor<?x?xbf16>, %w: tensor<?x?x?xf32>, %pq: memref<?x?x?xbf16>, %pk: memref<?x?x?xbf16>,
                        %pv: memref<?x?x?xbf16>, %s: memref<?xi32>, %f: tensor<?x?x?xbf16>, %pool: memref<?x?x?x?xf32>,
                        %z: tensor<?x?x?xbf16>, %eps: f32, %scale: f32) -> tensor<?x?x?xbf16> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?xbf16>
  %yq = call @conv(%x, %w, %pq, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %yk = call @conv(%x, %w, %pk, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %yv = call @conv(%x, %w, %pv, %s) : (tensor<?x?xbf16>, tensor<?x?x?xf32>, memref<?x?x?xbf16>, memref<?xi32>) -> tensor<?x?xbf16>
  %q = tensor.expand_shape %yq [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x?xbf16> into tensor<?x?x?xbf16>
  %k = tensor.expand_shape %yk [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x?xbf16> into tensor<?x?x?xbf16>
  %v = tensor.expand_shape %yv [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x?xbf16> into tensor<?x?x?xbf16>
  %o = call @kda(%q, %k, %v, %f, %pool, %s, %scale) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, memref<?x?x?x?xf32>, memref<?xi32>, f32) -> tensor<?x?x?xbf16>
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  memref.store %zero, %pool[%c0, %c0, %c0, %c1] : memref<?x?x?x?xf32>
  %y = call @norm(%o, %z, %eps) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, f32) -> tensor<?x?x?xbf16>
  return %y : tensor<?x?x?xbf16>
}

// -----

// expected-error @+1 {{k3.kda_layer: expected {conv = @c, kda = @k, norm = @n} naming functions}}
func.func private @bad(%x: tensor<?x?xbf16>) -> tensor<?x?xbf16> attributes {k3.kda_layer = {conv = @missing}}
