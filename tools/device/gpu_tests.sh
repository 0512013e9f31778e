#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), from the repository root, with the native module
# built here and carried over. The machine's own python3 (3.12, jax + CUDA plugin) runs it.
#   tools/device/gpu_tests.sh [pytest args...]     logs under $OUT (or /tmp/jgg-gpu)
# The whole suite takes over one device call's 600 s on an H100 (2026-11-24), so PART=1/2 and
# PART=2/2 each run half of the test files (alternate files in name order).
set -uo pipefail
out="${OUT:-/tmp/jgg-gpu}"
mkdir -p "$out"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
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
