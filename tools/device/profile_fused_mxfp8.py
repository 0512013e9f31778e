"""One call of the fused MXFP8 forward on the decode shape, for Nsight Compute:

  ncu --kernel-name regex:Mxfp8RaggedM -c 1 --section SpeedOfLight --section Occupancy \\
      --section WarpStateStats python3 tools/device/profile_fused_mxfp8.py

(PYTHONPATH: the checkout's python/ and the repository root.)"""

import jax
import jax.numpy as jnp

import jax_grouped_gemm as jgg
from tools.bench import shapes

shape = shapes.by_name(["decode"])[0]
m, k, n, g = shape.dims
key_x, key_w = jax.random.split(jax.random.key(0))
group_sizes = jnp.asarray(shape.group_sizes())
qx = jgg.mxfp8.quantize(jax.random.normal(key_x, (m, k), jnp.bfloat16), group_sizes)
qw = jgg.mxfp8.quantize(jax.random.normal(key_w, (g, k, n), jnp.bfloat16), rowwise=False,
                        colwise=True)
out = jax.jit(jgg.mxfp8.ragged_dot)(qx, qw, group_sizes)
print(out.dtype, out.shape, float(jnp.abs(out.astype(jnp.float32)).mean()))
