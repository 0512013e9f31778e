"""The device timeline of a benchmark loop: each kernel's duration and the gaps between them.

Runs the mxfp8 bench's loop (jax_loop.call_loop, barrier strategy) for a few rows under
jax.profiler, reads the trace back (jax.profiler.ProfileData) and prints, per row, the GPU
activities of the last loop: kernels and memsets with their durations, and the mean
kernel time against the mean time per call (the rest is gaps: launches, memsets, ramps).
Run on the device: PYTHONPATH=python:tests:. python3 tools/device/mxfp8_timeline.py [shape:tensor:op ...]
"""

from __future__ import annotations

import collections
import functools
import glob
import sys
import tempfile

import jax
import jax.numpy as jnp

import jax_grouped_gemm as jgg
from tools.bench import jax_competitors, jax_loop, mxfp8_bench
from tools.bench import shapes as shapes_lib

ROWS = (("mixtral", "activation", "quantize_rowwise"), ("mixtral", "activation", "dequantize"),
        ("decode", "activation", "quantize_rowwise"), ("qwen3-30b", "weight", "dequantize"))
CALLS = 10


def device_events(trace_dir):
  """[(name, start_ns, duration_ns)] of every GPU activity in the trace, by start."""
  path = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0]
  data = jax.profiler.ProfileData.from_file(path)
  events = []
  for plane in data.planes:
    if not plane.name.startswith("/device:GPU"):
      continue
    for line in plane.lines:
      if "Stream" not in line.name:
        continue
      events += [(e.name, e.start_ns, e.duration_ns) for e in line.events]
  return sorted(events, key=lambda e: e[1])


def loop_events(fn, operands):
  """device_events of the bench's loop of CALLS calls of fn, profiled after two warm loops."""
  carry = jax.eval_shape(fn, *operands)
  loop = jax.jit(functools.partial(jax_loop.call_loop, fn, CALLS, jax_loop.BARRIER),
                 donate_argnums=(1,))  # as the bench does
  out = jax.block_until_ready(loop(operands, jnp.zeros(carry.shape, carry.dtype)))
  out = jax.block_until_ready(loop(operands, out))
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir):
      jax.block_until_ready(loop(operands, out))
    return device_events(trace_dir)


def timeline(fn, operands, label):
  events = loop_events(fn, operands)
  if not events:
    print(f"{label}: no device events in the trace")
    return
  span = (events[-1][1] + events[-1][2] - events[0][1]) / 1e3
  by_name = collections.defaultdict(list)
  for name, _, duration in events:
    by_name[name[:60]].append(duration / 1e3)
  print(f"{label}: {len(events)} activities over {span:.1f} us ({span / CALLS:.1f} us per call)")
  for name, durations in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
    print(f"    {len(durations):3d} x {sum(durations) / len(durations):8.2f} us  {name}")
  gaps = [(b[1] - (a[1] + a[2])) / 1e3 for a, b in zip(events, events[1:])]
  print(f"    gaps between activities: mean {sum(gaps) / len(gaps):.2f} us, max {max(gaps):.2f} us")


def main(argv):
  rows = [tuple(a.split(":")) for a in argv] or ROWS  # shape:tensor:op, e.g. decode:activation:dequantize
  for shape_name, tensor, op in rows:
    shape = shapes_lib.by_name([shape_name])[0]
    x, sizes = mxfp8_bench._operands(shape, tensor)
    fn, operands, moved = mxfp8_bench._call(op, x, sizes, jgg.mxfp8.quantize(x, sizes))
    timeline(fn, operands, f"{shape_name} {tensor} {op}")
    source = jnp.arange(moved // 8, dtype=jnp.uint32)
    timeline(jax_competitors._stream_add, (source, jnp.ones((1,), jnp.uint32)),
             "    copy of the same bytes")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
