"""How an activation's width and size move the MXFP8 quantize / dequantize rate (issue 5).

The mixtral activation ([16384, 4096] bf16, 8 groups) reaches a smaller share of a copy of
its bytes than the deepseek and qwen3 activations do. This times the bench's ops on
activations of about its bytes but other widths (power-of-two row strides and others), and on
twice its rows, each split into 8 equal groups, in the bench's loop, beside a copy of the same
bytes: does the width, the row stride or the call's size set the shortfall?
Run on the device: PYTHONPATH=python:tests:. python3 tools/device/mxfp8_width_probe.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import jax_grouped_gemm as jgg
from tools.bench import mxfp8_bench

SHAPES = ((16384, 4096), (16384, 3840), (16384, 4352), (8192, 8192), (32768, 2048),
          (9344, 7168), (32768, 4096))
OPS = ("quantize_rowwise", "quantize_colwise", "dequantize")
GROUPS = 8


def main():
  timer, copy = mxfp8_bench.timer_and_copy(calls=30, runs=20)
  copy_gbs = copy["gb_per_s"]
  print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}: device copy {copy_gbs:.0f} GB/s")
  print("| rows x cols | op | us/call | % of copy | % of same-bytes copy |\n"
        "|---|---|---:|---:|---:|")
  same_bytes_copy = {}  # rowwise and colwise move the same bytes: one copy times both
  for rows, cols in SHAPES:
    x = jax.random.normal(jax.random.key(rows + cols), (rows, cols), jnp.bfloat16)
    sizes = jnp.full((GROUPS,), rows // GROUPS, jnp.int32)
    reference = jgg.mxfp8.quantize(x, sizes)
    for op in OPS:
      fn, operands, moved = mxfp8_bench._call(op, x, sizes, reference)
      seconds = timer(fn, operands)["seconds"]
      same = mxfp8_bench.same_bytes_copy_seconds(timer, moved, same_bytes_copy)
      print(f"| {rows} x {cols} | {op} | {seconds * 1e6:.1f} | "
            f"{100 * moved / seconds / 1e9 / copy_gbs:.1f} | {100 * same / seconds:.1f} |",
            flush=True)
    del x, reference


if __name__ == "__main__":
  main()
