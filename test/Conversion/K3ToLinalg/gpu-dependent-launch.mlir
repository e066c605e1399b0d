// RUN: k3-opt %s --split-input-file --k3-gpu-dependent-launch | FileCheck %s
// RUN: k3-opt %s --split-input-file --k3-gpu-dependent-launch=sm=80 | FileCheck %s --check-prefix=SM80

// Each kernel waits for the kernel before it, then lets the next one be
// dispatched, before anything else (its early exit included); functions
// that are not kernels are left alone; the module gets the marker global
// the runtime looks for, once.
// CHECK-LABEL: gpu.module @m
// CHECK: gpu.func @k(%{{.*}}: i1) kernel
// CHECK-NEXT: nvvm.griddepcontrol wait
// CHECK-NEXT: nvvm.griddepcontrol launch_dependents
// CHECK-NEXT: cf.cond_br
// CHECK: gpu.func @k2() kernel
// CHECK-NEXT: nvvm.griddepcontrol wait
// CHECK-NEXT: nvvm.griddepcontrol launch_dependents
// CHECK-NEXT: gpu.return
// CHECK: gpu.func @helper()
// CHECK-NOT: griddepcontrol
// CHECK: llvm.mlir.global external @k3_dependent_launch(1 : i32) {addr_space = 1 : i32, alignment = 4 : i64} : i32
// CHECK-NOT: k3_dependent_launch
// SM80-NOT: griddepcontrol
// SM80-NOT: k3_dependent_launch
module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @k(%c: i1) kernel {
      cf.cond_br %c, ^exit, ^work
    ^work:
      gpu.return
    ^exit:
      gpu.return
    }
    gpu.func @k2() kernel {
      gpu.return
    }
    gpu.func @helper() {
      gpu.return
    }
  }
}

// -----

// A module without kernels gets no marker.
// CHECK-LABEL: gpu.module @none
// CHECK-NOT: k3_dependent_launch
module attributes {gpu.container_module} {
  gpu.module @none {
    gpu.func @helper() {
      gpu.return
    }
  }
}
