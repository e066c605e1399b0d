func.func @forward() {
  return
}
func.func private @body() -> tensor<4xbf16> {
  %w = k3.weight "w" : tensor<4xbf16>
  return %w : tensor<4xbf16>
}
