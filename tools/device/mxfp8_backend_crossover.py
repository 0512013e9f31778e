"""Where the fused MXFP8 kernels stop beating the dequantize backend, by rows per group.

mxfp8_gemm.choose_backend sends a call to "fused_few_rows" while its average rows per group
stay within FUSED_MAX_ROWS_PER_GROUP (forward, dgrad: the mma kernel, then the wgmma one) or
FUSED_WGRAD_MAX_ROWS_PER_GROUP (wgrad), else to "dequantize" (bf16 copies of the operands,
then our BF16 GEMM). This times the passes at growing token counts, uniform and Zipf
routing, once on each backend (forced by setting that limit out of reach or to 0 while the
arm is traced), each against our BF16 GEMM, through tools.bench.mxfp8_gemm_bench.run (its
JSON and tables land in OUT/fused and OUT/dequantize), and names the backend the default
limits choose. With --arms fused and JGG_MXFP8_RAGGED_M_KERNEL=mma or =wgmma, it times one
fused kernel of the forward and dgrad against the other. Run on the device:

  PYTHONPATH=python:tests:. python3 tools/device/mxfp8_backend_crossover.py --out OUT \\
      [--passes wgrad] [--rows 8,16,32,64,128] [--dims 4096,1536,64] [--arms fused]
"""

import argparse
import contextlib
import json
import os

from jax_grouped_gemm import mxfp8_gemm
from tools.bench import mxfp8_gemm_bench
from tools.bench import shapes as shapes_lib

LIMITS = ("FUSED_MAX_ROWS_PER_GROUP", "FUSED_WGRAD_MAX_ROWS_PER_GROUP")
ARMS = {"dequantize": 0, "fused": 1 << 30}  # the limits each arm sets


def crossover_shapes(dims, rows_per_group):
  """(K, N, G) at each average of rows per group, uniform and Zipf routing."""
  k, n, g = dims
  return [shapes_lib.GroupedGemmShape(f"r{r}-{routing}", r * g, k, n, g, routing=routing,
                                      seed=1, bound="weight_bandwidth")
          for r in rows_per_group for routing in shapes_lib.ROUTINGS]


@contextlib.contextmanager
def limits_at(value):
  """Both fused-row limits at `value` (read when each call is traced), restored after."""
  saved = {name: getattr(mxfp8_gemm, name) for name in LIMITS}
  for name in LIMITS:
    setattr(mxfp8_gemm, name, value)
  try:
    yield
  finally:
    for name, limit in saved.items():
      setattr(mxfp8_gemm, name, limit)


def timed(shapes, passes, out_dir, limit, args):
  """mxfp8_gemm_bench's records of `passes` of `shapes` with both limits at `limit`."""
  with limits_at(limit):
    return mxfp8_gemm_bench.run(shapes, passes, out_dir, args.calls, args.runs,
                                warmup_seconds=args.warmup_seconds)["records"]


def chosen_backends(shapes, passes):
  """{(shape, pass): the backend the default limits choose}: static facts only, so the
  operands are traced by shape (jax.eval_shape), never quantized."""
  import jax
  import jax.numpy as jnp

  from tools.bench import jax_competitors

  chosen = {}
  for shape in shapes:
    m, k, n, g = shape.dims
    tensors = {"x": jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
               "w": jax.ShapeDtypeStruct((g, k, n), jnp.bfloat16),
               "dy": jax.ShapeDtypeStruct((m, n), jnp.bfloat16)}
    group_sizes = jnp.asarray(shape.group_sizes())
    for pass_name in passes:
      def choose(tensors, pass_name=pass_name, key=(shape.name, pass_name)):
        lhs, rhs = mxfp8_gemm_bench._quantized(tensors, group_sizes, pass_name)
        problem = mxfp8_gemm.resolve_problem(lhs, rhs, group_sizes,
                                             jax_competitors._dimension_numbers(pass_name))
        chosen[key] = mxfp8_gemm.choose_backend(problem)
      jax.eval_shape(choose, tensors)
  return chosen


def table(dims, arms, chosen):
  """Markdown: per shape and pass, BF16 ms (the first arm's run), each arm's ms and speedup,
  the default's pick."""
  names = list(arms)
  lines = [f"K, N, G = {', '.join(map(str, dims))}; ms (speedup over our BF16 GEMM in the "
           "same arm's run)", "", f"| shape | pass | BF16 | {' | '.join(names)} | chosen |",
           "|---|---|---|" + "---|" * len(names) + "---|"]

  def cell(r):
    if "error" in r:
      return f"n/a: {r['error']}"
    return f"{r['mxfp8']['seconds'] * 1e3:.3f} ({r['speedup']:.2f}x)"
  for records in zip(*arms.values()):
    first = records[0]
    bf16 = f"{first['bf16']['seconds'] * 1e3:.3f}" if "bf16" in first else "n/a"
    cells = " | ".join(cell(r) for r in records)
    lines.append(f"| {first['shape']} | {first['pass_name']} | {bf16} | {cells} | "
                 f"{chosen[first['shape'], first['pass_name']]} |")
  return "\n".join(lines)


def crossover_parser(description, passes, rows):
  """The options of a crossover by rows per group (this tool's and bf16_tile_crossover's):
  --out, --passes, --rows, --dims and the timing's."""
  parser = argparse.ArgumentParser(description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", required=True)
  parser.add_argument("--passes", default=passes, help="of fwd, dgrad, wgrad")
  parser.add_argument("--rows", default=rows, help="average rows per group")
  parser.add_argument("--dims", default="4096,1536,64", help="K,N,G (the decode anchor's)")
  parser.add_argument("--calls", type=int, default=10)
  parser.add_argument("--runs", type=int, default=20)
  parser.add_argument("--warmup-seconds", type=float, default=1.5)
  return parser


def crossover_problem(parser, args):
  """(dims, passes, shapes) from crossover_parser's options; a bad one is named."""
  dims = tuple(int(d) for d in args.dims.split(","))
  if len(dims) != 3:
    parser.error(f"--dims: expected K,N,G, got {args.dims!r}")
  passes = [p for p in args.passes.split(",") if p]
  unknown = [p for p in passes if p not in shapes_lib.PASSES]
  if unknown:
    parser.error(f"--passes: unknown {unknown}; known: {', '.join(shapes_lib.PASSES)}")
  return dims, passes, crossover_shapes(dims, [int(r) for r in args.rows.split(",")])


def main(argv=None):
  parser = crossover_parser(__doc__, passes="wgrad", rows="8,16,32,64,128")
  parser.add_argument("--arms", default=",".join(ARMS), help="of " + ", ".join(ARMS))
  args = parser.parse_args(argv)
  dims, passes, shapes = crossover_problem(parser, args)
  arm_names = [a for a in args.arms.split(",") if a]
  if not arm_names or any(a not in ARMS for a in arm_names):
    parser.error(f"--arms: expected some of {', '.join(ARMS)}, got {args.arms!r}")
  chosen = chosen_backends(shapes, passes)
  arms = {arm: timed(shapes, passes, os.path.join(args.out, arm), ARMS[arm], args)
          for arm in arm_names}
  text = table(dims, arms, chosen)
  with open(os.path.join(args.out, "crossover.md"), "w", encoding="utf-8") as f:
    f.write(text + "\n")
  with open(os.path.join(args.out, "crossover.json"), "w", encoding="utf-8") as f:
    json.dump({"dims": dims, "chosen": {f"{s} {p}": b for (s, p), b in chosen.items()},
               **arms}, f, indent=1)
  print(text)


if __name__ == "__main__":
  main()
