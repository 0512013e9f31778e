"""Where a short MXFP8 call's time goes: the kernel, or the loop that times it.

For a few rows of tools/bench/mxfp8_bench, prints the time per call of
  loop:      the bench's own jitted fori_loop (jax_loop.LoopTimer);
  unrolled:  the same calls written out in one jitted program (no while loop);
  copy:      `x + 1` over the same number of bytes moved, in the LoopTimer;
so a fixed cost per loop iteration shows up as loop - unrolled, and the copy
of the same bytes says what any kernel of that size reaches in that loop.
Run on the device: PYTHONPATH=python:tests:. python3 tools/device/mxfp8_loop_probe.py
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
from jax import lax

import jax_grouped_gemm as jgg
from tools.bench import jax_competitors, jax_loop, mxfp8_bench
from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp

ROWS = (("decode", "activation", "quantize_rowwise"), ("decode", "activation", "dequantize"),
        ("mixtral", "activation", "quantize_rowwise"), ("mixtral", "activation", "dequantize"),
        ("qwen3-30b", "weight", "dequantize"))
CALLS = 10


def unrolled_seconds(fn, operands, runs=20):
  """Median seconds per call of CALLS calls written out in one jitted program."""

  def program(operands, out):
    kept = []  # every barrier output stays live, so no two calls read the same values
    for _ in range(CALLS):
      args, previous = lax.optimization_barrier((tuple(operands), out))
      kept.append(previous)
      out = fn(*args)
    return out, kept

  out_type = jax.eval_shape(fn, *operands)
  compiled = jax.jit(program).lower(operands, out_type).compile()
  kernels = compiled.as_text().count('custom_call_target="jgg_')
  if kernels != CALLS:  # a pipeline that drops the barrier merges the calls
    raise RuntimeError(f"unrolled program holds {kernels} calls, not {CALLS}")
  out, _ = jax.block_until_ready(compiled(operands, jnp.zeros(out_type.shape, out_type.dtype)))
  times = []
  for _ in range(runs):
    start = time.perf_counter()
    for _ in range(10):
      out, _ = compiled(operands, out)
    jax.block_until_ready(out)
    times.append((time.perf_counter() - start) / (10 * CALLS))
  return sorted(times)[len(times) // 2]


def main():
  plan = wp.Plan(shapes=[], passes=[], competitors=[], calls=CALLS, runs=20, min_runs=20,
                 run_budget_s=float("inf"), copy_bytes=1 << 30)
  timer = jax_loop.LoopTimer(plan)
  big = jax_competitors._time_copy(timer, plan.copy_bytes)
  big_gbs = big["bytes_moved"] / big["seconds"] / 1e9
  print(f"copy 1 GiB: {big_gbs:.0f} GB/s", flush=True)
  loop_hlo = jax.jit(lambda x: lax.fori_loop(0, CALLS, lambda i, c: c + 1, x)).lower(
      jnp.ones((4,))).compile().as_text()
  print("while loop backend config:", [l.strip()[:300] for l in loop_hlo.splitlines()
                                       if " while(" in l], flush=True)
  for shape_name, tensor, op in ROWS:
    shape = shapes_lib.by_name([shape_name])[0]
    x, sizes = mxfp8_bench._operands(shape, tensor)
    fn, operands, moved = mxfp8_bench._call(op, x, sizes, jgg.mxfp8.quantize(x, sizes))
    loop = timer(fn, operands)
    unrolled = unrolled_seconds(fn, operands)
    copy = jax_competitors._time_copy(timer, moved // 2)
    print(f"{shape_name:>10} {tensor:>10} {op:>17}: loop {loop['seconds'] * 1e6:8.1f} us "
          f"({loop['method']}), unrolled {unrolled * 1e6:8.1f} us, copy of the same bytes "
          f"{copy['seconds'] * 1e6:8.1f} us; % of 1 GiB copy: loop "
          f"{100 * moved / loop['seconds'] / 1e9 / big_gbs:5.1f}, unrolled "
          f"{100 * moved / unrolled / 1e9 / big_gbs:5.1f}, same-bytes copy "
          f"{100 * moved / copy['seconds'] / 1e9 / big_gbs:5.1f}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
