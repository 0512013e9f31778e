"""The fused MXFP8 grouped GEMM ("fused_few_rows": the forward of groups of few rows).

Which calls choose it (static facts only) and which fall back to "dequantize"; its numerics
against float64 products of the dequantized values (mxfp8_gemm_reference.check_product) on
group sizes that exercise every part of the kernel: empty groups, groups of more than one
8-row pass, a zero tail (sum < M), clamped and negative sizes, K split over all of a block's
warps and not a multiple of 32, N over one 128-column block, N a multiple of 16 or only of 8
(the kernel's 16- and 8-byte weight loads); x dense or grouped; both element types;
every result dtype. Runs on the default backend (the CPU handler in CI, the CUDA kernel on a
GPU), outputs poisoned first (conftest), so an unwritten element is NaN.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from jax_grouped_gemm import mxfp8_gemm
from jax_grouped_gemm.grouped_dense import DGRAD_DIMENSION_NUMBERS
from jax_grouped_gemm.ragged_dot import BASIC_DIMENSION_NUMBERS
from mxfp8_gemm_reference import check_product, dequantized, product

mxfp8 = jgg.mxfp8
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2

CASES = {  # (M, K, N, group sizes)
    "decode_like": (40, 96, 64, [3, 0, 9, 1, 17, 0, 2, 4]),       # 9, 17: several passes
    "zero_tail": (50, 100, 72, [5, 0, 8, 1]),                     # sum 14 < 50; K % 32 != 0
    "negative_and_clamped": (30, 64, 264, [-3, 20, 25, 2]),       # 20 + 25 clamps at 30
    "long_k_wide_n": (12, 1100, 520, [6, 6]),                     # all 8 warps' K, 5 column blocks
    "n_multiple_of_16": (24, 256, 384, [7, 0, 13, 4]),            # 16-byte weight loads
    "one_group": (8, 32, 8, [8]),
}


def _values(rng, shape):
  """Normal values scaled by 2^[-6, 6] per row: blocks get different scale exponents."""
  return rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape[:-1] + (1,)))


def _forward_operands(case, x_grouped=True, x_fp8=E4M3, w_fp8=E4M3, seed=0):
  m, k, n, sizes = CASES[case]
  rng = np.random.default_rng(seed + m + k + n)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  x = jnp.asarray(_values(rng, (m, k)), jnp.bfloat16)
  w = jnp.asarray(_values(rng, (len(sizes), k, n)), jnp.bfloat16)
  qx = mxfp8.quantize(x, group_sizes if x_grouped else None, rowwise=True, dtype=x_fp8)
  qw = mxfp8.quantize(w, rowwise=False, colwise=True, dtype=w_fp8)
  return qx, qw, group_sizes


def _problem(qx, qw, group_sizes, dims=BASIC_DIMENSION_NUMBERS, **kw):
  return mxfp8_gemm.resolve_problem(qx, qw, group_sizes, dims, **kw)


# --- which calls take the fused kernel ------------------------------------------------------

def test_forward_of_few_rows_per_group_is_fused():
  for x_grouped in (True, False):
    qx, qw, group_sizes = _forward_operands("decode_like", x_grouped)
    assert mxfp8_gemm.choose_backend(_problem(qx, qw, group_sizes)) == "fused_few_rows"


def test_x_grouped_by_other_sizes_than_the_gemm():
  """x's blocks and scales follow its own groups (here coarser, with a tail of no group, whose
  rows are 0 in x); the GEMM's groups need not match them."""
  qx, qw, group_sizes = _forward_operands("decode_like")
  m, k, n, sizes = CASES["decode_like"]
  x = jnp.asarray(dequantized(qx, False), jnp.bfloat16)
  qx_other = mxfp8.quantize(x, jnp.asarray([20, 0, 15], jnp.int32), rowwise=True)
  out = mxfp8.ragged_dot(qx_other, qw, group_sizes, preferred_element_type=jnp.float32)
  assert mxfp8_gemm.choose_backend(_problem(qx_other, qw, group_sizes)) == "fused_few_rows"
  check_product(out, "fwd", dequantized(qx_other, False), dequantized(qw, True), sizes)


def test_calls_the_fused_kernel_cannot_take_fall_back_to_dequantize():
  qx, qw, group_sizes = _forward_operands("decode_like")
  m, k, n, sizes = CASES["decode_like"]
  misfits = {
      "group_offset": _problem(qx, qw, group_sizes, group_offset=jnp.int32(0)),
      "compute-bound": _problem(
          mxfp8.quantize(jnp.ones((17 * len(sizes), k), jnp.bfloat16)), qw, group_sizes),
      "swizzled w": _problem(
          qx, mxfp8.quantize(jnp.ones((len(sizes), k, n), jnp.bfloat16), rowwise=False,
                             colwise=True, scale_layout="swizzled"), group_sizes),
      "N not a multiple of 8": _problem(
          qx, mxfp8.quantize(jnp.ones((len(sizes), k, 60), jnp.bfloat16), rowwise=False,
                             colwise=True), group_sizes),
  }
  for name, problem in misfits.items():
    assert mxfp8_gemm.fused_few_rows_misfit(problem) is not None, name
    assert mxfp8_gemm.choose_backend(problem) == "dequantize", name
  qdy = mxfp8.quantize(jnp.ones((m, n), jnp.bfloat16), group_sizes)
  qw_rowwise = mxfp8.quantize(jnp.ones((len(sizes), k, n), jnp.bfloat16))
  dgrad = _problem(qdy, qw_rowwise, group_sizes, DGRAD_DIMENSION_NUMBERS)
  assert mxfp8_gemm.choose_backend(dgrad) == "dequantize"


def test_lowers_to_one_fused_custom_call_without_a_dequantize():
  qx, qw, group_sizes = _forward_operands("decode_like")
  text = jax.jit(mxfp8.ragged_dot).lower(qx, qw, group_sizes).as_text()
  assert jgg._native.MXFP8_RAGGED_M_TARGET in text
  assert jgg._native.MXFP8_DEQUANTIZE_TARGET not in text


# --- numerics -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("x_grouped", [True, False], ids=["x_grouped", "x_dense"])
def test_equals_dequantize_then_f32_matmul(case, x_grouped):
  qx, qw, group_sizes = _forward_operands(case, x_grouped)
  assert mxfp8_gemm.choose_backend(_problem(qx, qw, group_sizes)) == "fused_few_rows"
  out = jax.jit(mxfp8.ragged_dot, static_argnames="preferred_element_type")(
      qx, qw, group_sizes, preferred_element_type=jnp.float32)
  check_product(out, "fwd", dequantized(qx, False), dequantized(qw, True), CASES[case][3])


@pytest.mark.parametrize("x_fp8, w_fp8", [(E5M2, E4M3), (E4M3, E5M2), (E5M2, E5M2)],
                         ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float16])
def test_element_types_and_result_dtypes(x_fp8, w_fp8, out_dtype):
  qx, qw, group_sizes = _forward_operands("decode_like", True, x_fp8, w_fp8, seed=3)
  out = mxfp8.ragged_dot(qx, qw, group_sizes, preferred_element_type=out_dtype)
  assert out.dtype == jnp.dtype(out_dtype)
  check_product(out, "fwd", dequantized(qx, False), dequantized(qw, True),
                CASES["decode_like"][3])


def test_agrees_with_the_dequantize_backend_on_special_values():
  """NaN and Inf inputs, a zero block, values at the element maximum: the fused kernel's
  NaN/Inf pattern and finite values match the dequantize backend (f32 results)."""
  qx, qw, group_sizes = _forward_operands("decode_like", seed=5)
  m, k, n, sizes = CASES["decode_like"]
  x = np.array(jnp.asarray(dequantized(qx, False), jnp.float32))
  w = np.array(jnp.asarray(dequantized(qw, True), jnp.float32))
  x[1, 5], x[4, 40] = np.nan, np.inf
  w[2, 33, 7], w[0, :32, 3] = np.inf, 0.0
  w[2, 64:96, 10] = 448.0
  qx = mxfp8.quantize(jnp.asarray(x), group_sizes, rowwise=True)
  qw = mxfp8.quantize(jnp.asarray(w), rowwise=False, colwise=True)
  problem = _problem(qx, qw, group_sizes, preferred_element_type=jnp.float32)
  fused = np.asarray(mxfp8_gemm.BACKENDS["fused_few_rows"](problem))
  plain = np.asarray(mxfp8_gemm.BACKENDS["dequantize"](
      _problem(qx, qw, group_sizes, precision=jax.lax.Precision.HIGHEST,
               preferred_element_type=jnp.float32)))
  np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))
  np.testing.assert_array_equal(np.isinf(fused), np.isinf(plain))
  # Finite results: both within f32 accumulation error ((K + 2) u sum|a b| each, summed in
  # different orders) of each other, as in check_product.
  finite = np.isfinite(plain)
  magnitude = product("fwd", np.nan_to_num(np.abs(dequantized(qx, False)), posinf=0.0),
                      np.nan_to_num(np.abs(dequantized(qw, True)), posinf=0.0), sizes)
  bound = 2 * (k + 2) * 2.0 ** -24 * magnitude
  assert (np.abs(fused[finite] - plain[finite]) <= bound[finite]).all()
  assert np.isnan(fused).any() and np.isinf(fused).any()


def test_under_vmap_and_grad_of_grouped_dense():
  """The recipe's forward takes the fused kernel (few rows per group); its gradients still
  flow (the backward GEMMs use the other backend)."""
  m, k, n, sizes = CASES["decode_like"]
  rng = np.random.default_rng(9)
  x = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
  w = jnp.asarray(rng.standard_normal((len(sizes), k, n)) * 0.1, jnp.bfloat16)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  recipe = jgg.MXFP8Recipe()
  loss = lambda x, w: jnp.sum(jgg.grouped_dense(x, w, group_sizes, recipe=recipe)
                              .astype(jnp.float32) ** 2)
  text = jax.jit(jax.grad(loss, (0, 1))).lower(x, w).as_text()
  assert jgg._native.MXFP8_RAGGED_M_TARGET in text
  dx, dw = jax.jit(jax.grad(loss, (0, 1)))(x, w)
  ref_dx, ref_dw = jax.grad(lambda x, w: jnp.sum(
      jgg.ragged_dot(x, w, group_sizes, preferred_element_type=jnp.float32) ** 2), (0, 1))(
          x.astype(jnp.float32), w.astype(jnp.float32))
  for got, want in ((dx, ref_dx), (dw, ref_dw)):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.1
  batched = jax.vmap(lambda x: mxfp8.ragged_dot(mxfp8.quantize(x, group_sizes), 
                                                mxfp8.quantize(w, rowwise=False, colwise=True),
                                                group_sizes))(jnp.stack([x, -x]))
  np.testing.assert_array_equal(np.asarray(batched[0], np.float32),
                                -np.asarray(batched[1], np.float32))
