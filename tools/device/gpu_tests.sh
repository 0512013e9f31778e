#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), from the repository root, with the native module
# built here and carried over. The machine's own python3 (3.12, jax + CUDA plugin) runs it.
#   tools/device/gpu_tests.sh [pytest args...]     logs under $OUT (or /tmp/jgg-gpu)
# The whole suite takes over one device call's 600 s when run serially (H100, 2026-11-24), so:
#   PART=i/n  runs the i-th of n parts of the test files (alternate files in name order);
#   JOBS=n    runs all n parts at once, each its own pytest process (the GPU tests are mostly
#             compilation on the host's cores; GPU memory is allocated on demand), logs in
#             $OUT/part<i>/, and fails if any part fails. On an H200 (2026-11-29) six parts
#             took 120-255+ s each, the two holding test_cuda / test_mxfp8_fused and
#             test_mxfp8_cuda / test_mxfp8_grouped the longest.
set -uo pipefail
out="${OUT:-/tmp/jgg-gpu}"
mkdir -p "$out"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

if [[ -n "${JOBS:-}" ]]; then
  export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the parts share the GPU
  pids=()
  for ((i = 1; i <= JOBS; i++)); do
    PART="$i/$JOBS" JOBS= OUT="$out/part$i" bash "$0" "$@" > "$out/part$i.txt" 2>&1 &
    pids+=("$!")
  done
  status=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    echo "part $((i + 1))/$JOBS: $(tail -n 1 "$out/part$((i + 1))/pytest.log" 2>/dev/null)"
  done
  exit "$status"
fi

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$out/gpu.txt"
python3 -c "import jax, jax_grouped_gemm._native as n; print(jax.devices(), 'cuda built:', n.CUDA_BUILT)"
targets=(tests)
if [[ -n "${PART:-}" ]]; then
  mapfile -t files < <(ls tests/test_*.py | sort)
  index="${PART%/*}" count="${PART#*/}"
  targets=()
  for i in "${!files[@]}"; do
    if (( i % count == index - 1 )); then targets+=("${files[$i]}"); fi
  done
fi
python3 -m pytest -q -p no:cacheprovider "${targets[@]}" "$@" 2>&1 | tee "$out/pytest.log"
exit "${PIPESTATUS[0]}"
