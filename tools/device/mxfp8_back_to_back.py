"""Eight decode-activation quantizes back to back in one jitted function, under the profiler.

Each kernel then follows one of its own (same shared-memory carveout, no XLA fusion between),
so its duration is the kernel's own, whatever runs before it in a benchmark loop.
Run on the device: PYTHONPATH=python:tests:. python3 tools/device/mxfp8_back_to_back.py
"""

from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp

import jax_grouped_gemm as jgg
from tools.bench import mxfp8_bench
from tools.bench import shapes as shapes_lib
from tools.device import mxfp8_timeline

CALLS = 8


def main():
  shape = shapes_lib.by_name(["decode"])[0]
  x, sizes = mxfp8_bench._operands(shape, "activation")
  xs = jnp.stack([x * (i + 1) for i in range(CALLS)])

  @jax.jit
  def quantize_each(xs, sizes):
    return [jgg.mxfp8.quantize(xs[i], sizes).data for i in range(CALLS)]

  for _ in range(2):
    jax.block_until_ready(quantize_each(xs, sizes))
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir):
      jax.block_until_ready(quantize_each(xs, sizes))
    events = mxfp8_timeline.device_events(trace_dir)
  for name, start, duration in events:
    print(f"{name[:60]:60s} start {(start - events[0][1]) / 1e3:9.2f} us  {duration / 1e3:6.2f} us")


if __name__ == "__main__":
  main()
