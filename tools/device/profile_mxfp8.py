"""One call of each MXFP8 quantize/dequantize kernel on anchor-sized operands, for a profiler.

Run on the GPU machine from the repository root, under Nsight Compute, e.g.
  ncu --clock-control none -k regex:QuantizeKernel --section SpeedOfLight \\
      --section WarpStateStats --section Occupancy --section LaunchStats \\
      python3 tools/device/profile_mxfp8.py rowwise both
(PYTHONPATH must hold python/ and the repository root). Arguments: which ops to run, of
rowwise, colwise, both, dequantize (default: all four), each on the mixtral activation
x [16384, 4096] grouped by the anchor routing and on one mixtral weight stack
w [8, 4096, 14336], bf16.
"""

import sys

import jax
import jax.numpy as jnp

import jax_grouped_gemm as jgg
from tools.bench import shapes as shapes_lib

OPS = {"rowwise": (True, False), "colwise": (False, True), "both": (True, True)}


def main(ops):
  shape = shapes_lib.by_name(["mixtral"])[0]
  m, k, n, g = shape.dims
  x = jax.random.normal(jax.random.key(0), (m, k), jnp.bfloat16)
  w = jax.random.normal(jax.random.key(1), (g, k, n), jnp.bfloat16)
  sizes = jnp.asarray(shape.group_sizes(), jnp.int32)
  for op in ops:
    for name, tensor, group_sizes in (("activation", x, sizes), ("weight", w, None)):
      if op == "dequantize":
        q = jgg.mxfp8.quantize(tensor, group_sizes)
        out = jax.jit(lambda q: jgg.mxfp8.dequantize(q, jnp.bfloat16))(q)
      else:
        rowwise, colwise = OPS[op]
        out = jax.jit(lambda t, s: jgg.mxfp8.quantize(t, s, rowwise=rowwise, colwise=colwise))(
            tensor, group_sizes)
      jax.block_until_ready(out)
      print(op, name, "done", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:] or ["rowwise", "colwise", "both", "dequantize"])
