module {
  func.func @f(%a: f32) -> f32 {
    %0 = math.erf %a : f32
    return %0 : f32
  }
}
