"""The fused MXFP8 wgrad ("fused_few_rows" for a ragged contraction): dW[g] = x_g^T . dy_g
with x and dy colwise along the token axis, for calls of few rows per group.

Which calls choose it (static facts only) and which fall back to "dequantize"; its numerics
against float64 products of the dequantized values (mxfp8_gemm_reference.check_product) on
group sizes that exercise every part of the kernel: empty groups (a zero result), a zero
tail (sum < M: rows no group reads), clamped and negative sizes, groups of more than one
32-row block and blocks that do not start at a multiple of 32, K past one 64-row block and
not a multiple of 64, N past one block's 2048 columns and not a multiple of 32 * 8, a group
staged in several parts; groups of at most 8 rows (streamed) and more; x and dy
grouped by sizes other than the GEMM's (scales found per row); both element types, every
result dtype, NaN/Inf blocks. Runs on the default backend (the CPU handler in CI, the CUDA
kernel on a GPU), outputs poisoned first (conftest), so an unwritten element is NaN.
"""

import dataclasses
import functools
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from jax_grouped_gemm import mxfp8_gemm
from jax_grouped_gemm.mxfp8 import scale_layout
from jax_grouped_gemm.mxfp8_gemm import WGRAD_DIMENSION_NUMBERS
import command_buffers
from conftest import requires_gpu
from mxfp8_gemm_reference import check_product, dequantized, fused_and_dequantized, product

mxfp8 = jgg.mxfp8
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2

CASES = {  # (M, K, N, group sizes): x [M, K], dy [M, N] -> dW [G, K, N]
    "decode_like": (40, 96, 64, [3, 0, 9, 1, 17, 0, 2, 4]),
    "zero_tail": (50, 72, 136, [5, 0, 8, 1, 0, 0, 0]),            # sum 14 < 50
    "negative_and_clamped": (30, 64, 264, [-3, 20, 25, 2]),       # 20 + 25 clamps at 30
    # 70 rows: 32-row blocks at 0, 32, 64; K 136: three 64-row blocks, the last of 8 rows;
    # N 520: 65 of a block's 96 threads hold columns.
    "large_group": (80, 136, 520, [70, 0, 3, 0, 0, 0, 0, 7, 0, 0]),
    # 260 rows: staged 128, 128 and 4 at a time; 38 groups keep the average under 8.
    "huge_group": (300, 72, 48, [260, 0, 20, 4] + [0] * 34),
    # Each side of the tensor-core path's bounds (32 and 128 rows), with a 9-row group.
    "tensor_core_bounds": (336, 64, 72, [31, 32, 128, 129, 9] + [0] * 37),
    "one_group": (8, 8, 8, [8]),
    "wide_n": (16, 16, 2064, [5, 11]),  # two column chunks of 2048, the second of 16
    "all_empty": (16, 32, 48, [0, 0, 0, 0]),
}


def _values(rng, shape):
  """Normal values scaled by 2^[-6, 6] per row: blocks get different scale exponents."""
  return rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape[:-1] + (1,)))


def _operands(case, x_fp8=E4M3, dy_fp8=E4M3, seed=0, x_sizes=None, dy_sizes=None):
  """x and dy of `case`, quantized colwise with the GEMM's group sizes unless others are
  given; returns (qx, qdy, group_sizes)."""
  m, k, n, sizes = CASES[case]
  rng = np.random.default_rng(seed + m + 3 * k + n)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  x = jnp.asarray(_values(rng, (m, k)), jnp.bfloat16)
  dy = jnp.asarray(_values(rng, (m, n)), jnp.bfloat16)
  own = lambda s: group_sizes if s is None else jnp.asarray(s, jnp.int32)
  qx = mxfp8.quantize(x, own(x_sizes), rowwise=False, colwise=True, dtype=x_fp8)
  qdy = mxfp8.quantize(dy, own(dy_sizes), rowwise=False, colwise=True, dtype=dy_fp8)
  return qx, qdy, group_sizes


def _problem(qx, qdy, group_sizes, **kw):
  return mxfp8_gemm.resolve_problem(qx, qdy, group_sizes, WGRAD_DIMENSION_NUMBERS, **kw)


def _wgrad(qx, qdy, group_sizes, out_dtype=jnp.float32):
  return mxfp8.ragged_dot_general(qx, qdy, group_sizes, WGRAD_DIMENSION_NUMBERS,
                                  preferred_element_type=out_dtype)


def _check(out, qx, qdy, sizes):
  check_product(out, "wgrad", dequantized(qx, True), dequantized(qdy, True), sizes)


# --- which calls take the fused kernel ------------------------------------------------------

def test_wgrad_of_few_rows_per_group_is_fused():
  for case in CASES:
    assert mxfp8_gemm.choose_backend(_problem(*_operands(case))) == "fused_few_rows", case


def test_wgrad_calls_the_fused_kernel_cannot_take_fall_back_to_dequantize():
  qx, qdy, group_sizes = _operands("decode_like")
  sizes = jnp.asarray([8, 8], jnp.int32)
  colwise = lambda shape, **kw: mxfp8.quantize(jnp.ones(shape, jnp.bfloat16), sizes,
                                               rowwise=False, colwise=True, **kw)
  misfits = {
      "plain dy": _problem(qx, jnp.ones(qdy.shape, jnp.bfloat16), group_sizes),
      "group_offset": _problem(qx, qdy, group_sizes, group_offset=jnp.int32(0)),
      "swizzled scales": _problem(colwise((16, 64), scale_layout="swizzled"),
                                  colwise((16, 64)), sizes),
      "K not a multiple of 8": _problem(colwise((16, 60)), colwise((16, 64)), sizes),
      "N not a multiple of 8": _problem(colwise((16, 64)), colwise((16, 12)), sizes),
      "more than 8 rows per group": _problem(colwise((18, 64)), colwise((18, 64)), sizes),
  }
  for name, problem in misfits.items():
    assert mxfp8_gemm.fused_few_rows_misfit(problem) is not None, name
    assert mxfp8_gemm.choose_backend(problem) == "dequantize", name


def test_wgrad_lowers_to_one_fused_custom_call_without_a_dequantize():
  qx, qdy, group_sizes = _operands("decode_like")
  text = jax.jit(_wgrad).lower(qx, qdy, group_sizes).as_text()
  assert text.count(jgg._native.MXFP8_RAGGED_K_TARGET) == 1
  assert jgg._native.MXFP8_DEQUANTIZE_TARGET not in text


@pytest.mark.parametrize("operand", ["rhs", "rhs_group_sizes", "out"])
def test_hand_written_call_with_a_wrong_shape_names_the_operand(operand):
  """Python checks every call it makes; the handler still checks what a hand-written (or
  hand-edited exported) call passes, and names the buffer."""
  qx, qdy, group_sizes = _operands("decode_like")
  m, k, n, sizes = CASES["decode_like"]
  dy_data = qdy.colwise_data[:-1] if operand == "rhs" else qdy.colwise_data
  dy_sizes = qdy.group_sizes[:-1] if operand == "rhs_group_sizes" else qdy.group_sizes
  out = jax.ShapeDtypeStruct((len(sizes), k, n + (8 if operand == "out" else 0)), jnp.float32)
  call = jax.ffi.ffi_call(jgg._native.MXFP8_RAGGED_K_TARGET, out)
  with pytest.raises(Exception, match=operand):
    jax.block_until_ready(call(qx.colwise_data, qx.colwise_scale_inv.reshape(-1), dy_data,
                               qdy.colwise_scale_inv.reshape(-1), group_sizes, qx.group_sizes,
                               dy_sizes))


# --- numerics -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_wgrad_equals_dequantize_then_f32_matmul(case):
  qx, qdy, group_sizes = _operands(case)
  out = jax.jit(_wgrad)(qx, qdy, group_sizes)
  assert out.shape == (len(CASES[case][3]), CASES[case][1], CASES[case][2])
  _check(out, qx, qdy, CASES[case][3])


@pytest.mark.parametrize("case, x_sizes, dy_sizes", [
    ("decode_like", [20, 0, 15, 0, 0, 0, 0, 0], [3, 0, 9, 1, 17, 0, 2, 4]),
    ("large_group", [40, 0, 45, 0, 0, 0, 0, 0, 0, 0], [1, 33, 30, 16, 0, 0, 0, 0, 0, 0]),
])
def test_operands_grouped_by_other_sizes_than_the_gemm(case, x_sizes, dy_sizes):
  """Each operand's blocks and scales follow its own groups (here with boundaries inside the
  GEMM's groups, and x with a tail of no group, whose rows are 0 in it)."""
  qx, qdy, group_sizes = _operands(case, seed=2, x_sizes=x_sizes, dy_sizes=dy_sizes)
  assert mxfp8_gemm.choose_backend(_problem(qx, qdy, group_sizes)) == "fused_few_rows"
  _check(_wgrad(qx, qdy, group_sizes), qx, qdy, CASES[case][3])


@pytest.mark.parametrize("x_fp8, dy_fp8", [(E5M2, E4M3), (E4M3, E5M2), (E5M2, E5M2)],
                         ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float16])
def test_wgrad_element_types_and_result_dtypes(x_fp8, dy_fp8, out_dtype):
  qx, qdy, group_sizes = _operands("large_group", x_fp8, dy_fp8, seed=3)
  out = _wgrad(qx, qdy, group_sizes, out_dtype)
  assert out.dtype == jnp.dtype(out_dtype)
  _check(out, qx, qdy, CASES["large_group"][3])


def test_wgrad_of_values_bf16_does_not_hold_exactly():
  """A 32-row block of tiny x values (scale 2^-127: its codes times it are finer than bf16's
  subnormals) in a group that otherwise takes the tensor-core path: the block falls back to
  f32 multiply-adds, so the result still matches the exact products."""
  m, k, n, sizes = CASES["large_group"]
  rng = np.random.default_rng(11)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  x = _values(rng, (m, k))
  x[32:64, :8] = rng.standard_normal((32, 8)) * 2.0 ** -124
  x = jnp.asarray(x, jnp.float32)
  dy = jnp.asarray(_values(rng, (m, n)), jnp.bfloat16)
  qx = mxfp8.quantize(x, group_sizes, rowwise=False, colwise=True)
  qdy = mxfp8.quantize(dy, group_sizes, rowwise=False, colwise=True)
  # Nonzero, and below 2^-116: the scale rule gives the block an exponent below 3, under
  # e4m3's bf16-exact range (mxfp8_gemm.BF16_EXACT_SCALE_EXPONENTS).
  tiny = np.abs(np.asarray(dequantized(qx, True))[32:64, :8])
  assert 0 < tiny.max() < 2.0 ** -116
  assert mxfp8_gemm.choose_backend(_problem(qx, qdy, group_sizes)) == "fused_few_rows"
  _check(_wgrad(qx, qdy, group_sizes), qx, qdy, sizes)


def test_wgrad_agrees_with_the_dequantize_backend_on_special_values():
  """NaN and Inf inputs, a zero block, values at the element maximum: the fused kernel's
  NaN/Inf pattern and finite values match the dequantize backend (f32 results)."""
  m, k, n, sizes = CASES["large_group"]
  qx, qdy, group_sizes = _operands("large_group", seed=5)
  a = np.array(dequantized(qx, True), np.float32)
  b = np.array(dequantized(qdy, True), np.float32)
  a[1, 5], a[40, 100] = np.nan, np.inf
  b[2, 33], b[:32, 3] = np.inf, 0.0
  b[32:64, 10] = 448.0
  qx = mxfp8.quantize(jnp.asarray(a), group_sizes, rowwise=False, colwise=True)
  qdy = mxfp8.quantize(jnp.asarray(b), group_sizes, rowwise=False, colwise=True)
  fused, plain = fused_and_dequantized(functools.partial(_problem, qx, qdy, group_sizes))
  np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))
  np.testing.assert_array_equal(np.isinf(fused), np.isinf(plain))
  finite = np.isfinite(plain)
  magnitude = product("wgrad", np.nan_to_num(np.abs(dequantized(qx, True)), posinf=0.0),
                      np.nan_to_num(np.abs(dequantized(qdy, True)), posinf=0.0), sizes)
  bound = 2 * (m + 2) * 2.0 ** -24 * magnitude
  assert (np.abs(fused[finite] - plain[finite]) <= bound[finite]).all()
  assert np.isnan(fused).any() and np.isinf(fused).any()


def test_wgrad_of_a_nan_scale_over_zero_codes_is_nan():
  """A block with the NaN scale (0xFF) dequantizes to NaN even where its codes are zero (the
  quantizer never writes that, a hand-made tensor can): in a tensor-core group (70 rows), the
  column's results are NaN, as on the dequantize backend."""
  m, k, n, sizes = CASES["large_group"]
  qx, qdy, group_sizes = _operands("large_group", seed=7)
  data = np.array(qx.colwise_data)
  scales = np.array(qx.colwise_scale_inv)
  data[32:64, 5] = 0  # x's column 5, token rows 32-63 of group 0: its second 32-row block
  _, row_bytes = scale_layout.padded_scale_dims(sizes[0], k, colwise=True)
  scales[1 * row_bytes + 5] = 0xFF  # group 0's scale matrix comes first, rows of row_bytes
  qx = dataclasses.replace(qx, colwise_data=jnp.asarray(data),
                           colwise_scale_inv=jnp.asarray(scales))
  assert np.isnan(np.asarray(dequantized(qx, True))[32:64, 5]).all()
  fused, plain = fused_and_dequantized(functools.partial(_problem, qx, qdy, group_sizes))
  assert np.isnan(plain[0, 5]).all()
  np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))


# --- graph safety ---------------------------------------------------------------------------

_COMMAND_BUFFER_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    import jax_grouped_gemm as jgg
    from jax_grouped_gemm.mxfp8_gemm import WGRAD_DIMENSION_NUMBERS
    from mxfp8_gemm_reference import check_product, dequantized
    mx = jgg.mxfp8

    def wgrad_step(x, dy, sizes):
      qx = mx.quantize(x, sizes, rowwise=False, colwise=True)
      qdy = mx.quantize(dy, sizes, rowwise=False, colwise=True)
      dw = mx.ragged_dot_general(qx, qdy, sizes, WGRAD_DIMENSION_NUMBERS,
                                 preferred_element_type=jnp.float32)
      return qx, qdy, dw

    step = jax.jit(wgrad_step)
    rng = np.random.default_rng(0)
    m, k, n = 64, 136, 264
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    dy = jnp.asarray(rng.standard_normal((m, n)), jnp.bfloat16)
    for sizes in ([8] * 8, [64] + [0] * 7, [0] * 8, [3, 20, 0, 1, 9, 0, 2, 29],
                  [-4, 100, 1, 1, 0, 0, 0, 0]):
      qx, qdy, dw = step(x, dy, jnp.asarray(sizes, jnp.int32))
      check_product(dw, "wgrad", dequantized(qx, True), dequantized(qdy, True), sizes)
    print("replays ok")
""")


@requires_gpu
def test_wgrad_captured_in_command_buffer_and_replays_with_new_group_sizes(tmp_path):
  ours = command_buffers.custom_calls_after_capture(_COMMAND_BUFFER_SCRIPT, tmp_path,
                                                    "wgrad_step")
  assert len(ours) >= 3 and all(map(command_buffers.nested_in_a_command_buffer, ours)), ours
