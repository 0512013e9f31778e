"""Every GPU of a process runs every op, not only the first one used.

Kernel set-up the handlers keep between calls (the MXFP8 wide kernels' dynamic shared memory
opt-in, cached occupancy, device properties) belongs to one device; a process that drives
several GPUs (one per shard) must get the same bytes on each. Each op runs on GPU 0 first,
then on the others, and is compared byte for byte with GPU 0 (the kernels are deterministic)
and, for quantize / dequantize, with the CPU handler.
"""

import jax
import jax.numpy as jnp
import numpy as np

import jax_grouped_gemm as jgg
from conftest import requires_two_gpus
from test_mxfp8_cuda import _bytes, _on  # quantize + dequantize outputs of one device

mxfp8 = jgg.mxfp8


def _outputs(device, x, w, sizes):
  outs = _on(device, x, sizes, rowwise=True, colwise=True)
  x, w, sizes = (jax.device_put(jnp.asarray(a), device) for a in (x, w, sizes))
  outs["ragged_dot_bf16"] = jgg.ragged_dot(x, w, sizes)
  w_colwise = mxfp8.quantize(w, colwise=True, rowwise=False)
  outs["ragged_dot_mxfp8"] = mxfp8.ragged_dot(outs["q"], w_colwise, sizes)
  # 64 rows per group: the fused wgmma kernel (its shared-memory opt-in is per device).
  tens_of_rows = jnp.full((len(sizes),), 64, jnp.int32)
  outs["ragged_dot_mxfp8_tens_of_rows"] = mxfp8.ragged_dot(
      mxfp8.quantize(x[: 64 * len(sizes)]), w_colwise, jax.device_put(tens_of_rows, device))
  return [(jax.tree_util.keystr(path), _bytes(a))
          for path, a in jax.tree_util.tree_leaves_with_path(outs)]


@requires_two_gpus
def test_every_gpu_gives_the_bytes_of_the_first():
  rng = np.random.default_rng(4)
  sizes = np.asarray([1000, 0, 1, 31, 33, 127, 129, 2000], np.int32)  # sum 3321 < 4096 rows
  # 4096 x 2048 activations take the wide quantize / dequantize kernels (dynamic shared memory).
  x = rng.standard_normal((4096, 2048)).astype(jnp.bfloat16)
  w = (rng.standard_normal((len(sizes), 2048, 256)) * 0.05).astype(jnp.bfloat16)
  cpu = dict((name, got) for name, got in _outputs(jax.devices("cpu")[0], x, w, sizes)
             if not name.startswith("['ragged_dot"))  # the CPU GEMMs sum in another order
  gpus = jax.devices("gpu")
  first = _outputs(gpus[0], x, w, sizes)
  on_cpu_too = [(name, got) for name, got in first if name in cpu]
  assert len(on_cpu_too) == len(cpu)
  for name, got in on_cpu_too:
    np.testing.assert_array_equal(got, cpu[name], err_msg=f"GPU 0 vs CPU: {name}")
  for device in gpus[1:]:
    for (name, want), (_, got) in zip(first, _outputs(device, x, w, sizes)):
      np.testing.assert_array_equal(got, want, err_msg=f"{device} vs GPU 0: {name}")
