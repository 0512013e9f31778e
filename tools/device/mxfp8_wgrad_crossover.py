"""Where the fused MXFP8 wgrad stops beating the dequantize backend, by rows per group.

The fused wgrad (mxfp8_ragged_k_cuda.cu) takes calls of at most
mxfp8_gemm.FUSED_WGRAD_MAX_ROWS_PER_GROUP rows per group on average; larger ones dequantize
x and dy into bf16 copies and run our BF16 wgrad. This times wgrad at growing token counts,
uniform and Zipf routing, twice: with that limit ("chosen": the backend a user gets) and
with it lifted ("fused": the fused kernel whatever the sizes), each against our BF16 wgrad,
through tools.bench.mxfp8_gemm_bench.run (its JSON and tables land in OUT/chosen, OUT/fused).
Run on the device:

  PYTHONPATH=python:tests:. python3 tools/device/mxfp8_wgrad_crossover.py --out OUT \\
      [--rows 8,16,32,64,128] [--dims 4096,1536,64]
"""

import argparse
import json
import os

from jax_grouped_gemm import mxfp8_gemm
from tools.bench import mxfp8_gemm_bench
from tools.bench import shapes as shapes_lib

NO_LIMIT = 1 << 30


def crossover_shapes(dims, rows_per_group):
  """(K, N, G) at each average of rows per group, uniform and Zipf routing."""
  k, n, g = dims
  return [shapes_lib.GroupedGemmShape(f"r{r}-{routing}", r * g, k, n, g, routing=routing,
                                      seed=1, bound="weight_bandwidth")
          for r in rows_per_group for routing in shapes_lib.ROUTINGS]


def timed(shapes, out_dir, limit, args):
  """mxfp8_gemm_bench's records of the wgrad of `shapes` under the fused wgrad's limit."""
  default = mxfp8_gemm.FUSED_WGRAD_MAX_ROWS_PER_GROUP
  mxfp8_gemm.FUSED_WGRAD_MAX_ROWS_PER_GROUP = limit  # read when each call is traced
  try:
    return mxfp8_gemm_bench.run(shapes, ["wgrad"], out_dir, args.calls, args.runs,
                                warmup_seconds=args.warmup_seconds)["records"]
  finally:
    mxfp8_gemm.FUSED_WGRAD_MAX_ROWS_PER_GROUP = default


def table(dims, chosen, fused):
  """Markdown: per shape, BF16 ms, then each arm's backend, ms and speedup over BF16."""
  lines = [f"wgrad at K, N, G = {', '.join(map(str, dims))}; ms (speedup over our BF16 wgrad)",
           "", "| shape | BF16 | as chosen | fused kernel |", "|---|---|---|---|"]

  def cell(r):
    if "error" in r:
      return f"n/a: {r['error']}"
    return f"{r['mxfp8']['seconds'] * 1e3:.3f} ({r['speedup']:.2f}x, {r['backend']})"
  for a, b in zip(chosen, fused):
    bf16 = a["bf16"]["seconds"] * 1e3 if "bf16" in a else float("nan")
    lines.append(f"| {a['shape']} | {bf16:.3f} | {cell(a)} | {cell(b)} |")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", required=True)
  parser.add_argument("--rows", default="8,16,32,64,128", help="average rows per group")
  parser.add_argument("--dims", default="4096,1536,64", help="K,N,G (the decode anchor's)")
  parser.add_argument("--calls", type=int, default=10)
  parser.add_argument("--runs", type=int, default=20)
  parser.add_argument("--warmup-seconds", type=float, default=1.5)
  args = parser.parse_args(argv)
  dims = tuple(int(d) for d in args.dims.split(","))
  if len(dims) != 3:
    parser.error(f"--dims: expected K,N,G, got {args.dims!r}")
  shapes = crossover_shapes(dims, [int(r) for r in args.rows.split(",")])
  limit = mxfp8_gemm.FUSED_WGRAD_MAX_ROWS_PER_GROUP
  chosen = timed(shapes, os.path.join(args.out, "chosen"), limit, args)
  fused = timed(shapes, os.path.join(args.out, "fused"), NO_LIMIT, args)
  text = table(dims, chosen, fused)
  with open(os.path.join(args.out, "crossover.md"), "w", encoding="utf-8") as f:
    f.write(text + "\n")
  with open(os.path.join(args.out, "crossover.json"), "w", encoding="utf-8") as f:
    json.dump({"dims": dims, "chosen": chosen, "fused": fused}, f, indent=1)
  print(text)


if __name__ == "__main__":
  main()
