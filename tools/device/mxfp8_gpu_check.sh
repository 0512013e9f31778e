#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), from the repository root, with the native module
# built here and carried over: the MXFP8 tests on the GPU (again on the persistent kernels
# alone: JGG_MXFP8_SMALL=0), compute-sanitizer memcheck over the
# CUDA-vs-CPU byte-for-byte cases (ragged edge sizes, odd columns, every layout, many groups),
# then the quantize / dequantize bandwidth benchmark on GPU 0.
#   tools/device/mxfp8_gpu_check.sh [tests|persistent|memcheck|memcheck-persistent|bench ...]
#   (default: tests persistent memcheck bench)
# Logs under $OUT (or /tmp/jgg-gpu); exits non-zero if any step failed. On an H200
# (2026-11-29) `tests` alone took 452 s (533 tests), `persistent` 95 s, `memcheck` 86 s and
# `bench` 172 s: give `tests` a device call of its own. `persistent` took 136 s and
# `memcheck-persistent` ran past the rest of a 600 s call after 12 of its 21 cases (2026-11-29):
# give it a call of its own too.
set -uo pipefail
out="${OUT:-/tmp/jgg-gpu}"
mkdir -p "$out"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(tests persistent memcheck bench)
status=0

for step in "${steps[@]}"; do
  echo "=== $step"
  case $step in
    tests)
      python3 -m pytest -q -p no:cacheprovider tests/test_mxfp8*.py 2>&1 | tee "$out/mxfp8_tests.log"
      ;;
    persistent)
      # Most test calls are small (<= 4 MB), which take the small kernels: run the CUDA-vs-CPU
      # tests again on the persistent (wide / strip) kernels.
      JGG_MXFP8_SMALL=0 python3 -m pytest -q -p no:cacheprovider tests/test_mxfp8_cuda.py \
        tests/test_mxfp8_fused.py 2>&1 | tee "$out/mxfp8_tests_persistent.log"
      ;;
    memcheck|memcheck-persistent)
      # --error-exitcode makes a reported access error fail the step even if pytest passes;
      # memcheck-persistent runs the cases (most of them small calls) on the persistent kernels.
      [[ $step == memcheck ]] && small=() || small=(JGG_MXFP8_SMALL=0)
      env "${small[@]}" compute-sanitizer --tool memcheck --error-exitcode 3 \
        python3 -m pytest -q -p no:cacheprovider tests/test_mxfp8_cuda.py -k byte_for_byte \
        2>&1 | tee "$out/$step.log"
      ;;
    bench)
      CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" \
        python3 -m tools.bench.mxfp8_bench --out "$out/bench" 2>&1 | tee "$out/bench.log"
      ;;
    *) echo "unknown step $step"; false ;;
  esac
  rc=${PIPESTATUS[0]}
  echo "=== $step: exit $rc"
  [[ $rc == 0 ]] || status=1
done
exit "$status"
