#!/usr/bin/env bash
# GPU machine: times our grouped GEMM as built and under each tuning setting (now
# JGG_SM90_RASTER=n, the tile order) against torch._grouped_mm and dense cuBLAS of the
# same run, results checked against jax.lax.ragged_dot. Writes each setting's bench
# output under OUT and prints its Markdown rows. Tile candidates are compile-time: the
# 2026-11-24 sweep built them as extra bf16 variants picked by an environment variable
# and ran one `bench` line per candidate (docs/PERFORMANCE.md).
#   tools/device/tile_sweep.sh OUT [shapes]
set -uo pipefail
out="$1"
shapes="${2:-mixtral,deepseek-ep8,qwen3-30b,mixtral-zipf,deepseek-ep8-zipf,qwen3-30b-zipf}"
mkdir -p "$out"
bench() {  # name, competitors, passes, env...
  local name="$1" competitors="$2" passes="$3"
  shift 3
  env "$@" PYTHONPATH="$PWD/python" python3 -m tools.bench.grouped_gemm_bench \
    --competitors "$competitors" --shapes "$shapes" --passes "$passes" \
    --check --out "$out/$name" > "$out/$name.log" 2>&1
  grep -E "^\| [a-z0-9-]+ \| (fwd|dgrad|wgrad) \|" "$out/$name/results.md" | sed "s/^/| $name /"
}
bench base ours,torch,dense fwd,dgrad,wgrad
bench raster_n ours fwd,dgrad,wgrad JGG_SM90_RASTER=n
