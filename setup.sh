#!/usr/bin/env bash
# setup.sh — install what k3c needs (only what is missing), then build and run.
#
#   ./setup.sh          install missing packages only
#   ./setup.sh build    ... and configure + build (build/)
#   ./setup.sh run      ... and compile the K3 configs, printing layer maps and parameter counts
#   ./setup.sh test     ... and run every test (lit suite + unit tests)
#
# Idempotent and non-interactive; used by the README commands and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")"

PKGS=(cmake ninja-build ccache g++ llvm-22-dev libmlir-22-dev mlir-22-tools
      llvm-22-tools nlohmann-json3-dev libgtest-dev python3-numpy pkgconf
      python3-matplotlib
      clang-22 libclang-rt-22-dev)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

BUILD=${K3C_BUILD_DIR:-build}
JOBS=${K3C_JOBS:-2}

build() {
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
      -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir >/dev/null
  fi
  ninja -C "$BUILD" -j"$JOBS" "$@"
}

case "${1:-}" in
  "") ;;
  build) build ;;
  run)
    build k3c k3-run k3-weights
    out="$BUILD/models"
    mkdir -p "$out"
    # The published K3: its layer map and sizes, then a host library.
    "$BUILD/bin/k3c" models/kimi-k3/config.json --emit=summary
    "$BUILD/bin/k3c" models/kimi-k3/config.json -o "$out/libkimi_k3.so"
    # k3-tiny end to end: compile, make a seeded random checkpoint in the
    # real format, prefill a prompt and greedily decode 32 tokens.
    "$BUILD/bin/k3c" models/k3-tiny/config.json --emit=summary
    "$BUILD/bin/k3c" models/k3-tiny/config.json -o "$out/libk3_tiny.so"
    "$BUILD/bin/k3-weights" models/k3-tiny/config.json --seed 7 -o "$out/k3-tiny-random"
    "$BUILD/bin/k3-run" "$out/libk3_tiny.so" --weights "$out/k3-tiny-random" \
      --prompt-ids 1,17,42,99,256,311,7,64 --max-new-tokens 32
    ;;
  test)
    build
    log=$(mktemp)
    status=0
    ninja -C "$BUILD" check-k3 2>&1 | tee "$log" || status=$?
    passed=$(sed -n 's/^ *Passed *: *\([0-9]*\).*/\1/p' "$log" | tail -1)
    failed=$(sed -n 's/^ *Failed *: *\([0-9]*\).*/\1/p' "$log" | tail -1)
    rm -f "$log"
    echo "${passed:-0} passed, ${failed:-0} failed"
    exit "$status"
    ;;
  *) echo "usage: $0 [build|run|test]" >&2; exit 2 ;;
esac
