#!/usr/bin/env bash
# GPU machine, repository root: A/B of BF16 grouped-GEMM builds. Each build is a native
# module packed here as build/ab/gemm_variants.tar.xz (files <name>.so, e.g. `tar cf -
# base.so epi128.so | xz > build/ab/gemm_variants.tar.xz`). For each name in VARIANTS, in
# that order (repeat names to see the run-to-run spread), python/ gets that module and
# grouped_gemm_bench times it, results checked against jax.lax.ragged_dot; the first
# name's run also times COMPETITORS_FIRST (torch and dense by default). Each run's
# results.json comes back as $OUT/run<i>_<name>.json; the tables are printed. A name may
# carry environment settings for its run after commas (one build, two settings):
#   VARIANTS="base epi128 base epi128" bash tools/device/gemm_ab.sh
#   VARIANTS="cur cur,JGG_SM90_PDL=0 cur" bash tools/device/gemm_ab.sh
set -u
out=${OUT:-/tmp/jgg-gpu}; mkdir -p "$out" /tmp/gemm_ab
tar xJf build/ab/gemm_variants.tar.xz -C /tmp/gemm_ab
root=$PWD
module=_jgg_native.cpython-312-x86_64-linux-gnu.so
cp "$root/python/jax_grouped_gemm/$module" /tmp/gemm_ab/checkout.so.orig
trap 'cp /tmp/gemm_ab/checkout.so.orig "$root/python/jax_grouped_gemm/$module"' EXIT  # the checkout keeps its own module
competitors="ours,${COMPETITORS_FIRST:-torch,dense}"
run=0
for spec in ${VARIANTS:?names of the builds to bench}; do
  run=$((run + 1))
  IFS=, read -r -a fields <<< "$spec"
  build=${fields[0]}
  v=${spec//[,=]/_}
  # The bench's workers put the checkout's python/ first on their path: the module goes there.
  cp "/tmp/gemm_ab/$build.so" "$root/python/jax_grouped_gemm/$module"
  env "${fields[@]:1}" timeout "${BENCH_TIMEOUT:-280}" python3 -m tools.bench.grouped_gemm_bench \
    --shapes "${SHAPES:-mixtral,deepseek-ep8,qwen3-30b,mixtral-zipf,deepseek-ep8-zipf,qwen3-30b-zipf}" \
    --passes "${PASSES:-fwd,dgrad,wgrad}" --competitors "$competitors" --check \
    --out "/tmp/gemm_ab/run$run" > "/tmp/gemm_ab/run$run.log" 2>&1
  echo "=== run $run: $v rc=$?"
  cp "/tmp/gemm_ab/run$run/results.json" "$out/run${run}_$v.json"
  grep -E "^\| [a-z0-9-]+ \| (fwd|dgrad|wgrad) \|" "/tmp/gemm_ab/run$run/results.md"
  competitors=ours
done
