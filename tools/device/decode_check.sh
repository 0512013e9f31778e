#!/usr/bin/env bash
# GPU machine, repository root, native module carried over: the tests of the CUDA paths for
# few rows per group (streamed wgrad, fused MXFP8 forward and dgrad), compute-sanitizer
# memcheck of the ragged edge cases and of the fused MXFP8 tests, then the decode benchmarks: BF16 with the
# streamed wgrad groups and without them (JGG_WGRAD_STREAMED_ROWS=0), torch and the copy
# ceiling; MXFP8 vs BF16. Logs and results under $OUT (or /tmp/jgg-gpu).
set -uo pipefail
out="${OUT:-/tmp/jgg-gpu}"
mkdir -p "$out"
export PYTHONPATH="$PWD/python:$PWD/tests:$PWD"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
step() { echo "=== $1"; }
step tests
timeout 330 python3 -m pytest -q -p no:cacheprovider -x tests/test_cuda.py tests/test_mxfp8_fused.py \
  tests/test_mxfp8_gemm.py > "$out/pytest_focus.log" 2>&1; echo "focus rc $?"; tail -3 "$out/pytest_focus.log"
step memcheck
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 python3 tools/device/sanitize.py \
  > "$out/memcheck_ragged.log" 2>&1; echo "memcheck ragged rc $?"; tail -4 "$out/memcheck_ragged.log"
# The fused tests without XLA's preallocation (its 75% of the GPU left compute-sanitizer too
# little memory: it crashed after 43 tests, 2026-11-24), but for the command-buffer test, which
# runs alone and first in its process: its child preallocates too, and without preallocation
# it runs past its timeout under the sanitizer.
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 420 compute-sanitizer --tool memcheck --error-exitcode 3 \
  python3 -m pytest -q -p no:cacheprovider tests/test_mxfp8_fused.py -k "not command_buffer" \
  > "$out/memcheck_fused.log" 2>&1; echo "memcheck fused rc $?"; tail -4 "$out/memcheck_fused.log"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider \
  tests/test_mxfp8_fused.py -k command_buffer > "$out/memcheck_fused_cb.log" 2>&1
echo "memcheck fused command buffer rc $?"; tail -4 "$out/memcheck_fused_cb.log"
step bench
python3 -m tools.bench.grouped_gemm_bench --shapes decode,decode-zipf --passes fwd,wgrad \
  --competitors ours,torch,copy --out "$out/bf16" > "$out/bf16.log" 2>&1; echo "bf16 rc $?"
JGG_WGRAD_STREAMED_ROWS=0 python3 -m tools.bench.grouped_gemm_bench --shapes decode,decode-zipf \
  --passes wgrad --competitors ours --out "$out/bf16_unstreamed" > "$out/bf16_unstreamed.log" 2>&1
echo "bf16 unstreamed rc $?"
python3 -m tools.bench.mxfp8_gemm_bench --shapes decode,decode-zipf --out "$out/mxfp8" \
  > "$out/mxfp8.log" 2>&1; echo "mxfp8 rc $?"
grep -h "^| decode" "$out"/bf16/results.md "$out"/bf16_unstreamed/results.md "$out"/mxfp8/*.md
