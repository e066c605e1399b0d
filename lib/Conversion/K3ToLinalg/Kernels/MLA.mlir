// Gated MLA kernel (K3_SPEC §5): projections, the paged latent cache, and
// attention in the naive form (§5.2, T > 1: prefill) or the weight-absorbed
// form (§5.3, T = 1: decode). No positional encoding (NoPE).

// Softmax-weighted attention of one query head over cache rows 0..n-1 is
// computed in two passes (max, then exp/sum) in the callers below.

// k3.gated_mla. x: [T, D]; the cache is (pool [pages, P, R+dr], page table,
// length [1]); the segment's tokens are written at positions len .. len+T-1.
// Returns concat_h o_h ⊙ gate, [T, H·dv].
func.func private @k3k_gated_mla(%x: tensor<?x?x!act>, %wqa: tensor<?x?xbf16>, %gqa: tensor<?xbf16>,
                                 %wqb: tensor<?x?xbf16>, %wkva: tensor<?x?xbf16>, %gkva: tensor<?xbf16>,
                                 %wkvb: tensor<?x?xbf16>, %wg: tensor<?x?xbf16>, %hasgate: i1,
                                 %pool: memref<?x?x?x!act>, %table: memref<?xi32>, %lenm: memref<?xi64>,
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
  %len64 = memref.load %lenm[%c0] : memref<?xi64>
  %len = arith.index_cast %len64 : i64 to index
  %dq = arith.addi %dn, %dr : index
  %dkv = arith.addi %dn, %dvh : index

  // §5.1: c_q, q, [c̃ ; k_r], c.
  %qa = func.call @k3k_linear(%x, %wqa) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %cq = func.call @k3k_rms_norm(%qa, %gqa, %qeps) : (tensor<?x?x!act>, tensor<?xbf16>, f32) -> tensor<?x?x!act>
  %q = func.call @k3k_linear(%cq, %wqb) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %kva = func.call @k3k_linear(%x, %wkva) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %ct = tensor.extract_slice %kva[0, 0] [%t, %r] [1, 1] : tensor<?x?x!act> to tensor<?x?x!act>
  %c = func.call @k3k_rms_norm(%ct, %gkva, %kveps) : (tensor<?x?x!act>, tensor<?xbf16>, f32) -> tensor<?x?x!act>

  // Append [c ; k_r] of every new token to the cache pages.
  scf.parallel (%i) = (%c0) to (%t) step (%c1) {
    %pos = arith.addi %len, %i : index
    %pg = arith.divui %pos, %psz : index
    %off = arith.remui %pos, %psz : index
    %pid32 = memref.load %table[%pg] : memref<?xi32>
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

  // The whole cache, in order: [len + T, R + dr] (f32 values of the cache).
  %ntok = arith.addi %len, %t : index
  %w = arith.addi %r, %dr : index
  %all = memref.alloc(%ntok, %w) : memref<?x?xf32>
  scf.parallel (%j, %e) = (%c0, %c0) to (%ntok, %w) step (%c1, %c1) {
    %pg = arith.divui %j, %psz : index
    %off = arith.remui %j, %psz : index
    %pid32 = memref.load %table[%pg] : memref<?xi32>
    %pid = arith.index_cast %pid32 : i32 to index
    %v = memref.load %pool[%pid, %off, %e] : memref<?x?x?x!act>
    %vf = func.call @k3k_widen(%v) : (!act) -> f32
    memref.store %vf, %all[%j, %e] : memref<?x?xf32>
  }

  %hv = arith.muli %nh, %dvh : index
  %o = memref.alloc(%t, %hv) : memref<?x?xf32>
  %decode = arith.cmpi eq, %t, %c1 : index
  scf.if %decode {
    // §5.3 absorbed: q̂_h = W_UK[h]ᵀ q_n[h]; s_j = (q̂_h·c_j + q_r[h]·k_r,j)·scale;
    // ō_h = Σ_j p_j c_j; o_h = W_UV[h] ō_h.
    // One parallel loop per stage (one GPU kernel each): q̂ [H, R], scores
    // [H, len], max/exp/sum per head, ō [H, R], o [H, dv]. Per element the
    // sums run in the same order as a per-head loop would.
    // q̂ is stored next to q_r ([H, R + dr]) so that each score is one dot
    // product over a whole cache row (the same terms in the same order).
    %qh = memref.alloc(%nh, %w) : memref<?x?xf32>
    %ob = memref.alloc(%nh, %r) : memref<?x?xf32>
    %p = memref.alloc(%nh, %ntok) : memref<?x?xf32>
    %rowsum = memref.alloc(%nh) : memref<?xf32>
    scf.parallel (%h, %e) = (%c0, %c0) to (%nh, %r) step (%c1, %c1) {
      %qbase = arith.muli %h, %dq : index
      %kvbase = arith.muli %h, %dkv : index
      %s = scf.for %d = %c0 to %dn step %c1 iter_args(%a = %zero) -> (f32) {
        %qi = arith.addi %qbase, %d : index
        %qv = tensor.extract %q[%c0, %qi] : tensor<?x?x!act>
        %qf = func.call @k3k_widen(%qv) : (!act) -> f32
        %row = arith.addi %kvbase, %d : index
        %wv = tensor.extract %wkvb[%row, %e] : tensor<?x?xbf16>
        %wf = arith.extf %wv : bf16 to f32
        %pr = arith.mulf %qf, %wf : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      memref.store %s, %qh[%h, %e] : memref<?x?xf32>
    }
    scf.parallel (%h, %e) = (%c0, %c0) to (%nh, %dr) step (%c1, %c1) {
      %qbase = arith.muli %h, %dq : index
      %qi0 = arith.addi %qbase, %dn : index
      %qi = arith.addi %qi0, %e : index
      %qv = tensor.extract %q[%c0, %qi] : tensor<?x?x!act>
      %qf = func.call @k3k_widen(%qv) : (!act) -> f32
      %re = arith.addi %r, %e : index
      memref.store %qf, %qh[%h, %re] : memref<?x?xf32>
    }
    scf.parallel (%h, %j) = (%c0, %c0) to (%nh, %ntok) step (%c1, %c1) {
      %s = scf.for %e = %c0 to %w step %c1 iter_args(%a = %zero) -> (f32) {
        %qv = memref.load %qh[%h, %e] : memref<?x?xf32>
        %cv = memref.load %all[%j, %e] : memref<?x?xf32>
        %pr = arith.mulf %qv, %cv : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %sc = arith.mulf %s, %scale : f32
      memref.store %sc, %p[%h, %j] : memref<?x?xf32>
    }
    // Softmax per head: the maximum, exp(s - max) in place, the sum.
    %rowmax = memref.alloc(%nh) : memref<?xf32>
    scf.parallel (%h) = (%c0) to (%nh) step (%c1) {
      %mx = scf.for %j = %c0 to %ntok step %c1 iter_args(%m = %ninf) -> (f32) {
        %sc = memref.load %p[%h, %j] : memref<?x?xf32>
        %m2 = arith.maximumf %m, %sc : f32
        scf.yield %m2 : f32
      }
      memref.store %mx, %rowmax[%h] : memref<?xf32>
    }
    scf.parallel (%h, %j) = (%c0, %c0) to (%nh, %ntok) step (%c1, %c1) {
      %s = memref.load %p[%h, %j] : memref<?x?xf32>
      %mx = memref.load %rowmax[%h] : memref<?xf32>
      %d = arith.subf %s, %mx : f32
      %e = math.exp %d : f32
      memref.store %e, %p[%h, %j] : memref<?x?xf32>
    }
    scf.parallel (%h) = (%c0) to (%nh) step (%c1) {
      %sum = scf.for %j = %c0 to %ntok step %c1 iter_args(%a = %zero) -> (f32) {
        %e = memref.load %p[%h, %j] : memref<?x?xf32>
        %s2 = arith.addf %a, %e : f32
        scf.yield %s2 : f32
      }
      memref.store %sum, %rowsum[%h] : memref<?xf32>
    }
    // ō over the cached tokens in %parts slices (flash-decoding style:
    // each slice a partial sum, the slices added in order), for
    // parallelism over a long context.
    %parts = arith.constant 16 : index
    %slice = arith.ceildivui %ntok, %parts : index
    %partial = memref.alloc(%nh, %r, %parts) : memref<?x?x?xf32>
    scf.parallel (%h, %pt, %e) = (%c0, %c0, %c0) to (%nh, %parts, %r) step (%c1, %c1, %c1) {
      %j0 = arith.muli %pt, %slice : index
      %j1u = arith.addi %j0, %slice : index
      %j1 = arith.minui %j1u, %ntok : index
      %acc = scf.for %j = %j0 to %j1 step %c1 iter_args(%a = %zero) -> (f32) {
        %pj = memref.load %p[%h, %j] : memref<?x?xf32>
        %cv = memref.load %all[%j, %e] : memref<?x?xf32>
        %pr = arith.mulf %pj, %cv : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      memref.store %acc, %partial[%h, %e, %pt] : memref<?x?x?xf32>
    }
    scf.parallel (%h, %e) = (%c0, %c0) to (%nh, %r) step (%c1, %c1) {
      %acc = scf.for %pt = %c0 to %parts step %c1 iter_args(%a = %zero) -> (f32) {
        %v = memref.load %partial[%h, %e, %pt] : memref<?x?x?xf32>
        %s2 = arith.addf %a, %v : f32
        scf.yield %s2 : f32
      }
      %sum = memref.load %rowsum[%h] : memref<?xf32>
      %nrm = arith.divf %acc, %sum : f32
      memref.store %nrm, %ob[%h, %e] : memref<?x?xf32>
    }
    scf.parallel (%h, %d) = (%c0, %c0) to (%nh, %dvh) step (%c1, %c1) {
      %kvbase = arith.muli %h, %dkv : index
      %row0 = arith.addi %kvbase, %dn : index
      %row = arith.addi %row0, %d : index
      %acc = scf.for %e = %c0 to %r step %c1 iter_args(%a = %zero) -> (f32) {
        %wv = tensor.extract %wkvb[%row, %e] : tensor<?x?xbf16>
        %wf = arith.extf %wv : bf16 to f32
        %ov = memref.load %ob[%h, %e] : memref<?x?xf32>
        %pr = arith.mulf %wf, %ov : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %hb = arith.muli %h, %dvh : index
      %col = arith.addi %hb, %d : index
      memref.store %acc, %o[%c0, %col] : memref<?x?xf32>
    }
  } else {
    // §5.2 naive: per head key [k_n ; k_r] and value v from W_UKV c, causal
    // softmax over the cached tokens and the segment.
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
      %qpos = arith.addi %len, %i : index
      %nvis = arith.addi %qpos, %c1 : index
      %mx = scf.for %j = %c0 to %nvis step %c1 iter_args(%m = %ninf) -> (f32) {
        %sc = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %m2 = arith.maximumf %m, %sc : f32
        scf.yield %m2 : f32
      }
      memref.store %mx, %pmax[%i, %h] : memref<?x?xf32>
    }
    scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %ntok) step (%c1, %c1, %c1) {
      %qpos = arith.addi %len, %i : index
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
      %qpos = arith.addi %len, %i : index
      %nvis = arith.addi %qpos, %c1 : index
      %sum = scf.for %j = %c0 to %nvis step %c1 iter_args(%a = %zero) -> (f32) {
        %e = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %s2 = arith.addf %a, %e : f32
        scf.yield %s2 : f32
      }
      memref.store %sum, %psum[%i, %h] : memref<?x?xf32>
    }
    scf.parallel (%i, %h, %d) = (%c0, %c0, %c0) to (%t, %nh, %dvh) step (%c1, %c1, %c1) {
      %qpos = arith.addi %len, %i : index
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
