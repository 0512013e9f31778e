#!/usr/bin/env bash
# GPU machine, repository root: A/B of fused-MXFP8 kernel builds. Each build is a copy of
# python/ with its native module, packed here as build/ab/variants.tar.xz (folders
# <name>/python; `tar cf - base v2 | xz > build/ab/variants.tar.xz`) and carried over with
# the current build's module. Runs the fused tests (forward, dgrad, wgrad) on the current
# build (RUN_TESTS=0 skips them), then mxfp8_gemm_bench once per name in VARIANTS, in that
# order (repeat names to see the run-to-run spread). Logs under $OUT (or /tmp/jgg-gpu).
#   VARIANTS="base v2 base v2" bash tools/device/mxfp8_ab.sh
set -u
out=${OUT:-/tmp/jgg-gpu}; mkdir -p "$out" /tmp/ab
tar xJf build/ab/variants.tar.xz -C /tmp/ab
root=$PWD
if [[ "${RUN_TESTS:-1}" == 1 ]]; then
  PYTHONPATH=$root/python:$root/tests:$root timeout 300 python3 -m pytest -q -p no:cacheprovider \
    tests/test_mxfp8_fused.py tests/test_mxfp8_fused_wgrad.py tests/test_mxfp8_gemm.py \
    > "$out/tests.log" 2>&1
  echo "tests rc=$?"; tail -1 "$out/tests.log"
fi
for v in ${VARIANTS:?names of the builds to bench}; do
  PYTHONPATH=/tmp/ab/$v/python:$root/tests:$root timeout 120 python3 -m tools.bench.mxfp8_gemm_bench \
    --shapes "${SHAPES:-decode,decode-zipf}" --passes "${PASSES:-fwd,dgrad}" --out "$out/bench_$v" \
    > "$out/bench_$v.log" 2>&1
  echo "=== $v rc=$?"; grep -E "^\| [a-z]" "$out/bench_$v/mxfp8_gemm_bench.md" | grep -v "^| shape"
done
