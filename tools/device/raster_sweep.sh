#!/usr/bin/env bash
# GPU machine: times our grouped GEMM under each CUTLASS tile rasterization
# (JGG_SM90_SWIZZLE x JGG_SM90_RASTER) on the large anchor shapes, to choose the
# default. Prints one Markdown table row per setting and shape/pass.
#   tools/device/raster_sweep.sh [shapes] [passes]
set -uo pipefail
shapes="${1:-mixtral,deepseek-ep8,qwen3-30b}"
passes="${2:-fwd,dgrad,wgrad}"
scratch="$(mktemp -d)"
for setting in "1 m" "2 m" "4 m" "8 m" "2 n" "8 n"; do
  read -r swizzle raster <<<"$setting"
  JGG_SM90_SWIZZLE=$swizzle JGG_SM90_RASTER=$raster PYTHONPATH="$PWD/python" \
    python3 -m tools.bench.grouped_gemm_bench --competitors ours --shapes "$shapes" \
    --passes "$passes" --out "$scratch/$swizzle$raster" > "$scratch/$swizzle$raster.log" 2>&1
  grep -E "^\| [a-z0-9-]+ \| (fwd|dgrad|wgrad) \|" "$scratch/$swizzle$raster/results.md" |
    sed "s/^/| swizzle $swizzle raster $raster /"
done
