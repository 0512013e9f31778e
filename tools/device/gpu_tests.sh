#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), from the repository root, with the native module
# built here and carried over. The machine's own python3 (3.12, jax + CUDA plugin) runs it.
#   tools/device/gpu_tests.sh [pytest args...]     logs under $OUT (or /tmp/jgg-gpu)
# The whole suite takes over one device call's 600 s when run serially (H100, 2026-11-24), so:
#   PART=i/n  runs the i-th of n parts of the test files (alternate files in name order);
#   JOBS=n    runs every test file as its own pytest process, n at a time, the slowest known
#             files first, then the others largest first (the GPU tests are mostly compilation
#             on the host's cores; GPU memory is allocated on demand); logs in $OUT/files/,
#             fails if any file fails, and ends with the suite's counts summed ("total: ...").
#             On an H200 (2026-11-29) the slowest files took 90-125 s each with six running at
#             once; JOBS=n parts of whole test-file lists (before) left one part holding
#             test_cuda, test_flax and test_mxfp8_cuda past 340 s.
#             JOBS=8 ran the whole suite in 273 s on an H200 (2026-11-30), test_mxfp8_emulated
#             (251 s, started late) last; the list of slowest files below is that run's. On
#             2026-12-01 it needed more than 320 s (test_mxfp8_emulated 299 s, test_cuda 71
#             tests): give it a call of its own, not one shared with the full bench.
set -uo pipefail
out="${OUT:-/tmp/jgg-gpu}"
mkdir -p "$out"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$out/gpu.txt"
python3 -c "import jax, jax_grouped_gemm._native as n; print(jax.devices(), 'cuda built:', n.CUDA_BUILT)"

if [[ -n "${JOBS:-}" ]]; then
  export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the processes share the GPU
  mkdir -p "$out/files"
  slowest=(tests/test_mxfp8_emulated.py tests/test_mxfp8_fused.py tests/test_cuda.py
           tests/test_mxfp8_cuda.py tests/test_moe.py tests/test_flax.py)
  mapfile -t files < <({ printf '%s\n' "${slowest[@]}"; ls -S tests/test_*.py; } |
                       awk '!seen[$0]++')
  run_file() {  # pytest's 5: nothing collected (a -k that selects none of the file's tests)
    local log="$out/files/$(basename "$1" .py).log"
    python3 -m pytest -q -p no:cacheprovider "$@" > "$log" 2>&1
    local rc=$?
    echo "$(basename "$1"): $(tail -n 1 "$log")"
    (( rc == 0 || rc == 5 ))
  }
  status=0 running=0
  for f in "${files[@]}"; do
    [[ -f $f ]] || continue
    if (( running >= JOBS )); then wait -n || status=1; running=$((running - 1)); fi
    run_file "$f" "$@" &
    running=$((running + 1))
  done
  while (( running > 0 )); do wait -n || status=1; running=$((running - 1)); done
  # The whole suite in one line: every file's pytest summary, summed.
  tail -qn 1 "$out"/files/*.log | grep -oE '[0-9]+ (passed|failed|errors?|skipped|xfailed|xpassed)' |
    awk '{n[$2 == "errors" ? "error" : $2] += $1}
         END {split("passed failed error skipped xfailed xpassed", order, " "); s = ""
              for (i = 1; i <= 6; i++) if (order[i] in n) s = s (s ? ", " : "") n[order[i]] " " order[i]
              print "total: " s}'
  exit "$status"
fi

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
