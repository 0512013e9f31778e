"""Splits a fused MXFP8 GEMM's time into a per-call fixed part and a part per contracted MX
block, by timing it at several contraction lengths with everything else held:

  PYTHONPATH=python:tests:. python3 tools/device/fused_fixed_cost.py --out OUT \\
      [--shapes decode-zipf,decode] [--pass dgrad] [--lengths 32,384,768,1536]

The contraction is the anchor's N (ffn) for dgrad and its K (hidden) for the forward, so the
grid (output columns, routing, row passes) stays that of the anchor. A least-squares line
through (length, MXFP8 ms) gives the intercept: what a call costs before and after its
K loop (slot lookup, lhs scale rows, partial-sum reduction, empty slots, launch). Rows are
timed by tools.bench.mxfp8_gemm_bench.run (its JSON and table land in OUT too).
"""

import argparse
import dataclasses
import json
import os

import numpy as np

from tools.bench import mxfp8_gemm_bench
from tools.bench import shapes as shapes_lib

CONTRACTED_FIELD = {"fwd": "hidden", "dgrad": "ffn"}


def sweep(shapes, pass_name, lengths):
  """The shapes at each contraction length, named <anchor>-<field><length>."""
  field = CONTRACTED_FIELD[pass_name]
  return [dataclasses.replace(s, name=f"{s.name}-{field}{n}", **{field: n})
          for s in shapes for n in lengths]


def fit(records, anchors, lengths):
  """Per anchor: (intercept ms, ms per 32 contracted, MXFP8 ms at each length)."""
  fits = {}
  for anchor in anchors:
    times = [r["mxfp8"]["seconds"] * 1e3 for r in records
             if r["shape"].rsplit("-", 1)[0] == anchor and "mxfp8" in r]
    if len(times) != len(lengths):
      continue
    slope, intercept = np.polyfit(np.asarray(lengths, float) / 32, times, 1)
    fits[anchor] = (float(intercept), float(slope), times)
  return fits


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", required=True)
  parser.add_argument("--shapes", default="decode-zipf,decode")
  parser.add_argument("--pass", dest="pass_name", choices=sorted(CONTRACTED_FIELD),
                      default="dgrad")
  parser.add_argument("--lengths", default="32,384,768,1536",
                      help="contraction lengths, multiples of 32")
  parser.add_argument("--warmup-seconds", type=float, default=1.5)
  args = parser.parse_args(argv)
  anchors = shapes_lib.by_name([s for s in args.shapes.split(",") if s])
  lengths = [int(n) for n in args.lengths.split(",")]
  if any(n <= 0 or n % 32 for n in lengths):
    parser.error(f"--lengths: expected positive multiples of 32, got {lengths}")
  result = mxfp8_gemm_bench.run(sweep(anchors, args.pass_name, lengths), [args.pass_name],
                                args.out, calls=10, runs=20, warmup_seconds=args.warmup_seconds)
  fits = fit(result["records"], [a.name for a in anchors], lengths)
  lines = [f"| anchor | {args.pass_name} MXFP8 ms at " + ", ".join(map(str, lengths)) +
           " | fixed ms (intercept) | ms per MX block of contraction |", "|---|---|---:|---:|"]
  for anchor, (intercept, slope, times) in fits.items():
    lines.append(f"| {anchor} | {', '.join(f'{t:.4f}' for t in times)} | {intercept:.4f} | "
                 f"{slope:.5f} |")
  print("\n".join(lines))
  with open(os.path.join(args.out, "fused_fixed_cost.json"), "w") as f:
    json.dump({"pass": args.pass_name, "lengths": lengths,
               "fits": {a: {"intercept_ms": i, "ms_per_mx_block": s, "mxfp8_ms": t}
                        for a, (i, s, t) in fits.items()}}, f, indent=1)


if __name__ == "__main__":
  main()
