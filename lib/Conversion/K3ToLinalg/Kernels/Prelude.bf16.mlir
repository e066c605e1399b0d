// Activation dtype bf16: widen, narrow and round (K3_SPEC §2, docs/NUMERICS.md).
!act = bf16
func.func private @k3k_widen(%a: !act) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @k3k_narrow(%a: f32) -> !act {
  %r = arith.truncf %a : f32 to bf16
  return %r : !act
}
func.func private @k3k_round(%a: f32) -> f32 {
  %n = arith.truncf %a : f32 to bf16
  %r = arith.extf %n : bf16 to f32
  return %r : f32
}
func.func private @k3k_widen32(%a: vector<32x!act>) -> vector<32xf32> {
  %r = arith.extf %a : vector<32xbf16> to vector<32xf32>
  return %r : vector<32xf32>
}
func.func private @k3k_widen8(%a: vector<8x!act>) -> vector<8xf32> {
  %r = arith.extf %a : vector<8xbf16> to vector<8xf32>
  return %r : vector<8xf32>
}
