"""What splitting a grouped GEMM's last round of tiles along K buys, by the size of that round.

Run on the device twice, with the split allowed and not:
  PYTHONPATH=python:tests:. python3 tools/device/tail_split_probe.py
  JGG_SM90_TAIL_SPLIT=0 PYTHONPATH=python:tests:. python3 tools/device/tail_split_probe.py
Forward bf16 GEMMs of one 256-column tile per group row tile (N = 256), K = 4096 (64 k-tiles),
groups of 1-4 row tiles, sized so the GEMM has 2 full rounds of tiles (one per SM) and a
last round of r tiles; prints microseconds per call (median of 7 timings of 20 calls) for each r.
Without the split a last round of r > 0 tiles costs a whole tile's time; with it, r <= 32
tiles run as 4 or fewer pieces each (kernels/cuda/sm90/tail_split_sm90.cuh).
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_grouped_gemm as jgg


def sizes_with_row_tiles(row_tiles, rng):
  sizes = []
  while row_tiles > 0:
    tiles = min(int(rng.integers(1, 5)), row_tiles)
    sizes.append(128 * (tiles - 1) + int(rng.integers(65, 129)))
    row_tiles -= tiles
  return sizes


def time_call(fn, *args, calls=20, runs=7):
  out = fn(*args)
  out.block_until_ready()
  timings = []
  for _ in range(runs):
    start = time.perf_counter()
    for _ in range(calls):
      out = fn(*args)
    out.block_until_ready()
    timings.append((time.perf_counter() - start) / calls)
  return float(np.median(timings))


def main():
  sms = jax.devices("gpu")[0].core_count
  k, n = 4096, 256
  split = os.environ.get("JGG_SM90_TAIL_SPLIT", "1") != "0"
  print(f"SMs {sms}, K {k}, N {n}, split {'allowed' if split else 'off'}")
  print("| last round r | tiles | groups | us per call |")
  print("|---:|---:|---:|---:|")
  fn = jax.jit(jgg.ragged_dot)
  for r in (0, 1, 3, 12, 32, 48, 100):
    rng = np.random.default_rng(r)
    sizes = sizes_with_row_tiles(2 * sms + r, rng)
    m = sum(sizes)
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((len(sizes), k, n)), jnp.bfloat16)
    us = 1e6 * time_call(fn, x, w, jnp.asarray(sizes, jnp.int32))
    print(f"| {r} | {2 * sms + r} | {len(sizes)} | {us:.1f} |")


if __name__ == "__main__":
  main()
