// Gated MLA kernel (K3_SPEC §5): projections, the paged latent cache, and
// attention in the naive form (§5.2, T > 1: prefill) or the weight-absorbed
// form (§5.3, T = 1: decode). No positional encoding (NoPE).

// Softmax-weighted attention of one query head over cache rows 0..n-1 is
// computed in two passes (max, then exp/sum) in the callers below.

// k3.gated_mla. x: [T, D]; the caches are (pool [pages, P, R+dr], page
// tables [S, n], lengths [S]) of S = 1 sequence (the T tokens are one
// segment, written at positions len .. len+T-1) or of S = T sequences (a
// decode batch: token i is the next token of sequence i, written at
// position len_i). Returns concat_h o_h ⊙ gate, [T, H·dv].
func.func private @k3k_gated_mla(%x: tensor<?x?x!act>, %wqa: tensor<?x?xbf16>, %gqa: tensor<?xbf16>,
                                 %wqb: tensor<?x?xbf16>, %wkva: tensor<?x?xbf16>, %gkva: tensor<?xbf16>,
                                 %wkvb: tensor<?x?xbf16>, %wg: tensor<?x?xbf16>, %hasgate: i1,
                                 %pool: memref<?x?x?x!act>, %table: memref<?x?xi32>, %lenm: memref<?xi64>,
                                 %nh: index, %dn: index, %dr: index, %dvh: index,
                                 %scale: f32, %qeps: f32, %kveps: f32) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %r = tensor.dim %gkva, %c0 : tensor<?xbf16>
  %psz = memref.dim %pool, %c1 : memref<?x?x?x!act>
  %nseq = memref.dim %lenm, %c0 : memref<?xi64>
  %pertoken = arith.cmpi ugt, %nseq, %c1 : index
  // The first sequence's length, read by the host code (a kernel reads the
  // lengths itself only in a decode batch).
  %len064 = memref.load %lenm[%c0] : memref<?xi64>
  %len0 = arith.index_cast %len064 : i64 to index
  %dq = arith.addi %dn, %dr : index
  %dkv = arith.addi %dn, %dvh : index

  // §5.1: c_q, q, [c̃ ; k_r], c.
  %qa = func.call @k3k_linear(%x, %wqa) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %cq = func.call @k3k_rms_norm(%qa, %gqa, %qeps) : (tensor<?x?x!act>, tensor<?xbf16>, f32) -> tensor<?x?x!act>
  %q = func.call @k3k_linear(%cq, %wqb) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %kva = func.call @k3k_linear(%x, %wkva) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %ct = tensor.extract_slice %kva[0, 0] [%t, %r] [1, 1] : tensor<?x?x!act> to tensor<?x?x!act>
  %c = func.call @k3k_rms_norm(%ct, %gkva, %kveps) : (tensor<?x?x!act>, tensor<?xbf16>, f32) -> tensor<?x?x!act>

  // Append [c ; k_r] of every new token to the cache pages: token i is
  // position i - s of sequence s (s = i per token, else 0).
  scf.parallel (%i) = (%c0) to (%t) step (%c1) {
    %sq = arith.select %pertoken, %i, %c0 : index
    %len = scf.if %pertoken -> (index) {
      %l64 = memref.load %lenm[%i] : memref<?xi64>
      %l = arith.index_cast %l64 : i64 to index
      scf.yield %l : index
    } else {
      scf.yield %len0 : index
    }
    %rel = arith.subi %i, %sq : index
    %pos = arith.addi %len, %rel : index
    %pg = arith.divui %pos, %psz : index
    %off = arith.remui %pos, %psz : index
    %pid32 = memref.load %table[%sq, %pg] : memref<?x?xi32>
    %pid = arith.index_cast %pid32 : i32 to index
    scf.for %j = %c0 to %r step %c1 {
      %v = tensor.extract %c[%i, %j] : tensor<?x?x!act>
      memref.store %v, %pool[%pid, %off, %j] : memref<?x?x?x!act>
    }
    scf.for %j = %c0 to %dr step %c1 {
      %rj = arith.addi %r, %j : index
      %v = tensor.extract %kva[%i, %rj] : tensor<?x?x!act>
      memref.store %v, %pool[%pid, %off, %rj] : memref<?x?x?x!act>
    }
  }

  %w = arith.addi %r, %dr : index

  %hv = arith.muli %nh, %dvh : index
  %o = memref.alloc(%t, %hv) : memref<?x?xf32>
  %decode = arith.cmpi eq, %t, %c1 : index
  %own = arith.ori %pertoken, %decode : i1
  scf.if %own {
    // §5.3 absorbed, per token i (its sequence's len_i cached tokens and
    // itself: n_i = len_i + 1 rows): q̂_h = W_UK[h]ᵀ q_n[h];
    // s_j = (q̂_h·c_j + q_r[h]·k_r,j)·scale; ō_h = Σ_j p_j c_j; o_h = W_UV[h] ō_h.
    // One parallel loop per stage (one GPU kernel each): q̂ [T, H, R],
    // scores [T, H, n], max/exp/sum per (token, head), ō [T, H, R],
    // o [T, H, dv]. Per element the sums run in the same order as a per-head
    // loop would. The stages are sized by the longest n_i (%maxn); a token
    // of a batch reads its n_i from %ntk.
    %maxn = scf.for %i = %c0 to %nseq step %c1 iter_args(%m = %c0) -> (index) {
      %l64 = memref.load %lenm[%i] : memref<?xi64>
      %l = arith.index_cast %l64 : i64 to index
      %n = arith.addi %l, %c1 : index
      %m2 = arith.maxui %m, %n : index
      scf.yield %m2 : index
    }
    %ntk = memref.alloc(%t) : memref<?xindex>
    scf.if %pertoken {
      scf.parallel (%i) = (%c0) to (%t) step (%c1) {
        %l64 = memref.load %lenm[%i] : memref<?xi64>
        %l = arith.index_cast %l64 : i64 to index
        %n = arith.addi %l, %c1 : index
        memref.store %n, %ntk[%i] : memref<?xindex>
      }
    }
    // q̂ is stored next to q_r ([T, H, R + dr]) so that each score is one
    // dot product over a whole cache row (the same terms in the same order).
    %qh = memref.alloc(%t, %nh, %w) : memref<?x?x?xf32>
    %ob = memref.alloc(%t, %nh, %r) : memref<?x?x?xf32>
    %p = memref.alloc(%t, %nh, %maxn) : memref<?x?x?xf32>
    %rowsum = memref.alloc(%t, %nh) : memref<?x?xf32>
    scf.parallel (%h, %e, %i) = (%c0, %c0, %c0) to (%nh, %r, %t) step (%c1, %c1, %c1) {
      %qbase = arith.muli %h, %dq : index
      %kvbase = arith.muli %h, %dkv : index
      %s = scf.for %d = %c0 to %dn step %c1 iter_args(%a = %zero) -> (f32) {
        %qi = arith.addi %qbase, %d : index
        %qv = tensor.extract %q[%i, %qi] : tensor<?x?x!act>
        %qf = func.call @k3k_widen(%qv) : (!act) -> f32
        %row = arith.addi %kvbase, %d : index
        %wv = tensor.extract %wkvb[%row, %e] : tensor<?x?xbf16>
        %wf = arith.extf %wv : bf16 to f32
        %pr = arith.mulf %qf, %wf : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      memref.store %s, %qh[%i, %h, %e] : memref<?x?x?xf32>
    }
    scf.parallel (%i, %h, %e) = (%c0, %c0, %c0) to (%t, %nh, %dr) step (%c1, %c1, %c1) {
      %qbase = arith.muli %h, %dq : index
      %qi0 = arith.addi %qbase, %dn : index
      %qi = arith.addi %qi0, %e : index
      %qv = tensor.extract %q[%i, %qi] : tensor<?x?x!act>
      %qf = func.call @k3k_widen(%qv) : (!act) -> f32
      %re = arith.addi %r, %e : index
      memref.store %qf, %qh[%i, %h, %re] : memref<?x?x?xf32>
    }
    // The cache rows of each token's sequence in order (its page table), and
    // the pool as rows [pages · P, R + dr]: the stages below read the cache
    // in place.
    %rows = memref.alloc(%t, %maxn) : memref<?x?xindex>
    scf.parallel (%i, %j) = (%c0, %c0) to (%t, %maxn) step (%c1, %c1) {
      %ntok = scf.if %pertoken -> (index) {
        %v = memref.load %ntk[%i] : memref<?xindex>
        scf.yield %v : index
      } else {
        scf.yield %maxn : index
      }
      %jin = arith.cmpi ult, %j, %ntok : index
      scf.if %jin {
        %pg = arith.divui %j, %psz : index
        %off = arith.remui %j, %psz : index
        %pid32 = memref.load %table[%i, %pg] : memref<?x?xi32>
        %pid = arith.index_cast %pid32 : i32 to index
        %base = arith.muli %pid, %psz : index
        %row = arith.addi %base, %off : index
        memref.store %row, %rows[%i, %j] : memref<?x?xindex>
      }
    }
    %pool2 = memref.collapse_shape %pool [[0, 1], [2]] : memref<?x?x?x!act> into memref<?x?x!act>
    // Scores of %hblk heads per cached token: each cache element is read
    // once for all of them (heads past H are computed on head H-1 and not
    // stored; rows past n_i on row n_i - 1, not stored).
    %c1_h = arith.constant 1 : index
    %c2_h = arith.constant 2 : index
    %c3_h = arith.constant 3 : index
    %c4_h = arith.constant 4 : index
    %c5_h = arith.constant 5 : index
    %c6_h = arith.constant 6 : index
    %c7_h = arith.constant 7 : index
    %hblk = arith.constant 8 : index
    %nhb = arith.ceildivui %nh, %hblk : index
    %hlast = arith.subi %nh, %c1 : index
    scf.parallel (%i, %hb, %j) = (%c0, %c0, %c0) to (%t, %nhb, %maxn) step (%c1, %c1, %c1) {
      %ntok = scf.if %pertoken -> (index) {
        %v = memref.load %ntk[%i] : memref<?xindex>
        scf.yield %v : index
      } else {
        scf.yield %maxn : index
      }
      %jin = arith.cmpi ult, %j, %ntok : index
      %jlast = arith.subi %ntok, %c1 : index
      %jc = arith.minui %j, %jlast : index
      %row = memref.load %rows[%i, %jc] : memref<?x?xindex>
      %h0 = arith.muli %hb, %hblk : index
      %hu0 = arith.minui %h0, %hlast : index
      %hk1 = arith.addi %h0, %c1_h : index
      %hu1 = arith.minui %hk1, %hlast : index
      %hk2 = arith.addi %h0, %c2_h : index
      %hu2 = arith.minui %hk2, %hlast : index
      %hk3 = arith.addi %h0, %c3_h : index
      %hu3 = arith.minui %hk3, %hlast : index
      %hk4 = arith.addi %h0, %c4_h : index
      %hu4 = arith.minui %hk4, %hlast : index
      %hk5 = arith.addi %h0, %c5_h : index
      %hu5 = arith.minui %hk5, %hlast : index
      %hk6 = arith.addi %h0, %c6_h : index
      %hu6 = arith.minui %hk6, %hlast : index
      %hk7 = arith.addi %h0, %c7_h : index
      %hu7 = arith.minui %hk7, %hlast : index
      %s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7 = scf.for %e = %c0 to %w step %c1 iter_args(%a0 = %zero, %a1 = %zero, %a2 = %zero, %a3 = %zero, %a4 = %zero, %a5 = %zero, %a6 = %zero, %a7 = %zero) -> (f32, f32, f32, f32, f32, f32, f32, f32) {
        %cv = memref.load %pool2[%row, %e] : memref<?x?x!act>
        %cf = func.call @k3k_widen(%cv) : (!act) -> f32
        %q0 = memref.load %qh[%i, %hu0, %e] : memref<?x?x?xf32>
        %m0 = arith.mulf %q0, %cf : f32
        %n0 = arith.addf %a0, %m0 : f32
        %q1 = memref.load %qh[%i, %hu1, %e] : memref<?x?x?xf32>
        %m1 = arith.mulf %q1, %cf : f32
        %n1 = arith.addf %a1, %m1 : f32
        %q2 = memref.load %qh[%i, %hu2, %e] : memref<?x?x?xf32>
        %m2 = arith.mulf %q2, %cf : f32
        %n2 = arith.addf %a2, %m2 : f32
        %q3 = memref.load %qh[%i, %hu3, %e] : memref<?x?x?xf32>
        %m3 = arith.mulf %q3, %cf : f32
        %n3 = arith.addf %a3, %m3 : f32
        %q4 = memref.load %qh[%i, %hu4, %e] : memref<?x?x?xf32>
        %m4 = arith.mulf %q4, %cf : f32
        %n4 = arith.addf %a4, %m4 : f32
        %q5 = memref.load %qh[%i, %hu5, %e] : memref<?x?x?xf32>
        %m5 = arith.mulf %q5, %cf : f32
        %n5 = arith.addf %a5, %m5 : f32
        %q6 = memref.load %qh[%i, %hu6, %e] : memref<?x?x?xf32>
        %m6 = arith.mulf %q6, %cf : f32
        %n6 = arith.addf %a6, %m6 : f32
        %q7 = memref.load %qh[%i, %hu7, %e] : memref<?x?x?xf32>
        %m7 = arith.mulf %q7, %cf : f32
        %n7 = arith.addf %a7, %m7 : f32
        scf.yield %n0, %n1, %n2, %n3, %n4, %n5, %n6, %n7 : f32, f32, f32, f32, f32, f32, f32, f32
      }
      %in0h = arith.cmpi ult, %h0, %nh : index
      %in0 = arith.andi %in0h, %jin : i1
      scf.if %in0 {
        %sc0 = arith.mulf %s0, %scale : f32
        memref.store %sc0, %p[%i, %h0, %j] : memref<?x?x?xf32>
      }
      %in1h = arith.cmpi ult, %hk1, %nh : index
      %in1 = arith.andi %in1h, %jin : i1
      scf.if %in1 {
        %sc1 = arith.mulf %s1, %scale : f32
        memref.store %sc1, %p[%i, %hk1, %j] : memref<?x?x?xf32>
      }
      %in2h = arith.cmpi ult, %hk2, %nh : index
      %in2 = arith.andi %in2h, %jin : i1
      scf.if %in2 {
        %sc2 = arith.mulf %s2, %scale : f32
        memref.store %sc2, %p[%i, %hk2, %j] : memref<?x?x?xf32>
      }
      %in3h = arith.cmpi ult, %hk3, %nh : index
      %in3 = arith.andi %in3h, %jin : i1
      scf.if %in3 {
        %sc3 = arith.mulf %s3, %scale : f32
        memref.store %sc3, %p[%i, %hk3, %j] : memref<?x?x?xf32>
      }
      %in4h = arith.cmpi ult, %hk4, %nh : index
      %in4 = arith.andi %in4h, %jin : i1
      scf.if %in4 {
        %sc4 = arith.mulf %s4, %scale : f32
        memref.store %sc4, %p[%i, %hk4, %j] : memref<?x?x?xf32>
      }
      %in5h = arith.cmpi ult, %hk5, %nh : index
      %in5 = arith.andi %in5h, %jin : i1
      scf.if %in5 {
        %sc5 = arith.mulf %s5, %scale : f32
        memref.store %sc5, %p[%i, %hk5, %j] : memref<?x?x?xf32>
      }
      %in6h = arith.cmpi ult, %hk6, %nh : index
      %in6 = arith.andi %in6h, %jin : i1
      scf.if %in6 {
        %sc6 = arith.mulf %s6, %scale : f32
        memref.store %sc6, %p[%i, %hk6, %j] : memref<?x?x?xf32>
      }
      %in7h = arith.cmpi ult, %hk7, %nh : index
      %in7 = arith.andi %in7h, %jin : i1
      scf.if %in7 {
        %sc7 = arith.mulf %s7, %scale : f32
        memref.store %sc7, %p[%i, %hk7, %j] : memref<?x?x?xf32>
      }
    }
    // Softmax per (token, head): the maximum, exp(s - max) in place, the sum.
    %rowmax = memref.alloc(%t, %nh) : memref<?x?xf32>
    scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
      %ntok = scf.if %pertoken -> (index) {
        %v = memref.load %ntk[%i] : memref<?xindex>
        scf.yield %v : index
      } else {
        scf.yield %maxn : index
      }
      %mx = scf.for %j = %c0 to %ntok step %c1 iter_args(%m = %ninf) -> (f32) {
        %sc = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %m2 = arith.maximumf %m, %sc : f32
        scf.yield %m2 : f32
      }
      memref.store %mx, %rowmax[%i, %h] : memref<?x?xf32>
    }
    scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %maxn) step (%c1, %c1, %c1) {
      %ntok = scf.if %pertoken -> (index) {
        %v = memref.load %ntk[%i] : memref<?xindex>
        scf.yield %v : index
      } else {
        scf.yield %maxn : index
      }
      %jin = arith.cmpi ult, %j, %ntok : index
      scf.if %jin {
        %s = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %mx = memref.load %rowmax[%i, %h] : memref<?x?xf32>
        %d = arith.subf %s, %mx : f32
        %e = math.exp %d : f32
        memref.store %e, %p[%i, %h, %j] : memref<?x?x?xf32>
      }
    }
    scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
      %ntok = scf.if %pertoken -> (index) {
        %v = memref.load %ntk[%i] : memref<?xindex>
        scf.yield %v : index
      } else {
        scf.yield %maxn : index
      }
      %sum = scf.for %j = %c0 to %ntok step %c1 iter_args(%a = %zero) -> (f32) {
        %e = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %s2 = arith.addf %a, %e : f32
        scf.yield %s2 : f32
      }
      memref.store %sum, %rowsum[%i, %h] : memref<?x?xf32>
    }
    // ō over each token's cached rows in %parts slices (flash-decoding
    // style: each slice a partial sum, the slices added in order), for
    // parallelism over a long context; %hblk heads per thread, so that each
    // cache element is read once per slice for all of them.
    %parts = arith.constant 16 : index
    %partial = memref.alloc(%t, %nh, %r, %parts) : memref<?x?x?x?xf32>
    scf.parallel (%i, %hb, %pt, %e) = (%c0, %c0, %c0, %c0) to (%t, %nhb, %parts, %r) step (%c1, %c1, %c1, %c1) {
      %ntok = scf.if %pertoken -> (index) {
        %v = memref.load %ntk[%i] : memref<?xindex>
        scf.yield %v : index
      } else {
        scf.yield %maxn : index
      }
      %slice = arith.ceildivui %ntok, %parts : index
      %h0 = arith.muli %hb, %hblk : index
      %hu0 = arith.minui %h0, %hlast : index
      %hk1 = arith.addi %h0, %c1_h : index
      %hu1 = arith.minui %hk1, %hlast : index
      %hk2 = arith.addi %h0, %c2_h : index
      %hu2 = arith.minui %hk2, %hlast : index
      %hk3 = arith.addi %h0, %c3_h : index
      %hu3 = arith.minui %hk3, %hlast : index
      %hk4 = arith.addi %h0, %c4_h : index
      %hu4 = arith.minui %hk4, %hlast : index
      %hk5 = arith.addi %h0, %c5_h : index
      %hu5 = arith.minui %hk5, %hlast : index
      %hk6 = arith.addi %h0, %c6_h : index
      %hu6 = arith.minui %hk6, %hlast : index
      %hk7 = arith.addi %h0, %c7_h : index
      %hu7 = arith.minui %hk7, %hlast : index
      %j0 = arith.muli %pt, %slice : index
      %j1u = arith.addi %j0, %slice : index
      %j1 = arith.minui %j1u, %ntok : index
      %s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7 = scf.for %j = %j0 to %j1 step %c1 iter_args(%a0 = %zero, %a1 = %zero, %a2 = %zero, %a3 = %zero, %a4 = %zero, %a5 = %zero, %a6 = %zero, %a7 = %zero) -> (f32, f32, f32, f32, f32, f32, f32, f32) {
        %row = memref.load %rows[%i, %j] : memref<?x?xindex>
        %cv = memref.load %pool2[%row, %e] : memref<?x?x!act>
        %cf = func.call @k3k_widen(%cv) : (!act) -> f32
        %p0 = memref.load %p[%i, %hu0, %j] : memref<?x?x?xf32>
        %m0 = arith.mulf %p0, %cf : f32
        %n0 = arith.addf %a0, %m0 : f32
        %p1 = memref.load %p[%i, %hu1, %j] : memref<?x?x?xf32>
        %m1 = arith.mulf %p1, %cf : f32
        %n1 = arith.addf %a1, %m1 : f32
        %p2 = memref.load %p[%i, %hu2, %j] : memref<?x?x?xf32>
        %m2 = arith.mulf %p2, %cf : f32
        %n2 = arith.addf %a2, %m2 : f32
        %p3 = memref.load %p[%i, %hu3, %j] : memref<?x?x?xf32>
        %m3 = arith.mulf %p3, %cf : f32
        %n3 = arith.addf %a3, %m3 : f32
        %p4 = memref.load %p[%i, %hu4, %j] : memref<?x?x?xf32>
        %m4 = arith.mulf %p4, %cf : f32
        %n4 = arith.addf %a4, %m4 : f32
        %p5 = memref.load %p[%i, %hu5, %j] : memref<?x?x?xf32>
        %m5 = arith.mulf %p5, %cf : f32
        %n5 = arith.addf %a5, %m5 : f32
        %p6 = memref.load %p[%i, %hu6, %j] : memref<?x?x?xf32>
        %m6 = arith.mulf %p6, %cf : f32
        %n6 = arith.addf %a6, %m6 : f32
        %p7 = memref.load %p[%i, %hu7, %j] : memref<?x?x?xf32>
        %m7 = arith.mulf %p7, %cf : f32
        %n7 = arith.addf %a7, %m7 : f32
        scf.yield %n0, %n1, %n2, %n3, %n4, %n5, %n6, %n7 : f32, f32, f32, f32, f32, f32, f32, f32
      }
      %in0 = arith.cmpi ult, %h0, %nh : index
      scf.if %in0 {
        memref.store %s0, %partial[%i, %h0, %e, %pt] : memref<?x?x?x?xf32>
      }
      %in1 = arith.cmpi ult, %hk1, %nh : index
      scf.if %in1 {
        memref.store %s1, %partial[%i, %hk1, %e, %pt] : memref<?x?x?x?xf32>
      }
      %in2 = arith.cmpi ult, %hk2, %nh : index
      scf.if %in2 {
        memref.store %s2, %partial[%i, %hk2, %e, %pt] : memref<?x?x?x?xf32>
      }
      %in3 = arith.cmpi ult, %hk3, %nh : index
      scf.if %in3 {
        memref.store %s3, %partial[%i, %hk3, %e, %pt] : memref<?x?x?x?xf32>
      }
      %in4 = arith.cmpi ult, %hk4, %nh : index
      scf.if %in4 {
        memref.store %s4, %partial[%i, %hk4, %e, %pt] : memref<?x?x?x?xf32>
      }
      %in5 = arith.cmpi ult, %hk5, %nh : index
      scf.if %in5 {
        memref.store %s5, %partial[%i, %hk5, %e, %pt] : memref<?x?x?x?xf32>
      }
      %in6 = arith.cmpi ult, %hk6, %nh : index
      scf.if %in6 {
        memref.store %s6, %partial[%i, %hk6, %e, %pt] : memref<?x?x?x?xf32>
      }
      %in7 = arith.cmpi ult, %hk7, %nh : index
      scf.if %in7 {
        memref.store %s7, %partial[%i, %hk7, %e, %pt] : memref<?x?x?x?xf32>
      }
    }
    scf.parallel (%i, %h, %e) = (%c0, %c0, %c0) to (%t, %nh, %r) step (%c1, %c1, %c1) {
      %acc = scf.for %pt = %c0 to %parts step %c1 iter_args(%a = %zero) -> (f32) {
        %v = memref.load %partial[%i, %h, %e, %pt] : memref<?x?x?x?xf32>
        %s2 = arith.addf %a, %v : f32
        scf.yield %s2 : f32
      }
      %sum = memref.load %rowsum[%i, %h] : memref<?x?xf32>
      %nrm = arith.divf %acc, %sum : f32
      memref.store %nrm, %ob[%i, %h, %e] : memref<?x?x?xf32>
    }
    scf.parallel (%h, %d, %i) = (%c0, %c0, %c0) to (%nh, %dvh, %t) step (%c1, %c1, %c1) {
      %kvbase = arith.muli %h, %dkv : index
      %row0 = arith.addi %kvbase, %dn : index
      %row = arith.addi %row0, %d : index
      %acc = scf.for %e = %c0 to %r step %c1 iter_args(%a = %zero) -> (f32) {
        %wv = tensor.extract %wkvb[%row, %e] : tensor<?x?xbf16>
        %wf = arith.extf %wv : bf16 to f32
        %ov = memref.load %ob[%i, %h, %e] : memref<?x?x?xf32>
        %pr = arith.mulf %wf, %ov : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %hb = arith.muli %h, %dvh : index
      %col = arith.addi %hb, %d : index
      memref.store %acc, %o[%i, %col] : memref<?x?xf32>
    }
  } else {
    // §5.2 naive: per head key [k_n ; k_r] and value v from W_UKV c, causal
    // softmax over the cached tokens and the segment.
    // One sequence: its length and page table row 0. The whole cache, in
    // order: [len + T, R + dr] (f32 values of the cache).
    %ntok = arith.addi %len0, %t : index
    %all = memref.alloc(%ntok, %w) : memref<?x?xf32>
    scf.parallel (%j, %e) = (%c0, %c0) to (%ntok, %w) step (%c1, %c1) {
      %pg = arith.divui %j, %psz : index
      %off = arith.remui %j, %psz : index
      %pid32 = memref.load %table[%c0, %pg] : memref<?x?xi32>
      %pid = arith.index_cast %pid32 : i32 to index
      %v = memref.load %pool[%pid, %off, %e] : memref<?x?x?x!act>
      %vf = func.call @k3k_widen(%v) : (!act) -> f32
      memref.store %vf, %all[%j, %e] : memref<?x?xf32>
    }

    %callt = bufferization.to_tensor %all restrict : memref<?x?xf32> to tensor<?x?xf32>
    %cl = tensor.extract_slice %callt[0, 0] [%ntok, %r] [1, 1] : tensor<?x?xf32> to tensor<?x?xf32>
    %ca = func.call @k3k_narrow2(%cl) : (tensor<?x?xf32>) -> tensor<?x?x!act>
    %kv = func.call @k3k_linear(%ca, %wkvb) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
    // In parallel stages as at decode: the scores of every (query, head,
    // cached token) (those after the query are computed and not used), the
    // maximum, exp in place (0 after the query), the sum, and each output
    // element's sum over the visible tokens.
    %p = memref.alloc(%t, %nh, %ntok) : memref<?x?x?xf32>
    scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %ntok) step (%c1, %c1, %c1) {
      %qbase = arith.muli %h, %dq : index
      %kvbase = arith.muli %h, %dkv : index
      %s1 = scf.for %d = %c0 to %dn step %c1 iter_args(%a = %zero) -> (f32) {
        %qi = arith.addi %qbase, %d : index
        %qv = tensor.extract %q[%i, %qi] : tensor<?x?x!act>
        %qf = func.call @k3k_widen(%qv) : (!act) -> f32
        %ki = arith.addi %kvbase, %d : index
        %kvv = tensor.extract %kv[%j, %ki] : tensor<?x?x!act>
        %kf = func.call @k3k_widen(%kvv) : (!act) -> f32
        %pr = arith.mulf %qf, %kf : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %s = scf.for %e = %c0 to %dr step %c1 iter_args(%a = %s1) -> (f32) {
        %qi0 = arith.addi %qbase, %dn : index
        %qi = arith.addi %qi0, %e : index
        %qv = tensor.extract %q[%i, %qi] : tensor<?x?x!act>
        %qf = func.call @k3k_widen(%qv) : (!act) -> f32
        %re = arith.addi %r, %e : index
        %kr = memref.load %all[%j, %re] : memref<?x?xf32>
        %pr = arith.mulf %qf, %kr : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %sc = arith.mulf %s, %scale : f32
      memref.store %sc, %p[%i, %h, %j] : memref<?x?x?xf32>
    }
    %pmax = memref.alloc(%t, %nh) : memref<?x?xf32>
    scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
      %qpos = arith.addi %len0, %i : index
      %nvis = arith.addi %qpos, %c1 : index
      %mx = scf.for %j = %c0 to %nvis step %c1 iter_args(%m = %ninf) -> (f32) {
        %sc = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %m2 = arith.maximumf %m, %sc : f32
        scf.yield %m2 : f32
      }
      memref.store %mx, %pmax[%i, %h] : memref<?x?xf32>
    }
    scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %ntok) step (%c1, %c1, %c1) {
      %qpos = arith.addi %len0, %i : index
      %vis = arith.cmpi ule, %j, %qpos : index
      %sc = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
      %mx = memref.load %pmax[%i, %h] : memref<?x?xf32>
      %d = arith.subf %sc, %mx : f32
      %e = math.exp %d : f32
      %v = arith.select %vis, %e, %zero : f32
      memref.store %v, %p[%i, %h, %j] : memref<?x?x?xf32>
    }
    %psum = memref.alloc(%t, %nh) : memref<?x?xf32>
    scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
      %qpos = arith.addi %len0, %i : index
      %nvis = arith.addi %qpos, %c1 : index
      %sum = scf.for %j = %c0 to %nvis step %c1 iter_args(%a = %zero) -> (f32) {
        %e = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %s2 = arith.addf %a, %e : f32
        scf.yield %s2 : f32
      }
      memref.store %sum, %psum[%i, %h] : memref<?x?xf32>
    }
    scf.parallel (%i, %h, %d) = (%c0, %c0, %c0) to (%t, %nh, %dvh) step (%c1, %c1, %c1) {
      %qpos = arith.addi %len0, %i : index
      %nvis = arith.addi %qpos, %c1 : index
      %kvbase = arith.muli %h, %dkv : index
      %vi0 = arith.addi %kvbase, %dn : index
      %vi = arith.addi %vi0, %d : index
      %acc = scf.for %j = %c0 to %nvis step %c1 iter_args(%a = %zero) -> (f32) {
        %pj = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %vv = tensor.extract %kv[%j, %vi] : tensor<?x?x!act>
        %vf = func.call @k3k_widen(%vv) : (!act) -> f32
        %pr = arith.mulf %pj, %vf : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %sum = memref.load %psum[%i, %h] : memref<?x?xf32>
      %nrm = arith.divf %acc, %sum : f32
      %hb = arith.muli %h, %dvh : index
      %col = arith.addi %hb, %d : index
      memref.store %nrm, %o[%i, %col] : memref<?x?xf32>
    }
  }

  // Output gate σ(W_G x) and the product, each rounded (docs/NUMERICS.md).
  %out = memref.alloc(%t, %hv) : memref<?x?x!act>
  %gl = scf.if %hasgate -> (tensor<?x?x!act>) {
    %g = func.call @k3k_linear(%x, %wg) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
    scf.yield %g : tensor<?x?x!act>
  } else {
    %g = tensor.empty(%t, %hv) : tensor<?x?x!act>
    scf.yield %g : tensor<?x?x!act>
  }
  scf.parallel (%i, %col) = (%c0, %c0) to (%t, %hv) step (%c1, %c1) {
    %ov = memref.load %o[%i, %col] : memref<?x?xf32>
    %orr = func.call @k3k_round(%ov) : (f32) -> f32
    %gate = scf.if %hasgate -> (f32) {
      %gv = tensor.extract %gl[%i, %col] : tensor<?x?x!act>
      %gf = func.call @k3k_widen(%gv) : (!act) -> f32
      %sg = func.call @k3k_sigmoid(%gf) : (f32) -> f32
      %sr = func.call @k3k_round(%sg) : (f32) -> f32
      scf.yield %sr : f32
    } else {
      scf.yield %one : f32
    }
    %y = arith.mulf %orr, %gate : f32
    %ya = func.call @k3k_narrow(%y) : (f32) -> !act
    memref.store %ya, %out[%i, %col] : memref<?x?x!act>
  }
  %res = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %res : tensor<?x?x!act>
}
