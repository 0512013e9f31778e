"""One call of the fused MXFP8 GEMM (forward or dgrad) on a decode shape, for Nsight Compute:

  ncu --kernel-name regex:Mxfp8RaggedM -c 1 --section SpeedOfLight --section Occupancy \\
      --section WarpStateStats python3 tools/device/profile_fused_mxfp8.py [--gemm dgrad] \\
      [--shape decode-zipf] [--contraction 32]

--contraction sets the GEMM's contracted size (the hidden size forward, the ffn size dgrad),
as tools/device/fused_fixed_cost.py does, to see a call's fixed time alone.

(PYTHONPATH: the checkout's python/ and the repository root.)"""

import argparse
import dataclasses

import jax
import jax.numpy as jnp

import jax_grouped_gemm as jgg
from jax_grouped_gemm.mxfp8_gemm import DGRAD_DIMENSION_NUMBERS
from tools.bench import shapes

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--gemm", choices=["fwd", "dgrad"], default="fwd")
parser.add_argument("--shape", default="decode", help="a shape of tools/bench/shapes.py")
parser.add_argument("--contraction", type=int, help="the contracted size (default: the shape's)")
args = parser.parse_args()

shape = shapes.by_name([args.shape])[0]
if args.contraction:
  shape = dataclasses.replace(shape, **{"hidden" if args.gemm == "fwd" else "ffn": args.contraction})
m, k, n, g = shape.dims
key_x, key_w = jax.random.split(jax.random.key(0))
group_sizes = jnp.asarray(shape.group_sizes())
w = jax.random.normal(key_w, (g, k, n), jnp.bfloat16)
if args.gemm == "fwd":
  qx = jgg.mxfp8.quantize(jax.random.normal(key_x, (m, k), jnp.bfloat16), group_sizes)
  qw = jgg.mxfp8.quantize(w, rowwise=False, colwise=True)
  out = jax.jit(jgg.mxfp8.ragged_dot)(qx, qw, group_sizes)
else:  # dy [m, n] . w^T, w read rowwise in place
  qdy = jgg.mxfp8.quantize(jax.random.normal(key_x, (m, n), jnp.bfloat16), group_sizes)
  qw = jgg.mxfp8.quantize(w)
  out = jax.jit(lambda a, b, s: jgg.mxfp8.ragged_dot_general(a, b, s, DGRAD_DIMENSION_NUMBERS))(
      qdy, qw, group_sizes)
print(args.gemm, out.dtype, out.shape, float(jnp.abs(out.astype(jnp.float32)).mean()))
