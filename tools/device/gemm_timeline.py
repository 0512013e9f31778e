"""The device timeline of the grouped GEMM bench loop: what one call of ours costs besides
the CUTLASS kernel (schedule, row zeroing and problem-array kernels, loop overhead, gaps).

Same method as mxfp8_timeline.py (jax.profiler trace of the bench's jitted loop, read back
with jax.profiler.ProfileData). Run on the device:
  PYTHONPATH=python:tests:. python3 tools/device/gemm_timeline.py [shape,... [pass,...]]
"""

from __future__ import annotations

import sys

import jax.numpy as jnp

from mxfp8_timeline import timeline
from tools.bench import jax_competitors
from tools.bench import shapes as shapes_lib

DEFAULT_SHAPES = "qwen3-30b,deepseek-ep8"


def main(argv):
  names = (argv[1] if len(argv) > 1 else DEFAULT_SHAPES).split(",")
  passes = argv[2].split(",") if len(argv) > 2 else shapes_lib.PASSES
  for shape in shapes_lib.by_name(names):
    operands = jax_competitors._random_operands(shape.dims)
    sizes = jnp.asarray(shape.group_sizes())
    for pass_name in passes:
      fn = jax_competitors._grouped_fn("ours", pass_name)
      timeline(fn, jax_competitors._pass_operands(operands, pass_name) + (sizes,),
               f"{shape.name} {pass_name}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
