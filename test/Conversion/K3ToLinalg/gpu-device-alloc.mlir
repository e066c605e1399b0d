// RUN: k3-opt %s --k3-gpu-device-alloc | FileCheck %s

// Host-side temporaries of the GPU kernels are allocated in device memory;
// allocations inside kernels are left alone.

// CHECK-LABEL: func.func @temporaries
// CHECK: %[[A:.+]] = gpu.alloc  (%{{.+}}) : memref<?x64xf32>
// CHECK-NOT: memref.alloc(
// CHECK: gpu.launch
// CHECK: memref.alloca() : memref<4xf32>
// CHECK: return %[[A]]
func.func @temporaries(%n: index) -> memref<?x64xf32> {
  %c1 = arith.constant 1 : index
  %a = memref.alloc(%n) : memref<?x64xf32>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
    %s = memref.alloca() : memref<4xf32>
    %z = arith.constant 0.0 : f32
    %c0 = arith.constant 0 : index
    memref.store %z, %s[%c0] : memref<4xf32>
    memref.store %z, %a[%c0, %c0] : memref<?x64xf32>
    gpu.terminator
  }
  return %a : memref<?x64xf32>
}
