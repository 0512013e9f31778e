"""jgg.flax: GroupedDense, RaggedDot and MoE for flax.nnx and flax.linen.

Parameter names and shapes, results against float64 references (bias, empty
groups, rows past the groups, group_offset), gradients against the same
modules on jax.lax.ragged_dot, sharding metadata honoured under jit on 8 CPU
devices, and the recipe argument.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import moe_reference
import reference
from multidevice import run_on_cpu_devices
from reference import TOLERANCE, relative_error

import jax_grouped_gemm as jgg
from jax_grouped_gemm.flax import linen as jgg_linen
from jax_grouped_gemm.flax import nnx as jgg_nnx

def grouped_dense_reference(x, kernel, bias, group_sizes, group_offset=0):
  """float64: rows of local group j get x . kernel[j] + bias[j]; other rows 0."""
  out = reference.ragged_m(x, kernel, group_sizes, group_offset)
  bounds = reference.group_boundaries(group_sizes, x.shape[0], group_offset, kernel.shape[0])
  for j in range(kernel.shape[0]):
    out[bounds[j]:bounds[j + 1]] += np.asarray(bias[j], np.float64)
  return out


def random_bias_init(key, shape, dtype):  # never zeros: a bias bug must show
  return jax.random.normal(key, shape, dtype)


# --- GroupedDense -------------------------------------------------------------------

def test_nnx_grouped_dense_parameters():
  layer = jgg_nnx.GroupedDense(5, 8, 12, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
  params = nnx.state(layer, nnx.Param)
  assert {k: v.shape for k, v in nnx.to_flat_state(params)} == {("kernel",): (5, 8, 12),
                                                          ("bias",): (5, 12)}
  assert layer.kernel[...].dtype == jnp.bfloat16
  assert np.std(np.asarray(layer.kernel[...], np.float32)) == pytest.approx(1 / np.sqrt(8), rel=0.2)
  no_bias = jgg_nnx.GroupedDense(5, 8, 12, use_bias=False, rngs=nnx.Rngs(0))
  assert [k for k, _ in nnx.to_flat_state(nnx.state(no_bias, nnx.Param))] == [("kernel",)]


def test_linen_grouped_dense_parameters():
  layer = jgg_linen.GroupedDense(num_groups=5, features=12)
  variables = layer.init(jax.random.key(0), jnp.ones((7, 8)), jnp.array([3, 0, 2, 1, 1]))
  assert jax.tree.map(jnp.shape, variables) == {"params": {"kernel": (5, 8, 12), "bias": (5, 12)}}


GROUP_CASES = {
    "uneven": [5, 0, 9, 3],  # an empty group, sum == rows
    "rows_past_the_sum": [2, 4, 0, 1],  # sum < rows: the rest must be 0, bias too
    "negative_and_overflowing": [-3, 8, 30, 2],  # counts as 0, clamped at the rows
    "sum_past_int32": [5, 2**31 - 1, 2**31 - 1, 0],  # the bias rows' running sum saturates
}


@pytest.mark.parametrize("case", sorted(GROUP_CASES))
@pytest.mark.parametrize("api", ["nnx", "linen"])
def test_grouped_dense_matches_float64_reference(api, case):
  rng = np.random.default_rng(len(case))
  group_sizes = jnp.asarray(GROUP_CASES[case], jnp.int32)
  x = jnp.asarray(rng.standard_normal((17, 6)), jnp.float32)
  y, params = _apply_grouped_dense(api, x, group_sizes, num_groups=4, features=10)
  want = grouped_dense_reference(x, params["kernel"], params["bias"], group_sizes)
  assert relative_error(y, want) < TOLERANCE["float32"]


@pytest.mark.parametrize("api", ["nnx", "linen"])
def test_grouped_dense_with_group_offset_holds_a_slice_of_the_groups(api):
  rng = np.random.default_rng(3)
  group_sizes = jnp.asarray([4, 3, 0, 6, 2, 1], jnp.int32)  # 6 global groups
  x = jnp.asarray(rng.standard_normal((18, 6)), jnp.float32)
  offset = jnp.asarray([2], jnp.int32)  # the layer holds groups 2, 3, 4
  y, params = _apply_grouped_dense(api, x, group_sizes, num_groups=3, features=5,
                                   group_offset=offset)
  want = grouped_dense_reference(x, params["kernel"], params["bias"], group_sizes, 2)
  assert relative_error(y, want) < TOLERANCE["float32"]


def _apply_grouped_dense(api, x, group_sizes, *, num_groups, features, group_offset=None,
                         **kwargs):
  """(y, {"kernel", "bias"}) of a freshly initialised layer of either API, under jit."""
  if api == "nnx":
    layer = jgg_nnx.GroupedDense(num_groups, x.shape[1], features, bias_init=random_bias_init,
                                 rngs=nnx.Rngs(1), **kwargs)
    y = nnx.jit(lambda m, x, g, o: m(x, g, o))(layer, x, group_sizes, group_offset)
    return y, {"kernel": layer.kernel[...], "bias": layer.bias[...]}
  layer = jgg_linen.GroupedDense(num_groups=num_groups, features=features,
                                 bias_init=random_bias_init, **kwargs)
  variables = layer.init(jax.random.key(1), x, group_sizes, group_offset)
  y = jax.jit(layer.apply)(variables, x, group_sizes, group_offset)
  return y, variables["params"]


def test_grouped_dense_dtype_promotes_like_flax_dense():
  rng = np.random.default_rng(4)
  x = jnp.asarray(rng.standard_normal((8, 16)), jnp.float32)
  group_sizes = jnp.asarray([3, 5], jnp.int32)
  layer = jgg_nnx.GroupedDense(2, 16, 8, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
  y = layer(x, group_sizes)
  assert y.dtype == jnp.bfloat16 and layer.kernel[...].dtype == jnp.float32
  want = grouped_dense_reference(x, layer.kernel[...], layer.bias[...], group_sizes)
  assert relative_error(y, want) < 2 * TOLERANCE["bfloat16"]
  linen_y, _ = _apply_grouped_dense("linen", x, group_sizes, num_groups=2, features=8,
                                    dtype=jnp.bfloat16)
  assert linen_y.dtype == jnp.bfloat16


@pytest.mark.parametrize("api", ["nnx", "linen"])
def test_grouped_dense_gradients_match_the_module_on_lax_ragged_dot(api):
  rng = np.random.default_rng(5)
  x = jnp.asarray(rng.standard_normal((20, 12)), jnp.float32)
  group_sizes = jnp.asarray([6, 0, 9, 3], jnp.int32)  # an empty group; 2 rows past the sum
  probe = jnp.asarray(rng.standard_normal((20, 7)), jnp.float32)

  def grads(ragged_dot):
    if api == "nnx":
      layer = jgg_nnx.GroupedDense(4, 12, 7, bias_init=random_bias_init, ragged_dot=ragged_dot,
                                   rngs=nnx.Rngs(2))
      graphdef, params = nnx.split(layer, nnx.Param)
      apply = lambda params, x: nnx.merge(graphdef, params)(x, group_sizes)
    else:
      layer = jgg_linen.GroupedDense(num_groups=4, features=7, bias_init=random_bias_init,
                                     ragged_dot=ragged_dot)
      params = layer.init(jax.random.key(2), x, group_sizes)
      apply = lambda params, x: layer.apply(params, x, group_sizes)
    loss = lambda params, x: jnp.sum(apply(params, x) * probe)
    return jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x)

  ours, theirs = grads(jgg.ragged_dot), grads(jax.lax.ragged_dot)
  for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
    assert relative_error(got, want) < TOLERANCE["float32"]
  bias_grad, kernel_grad = jax.tree.leaves(ours[0])  # both APIs: leaves sorted by name
  assert np.all(np.asarray(bias_grad)[1] == 0) and np.all(np.asarray(kernel_grad)[1] == 0)


def test_grouped_dense_errors_name_the_argument():
  layer = jgg_nnx.GroupedDense(3, 4, 5, rngs=nnx.Rngs(0))
  sizes = jnp.array([1, 1, 1], jnp.int32)
  with pytest.raises(TypeError, match="inputs: expected"):
    layer(jnp.ones((2, 3, 4)), sizes)
  with pytest.raises(TypeError, match="inputs: expected \\[rows, 4\\] \\(the kernel's in_features\\)"):
    layer(jnp.ones((3, 6)), sizes)
  with pytest.raises(TypeError, match="group_sizes: expected 3 groups"):
    layer(jnp.ones((3, 4)), jnp.array([1, 2], jnp.int32))
  with pytest.raises(TypeError, match="group_sizes: expected at least 3 groups"):
    layer(jnp.ones((3, 4)), jnp.array([1, 2], jnp.int32), jnp.array([0], jnp.int32))


# --- RaggedDot ---------------------------------------------------------------------

@pytest.mark.parametrize("module", [jgg_nnx.RaggedDot, jgg_linen.RaggedDot])
def test_ragged_dot_module_is_the_op(module):
  rng = np.random.default_rng(6)
  lhs = jnp.asarray(rng.standard_normal((10, 4)), jnp.float32)
  rhs = jnp.asarray(rng.standard_normal((3, 4, 5)), jnp.float32)
  sizes = jnp.asarray([4, 0, 5], jnp.int32)
  op = module(preferred_element_type=jnp.float32)
  got = op(lhs, rhs, sizes) if module is jgg_nnx.RaggedDot else op.apply({}, lhs, rhs, sizes)
  assert relative_error(got, reference.ragged_m(lhs, rhs, sizes)) < TOLERANCE["float32"]
  # An instance stands in for the op inside GroupedDense.
  layer = jgg_nnx.GroupedDense(3, 4, 5, use_bias=False, ragged_dot=jgg_nnx.RaggedDot(),
                               rngs=nnx.Rngs(0))
  want = reference.ragged_m(lhs, layer.kernel[...], sizes)
  assert relative_error(layer(lhs, sizes), want) < TOLERANCE["float32"]


# --- recipes ------------------------------------------------------------------------

def test_recipe_of_the_wrong_type_is_named():
  layer = jgg_nnx.GroupedDense(2, 4, 4, recipe="mxfp8", rngs=nnx.Rngs(0))
  with pytest.raises(TypeError, match="recipe: expected None or jgg.MXFP8Recipe"):
    layer(jnp.ones((4, 4)), jnp.array([2, 2], jnp.int32))


def test_mxfp8_recipe_trains_a_tiny_moe_regression_like_bf16():
  """GroupedDense with the MXFP8 recipe tracks the BF16 loss while fitting a fixed target."""
  rng = np.random.default_rng(7)
  x = jnp.asarray(rng.standard_normal((96, 64)), jnp.bfloat16)
  group_sizes = jnp.asarray([40, 0, 31, 25], jnp.int32)  # not multiples of 32; an empty group
  target = jnp.asarray(rng.standard_normal((96, 32)), jnp.bfloat16)

  def losses(recipe):
    layer = jgg_nnx.GroupedDense(4, 64, 32, use_bias=False, dtype=jnp.bfloat16, recipe=recipe,
                                 rngs=nnx.Rngs(3))
    graphdef, params = nnx.split(layer, nnx.Param)
    loss = lambda p: jnp.mean((nnx.merge(graphdef, p)(x, group_sizes).astype(jnp.float32)
                               - target.astype(jnp.float32)) ** 2)

    @jax.jit
    def step(params):
      value, grads = jax.value_and_grad(loss)(params)
      return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads), value
    out = []
    for _ in range(8):
      params, value = step(params)
      out.append(float(value))
    return np.asarray(out)

  bf16, mxfp8 = losses(None), losses(jgg.MXFP8Recipe())
  assert mxfp8[-1] < 0.9 * mxfp8[0]
  np.testing.assert_allclose(mxfp8, bf16, rtol=0.1)


# --- MoE ------------------------------------------------------------------------------

def test_moe_modules_parameters_and_results_agree_with_the_dense_reference():
  rng = np.random.default_rng(8)
  x = jnp.asarray(rng.standard_normal((3, 7, 16)), jnp.float32)
  nnx_moe = jgg_nnx.MoE(6, 16, 24, top_k=2, rngs=nnx.Rngs(0))
  shapes = {k[0]: v.shape for k, v in nnx.to_flat_state(nnx.state(nnx_moe, nnx.Param))}
  assert shapes == {"router": (16, 6), "gate": (6, 16, 24), "up": (6, 16, 24),
                    "down": (6, 24, 16)}
  y, aux_loss = nnx.jit(lambda m, x: m(x))(nnx_moe, x)
  params = {k: getattr(nnx_moe, k)[...] for k in shapes}
  want, want_aux, _ = moe_reference.moe_block(x.reshape(-1, 16), top_k=2, **params)
  assert y.shape == x.shape
  assert relative_error(y.reshape(-1, 16), want) < TOLERANCE["float32"]
  assert float(aux_loss) == pytest.approx(want_aux, rel=1e-5)

  linen_moe = jgg_linen.MoE(num_experts=6, hidden_features=24, top_k=2)
  variables = linen_moe.init(jax.random.key(0), x)
  assert jax.tree.map(jnp.shape, nn.unbox(variables))["params"] == shapes
  linen_y, linen_aux = jax.jit(linen_moe.apply)({"params": params}, x)
  assert relative_error(linen_y, y) < 1e-6 and float(linen_aux) == pytest.approx(float(aux_loss))


def test_moe_module_gradients_match_the_module_on_lax_ragged_dot():
  rng = np.random.default_rng(9)
  x = jnp.asarray(rng.standard_normal((40, 8)), jnp.float32)

  def grads(ragged_dot):
    model = jgg_nnx.MoE(4, 8, 16, top_k=2, ragged_dot=ragged_dot, rngs=nnx.Rngs(1))
    graphdef, params = nnx.split(model, nnx.Param)
    def loss(params):
      y, aux_loss = nnx.merge(graphdef, params)(x)
      return jnp.sum(jnp.sin(y)) + aux_loss
    return jax.jit(jax.grad(loss))(params)

  for got, want in zip(jax.tree.leaves(grads(jgg.ragged_dot)),
                       jax.tree.leaves(grads(jax.lax.ragged_dot))):
    assert relative_error(got, want) < 1e-4  # see test_moe: the router's gradient cancels


def test_moe_partitioning_metadata():
  mesh = jax.make_mesh((1, 1), ("expert", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  with jax.set_mesh(mesh):
    model = jgg_nnx.MoE(4, 8, 16, expert_axis="expert", hidden_axis="model", rngs=nnx.Rngs(0))
  specs = {k[0]: v.get_value() for k, v in
           nnx.to_flat_state(nnx.get_partition_spec(nnx.state(model, nnx.Param)))}
  P = jax.sharding.PartitionSpec
  assert specs == {"router": P(), "gate": P("expert", None, "model"),
                   "up": P("expert", None, "model"), "down": P("expert", "model", None)}
  linen_moe = jgg_linen.MoE(num_experts=4, hidden_features=16, expert_axis="expert",
                            hidden_axis="model")
  abstract = jax.eval_shape(linen_moe.init, jax.random.key(0), jnp.ones((2, 8)))
  assert nn.get_partition_spec(abstract)["params"] == {
      "router": P(None, None), "gate": P("expert", None, "model"),
      "up": P("expert", None, "model"), "down": P("expert", "model", None)}


def test_linen_moe_stacks_under_nn_scan_without_partitioning_metadata():
  """Without named axes the linen MoE's parameters carry no partitioning metadata, so it
  stacks under nn.scan like flax's own layers (annotated ones would need metadata_params)."""

  class Block(nn.Module):
    @nn.compact
    def __call__(self, h, _):
      return h + jgg_linen.MoE(num_experts=4, hidden_features=8)(h)[0], None

  stack = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=2)()
  x = jnp.asarray(np.random.default_rng(9).standard_normal((6, 4)), jnp.float32)
  variables = stack.init(jax.random.key(0), x, None)
  assert variables["params"]["MoE_0"]["gate"].shape == (2, 4, 4, 8)
  y, _ = jax.jit(stack.apply)(variables, x, None)
  assert y.shape == x.shape and bool(jnp.all(jnp.isfinite(y)))


# --- sharding under jit on 8 CPU devices ------------------------------------------------

def test_sharding_metadata_is_honoured_under_jit_on_8_devices():
  run_on_cpu_devices("test_flax", "sharded_checks")


def sharded_checks():
  """Weights created under jit with the mesh land sharded as their metadata says; sharded
  forward and gradients equal the unsharded ones, for GroupedDense and MoE (nnx and linen),
  and the expert-parallel MoE module (shard_map + ragged all-to-all) too."""
  from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

  mesh = jax.make_mesh((4, 2), ("expert", "model"), axis_types=(AxisType.Auto,) * 2)
  rng = np.random.default_rng(10)
  x = jnp.asarray(rng.standard_normal((64, 16)), jnp.float32)
  group_sizes = jnp.asarray([9, 0, 13, 7, 11, 2, 0, 20], jnp.int32)

  def create_sharded(make):
    @nnx.jit
    def create():
      model = make()
      state = nnx.state(model)
      nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
      return model
    with jax.set_mesh(mesh):
      return create()

  def loss_and_grads(model, *args):
    def loss(model):
      out = model(*args)
      y = out[0] if isinstance(out, tuple) else out
      return jnp.sum(jnp.sin(y)) + (out[1] if isinstance(out, tuple) else 0.0)
    with jax.set_mesh(mesh):
      value, grads = nnx.jit(nnx.value_and_grad(loss))(model)
    return value, nnx.state(grads, nnx.Param)

  def assert_sharded(array, *spec):
    assert array.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec)), array.ndim), (
        array.sharding, spec)

  def assert_same(sharded, plain, *args):
    (value, grads), (want, want_grads) = (loss_and_grads(m, *args) for m in (sharded, plain))
    assert float(value) == pytest.approx(float(want), rel=1e-5)
    for got, expected in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
      assert relative_error(got, expected) < 1e-4

  # GroupedDense: kernel and bias sharded by name.
  kernel_init = nnx.with_partitioning(jgg_nnx.default_kernel_init, ("expert", None, "model"))
  bias_init = nnx.with_partitioning(random_bias_init, ("expert", "model"))
  make_dense = lambda **kw: jgg_nnx.GroupedDense(8, 16, 12, rngs=nnx.Rngs(0), **kw)
  dense = create_sharded(lambda: make_dense(kernel_init=kernel_init, bias_init=bias_init))
  assert_sharded(dense.kernel[...], "expert", None, "model")
  assert_sharded(dense.bias[...], "expert", "model")
  assert len(dense.kernel[...].addressable_shards) == 8
  assert dense.kernel[...].addressable_shards[0].data.shape == (2, 16, 6)
  plain_dense = nnx.jit(lambda: make_dense(bias_init=random_bias_init))()
  assert_same(dense, plain_dense, x, group_sizes)

  # MoE (nnx): experts over "expert", the hidden dimension over "model".
  make_moe = lambda **kw: jgg_nnx.MoE(8, 16, 24, top_k=2, rngs=nnx.Rngs(1), **kw)
  moe = create_sharded(lambda: make_moe(expert_axis="expert", hidden_axis="model"))
  assert_sharded(moe.gate[...], "expert", None, "model")
  assert_sharded(moe.down[...], "expert", "model", None)
  assert moe.down[...].addressable_shards[0].data.shape == (2, 12, 16)
  plain_moe = nnx.jit(make_moe)()
  assert_same(moe, plain_moe, x)

  # The expert-parallel MoE module: shard_map over "expert", tokens sharded too.
  ep_mesh = jax.make_mesh((8,), ("expert",), axis_types=(AxisType.Auto,))
  with jax.set_mesh(ep_mesh):
    ep = nnx.jit(lambda: make_moe(expert_axis="expert", expert_parallel=True))()
    xs = jax.device_put(x, NamedSharding(ep_mesh, P("expert")))
    y, aux = nnx.jit(lambda m, x: m(x))(ep, xs)
  want_y, want_aux = nnx.jit(lambda m, x: m(x))(plain_moe, x)
  assert relative_error(y, want_y) < 1e-6 and float(aux) == pytest.approx(float(want_aux))
  # The linen module's expert-parallel path, with the same parameters.
  linen_ep = jgg_linen.MoE(num_experts=8, hidden_features=24, top_k=2, expert_axis="expert",
                           expert_parallel=True)
  params = {k: np.asarray(getattr(plain_moe, k)[...]) for k in ("router", "gate", "up", "down")}
  with jax.set_mesh(ep_mesh):
    linen_y, _ = jax.jit(linen_ep.apply)({"params": params}, xs)
  assert relative_error(linen_y, want_y) < 1e-6

  # linen: boxed metadata -> nn.get_sharding -> init under jit lands sharded, same values.
  linen_moe = jgg_linen.MoE(num_experts=8, hidden_features=24, top_k=2, expert_axis="expert",
                            hidden_axis="model")
  with jax.set_mesh(mesh):
    abstract = jax.eval_shape(linen_moe.init, jax.random.key(1), x)
    variables = jax.jit(linen_moe.init, out_shardings=nn.get_sharding(abstract, mesh))(
        jax.random.key(1), x)
  assert_sharded(variables["params"]["down"].value, "expert", "model", None)
  plain = jax.jit(linen_moe.init)(jax.random.key(1), x)
  for got, want in zip(jax.tree.leaves(nn.unbox(variables)), jax.tree.leaves(nn.unbox(plain))):
    np.testing.assert_array_equal(got, want)
