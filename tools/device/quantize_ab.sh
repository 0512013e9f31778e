#!/usr/bin/env bash
# GPU machine, repository root: A/B of MXFP8 quantize / dequantize builds and settings. For each
# entry of VARIANTS, in that order (repeat entries to see the run-to-run spread), mxfp8_bench
# times the SHAPES with the environment settings the entry carries after commas. The name
# before the first comma labels the run and, where build/ab/quantize_variants.tar.xz (carried;
# files <name>.so: `tar cf - base.so new.so | xz -1 > build/ab/quantize_variants.tar.xz`) holds
# <name>.so, picks that native module; otherwise the checkout's runs. Each run's log and
# mxfp8_bench.json go into $OUT/quantize_ab.tgz (run<i>_<entry>.{log,json}, rewritten after
# every run: the device tool returns at most 8 files); the tables are printed.
# One run of mixtral, deepseek-ep8 and qwen3-30b took 105 s on an H200 (2026-11-29, mostly
# compiling): give BENCH_TIMEOUT room.
#   VARIANTS="base new base new" bash tools/device/quantize_ab.sh
#   OPS=dequantize SHAPES=mixtral,qwen3-30b VARIANTS="base new base new" bash tools/device/quantize_ab.sh
#   TENSORS=activation SHAPES=decode,decode-zipf VARIANTS="base new base new" bash tools/device/quantize_ab.sh
#   VARIANTS="wide strips,JGG_MXFP8_STRIPS=1 wide strips,JGG_MXFP8_STRIPS=1" bash tools/device/quantize_ab.sh
set -u
out=${OUT:-/tmp/jgg-gpu}; kept=/tmp/quantize_ab/kept; rm -rf "$kept"; mkdir -p "$out" "$kept"
export PYTHONPATH=$PWD/python:$PWD/tests:$PWD
module=python/jax_grouped_gemm/_jgg_native.cpython-312-x86_64-linux-gnu.so
variants=build/ab/quantize_variants.tar.xz
if [[ -f $variants ]]; then
  tar xJf "$variants" -C /tmp/quantize_ab
  cp "$module" /tmp/quantize_ab/checkout.so.orig
  trap 'cp /tmp/quantize_ab/checkout.so.orig "$module"' EXIT  # the checkout keeps its own module
fi
run=0
for spec in ${VARIANTS:?entries: a name, then settings after commas}; do
  run=$((run + 1))
  IFS=, read -r -a fields <<< "$spec"
  v=${spec//[,=]/_}
  if [[ -f /tmp/quantize_ab/${fields[0]}.so ]]; then
    cp "/tmp/quantize_ab/${fields[0]}.so" "$module"
  elif [[ -f /tmp/quantize_ab/checkout.so.orig ]]; then
    cp /tmp/quantize_ab/checkout.so.orig "$module"
  fi
  env "${fields[@]:1}" timeout "${BENCH_TIMEOUT:-200}" python3 -m tools.bench.mxfp8_bench \
    --shapes "${SHAPES:-mixtral,mixtral-zipf,decode,decode-zipf}" ${OPS:+--ops "$OPS"} \
    ${TENSORS:+--tensors "$TENSORS"} --out "/tmp/quantize_ab/run$run" \
    > "/tmp/quantize_ab/run$run.log" 2>&1
  echo "=== run $run: $v rc=$?"
  cp "/tmp/quantize_ab/run$run.log" "$kept/run${run}_$v.log"  # kept even when the run timed out
  json=/tmp/quantize_ab/run$run/mxfp8_bench.json
  [[ -f $json ]] && cp "$json" "$kept/run${run}_$v.json"
  tar czf "$out/quantize_ab.tgz" -C "$kept" .
  [[ -f $json ]] || continue
  grep -E "^\| [a-z0-9-]+ \| (activation|weight) \|" "/tmp/quantize_ab/run$run/mxfp8_bench.md"
done
