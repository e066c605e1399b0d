// REQUIRES: ptxas
// RUN: k3-opt %s --split-input-file --k3-gpu-fatbin --verify-diagnostics | FileCheck %s

// Two targets' PTX become one fatbin (magic 0xBA55ED50) holding a cubin for
// each and the PTX of each, uncompressed.
// CHECK-LABEL: module
// CHECK: gpu.binary @k  [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">, "P\EDU\BA
// CHECK-SAME: .target sm_90
// CHECK-SAME: .target sm_100
// CHECK-NOT: assembly =
module attributes {gpu.container_module} {
  gpu.binary @k [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">, assembly = ".version 8.0\0A.target sm_90\0A.address_size 64\0A.visible .entry k()\0A{\0A\09ret;\0A}\0A">, #gpu.object<#nvvm.target<chip = "sm_100", features = "+ptx86">, assembly = ".version 8.6\0A.target sm_100\0A.address_size 64\0A.visible .entry k()\0A{\0A\09ret;\0A}\0A">]
}

// -----

// ptxas rejects the PTX: its message is the error.
module attributes {gpu.container_module} {
  // expected-error@+1 {{ptxas failed (exit 255): ptxas}}
  gpu.binary @bad [#gpu.object<#nvvm.target<chip = "sm_90">, assembly = ".version 8.0\0A.target sm_90\0A.address_size 64\0A.visible .entry k()\0A{\0A\09bogus;\0A}\0A">]
}

// -----

// Only PTX can be packed.
module attributes {gpu.container_module} {
  // expected-error@+1 {{k3-gpu-fatbin: expects PTX of NVVM targets (run gpu-module-to-binary with format=isa first)}}
  gpu.binary @cubin [#gpu.object<#nvvm.target<chip = "sm_90">, bin = "\7FELF">]
}
