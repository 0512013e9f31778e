"""Does XLA turn a layout-constrained tile view of a custom call's operands into bitcasts?

Compiles (does not run) a quantize call whose x [G, M, N] is passed as a
[G, M/128, N/128, 128, 128] view with a custom layout equal to x's row-major
bytes, and prints the optimized HLO's non-trivial instructions: a copy or a
transpose fusion means the view costs a pass over memory.
"""
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jax_grouped_gemm import _native, batch_partitionable

G, M, N = 4, 1024, 2048
RC, CC = M // 128, N // 128
TARGET = batch_partitionable.batched_target(_native.MXFP8_QUANTIZE_TARGET)
VIEW_ORDER = (0, 1, 3, 2, 4)  # major-to-minor: g, row chunk, row, column chunk, column


def program(x):
  view = x.reshape(G, RC, 128, CC, 128).transpose(0, 1, 3, 2, 4)
  data, scales = jax.ffi.ffi_call(
      TARGET, (jax.ShapeDtypeStruct(view.shape, jnp.float8_e4m3fn),
               jax.ShapeDtypeStruct((G, RC, CC, 128, 4), jnp.uint8)),
      input_layouts=[VIEW_ORDER, None], output_layouts=[VIEW_ORDER, VIEW_ORDER])(
          view, jnp.zeros((G, RC, CC, 0), jnp.int32), layout=np.int32(0))
  return (data.transpose(0, 1, 3, 2, 4).reshape(G, M, N),
          scales.transpose(0, 1, 3, 2, 4).reshape(G, M, CC * 4))


text = jax.jit(program).lower(jnp.ones((G, M, N), jnp.bfloat16)).compile().as_text()
print(jax.devices()[0].device_kind)
for line in text.splitlines():
  if re.search(r"\b(copy|transpose|fusion|custom-call)\(", line):
    print(line.strip()[:220])
sys.exit(0)
