"""How an activation's grouping moves the MXFP8 quantize / dequantize time (issue 5).

For the activation of each shape named (default: qwen3-30b and deepseek-ep8), times the ops
of tools/bench/mxfp8_bench.py on the same x [M, K] under several group-size vectors with the
same M, in the bench's loop: the anchor routing's sizes, those rounded to multiples of 32
(no partial 32-row tile) and of 128 (no scale-tile padding), equal sizes, one group of M
rows, and no group sizes at all (a plain matrix). A difference between rows is what the
grouping itself costs: partial tiles, scale padding, locating jobs among many groups.
Run on the device: PYTHONPATH=python:tests:. python3 tools/device/mxfp8_group_probe.py [shape ...]
For a profiler, ONCE=1 calls each op once per grouping instead of timing it, and OPS / GROUPINGS
(comma-separated) pick some of them, e.g.
  ONCE=1 OPS=quantize_both GROUPINGS="one group,equal" ncu -k regex:QuantizeWide \
      --section WarpStateStats --section SourceCounters -o r python3 tools/device/mxfp8_group_probe.py qwen3-30b
"""

from __future__ import annotations

import functools
import os
import sys

import numpy as np

from tools.bench import mxfp8_bench
from tools.bench import shapes as shapes_lib


def _ops(sizes) -> tuple:
  """The bench's ops for a grouping (its dequantize reads grouped codes: none without sizes)."""
  return mxfp8_bench.OPS if sizes is not None else mxfp8_bench.OPS[:3]


def _rounded(sizes: np.ndarray, multiple: int) -> np.ndarray:
  """sizes rounded down to `multiple`, the rows lost added to the largest group (same sum).

  The total stays M; M is a multiple of 128 for every anchor, so the result is too."""
  out = (sizes // multiple) * multiple
  out[np.argmax(out)] += int(sizes.sum() - out.sum())
  return out.astype(np.int32)


def groupings(shape: shapes_lib.GroupedGemmShape) -> dict:
  sizes = shape.group_sizes()
  m, g = shape.tokens, shape.experts
  return {"routing": sizes, "multiples of 32": _rounded(sizes, 32),
          "multiples of 128": _rounded(sizes, 128),
          "equal": np.full(g, m // g, np.int32), "one group": np.array([m], np.int32),
          "no group sizes": None}


def _picked(env: str, names) -> list:
  wanted = os.environ.get(env)
  return list(names) if not wanted else [n for n in names if n in wanted.split(",")]


def call_once(names):
  import jax
  import jax.numpy as jnp
  import jax_grouped_gemm as jgg

  for shape in shapes_lib.by_name(names):
    x, _ = mxfp8_bench._operands(shape, "activation")
    table = groupings(shape)
    for label in _picked("GROUPINGS", table):
      sizes = None if table[label] is None else jnp.asarray(table[label])
      ops = _picked("OPS", _ops(sizes))
      # dequantize's input; quantized only when asked for, so a profiler sees only the ops named
      quantize = jgg.mxfp8.quantize if "dequantize" in ops else functools.partial(
          jax.eval_shape, jgg.mxfp8.quantize)
      reference = quantize(x, sizes)
      for op in ops:
        fn, operands, _ = mxfp8_bench._call(op, x, sizes, reference)
        jax.block_until_ready(jax.jit(fn)(*operands))
        print(shape.name, label, op, flush=True)


def main(names):
  import jax
  import jax.numpy as jnp
  import jax_grouped_gemm as jgg

  timer, copy = mxfp8_bench.timer_and_copy(calls=30, runs=20)
  copy_gbs = copy["gb_per_s"]
  print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}: device copy {copy_gbs:.0f} GB/s")
  print("| shape | grouping | op | us/call | % of copy |\n|---|---|---|---:|---:|")
  for shape in shapes_lib.by_name(names):
    x, _ = mxfp8_bench._operands(shape, "activation")
    for label, sizes in groupings(shape).items():
      device_sizes = None if sizes is None else jnp.asarray(sizes)
      reference = jgg.mxfp8.quantize(x, device_sizes)
      for op in _ops(sizes):
        fn, operands, moved = mxfp8_bench._call(op, x, device_sizes, reference)
        seconds = timer(fn, operands)["seconds"]
        print(f"| {shape.name} | {label} | {op} | {seconds * 1e6:.1f} | "
              f"{100 * moved / seconds / 1e9 / copy_gbs:.1f} |", flush=True)
      del reference


if __name__ == "__main__":
  (call_once if os.environ.get("ONCE") else main)(sys.argv[1:] or ["qwen3-30b", "deepseek-ep8"])
