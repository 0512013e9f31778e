"""GPU-only MXFP8 checks: the CUDA kernels equal the CPU kernels byte for byte on large and
awkward inputs (hardware cvt vs integer rounding, vector vs scalar paths, many CTAs), and are
captured in XLA command buffers and replayed with new group sizes.

(test_mxfp8*.py also run on the GPU unchanged, against the NumPy reference.) Under
compute-sanitizer: see tools/bench/mxfp8_bench.py's docstring for the command.
"""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native
import command_buffers
from conftest import requires_gpu

mxfp8 = jgg.mxfp8


def _values(seed, shape, dtype):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape, np.float32) * np.exp2(rng.integers(-40, 40, shape)).astype(np.float32)
  x[rng.random(shape) < 0.03] = 0.0
  x[rng.random(shape) < 0.002] = np.nan
  flat = x.reshape(-1)
  flat[:4] = [np.inf, -np.inf, 2.0 ** -140, -0.0]
  with np.errstate(over="ignore"):
    return x.astype(dtype)


def _on(device, x, sizes, **kw):
  x = jax.device_put(jnp.asarray(x), device)
  sizes = None if sizes is None else jax.device_put(jnp.asarray(sizes, jnp.int32), device)
  q = mxfp8.quantize(x, sizes, **kw)
  outs = {"q": q}
  for c in (False, True):
    if (q.colwise if c else q.rowwise):
      outs[f"deq_{c}"] = mxfp8.dequantize(q, jnp.float32, colwise=c)
      outs[f"deq_bf16_{c}"] = mxfp8.dequantize(q, jnp.bfloat16, colwise=c)
  return outs


def _bytes(a):
  a = np.asarray(a)
  return a.view(np.uint8)


def _assert_cpu_equals_gpu(x, sizes, **kw):
  cpu = _on(jax.devices("cpu")[0], x, sizes, **kw)
  gpu = _on(jax.devices("gpu")[0], x, sizes, **kw)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(cpu), jax.tree.leaves(gpu)):
    np.testing.assert_array_equal(_bytes(b), _bytes(a), err_msg=jax.tree_util.keystr(path))


CASES = {
    # name: (shape, sizes, ragged_axis)
    "activations_bf16": ((4096, 2048), [1000, 0, 1, 31, 33, 127, 129, 2000], 0),
    "odd_columns": ((1000, 333), [500, 0, 499], 0),
    "varying_last": ((96, 4104), [1, 2000, 33, 0, 2000], 1),
    "weights_stack": ((4, 512, 768), None, 0),
    "varying_both": ((3, 300, 520), [[300, 520], [17, 7], [129, 300]], 0),
    # Wide tiles (mxfp8_wide_kernels.cuh) with groups whose last 16-byte chunk is partly data.
    "varying_both_wide": ((3, 300, 512), [[300, 512], [17, 7], [129, 300]], 0),
    "many_groups": ((20000, 256), list(np.random.default_rng(0).integers(0, 150, 256)), 0),
    # Small calls: a skewed decode batch (groups of 1 to 83 rows: tiles of one, two and four
    # strips), and groups of 17 rows filling the small grid's worst case of strips exactly.
    "decode_skewed": ((256, 1024),
                      [83, 0, 23, 23, 16, 11, 9, 8, 5, 5, 4, 3, 2, 1, 1, 0, 17, 24, 12], 0),
    "tight_strip_bound": ((204, 512), [17] * 12, 0),
}


@requires_gpu
@pytest.mark.parametrize("in_dtype", [jnp.bfloat16, jnp.float32, jnp.float16],
                         ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("case", CASES)
def test_cuda_equals_cpu_byte_for_byte(case, in_dtype):
  shape, sizes, axis = CASES[case]
  x = _values(len(case), shape, in_dtype)
  for fp8, rowwise, colwise, scale_layout in (
      (jnp.float8_e4m3fn, True, True, "compact"), (jnp.float8_e5m2, True, True, "swizzled"),
      (jnp.float8_e4m3fn, True, False, "swizzled"), (jnp.float8_e4m3fn, False, True, "compact")):
    _assert_cpu_equals_gpu(x, sizes, ragged_axis=axis, rowwise=rowwise, colwise=colwise,
                           scale_layout=scale_layout, dtype=fp8)


@requires_gpu
def test_every_float32_bit_pattern_class_cpu_equals_gpu():
  rng = np.random.default_rng(1)
  x = rng.integers(0, 1 << 32, size=(2048, 512), dtype=np.uint64).astype(np.uint32).view(np.float32)
  for fp8 in (jnp.float8_e4m3fn, jnp.float8_e5m2):
    _assert_cpu_equals_gpu(x, None, rowwise=True, colwise=True, dtype=fp8)


def _every_code_with_every_scale(cols, fp8):
  """A dense MXFP8Tensor (256 x cols) holding each of the 256 codes with each of the 256 scale
  bytes in both orientations: rowwise rows repeat the codes (scale of row r, block b: r + b),
  colwise row r is code r (scale of block row i, column c: c + 37 i)."""
  rows = 256
  codes = np.arange(rows, dtype=np.uint8)
  row_data = np.tile(np.resize(codes, cols), (rows, 1))
  col_data = np.repeat(codes[:, None], cols, axis=1)
  row_dims = (128 * -(-rows // 128), 4 * -(-cols // 128))
  col_dims = (4 * -(-rows // 128), 128 * -(-cols // 128))
  row_scales = (np.arange(row_dims[0])[:, None] + np.arange(row_dims[1])) % 256
  col_scales = (np.arange(col_dims[1]) + 37 * np.arange(col_dims[0])[:, None]) % 256
  as_fp8 = lambda a: jax.lax.bitcast_convert_type(jnp.asarray(a), fp8)
  scales = lambda a: jnp.asarray(a.astype(np.uint8))  # a matrix's compact scale leaf
  return mxfp8.MXFP8Tensor(as_fp8(row_data), scales(row_scales), as_fp8(col_data),
                           scales(col_scales), None, "dense", "compact")


@requires_gpu
@pytest.mark.parametrize("fp8", [jnp.float8_e4m3fn, jnp.float8_e5m2], ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("cols", [512, 264], ids=["wide_tiles", "strips"])
def test_dequantize_every_code_with_every_scale_cpu_equals_gpu(cols, fp8):
  """The kernels' integer path (ExactScaling) and its per-element fallback on the hardware."""
  q = _every_code_with_every_scale(cols, fp8)
  cpu_q, gpu_q = (jax.device_put(q, jax.devices(kind)[0]) for kind in ("cpu", "gpu"))
  for colwise in (False, True):
    for out_dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
      want = mxfp8.dequantize(cpu_q, out_dtype, colwise=colwise)
      got = mxfp8.dequantize(gpu_q, out_dtype, colwise=colwise)
      np.testing.assert_array_equal(_bytes(got), _bytes(want),
                                    err_msg=f"colwise={colwise} {jnp.dtype(out_dtype).name}")


# Run in a fresh process: XLA_FLAGS are read once, when the backend starts.
_COMMAND_BUFFER_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    import jax_grouped_gemm as jgg
    mx = jgg.mxfp8

    def mxfp8_step(x, sizes):
      q = mx.quantize(x, sizes, rowwise=True, colwise=True, scale_layout="swizzled")
      return q, mx.dequantize(q, jnp.bfloat16), mx.dequantize(q, jnp.float32, colwise=True)

    step = jax.jit(mxfp8_step)
    cpu = jax.devices("cpu")[0]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((1024, 512)), jnp.bfloat16)
    for sizes in ([256, 256, 256, 256], [1024, 0, 0, 0], [0, 0, 0, 0], [10, 700, 0, 3],
                  [-4, 2000, 1, 1]):
      sizes = jnp.asarray(sizes, jnp.int32)
      got = step(x, sizes)
      want = step(jax.device_put(x, cpu), jax.device_put(sizes, cpu))  # runs where its inputs are
      for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
    print("replays ok")
""")


@requires_gpu
def test_captured_in_command_buffer_and_replays_with_new_group_sizes(tmp_path):
  ours = command_buffers.custom_calls_after_capture(_COMMAND_BUFFER_SCRIPT, tmp_path, "mxfp8_step")
  assert len(ours) >= 3 and all(map(command_buffers.nested_in_a_command_buffer, ours)), ours
  assert _native.MXFP8_QUANTIZE_TARGET and _native.CUDA_BUILT
