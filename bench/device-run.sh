#!/bin/bash
# One GPU session's measurements for BENCHMARKS.md, in one command on the GPU
# machine (the device tool gives ten minutes per command and thirty per
# session; a fresh machine costs about a minute to start, so everything runs
# in one call). Build first, here (BENCHMARKS.md, "How to run"), and carry
# build/gpu-bench (or build/gpu-pack, the same packed: tar -C build -cf -
# gpu-bench | xz -1 -T2 > build/gpu-pack/gpu-bench.tar.xz), bench/wheels
# and, for the end-to-end tests, build/e2e-pack (build/gpu-e2e packed: tar
# -C build -cf - gpu-e2e | xz -1 -T2).
#
#   bench/device-run.sh OUT [PARTS]
#
# PARTS (default "e2e ab peers f32 trace64"), each with its own time limit:
#   e2e     the GPU end-to-end tests (test/e2e/gpu/run-e2e.py)        ~40 s
#   ab      k3c decode of build/gpu-bench/k3-group-base.so (if present)
#           and k3-group.so, alternately, twice each (ABROUNDS); AB="base-graph
#           new-graph" (the default) names the variants: LIB-graph or
#           LIB-nograph (K3RT_CUDA_GRAPHS=0) or LIB-ordinary (graphs
#           without programmatic edges, K3RT_CUDA_DEPENDENT_LAUNCH=0); each
#           runs k3-group-LIB.so (new: k3-group.so)              ~40 s each
#   peers   decode B = 1, 8, 64 and prefill 4096 (8 calls of 512) with
#           every PyTorch peer in one process, per-kernel profile and
#           the launch trace of a batch-1 step                        ~330 s
#   f32     agreement of the f32 library with the f32 peer            ~40 s
#   lean    a run of record for a session short of device time: k3c and
#           the PyTorch peers (eager, torch.compile) at batch 1 with the
#           per-kernel profile and the trace of 5 batch-1 steps, then k3c
#           alone at batches 8 and 64 (no prefill, no fla peer)     ~150 s
#   trace64 the launch trace of a batch-64 step (TRACEB=B: of batch B,
#           in the same files)                                        ~30 s
#   prof    per-kernel profile of batch-1 and batch-8 steps (PROFB="1,8"),
#           no peers, of each variant in PROF="new ..." (LIB, LIB-ordinary
#           as in ab, or LIB-chain: each graph one chain of kernels,
#           K3RT_CUDA_GRAPH_DAG=0; LIB@RT: with the runtime
#           build/gpu-bench/libk3rt_cuda-RT.so), each in a file of its own;
#           PROFP=T adds a prefill of T tokens, PROFT=N the trace of N
#           batch-1 steps
#           (chunks of 512)                                         ~40 s each
#   same    whether the A/B pair computes the same bits: for each LIB of
#           k3-group and k3-wide with build/gpu-bench/LIB-base.so and
#           LIB.so, test/e2e/compare.py self (prefill of 40 tokens, 4 decode
#           steps, logits and states, --rtol 0) with the e2e pack's k3-run
#           (needs build/e2e-pack); SAME="V ..." also compares LIB-V.so
#           with LIB-base.so; SAMEB="B ..." also each pair with batches
#           of B identical sequences (compare.py --batch)     ~30 s per pair
#   ncu     Nsight Compute on kernels of a batch-NCUB (default 1) decode
#           step of each variant in NCU="new ..." (as in prof), graphs
#           off: the kernels matching the regex NCUK (default
#           k3k_experts_.*mxfp4), NCUSKIP launches skipped (default 3),
#           NCUCOUNT profiled (default 3); NCUSECTIONS, by default the
#           sections of the earlier sessions' reports (SpeedOfLight
#           MemoryWorkloadAnalysis WarpStateStats SchedulerStats Occupancy
#           LaunchStats); NCUTIMEOUT seconds in all (default 240); each
#           kernel takes about a minute at batch 64
#           (the replay saves and restores the weights)
#                                                             ~60 s each
#   stalls  as ncu, but Nsight Compute's stall reasons per issued
#           instruction (smsp__average_warps_issue_stalled_*) instead of
#           its sections                                      ~60 s each
# Results go to OUT/results.tgz (OUT: the device tool's $OUT).
set -u
dest=${1:?usage: bench/device-run.sh OUT [PARTS]}
parts=${2:-e2e ab peers f32 trace64}
# The device tool brings back only a few files: everything goes into
# OUT/results.tgz, also when a part runs out of time.
out=$(mktemp -d)
mkdir -p "$dest"
trap 'tar -C "$out" -czf "$dest/results.tgz" .' EXIT
gb=build/gpu-bench
# build/gpu-bench packed (build/gpu-pack/gpu-bench.tar.xz: the device tool
# carries 64 MiB, several libraries do not fit unpacked).
if [ -f build/gpu-pack/gpu-bench.tar.xz ]; then
  tar -C build -xJf build/gpu-pack/gpu-bench.tar.xz || exit 1
fi
bench=(python3 bench/k3_bench.py --cuda-rt "$gb/libk3rt_cuda.so"
       --config models/k3-group/config.json)
has() { [[ " $parts " == *" $1 "* ]]; }
say() { echo "== $*"; }

if has e2e && [ -f build/e2e-pack/gpu-e2e.tar.xz ]; then
  say e2e
  tar -C build -xJf build/e2e-pack/gpu-e2e.tar.xz
  LD_LIBRARY_PATH=$PWD/build/gpu-e2e/lib timeout 120 python3 test/e2e/gpu/run-e2e.py run \
    --out build/gpu-e2e --bin build/gpu-e2e/bin > "$out/e2e.txt" 2>&1
  echo "rc=$?"; tail -2 "$out/e2e.txt"
fi

# The workspace arena: 36 GB beside k3-group's 67.3 GiB of weights on an
# H200 (prefill calls of 512 tokens need it); an 80 GB H100 holds the
# weights only beside about 8 GB, enough for decode up to batch 64
# (BENCHMARKS.md, thirty-eighth session).
if [ -z "${K3RT_CUDA_WORKSPACE_MB:-}" ]; then
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  K3RT_CUDA_WORKSPACE_MB=36000
  [ -n "$total" ] && [ "$total" -lt 100000 ] && K3RT_CUDA_WORKSPACE_MB=8000
fi
export K3RT_CUDA_WORKSPACE_MB
if has ab; then
  say "ab (median step per batch; base = k3-group-base.so; graphs off/on)"
  for round in $(seq "${ABROUNDS:-2}"); do
    for v in ${AB:-base-graph new-graph}; do
      so=$gb/k3-group-${v%-*}.so
      [[ $v == new-* ]] && so=$gb/k3-group.so
      graphs=1 dependent=1
      [[ $v == *-nograph ]] && graphs=0
      [[ $v == *-ordinary ]] && dependent=0
      [ -f "$so" ] || continue
      K3RT_CUDA_GRAPHS=$graphs K3RT_CUDA_DEPENDENT_LAUNCH=$dependent timeout 60 "${bench[@]}" --lib "$so" --batches 1,8,64 --prefill "" \
        --reps 5 --compare-prompt 0 --json "$out/ab-$v-$round.json" > "$out/ab-$v-$round.txt" 2>&1
      echo "$v $round: $(grep -o 'B=[0-9]* ctx=8192 *k3c *median *[0-9.]* ms' "$out/ab-$v-$round.txt" |
        sed 's/ ctx=8192 *k3c *median */ /' | tr '\n' ' ')"
    done
  done
fi

if has peers; then
  say peers
  if [ -d bench/wheels ]; then
    pip install --no-deps --target /tmp/fla bench/wheels/*.whl > /dev/null 2>&1
    export PYTHONPATH=/tmp/fla
    fla=--fla
  else
    fla=
  fi
  timeout 400 "${bench[@]}" --lib "$gb/k3-group.so" --batches 1,8,64 --prefill 4096 \
    --prefill-chunk 512 --reps 5 --peer $fla --profile --trace "$out/decode-trace.json" --trace-steps 5 \
    --json "$out/decode.json" > "$out/decode.txt" 2>&1
  echo "rc=$?"; grep "median\|Error\|vs torch" "$out/decode.txt"
fi

if has lean; then
  say lean
  timeout 240 "${bench[@]}" --lib "$gb/k3-group.so" --batches 1 --prefill "" --reps 5 \
    --peer --profile --trace "$out/decode-trace.json" --trace-steps 5 \
    --json "$out/decode.json" > "$out/decode.txt" 2>&1
  echo "rc=$?"; grep "median\|Error\|vs torch" "$out/decode.txt"
  timeout 120 "${bench[@]}" --lib "$gb/k3-group.so" --batches 8,64 --prefill "" --reps 5 \
    --compare-prompt 0 --profile --json "$out/decode-k3c.json" > "$out/decode-k3c.txt" 2>&1
  echo "rc=$?"; grep "median\|Error" "$out/decode-k3c.txt"
fi

if has f32; then
  say f32
  timeout 100 "${bench[@]}" --lib "$gb/k3-group-f32.so" --batches "" --prefill "" \
    --peer --peer-dtype float32 --json "$out/f32.json" > "$out/f32.txt" 2>&1
  echo "rc=$?"; grep "vs torch\|Error" "$out/f32.txt"
fi

if has prof; then
  say prof
  run=0
  for v in ${PROF:-new}; do
    rt=$gb/libk3rt_cuda.so
    [[ $v == *@* ]] && rt=$gb/libk3rt_cuda-${v#*@}.so
    lib=${v%@*}
    lib=${lib%-ordinary}
    lib=${lib%-chain}
    so=$gb/k3-group-$lib.so
    [ "$lib" = new ] && so=$gb/k3-group.so
    dependent=1 dag=1
    [[ $v == *-ordinary ]] && dependent=0
    [[ $v == *-chain ]] && dag=0
    [ -f "$so" ] || continue
    f=profile-$v-b${PROFB:-1,8}-$((++run))
    # PROFT=N: also the trace of N batch-1 steps (trace_gaps.py's medians).
    tr=()
    [ -n "${PROFT:-}" ] && tr=(--trace "$out/$f-trace.json" --trace-steps "$PROFT")
    K3RT_CUDA_DEPENDENT_LAUNCH=$dependent K3RT_CUDA_GRAPH_DAG=$dag \
      timeout 100 "${bench[@]}" --cuda-rt "$rt" --lib "$so" --batches "${PROFB:-1,8}" \
      --prefill "${PROFP:-}" --prefill-chunk 512 --reps 3 \
      --compare-prompt 0 --profile "${tr[@]}" --json "$out/$f.json" > "$out/$f.txt" 2>&1
    echo "$v rc=$?"; grep "median\|kernels:\|trace:\|Error" "$out/$f.txt"
  done
fi

if has same && [ -f build/e2e-pack/gpu-e2e.tar.xz ]; then
  say "same (A/B pair, bit for bit)"
  [ -d build/gpu-e2e ] || tar -C build -xJf build/e2e-pack/gpu-e2e.tar.xz
  for lib in k3-group k3-wide; do
    for b in "$gb/$lib.so" ${SAME:+$(printf "$gb/$lib-%s.so " $SAME)}; do
      [ -f "$gb/$lib-base.so" ] && [ -f "$b" ] || continue
      name=$(basename "$b" .so)
      LD_LIBRARY_PATH=$PWD/build/gpu-e2e/lib timeout 120 python3 test/e2e/compare.py self \
        --k3-run build/gpu-e2e/bin/k3-run --lib "$gb/$lib-base.so" --lib-b "$b" \
        --weights seed:7 --prompt "$(seq -s, 3 42)" --decode 5,6,7,8 --chunks-a 40 \
        --chunks-b 40 --rtol 0 --states > "$out/same-$name.txt" 2>&1
      echo "$name: rc=$? $(tail -1 "$out/same-$name.txt")"
      for bb in ${SAMEB:-}; do
        LD_LIBRARY_PATH=$PWD/build/gpu-e2e/lib timeout 120 python3 test/e2e/compare.py self \
          --k3-run build/gpu-e2e/bin/k3-run --lib "$gb/$lib-base.so" --lib-b "$b" \
          --weights seed:7 --prompt "$(seq -s, 3 42)" --decode 5,6,7,8 --chunks-a 40 \
          --chunks-b 40 --batch "$bb" --rtol 0 --states > "$out/same-$name-b$bb.txt" 2>&1
        echo "$name batch $bb: rc=$? $(tail -1 "$out/same-$name-b$bb.txt")"
      done
    done
  done
fi

# Nsight Compute on the NCUK kernels of a batch-NCUB step of library $1,
# graphs off, into $2; the rest are ncu's options.
ncu_run() {
  local so=$1 dest=$2
  shift 2
  K3RT_CUDA_GRAPHS=0 timeout "${NCUTIMEOUT:-240}" "$ncu" --clock-control none \
    --kernel-name "regex:${NCUK:-k3k_experts_.*mxfp4}" \
    --launch-skip "${NCUSKIP:-3}" --launch-count "${NCUCOUNT:-3}" "$@" \
    "${bench[@]}" --lib "$so" --batches "${NCUB:-1}" \
    --prefill "" --reps 1 --compare-prompt 0 > "$dest" 2>&1
}
# The library of variant $1 (new: k3-group.so).
variant_so() { [ "$1" = new ] && echo "$gb/k3-group.so" || echo "$gb/k3-group-$1.so"; }
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)

if has ncu; then
  say ncu
  for v in ${NCU:-new}; do
    so=$(variant_so "$v")
    [ -f "$so" ] || continue
    ncu_run "$so" "$out/ncu-$v.txt" $(printf -- "--section %s " \
      ${NCUSECTIONS:-SpeedOfLight MemoryWorkloadAnalysis WarpStateStats SchedulerStats Occupancy LaunchStats})
    echo "$v rc=$?"
    grep -E "^  k3k|Duration|DRAM Throughput|L1/TEX Cache Throughput|Registers Per|Achieved Occ|Eligible Warps" "$out/ncu-$v.txt"
  done
fi

if has stalls; then
  say "stalls (cycles per issued instruction, reasons above 0.3)"
  reasons="barrier branch_resolving dispatch_stall drain imc_miss lg_throttle
    long_scoreboard math_pipe_throttle membar mio_throttle misc no_instruction
    not_selected selected short_scoreboard sleeping tex_throttle wait"
  metrics=$(printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," $reasons)
  for v in ${NCU:-new}; do
    so=$(variant_so "$v")
    [ -f "$so" ] || continue
    ncu_run "$so" "$out/stalls-$v.txt" --metrics "${metrics%,}"
    echo "$v rc=$?"
    grep -E "^  k3k|stalled" "$out/stalls-$v.txt" |
      sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
      awk '$NF + 0 > 0.3 || /k3k/'
  done
fi

if has trace64; then
  say trace64
  timeout 60 "${bench[@]}" --lib "$gb/k3-group.so" --batches "${TRACEB:-64}" --prefill "" --reps 3 \
    --compare-prompt 0 --profile --trace "$out/decode-trace-b64.json" --trace-batch "${TRACEB:-64}" \
    --json "$out/profile-b64.json" > "$out/profile-b64.txt" 2>&1
  echo "rc=$?"; grep "median\|kernels:\|Error" "$out/profile-b64.txt"
fi
