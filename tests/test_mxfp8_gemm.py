"""Grouped GEMMs on MXFP8 operands (jgg.mxfp8.ragged_dot / ragged_dot_general).

Every GEMM of an MoE layer (forward, dgrad, wgrad) on every ragged layout
(empty groups, sizes not multiples of 32, a zero tail, clamped and negative
sizes, one group), against float64 products of the dequantized values read
from the raw bits (mxfp8_dequantized.py); the orientation each operand is read
in; the exactness table behind the bf16/f32 choice; trace-time errors.
Runs on the default backend (CPU kernels in CI, CUDA on a GPU), outputs poisoned.
"""

import dataclasses

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_grouped_gemm as jgg
import reference
from conftest import requires_gpu
from jax_grouped_gemm import mxfp8_gemm
from jax_grouped_gemm.grouped_dense import DGRAD_DIMENSION_NUMBERS, WGRAD_DIMENSION_NUMBERS
from jax_grouped_gemm.ragged_dot import BASIC_DIMENSION_NUMBERS
from mxfp8_gemm_reference import check_product, dequantized

mxfp8 = jgg.mxfp8
M, K, N, G = 150, 72, 40, 4  # K, N: partial 32-blocks; M: groups end mid-block
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
FP8_IDS = lambda d: jnp.dtype(d).name

# Group sizes over M = 150 rows: each a ragged layout the kernels must survive.
LAYOUTS = {
    "uneven_with_empty": [37, 0, 70, 33],  # sums to 140: a 10-row tail of no group
    "all_in_one": [0, 0, 150, 0],
    "tiny_groups": [1, 31, 33, 2],
    "negative_and_clamped": [-5, 90, 100, 7],  # -5 counts as 0; 90 + 100 clamps at 150
    "multiples_of_32": [32, 64, 0, 54],
}
# The dimension numbers of each GEMM of the layer (x [M, K], w [G, K, N], dy [M, N]).
GEMMS = {"fwd": BASIC_DIMENSION_NUMBERS, "dgrad": DGRAD_DIMENSION_NUMBERS,
         "wgrad": WGRAD_DIMENSION_NUMBERS}


def _values(rng, shape):
  """Normal values scaled by 2^[-6, 6] per row: blocks get different scale exponents."""
  return rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape[:-1] + (1,)))


def _operands(seed, sizes, fp8=E4M3, scale_layout="compact"):
  """x, w, dy quantized in both orientations (x and dy grouped by `sizes`)."""
  rng = np.random.default_rng(seed)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  quantize = lambda a, gs=None: mxfp8.quantize(jnp.asarray(a, jnp.bfloat16), gs, rowwise=True,
                                               colwise=True, dtype=fp8,
                                               scale_layout=scale_layout)
  return (quantize(_values(rng, (M, K)), group_sizes), quantize(_values(rng, (G, K, N))),
          quantize(_values(rng, (M, N)), group_sizes), group_sizes)


def _gemm_operands(gemm, qx, qw, qdy):
  """(lhs, rhs) of a GEMM and their float64 dequantized values in the orientation it reads."""
  lhs, rhs = {"fwd": (qx, qw), "dgrad": (qdy, qw), "wgrad": (qx, qdy)}[gemm]
  lhs_colwise, rhs_colwise = {"fwd": (False, True), "dgrad": (False, False),
                              "wgrad": (True, True)}[gemm]
  return lhs, rhs, dequantized(lhs, lhs_colwise), dequantized(rhs, rhs_colwise)


# --- numerics: every GEMM, every layout -------------------------------------------------

@pytest.mark.parametrize("fp8", [E4M3, E5M2], ids=FP8_IDS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("gemm", list(GEMMS))
def test_every_gemm_equals_dequantize_then_f32_matmul(gemm, layout, fp8):
  seed = 10 * list(GEMMS).index(gemm) + list(LAYOUTS).index(layout)
  qx, qw, qdy, group_sizes = _operands(seed, LAYOUTS[layout], fp8)
  lhs, rhs, lhs64, rhs64 = _gemm_operands(gemm, qx, qw, qdy)
  out = mxfp8.ragged_dot_general(lhs, rhs, group_sizes, GEMMS[gemm],
                                 preferred_element_type=jnp.float32)
  assert out.dtype == jnp.float32
  check_product(out, gemm, lhs64, rhs64, LAYOUTS[layout])
  if gemm == "wgrad":  # empty groups are exactly zero
    for g, size in enumerate(np.maximum(LAYOUTS[layout], 0)):
      if size == 0:
        np.testing.assert_array_equal(np.asarray(out[g]), 0)


@pytest.mark.parametrize("gemm", list(GEMMS))
def test_default_result_is_bf16_rounded_once(gemm):
  """Two MXFP8 operands give bf16 (as two bf16 operands would), jitted."""
  sizes = LAYOUTS["uneven_with_empty"]
  qx, qw, qdy, group_sizes = _operands(11, sizes)
  lhs, rhs, lhs64, rhs64 = _gemm_operands(gemm, qx, qw, qdy)
  out = jax.jit(mxfp8.ragged_dot_general, static_argnums=3)(lhs, rhs, group_sizes, GEMMS[gemm])
  assert out.dtype == jnp.bfloat16
  check_product(out, gemm, lhs64, rhs64, sizes)


@pytest.mark.parametrize("gemm", list(GEMMS))
@pytest.mark.parametrize("which", ["lhs", "rhs"])
def test_one_mxfp8_operand_and_one_plain(gemm, which):
  sizes = LAYOUTS["tiny_groups"]
  qx, qw, qdy, group_sizes = _operands(21, sizes)
  lhs, rhs, lhs64, rhs64 = _gemm_operands(gemm, qx, qw, qdy)
  plain_dtype = jnp.float32 if which == "lhs" else jnp.bfloat16
  if which == "lhs":
    rhs = jnp.asarray(rhs64, plain_dtype)
  else:
    lhs = jnp.asarray(lhs64, plain_dtype)
  out = mxfp8.ragged_dot_general(lhs, rhs, group_sizes, GEMMS[gemm])
  assert out.dtype == plain_dtype  # lax's promotion of bf16 (the MXFP8 side) with the other
  plain64 = np.asarray(jnp.asarray(rhs if which == "lhs" else lhs, jnp.float32), np.float64)
  if which == "lhs":
    check_product(out, gemm, lhs64, plain64, sizes)
  else:
    check_product(out, gemm, plain64, rhs64, sizes)


@pytest.mark.parametrize("gemm", list(GEMMS))
def test_top_level_ragged_dot_takes_mxfp8_operands(gemm):
  """jgg.ragged_dot_general (and jgg.ragged_dot for the forward) route MXFP8Tensor
  operands to the MXFP8 GEMM: the drop-in API needs no second entry point."""
  sizes = LAYOUTS["uneven_with_empty"]
  qx, qw, qdy, group_sizes = _operands(41, sizes)
  lhs, rhs, lhs64, rhs64 = _gemm_operands(gemm, qx, qw, qdy)
  out = jgg.ragged_dot_general(lhs, rhs, group_sizes, GEMMS[gemm],
                               preferred_element_type=jnp.float32)
  check_product(out, gemm, lhs64, rhs64, sizes)
  if gemm == "fwd":
    jitted = jax.jit(lambda a, b, s: jgg.ragged_dot(a, b, s, preferred_element_type=jnp.float32))
    np.testing.assert_array_equal(np.asarray(jitted(lhs, rhs, group_sizes)), np.asarray(out))


def test_forward_accepts_x_quantized_without_groups():
  """Rowwise blocks run along K, within a row: they never depend on the groups."""
  sizes = LAYOUTS["uneven_with_empty"]
  _, qw, _, group_sizes = _operands(31, sizes)
  x = jnp.asarray(_values(np.random.default_rng(31), (M, K)), jnp.bfloat16)
  qx = mxfp8.quantize(x)  # layout "dense": rows past the groups keep their values
  out = mxfp8.ragged_dot(qx, qw, group_sizes, preferred_element_type=jnp.float32)
  check_product(out, "fwd", dequantized(qx, False), dequantized(qw, True), sizes)


def test_wgrad_of_transposed_x_reads_rowwise_blocks_grouped_along_columns():
  """x^T [K, M] contracting its ragged last axis: rowwise blocks restarting at the column
  groups (layout varying_last)."""
  sizes = LAYOUTS["uneven_with_empty"]
  _, _, qdy, group_sizes = _operands(35, sizes)
  x_t = jnp.asarray(_values(np.random.default_rng(35), (K, M)), jnp.bfloat16)
  qx_t = mxfp8.quantize(x_t, group_sizes, ragged_axis=1)
  dims = jax.lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(([1], [0]), ([], [])), lhs_ragged_dimensions=[1],
      rhs_group_dimensions=[])
  out = mxfp8.ragged_dot_general(qx_t, qdy, group_sizes, dims, preferred_element_type=jnp.float32)
  check_product(out, "wgrad", dequantized(qx_t, False).T, dequantized(qdy, True), sizes)


@pytest.mark.parametrize("gemm", list(GEMMS))
def test_group_offset_computes_only_the_local_groups(gemm):
  sizes, offset, local = LAYOUTS["uneven_with_empty"], 1, 2
  qx, qw, qdy, group_sizes = _operands(41, sizes)
  if gemm != "wgrad":  # w holds experts [1, 3)
    qw = mxfp8.quantize(jnp.asarray(dequantized(qw, False)[offset:offset + local], jnp.float32),
                        rowwise=True, colwise=True)
  lhs, rhs, lhs64, rhs64 = _gemm_operands(gemm, qx, qw, qdy)
  out = mxfp8.ragged_dot_general(lhs, rhs, group_sizes, GEMMS[gemm],
                                 preferred_element_type=jnp.float32,
                                 group_offset=jnp.array([offset], jnp.int32))
  # wgrad: one output group per entry of group_sizes, output j = global group offset + j.
  check_product(out, gemm, lhs64, rhs64, sizes, offset, num_groups=G)


@pytest.mark.parametrize("gemm", list(GEMMS))
def test_swizzled_scales_give_the_same_result(gemm, monkeypatch):
  """Bit for bit on one backend: the dequantize one, the only one taking both layouts (the
  fused kernels, which take compact scales only, sum in other orders)."""
  monkeypatch.setattr(mxfp8_gemm, "FUSED_MAX_ROWS_PER_GROUP", 0)
  monkeypatch.setattr(mxfp8_gemm, "FUSED_WGRAD_MAX_ROWS_PER_GROUP", 0)
  sizes = LAYOUTS["tiny_groups"]
  compact = _gemm_operands(gemm, *_operands(51, sizes)[:3])[:2]
  swizzled_ops = _operands(51, sizes, scale_layout="swizzled")
  swizzled = _gemm_operands(gemm, *swizzled_ops[:3])[:2]
  run = lambda lhs, rhs: mxfp8.ragged_dot_general(lhs, rhs, swizzled_ops[3], GEMMS[gemm],
                                                  preferred_element_type=jnp.float32)
  np.testing.assert_array_equal(np.asarray(run(*swizzled)), np.asarray(run(*compact)))


@requires_gpu
@pytest.mark.parametrize("gemm", list(GEMMS))
def test_gpu_tensor_core_shapes(gemm):
  """bf16 results (the tensor-core path) on larger, 8-aligned shapes with uneven groups."""
  rng = np.random.default_rng(61)
  m, k, n, sizes = 1000, 256, 384, [300, 0, 17, 190, 1, 255, 100, 99]
  group_sizes = jnp.asarray(sizes, jnp.int32)
  q = lambda a, gs=None: mxfp8.quantize(jnp.asarray(a, jnp.bfloat16), gs, rowwise=True,
                                        colwise=True)
  qx, qw, qdy = (q(_values(rng, (m, k)), group_sizes), q(_values(rng, (len(sizes), k, n))),
                 q(_values(rng, (m, n)), group_sizes))
  lhs, rhs, lhs64, rhs64 = _gemm_operands(gemm, qx, qw, qdy)
  out = jax.jit(mxfp8.ragged_dot_general, static_argnums=3)(lhs, rhs, group_sizes, GEMMS[gemm])
  check_product(out, gemm, lhs64, rhs64, sizes, num_groups=len(sizes))


# --- orientation: what each GEMM reads ----------------------------------------------------

@pytest.mark.parametrize("gemm, lhs_colwise, rhs_colwise", [
    ("fwd", False, True), ("dgrad", False, False), ("wgrad", True, True)])
def test_backend_receives_the_orientation_each_gemm_needs(monkeypatch, gemm, lhs_colwise,
                                                          rhs_colwise):
  problems = []
  for name, real in list(mxfp8_gemm.BACKENDS.items()):  # whichever backend the call takes
    monkeypatch.setitem(mxfp8_gemm.BACKENDS, name,
                        lambda p, real=real: problems.append(p) or real(p))
  qx, qw, qdy, group_sizes = _operands(71, LAYOUTS["tiny_groups"])
  lhs, rhs, _, _ = _gemm_operands(gemm, qx, qw, qdy)
  mxfp8.ragged_dot_general(lhs, rhs, group_sizes, GEMMS[gemm])
  (problem,) = problems
  assert (problem.lhs.colwise, problem.rhs.colwise) == (lhs_colwise, rhs_colwise)
  assert problem.ragged_contracting == (gemm == "wgrad")
  assert problem.lhs.data is (qx.colwise_data if gemm == "wgrad" else lhs.data)


def test_plain_operands_go_straight_to_the_bf16_gemm(monkeypatch):
  monkeypatch.setitem(mxfp8_gemm.BACKENDS, "dequantize", lambda p: pytest.fail("MXFP8 backend"))
  x = jnp.ones((8, 4), jnp.bfloat16)
  out = mxfp8.ragged_dot(x, jnp.ones((2, 4, 3), jnp.bfloat16), jnp.array([3, 5], jnp.int32))
  np.testing.assert_array_equal(np.asarray(out, np.float32), 4)


@pytest.mark.parametrize("precision, plain, want", [
    (None, None, jnp.bfloat16), (jax.lax.Precision.HIGHEST, None, jnp.float32),
    ("highest", None, jnp.float32), (None, jnp.float32, jnp.float32),
    (None, jnp.float16, jnp.float32), (None, jnp.bfloat16, jnp.bfloat16)])
def test_dequantized_dtype_is_bf16_unless_f32_is_asked_for(precision, plain, want):
  qx, qw, _, group_sizes = _operands(81, LAYOUTS["tiny_groups"])
  lhs = qx if plain is None else jnp.zeros((M, K), plain)
  problem = mxfp8_gemm.resolve_problem(lhs, qw, group_sizes, GEMMS["fwd"], precision=precision)
  assert problem.compute_dtype == want


@pytest.mark.parametrize("fp8", [E4M3, E5M2], ids=FP8_IDS)
def test_exactness_ranges_hold_for_every_code_and_scale(fp8):
  """The table the bf16 choice rests on: every finite code times every power 2^(e-127)."""
  codes = np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, jnp.dtype(fp8).name))
  values = codes.astype(np.float64)
  values = values[np.isfinite(values)]
  fp8 = jnp.dtype(fp8)
  for out_dtype, (low, high) in ((ml_dtypes.bfloat16, mxfp8_gemm.BF16_EXACT_SCALE_EXPONENTS[fp8]),
                                 (np.float32, mxfp8_gemm.F32_EXACT_SCALE_EXPONENTS[fp8])):
    for e in range(255):  # 255 = 0xFF is NaN
      exact = values * np.exp2(e - 127.0)
      with np.errstate(over="ignore"):
        rounded = exact.astype(out_dtype).astype(np.float64)
      assert np.array_equal(rounded, exact) == (low <= e <= high), (out_dtype, e)


# --- trace-time errors ----------------------------------------------------------------------

def test_missing_orientation_names_the_operand():
  qx, _, _, group_sizes = _operands(91, LAYOUTS["tiny_groups"])
  w_rowwise_only = mxfp8.quantize(jnp.ones((G, K, N), jnp.bfloat16))
  with pytest.raises(ValueError, match="rhs: .*needs colwise data; quantize with colwise=True"):
    mxfp8.ragged_dot(qx, w_rowwise_only, group_sizes)


def test_wgrad_needs_blocks_that_restart_at_group_boundaries():
  _, _, qdy, group_sizes = _operands(92, LAYOUTS["tiny_groups"])
  x_ungrouped = mxfp8.quantize(jnp.ones((M, K), jnp.bfloat16), colwise=True)
  with pytest.raises(ValueError, match="lhs: .*must restart at group boundaries.*'dense'"):
    mxfp8.ragged_dot_general(x_ungrouped, qdy, group_sizes, GEMMS["wgrad"])
  with pytest.raises(ValueError, match="rhs: quantized with group_sizes of shape"):
    mxfp8.ragged_dot_general(jnp.ones((M, K), jnp.bfloat16), qdy, jnp.ones((G + 1,), jnp.int32),
                             GEMMS["wgrad"])


def test_shape_and_result_dtype_mismatches_fail_at_trace_time():
  """MXFP8 operands go through jax.lax's shape rule at their logical shapes (as plain ones
  do), so a mismatch fails while tracing, not in the kernel."""
  qx = mxfp8.quantize(jnp.ones((16, 32), jnp.bfloat16))
  sizes = jnp.array([5, 7], jnp.int32)
  weights = lambda shape: mxfp8.quantize(jnp.ones(shape, jnp.bfloat16), colwise=True)
  trace = lambda rhs, group_sizes=sizes, **kw: jax.eval_shape(
      lambda: mxfp8.ragged_dot(qx, rhs, group_sizes, **kw))
  with pytest.raises(TypeError, match="contracting dimensions to have the same shape"):
    trace(weights((2, 64, 16)))
  with pytest.raises(TypeError, match="expected rhs group dimension size to be 3, got 2"):
    trace(weights((2, 32, 16)), jnp.array([5, 7, 1], jnp.int32))
  with pytest.raises(TypeError, match="expected rhs group dimension size to be 2, got 32"):
    trace(weights((32, 16)))
  with pytest.raises(TypeError, match="preferred_element_type: the kernels write"):
    trace(weights((2, 32, 16)), preferred_element_type=jnp.int8)


def test_malformed_operands_fail_at_trace_time():
  """Leaves that are not what quantize gives for the tensor's layout (relabelled scale
  layout, cut scales, non-fp8 data, a vmapped-over stack) fail while tracing, naming the
  operand, before any kernel reads their bytes in the wrong order."""
  qx, qw, _, sizes = _operands(94, LAYOUTS["tiny_groups"])
  trace = lambda lhs, rhs: jax.eval_shape(lambda: mxfp8.ragged_dot(lhs, rhs, sizes))
  with pytest.raises(TypeError, match="rhs: rowwise scales of layout 'same_dims' with swizzled"):
    trace(qx, dataclasses.replace(qw, scale_layout="swizzled"))
  with pytest.raises(TypeError, match="lhs: rowwise scales of layout 'varying_first'"):
    trace(dataclasses.replace(qx, scale_inv=qx.scale_inv[:10]), qw)
  with pytest.raises(TypeError, match="lhs: rowwise data must be float8_e4m3fn or float8_e5m2"):
    trace(dataclasses.replace(qx, data=qx.data.astype(jnp.bfloat16)), qw)
  stacked = jax.vmap(lambda w: mxfp8.quantize(w, colwise=True))(jnp.ones((2, G, K, N)))
  with pytest.raises(TypeError, match="rhs: an MXFP8 tensor of layout 'same_dims' has rank 3"):
    trace(qx, stacked)
  with pytest.raises(TypeError, match="q: an MXFP8 tensor of layout 'same_dims' has rank 3"):
    mxfp8.dequantize(stacked)
  with pytest.raises(TypeError, match="x: expected an array"):
    jgg.grouped_dense(qx, jnp.ones((G, K, N)), sizes, recipe=jgg.MXFP8Recipe())


def test_batched_lhs_falls_back_to_a_backend_that_takes_it():
  """A [B, M, K] x with the forward's dimension numbers is jax.lax's shape rule's to accept;
  the fused kernel takes matrices only, so the call falls back (it asserted before)."""
  rng = np.random.default_rng(95)
  x = jnp.asarray(_values(rng, (2, 16, 32)), jnp.bfloat16)
  w = jnp.asarray(_values(rng, (2, 16, 8)), jnp.bfloat16)
  q = lambda a: mxfp8.quantize(a, rowwise=True, colwise=True)
  sizes = jnp.array([1, 1], jnp.int32)
  out = mxfp8.ragged_dot_general(q(x), q(w), sizes, BASIC_DIMENSION_NUMBERS,
                                 preferred_element_type=jnp.float32)
  # x contracts its axis 1, the second to last: the GEMM reads its colwise blocks.
  want = jax.lax.ragged_dot_general(mxfp8.dequantize(q(x), jnp.float32, colwise=True),
                                    mxfp8.dequantize(q(w), jnp.float32, colwise=True), sizes,
                                    BASIC_DIMENSION_NUMBERS, precision=jax.lax.Precision.HIGHEST)
  np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_contracting_a_blockless_axis_is_rejected():
  _, qw, _, _ = _operands(93, LAYOUTS["tiny_groups"])
  dims = jax.lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(([0], [0]), ([], [])), lhs_ragged_dimensions=[1],
      rhs_group_dimensions=[])
  with pytest.raises(TypeError, match="lhs: MXFP8 blocks run along axis 2 .* or 1 .*contracts "
                                      "axis 0"):
    mxfp8.ragged_dot_general(qw, jnp.ones((G, 5), jnp.bfloat16), jnp.ones((3,), jnp.int32), dims)
