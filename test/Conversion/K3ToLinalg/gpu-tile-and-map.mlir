// RUN: k3-opt %s --pass-pipeline='builtin.module(func.func(k3-gpu-tile-and-map))' | FileCheck %s
// RUN: k3-opt %s --pass-pipeline='builtin.module(func.func(k3-gpu-tile-and-map{tile-size=128}))' | FileCheck %s --check-prefix=T128
// RUN: not k3-opt %s --pass-pipeline='builtin.module(func.func(k3-gpu-tile-and-map{tile-size=2048}))' 2>&1 | FileCheck %s --check-prefix=BAD

// (tokens, vocabulary): the vocabulary is tiled by 64 threads (thread x) and
// its tiles go on block x; tokens on block y.
// CHECK-LABEL: func.func @lm_head
// CHECK: %[[C64:.+]] = arith.constant 64 : index
// CHECK: %[[S:.+]] = arith.muli %c1, %[[C64]] : index
// CHECK: scf.parallel ({{.*}}) = {{.*}} to ({{.*}}, %c163840) step (%{{.+}}, %[[S]])
// CHECK: scf.parallel
// CHECK: } {mapping = [#gpu.loop_dim_map<processor = sequential, {{.*}}>, #gpu.loop_dim_map<processor = thread_x, {{.*}}>]}
// CHECK: } {k3.tile_sizes = array<i64: 1, 64>, mapping = [#gpu.loop_dim_map<processor = block_y, {{.*}}>, #gpu.loop_dim_map<processor = block_x, {{.*}}>]}
// T128-LABEL: func.func @lm_head
// T128: arith.constant 128 : index
// BAD: tile-size must be in [1, 1024], got 2048
func.func @lm_head(%out: memref<?x163840xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cv = arith.constant 163840 : index
  %t = memref.dim %out, %c0 : memref<?x163840xf32>
  %z = arith.constant 0.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %cv) step (%c1, %c1) {
    memref.store %z, %out[%i, %j] : memref<?x163840xf32>
    scf.reduce
  }
  return
}

// Four dimensions: the outermost is sequential; a nested parallel loop (here
// over taps) runs sequentially in each thread.
// CHECK-LABEL: func.func @rank4
// CHECK: scf.parallel
// CHECK: scf.parallel
// CHECK: scf.parallel
// CHECK: } {mapping = [#gpu.loop_dim_map<processor = sequential, {{.*}}>]}
// CHECK: } {mapping = [#gpu.loop_dim_map<processor = sequential, {{.*}}>, #gpu.loop_dim_map<processor = sequential, {{.*}}>, #gpu.loop_dim_map<processor = sequential, {{.*}}>, #gpu.loop_dim_map<processor = thread_x, {{.*}}>]}
// CHECK: } {k3.tile_sizes = array<i64: 1, 1, 1, 64>, mapping = [#gpu.loop_dim_map<processor = sequential, {{.*}}>, #gpu.loop_dim_map<processor = block_z, {{.*}}>, #gpu.loop_dim_map<processor = block_y, {{.*}}>, #gpu.loop_dim_map<processor = block_x, {{.*}}>]}
func.func @rank4(%out: memref<2x3x4x5xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%a, %b, %c, %d) = (%c0, %c0, %c0, %c0) to (%c2, %c3, %c4, %c5) step (%c1, %c1, %c1, %c1) {
    scf.parallel (%k) = (%c0) to (%c3) step (%c1) {
      memref.store %z, %out[%a, %k, %c, %d] : memref<2x3x4x5xf32>
      scf.reduce
    }
    scf.reduce
  }
  return
}

// A warp loop (k3-gpu-warp-reduce): the 32 lanes are thread x, whole; 8
// outputs per block on thread y; the output tiles on block x.
// CHECK-LABEL: func.func @warp
// CHECK: scf.parallel
// CHECK: scf.parallel
// CHECK: gpu.shuffle xor
// CHECK: } {mapping = [#gpu.loop_dim_map<processor = thread_y, {{.*}}>, #gpu.loop_dim_map<processor = thread_x, {{.*}}>]}
// CHECK: } {k3.tile_sizes = array<i64: 8, 32>, mapping = [#gpu.loop_dim_map<processor = block_x, {{.*}}>, #gpu.loop_dim_map<processor = sequential, {{.*}}>]}
func.func @warp(%y: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c1i = arith.constant 1 : i32
  %c32i = arith.constant 32 : i32
  %one = arith.constant 1.0 : f32
  scf.parallel (%j, %lane) = (%c0, %c0) to (%n, %c32) step (%c1, %c1) {
    %s, %v = gpu.shuffle xor %one, %c1i, %c32i : f32
    memref.store %s, %y[%j] : memref<?xf32>
    scf.reduce
  } {k3.warp_lanes = 32 : i64}
  return
}
