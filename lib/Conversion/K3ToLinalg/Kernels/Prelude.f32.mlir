// Activation dtype f32: widening, narrowing and rounding are the identity.
!act = f32
func.func private @k3k_widen(%a: !act) -> f32 {
  return %a : f32
}
func.func private @k3k_narrow(%a: f32) -> !act {
  return %a : !act
}
func.func private @k3k_round(%a: f32) -> f32 {
  return %a : f32
}
func.func private @k3k_widen32(%a: vector<32x!act>) -> vector<32xf32> {
  return %a : vector<32xf32>
}
func.func private @k3k_widen8(%a: vector<8x!act>) -> vector<8xf32> {
  return %a : vector<8xf32>
}
