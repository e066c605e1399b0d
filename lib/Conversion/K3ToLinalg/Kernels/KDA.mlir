// Kimi Delta Attention kernels (K3_SPEC §4.2–4.6): the short convolution and
// the KDA core, in both forms: the token recurrence (§4.5, used for T = 1)
// and the chunked WY/UT form (§4.6, chunks of `chunk` tokens, used for
// T > 1). State lives in the caller's buffers and is updated in place.

// sigmoid(x) in f32.
func.func private @k3k_sigmoid(%x: f32) -> f32 {
  %one = arith.constant 1.0 : f32
  %n = arith.negf %x : f32
  %e = math.exp %n : f32
  %d = arith.addf %one, %e : f32
  %r = arith.divf %one, %d : f32
  return %r : f32
}

// k3.short_conv (§4.2): y_t[c] = round(SiLU(Σ_j w[c,0,j] · u_{t-W+1+j}[c]));
// inputs before a sequence's segment come from its tail [C, W-1] (oldest
// first) in `pool` [S, C, W-1], which is replaced by the segment's last W-1
// raw inputs. `slots` as for k3k_kda: one entry (the T tokens are one
// segment of sequence slots[0]) or T (token i is a segment of its own, of
// sequence slots[i]).
func.func private @k3k_short_conv(%x: tensor<?x?x!act>, %w: tensor<?x?x?xf32>, %pool: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %slots: memref<?xi32>) -> tensor<?x?x!act>
    attributes {k3.call_group = @k3k_short_conv3} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %ch = tensor.dim %x, %c1 : tensor<?x?x!act>
  %nseq, %seglen = func.call @k3k_conv_segments(%t, %slots) : (index, memref<?xi32>) -> (index, index)
  %out = memref.alloc(%t, %ch) : memref<?x?x!act>
  scf.parallel (%sq, %c) = (%c0, %c0) to (%nseq, %ch) step (%c1, %c1) {
    func.call @k3k_short_conv_channel(%x, %w, %pool, %slots, %out, %sq, %c, %seglen)
        : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>, index, index, index) -> ()
  }
  %res = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %res : tensor<?x?x!act>
}

// The segments of a short convolution's T tokens: (count, tokens each).
// Token i is position i - s of segment s (s = i per token, else 0), which
// starts at token s.
func.func private @k3k_conv_segments(%t: index, %slots: memref<?xi32>) -> (index, index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %nslots = memref.dim %slots, %c0 : memref<?xi32>
  %pertoken = arith.cmpi ugt, %nslots, %c1 : index
  %nseq = arith.select %pertoken, %t, %c1 : index
  %seglen = arith.select %pertoken, %c1, %t : index
  return %nseq, %seglen : index, index
}

// Segment %sq, channel %c of @k3k_short_conv: the segment's outputs in
// order, then its new tail — raw inputs at segment positions L-W+1 .. L-1,
// older ones from the old tail. Tail entry k takes old entry L + k > k, so
// writing the entries in increasing k never overwrites one still to be
// read, and the outputs have read the old tail before.
func.func private @k3k_short_conv_channel(%x: tensor<?x?x!act>, %w: tensor<?x?x?xf32>, %pool: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>,
                                          %slots: memref<?xi32>, %out: memref<?x?x!act>, %sq: index, %c: index, %seglen: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %kw = tensor.dim %w, %c2 : tensor<?x?x?xf32>
  %wm1 = arith.subi %kw, %c1 : index
  %s32 = memref.load %slots[%sq] : memref<?xi32>
  %sl = arith.index_cast %s32 : i32 to index
  scf.for %pos = %c0 to %seglen step %c1 {
    %i = arith.addi %sq, %pos : index
    %acc = scf.for %j = %c0 to %kw step %c1 iter_args(%a = %zero) -> (f32) {
      %ij = arith.addi %pos, %j : index
      %inseg = arith.cmpi uge, %ij, %wm1 : index
      %u = scf.if %inseg -> (!act) {
        %rel = arith.subi %ij, %wm1 : index
        %src = arith.addi %sq, %rel : index
        %v = tensor.extract %x[%src, %c] : tensor<?x?x!act>
        scf.yield %v : !act
      } else {
        %v = memref.load %pool[%sl, %c, %ij] : memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>
        scf.yield %v : !act
      }
      %uf = func.call @k3k_widen(%u) : (!act) -> f32
      %wv = tensor.extract %w[%c, %c0, %j] : tensor<?x?x?xf32>
      %p = arith.mulf %wv, %uf : f32
      %s = arith.addf %a, %p : f32
      scf.yield %s : f32
    }
    %sg = func.call @k3k_sigmoid(%acc) : (f32) -> f32
    %y = arith.mulf %acc, %sg : f32
    %ya = func.call @k3k_narrow(%y) : (f32) -> !act
    memref.store %ya, %out[%i, %c] : memref<?x?x!act>
  }
  scf.for %k = %c0 to %wm1 step %c1 {
    %tk = arith.addi %seglen, %k : index
    %inseg = arith.cmpi uge, %tk, %wm1 : index
    %u = scf.if %inseg -> (!act) {
      %rel = arith.subi %tk, %wm1 : index
      %src = arith.addi %sq, %rel : index
      %v = tensor.extract %x[%src, %c] : tensor<?x?x!act>
      scf.yield %v : !act
    } else {
      %v = memref.load %pool[%sl, %c, %tk] : memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>
      scf.yield %v : !act
    }
    memref.store %u, %pool[%sl, %c, %k] : memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>
  }
  return
}

// Three short convolutions (a KDA layer's q, k and v, §4.2) in one
// parallel loop: thread (stream, segment, channel) takes that channel of
// its stream, if the stream has it, so the three are one launch
// (k3-group-calls makes three calls of @k3k_short_conv this call). (A
// thread per (segment, channel) doing the three streams one after another
// took 6.5-7.6 us per batch-1 step on the H200, one chain of dependent
// loads per stream, BENCHMARKS.md twenty-eighth session.)
func.func private @k3k_short_conv3(
    %x0: tensor<?x?x!act>, %w0: tensor<?x?x?xf32>, %pool0: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %slots0: memref<?xi32>,
    %x1: tensor<?x?x!act>, %w1: tensor<?x?x?xf32>, %pool1: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %slots1: memref<?xi32>,
    %x2: tensor<?x?x!act>, %w2: tensor<?x?x?xf32>, %pool2: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %slots2: memref<?xi32>)
    -> (tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?x!act>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t0 = tensor.dim %x0, %c0 : tensor<?x?x!act>
  %t1 = tensor.dim %x1, %c0 : tensor<?x?x!act>
  %t2 = tensor.dim %x2, %c0 : tensor<?x?x!act>
  %ch0 = tensor.dim %x0, %c1 : tensor<?x?x!act>
  %ch1 = tensor.dim %x1, %c1 : tensor<?x?x!act>
  %ch2 = tensor.dim %x2, %c1 : tensor<?x?x!act>
  %out0 = memref.alloc(%t0, %ch0) : memref<?x?x!act>
  %out1 = memref.alloc(%t1, %ch1) : memref<?x?x!act>
  %out2 = memref.alloc(%t2, %ch2) : memref<?x?x!act>
  func.call @k3k_short_conv3_into(%x0, %w0, %pool0, %slots0, %out0, %x1, %w1, %pool1, %slots1, %out1, %x2, %w2, %pool2, %slots2, %out2)
      : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>) -> ()
  %r0 = bufferization.to_tensor %out0 restrict : memref<?x?x!act> to tensor<?x?x!act>
  %r1 = bufferization.to_tensor %out1 restrict : memref<?x?x!act> to tensor<?x?x!act>
  %r2 = bufferization.to_tensor %out2 restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %r0, %r1, %r2 : tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?x!act>
}

// The same into %out0 .. %out2 ([T, C] each).
func.func private @k3k_short_conv3_into(
    %x0: tensor<?x?x!act>, %w0: tensor<?x?x?xf32>, %pool0: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %slots0: memref<?xi32>, %out0: memref<?x?x!act>,
    %x1: tensor<?x?x!act>, %w1: tensor<?x?x?xf32>, %pool1: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %slots1: memref<?xi32>, %out1: memref<?x?x!act>,
    %x2: tensor<?x?x!act>, %w2: tensor<?x?x?xf32>, %pool2: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %slots2: memref<?xi32>, %out2: memref<?x?x!act>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t0 = tensor.dim %x0, %c0 : tensor<?x?x!act>
  %t1 = tensor.dim %x1, %c0 : tensor<?x?x!act>
  %t2 = tensor.dim %x2, %c0 : tensor<?x?x!act>
  %ch0 = tensor.dim %x0, %c1 : tensor<?x?x!act>
  %ch1 = tensor.dim %x1, %c1 : tensor<?x?x!act>
  %ch2 = tensor.dim %x2, %c1 : tensor<?x?x!act>
  %n0, %l0 = func.call @k3k_conv_segments(%t0, %slots0) : (index, memref<?xi32>) -> (index, index)
  %n1, %l1 = func.call @k3k_conv_segments(%t1, %slots1) : (index, memref<?xi32>) -> (index, index)
  %n2, %l2 = func.call @k3k_conv_segments(%t2, %slots2) : (index, memref<?xi32>) -> (index, index)
  %n01 = arith.maxui %n0, %n1 : index
  %nseq = arith.maxui %n01, %n2 : index
  %ch01 = arith.maxui %ch0, %ch1 : index
  %ch = arith.maxui %ch01, %ch2 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  scf.parallel (%st, %sq, %c) = (%c0, %c0, %c0) to (%c3, %nseq, %ch) step (%c1, %c1, %c1) {
    %s0 = arith.cmpi eq, %st, %c0 : index
    %s1 = arith.cmpi eq, %st, %c1 : index
    %s2 = arith.cmpi eq, %st, %c2 : index
    %a0 = arith.cmpi ult, %sq, %n0 : index
    %b0 = arith.cmpi ult, %c, %ch0 : index
    %ab0 = arith.andi %a0, %b0 : i1
    %in0 = arith.andi %ab0, %s0 : i1
    scf.if %in0 {
      func.call @k3k_short_conv_channel(%x0, %w0, %pool0, %slots0, %out0, %sq, %c, %l0)
          : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>, index, index, index) -> ()
    }
    %a1 = arith.cmpi ult, %sq, %n1 : index
    %b1 = arith.cmpi ult, %c, %ch1 : index
    %ab1 = arith.andi %a1, %b1 : i1
    %in1 = arith.andi %ab1, %s1 : i1
    scf.if %in1 {
      func.call @k3k_short_conv_channel(%x1, %w1, %pool1, %slots1, %out1, %sq, %c, %l1)
          : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>, index, index, index) -> ()
    }
    %a2 = arith.cmpi ult, %sq, %n2 : index
    %b2 = arith.cmpi ult, %c, %ch2 : index
    %ab2 = arith.andi %a2, %b2 : i1
    %in2 = arith.andi %ab2, %s2 : i1
    scf.if %in2 {
      func.call @k3k_short_conv_channel(%x2, %w2, %pool2, %slots2, %out2, %sq, %c, %l2)
          : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>, index, index, index) -> ()
    }
  }
  return
}

// Index of S[h][k][v] in a state stored value-first ([H, V, K]) or
// key-first ([H, K, V]).
func.func private @k3k_state_index(%k: index, %v: index, %vfirst: i1) -> (index, index) {
  %a = arith.select %vfirst, %v, %k : index
  %b = arith.select %vfirst, %k, %v : index
  return %a, %b : index, index
}

// §4.3: the factor 1 / sqrt(Σ x² + eps) of an L2-normalised q or k head,
// from its sum of squares.
func.func private @k3k_kda_inv(%ss: f32, %l2eps: f32) -> f32 {
  %one = arith.constant 1.0 : f32
  %e = arith.addf %ss, %l2eps : f32
  %r = math.sqrt %e : f32
  %inv = arith.divf %one, %r : f32
  return %inv : f32
}

// §4.4: the log-decay g of one key element from f, its bias δ and the
// head's A_log.
func.func private @k3k_kda_gate(%fv: f32, %db: f32, %al: f32, %softplus: i1, %lb: f32) -> f32 {
  %twenty = arith.constant 20.0 : f32
  %ea = math.exp %al : f32
  %x = arith.addf %fv, %db : f32
  %g = scf.if %softplus -> (f32) {
    // Kimi Linear: g = −exp(A)·softplus(f + δ).
    %big = arith.cmpf ogt, %x, %twenty : f32
    %ex = math.exp %x : f32
    %l1 = math.log1p %ex : f32
    %sp = arith.select %big, %x, %l1 : f32
    %m = arith.mulf %ea, %sp : f32
    %r = arith.negf %m : f32
    scf.yield %r : f32
  } else {
    // K3: g = λ·σ(exp(A)·(f + δ)).
    %m = arith.mulf %ea, %x : f32
    %s = func.call @k3k_sigmoid(%m) : (f32) -> f32
    %r = arith.mulf %lb, %s : f32
    scf.yield %r : f32
  }
  return %g : f32
}

// §4.3–4.4 per token and head, in f32: normalised scaled q, normalised k,
// v, the log-decay g and β ([T, H, D] each, β [T, H]).
func.func private @k3k_kda_prepare(%q: tensor<?x?x?x!act>, %k: tensor<?x?x?x!act>, %v: tensor<?x?x?x!act>,
                                   %f: tensor<?x?x?x!act>, %beta: tensor<?x?x!act>, %alog: tensor<?xf32>,
                                   %dt: tensor<?xf32>, %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32)
    -> (memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %q, %c0 : tensor<?x?x?x!act>
  %nh = tensor.dim %q, %c1 : tensor<?x?x?x!act>
  %dk = tensor.dim %q, %c2 : tensor<?x?x?x!act>
  %dv = tensor.dim %v, %c2 : tensor<?x?x?x!act>
  %qn = memref.alloc(%t, %nh, %dk) : memref<?x?x?xf32>
  %kn = memref.alloc(%t, %nh, %dk) : memref<?x?x?xf32>
  %vf = memref.alloc(%t, %nh, %dv) : memref<?x?x?xf32>
  %gg = memref.alloc(%t, %nh, %dk) : memref<?x?x?xf32>
  %bb = memref.alloc(%t, %nh) : memref<?x?xf32>
  // The norms per (token, head) first, then every element in parallel.
  %qinvs = memref.alloc(%t, %nh) : memref<?x?xf32>
  %kinvs = memref.alloc(%t, %nh) : memref<?x?xf32>
  scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
    %qs, %ks = scf.for %j = %c0 to %dk step %c1 iter_args(%a = %zero, %b = %zero) -> (f32, f32) {
      %qa = tensor.extract %q[%i, %h, %j] : tensor<?x?x?x!act>
      %ka = tensor.extract %k[%i, %h, %j] : tensor<?x?x?x!act>
      %qv = func.call @k3k_widen(%qa) : (!act) -> f32
      %kv = func.call @k3k_widen(%ka) : (!act) -> f32
      %q2 = arith.mulf %qv, %qv : f32
      %k2 = arith.mulf %kv, %kv : f32
      %a2 = arith.addf %a, %q2 : f32
      %b2 = arith.addf %b, %k2 : f32
      scf.yield %a2, %b2 : f32, f32
    }
    %qinv0 = func.call @k3k_kda_inv(%qs, %l2eps) : (f32, f32) -> f32
    %qinv = arith.mulf %qinv0, %scale : f32
    %kinv = func.call @k3k_kda_inv(%ks, %l2eps) : (f32, f32) -> f32
    memref.store %qinv, %qinvs[%i, %h] : memref<?x?xf32>
    memref.store %kinv, %kinvs[%i, %h] : memref<?x?xf32>
    %ba = tensor.extract %beta[%i, %h] : tensor<?x?x!act>
    %bv = func.call @k3k_widen(%ba) : (!act) -> f32
    %bs = func.call @k3k_sigmoid(%bv) : (f32) -> f32
    memref.store %bs, %bb[%i, %h] : memref<?x?xf32>
  }
  // One loop over every element of q, k and v (one launch): j < dk the
  // normalised q and k and g, j < dv v in f32.
  %dkv = arith.maxui %dk, %dv : index
  scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %dkv) step (%c1, %c1, %c1) {
    %ink = arith.cmpi ult, %j, %dk : index
    scf.if %ink {
      %qinv = memref.load %qinvs[%i, %h] : memref<?x?xf32>
      %kinv = memref.load %kinvs[%i, %h] : memref<?x?xf32>
      %al = tensor.extract %alog[%h] : tensor<?xf32>
      %qa = tensor.extract %q[%i, %h, %j] : tensor<?x?x?x!act>
      %ka = tensor.extract %k[%i, %h, %j] : tensor<?x?x?x!act>
      %fa = tensor.extract %f[%i, %h, %j] : tensor<?x?x?x!act>
      %qv = func.call @k3k_widen(%qa) : (!act) -> f32
      %kv = func.call @k3k_widen(%ka) : (!act) -> f32
      %fv = func.call @k3k_widen(%fa) : (!act) -> f32
      %qq = arith.mulf %qv, %qinv : f32
      %kk = arith.mulf %kv, %kinv : f32
      memref.store %qq, %qn[%i, %h, %j] : memref<?x?x?xf32>
      memref.store %kk, %kn[%i, %h, %j] : memref<?x?x?xf32>
      %hd = arith.muli %h, %dk : index
      %di = arith.addi %hd, %j : index
      %db = tensor.extract %dt[%di] : tensor<?xf32>
      %g = func.call @k3k_kda_gate(%fv, %db, %al, %softplus, %lb) : (f32, f32, f32, i1, f32) -> f32
      memref.store %g, %gg[%i, %h, %j] : memref<?x?x?xf32>
    }
    %inv = arith.cmpi ult, %j, %dv : index
    scf.if %inv {
      %va = tensor.extract %v[%i, %h, %j] : tensor<?x?x?x!act>
      %vv = func.call @k3k_widen(%va) : (!act) -> f32
      memref.store %vv, %vf[%i, %h, %j] : memref<?x?x?xf32>
    }
  }
  return %qn, %kn, %vf, %gg, %bb : memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?xf32>
}

// o [T, H, V] rounded to the activation type into %out.
func.func private @k3k_kda_out(%o: memref<?x?x?xf32>, %out: memref<?x?x?x!act>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = memref.dim %o, %c0 : memref<?x?x?xf32>
  %nh = memref.dim %o, %c1 : memref<?x?x?xf32>
  %dv = memref.dim %o, %c2 : memref<?x?x?xf32>
  scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %dv) step (%c1, %c1, %c1) {
    %x = memref.load %o[%i, %h, %j] : memref<?x?x?xf32>
    %xa = func.call @k3k_narrow(%x) : (f32) -> !act
    memref.store %xa, %out[%i, %h, %j] : memref<?x?x?x!act>
  }
  return
}

// §4.3–4.5 for tokens that each have their own state (a decode step or
// batch; the arguments as @k3k_kda's), o rounded into %out [T, H, V]:
// @k3k_kda_prepare, @k3k_kda_recurrent, @k3k_kda_out. `k3.kda_recurrent`:
// on a GPU, k3-gpu-kda-recurrent gives it one kernel that makes q, k, g
// and β of a head in the warps that update its state, through the
// functions the attribute names.
func.func private @k3k_kda_step(%q: tensor<?x?x?x!act>, %k: tensor<?x?x?x!act>, %v: tensor<?x?x?x!act>,
                                %f: tensor<?x?x?x!act>, %beta: tensor<?x?x!act>, %alog: tensor<?xf32>,
                                %dt: tensor<?xf32>, %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>,
                                %slots: memref<?xi32>, %out: memref<?x?x?x!act>,
                                %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1)
    attributes {k3.kda_recurrent = {widen = @k3k_widen, narrow = @k3k_narrow, inv = @k3k_kda_inv,
                                    gate = @k3k_kda_gate, sigmoid = @k3k_sigmoid}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %q, %c0 : tensor<?x?x?x!act>
  %nh = tensor.dim %q, %c1 : tensor<?x?x?x!act>
  %dv = tensor.dim %v, %c2 : tensor<?x?x?x!act>
  %qn, %kn, %vf, %gg, %bb = func.call @k3k_kda_prepare(%q, %k, %v, %f, %beta, %alog, %dt, %softplus, %lb, %scale, %l2eps)
      : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x!act>,
         tensor<?xf32>, tensor<?xf32>, i1, f32, f32, f32)
      -> (memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?xf32>)
  %o = memref.alloc(%t, %nh, %dv) : memref<?x?x?xf32>
  func.call @k3k_kda_recurrent(%qn, %kn, %vf, %gg, %bb, %pool, %slots, %o, %vfirst)
      : (memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?xf32>,
         memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x?xf32>, i1) -> ()
  func.call @k3k_kda_out(%o, %out) : (memref<?x?x?xf32>, memref<?x?x?x!act>) -> ()
  return
}

// k3.kda (§4.3–4.6). q, k, v, f: [T, H, D]; beta: [T, H]; a_log: [>= H];
// dt: [H*D]; pool: states [S, H, V, K] (vfirst) or [S, H, K, V]; slots: the
// states of the call (docs/ABI.md): one entry (every token of one sequence,
// state pool[slots[0]]) or T entries (a decode batch: token i alone in its
// sequence, state pool[slots[i]]). Returns o [T, H, V].
func.func private @k3k_kda(%q: tensor<?x?x?x!act>, %k: tensor<?x?x?x!act>, %v: tensor<?x?x?x!act>,
                           %f: tensor<?x?x?x!act>, %beta: tensor<?x?x!act>, %alog: tensor<?xf32>,
                           %dt: tensor<?xf32>, %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
                           %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %chunk: index,
                           %vfirst: i1) -> tensor<?x?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %q, %c0 : tensor<?x?x?x!act>
  %nh = tensor.dim %q, %c1 : tensor<?x?x?x!act>
  %dv = tensor.dim %v, %c2 : tensor<?x?x?x!act>
  %out = memref.alloc(%t, %nh, %dv) : memref<?x?x?x!act>
  // The recurrence when every token has its own state (a decode batch, or
  // one token); the chunked form over a segment of one sequence.
  %nslots = memref.dim %slots, %c0 : memref<?xi32>
  %pertoken = arith.cmpi ugt, %nslots, %c1 : index
  %decode = arith.cmpi eq, %t, %c1 : index
  %own = arith.ori %pertoken, %decode : i1
  scf.if %own {
    func.call @k3k_kda_step(%q, %k, %v, %f, %beta, %alog, %dt, %pool, %slots, %out, %softplus, %lb, %scale, %l2eps, %vfirst)
        : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x!act>,
           tensor<?xf32>, tensor<?xf32>, memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?xi32>,
           memref<?x?x?x!act>, i1, f32, f32, f32, i1) -> ()
  } else {
    %qn, %kn, %vf, %gg, %bb = func.call @k3k_kda_prepare(%q, %k, %v, %f, %beta, %alog, %dt, %softplus, %lb, %scale, %l2eps)
        : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x!act>,
           tensor<?xf32>, tensor<?xf32>, i1, f32, f32, f32)
        -> (memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?xf32>)
    %o = memref.alloc(%t, %nh, %dv) : memref<?x?x?xf32>
    func.call @k3k_kda_chunked(%qn, %kn, %vf, %gg, %bb, %pool, %slots, %o, %chunk, %vfirst)
        : (memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?x?xf32>, memref<?x?xf32>,
           memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x?xf32>, index, i1) -> ()
    func.call @k3k_kda_out(%o, %out) : (memref<?x?x?xf32>, memref<?x?x?x!act>) -> ()
  }
  %res = bufferization.to_tensor %out restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  return %res : tensor<?x?x?x!act>
}

// The three convolutions of @k3k_kda_layer as [T, H, D] tensors (q and k
// of D = %dk, v of %dv): into [T, H, D] buffers through [T, H·D] views
// (MLIR 22's expand-strided-metadata crashes on the other way round, a
// memref.expand_shape of [T, H·D] with H and D both dynamic).
func.func private @k3k_kda_convolve(
    %xq: tensor<?x?x!act>, %wq: tensor<?x?x?xf32>, %pq: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sq: memref<?xi32>,
    %xk: tensor<?x?x!act>, %wk: tensor<?x?x?xf32>, %pk: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sk: memref<?xi32>,
    %xv: tensor<?x?x!act>, %wv: tensor<?x?x?xf32>, %pv: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sv: memref<?xi32>,
    %nh: index, %dk: index, %dv: index) -> (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %xq, %c0 : tensor<?x?x!act>
  %q = memref.alloc(%t, %nh, %dk) : memref<?x?x?x!act>
  %k = memref.alloc(%t, %nh, %dk) : memref<?x?x?x!act>
  %v = memref.alloc(%t, %nh, %dv) : memref<?x?x?x!act>
  %q2 = memref.collapse_shape %q [[0], [1, 2]] : memref<?x?x?x!act> into memref<?x?x!act>
  %k2 = memref.collapse_shape %k [[0], [1, 2]] : memref<?x?x?x!act> into memref<?x?x!act>
  %v2 = memref.collapse_shape %v [[0], [1, 2]] : memref<?x?x?x!act> into memref<?x?x!act>
  func.call @k3k_short_conv3_into(%xq, %wq, %pq, %sq, %q2, %xk, %wk, %pk, %sk, %k2, %xv, %wv, %pv, %sv, %v2)
      : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x?x!act>) -> ()
  %qt = bufferization.to_tensor %q restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  %kt = bufferization.to_tensor %k restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  %vt = bufferization.to_tensor %v restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  return %qt, %kt, %vt : tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>
}

// A KDA layer's token mixing from its three projections on (K3_SPEC
// §4.2–4.7): the short convolutions of q, k and v, k3.kda, then the gated
// RMSNorm of o. k3-fuse-kda-layer makes one call of this of the calls of
// @k3k_short_conv (three), @k3k_kda and @k3k_gated_rms_norm that the
// attribute names, when the convolutions feed only the KDA and the KDA only
// the norm: the arguments are each convolution's (x [T, C], w, tail pool,
// slots), the KDA's after q, k and v, then the norm's after o. Tokens that
// each have their own state (a decode step or batch) take
// @k3k_kda_decode, a chunk of one sequence the calls as they were.
func.func private @k3k_kda_layer(
    %xq: tensor<?x?x!act>, %wq: tensor<?x?x?xf32>, %pq: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sq: memref<?xi32>,
    %xk: tensor<?x?x!act>, %wk: tensor<?x?x?xf32>, %pk: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sk: memref<?xi32>,
    %xv: tensor<?x?x!act>, %wv: tensor<?x?x?xf32>, %pv: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sv: memref<?xi32>,
    %f: tensor<?x?x?x!act>, %beta: tensor<?x?x!act>, %alog: tensor<?xf32>, %dt: tensor<?xf32>,
    %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
    %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %chunk: index, %vfirst: i1,
    %z: tensor<?x?x?x!act>, %g: tensor<?xf32>, %eps: f32) -> tensor<?x?x?x!act>
    attributes {k3.kda_layer = {conv = @k3k_short_conv, kda = @k3k_kda, norm = @k3k_gated_rms_norm}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %f, %c0 : tensor<?x?x?x!act>
  %nh = tensor.dim %f, %c1 : tensor<?x?x?x!act>
  %dk = tensor.dim %f, %c2 : tensor<?x?x?x!act>
  %dv = tensor.dim %z, %c2 : tensor<?x?x?x!act>
  %out = memref.alloc(%t, %nh, %dv) : memref<?x?x?x!act>
  // As @k3k_kda chooses.
  %nslots = memref.dim %slots, %c0 : memref<?xi32>
  %pertoken = arith.cmpi ugt, %nslots, %c1 : index
  %decode = arith.cmpi eq, %t, %c1 : index
  %own = arith.ori %pertoken, %decode : i1
  scf.if %own {
    func.call @k3k_kda_decode(%xq, %wq, %pq, %sq, %xk, %wk, %pk, %sk, %xv, %wv, %pv, %sv,
                              %f, %beta, %alog, %dt, %pool, %slots, %z, %g, %eps, %out,
                              %softplus, %lb, %scale, %l2eps, %vfirst)
        : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>,
           tensor<?x?x?x!act>, tensor<?x?x!act>, tensor<?xf32>, tensor<?xf32>, memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?xi32>,
           tensor<?x?x?x!act>, tensor<?xf32>, f32, memref<?x?x?x!act>, i1, f32, f32, f32, i1) -> ()
  } else {
    %q, %k, %v = func.call @k3k_kda_convolve(%xq, %wq, %pq, %sq, %xk, %wk, %pk, %sk, %xv, %wv, %pv, %sv, %nh, %dk, %dv)
        : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, index, index, index) -> (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>)
    %o = func.call @k3k_kda(%q, %k, %v, %f, %beta, %alog, %dt, %pool, %slots, %softplus, %lb, %scale, %l2eps, %chunk, %vfirst)
        : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x!act>, tensor<?xf32>, tensor<?xf32>, memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?xi32>, i1, f32, f32, f32, index, i1) -> tensor<?x?x?x!act>
    func.call @k3k_gated_rms_norm_rows(%o, %z, %g, %eps, %out) : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?xf32>, f32, memref<?x?x?x!act>) -> ()
  }
  %res = bufferization.to_tensor %out restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  return %res : tensor<?x?x?x!act>
}

// The decode form of @k3k_kda_layer (every token its own state and
// convolution tails) into %out: the three convolutions, @k3k_kda_step,
// the gated norm. `k3.kda_decode`: on a GPU, k3-gpu-kda-decode gives it one
// kernel, a block per (token, head), through the functions the attribute
// names.
func.func private @k3k_kda_decode(
    %xq: tensor<?x?x!act>, %wq: tensor<?x?x?xf32>, %pq: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sq: memref<?xi32>,
    %xk: tensor<?x?x!act>, %wk: tensor<?x?x?xf32>, %pk: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sk: memref<?xi32>,
    %xv: tensor<?x?x!act>, %wv: tensor<?x?x?xf32>, %pv: memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, %sv: memref<?xi32>,
    %f: tensor<?x?x?x!act>, %beta: tensor<?x?x!act>, %alog: tensor<?xf32>, %dt: tensor<?xf32>,
    %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
    %z: tensor<?x?x?x!act>, %g: tensor<?xf32>, %eps: f32, %out: memref<?x?x?x!act>,
    %softplus: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1)
    attributes {k3.kda_decode = {widen = @k3k_widen, narrow = @k3k_narrow, inv = @k3k_kda_inv,
                                  gate = @k3k_kda_gate, sigmoid = @k3k_sigmoid}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %f, %c0 : tensor<?x?x?x!act>
  %nh = tensor.dim %f, %c1 : tensor<?x?x?x!act>
  %dk = tensor.dim %f, %c2 : tensor<?x?x?x!act>
  %dv = tensor.dim %z, %c2 : tensor<?x?x?x!act>
  %q, %k, %v = func.call @k3k_kda_convolve(%xq, %wq, %pq, %sq, %xk, %wk, %pk, %sk, %xv, %wv, %pv, %sv, %nh, %dk, %dv)
      : (tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, tensor<?x?x!act>, tensor<?x?x?xf32>, memref<?x?x?x!act, strided<[?, ?, ?], offset: ?>>, memref<?xi32>, index, index, index) -> (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>)
  %o = memref.alloc(%t, %nh, %dv) : memref<?x?x?x!act>
  func.call @k3k_kda_step(%q, %k, %v, %f, %beta, %alog, %dt, %pool, %slots, %o, %softplus, %lb, %scale, %l2eps, %vfirst)
      : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x!act>, tensor<?xf32>, tensor<?xf32>, memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?xi32>,
         memref<?x?x?x!act>, i1, f32, f32, f32, i1) -> ()
  %ot = bufferization.to_tensor %o restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  func.call @k3k_gated_rms_norm_rows(%ot, %z, %g, %eps, %out) : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?xf32>, f32, memref<?x?x?x!act>) -> ()
  return
}

// §4.5, tokens that each have their own state (pool[slots[i]]):
// S ← (I − β k kᵀ) Diag(α) S + β k vᵀ, o = Sᵀ q. Column v of S only depends
// on column v. In three parallel stages over the states seen as Sᵀ
// [S, H, V, K] (the value-first layout itself, or a transposed view of a
// key-first pool): u_v = β (v_v − k·(αS)[:, v]) per (token, head, v); the
// update of every element; o_v = q·S[:, v] per (token, head, v). Each sum
// runs over k in order, as one pass per (head, v) would take it. (On a
// GPU, @k3k_kda_step's kernel reads and writes each state row once.)
func.func private @k3k_kda_recurrent(%qn: memref<?x?x?xf32>, %kn: memref<?x?x?xf32>, %vf: memref<?x?x?xf32>,
                                     %gg: memref<?x?x?xf32>, %bb: memref<?x?xf32>, %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>,
                                     %slots: memref<?xi32>, %o: memref<?x?x?xf32>, %vfirst: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %t = memref.dim %qn, %c0 : memref<?x?x?xf32>
  %nh = memref.dim %qn, %c1 : memref<?x?x?xf32>
  %dk = memref.dim %qn, %c2 : memref<?x?x?xf32>
  %dv = memref.dim %vf, %c2 : memref<?x?x?xf32>
  %st = scf.if %vfirst -> (memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>) {
    scf.yield %pool : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
  } else {
    %tr = memref.transpose %pool (s, h, k, v) -> (s, h, v, k) : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>> to memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
    scf.yield %tr : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
  }
  %bu = memref.alloc(%t, %nh, %dv) : memref<?x?x?xf32>
  scf.parallel (%i, %h, %c) = (%c0, %c0, %c0) to (%t, %nh, %dv) step (%c1, %c1, %c1) {
    %s32 = memref.load %slots[%i] : memref<?xi32>
    %sl = arith.index_cast %s32 : i32 to index
    %b = memref.load %bb[%i, %h] : memref<?x?xf32>
    %pred = scf.for %j = %c0 to %dk step %c1 iter_args(%a = %zero) -> (f32) {
      %s = memref.load %st[%sl, %h, %c, %j] : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
      %g = memref.load %gg[%i, %h, %j] : memref<?x?x?xf32>
      %al = math.exp %g : f32
      %kj = memref.load %kn[%i, %h, %j] : memref<?x?x?xf32>
      %as = arith.mulf %al, %s : f32
      %p = arith.mulf %kj, %as : f32
      %r = arith.addf %a, %p : f32
      scf.yield %r : f32
    }
    %vv = memref.load %vf[%i, %h, %c] : memref<?x?x?xf32>
    %u = arith.subf %vv, %pred : f32
    %bv = arith.mulf %b, %u : f32
    memref.store %bv, %bu[%i, %h, %c] : memref<?x?x?xf32>
  }
  scf.parallel (%i, %h, %c, %j) = (%c0, %c0, %c0, %c0) to (%t, %nh, %dv, %dk) step (%c1, %c1, %c1, %c1) {
    %s32 = memref.load %slots[%i] : memref<?xi32>
    %sl = arith.index_cast %s32 : i32 to index
    %s = memref.load %st[%sl, %h, %c, %j] : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
    %g = memref.load %gg[%i, %h, %j] : memref<?x?x?xf32>
    %al = math.exp %g : f32
    %kj = memref.load %kn[%i, %h, %j] : memref<?x?x?xf32>
    %bv = memref.load %bu[%i, %h, %c] : memref<?x?x?xf32>
    %as = arith.mulf %al, %s : f32
    %kb = arith.mulf %kj, %bv : f32
    %ns = arith.addf %as, %kb : f32
    memref.store %ns, %st[%sl, %h, %c, %j] : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
  }
  scf.parallel (%i, %h, %c) = (%c0, %c0, %c0) to (%t, %nh, %dv) step (%c1, %c1, %c1) {
    %s32 = memref.load %slots[%i] : memref<?xi32>
    %sl = arith.index_cast %s32 : i32 to index
    %out = scf.for %j = %c0 to %dk step %c1 iter_args(%a = %zero) -> (f32) {
      %ns = memref.load %st[%sl, %h, %c, %j] : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
      %qj = memref.load %qn[%i, %h, %j] : memref<?x?x?xf32>
      %p = arith.mulf %qj, %ns : f32
      %r = arith.addf %a, %p : f32
      scf.yield %r : f32
    }
    memref.store %out, %o[%i, %h, %c] : memref<?x?x?xf32>
  }
  return
}

// §4.6, chunks of up to `chunk` tokens, per head, from the entering state S0
// (pool[slots[0]]; the slot is read by the kernels: slots are device memory):
//   Γ = cumulative g; L[r,s] = β_r Σ_j k_r k_s e^{Γ_r−Γ_s} (s < r);
//   A[r,s] = Σ_j q_r k_s e^{Γ_r−Γ_s} (s ≤ r); X = (I + L)⁻¹ Diag(β);
//   W = X (e^Γ ⊙ K); U = X V; V' = U − W S0; O = (Q ⊙ e^Γ) S0 + A V';
//   S = Diag(e^{Γ_n}) S0 + Σ_s (e^{Γ_n−Γ_s} ⊙ k_s) V'[s]ᵀ.
// Only exponentials of non-positive numbers are formed (g ≤ 0).
func.func private @k3k_kda_chunked(%qn: memref<?x?x?xf32>, %kn: memref<?x?x?xf32>, %vf: memref<?x?x?xf32>,
                                   %gg: memref<?x?x?xf32>, %bb: memref<?x?xf32>, %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>,
                                   %slots: memref<?xi32>,
                                   %o: memref<?x?x?xf32>, %chunk: index, %vfirst: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %t = memref.dim %qn, %c0 : memref<?x?x?xf32>
  %nh = memref.dim %qn, %c1 : memref<?x?x?xf32>
  %dk = memref.dim %qn, %c2 : memref<?x?x?xf32>
  %dv = memref.dim %vf, %c2 : memref<?x?x?xf32>
  %c3 = arith.constant 3 : index
  %pd1 = memref.dim %pool, %c2 : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
  %pd2 = memref.dim %pool, %c3 : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
  %gam = memref.alloc(%nh, %chunk, %dk) : memref<?x?x?xf32>
  %lm = memref.alloc(%nh, %chunk, %chunk) : memref<?x?x?xf32>
  %am = memref.alloc(%nh, %chunk, %chunk) : memref<?x?x?xf32>
  %xm = memref.alloc(%nh, %chunk, %chunk) : memref<?x?x?xf32>
  %wm = memref.alloc(%nh, %chunk, %dk) : memref<?x?x?xf32>
  %um = memref.alloc(%nh, %chunk, %dv) : memref<?x?x?xf32>
  // Per chunk, one parallel loop per stage (one GPU kernel each), over the
  // heads and the stage's independent dimensions; every element is summed in
  // the same order as a per-head loop would.
  scf.for %start = %c0 to %t step %chunk {
    %rest = arith.subi %t, %start : index
    %n = arith.minui %rest, %chunk : index
    // Γ: cumulative log-decay within the chunk.
    scf.parallel (%h, %j) = (%c0, %c0) to (%nh, %dk) step (%c1, %c1) {
      %acc = scf.for %r = %c0 to %n step %c1 iter_args(%a = %zero) -> (f32) {
        %tr = arith.addi %start, %r : index
        %g = memref.load %gg[%tr, %h, %j] : memref<?x?x?xf32>
        %s = arith.addf %a, %g : f32
        memref.store %s, %gam[%h, %r, %j] : memref<?x?x?xf32>
        scf.yield %s : f32
      }
    }
    // L (strictly lower, scaled by β_r) and A (lower with diagonal), s ≤ r.
    scf.parallel (%h, %r, %s) = (%c0, %c0, %c0) to (%nh, %n, %n) step (%c1, %c1, %c1) {
      %lower = arith.cmpi ule, %s, %r : index
      scf.if %lower {
        %tr = arith.addi %start, %r : index
        %ts = arith.addi %start, %s : index
        %br = memref.load %bb[%tr, %h] : memref<?x?xf32>
        %lsum, %asum = scf.for %j = %c0 to %dk step %c1 iter_args(%a = %zero, %b = %zero) -> (f32, f32) {
          %gr = memref.load %gam[%h, %r, %j] : memref<?x?x?xf32>
          %gs = memref.load %gam[%h, %s, %j] : memref<?x?x?xf32>
          %dg = arith.subf %gr, %gs : f32
          %e = math.exp %dg : f32
          %kr = memref.load %kn[%tr, %h, %j] : memref<?x?x?xf32>
          %ks = memref.load %kn[%ts, %h, %j] : memref<?x?x?xf32>
          %qr = memref.load %qn[%tr, %h, %j] : memref<?x?x?xf32>
          %ke = arith.mulf %ks, %e : f32
          %lk = arith.mulf %kr, %ke : f32
          %aq = arith.mulf %qr, %ke : f32
          %a2 = arith.addf %a, %lk : f32
          %b2 = arith.addf %b, %aq : f32
          scf.yield %a2, %b2 : f32, f32
        }
        %lv = arith.mulf %br, %lsum : f32
        memref.store %lv, %lm[%h, %r, %s] : memref<?x?x?xf32>
        memref.store %asum, %am[%h, %r, %s] : memref<?x?x?xf32>
      }
    }
    // X = (I + L)⁻¹ Diag(β) by forward substitution, each column c down its
    // rows: X[r, c] = β_r [r = c] − Σ_{c≤s<r} L[r, s] X[s, c] (X lower
    // triangular).
    scf.parallel (%h, %c) = (%c0, %c0) to (%nh, %n) step (%c1, %c1) {
      scf.for %r = %c to %n step %c1 {
        %tr = arith.addi %start, %r : index
        %br = memref.load %bb[%tr, %h] : memref<?x?xf32>
        %diag = arith.cmpi eq, %r, %c : index
        %init = arith.select %diag, %br, %zero : f32
        %x = scf.for %s = %c to %r step %c1 iter_args(%a = %init) -> (f32) {
          %l = memref.load %lm[%h, %r, %s] : memref<?x?x?xf32>
          %xs = memref.load %xm[%h, %s, %c] : memref<?x?x?xf32>
          %p = arith.mulf %l, %xs : f32
          %d = arith.subf %a, %p : f32
          scf.yield %d : f32
        }
        memref.store %x, %xm[%h, %r, %c] : memref<?x?x?xf32>
      }
    }
    // W = X (e^Γ ⊙ K).
    scf.parallel (%h, %r, %j) = (%c0, %c0, %c0) to (%nh, %n, %dk) step (%c1, %c1, %c1) {
      %r1 = arith.addi %r, %c1 : index
      %w = scf.for %s = %c0 to %r1 step %c1 iter_args(%a = %zero) -> (f32) {
        %ts = arith.addi %start, %s : index
        %x = memref.load %xm[%h, %r, %s] : memref<?x?x?xf32>
        %gs = memref.load %gam[%h, %s, %j] : memref<?x?x?xf32>
        %e = math.exp %gs : f32
        %ks = memref.load %kn[%ts, %h, %j] : memref<?x?x?xf32>
        %ke = arith.mulf %e, %ks : f32
        %p = arith.mulf %x, %ke : f32
        %d = arith.addf %a, %p : f32
        scf.yield %d : f32
      }
      memref.store %w, %wm[%h, %r, %j] : memref<?x?x?xf32>
    }
    // U = X V, then V' = U − W S0 (stored over U).
    scf.parallel (%h, %r, %c) = (%c0, %c0, %c0) to (%nh, %n, %dv) step (%c1, %c1, %c1) {
      %sl132 = memref.load %slots[%c0] : memref<?xi32>
      %sl1 = arith.index_cast %sl132 : i32 to index
      %st1 = memref.subview %pool[%sl1, 0, 0, 0] [1, %nh, %pd1, %pd2] [1, 1, 1, 1] : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>> to memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>
      %r1 = arith.addi %r, %c1 : index
      %u = scf.for %s = %c0 to %r1 step %c1 iter_args(%a = %zero) -> (f32) {
        %ts = arith.addi %start, %s : index
        %x = memref.load %xm[%h, %r, %s] : memref<?x?x?xf32>
        %vs = memref.load %vf[%ts, %h, %c] : memref<?x?x?xf32>
        %p = arith.mulf %x, %vs : f32
        %d = arith.addf %a, %p : f32
        scf.yield %d : f32
      }
      %ws = scf.for %j = %c0 to %dk step %c1 iter_args(%a = %zero) -> (f32) {
        %x, %y = func.call @k3k_state_index(%j, %c, %vfirst) : (index, index, i1) -> (index, index)
        %s0 = memref.load %st1[%h, %x, %y] : memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>
        %w = memref.load %wm[%h, %r, %j] : memref<?x?x?xf32>
        %p = arith.mulf %w, %s0 : f32
        %d = arith.addf %a, %p : f32
        scf.yield %d : f32
      }
      %vn = arith.subf %u, %ws : f32
      memref.store %vn, %um[%h, %r, %c] : memref<?x?x?xf32>
    }
    // O = (Q ⊙ e^Γ) S0 + A V'.
    scf.parallel (%h, %r, %c) = (%c0, %c0, %c0) to (%nh, %n, %dv) step (%c1, %c1, %c1) {
      %sl232 = memref.load %slots[%c0] : memref<?xi32>
      %sl2 = arith.index_cast %sl232 : i32 to index
      %st2 = memref.subview %pool[%sl2, 0, 0, 0] [1, %nh, %pd1, %pd2] [1, 1, 1, 1] : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>> to memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>
      %tr = arith.addi %start, %r : index
      %r1 = arith.addi %r, %c1 : index
      %inter = scf.for %j = %c0 to %dk step %c1 iter_args(%a = %zero) -> (f32) {
        %x, %y = func.call @k3k_state_index(%j, %c, %vfirst) : (index, index, i1) -> (index, index)
        %s0 = memref.load %st2[%h, %x, %y] : memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>
        %qr = memref.load %qn[%tr, %h, %j] : memref<?x?x?xf32>
        %gr = memref.load %gam[%h, %r, %j] : memref<?x?x?xf32>
        %e = math.exp %gr : f32
        %qe = arith.mulf %qr, %e : f32
        %p = arith.mulf %qe, %s0 : f32
        %d = arith.addf %a, %p : f32
        scf.yield %d : f32
      }
      %tot = scf.for %s = %c0 to %r1 step %c1 iter_args(%a = %inter) -> (f32) {
        %av = memref.load %am[%h, %r, %s] : memref<?x?x?xf32>
        %vn = memref.load %um[%h, %s, %c] : memref<?x?x?xf32>
        %p = arith.mulf %av, %vn : f32
        %d = arith.addf %a, %p : f32
        scf.yield %d : f32
      }
      memref.store %tot, %o[%tr, %h, %c] : memref<?x?x?xf32>
    }
    // S = Diag(e^{Γ_n}) S0 + Σ_s (e^{Γ_n − Γ_s} ⊙ k_s) V'[s]ᵀ, in place
    // (each element reads only itself of S0).
    %last = arith.subi %n, %c1 : index
    scf.parallel (%h, %j, %c) = (%c0, %c0, %c0) to (%nh, %dk, %dv) step (%c1, %c1, %c1) {
      %sl332 = memref.load %slots[%c0] : memref<?xi32>
      %sl3 = arith.index_cast %sl332 : i32 to index
      %st3 = memref.subview %pool[%sl3, 0, 0, 0] [1, %nh, %pd1, %pd2] [1, 1, 1, 1] : memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>> to memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>
      %gn = memref.load %gam[%h, %last, %j] : memref<?x?x?xf32>
      %en = math.exp %gn : f32
      %x, %y = func.call @k3k_state_index(%j, %c, %vfirst) : (index, index, i1) -> (index, index)
      %s0 = memref.load %st3[%h, %x, %y] : memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>
      %init = arith.mulf %en, %s0 : f32
      %sn = scf.for %s = %c0 to %n step %c1 iter_args(%a = %init) -> (f32) {
        %ts = arith.addi %start, %s : index
        %gs = memref.load %gam[%h, %s, %j] : memref<?x?x?xf32>
        %dg = arith.subf %gn, %gs : f32
        %e = math.exp %dg : f32
        %ks = memref.load %kn[%ts, %h, %j] : memref<?x?x?xf32>
        %vn = memref.load %um[%h, %s, %c] : memref<?x?x?xf32>
        %ke = arith.mulf %e, %ks : f32
        %p = arith.mulf %ke, %vn : f32
        %d = arith.addf %a, %p : f32
        scf.yield %d : f32
      }
      memref.store %sn, %st3[%h, %x, %y] : memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>
    }
  }
  return
}
