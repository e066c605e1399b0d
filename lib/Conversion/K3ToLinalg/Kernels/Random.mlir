// Random weights from a seed (docs/ABI.md, `k3_fill_random`; k3rt's
// k3rt_weights_generate): a 66 GB model needs no checkpoint to be run or
// benchmarked, and the weights are made where they live (device memory for
// a GPU library). Counter-based: element e of stream s gets the top 24 bits
// h of SplitMix64's finaliser (Steele, Lea, Flood: "Fast splittable
// pseudorandom number generators", OOPSLA 2014) of
// seed·φ + s·0xD1B54A32D192ED03 + e, so every element is made on its own
// and the host and the GPU give the same bytes. An element is
//   bytes:  (h mod range) + off                       (range 0: off)
//   floats: float((h mod range) + off) · scale        (one rounding; bf16 then
//           rounded to nearest even)
// and word w of `out` holds elements 2w, 2w+1 (kind 0, bf16, low half
// first), element w (kind 1, f32) or elements 4w .. 4w+3 (kind 2, bytes,
// lowest first).

func.func private @k3k_random_bits(%seed: i64, %stream: i64, %e: i64) -> i32 {
  %phi = arith.constant -7046029254386353131 : i64   // 0x9E3779B97F4A7C15
  %m1 = arith.constant -4658895280553007687 : i64    // 0xBF58476D1CE4E5B9
  %m2 = arith.constant -7723592293110705685 : i64    // 0x94D049BB133111EB
  %ms = arith.constant -3335678366873096957 : i64    // 0xD1B54A32D192ED03
  %c27 = arith.constant 27 : i64
  %c30 = arith.constant 30 : i64
  %c31 = arith.constant 31 : i64
  %c40 = arith.constant 40 : i64
  %a = arith.muli %seed, %phi : i64
  %b = arith.muli %stream, %ms : i64
  %x0 = arith.addi %a, %b : i64
  %x1 = arith.addi %x0, %e : i64
  %z0 = arith.addi %x1, %phi : i64
  %s0 = arith.shrui %z0, %c30 : i64
  %t0 = arith.xori %z0, %s0 : i64
  %z1 = arith.muli %t0, %m1 : i64
  %s1 = arith.shrui %z1, %c27 : i64
  %t1 = arith.xori %z1, %s1 : i64
  %z2 = arith.muli %t1, %m2 : i64
  %s2 = arith.shrui %z2, %c31 : i64
  %z3 = arith.xori %z2, %s2 : i64
  %top = arith.shrui %z3, %c40 : i64
  %h = arith.trunci %top : i64 to i32
  return %h : i32
}

func.func private @k3k_random_int(%seed: i64, %stream: i64, %e: i64, %range: i32, %off: i32) -> i32 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %h = func.call @k3k_random_bits(%seed, %stream, %e) : (i64, i64, i64) -> i32
  %none = arith.cmpi eq, %range, %c0 : i32
  %div = arith.select %none, %c1, %range : i32
  %m = arith.remui %h, %div : i32
  %r = arith.select %none, %c0, %m : i32
  %v = arith.addi %r, %off : i32
  return %v : i32
}

func.func private @k3k_random_f32(%seed: i64, %stream: i64, %e: i64, %range: i32, %off: i32, %scale: f32) -> f32 {
  %i = func.call @k3k_random_int(%seed, %stream, %e, %range, %off) : (i64, i64, i64, i32, i32) -> i32
  %f = arith.sitofp %i : i32 to f32
  %v = arith.mulf %f, %scale : f32
  return %v : f32
}

func.func private @k3k_random_bf16_bits(%seed: i64, %stream: i64, %e: i64, %range: i32, %off: i32, %scale: f32) -> i32 {
  %f = func.call @k3k_random_f32(%seed, %stream, %e, %range, %off, %scale) : (i64, i64, i64, i32, i32, f32) -> f32
  %b = arith.truncf %f : f32 to bf16
  %bits = arith.bitcast %b : bf16 to i16
  %w = arith.extui %bits : i16 to i32
  return %w : i32
}

func.func @fill_random(%out: memref<?xi32>, %seed: i64, %stream: i64, %kind: i32,
                       %range: i32, %off: i32, %scale: f32) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %out, %c0 : memref<?xi32>
  %k1 = arith.constant 1 : i32
  %k2 = arith.constant 2 : i32
  %one = arith.constant 1 : i64
  %two = arith.constant 2 : i64
  %three = arith.constant 3 : i64
  %four = arith.constant 4 : i64
  %s8 = arith.constant 8 : i32
  %s16 = arith.constant 16 : i32
  %s24 = arith.constant 24 : i32
  %ff = arith.constant 255 : i32
  scf.parallel (%w) = (%c0) to (%n) step (%c1) {
    %w64 = arith.index_cast %w : index to i64
    %isbytes = arith.cmpi eq, %kind, %k2 : i32
    %isf32 = arith.cmpi eq, %kind, %k1 : i32
    %word = scf.if %isbytes -> (i32) {
      %e0 = arith.muli %w64, %four : i64
      %e1 = arith.addi %e0, %one : i64
      %e2 = arith.addi %e0, %two : i64
      %e3 = arith.addi %e0, %three : i64
      %b0 = func.call @k3k_random_int(%seed, %stream, %e0, %range, %off) : (i64, i64, i64, i32, i32) -> i32
      %b1 = func.call @k3k_random_int(%seed, %stream, %e1, %range, %off) : (i64, i64, i64, i32, i32) -> i32
      %b2 = func.call @k3k_random_int(%seed, %stream, %e2, %range, %off) : (i64, i64, i64, i32, i32) -> i32
      %b3 = func.call @k3k_random_int(%seed, %stream, %e3, %range, %off) : (i64, i64, i64, i32, i32) -> i32
      %m0 = arith.andi %b0, %ff : i32
      %m1 = arith.andi %b1, %ff : i32
      %m2 = arith.andi %b2, %ff : i32
      %m3 = arith.andi %b3, %ff : i32
      %h1 = arith.shli %m1, %s8 : i32
      %h2 = arith.shli %m2, %s16 : i32
      %h3 = arith.shli %m3, %s24 : i32
      %o1 = arith.ori %m0, %h1 : i32
      %o2 = arith.ori %o1, %h2 : i32
      %o3 = arith.ori %o2, %h3 : i32
      scf.yield %o3 : i32
    } else {
      %v = scf.if %isf32 -> (i32) {
        %f = func.call @k3k_random_f32(%seed, %stream, %w64, %range, %off, %scale) : (i64, i64, i64, i32, i32, f32) -> f32
        %fb = arith.bitcast %f : f32 to i32
        scf.yield %fb : i32
      } else {
        %e0 = arith.muli %w64, %two : i64
        %e1 = arith.addi %e0, %one : i64
        %lo = func.call @k3k_random_bf16_bits(%seed, %stream, %e0, %range, %off, %scale) : (i64, i64, i64, i32, i32, f32) -> i32
        %hi = func.call @k3k_random_bf16_bits(%seed, %stream, %e1, %range, %off, %scale) : (i64, i64, i64, i32, i32, f32) -> i32
        %hs = arith.shli %hi, %s16 : i32
        %pair = arith.ori %lo, %hs : i32
        scf.yield %pair : i32
      }
      scf.yield %v : i32
    }
    memref.store %word, %out[%w] : memref<?xi32>
  }
  return
}
