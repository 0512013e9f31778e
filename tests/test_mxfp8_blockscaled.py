"""The block-scaled MXFP8 grouped GEMM call (backend "blockscaled_sm100").

Its CUDA handler runs CUTLASS's sm_100 kernels, which no GPU here can run; what
is checked here is everything around them:
  * the CPU handler (the call's reference semantics, which reads each group's
    operands and swizzled scales at the offsets the CUDA preparation kernel
    hands CUTLASS: mxfp8_blockscaled_problem.h's DescribeGroup) equals
    dequantize -> f32 matmul for the forward, dgrad and wgrad, on ragged
    layouts with empty groups, sizes that are not multiples of 32, a tail of no
    group and clamped sizes;
  * CUTLASS's sm_100 scale layout is our swizzled layout, byte for byte (host
    code of the CUDA build);
  * the backend is chosen only when asked for and when the call fits;
  * on a GPU that is not sm_100 the call fails with an error, never a result.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from conftest import requires_gpu
from jax_grouped_gemm import _native, mxfp8_gemm
from jax_grouped_gemm.grouped_dense import DGRAD_DIMENSION_NUMBERS, WGRAD_DIMENSION_NUMBERS
from jax_grouped_gemm.ragged_dot import BASIC_DIMENSION_NUMBERS
from mxfp8_gemm_reference import check_product, dequantized

mxfp8 = jgg.mxfp8
M, K, N, G = 150, 80, 48, 4  # K, N multiples of 16 with partial 32-blocks
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
LAYOUTS = {
    "uneven_with_empty": [37, 0, 70, 33],  # a 10-row tail of no group
    "tiny_groups": [1, 31, 33, 2],
    "negative_and_clamped": [-5, 90, 100, 7],
    "one_group_of_all": [0, 150, 0, 0],
}
GEMMS = {"fwd": BASIC_DIMENSION_NUMBERS, "dgrad": DGRAD_DIMENSION_NUMBERS,
         "wgrad": WGRAD_DIMENSION_NUMBERS}
CPU = jax.devices("cpu")[0]


@pytest.fixture
def blockscaled(monkeypatch):
  monkeypatch.setenv(mxfp8_gemm.BACKEND_ENV, "blockscaled_sm100")


def _operands(seed, sizes, lhs_fp8=E4M3, rhs_fp8=E4M3, scale_layout="swizzled"):
  rng = np.random.default_rng(seed)
  values = lambda shape: (rng.standard_normal(shape)
                          * np.exp2(rng.integers(-6, 7, shape[:-1] + (1,))))
  group_sizes = jnp.asarray(sizes, jnp.int32)
  quantize = lambda a, fp8, gs=None: mxfp8.quantize(
      jnp.asarray(a, jnp.bfloat16), gs, rowwise=True, colwise=True, dtype=fp8,
      scale_layout=scale_layout)
  return (quantize(values((M, K)), lhs_fp8, group_sizes), quantize(values((G, K, N)), rhs_fp8),
          quantize(values((M, N)), lhs_fp8, group_sizes), group_sizes)


def _gemm(gemm, qx, qw, qdy):
  lhs, rhs = {"fwd": (qx, qw), "dgrad": (qdy, qw), "wgrad": (qx, qdy)}[gemm]
  colwise = {"fwd": (False, True), "dgrad": (False, False), "wgrad": (True, True)}[gemm]
  return lhs, rhs, dequantized(lhs, colwise[0]), dequantized(rhs, colwise[1])


@pytest.mark.parametrize("fp8s", [(E4M3, E4M3), (E5M2, E4M3)], ids=["e4m3", "e5m2_e4m3"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("gemm", list(GEMMS))
def test_reference_equals_dequantize_then_f32_matmul(blockscaled, gemm, layout, fp8s):
  with jax.default_device(CPU):
    seed = 10 * list(GEMMS).index(gemm) + list(LAYOUTS).index(layout)
    qx, qw, qdy, group_sizes = _operands(seed, LAYOUTS[layout], *fp8s)
    lhs, rhs, lhs64, rhs64 = _gemm(gemm, qx, qw, qdy)
    problem = mxfp8_gemm.resolve_problem(lhs, rhs, group_sizes, GEMMS[gemm],
                                         preferred_element_type=jnp.float32)
    assert mxfp8_gemm.choose_backend(problem) == "blockscaled_sm100"
    f = jax.jit(lambda a, b, gs: mxfp8.ragged_dot_general(a, b, gs, GEMMS[gemm],
                                                          preferred_element_type=jnp.float32))
    assert _native.MXFP8_BLOCKSCALED_TARGET in f.lower(lhs, rhs, group_sizes).as_text()
    out = f(lhs, rhs, group_sizes)
  check_product(out, gemm, lhs64, rhs64, LAYOUTS[layout])
  if gemm == "wgrad":  # empty groups are exactly zero
    for g, size in enumerate(LAYOUTS[layout]):
      if size <= 0:
        assert not np.asarray(out[g]).any()


def test_bf16_result(blockscaled):
  with jax.default_device(CPU):
    qx, qw, _, group_sizes = _operands(3, LAYOUTS["uneven_with_empty"])
    out = mxfp8.ragged_dot(qx, qw, group_sizes)
    lhs64, rhs64 = dequantized(qx, False), dequantized(qw, True)
  assert out.dtype == jnp.bfloat16
  check_product(out, "fwd", lhs64, rhs64, LAYOUTS["uneven_with_empty"])


@pytest.mark.parametrize("gemm", list(GEMMS))
def test_chosen_only_when_asked_for(monkeypatch, gemm):
  with jax.default_device(CPU):
    qx, qw, qdy, group_sizes = _operands(1, LAYOUTS["tiny_groups"])
    lhs, rhs, _, _ = _gemm(gemm, qx, qw, qdy)
    problem = mxfp8_gemm.resolve_problem(lhs, rhs, group_sizes, GEMMS[gemm])
  monkeypatch.delenv(mxfp8_gemm.BACKEND_ENV, raising=False)
  assert mxfp8_gemm.choose_backend(problem) != "blockscaled_sm100"
  monkeypatch.setenv(mxfp8_gemm.BACKEND_ENV, "blockscaled_sm100")
  assert mxfp8_gemm.choose_backend(problem) == "blockscaled_sm100"


@pytest.mark.parametrize("gemm", list(GEMMS))
def test_token_operands_grouped_by_other_sizes_take_the_dequantize_branch(blockscaled, gemm):
  """The kernel locates the token operands' scales by the GEMM's group sizes. x and dy
  quantized with other values (the same count) pass the static checks, so the call compares
  the sizes on the device and takes the dequantize backend where they differ: the result
  stays the exact product, as when the sizes are the GEMM's."""
  with jax.default_device(CPU):
    qx, qw, qdy, quantized_with = _operands(40 + len(gemm), [60, 10, 50, 30])
    sizes = [37, 0, 70, 33]
    lhs, rhs, lhs64, rhs64 = _gemm(gemm, qx, qw, qdy)
    out = jax.jit(lambda l, r, s: mxfp8.ragged_dot_general(
        l, r, s, GEMMS[gemm], preferred_element_type=jnp.float32))(lhs, rhs,
                                                                    jnp.asarray(sizes, jnp.int32))
  assert mxfp8_gemm.choose_backend(mxfp8_gemm.resolve_problem(
      lhs, rhs, quantized_with, GEMMS[gemm])) == "blockscaled_sm100"
  check_product(out, gemm, lhs64, rhs64, sizes, num_groups=G if gemm == "wgrad" else None)


def test_misfits_fall_back(blockscaled):
  with jax.default_device(CPU):
    qx, qw, _, group_sizes = _operands(2, LAYOUTS["tiny_groups"], scale_layout="compact")
    compact = mxfp8_gemm.resolve_problem(qx, qw, group_sizes, BASIC_DIMENSION_NUMBERS)
    sx, sw, _, _ = _operands(2, LAYOUTS["tiny_groups"])
    dense_x = mxfp8.quantize(jnp.ones((M, K), jnp.bfloat16), scale_layout="swizzled")
    ungrouped = mxfp8_gemm.resolve_problem(dense_x, sw, group_sizes, BASIC_DIMENSION_NUMBERS)
    f16 = mxfp8_gemm.resolve_problem(sx, sw, group_sizes, BASIC_DIMENSION_NUMBERS,
                                     preferred_element_type=jnp.float16)
  assert mxfp8_gemm.blockscaled_misfit(compact) == "compact scales"
  assert "varying_first" in mxfp8_gemm.blockscaled_misfit(ungrouped)
  assert "result dtype" in mxfp8_gemm.blockscaled_misfit(f16)
  for problem in (compact, ungrouped, f16):
    assert mxfp8_gemm.choose_backend(problem) != "blockscaled_sm100"


@pytest.mark.skipif(not _native.CUDA_BUILT or _native.mxfp8_blockscaled_layout_mismatches(1, 16) < 0,
                    reason="needs the sm_100 build (nvcc >= 12.8): CUTLASS's layout")
@pytest.mark.parametrize("rows, depth", [(1, 16), (5, 48), (128, 128), (129, 160), (300, 608),
                                         (256, 4096), (37, 1008)])
def test_cutlass_scale_layout_is_the_swizzled_layout(rows, depth):
  assert _native.mxfp8_blockscaled_layout_mismatches(rows, depth) == 0


@requires_gpu
def test_other_gpus_get_an_error_not_a_result(blockscaled):
  gpu = jax.devices("gpu")[0]
  if gpu.compute_capability == "10.0":
    pytest.skip("an sm_100 GPU runs the kernels")
  with jax.default_device(gpu):
    qx, qw, _, group_sizes = _operands(4, LAYOUTS["tiny_groups"])
    with pytest.raises(Exception, match="sm_100"):
      jax.block_until_ready(mxfp8.ragged_dot(qx, qw, group_sizes))


def test_grouped_dense_recipe_runs_every_gemm_on_it(monkeypatch):
  """With swizzled scales, the recipe's forward, dgrad and wgrad all take the call, and
  its values and gradients are those of the default backends (same quantized operands)."""
  rng = np.random.default_rng(7)
  sizes = jnp.asarray(LAYOUTS["uneven_with_empty"], jnp.int32)
  x = jnp.asarray(rng.standard_normal((M, K)), jnp.bfloat16)
  w = jnp.asarray(rng.standard_normal((G, K, N)) / np.sqrt(K), jnp.bfloat16)
  recipe = jgg.MXFP8Recipe(scale_layout="swizzled")

  def loss(x, w):
    y = jgg.grouped_dense(x, w, sizes, recipe=recipe)
    return jnp.sum(y.astype(jnp.float32) * jnp.linspace(-1, 1, N))

  step = lambda: jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
  with jax.default_device(CPU):
    monkeypatch.delenv(mxfp8_gemm.BACKEND_ENV, raising=False)
    expected = step()(x, w)
    monkeypatch.setenv(mxfp8_gemm.BACKEND_ENV, "blockscaled_sm100")
    hlo = step().lower(x, w).as_text()
    got = step()(x, w)
  assert hlo.count(_native.MXFP8_BLOCKSCALED_TARGET) == 3, "forward, dgrad and wgrad"
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2 * np.abs(b).max())


def test_a_wgrad_of_more_groups_than_a_grid_row_holds_falls_back(blockscaled):
  """The sm_100 wgrad zeroes empty groups with one grid row per group (at most 65535): more
  groups take the dequantize backend rather than fail at run time."""
  with jax.default_device(CPU):
    for groups, misfit in ((65535, None), (65536, "more than 65535 groups")):
      sizes = jnp.zeros((groups,), jnp.int32).at[0].set(64)
      quantize = lambda a: mxfp8.quantize(a, sizes, rowwise=False, colwise=True,
                                          scale_layout="swizzled")
      problem = mxfp8_gemm.resolve_problem(quantize(jnp.ones((64, 32), jnp.bfloat16)),
                                           quantize(jnp.ones((64, 16), jnp.bfloat16)), sizes,
                                           GEMMS["wgrad"])
      got = mxfp8_gemm.blockscaled_misfit(problem)
      assert got == misfit or (misfit is not None and misfit in got), (groups, got)
