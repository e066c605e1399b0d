// Gated MLA kernel (K3_SPEC §5): projections, the paged latent cache, and
// attention in the naive form (§5.2, T > 1: prefill) or the weight-absorbed
// form (§5.3, T = 1: decode). No positional encoding (NoPE).

// Softmax-weighted attention of one query head over cache rows 0..n-1 is
// computed in two passes (max, then exp/sum) in the callers below.

// Cache rows token i attends over at decode: its own n_i (read from `ntk`)
// in a decode batch, else the call's one sequence's n (`n`, known on the
// host, so no kernel reads it from memory).
func.func private @k3k_mla_rows(%ntk: memref<?xindex>, %i: index, %pertoken: i1, %n: index) -> index {
  %r = scf.if %pertoken -> (index) {
    %v = memref.load %ntk[%i] : memref<?xindex>
    scf.yield %v : index
  } else {
    scf.yield %n : index
  }
  return %r : index
}

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

  // Append [c ; k_r] of every new token to the cache pages, one element
  // per thread: token i is position i - s of sequence s (s = i per token,
  // else 0).
  %wa = arith.addi %r, %dr : index
  scf.parallel (%i, %e) = (%c0, %c0) to (%t, %wa) step (%c1, %c1) {
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
    %latent = arith.cmpi ult, %e, %r : index
    %v = scf.if %latent -> (!act) {
      %xv = tensor.extract %c[%i, %e] : tensor<?x?x!act>
      scf.yield %xv : !act
    } else {
      %xv = tensor.extract %kva[%i, %e] : tensor<?x?x!act>
      scf.yield %xv : !act
    }
    memref.store %v, %pool[%pid, %off, %e] : memref<?x?x?x!act>
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
      %ntok = func.call @k3k_mla_rows(%ntk, %i, %pertoken, %maxn) : (memref<?xindex>, index, i1, index) -> index
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
    // Scores of %hblk heads and %rblk cached tokens per warp: each cache
    // element is read once for all the heads, each q̂ element once for all
    // the tokens (heads past H are computed on head H-1, tokens past n_i on
    // token n_i - 1; neither is stored).
    %c1_h = arith.constant 1 : index
    %c2_h = arith.constant 2 : index
    %c3_h = arith.constant 3 : index
    %c4_h = arith.constant 4 : index
    %c5_h = arith.constant 5 : index
    %c6_h = arith.constant 6 : index
    %c7_h = arith.constant 7 : index
    %hblk = arith.constant 8 : index
    %rblk = arith.constant 4 : index
    %nhb = arith.ceildivui %nh, %hblk : index
    %nrb = arith.ceildivui %maxn, %rblk : index
    %hlast = arith.subi %nh, %c1 : index
    scf.parallel (%i, %hb, %jb) = (%c0, %c0, %c0) to (%t, %nhb, %nrb) step (%c1, %c1, %c1) {
      %ntok = func.call @k3k_mla_rows(%ntk, %i, %pertoken, %maxn) : (memref<?xindex>, index, i1, index) -> index
      %jlast = arith.subi %ntok, %c1 : index
      %j0 = arith.muli %jb, %rblk : index
      %jc0 = arith.minui %j0, %jlast : index
      %row0 = memref.load %rows[%i, %jc0] : memref<?x?xindex>
      %jr1 = arith.addi %j0, %c1_h : index
      %jc1 = arith.minui %jr1, %jlast : index
      %row1 = memref.load %rows[%i, %jc1] : memref<?x?xindex>
      %jr2 = arith.addi %j0, %c2_h : index
      %jc2 = arith.minui %jr2, %jlast : index
      %row2 = memref.load %rows[%i, %jc2] : memref<?x?xindex>
      %jr3 = arith.addi %j0, %c3_h : index
      %jc3 = arith.minui %jr3, %jlast : index
      %row3 = memref.load %rows[%i, %jc3] : memref<?x?xindex>
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
      %s0_0, %s0_1, %s0_2, %s0_3, %s0_4, %s0_5, %s0_6, %s0_7, %s1_0, %s1_1, %s1_2, %s1_3, %s1_4, %s1_5, %s1_6, %s1_7, %s2_0, %s2_1, %s2_2, %s2_3, %s2_4, %s2_5, %s2_6, %s2_7, %s3_0, %s3_1, %s3_2, %s3_3, %s3_4, %s3_5, %s3_6, %s3_7 = scf.for %e = %c0 to %w step %c1 iter_args(%a0_0 = %zero, %a0_1 = %zero, %a0_2 = %zero, %a0_3 = %zero, %a0_4 = %zero, %a0_5 = %zero, %a0_6 = %zero, %a0_7 = %zero, %a1_0 = %zero, %a1_1 = %zero, %a1_2 = %zero, %a1_3 = %zero, %a1_4 = %zero, %a1_5 = %zero, %a1_6 = %zero, %a1_7 = %zero, %a2_0 = %zero, %a2_1 = %zero, %a2_2 = %zero, %a2_3 = %zero, %a2_4 = %zero, %a2_5 = %zero, %a2_6 = %zero, %a2_7 = %zero, %a3_0 = %zero, %a3_1 = %zero, %a3_2 = %zero, %a3_3 = %zero, %a3_4 = %zero, %a3_5 = %zero, %a3_6 = %zero, %a3_7 = %zero) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
        %cv0 = memref.load %pool2[%row0, %e] : memref<?x?x!act>
        %cf0 = func.call @k3k_widen(%cv0) : (!act) -> f32
        %cv1 = memref.load %pool2[%row1, %e] : memref<?x?x!act>
        %cf1 = func.call @k3k_widen(%cv1) : (!act) -> f32
        %cv2 = memref.load %pool2[%row2, %e] : memref<?x?x!act>
        %cf2 = func.call @k3k_widen(%cv2) : (!act) -> f32
        %cv3 = memref.load %pool2[%row3, %e] : memref<?x?x!act>
        %cf3 = func.call @k3k_widen(%cv3) : (!act) -> f32
        %q0 = memref.load %qh[%i, %hu0, %e] : memref<?x?x?xf32>
        %m0_0 = arith.mulf %q0, %cf0 : f32
        %n0_0 = arith.addf %a0_0, %m0_0 : f32
        %m1_0 = arith.mulf %q0, %cf1 : f32
        %n1_0 = arith.addf %a1_0, %m1_0 : f32
        %m2_0 = arith.mulf %q0, %cf2 : f32
        %n2_0 = arith.addf %a2_0, %m2_0 : f32
        %m3_0 = arith.mulf %q0, %cf3 : f32
        %n3_0 = arith.addf %a3_0, %m3_0 : f32
        %q1 = memref.load %qh[%i, %hu1, %e] : memref<?x?x?xf32>
        %m0_1 = arith.mulf %q1, %cf0 : f32
        %n0_1 = arith.addf %a0_1, %m0_1 : f32
        %m1_1 = arith.mulf %q1, %cf1 : f32
        %n1_1 = arith.addf %a1_1, %m1_1 : f32
        %m2_1 = arith.mulf %q1, %cf2 : f32
        %n2_1 = arith.addf %a2_1, %m2_1 : f32
        %m3_1 = arith.mulf %q1, %cf3 : f32
        %n3_1 = arith.addf %a3_1, %m3_1 : f32
        %q2 = memref.load %qh[%i, %hu2, %e] : memref<?x?x?xf32>
        %m0_2 = arith.mulf %q2, %cf0 : f32
        %n0_2 = arith.addf %a0_2, %m0_2 : f32
        %m1_2 = arith.mulf %q2, %cf1 : f32
        %n1_2 = arith.addf %a1_2, %m1_2 : f32
        %m2_2 = arith.mulf %q2, %cf2 : f32
        %n2_2 = arith.addf %a2_2, %m2_2 : f32
        %m3_2 = arith.mulf %q2, %cf3 : f32
        %n3_2 = arith.addf %a3_2, %m3_2 : f32
        %q3 = memref.load %qh[%i, %hu3, %e] : memref<?x?x?xf32>
        %m0_3 = arith.mulf %q3, %cf0 : f32
        %n0_3 = arith.addf %a0_3, %m0_3 : f32
        %m1_3 = arith.mulf %q3, %cf1 : f32
        %n1_3 = arith.addf %a1_3, %m1_3 : f32
        %m2_3 = arith.mulf %q3, %cf2 : f32
        %n2_3 = arith.addf %a2_3, %m2_3 : f32
        %m3_3 = arith.mulf %q3, %cf3 : f32
        %n3_3 = arith.addf %a3_3, %m3_3 : f32
        %q4 = memref.load %qh[%i, %hu4, %e] : memref<?x?x?xf32>
        %m0_4 = arith.mulf %q4, %cf0 : f32
        %n0_4 = arith.addf %a0_4, %m0_4 : f32
        %m1_4 = arith.mulf %q4, %cf1 : f32
        %n1_4 = arith.addf %a1_4, %m1_4 : f32
        %m2_4 = arith.mulf %q4, %cf2 : f32
        %n2_4 = arith.addf %a2_4, %m2_4 : f32
        %m3_4 = arith.mulf %q4, %cf3 : f32
        %n3_4 = arith.addf %a3_4, %m3_4 : f32
        %q5 = memref.load %qh[%i, %hu5, %e] : memref<?x?x?xf32>
        %m0_5 = arith.mulf %q5, %cf0 : f32
        %n0_5 = arith.addf %a0_5, %m0_5 : f32
        %m1_5 = arith.mulf %q5, %cf1 : f32
        %n1_5 = arith.addf %a1_5, %m1_5 : f32
        %m2_5 = arith.mulf %q5, %cf2 : f32
        %n2_5 = arith.addf %a2_5, %m2_5 : f32
        %m3_5 = arith.mulf %q5, %cf3 : f32
        %n3_5 = arith.addf %a3_5, %m3_5 : f32
        %q6 = memref.load %qh[%i, %hu6, %e] : memref<?x?x?xf32>
        %m0_6 = arith.mulf %q6, %cf0 : f32
        %n0_6 = arith.addf %a0_6, %m0_6 : f32
        %m1_6 = arith.mulf %q6, %cf1 : f32
        %n1_6 = arith.addf %a1_6, %m1_6 : f32
        %m2_6 = arith.mulf %q6, %cf2 : f32
        %n2_6 = arith.addf %a2_6, %m2_6 : f32
        %m3_6 = arith.mulf %q6, %cf3 : f32
        %n3_6 = arith.addf %a3_6, %m3_6 : f32
        %q7 = memref.load %qh[%i, %hu7, %e] : memref<?x?x?xf32>
        %m0_7 = arith.mulf %q7, %cf0 : f32
        %n0_7 = arith.addf %a0_7, %m0_7 : f32
        %m1_7 = arith.mulf %q7, %cf1 : f32
        %n1_7 = arith.addf %a1_7, %m1_7 : f32
        %m2_7 = arith.mulf %q7, %cf2 : f32
        %n2_7 = arith.addf %a2_7, %m2_7 : f32
        %m3_7 = arith.mulf %q7, %cf3 : f32
        %n3_7 = arith.addf %a3_7, %m3_7 : f32
        scf.yield %n0_0, %n0_1, %n0_2, %n0_3, %n0_4, %n0_5, %n0_6, %n0_7, %n1_0, %n1_1, %n1_2, %n1_3, %n1_4, %n1_5, %n1_6, %n1_7, %n2_0, %n2_1, %n2_2, %n2_3, %n2_4, %n2_5, %n2_6, %n2_7, %n3_0, %n3_1, %n3_2, %n3_3, %n3_4, %n3_5, %n3_6, %n3_7 : f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32
      }
      %jin0 = arith.cmpi ult, %j0, %ntok : index
      %hin0_0 = arith.cmpi ult, %h0, %nh : index
      %in0_0 = arith.andi %hin0_0, %jin0 : i1
      scf.if %in0_0 {
        %sc0_0 = arith.mulf %s0_0, %scale : f32
        memref.store %sc0_0, %p[%i, %h0, %j0] : memref<?x?x?xf32>
      }
      %hin0_1 = arith.cmpi ult, %hk1, %nh : index
      %in0_1 = arith.andi %hin0_1, %jin0 : i1
      scf.if %in0_1 {
        %sc0_1 = arith.mulf %s0_1, %scale : f32
        memref.store %sc0_1, %p[%i, %hk1, %j0] : memref<?x?x?xf32>
      }
      %hin0_2 = arith.cmpi ult, %hk2, %nh : index
      %in0_2 = arith.andi %hin0_2, %jin0 : i1
      scf.if %in0_2 {
        %sc0_2 = arith.mulf %s0_2, %scale : f32
        memref.store %sc0_2, %p[%i, %hk2, %j0] : memref<?x?x?xf32>
      }
      %hin0_3 = arith.cmpi ult, %hk3, %nh : index
      %in0_3 = arith.andi %hin0_3, %jin0 : i1
      scf.if %in0_3 {
        %sc0_3 = arith.mulf %s0_3, %scale : f32
        memref.store %sc0_3, %p[%i, %hk3, %j0] : memref<?x?x?xf32>
      }
      %hin0_4 = arith.cmpi ult, %hk4, %nh : index
      %in0_4 = arith.andi %hin0_4, %jin0 : i1
      scf.if %in0_4 {
        %sc0_4 = arith.mulf %s0_4, %scale : f32
        memref.store %sc0_4, %p[%i, %hk4, %j0] : memref<?x?x?xf32>
      }
      %hin0_5 = arith.cmpi ult, %hk5, %nh : index
      %in0_5 = arith.andi %hin0_5, %jin0 : i1
      scf.if %in0_5 {
        %sc0_5 = arith.mulf %s0_5, %scale : f32
        memref.store %sc0_5, %p[%i, %hk5, %j0] : memref<?x?x?xf32>
      }
      %hin0_6 = arith.cmpi ult, %hk6, %nh : index
      %in0_6 = arith.andi %hin0_6, %jin0 : i1
      scf.if %in0_6 {
        %sc0_6 = arith.mulf %s0_6, %scale : f32
        memref.store %sc0_6, %p[%i, %hk6, %j0] : memref<?x?x?xf32>
      }
      %hin0_7 = arith.cmpi ult, %hk7, %nh : index
      %in0_7 = arith.andi %hin0_7, %jin0 : i1
      scf.if %in0_7 {
        %sc0_7 = arith.mulf %s0_7, %scale : f32
        memref.store %sc0_7, %p[%i, %hk7, %j0] : memref<?x?x?xf32>
      }
      %jin1 = arith.cmpi ult, %jr1, %ntok : index
      %hin1_0 = arith.cmpi ult, %h0, %nh : index
      %in1_0 = arith.andi %hin1_0, %jin1 : i1
      scf.if %in1_0 {
        %sc1_0 = arith.mulf %s1_0, %scale : f32
        memref.store %sc1_0, %p[%i, %h0, %jr1] : memref<?x?x?xf32>
      }
      %hin1_1 = arith.cmpi ult, %hk1, %nh : index
      %in1_1 = arith.andi %hin1_1, %jin1 : i1
      scf.if %in1_1 {
        %sc1_1 = arith.mulf %s1_1, %scale : f32
        memref.store %sc1_1, %p[%i, %hk1, %jr1] : memref<?x?x?xf32>
      }
      %hin1_2 = arith.cmpi ult, %hk2, %nh : index
      %in1_2 = arith.andi %hin1_2, %jin1 : i1
      scf.if %in1_2 {
        %sc1_2 = arith.mulf %s1_2, %scale : f32
        memref.store %sc1_2, %p[%i, %hk2, %jr1] : memref<?x?x?xf32>
      }
      %hin1_3 = arith.cmpi ult, %hk3, %nh : index
      %in1_3 = arith.andi %hin1_3, %jin1 : i1
      scf.if %in1_3 {
        %sc1_3 = arith.mulf %s1_3, %scale : f32
        memref.store %sc1_3, %p[%i, %hk3, %jr1] : memref<?x?x?xf32>
      }
      %hin1_4 = arith.cmpi ult, %hk4, %nh : index
      %in1_4 = arith.andi %hin1_4, %jin1 : i1
      scf.if %in1_4 {
        %sc1_4 = arith.mulf %s1_4, %scale : f32
        memref.store %sc1_4, %p[%i, %hk4, %jr1] : memref<?x?x?xf32>
      }
      %hin1_5 = arith.cmpi ult, %hk5, %nh : index
      %in1_5 = arith.andi %hin1_5, %jin1 : i1
      scf.if %in1_5 {
        %sc1_5 = arith.mulf %s1_5, %scale : f32
        memref.store %sc1_5, %p[%i, %hk5, %jr1] : memref<?x?x?xf32>
      }
      %hin1_6 = arith.cmpi ult, %hk6, %nh : index
      %in1_6 = arith.andi %hin1_6, %jin1 : i1
      scf.if %in1_6 {
        %sc1_6 = arith.mulf %s1_6, %scale : f32
        memref.store %sc1_6, %p[%i, %hk6, %jr1] : memref<?x?x?xf32>
      }
      %hin1_7 = arith.cmpi ult, %hk7, %nh : index
      %in1_7 = arith.andi %hin1_7, %jin1 : i1
      scf.if %in1_7 {
        %sc1_7 = arith.mulf %s1_7, %scale : f32
        memref.store %sc1_7, %p[%i, %hk7, %jr1] : memref<?x?x?xf32>
      }
      %jin2 = arith.cmpi ult, %jr2, %ntok : index
      %hin2_0 = arith.cmpi ult, %h0, %nh : index
      %in2_0 = arith.andi %hin2_0, %jin2 : i1
      scf.if %in2_0 {
        %sc2_0 = arith.mulf %s2_0, %scale : f32
        memref.store %sc2_0, %p[%i, %h0, %jr2] : memref<?x?x?xf32>
      }
      %hin2_1 = arith.cmpi ult, %hk1, %nh : index
      %in2_1 = arith.andi %hin2_1, %jin2 : i1
      scf.if %in2_1 {
        %sc2_1 = arith.mulf %s2_1, %scale : f32
        memref.store %sc2_1, %p[%i, %hk1, %jr2] : memref<?x?x?xf32>
      }
      %hin2_2 = arith.cmpi ult, %hk2, %nh : index
      %in2_2 = arith.andi %hin2_2, %jin2 : i1
      scf.if %in2_2 {
        %sc2_2 = arith.mulf %s2_2, %scale : f32
        memref.store %sc2_2, %p[%i, %hk2, %jr2] : memref<?x?x?xf32>
      }
      %hin2_3 = arith.cmpi ult, %hk3, %nh : index
      %in2_3 = arith.andi %hin2_3, %jin2 : i1
      scf.if %in2_3 {
        %sc2_3 = arith.mulf %s2_3, %scale : f32
        memref.store %sc2_3, %p[%i, %hk3, %jr2] : memref<?x?x?xf32>
      }
      %hin2_4 = arith.cmpi ult, %hk4, %nh : index
      %in2_4 = arith.andi %hin2_4, %jin2 : i1
      scf.if %in2_4 {
        %sc2_4 = arith.mulf %s2_4, %scale : f32
        memref.store %sc2_4, %p[%i, %hk4, %jr2] : memref<?x?x?xf32>
      }
      %hin2_5 = arith.cmpi ult, %hk5, %nh : index
      %in2_5 = arith.andi %hin2_5, %jin2 : i1
      scf.if %in2_5 {
        %sc2_5 = arith.mulf %s2_5, %scale : f32
        memref.store %sc2_5, %p[%i, %hk5, %jr2] : memref<?x?x?xf32>
      }
      %hin2_6 = arith.cmpi ult, %hk6, %nh : index
      %in2_6 = arith.andi %hin2_6, %jin2 : i1
      scf.if %in2_6 {
        %sc2_6 = arith.mulf %s2_6, %scale : f32
        memref.store %sc2_6, %p[%i, %hk6, %jr2] : memref<?x?x?xf32>
      }
      %hin2_7 = arith.cmpi ult, %hk7, %nh : index
      %in2_7 = arith.andi %hin2_7, %jin2 : i1
      scf.if %in2_7 {
        %sc2_7 = arith.mulf %s2_7, %scale : f32
        memref.store %sc2_7, %p[%i, %hk7, %jr2] : memref<?x?x?xf32>
      }
      %jin3 = arith.cmpi ult, %jr3, %ntok : index
      %hin3_0 = arith.cmpi ult, %h0, %nh : index
      %in3_0 = arith.andi %hin3_0, %jin3 : i1
      scf.if %in3_0 {
        %sc3_0 = arith.mulf %s3_0, %scale : f32
        memref.store %sc3_0, %p[%i, %h0, %jr3] : memref<?x?x?xf32>
      }
      %hin3_1 = arith.cmpi ult, %hk1, %nh : index
      %in3_1 = arith.andi %hin3_1, %jin3 : i1
      scf.if %in3_1 {
        %sc3_1 = arith.mulf %s3_1, %scale : f32
        memref.store %sc3_1, %p[%i, %hk1, %jr3] : memref<?x?x?xf32>
      }
      %hin3_2 = arith.cmpi ult, %hk2, %nh : index
      %in3_2 = arith.andi %hin3_2, %jin3 : i1
      scf.if %in3_2 {
        %sc3_2 = arith.mulf %s3_2, %scale : f32
        memref.store %sc3_2, %p[%i, %hk2, %jr3] : memref<?x?x?xf32>
      }
      %hin3_3 = arith.cmpi ult, %hk3, %nh : index
      %in3_3 = arith.andi %hin3_3, %jin3 : i1
      scf.if %in3_3 {
        %sc3_3 = arith.mulf %s3_3, %scale : f32
        memref.store %sc3_3, %p[%i, %hk3, %jr3] : memref<?x?x?xf32>
      }
      %hin3_4 = arith.cmpi ult, %hk4, %nh : index
      %in3_4 = arith.andi %hin3_4, %jin3 : i1
      scf.if %in3_4 {
        %sc3_4 = arith.mulf %s3_4, %scale : f32
        memref.store %sc3_4, %p[%i, %hk4, %jr3] : memref<?x?x?xf32>
      }
      %hin3_5 = arith.cmpi ult, %hk5, %nh : index
      %in3_5 = arith.andi %hin3_5, %jin3 : i1
      scf.if %in3_5 {
        %sc3_5 = arith.mulf %s3_5, %scale : f32
        memref.store %sc3_5, %p[%i, %hk5, %jr3] : memref<?x?x?xf32>
      }
      %hin3_6 = arith.cmpi ult, %hk6, %nh : index
      %in3_6 = arith.andi %hin3_6, %jin3 : i1
      scf.if %in3_6 {
        %sc3_6 = arith.mulf %s3_6, %scale : f32
        memref.store %sc3_6, %p[%i, %hk6, %jr3] : memref<?x?x?xf32>
      }
      %hin3_7 = arith.cmpi ult, %hk7, %nh : index
      %in3_7 = arith.andi %hin3_7, %jin3 : i1
      scf.if %in3_7 {
        %sc3_7 = arith.mulf %s3_7, %scale : f32
        memref.store %sc3_7, %p[%i, %hk7, %jr3] : memref<?x?x?xf32>
      }
    }
    // Softmax per (token, head): the maximum, exp(s - max) in place, the sum.
    %rowmax = memref.alloc(%t, %nh) : memref<?x?xf32>
    scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
      %ntok = func.call @k3k_mla_rows(%ntk, %i, %pertoken, %maxn) : (memref<?xindex>, index, i1, index) -> index
      %mx = scf.for %j = %c0 to %ntok step %c1 iter_args(%m = %ninf) -> (f32) {
        %sc = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %m2 = arith.maximumf %m, %sc : f32
        scf.yield %m2 : f32
      }
      memref.store %mx, %rowmax[%i, %h] : memref<?x?xf32>
    }
    scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %maxn) step (%c1, %c1, %c1) {
      %ntok = func.call @k3k_mla_rows(%ntk, %i, %pertoken, %maxn) : (memref<?xindex>, index, i1, index) -> index
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
      %ntok = func.call @k3k_mla_rows(%ntk, %i, %pertoken, %maxn) : (memref<?xindex>, index, i1, index) -> index
      %sum = scf.for %j = %c0 to %ntok step %c1 iter_args(%a = %zero) -> (f32) {
        %e = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %s2 = arith.addf %a, %e : f32
        scf.yield %s2 : f32
      }
      memref.store %sum, %rowsum[%i, %h] : memref<?x?xf32>
    }
    // ō over each token's cached rows in slices of about %rows_per_part
    // (at most %parts; flash-decoding style: each slice a partial sum, the
    // slices added in order, unused ones zero), for parallelism over a long
    // context; %hblk heads per thread, so that each cache element is read
    // once per slice for all of them. A token's slices depend on its own
    // context only, not on the other tokens of the call.
    %parts = arith.constant 32 : index
    %rows_per_part = arith.constant 256 : index
    %partial = memref.alloc(%t, %nh, %r, %parts) : memref<?x?x?x?xf32>
    scf.parallel (%i, %hb, %pt, %e) = (%c0, %c0, %c0, %c0) to (%t, %nhb, %parts, %r) step (%c1, %c1, %c1, %c1) {
      %ntok = func.call @k3k_mla_rows(%ntk, %i, %pertoken, %maxn) : (memref<?xindex>, index, i1, index) -> index
      %nparts0 = arith.ceildivui %ntok, %rows_per_part : index
      %nparts = arith.minui %nparts0, %parts : index
      %slice = arith.ceildivui %ntok, %nparts : index
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
      // Four cached rows per iteration, in order (independent loads in
      // flight); a row past the slice leaves the sums as they are.
      %j1last = arith.subi %j1, %c1 : index
      %s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7 = scf.for %j = %j0 to %j1 step %rblk iter_args(%a0 = %zero, %a1 = %zero, %a2 = %zero, %a3 = %zero, %a4 = %zero, %a5 = %zero, %a6 = %zero, %a7 = %zero) -> (f32, f32, f32, f32, f32, f32, f32, f32) {
        %ok0 = arith.cmpi ult, %j, %j1 : index
        %jc0 = arith.minui %j, %j1last : index
        %row0 = memref.load %rows[%i, %jc0] : memref<?x?xindex>
        %cv0 = memref.load %pool2[%row0, %e] : memref<?x?x!act>
        %cf0 = func.call @k3k_widen(%cv0) : (!act) -> f32
        %jj1 = arith.addi %j, %c1_h : index
        %ok1 = arith.cmpi ult, %jj1, %j1 : index
        %jc1 = arith.minui %jj1, %j1last : index
        %row1 = memref.load %rows[%i, %jc1] : memref<?x?xindex>
        %cv1 = memref.load %pool2[%row1, %e] : memref<?x?x!act>
        %cf1 = func.call @k3k_widen(%cv1) : (!act) -> f32
        %jj2 = arith.addi %j, %c2_h : index
        %ok2 = arith.cmpi ult, %jj2, %j1 : index
        %jc2 = arith.minui %jj2, %j1last : index
        %row2 = memref.load %rows[%i, %jc2] : memref<?x?xindex>
        %cv2 = memref.load %pool2[%row2, %e] : memref<?x?x!act>
        %cf2 = func.call @k3k_widen(%cv2) : (!act) -> f32
        %jj3 = arith.addi %j, %c3_h : index
        %ok3 = arith.cmpi ult, %jj3, %j1 : index
        %jc3 = arith.minui %jj3, %j1last : index
        %row3 = memref.load %rows[%i, %jc3] : memref<?x?xindex>
        %cv3 = memref.load %pool2[%row3, %e] : memref<?x?x!act>
        %cf3 = func.call @k3k_widen(%cv3) : (!act) -> f32
        %p0_0 = memref.load %p[%i, %hu0, %jc0] : memref<?x?x?xf32>
        %m0_0 = arith.mulf %p0_0, %cf0 : f32
        %d0_0 = arith.addf %a0, %m0_0 : f32
        %n0_0 = arith.select %ok0, %d0_0, %a0 : f32
        %p0_1 = memref.load %p[%i, %hu1, %jc0] : memref<?x?x?xf32>
        %m0_1 = arith.mulf %p0_1, %cf0 : f32
        %d0_1 = arith.addf %a1, %m0_1 : f32
        %n0_1 = arith.select %ok0, %d0_1, %a1 : f32
        %p0_2 = memref.load %p[%i, %hu2, %jc0] : memref<?x?x?xf32>
        %m0_2 = arith.mulf %p0_2, %cf0 : f32
        %d0_2 = arith.addf %a2, %m0_2 : f32
        %n0_2 = arith.select %ok0, %d0_2, %a2 : f32
        %p0_3 = memref.load %p[%i, %hu3, %jc0] : memref<?x?x?xf32>
        %m0_3 = arith.mulf %p0_3, %cf0 : f32
        %d0_3 = arith.addf %a3, %m0_3 : f32
        %n0_3 = arith.select %ok0, %d0_3, %a3 : f32
        %p0_4 = memref.load %p[%i, %hu4, %jc0] : memref<?x?x?xf32>
        %m0_4 = arith.mulf %p0_4, %cf0 : f32
        %d0_4 = arith.addf %a4, %m0_4 : f32
        %n0_4 = arith.select %ok0, %d0_4, %a4 : f32
        %p0_5 = memref.load %p[%i, %hu5, %jc0] : memref<?x?x?xf32>
        %m0_5 = arith.mulf %p0_5, %cf0 : f32
        %d0_5 = arith.addf %a5, %m0_5 : f32
        %n0_5 = arith.select %ok0, %d0_5, %a5 : f32
        %p0_6 = memref.load %p[%i, %hu6, %jc0] : memref<?x?x?xf32>
        %m0_6 = arith.mulf %p0_6, %cf0 : f32
        %d0_6 = arith.addf %a6, %m0_6 : f32
        %n0_6 = arith.select %ok0, %d0_6, %a6 : f32
        %p0_7 = memref.load %p[%i, %hu7, %jc0] : memref<?x?x?xf32>
        %m0_7 = arith.mulf %p0_7, %cf0 : f32
        %d0_7 = arith.addf %a7, %m0_7 : f32
        %n0_7 = arith.select %ok0, %d0_7, %a7 : f32
        %p1_0 = memref.load %p[%i, %hu0, %jc1] : memref<?x?x?xf32>
        %m1_0 = arith.mulf %p1_0, %cf1 : f32
        %d1_0 = arith.addf %n0_0, %m1_0 : f32
        %n1_0 = arith.select %ok1, %d1_0, %n0_0 : f32
        %p1_1 = memref.load %p[%i, %hu1, %jc1] : memref<?x?x?xf32>
        %m1_1 = arith.mulf %p1_1, %cf1 : f32
        %d1_1 = arith.addf %n0_1, %m1_1 : f32
        %n1_1 = arith.select %ok1, %d1_1, %n0_1 : f32
        %p1_2 = memref.load %p[%i, %hu2, %jc1] : memref<?x?x?xf32>
        %m1_2 = arith.mulf %p1_2, %cf1 : f32
        %d1_2 = arith.addf %n0_2, %m1_2 : f32
        %n1_2 = arith.select %ok1, %d1_2, %n0_2 : f32
        %p1_3 = memref.load %p[%i, %hu3, %jc1] : memref<?x?x?xf32>
        %m1_3 = arith.mulf %p1_3, %cf1 : f32
        %d1_3 = arith.addf %n0_3, %m1_3 : f32
        %n1_3 = arith.select %ok1, %d1_3, %n0_3 : f32
        %p1_4 = memref.load %p[%i, %hu4, %jc1] : memref<?x?x?xf32>
        %m1_4 = arith.mulf %p1_4, %cf1 : f32
        %d1_4 = arith.addf %n0_4, %m1_4 : f32
        %n1_4 = arith.select %ok1, %d1_4, %n0_4 : f32
        %p1_5 = memref.load %p[%i, %hu5, %jc1] : memref<?x?x?xf32>
        %m1_5 = arith.mulf %p1_5, %cf1 : f32
        %d1_5 = arith.addf %n0_5, %m1_5 : f32
        %n1_5 = arith.select %ok1, %d1_5, %n0_5 : f32
        %p1_6 = memref.load %p[%i, %hu6, %jc1] : memref<?x?x?xf32>
        %m1_6 = arith.mulf %p1_6, %cf1 : f32
        %d1_6 = arith.addf %n0_6, %m1_6 : f32
        %n1_6 = arith.select %ok1, %d1_6, %n0_6 : f32
        %p1_7 = memref.load %p[%i, %hu7, %jc1] : memref<?x?x?xf32>
        %m1_7 = arith.mulf %p1_7, %cf1 : f32
        %d1_7 = arith.addf %n0_7, %m1_7 : f32
        %n1_7 = arith.select %ok1, %d1_7, %n0_7 : f32
        %p2_0 = memref.load %p[%i, %hu0, %jc2] : memref<?x?x?xf32>
        %m2_0 = arith.mulf %p2_0, %cf2 : f32
        %d2_0 = arith.addf %n1_0, %m2_0 : f32
        %n2_0 = arith.select %ok2, %d2_0, %n1_0 : f32
        %p2_1 = memref.load %p[%i, %hu1, %jc2] : memref<?x?x?xf32>
        %m2_1 = arith.mulf %p2_1, %cf2 : f32
        %d2_1 = arith.addf %n1_1, %m2_1 : f32
        %n2_1 = arith.select %ok2, %d2_1, %n1_1 : f32
        %p2_2 = memref.load %p[%i, %hu2, %jc2] : memref<?x?x?xf32>
        %m2_2 = arith.mulf %p2_2, %cf2 : f32
        %d2_2 = arith.addf %n1_2, %m2_2 : f32
        %n2_2 = arith.select %ok2, %d2_2, %n1_2 : f32
        %p2_3 = memref.load %p[%i, %hu3, %jc2] : memref<?x?x?xf32>
        %m2_3 = arith.mulf %p2_3, %cf2 : f32
        %d2_3 = arith.addf %n1_3, %m2_3 : f32
        %n2_3 = arith.select %ok2, %d2_3, %n1_3 : f32
        %p2_4 = memref.load %p[%i, %hu4, %jc2] : memref<?x?x?xf32>
        %m2_4 = arith.mulf %p2_4, %cf2 : f32
        %d2_4 = arith.addf %n1_4, %m2_4 : f32
        %n2_4 = arith.select %ok2, %d2_4, %n1_4 : f32
        %p2_5 = memref.load %p[%i, %hu5, %jc2] : memref<?x?x?xf32>
        %m2_5 = arith.mulf %p2_5, %cf2 : f32
        %d2_5 = arith.addf %n1_5, %m2_5 : f32
        %n2_5 = arith.select %ok2, %d2_5, %n1_5 : f32
        %p2_6 = memref.load %p[%i, %hu6, %jc2] : memref<?x?x?xf32>
        %m2_6 = arith.mulf %p2_6, %cf2 : f32
        %d2_6 = arith.addf %n1_6, %m2_6 : f32
        %n2_6 = arith.select %ok2, %d2_6, %n1_6 : f32
        %p2_7 = memref.load %p[%i, %hu7, %jc2] : memref<?x?x?xf32>
        %m2_7 = arith.mulf %p2_7, %cf2 : f32
        %d2_7 = arith.addf %n1_7, %m2_7 : f32
        %n2_7 = arith.select %ok2, %d2_7, %n1_7 : f32
        %p3_0 = memref.load %p[%i, %hu0, %jc3] : memref<?x?x?xf32>
        %m3_0 = arith.mulf %p3_0, %cf3 : f32
        %d3_0 = arith.addf %n2_0, %m3_0 : f32
        %n3_0 = arith.select %ok3, %d3_0, %n2_0 : f32
        %p3_1 = memref.load %p[%i, %hu1, %jc3] : memref<?x?x?xf32>
        %m3_1 = arith.mulf %p3_1, %cf3 : f32
        %d3_1 = arith.addf %n2_1, %m3_1 : f32
        %n3_1 = arith.select %ok3, %d3_1, %n2_1 : f32
        %p3_2 = memref.load %p[%i, %hu2, %jc3] : memref<?x?x?xf32>
        %m3_2 = arith.mulf %p3_2, %cf3 : f32
        %d3_2 = arith.addf %n2_2, %m3_2 : f32
        %n3_2 = arith.select %ok3, %d3_2, %n2_2 : f32
        %p3_3 = memref.load %p[%i, %hu3, %jc3] : memref<?x?x?xf32>
        %m3_3 = arith.mulf %p3_3, %cf3 : f32
        %d3_3 = arith.addf %n2_3, %m3_3 : f32
        %n3_3 = arith.select %ok3, %d3_3, %n2_3 : f32
        %p3_4 = memref.load %p[%i, %hu4, %jc3] : memref<?x?x?xf32>
        %m3_4 = arith.mulf %p3_4, %cf3 : f32
        %d3_4 = arith.addf %n2_4, %m3_4 : f32
        %n3_4 = arith.select %ok3, %d3_4, %n2_4 : f32
        %p3_5 = memref.load %p[%i, %hu5, %jc3] : memref<?x?x?xf32>
        %m3_5 = arith.mulf %p3_5, %cf3 : f32
        %d3_5 = arith.addf %n2_5, %m3_5 : f32
        %n3_5 = arith.select %ok3, %d3_5, %n2_5 : f32
        %p3_6 = memref.load %p[%i, %hu6, %jc3] : memref<?x?x?xf32>
        %m3_6 = arith.mulf %p3_6, %cf3 : f32
        %d3_6 = arith.addf %n2_6, %m3_6 : f32
        %n3_6 = arith.select %ok3, %d3_6, %n2_6 : f32
        %p3_7 = memref.load %p[%i, %hu7, %jc3] : memref<?x?x?xf32>
        %m3_7 = arith.mulf %p3_7, %cf3 : f32
        %d3_7 = arith.addf %n2_7, %m3_7 : f32
        %n3_7 = arith.select %ok3, %d3_7, %n2_7 : f32
        scf.yield %n3_0, %n3_1, %n3_2, %n3_3, %n3_4, %n3_5, %n3_6, %n3_7 : f32, f32, f32, f32, f32, f32, f32, f32
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
