// RUN: k3-opt %s --k3-weights-to-arguments | FileCheck %s
// RUN: not k3-opt %S/Inputs/weight-outside-forward.mlir --k3-weights-to-arguments 2>&1 | FileCheck %s --check-prefix=ERR

// Weights become @forward arguments after the tokens, in IR order, tagged
// with their checkpoint names; their uses take the arguments.

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[TOK:.+]]: tensor<?xi32>, %[[E:.+]]: tensor<64x16xbf16> {k3.weight = "model.embed_tokens.weight"}, %[[X:.+]]: !k3.mxfp4<4x8x32> {k3.weight = "experts.{e}.w1"}, %[[S:.+]]: !k3.kda_state<
// CHECK-NOT: k3.weight "
// CHECK: k3.embedding %[[TOK]], %[[E]]
// CHECK: return {{.*}}%[[X]]
func.func @forward(%tok: tensor<?xi32>,
                   %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
    -> (tensor<?x16xbf16>, !k3.mxfp4<4x8x32>) {
  %e = k3.weight "model.embed_tokens.weight" : tensor<64x16xbf16>
  %x = k3.embedding %tok, %e : (tensor<?xi32>, tensor<64x16xbf16>) -> tensor<?x16xbf16>
  %w = k3.weight "experts.{e}.w1" : !k3.mxfp4<4x8x32>
  return %x, %w : tensor<?x16xbf16>, !k3.mxfp4<4x8x32>
}

// Weights outside @forward are rejected.
// ERR: error: k3.weight ops must all be in @forward
