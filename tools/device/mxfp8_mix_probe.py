"""MXFP8 quantize / dequantize against XLA fusions with the same read:write mix of bytes.

Run on the device: PYTHONPATH=python:tests:. python3 tools/device/mxfp8_mix_probe.py
On the mixtral activation ([16384, 4096] bf16, 8 groups), each of our ops and an XLA fusion
moving the same bytes in the same proportions (dequantize reads 1 byte per element and writes
2: "widen"; quantize rowwise reads 2 and writes 1: "narrow"; rowwise + colwise reads 2 and
writes 1 + 1: "split"), plus x + 1 copies of 3 and 4 bytes per element: the bench's time per
call (tools/bench/jax_loop.LoopTimer, as mxfp8_bench) against a 1 GiB copy, then each loop's
device timeline (mxfp8_timeline.timeline: kernel times without the loop's own activities).
Whether a row's shortfall is its kernel, the loop, or the mix of reads and writes.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp

import jax_grouped_gemm as jgg
from tools.bench import jax_competitors, mxfp8_bench
from tools.bench import shapes as shapes_lib

sys.path.insert(0, os.path.dirname(__file__))
import mxfp8_timeline  # noqa: E402  (a sibling script, not a package)


def widen(codes):  # 1 byte read, 2 written per element: dequantize's mix
  return codes.astype(jnp.uint16) * jnp.uint16(3)


def narrow(x):  # 2 read, 1 written: quantize rowwise's
  return (jax.lax.bitcast_convert_type(x, jnp.uint16) >> 7).astype(jnp.uint8)


def split(x):  # 2 read, 1 + 1 written: rowwise + colwise's
  u = jax.lax.bitcast_convert_type(x, jnp.uint16)
  return jnp.concatenate([(u >> 8).astype(jnp.uint8), (u & 0xFF).astype(jnp.uint8)], axis=0)


def copy_of(nbytes):
  """(fn, operands) of x + 1 over nbytes / 2 bytes of uint32 (nbytes read + written)."""
  return jax_competitors._stream_add, (jnp.arange(nbytes // 8, dtype=jnp.uint32),
                                       jnp.ones((1,), jnp.uint32))


def main():
  timer, copy = mxfp8_bench.timer_and_copy(calls=10, runs=20)
  copy_gbs = copy["gb_per_s"]
  print(f"copy of 1 GiB: {copy_gbs:.0f} GB/s", flush=True)
  shape = shapes_lib.by_name(["mixtral"])[0]
  x, sizes = mxfp8_bench._operands(shape, "activation")
  quantized = jgg.mxfp8.quantize(x, sizes)
  rows = []
  for op in mxfp8_bench.OPS:
    fn, operands, moved = mxfp8_bench._call(op, x, sizes, quantized)
    rows.append((op, fn, operands, moved))
  n = x.size
  rows += [("xla widen u8 -> u16", widen, (quantized.data.view(jnp.uint8),), 3 * n),
           ("xla narrow bf16 -> u8", narrow, (x,), 3 * n),
           ("xla split bf16 -> 2 x u8", split, (x,), 4 * n),
           ("xla copy, 3 bytes/element", *copy_of(3 * n), 3 * n),
           ("xla copy, 4 bytes/element", *copy_of(4 * n), 4 * n)]
  for label, fn, operands, moved in rows:
    fields = timer(fn, operands)
    gbs = moved / fields["seconds"] / 1e9
    print(f"{label:>26}: {fields['seconds'] * 1e6:8.1f} us {gbs:6.0f} GB/s "
          f"{100 * gbs / copy_gbs:5.1f}% of copy ({fields['method']})", flush=True)
  for label, fn, operands, _ in rows:
    mxfp8_timeline.timeline(fn, operands, label)
  return 0


if __name__ == "__main__":
  sys.exit(main())
