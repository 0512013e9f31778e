"""jgg.grouped_dense: recipe=None against float64, and the MXFP8 recipe's custom VJP.

The MXFP8 recipe is checked GEMM by GEMM against float64 products of the values
it must use (x and the kernel quantized once for the forward, dy once for the
backward, each read in its GEMM's orientation), with group_offset, pre-quantized
kernels, jit + grad + remat with the named residuals, and a few SGD steps of a
small MoE-style regression that must track BF16.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
import reference
from jax_grouped_gemm.grouped_dense import RESIDUAL_NAMES
from mxfp8_gemm_reference import check_product, dequantized

M, K, N = 150, 72, 40
SIZES = [37, 0, 70, 33]  # an empty group, none a multiple of 32, a 10-row tail of no group
G = len(SIZES)
quantize = jgg.mxfp8.quantize


def _operands(seed, x_dtype=jnp.bfloat16, kernel_dtype=jnp.bfloat16, g=G):
  rng = np.random.default_rng(seed)
  scale = lambda shape: np.exp2(rng.integers(-4, 5, shape[:-1] + (1,)))  # varied block scales
  x = rng.standard_normal((M, K)) * scale((M, K))
  kernel = rng.standard_normal((g, K, N)) * scale((g, K, N))
  dy = rng.standard_normal((M, N)) * scale((M, N))
  return (jnp.asarray(x, x_dtype), jnp.asarray(kernel, kernel_dtype), dy,
          jnp.asarray(SIZES, jnp.int32))


def _vjp(fn, x, kernel, dy):
  y, pullback = jax.vjp(fn, x, kernel)
  return (y,) + pullback(jnp.asarray(dy, y.dtype))


def _check_recipe(recipe, x, kernel, dy, y, dx, dw, group_offset=0, prequantized=None):
  """y, dx, dw are the float64 products of the values the recipe must multiply."""
  sizes = jnp.asarray(SIZES, jnp.int32)
  qx = quantize(x, sizes, rowwise=True, colwise=True, dtype=recipe.forward_dtype)
  qw = prequantized or quantize(kernel, rowwise=True, colwise=True, dtype=recipe.forward_dtype)
  qdy = quantize(jnp.asarray(dy, y.dtype), sizes, rowwise=True, colwise=True,
                 dtype=recipe.gradient_dtype)
  check_product(y, "fwd", dequantized(qx, False), dequantized(qw, True), SIZES, group_offset)
  check_product(dx, "dgrad", dequantized(qdy, False), dequantized(qw, False), SIZES, group_offset)
  if dw is not None:
    check_product(dw, "wgrad", dequantized(qx, True), dequantized(qdy, True), SIZES, group_offset,
                  num_groups=qw.shape[0])


# --- recipe=None ------------------------------------------------------------------------------

def test_without_recipe_is_the_bf16_grouped_gemm_with_its_gradients():
  x, kernel, dy, sizes = _operands(0, jnp.float32, jnp.float32)
  y, dx, dw = _vjp(lambda a, b: jgg.grouped_dense(a, b, sizes), x, kernel, dy)
  x64, w64 = np.asarray(x, np.float64), np.asarray(kernel, np.float64)
  for got, want in ((y, reference.ragged_m(x64, w64, SIZES)),
                    (dx, reference.ragged_m(dy, w64, SIZES, rhs_transposed=True)),
                    (dw, reference.ragged_k(x64, dy, SIZES, G))):
    assert reference.relative_error(got, want) < reference.TOLERANCE["float32"]


# --- the MXFP8 recipe ------------------------------------------------------------------------

@pytest.mark.parametrize("recipe", [
    jgg.MXFP8Recipe(),
    jgg.MXFP8Recipe(gradient_dtype=jnp.float8_e5m2),
    jgg.MXFP8Recipe(forward_dtype=jnp.float8_e5m2, scale_layout="swizzled"),
], ids=["e4m3", "e4m3_fwd_e5m2_grad", "e5m2_swizzled"])
def test_recipe_forward_dgrad_wgrad_equal_dequantize_then_f32_matmul(recipe):
  x, kernel, dy, sizes = _operands(1)
  fn = jax.jit(lambda a, b: jgg.grouped_dense(a, b, sizes, recipe=recipe))
  y, dx, dw = _vjp(fn, x, kernel, dy)
  assert (y.dtype, dx.dtype, dw.dtype) == (jnp.bfloat16,) * 3
  _check_recipe(recipe, x, kernel, dy, y, dx, dw)
  for g, size in enumerate(SIZES):  # empty group: no gradient
    if size == 0:
      np.testing.assert_array_equal(np.asarray(dw[g], np.float32), 0)


def test_gradients_come_back_in_the_input_dtypes():
  x, kernel, dy, sizes = _operands(2, jnp.bfloat16, jnp.float32)
  recipe = jgg.MXFP8Recipe()
  y, dx, dw = _vjp(lambda a, b: jgg.grouped_dense(a, b, sizes, recipe=recipe), x, kernel, dy)
  assert (y.dtype, dx.dtype, dw.dtype) == (jnp.float32, jnp.bfloat16, jnp.float32)
  _check_recipe(recipe, x, kernel, dy, y, dx, dw)


def test_recipe_gradients_stay_close_to_bf16():
  x, kernel, dy, sizes = _operands(3)
  plain = _vjp(lambda a, b: jgg.grouped_dense(a, b, sizes), x, kernel, dy)
  mx = _vjp(lambda a, b: jgg.grouped_dense(a, b, sizes, recipe=jgg.MXFP8Recipe()), x, kernel, dy)
  for a, b in zip(mx, plain):  # e4m3 keeps 4 significant bits: a few percent
    assert 0 < reference.relative_error(a, np.asarray(b, np.float64)) < 0.08


def test_group_offset_computes_and_differentiates_only_the_local_experts():
  offset, local = 1, 2
  x, kernel, dy, sizes = _operands(4, g=local)
  recipe = jgg.MXFP8Recipe()
  fn = lambda a, b: jgg.grouped_dense(a, b, sizes, recipe=recipe,
                                      group_offset=jnp.array([offset], jnp.int32))
  y, dx, dw = _vjp(fn, x, kernel, dy)
  assert dw.shape == kernel.shape
  _check_recipe(recipe, x, kernel, dy, y, dx, dw, group_offset=offset)


def _quantize_orientations(fn, *args):
  """(rowwise, colwise) of every quantize call in fn's program, in order."""
  # A plain ffi_call, or the group-batched call of a stack (mxfp8/quantize.py).
  calls = re.split(r"ffi_call\[|jgg_group_batched_call\[", str(jax.make_jaxpr(fn)(*args)))[1:]
  flag = lambda name, call: re.search(rf"\('{name}', (True|False)\)", call).group(1) == "True"
  return [(flag("rowwise", c), flag("colwise", c)) for c in calls
          if re.search(r"target(_name)?=jgg_mxfp8_quantize", c)]


def test_each_operand_is_quantized_once_in_the_orientations_needed():
  x, kernel, dy, sizes = _operands(11)
  recipe = jgg.MXFP8Recipe()
  forward = lambda a, b: jgg.grouped_dense(a, b, sizes, recipe=recipe)
  # Serving (no gradient): x rowwise, kernel colwise only.
  assert _quantize_orientations(forward, x, kernel) == [(True, False), (False, True)]
  # Training: x, kernel and dy each once, both orientations in one pass.
  loss = lambda a, b: jnp.sum(forward(a, b).astype(jnp.float32) ** 2)
  assert _quantize_orientations(jax.grad(loss, (0, 1)), x, kernel) == [(True, True)] * 3


# --- pre-quantized kernels (serving) -------------------------------------------------------

def test_prequantized_kernel_gives_the_same_results_as_quantizing_inside():
  x, kernel, dy, sizes = _operands(5)
  recipe = jgg.MXFP8Recipe()
  qw = quantize(kernel, rowwise=True, colwise=True)
  inside = _vjp(lambda a, b: jgg.grouped_dense(a, b, sizes, recipe=recipe), x, kernel, dy)
  y, pullback = jax.vjp(lambda a: jgg.grouped_dense(a, qw, sizes, recipe=recipe), x)
  (dx,) = pullback(jnp.asarray(dy, y.dtype))
  np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(inside[0], np.float32))
  np.testing.assert_array_equal(np.asarray(dx, np.float32), np.asarray(inside[1], np.float32))


def test_prequantized_kernel_without_recipe_is_weight_only_mxfp8():
  x, kernel, dy, sizes = _operands(6)
  qw = quantize(kernel, colwise=True, rowwise=False)
  y = jax.jit(lambda a, q: jgg.grouped_dense(a, q, sizes))(x, qw)
  assert y.dtype == x.dtype
  check_product(y, "fwd", np.asarray(x, np.float64), dequantized(qw, True), SIZES)


def test_prequantized_kernel_needs_its_orientations():
  x, kernel, _, sizes = _operands(7)
  recipe = jgg.MXFP8Recipe()
  rowwise_only = quantize(kernel)
  with pytest.raises(ValueError, match="kernel: .*needs colwise data"):
    jgg.grouped_dense(x, rowwise_only, sizes, recipe=recipe)
  colwise_only = quantize(kernel, rowwise=False, colwise=True)
  jgg.grouped_dense(x, colwise_only, sizes, recipe=recipe)  # serving: forward only
  loss = lambda a: jnp.sum(jgg.grouped_dense(a, colwise_only, sizes, recipe=recipe)
                           .astype(jnp.float32))
  with pytest.raises(ValueError, match="kernel: .*no rowwise data.*dx"):
    jax.grad(loss)(x)


# --- jit + grad + remat ---------------------------------------------------------------------

@pytest.mark.parametrize("saved, quantize_calls", [
    (RESIDUAL_NAMES, 3),  # x, kernel (forward) and dy: nothing recomputed
    (RESIDUAL_NAMES[:1], 4),  # the kernel's rowwise half is recomputed
    ((), 5),  # both recomputed
])
def test_remat_policy_saves_or_recomputes_the_named_residuals(saved, quantize_calls):
  x, kernel, dy, sizes = _operands(8)
  recipe = jgg.MXFP8Recipe()
  cotangent = jnp.asarray(dy, jnp.bfloat16)
  loss = lambda a, b: jnp.sum((jgg.grouped_dense(a, b, sizes, recipe=recipe) * cotangent)
                              .astype(jnp.float32))
  policy = jax.checkpoint_policies.save_only_these_names(*saved)
  remat_grad = jax.jit(jax.grad(jax.checkpoint(loss, policy=policy), (0, 1)))
  program = str(jax.make_jaxpr(remat_grad)(x, kernel))
  assert program.count("jgg_mxfp8_quantize") == quantize_calls
  for a, b in zip(remat_grad(x, kernel), jax.jit(jax.grad(loss, (0, 1)))(x, kernel)):
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


# --- training ---------------------------------------------------------------------------------

def test_mxfp8_training_tracks_bf16_on_a_small_moe_regression():
  """Two grouped layers (an expert MLP) fit a teacher's outputs by SGD; the MXFP8 recipe's
  losses stay within a few percent of the BF16 ones, step by step."""
  rng = np.random.default_rng(9)
  d, f, experts, rows = 64, 96, 4, 160
  sizes = jnp.asarray([50, 0, 41, 61], jnp.int32)  # 152 of 160 rows; an empty expert
  x = jnp.asarray(rng.standard_normal((rows, d)), jnp.bfloat16)
  init = lambda shape, fan_in: jnp.asarray(rng.standard_normal(shape) / np.sqrt(fan_in),
                                           jnp.float32)
  teacher = (init((experts, d, f), d), init((experts, f, d), f))
  params = (init((experts, d, f), d), init((experts, f, d), f))

  def mlp(params, recipe):
    w_in, w_out = (w.astype(jnp.bfloat16) for w in params)
    h = jax.nn.gelu(jgg.grouped_dense(x, w_in, sizes, recipe=recipe))
    return jgg.grouped_dense(h, w_out, sizes, recipe=recipe).astype(jnp.float32)

  target = mlp(teacher, None)

  @functools.partial(jax.jit, static_argnums=1)
  def step(params, recipe):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((mlp(p, recipe) - target) ** 2))(params)
    return jax.tree.map(lambda p, g: p - 2.0 * g, params, grads), loss

  def losses(recipe):
    p, out = params, []
    for _ in range(12):
      p, loss = step(p, recipe)
      out.append(float(loss))
    return np.asarray(out)

  bf16, mxfp8 = losses(None), losses(jgg.MXFP8Recipe())
  assert bf16[-1] < 0.5 * bf16[0] and mxfp8[-1] < 0.5 * mxfp8[0]
  np.testing.assert_allclose(mxfp8, bf16, rtol=0.05)


# --- trace-time errors -----------------------------------------------------------------------

def test_errors_name_the_argument():
  x, kernel, _, sizes = _operands(10)
  recipe = jgg.MXFP8Recipe()
  with pytest.raises(TypeError, match="recipe: expected None or jgg.MXFP8Recipe"):
    jgg.grouped_dense(x, kernel, sizes, recipe="mxfp8")
  with pytest.raises(TypeError, match="x: expected \\[rows, K\\]"):
    jgg.grouped_dense(x[None], kernel, sizes, recipe=recipe)
  with pytest.raises(TypeError, match="kernel: expected \\[groups, 72, N\\]"):
    jgg.grouped_dense(x, kernel[:, 1:], sizes, recipe=recipe)
  with pytest.raises(TypeError, match="group_sizes: expected 4 groups"):
    jgg.grouped_dense(x, kernel, sizes[:3], recipe=recipe)
  with pytest.raises(TypeError, match="group_offset: expected an integer array of shape \\(1,\\)"):
    jgg.grouped_dense(x, kernel, sizes, recipe=recipe, group_offset=jnp.array([1.7]))
  for no_recipe in (None, recipe):
    with pytest.raises(TypeError, match="kernel: holds 4 groups, more than the 3 of group_sizes"):
      jgg.grouped_dense(x, kernel, sizes[:3], recipe=no_recipe, group_offset=jnp.array([0]))
  with pytest.raises(ValueError, match="kernel: a pre-quantized kernel must be a \\[G, K, N\\]"):
    jgg.grouped_dense(x, quantize(kernel[0]), sizes, recipe=recipe)
  with pytest.raises(TypeError, match="forward_dtype: expected float8_e4m3fn or float8_e5m2"):
    jgg.MXFP8Recipe(forward_dtype=jnp.bfloat16)
  with pytest.raises(ValueError, match="scale_layout: expected one of"):
    jgg.MXFP8Recipe(scale_layout="blocked")
  assert jgg.MXFP8Recipe(gradient_dtype="float8_e5m2") == jgg.MXFP8Recipe(
      gradient_dtype=jnp.float8_e5m2)


@pytest.mark.parametrize("x_spec, kernel_spec", [
    ((), (None, None, "model")), ((), ("model",)), (("data",), ()), ((None, "model"), (None, "model")),
], ids=["column", "expert", "data", "row"])
def test_mxfp8_recipe_on_explicit_axes_returns_typed_gradients(x_spec, kernel_spec):
  """Sharding in types: the custom VJP's gradients carry their primals' shardings, and
  the numbers are the unsharded ones."""
  from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
  from sharding_checks import cpu_mesh

  x, kernel, dy, sizes = _operands(12)
  fn = lambda a, b: jgg.grouped_dense(a, b, sizes, recipe=jgg.MXFP8Recipe())
  want = _vjp(fn, x, kernel, dy)
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  with jax.set_mesh(mesh):
    xs = jax.device_put(x, NamedSharding(mesh, P(*x_spec)))
    ks = jax.device_put(kernel, NamedSharding(mesh, P(*kernel_spec)))
    got = jax.jit(functools.partial(_vjp, fn, dy=dy))(xs, ks)
    for gradient, primal in zip(got[1:], (xs, ks)):
      assert jax.typeof(gradient).sharding.spec == jax.typeof(primal).sharding.spec
  for a, b in zip(got, want):
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


@pytest.mark.parametrize("recipe", [None, jgg.MXFP8Recipe()], ids=["plain", "mxfp8"])
def test_differentiates_inside_shard_map_with_a_replicated_kernel(recipe):
  """Data parallel in shard_map: x and the group sizes split, the kernel replicated. The
  kernel's gradient is the sum over shards (pcast's transpose), as unsharded."""
  from jax.sharding import PartitionSpec as P
  from sharding_checks import cpu_mesh

  mesh = cpu_mesh((8,), ("x",))
  rng = np.random.default_rng(5)
  x = jnp.asarray(rng.standard_normal((8 * 16, 64)), jnp.float32)
  kernel = jnp.asarray(rng.standard_normal((2, 64, 32)), jnp.float32)
  sizes = jnp.asarray(rng.integers(0, 9, (8, 2)), jnp.int32)  # per shard: 16 rows, 2 groups

  def shard_loss(x, kernel, sizes):
    return jax.lax.psum((jgg.grouped_dense(x, kernel, sizes, recipe=recipe) ** 2).sum(), "x")
  loss = jax.shard_map(shard_loss, mesh=mesh, in_specs=(P("x"), P(), P("x")), out_specs=P())
  got = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, kernel, sizes.reshape(-1))

  def unsharded_loss(x, kernel):
    blocks = (x[16 * i:16 * (i + 1)] for i in range(8))
    return sum((jgg.grouped_dense(block, kernel, sizes[i], recipe=recipe) ** 2).sum()
               for i, block in enumerate(blocks))
  want = jax.grad(unsharded_loss, argnums=(0, 1))(x, kernel)
  for a, b in zip(got, want):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-4)
