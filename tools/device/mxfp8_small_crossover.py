"""Kernel time of MXFP8 quantize / dequantize on activations of growing token counts.

Activations [tokens, 4096] bf16 over 64 experts (uniform routing), every op of the mxfp8
bench, timed under the profiler (mean duration of the op's kernels over the last loop of
mxfp8_timeline's loop). Run it with JGG_MXFP8_SMALL=1 (the small kernels wherever they serve)
and =0 (the persistent kernels) to see where the small kernels stop paying: the size limit of
mxfp8_cuda.cu. CROSSOVER_TOKENS=512,768 picks other token counts. Run on the device:
  JGG_MXFP8_SMALL=1 PYTHONPATH=python:tests:. python3 tools/device/mxfp8_small_crossover.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys

import jax

import jax_grouped_gemm as jgg
from tools.bench import mxfp8_bench
from tools.bench import shapes as shapes_lib
from tools.device import mxfp8_timeline

TOKENS = tuple(int(t) for t in
               os.environ.get("CROSSOVER_TOKENS", "256,1024,2048,4096,8192").split(","))
HIDDEN, EXPERTS = 4096, 64


def kernel_microseconds(fn, operands):
  """(kernel name, mean duration of the MXFP8 kernels per call) in the profiled loop."""
  events = mxfp8_timeline.loop_events(fn, operands)
  ours = [(name, duration) for name, _, duration in events if "mxfp8_kernels" in name]
  kernel = ours[0][0].split("<")[0].split("::")[-1] if ours else "none"
  return kernel, sum(d for _, d in ours) / 1e3 / mxfp8_timeline.CALLS


def main(argv):
  rows = []
  for tokens in TOKENS:
    shape = shapes_lib.GroupedGemmShape(f"t{tokens}", tokens, HIDDEN, 1536, EXPERTS)
    x, sizes = mxfp8_bench._operands(shape, "activation")
    for op in mxfp8_bench.OPS:
      fn, operands, moved = mxfp8_bench._call(op, x, sizes, jgg.mxfp8.quantize(x, sizes))
      kernel, us = kernel_microseconds(fn, operands)
      rows.append(dict(tokens=tokens, op=op, bytes_moved=moved, kernel=kernel, us=us))
      print(f"{tokens:6d} tokens {op:17s} {moved / 2**20:7.1f} MB  {kernel:24s} {us:8.2f} us",
            flush=True)
  if argv:
    with open(argv[0], "w") as f:
      json.dump(dict(device=jax.devices()[0].device_kind,
                     small=os.environ.get("JGG_MXFP8_SMALL"), rows=rows), f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
