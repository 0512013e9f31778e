"""Our grouped GEMM for every (inputs, results) dtype pair, against bf16 -> bf16.

Run on the GPU machine from the repository root:

  PYTHONPATH=python python3 -m tools.bench.dtype_bench --out build/dtype_bench

For each shape and pass (fwd, dgrad, wgrad) it times jgg.ragged_dot_general on random
normal operands of each pair: bf16 -> bf16 (the reference row), f16 -> f16, bf16 -> f32,
f16 -> f32 (the other Hopper tensor-core instantiations), and f32 -> f32 (the exact f32
path, SIMT). Timing: jax_loop.LoopTimer (jitted loops of --calls calls, --runs >= 20
timed runs, the median; the slow f32 rows are cut to >= 5 runs, the table says how many). TFLOP/s = 2 * sum(group_sizes) * K * N / time; "vs bf16" = the
bf16 -> bf16 time of the same shape and pass over this pair's. Correctness is the tests'
business (tests/test_cuda.py checks every pair against float64). Writes dtype_bench.json
and dtype_bench.md to --out.
"""

from __future__ import annotations

import argparse

from tools.bench import jax_competitors, jax_loop
from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp

PAIRS = (("bfloat16", "bfloat16"), ("float16", "float16"), ("bfloat16", "float32"),
         ("float16", "float32"), ("float32", "float32"))


def _fn(pass_name, out_dtype):
  import jax_grouped_gemm as jgg

  dims = jax_competitors._dimension_numbers(pass_name)
  return lambda lhs, rhs, gs: jgg.ragged_dot_general(lhs, rhs, gs, dims,
                                                     preferred_element_type=out_dtype)


def run(shapes, passes, out_dir: str, calls: int, runs: int, log=print,
        warmup_seconds: float = wp.DEFAULT_WARMUP_SECONDS) -> dict:
  import jax
  import jax.numpy as jnp

  # Runs are cut (to no fewer than 5) only where --runs would take over 10 s: the f32 rows.
  plan = wp.Plan(shapes=[], passes=[], competitors=[], calls=calls, runs=runs,
                 min_runs=min(runs, 5), run_budget_s=10.0,
                 warmup_seconds=warmup_seconds)
  timer = jax_loop.LoopTimer(plan)
  records = []
  for shape in shapes:
    bf16 = jax_competitors._random_operands(shape.dims)
    group_sizes = jnp.asarray(shape.group_sizes())
    for pass_name in passes:
      reference_seconds = None
      for in_name, out_name in PAIRS:
        operands = [a.astype(in_name) for a in jax_competitors._pass_operands(bf16, pass_name)]
        record = dict(shape=shape.name, dims=list(shape.dims), pass_name=pass_name,
                      inputs=in_name, results=out_name)
        try:
          timing = timer(_fn(pass_name, jnp.dtype(out_name)), (*operands, group_sizes))
        except Exception as e:  # a failed entry is a row, not the end of the run
          if wp.poisons_context(e):
            raise
          record["error"] = wp.short_error(e)
          records.append(record)
          log(f"{shape.name} {pass_name} {in_name}->{out_name}: n/a ({record['error']})")
          continue
        reference_seconds = reference_seconds or timing["seconds"]
        record.update(timing, tflops=shape.flops() / timing["seconds"] / 1e12,
                      vs_bf16=reference_seconds / timing["seconds"])
        records.append(record)
        log(f"{shape.name:>12} {pass_name:>5} {in_name:>8} -> {out_name:<8} "
            f"{timing['seconds'] * 1e3:8.3f} ms {record['tflops']:7.1f} TFLOP/s "
            f"{record['vs_bf16']:5.2f}x of bf16")
        del operands
    del bf16
  device = jax.devices()[0]
  result = {"device": f"{device.platform}: {device.device_kind}", "jax": jax.__version__,
            "calls": calls, "runs": runs, "records": records}
  table = markdown(result)
  wp.save_results(out_dir, "dtype_bench", result, table)
  log(table)
  return result


def markdown(result: dict) -> str:
  lines = [f"Grouped GEMM by dtype pair, {result['device']}, jax {result['jax']}; median of "
           f"{result['runs']} runs of {result['calls']} calls.", "",
           "| shape | M, K, N, G | pass | inputs -> results | ms | TFLOP/s | vs bf16 -> bf16 | runs |",
           "|---|---|---|---|---:|---:|---:|---:|"]
  for r in result["records"]:
    head = (f"| {r['shape']} | {', '.join(map(str, r['dims']))} | {r['pass_name']} | "
            f"{r['inputs']} -> {r['results']} |")
    if "error" in r:
      lines.append(f"{head} n/a: {r['error']} | | | |")
    else:
      lines.append(f"{head} {r['seconds'] * 1e3:.3f} | {r['tflops']:.1f} | "
                   f"{r['vs_bf16']:.2f}x | {r['runs']} |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", required=True, help="directory for dtype_bench.{json,md}")
  parser.add_argument("--shapes", default="mixtral,qwen3-30b,decode",
                      help="comma-separated anchor names of tools/bench/shapes.py")
  parser.add_argument("--passes", default=",".join(shapes_lib.PASSES),
                      help="comma-separated passes (default: fwd,dgrad,wgrad)")
  parser.add_argument("--calls", type=int, default=10, help="calls per timed run (>= 10)")
  parser.add_argument("--runs", type=int, default=20, help="timed runs, median reported (>= 20)")
  args = parser.parse_args(argv)
  run(shapes_lib.by_name([s for s in args.shapes.split(",") if s]),
      [p for p in args.passes.split(",") if p], args.out, args.calls, args.runs)


if __name__ == "__main__":
  main()
