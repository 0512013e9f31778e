"""The fused MXFP8 grouped GEMM ("fused_few_rows": the forward and dgrad of groups of few rows).

Which calls choose it (static facts only) and which fall back to "dequantize"; its numerics
against float64 products of the dequantized values (mxfp8_gemm_reference.check_product) on
group sizes that exercise every part of the kernel: empty groups, groups of more than one
8-row tile (dgrad's passes of 1, 2 and 4 row tiles, a partial tile last, each pass's column
chunks inside, across and past N), a zero tail (sum < M), clamped and negative sizes, K split over all of a block's
warps and not a multiple of 32, N over one 128-column block, N a multiple of 16 or only of 8
(the kernel's 16- and 8-byte weight loads); dgrad (W read rowwise in place) with the
contraction a multiple of 8 or only of 4 (8- and 4-byte loads), one or many MX blocks per
warp; x dense or grouped; both element types; every result dtype; NaN/Inf blocks (the
kernel's exact path). Runs on the default backend (the CPU handler in CI, the CUDA kernel on
a GPU), outputs poisoned first (conftest), so an unwritten element is NaN.
"""

import dataclasses
import functools
import re
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from jax_grouped_gemm import mxfp8_gemm
from jax_grouped_gemm.mxfp8 import scale_layout
from jax_grouped_gemm.grouped_dense import DGRAD_DIMENSION_NUMBERS
from jax_grouped_gemm.ragged_dot import BASIC_DIMENSION_NUMBERS
import command_buffers
from conftest import requires_gpu
from mxfp8_gemm_reference import check_product, dequantized, fused_and_dequantized, product

mxfp8 = jgg.mxfp8
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2

MANY_SMALL_GROUPS = [7 * g % 6 for g in range(301)]  # sum 750
MANY_GROUPS_OF_TENS = [11 * g % 41 for g in range(133)]  # sum 2627

CASES = {  # (M, K, N, group sizes)
    "decode_like": (40, 96, 64, [3, 0, 9, 1, 17, 0, 2, 4]),       # 9, 17: several passes
    "zero_tail": (50, 100, 72, [5, 0, 8, 1]),                     # sum 14 < 50; K % 32 != 0
    "negative_and_clamped": (30, 64, 264, [-3, 20, 25, 2]),       # 20 + 25 clamps at 30
    "long_k_wide_n": (12, 1100, 520, [6, 6]),                     # all 8 warps' K, 5 column blocks
    "n_multiple_of_16": (24, 256, 384, [7, 0, 13, 4]),            # 16-byte weight loads
    "one_group": (8, 32, 8, [8]),
    # 5 rows per group on average (the mma kernel) with one group of 5 row tiles (a pass of 4
    # and one of 1), N % 16 == 8 and a last column block of 72.
    "one_large_group_among_small": (80, 96, 200, [40, 1, 0, 2, 3, 1, 0, 2, 5, 1, 0, 3, 2, 4, 1, 0]),
    # Groups of 11, 3, 5 and 2 row tiles (DGRAD_CASES says why).
    "large_groups": (160, 200, 200, [83, 0, 23, 33, 11, 0, 0, 0, 0, 0]),
    # Tens of rows per group (50 on average): on Hopper the wgmma kernel, whose tiles are 64
    # rows (150: three), 64 of K (160: a last step of one MX block) and 128 columns (272:
    # a last block of 16); sum 254 < 300.
    "tens_of_rows": (300, 160, 272, [70, 0, 150, 33, 1, 0]),
    # The wgmma kernel's copy ring wrapped around (10 steps of 64 and one of 32 against its 3
    # stages), 2 column blocks (144: the last of 16); sum 171 < 200.
    "tens_of_rows_long_k": (200, 672, 144, [40, 0, 100, 31]),
    # 40 groups of 0 to 127 rows: the wgmma kernel's 51 row tiles x 5 column blocks (more
    # blocks than the GPU holds at once), 5 steps of K each; sum 1900 < 1950.
    "many_items": (1950, 320, 528, [33, 70, 0, 64, 65, 1, 127, 20] * 5),
    # More groups than one window of the kernels' group walk (128 a round trip, 4 a lane):
    # 301 groups of 0-5 rows (the mma kernel; the last window's last lane has one group) and
    # 133 of 0-40 (the wgmma kernel).
    "many_groups": (760, 64, 40, MANY_SMALL_GROUPS),
    "many_groups_tens_of_rows": (2700, 64, 144, MANY_GROUPS_OF_TENS),
}


# dgrad dx = dy . W[g]^T: (M, K = result columns, N = contracted, group sizes); W [G, K, N].
DGRAD_CASES = {
    "decode_like": (40, 96, 64, [3, 0, 9, 1, 17, 0, 2, 4]),
    "contraction_4_mod_8": (50, 72, 100, [5, 0, 8, 1]),           # 4-byte weight loads, sum < M
    "wide_long_contraction": (24, 384, 1056, [7, 0, 13, 4]),      # 8-byte loads, 3 column blocks
    "negative_and_clamped": (30, 264, 64, [-3, 20, 25, 2]),       # 264 % 16 = 8
    "contraction_8_mod_16": (33, 136, 200, [9, 4, 0, 11]),        # K % 32 = 8; 8-column block
    "long_contraction": (16, 40, 4096, [5, 11]),                  # 16 MX blocks per warp
    # Row tiles 11 (passes of 4, 4, 2, 1), 3 (2, 1), 5 (4, then 1 of one row), 2 (2); the
    # last 128-column block's 4 chunks of 32 columns: inside K, across it (192..223), past it.
    "large_groups": (160, 200, 136, [83, 0, 23, 33, 11, 0, 0, 0, 0, 0]),
    "tens_of_rows": (300, 272, 160, [70, 0, 150, 33, 1, 0]),  # as CASES says, contracting 160
    "tens_of_rows_long_k": (200, 144, 672, [40, 0, 100, 31]),  # as CASES says, contracting 672
    "many_items": (1950, 528, 320, [33, 70, 0, 64, 65, 1, 127, 20] * 5),  # as CASES says
    "many_groups": (760, 40, 64, MANY_SMALL_GROUPS),                    # as CASES says
    "many_groups_tens_of_rows": (2700, 144, 64, MANY_GROUPS_OF_TENS),  # as CASES says
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


def _dgrad_operands(case, dy_grouped=True, dy_fp8=E4M3, w_fp8=E4M3, seed=0):
  m, k, n, sizes = DGRAD_CASES[case]
  rng = np.random.default_rng(seed + 7 * m + k + n)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  dy = jnp.asarray(_values(rng, (m, n)), jnp.bfloat16)
  w = jnp.asarray(_values(rng, (len(sizes), k, n)), jnp.bfloat16)
  qdy = mxfp8.quantize(dy, group_sizes if dy_grouped else None, rowwise=True, dtype=dy_fp8)
  qw = mxfp8.quantize(w, rowwise=True, dtype=w_fp8)
  return qdy, qw, group_sizes


def _dgrad(qdy, qw, group_sizes, out_dtype=jnp.float32):
  return mxfp8.ragged_dot_general(qdy, qw, group_sizes, DGRAD_DIMENSION_NUMBERS,
                                  preferred_element_type=out_dtype)


def _problem(qx, qw, group_sizes, dims=BASIC_DIMENSION_NUMBERS, **kw):
  return mxfp8_gemm.resolve_problem(qx, qw, group_sizes, dims, **kw)


# --- which calls take the fused kernel ------------------------------------------------------

def test_forward_of_few_rows_per_group_is_fused():
  for x_grouped in (True, False):
    qx, qw, group_sizes = _forward_operands("decode_like", x_grouped)
    assert mxfp8_gemm.choose_backend(_problem(qx, qw, group_sizes)) == "fused_few_rows"


@pytest.mark.parametrize("gemm", ["fwd", "dgrad"])
@pytest.mark.parametrize("case, lhs_sizes", [("decode_like", [20, 0, 15]),
                                             ("large_groups", [40, 0, 45, 1, 60]),
                                             ("tens_of_rows", [100, 0, 90, 64, 1])])
def test_lhs_grouped_by_other_sizes_than_the_gemm(gemm, case, lhs_sizes):
  """x's (dy's) blocks and scales follow its own groups (here with a tail of no group, whose
  rows are 0 in it, and boundaries inside the GEMM's passes); the GEMM's groups need not
  match them."""
  lhs, w, group_sizes, dims, w_colwise, sizes = _gemm_operands(gemm, case=case)
  plain = jnp.asarray(dequantized(lhs, False), jnp.bfloat16)
  lhs_other = mxfp8.quantize(plain, jnp.asarray(lhs_sizes, jnp.int32), rowwise=True)
  assert mxfp8_gemm.choose_backend(_problem(lhs_other, w, group_sizes, dims)) == "fused_few_rows"
  out = mxfp8.ragged_dot_general(lhs_other, w, group_sizes, dims,
                                 preferred_element_type=jnp.float32)
  check_product(out, gemm, dequantized(lhs_other, False), dequantized(w, w_colwise), sizes)


def test_calls_the_fused_kernel_cannot_take_fall_back_to_dequantize():
  qx, qw, group_sizes = _forward_operands("decode_like")
  m, k, n, sizes = CASES["decode_like"]
  misfits = {
      "group_offset": _problem(qx, qw, group_sizes, group_offset=jnp.int32(0)),
      "compute-bound": _problem(
          mxfp8.quantize(jnp.ones(((mxfp8_gemm.FUSED_MAX_ROWS_PER_GROUP + 1) * len(sizes), k),
                                  jnp.bfloat16)), qw, group_sizes),
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
  qdy, qw_rowwise, group_sizes = _dgrad_operands("contraction_4_mod_8")
  dgrad = _problem(qdy, qw_rowwise, group_sizes, DGRAD_DIMENSION_NUMBERS)
  assert mxfp8_gemm.choose_backend(dgrad) == "fused_few_rows"
  odd = mxfp8.quantize(jnp.ones((4, 60, 64), jnp.bfloat16))  # dx's 60 columns: not 8k
  assert mxfp8_gemm.choose_backend(_problem(mxfp8.quantize(jnp.ones((8, 64), jnp.bfloat16)), odd,
                                            group_sizes, DGRAD_DIMENSION_NUMBERS)) == "dequantize"


def test_result_columns_past_32_bits_fall_back_to_dequantize():
  """The kernels' row offsets are 32-bit: N >= 2^31 takes the dequantize backend (abstract
  shapes: no such array is allocated)."""
  qx, _, group_sizes = _forward_operands("decode_like")
  _, k, _, sizes = CASES["decode_like"]
  backends = {}

  def choose(w):
    problem = _problem(qx, mxfp8.quantize(w, rowwise=False, colwise=True), group_sizes)
    backends["wide"] = mxfp8_gemm.choose_backend(problem)
    return w[0, 0, 0]

  jax.eval_shape(choose, jax.ShapeDtypeStruct((len(sizes), k, 2**31 + 8), jnp.bfloat16))
  assert backends == {"wide": "dequantize"}


def test_lowers_to_one_fused_custom_call_without_a_dequantize():
  qx, qw, group_sizes = _forward_operands("decode_like")
  text = jax.jit(mxfp8.ragged_dot).lower(qx, qw, group_sizes).as_text()
  assert jgg._native.MXFP8_RAGGED_M_TARGET in text
  assert jgg._native.MXFP8_DEQUANTIZE_TARGET not in text


def test_grouped_dense_gives_its_gemms_its_group_sizes_as_the_lhs_sizes():
  """An lhs grouped by the GEMM's very sizes buffer has its scale rows located with no second
  walk of the group sizes (LocateLhsScaleRows): in grouped_dense's forward and dgrad, the
  custom call's group sizes and lhs group sizes are one HLO value, so one buffer."""
  m, k, n, sizes = CASES["decode_like"]
  rng = np.random.default_rng(3)
  x = jnp.asarray(_values(rng, (m, k)), jnp.bfloat16)
  w = jnp.asarray(_values(rng, (len(sizes), k, n)), jnp.bfloat16)
  loss = lambda x, w, group_sizes: jnp.sum(jgg.grouped_dense(
      x, w, group_sizes, recipe=jgg.MXFP8Recipe()).astype(jnp.float32) ** 2)
  text = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(
      x, w, jnp.asarray(sizes, jnp.int32)).compile().as_text()
  calls = re.findall(r"custom-call\(([^)]*)\), custom_call_target=\"" +
                     jgg._native.MXFP8_RAGGED_M_TARGET + '"', text)
  assert len(calls) == 2, text  # the forward and dgrad
  for operands in calls:
    names = [name.strip() for name in re.sub(r"/\*.*?\*/", "", operands).split(",")]
    assert len(names) == 6 and names[4] == names[5], operands


# --- numerics -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("x_grouped", [True, False], ids=["x_grouped", "x_dense"])
def test_equals_dequantize_then_f32_matmul(case, x_grouped):
  qx, qw, group_sizes = _forward_operands(case, x_grouped)
  assert mxfp8_gemm.choose_backend(_problem(qx, qw, group_sizes)) == "fused_few_rows"
  out = jax.jit(mxfp8.ragged_dot, static_argnames="preferred_element_type")(
      qx, qw, group_sizes, preferred_element_type=jnp.float32)
  check_product(out, "fwd", dequantized(qx, False), dequantized(qw, True), CASES[case][3])


@pytest.mark.parametrize("case", list(DGRAD_CASES))
@pytest.mark.parametrize("dy_grouped", [True, False], ids=["dy_grouped", "dy_dense"])
def test_dgrad_equals_dequantize_then_f32_matmul(case, dy_grouped):
  """dy . W^T with W read rowwise in place (rhs_transposed)."""
  qdy, qw, group_sizes = _dgrad_operands(case, dy_grouped)
  assert mxfp8_gemm.choose_backend(
      _problem(qdy, qw, group_sizes, DGRAD_DIMENSION_NUMBERS)) == "fused_few_rows"
  out = jax.jit(_dgrad)(qdy, qw, group_sizes)
  check_product(out, "dgrad", dequantized(qdy, False), dequantized(qw, False),
                DGRAD_CASES[case][3])


def test_v1_target_stays_registered_and_agrees_with_v2():
  """Artifacts exported before rhs_transposed (_v2) name jgg_mxfp8_ragged_m_v1: the forward."""
  qx, qw, group_sizes = _forward_operands("decode_like")
  m, k, n, sizes = CASES["decode_like"]
  out = jax.ShapeDtypeStruct((m, n), jnp.float32)
  v1 = jax.ffi.ffi_call(jgg._native.MXFP8_RAGGED_M_TARGET_V1, out)(
      qx.data, qx.scale_inv, qw.colwise_data, qw.colwise_scale_inv, group_sizes,
      qx.group_sizes, lhs_grouped=True)
  v2 = mxfp8.ragged_dot(qx, qw, group_sizes, preferred_element_type=jnp.float32)
  np.testing.assert_array_equal(np.asarray(v1), np.asarray(v2))


def _gemm_operands(gemm, lhs_fp8=E4M3, w_fp8=E4M3, seed=0, case="decode_like"):
  """`case` of `gemm` ("fwd" or "dgrad"): (lhs, w, group_sizes, dimension numbers, whether w
  is read colwise, group sizes as a list)."""
  if gemm == "fwd":
    qx, qw, group_sizes = _forward_operands(case, True, lhs_fp8, w_fp8, seed)
    return qx, qw, group_sizes, BASIC_DIMENSION_NUMBERS, True, CASES[case][3]
  qdy, qw, group_sizes = _dgrad_operands(case, True, lhs_fp8, w_fp8, seed)
  return qdy, qw, group_sizes, DGRAD_DIMENSION_NUMBERS, False, DGRAD_CASES[case][3]


@pytest.mark.parametrize("gemm", ["fwd", "dgrad"])
@pytest.mark.parametrize("lhs_fp8, w_fp8", [(E5M2, E4M3), (E4M3, E5M2), (E5M2, E5M2)],
                         ids=lambda d: jnp.dtype(d).name)
# f16 results of tens_of_rows' 160-term sums of values up to 2^6 each would overflow.
@pytest.mark.parametrize("case, out_dtype", [("decode_like", jnp.bfloat16),
                                             ("decode_like", jnp.float16),
                                             ("tens_of_rows", jnp.bfloat16)],
                         ids=["decode_like-bf16", "decode_like-f16", "tens_of_rows-bf16"])
def test_element_types_and_result_dtypes(gemm, lhs_fp8, w_fp8, out_dtype, case):
  lhs, w, group_sizes, dims, w_colwise, sizes = _gemm_operands(gemm, lhs_fp8, w_fp8, seed=3,
                                                               case=case)
  out = mxfp8.ragged_dot_general(lhs, w, group_sizes, dims, preferred_element_type=out_dtype)
  assert out.dtype == jnp.dtype(out_dtype)
  check_product(out, gemm, dequantized(lhs, False), dequantized(w, w_colwise), sizes)


@pytest.mark.parametrize("gemm", ["fwd", "dgrad"])
@pytest.mark.parametrize("case", ["decode_like", "large_groups", "tens_of_rows",
                                  "tens_of_rows_long_k", "many_items"])
def test_agrees_with_the_dequantize_backend_on_special_values(gemm, case):
  """NaN and Inf inputs, a zero block, values at the element maximum: the fused kernel's
  NaN/Inf pattern and finite values match the dequantize backend (f32 results). Blocks with
  Inf take the kernel's exact path, the others its tensor-core path (tens_of_rows_long_k: exact
  steps before and after tensor-core ones in flight; many_items: also in the last group's
  tile). In dgrad, the poked rows and groups lie in passes of 1 and 2 row tiles (decode_like)
  or of 4, 2 and 1 (large_groups)."""
  lhs, w, group_sizes, dims, w_colwise, sizes = _gemm_operands(gemm, seed=5, case=case)
  a = np.array(jnp.asarray(dequantized(lhs, False), jnp.float32))
  b = np.array(jnp.asarray(dequantized(w, w_colwise), jnp.float32))
  if not w_colwise:  # poke W as [G, contracted, result] either way
    b = b.transpose(0, 2, 1)
  a[1, 5], a[4, 40], a[6, -1] = np.nan, np.inf, -np.inf  # in the first K step and the last
  if case == "many_items":
    a[1890, 100] = np.inf  # the last group's
  b[2, 33, 7], b[0, :32, 3] = np.inf, 0.0
  b[2, 32:64, 10] = 448.0
  if not w_colwise:
    b = np.ascontiguousarray(b.transpose(0, 2, 1))
  lhs = mxfp8.quantize(jnp.asarray(a), group_sizes, rowwise=True)
  w = mxfp8.quantize(jnp.asarray(b), rowwise=not w_colwise, colwise=w_colwise)
  fused, plain = fused_and_dequantized(functools.partial(_problem, lhs, w, group_sizes, dims))
  np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))
  np.testing.assert_array_equal(np.isinf(fused), np.isinf(plain))
  # Finite results: both within f32 accumulation error ((K + 2) u sum|a b| each, summed in
  # different orders) of each other, as in check_product.
  finite = np.isfinite(plain)
  magnitude = product(gemm, np.nan_to_num(np.abs(dequantized(lhs, False)), posinf=0.0),
                      np.nan_to_num(np.abs(dequantized(w, w_colwise)), posinf=0.0), sizes)
  bound = 2 * (a.shape[1] + 2) * 2.0 ** -24 * magnitude
  assert (np.abs(fused[finite] - plain[finite]) <= bound[finite]).all()
  assert np.isnan(fused).any() and np.isinf(fused).any()


@pytest.mark.parametrize("case", ["decode_like", "tens_of_rows"])
def test_a_nan_scale_over_zero_codes_gives_nan(case):
  """A block with the NaN scale (0xFF) dequantizes to NaN even where its codes are zero (the
  quantizer never writes that, a hand-made tensor can): an x block (row 1, K 32-63) and a W
  block (expert 2, K 64-95, column 17) so, in the mma kernel (decode_like) and the wgmma one
  (tens_of_rows: uniform and per-column scales), the results they reach are NaN, as on the
  dequantize backend."""
  m, k, n, sizes = CASES[case]
  qx, qw, group_sizes = _forward_operands(case, seed=9)
  x, x_scales = np.array(qx.data), np.array(qx.scale_inv)
  x[1, 32:64] = 0
  _, x_row_bytes = scale_layout.padded_scale_dims(sizes[0], k, colwise=False)
  x_scales[1 * x_row_bytes + 1] = 0xFF  # group 0's scale matrix comes first
  w, w_scales = np.array(qw.colwise_data), np.array(qw.colwise_scale_inv)
  w[2, 64:96, 17] = 0
  w_scales[2, 2, 17] = 0xFF  # a stack's scales: [G, K / 32 padded, N padded]
  qx = dataclasses.replace(qx, data=jnp.asarray(x), scale_inv=jnp.asarray(x_scales))
  qw = dataclasses.replace(qw, colwise_data=jnp.asarray(w),
                           colwise_scale_inv=jnp.asarray(w_scales))
  assert np.isnan(np.asarray(dequantized(qx, False))[1, 32:64]).all()
  assert np.isnan(np.asarray(dequantized(qw, True))[2, 64:96, 17]).all()
  fused, plain = fused_and_dequantized(functools.partial(_problem, qx, qw, group_sizes))
  begin = sum(sizes[:2])  # expert 2's rows
  assert np.isnan(plain[1]).all() and np.isnan(plain[begin:begin + sizes[2], 17]).all()
  np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))


def test_under_vmap_and_grad_of_grouped_dense():
  """The recipe's three GEMMs take the fused kernels (few rows per group: forward and dgrad
  ragged M, wgrad ragged K, no dequantize op); the gradients match the f32 ones to MXFP8
  precision."""
  m, k, n, sizes = CASES["decode_like"]
  rng = np.random.default_rng(9)
  x = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
  w = jnp.asarray(rng.standard_normal((len(sizes), k, n)) * 0.1, jnp.bfloat16)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  recipe = jgg.MXFP8Recipe()
  loss = lambda x, w: jnp.sum(jgg.grouped_dense(x, w, group_sizes, recipe=recipe)
                              .astype(jnp.float32) ** 2)
  text = jax.jit(jax.grad(loss, (0, 1))).lower(x, w).as_text()
  assert text.count(f"custom_call @{jgg._native.MXFP8_RAGGED_M_TARGET}") == 2  # forward, dgrad
  assert text.count(f"custom_call @{jgg._native.MXFP8_RAGGED_K_TARGET}") == 1  # wgrad
  assert jgg._native.MXFP8_DEQUANTIZE_TARGET not in text
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


# --- graph safety ---------------------------------------------------------------------------

# Run in a fresh process: XLA_FLAGS are read once, when the backend starts.
_COMMAND_BUFFER_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    import jax_grouped_gemm as jgg
    from jax_grouped_gemm.mxfp8_gemm import DGRAD_DIMENSION_NUMBERS
    from mxfp8_gemm_reference import check_product, dequantized
    mx = jgg.mxfp8

    def fused_step(x, dy, w, sizes):  # 8 rows per group on average: both GEMMs fused
      qx, qdy = mx.quantize(x, sizes), mx.quantize(dy, sizes)
      qw = mx.quantize(w, rowwise=True, colwise=True)
      y = mx.ragged_dot(qx, qw, sizes, preferred_element_type=jnp.float32)
      dx = mx.ragged_dot_general(qdy, qw, sizes, DGRAD_DIMENSION_NUMBERS,
                                 preferred_element_type=jnp.float32)
      return qx, qdy, qw, y, dx

    step = jax.jit(fused_step)
    rng = np.random.default_rng(0)
    m, k, n, g = 64, 256, 384, 8
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    dy = jnp.asarray(rng.standard_normal((m, n)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((g, k, n)), jnp.bfloat16)
    for sizes in ([8] * 8, [64] + [0] * 7, [0] * 8, [3, 20, 0, 1, 9, 0, 2, 29],
                  [-4, 100, 1, 1, 0, 0, 0, 0]):
      qx, qdy, qw, y, dx = step(x, dy, w, jnp.asarray(sizes, jnp.int32))
      check_product(y, "fwd", dequantized(qx, False), dequantized(qw, True), sizes)
      check_product(dx, "dgrad", dequantized(qdy, False), dequantized(qw, False), sizes)
    print("replays ok")
""")


@requires_gpu
def test_captured_in_command_buffer_and_replays_with_new_group_sizes(tmp_path):
  """The fused forward and dgrad (and the quantize calls feeding them) run inside one
  command buffer, replayed with new device group sizes and checked every time."""
  ours = command_buffers.custom_calls_after_capture(_COMMAND_BUFFER_SCRIPT, tmp_path, "fused_step")
  assert len(ours) >= 5 and all(map(command_buffers.nested_in_a_command_buffer, ours)), ours
