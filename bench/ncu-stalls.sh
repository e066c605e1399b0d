#!/bin/bash
# Why a kernel's warps wait: Nsight Compute's stall reasons per issued
# instruction for the kernels matching KERNELS (default the MLA decode
# scores and weighted sums) in a batch-B decode step of each library in
# LIBS, graphs off. Run on the GPU machine from the repository root with
# build/gpu-bench carried (BENCHMARKS.md, "How to run"):
#
#   LIBS="k3-group k3-group-base" B=64 bench/ncu-stalls.sh
#
# Writes OUT/stalls-LIB.txt (OUT: the device tool's $OUT, or /tmp) and
# prints the reasons above 0.3 cycles per issued instruction.
set -u
out=${OUT:-/tmp}
export K3RT_CUDA_WORKSPACE_MB=${K3RT_CUDA_WORKSPACE_MB:-36000} K3RT_CUDA_GRAPHS=0
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
reasons="barrier branch_resolving dispatch_stall drain imc_miss lg_throttle
  long_scoreboard math_pipe_throttle membar mio_throttle misc no_instruction
  not_selected selected short_scoreboard sleeping tex_throttle wait"
metrics=$(printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," \
  $reasons)
for lib in ${LIBS:-k3-group}; do
  timeout 200 "$ncu" --clock-control none \
    --kernel-name "regex:${KERNELS:-k3k_mla_(wsum|scores)_kernel}" \
    --launch-skip 0 --launch-count "${COUNT:-3}" --metrics "${metrics%,}" \
    python3 bench/k3_bench.py --cuda-rt build/gpu-bench/libk3rt_cuda.so \
    --config models/k3-group/config.json --lib "build/gpu-bench/$lib.so" \
    --batches "${B:-64}" --prefill "" --reps 1 --compare-prompt 0 \
    > "$out/stalls-$lib.txt" 2>&1
  echo "$lib rc=$?"
  grep -E "^  k3k|stalled" "$out/stalls-$lib.txt" |
    sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
    awk '$NF + 0 > 0.3 || /k3k/'
done
