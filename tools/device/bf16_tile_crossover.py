"""Our BF16 grouped GEMM's forward and dgrad by average rows per group, to place the tile cut-off.

ragged_dot_cuda.cu gives groups averaging at most 64 rows the 64x128 ping-pong tile and
larger ones the 128x256 cooperative tile; JGG_SM90_SMALL_M_ROWS=r moves that 64 (read once
per process, 0: never the ping-pong tile). Run on the device:

  PYTHONPATH=python:tests:. python3 tools/device/bf16_tile_crossover.py --out OUT \\
      [--settings 0,1000000] [--rows 64,128,192,256] [--dims 4096,1536,64] [--passes fwd,dgrad]

Times jgg.ragged_dot_general with tools.bench.jax_loop.LoopTimer (as mxfp8_gemm_bench times
its BF16 side), uniform and Zipf routing; writes OUT/bf16_tile_crossover.{json,md} under the
process's own setting. With --settings, runs itself once per setting in a fresh process
(OUT/setting_<r>/) and writes OUT/bf16_tile_crossover_compare.md: each setting's ms and its
time over the first setting's.
"""

import json
import os
import subprocess
import sys

from tools.bench import mxfp8_gemm_bench
from tools.device.mxfp8_backend_crossover import crossover_parser, crossover_problem


def time_shapes(shapes, passes, args):
  """[{shape, pass_name, dims, ms, tflops}] of our BF16 GEMM on each shape and pass."""
  timer = mxfp8_gemm_bench.loop_timer(args.calls, args.runs, args.warmup_seconds)
  records = []
  for shape, tensors, group_sizes in mxfp8_gemm_bench.shapes_with_operands(shapes):
    for pass_name in passes:
      lhs_name, _, rhs_name, _ = mxfp8_gemm_bench.ORIENTATIONS[pass_name]
      timed = timer(mxfp8_gemm_bench._bf16_fn(pass_name),
                    (tensors[lhs_name], tensors[rhs_name], group_sizes))
      records.append(dict(shape=shape.name, pass_name=pass_name, dims=list(shape.dims),
                          ms=timed["seconds"] * 1e3,
                          tflops=shape.flops() / timed["seconds"] / 1e12))
  return records


def compare_table(settings, runs):
  """Markdown: per shape and pass, each setting's ms and its time over the first setting's."""
  lines = [f"K, N, G = {', '.join(map(str, runs[0]['dims']))}; ms under each "
           "JGG_SM90_SMALL_M_ROWS (time over the first setting's)", "",
           f"| shape | pass | {' | '.join(settings)} |", "|---|---|" + "---|" * len(settings)]
  for records in zip(*(run["records"] for run in runs)):
    first = records[0]["ms"]
    cells = [f"{records[0]['ms']:.3f}"] + [f"{r['ms']:.3f} ({r['ms'] / first:.2f})"
                                           for r in records[1:]]
    lines.append(f"| {records[0]['shape']} | {records[0]['pass_name']} | {' | '.join(cells)} |")
  return "\n".join(lines)


def run_settings(settings, argv, out):
  """This tool once per setting, each in a fresh process (the override is read once per
  process); returns each run's saved JSON."""
  runs = []
  for setting in settings:
    sub_out = os.path.join(out, f"setting_{setting}")
    # The child imports what this process did, wherever it runs from.
    env = dict(os.environ, JGG_SM90_SMALL_M_ROWS=setting,
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--out", sub_out],
                   env=env, check=True)
    with open(os.path.join(sub_out, "bf16_tile_crossover.json"), encoding="utf-8") as f:
      runs.append(json.load(f))
  return runs


def compare_settings(args):
  """--settings: each setting's run in a fresh process, then their side-by-side table."""
  settings = [v for v in args.settings.split(",") if v]
  # The options but --out and --settings, for each setting's run.
  forwarded = ["--dims", args.dims, "--rows", args.rows, "--passes", args.passes,
               "--calls", str(args.calls), "--runs", str(args.runs),
               "--warmup-seconds", str(args.warmup_seconds)]
  text = compare_table(settings, run_settings(settings, forwarded, args.out))
  with open(os.path.join(args.out, "bf16_tile_crossover_compare.md"), "w", encoding="utf-8") as f:
    f.write(text + "\n")
  print(text)


def time_this_setting(args, dims, passes, shapes):
  """One run under this process's JGG_SM90_SMALL_M_ROWS: its table and JSON."""
  records = time_shapes(shapes, passes, args)
  setting = os.environ.get("JGG_SM90_SMALL_M_ROWS", "unset (64)")
  lines = [f"K, N, G = {', '.join(map(str, dims))}; JGG_SM90_SMALL_M_ROWS={setting}", "",
           "| shape | pass | ms | TFLOP/s |", "|---|---|---|---|"]
  lines += [f"| {r['shape']} | {r['pass_name']} | {r['ms']:.3f} | {r['tflops']:.0f} |"
            for r in records]
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "bf16_tile_crossover.md"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  with open(os.path.join(args.out, "bf16_tile_crossover.json"), "w", encoding="utf-8") as f:
    json.dump({"dims": dims, "small_m_rows": setting, "records": records}, f, indent=1)
  print("\n".join(lines))


def main(argv=None):
  parser = crossover_parser(__doc__, passes="fwd,dgrad", rows="16,32,48,64,96,128,192,256,384")
  parser.add_argument("--settings", default="",
                      help="JGG_SM90_SMALL_M_ROWS values, one fresh process each")
  args = parser.parse_args(argv)
  dims, passes, shapes = crossover_problem(parser, args)
  if not all(v.isdigit() for v in args.settings.split(",") if v):
    parser.error(f"--settings: expected non-negative integers, got {args.settings!r}")
  if args.settings:
    compare_settings(args)
  else:
    time_this_setting(args, dims, passes, shapes)


if __name__ == "__main__":
  main()
