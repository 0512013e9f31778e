"""jgg.moe: routing, permutation, the block against a dense float64 MoE, gradients against
the same block on jax.lax.ragged_dot, empty experts, and expert parallelism on 8 CPU devices."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import moe_reference
from multidevice import run_on_cpu_devices
from reference import TOLERANCE, relative_error

import jax_grouped_gemm as jgg
from jax_grouped_gemm import moe


def lax_projection(x, kernel, group_sizes):
  return jax.lax.ragged_dot(x, kernel, group_sizes)


def random_weights(rng, d_model, d_ff, experts, dtype=jnp.float32, local_experts=None):
  local = experts if local_experts is None else local_experts
  scale = lambda fan_in: 1.0 / np.sqrt(fan_in)
  return moe.MoEWeights(
      router=jnp.asarray(rng.standard_normal((d_model, experts)), jnp.float32),
      gate=jnp.asarray(rng.standard_normal((local, d_model, d_ff)) * scale(d_model), dtype),
      up=jnp.asarray(rng.standard_normal((local, d_model, d_ff)) * scale(d_model), dtype),
      down=jnp.asarray(rng.standard_normal((local, d_ff, d_model)) * scale(d_ff), dtype))


def reference_block(x, w, top_k, normalize_weights=True):
  return moe_reference.moe_block(x, w.router, w.gate, w.up, w.down, top_k, normalize_weights)


@pytest.mark.parametrize("top_k", [1, 2, 3])
@pytest.mark.parametrize("normalize_weights", [True, False])
def test_route_matches_numpy(top_k, normalize_weights):
  rng = np.random.default_rng(top_k)
  logits = rng.standard_normal((37, 6)).astype(np.float32)
  routing = jax.jit(functools.partial(moe.route, top_k=top_k,
                                      normalize_weights=normalize_weights))(logits)
  weights, experts, aux_loss = moe_reference.route(logits, top_k, normalize_weights)
  np.testing.assert_array_equal(routing.experts, experts)
  np.testing.assert_allclose(routing.weights, weights, rtol=1e-5)
  np.testing.assert_allclose(routing.aux_loss, aux_loss, rtol=1e-5)


def test_load_balancing_loss_is_one_when_balanced_and_grows_when_not():
  uniform = jnp.zeros((64, 4))  # every expert equally likely...
  experts = jnp.tile(jnp.arange(4), 16)[:, None]  # ...and equally used
  assert float(moe.load_balancing_loss(jax.nn.softmax(uniform), experts)) == pytest.approx(1.0)
  skewed = jnp.zeros((64, 4)).at[:, 0].set(5.0)
  routing = moe.route(skewed, 1)
  assert float(routing.aux_loss) > 3.5  # everything on expert 0: close to E = 4


@pytest.mark.parametrize("top_k", [1, 3])
def test_permute_sorts_by_expert_with_device_group_sizes(top_k):
  rng = np.random.default_rng(0)
  tokens, experts_count = 29, 7
  x = rng.standard_normal((tokens, 5)).astype(np.float32)
  experts = np.stack([rng.permutation(experts_count)[:top_k] for _ in range(tokens)])
  x_sorted, permutation = jax.jit(moe.permute, static_argnums=2)(x, experts, experts_count)
  order = np.argsort(experts.ravel(), kind="stable")
  np.testing.assert_array_equal(permutation.order, order)
  np.testing.assert_array_equal(x_sorted, x[order // top_k])
  np.testing.assert_array_equal(permutation.group_sizes,
                                np.bincount(experts.ravel(), minlength=experts_count))
  assert permutation.group_sizes.dtype == jnp.int32


def test_unpermute_inverts_permute_with_weights():
  rng = np.random.default_rng(1)
  x = rng.standard_normal((11, 4)).astype(np.float32)
  experts = np.stack([rng.permutation(5)[:2] for _ in range(11)])
  weights = rng.random((11, 2)).astype(np.float32)
  x_sorted, permutation = moe.permute(x, experts, 5)
  y = moe.unpermute(x_sorted, permutation, weights)
  np.testing.assert_allclose(y, x * weights.sum(axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("top_k,normalize_weights", [(1, True), (2, True), (2, False), (3, True)])
def test_block_matches_dense_float64_reference(top_k, normalize_weights):
  rng = np.random.default_rng(10 + top_k)
  w = random_weights(rng, d_model=16, d_ff=24, experts=6)
  x = jnp.asarray(rng.standard_normal((45, 16)), jnp.float32)
  block = jax.jit(functools.partial(moe.moe_block, top_k=top_k,
                                    normalize_weights=normalize_weights))
  y, aux_loss = block(x, w)
  y_ref, aux_ref, _ = reference_block(x, w, top_k, normalize_weights)
  assert relative_error(y, y_ref) < TOLERANCE["float32"]
  assert float(aux_loss) == pytest.approx(aux_ref, rel=1e-5)


def test_block_bfloat16_matches_reference():
  rng = np.random.default_rng(3)
  w = random_weights(rng, d_model=32, d_ff=64, experts=8, dtype=jnp.bfloat16)
  x = jnp.asarray(rng.standard_normal((64, 32)), jnp.bfloat16)
  y, _ = jax.jit(functools.partial(moe.moe_block, top_k=2))(x, w)
  assert y.dtype == jnp.bfloat16
  y_ref, _, _ = reference_block(x, w, 2)
  assert relative_error(y, y_ref) < 2 * TOLERANCE["bfloat16"]


def test_experts_without_tokens_compute_nothing_and_get_zero_gradients():
  rng = np.random.default_rng(4)
  w = random_weights(rng, d_model=8, d_ff=16, experts=6)
  idle = [1, 4]
  w = moe.MoEWeights(router=w.router.at[:, idle].set(0.0), gate=w.gate, up=w.up, down=w.down)
  x = jnp.asarray(np.abs(rng.standard_normal((40, 8))), jnp.float32)
  # Positive inputs and a very negative router bias (through a constant input
  # column) keep experts 1 and 4 out of every token's top-2.
  x = x.at[:, 0].set(1.0)
  w = moe.MoEWeights(router=w.router.at[0, idle].set(-100.0), gate=w.gate, up=w.up, down=w.down)
  used = np.unique(np.asarray(moe.route(jnp.dot(x, w.router), 2).experts))
  unused = [e for e in range(6) if e not in used]
  assert set(idle) <= set(unused)

  def loss(x, w):
    y, aux_loss = moe.moe_block(x, w, top_k=2)
    return jnp.sum(y ** 2) + aux_loss

  y, _ = moe.moe_block(x, w, top_k=2)
  assert relative_error(y, reference_block(x, w, 2)[0]) < TOLERANCE["float32"]
  grads = jax.jit(jax.grad(loss, argnums=1))(x, w)
  for name in ("gate", "up", "down"):
    g = np.asarray(getattr(grads, name))
    assert np.all(np.isfinite(g)), name
    assert np.all(g[unused] == 0), name
    assert np.all(np.abs(g[used]).sum(axis=(1, 2)) > 0), name


def test_an_empty_batch_gives_an_empty_result_a_zero_loss_and_zero_gradients():
  rng = np.random.default_rng(5)
  w = random_weights(rng, d_model=8, d_ff=16, experts=4)
  x = jnp.zeros((0, 8), jnp.float32)

  def loss(w):
    y, aux_loss = moe.moe_block(x, w, top_k=2)
    return jnp.sum(y) + aux_loss

  y, aux_loss = jax.jit(functools.partial(moe.moe_block, top_k=2))(x, w)
  assert y.shape == (0, 8) and float(aux_loss) == 0.0
  grads = jax.jit(jax.grad(loss))(w)
  for name in ("router", "gate", "up", "down"):
    assert np.all(np.asarray(getattr(grads, name)) == 0), name


def test_gradients_match_the_block_on_lax_ragged_dot(top_k=2):
  rng = np.random.default_rng(5 + top_k)
  w = random_weights(rng, d_model=16, d_ff=32, experts=4)
  x = jnp.asarray(rng.standard_normal((33, 16)), jnp.float32)
  probe = jnp.asarray(rng.standard_normal((33, 16)), jnp.float32)

  def loss(x, w, projection):
    y, aux_loss = moe.moe_block(x, w, top_k=top_k, projection=projection)
    return jnp.sum(y * probe) + aux_loss

  ours = jax.jit(jax.grad(functools.partial(loss, projection=moe.default_projection),
                          argnums=(0, 1)))(x, w)
  theirs = jax.jit(jax.grad(functools.partial(loss, projection=lax_projection),
                            argnums=(0, 1)))(x, w)
  # 1e-4, not the single GEMM's 1e-5: the router's gradient is a difference of
  # nearly equal terms (with normalised weights they sum to 1 whatever the logits).
  for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
    assert relative_error(got, want) < 1e-4


def test_block_has_no_host_sync():
  # Under jit group sizes are tracers: reading them on the host would raise.
  rng = np.random.default_rng(6)
  w = random_weights(rng, 8, 8, 4)
  x = jnp.asarray(rng.standard_normal((12, 8)), jnp.float32)
  text = jax.jit(functools.partial(moe.moe_block, top_k=2)).lower(x, w).as_text()
  assert "callback" not in text and "jgg_ragged_m" in text


def test_bad_arguments_are_named():
  rng = np.random.default_rng(7)
  w = random_weights(rng, 8, 8, 4)
  with pytest.raises(TypeError, match="x: expected"):
    moe.moe_block(jnp.zeros((2, 3, 8)), w, top_k=2)
  with pytest.raises(ValueError, match="top_k"):
    moe.moe_block(jnp.ones((4, 8)), w, top_k=5)
  bad = moe.MoEWeights(router=w.router, gate=w.gate, up=w.up, down=w.down[:, :, :4])
  with pytest.raises(TypeError, match="weights.down"):
    moe.moe_block(jnp.ones((4, 8)), bad, top_k=2)
  five_experts = jnp.zeros((5,) + w.gate.shape[1:])
  with pytest.raises(TypeError, match="weights.gate: 5 experts x 1 shards .* != 4 router"):
    moe.moe_block(jnp.ones((4, 8)), dataclasses.replace(w, gate=five_experts), top_k=2)
  with pytest.raises(TypeError, match="weights.router: expected \\[d_model, experts\\]"):
    moe.moe_block(jnp.ones((4, 8)), dataclasses.replace(w, router=w.router[0]), top_k=2)
  with pytest.raises(TypeError, match="top_k: expected an int, got 2.0"):
    moe.moe_block(jnp.ones((4, 8)), w, top_k=2.0)
  with pytest.raises(TypeError, match="x: expected \\[..., d_model\\], got a scalar"):
    moe.moe_layer(jnp.ones(()), w, top_k=2)


# --- expert parallelism on 8 CPU devices ------------------------------------------------

def test_expert_parallel_matches_one_device():
  run_on_cpu_devices("test_moe", "expert_parallel_checks")


def expert_parallel_checks():
  """Forward, gradients and aux loss of moe_layer over 8 expert shards (2 experts each)."""
  from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

  rng = np.random.default_rng(8)
  d_model, d_ff, experts, shards = 16, 24, 16, 8
  w = random_weights(rng, d_model, d_ff, experts)
  x = jnp.asarray(rng.standard_normal((64, d_model)), jnp.float32)
  probe = jnp.asarray(rng.standard_normal(x.shape), jnp.float32)

  def loss(x, w, **kw):
    y, aux_loss = moe.moe_layer(x, w, top_k=2, **kw)
    return jnp.sum(y * probe) + aux_loss, (y, aux_loss)

  grad = lambda **kw: jax.jit(jax.grad(functools.partial(loss, **kw), argnums=(0, 1),
                                       has_aux=True))
  (want_grads, (want_y, want_aux)) = grad()(x, w)
  mesh = jax.make_mesh((shards,), ("expert",), axis_types=(AxisType.Explicit,))
  with jax.set_mesh(mesh):
    sharded = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
    xs = sharded(x, P("expert"))
    ws = moe.MoEWeights(router=sharded(w.router, P()), gate=sharded(w.gate, P("expert")),
                        up=sharded(w.up, P("expert")), down=sharded(w.down, P("expert")))
    got_grads, (got_y, got_aux) = grad(expert_axis="expert")(xs, ws)
  assert relative_error(got_y, want_y) < 1e-6
  assert float(got_aux) == pytest.approx(float(want_aux), rel=1e-6)
  for got, want in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads)):
    assert relative_error(got, want) < 1e-5
  # Each device computes only its own experts: the grouped GEMMs see [local, ...] weights.
  hlo = jax.jit(functools.partial(moe.moe_layer, top_k=2, expert_axis="expert", mesh=mesh)
                ).lower(xs, ws).as_text()
  assert f"tensor<{experts // shards}x1x{d_model}x{d_ff}xf32>" in hlo
  # The MXFP8 recipe's custom VJP runs per shard just the same.
  recipe = functools.partial(jgg.grouped_dense, recipe=jgg.MXFP8Recipe())
  (want_grads, (want_y, _)) = grad(projection=recipe)(x, w)
  with jax.set_mesh(mesh):
    got_grads, (got_y, _) = grad(projection=recipe, expert_axis="expert")(xs, ws)
  assert relative_error(got_y, want_y) < 1e-6
  for got, want in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads)):
    assert relative_error(got, want) < 1e-5
  # CPU lowers the emulation, CUDA the real collective.
  assert "ragged_all_to_all" not in hlo
  cuda = jax.jit(functools.partial(moe.moe_layer, top_k=2, expert_axis="expert", mesh=mesh)
                 ).trace(xs, ws).lower(lowering_platforms=("cuda",)).as_text()
  assert "ragged_all_to_all" in cuda
  # `mesh=` alone (no jax.set_mesh) on Explicit axes, unsharded inputs: the layer makes the
  # mesh its context and puts its inputs as its shard_map takes them, eagerly and under jit.
  layer = functools.partial(moe.moe_layer, top_k=2, expert_axis="expert", mesh=mesh)
  want_y, want_aux = moe.moe_layer(x, w, top_k=2)
  plain = functools.partial(moe.moe_layer, top_k=2, mesh=mesh)  # no expert_axis: mesh unused
  for fn in (layer, jax.jit(layer), jax.jit(plain)):
    got_y, got_aux = fn(x, w)
    assert relative_error(got_y, want_y) < 1e-6
    assert float(got_aux) == pytest.approx(float(want_aux), rel=1e-6)



def test_explicit_axes_layer_takes_tokens_split_on_any_dim_and_types_y_like_x():
  """Explicit axes, rank-3 tokens [batch, seq, d] split on seq (a split the flattening
  reshape cannot carry) or on batch: y comes back typed like x, with and without expert
  parallelism (whose shard_map takes its inputs in its own specs only)."""
  from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
  from sharding_checks import cpu_mesh

  rng = np.random.default_rng(10)
  w = random_weights(rng, 8, 16, 8)
  x = jnp.asarray(rng.standard_normal((4, 8, 8)), jnp.float32)
  want_y, want_aux = jax.jit(functools.partial(moe.moe_layer, top_k=2))(x, w)
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  with jax.set_mesh(mesh):
    for spec, expert_axis in ((P(None, "model"), None), (P("data"), None),
                              (P("data"), "model"), (P(None, "data"), "model")):
      xs = jax.device_put(x, NamedSharding(mesh, spec))
      y, aux = jax.jit(functools.partial(moe.moe_layer, top_k=2, expert_axis=expert_axis))(xs, w)
      assert jax.typeof(y).sharding.spec == jax.typeof(xs).sharding.spec, (spec, expert_axis)
      assert relative_error(y, want_y) < 1e-6, (spec, expert_axis)
      np.testing.assert_allclose(aux, want_aux, rtol=1e-6)


def test_expert_parallel_gradient_of_an_empty_batch():
  """Zero tokens: y empty, loss 0, zero gradients (compiling the gradient of the shard_map'ed
  GEMMs on zero rows crashed Shardy, so the layer does not call them)."""
  from jax.sharding import AxisType
  from sharding_checks import cpu_mesh

  w = random_weights(np.random.default_rng(11), 8, 8, 8)
  mesh = cpu_mesh((2,), ("expert",), axis_type=AxisType.Auto)

  def loss(w):
    y, aux_loss = moe.moe_layer(jnp.zeros((0, 8)), w, top_k=2, expert_axis="expert", mesh=mesh)
    return jnp.sum(y) + aux_loss

  grads = jax.jit(jax.grad(loss))(w)
  for name in ("router", "gate", "up", "down"):
    assert np.all(np.asarray(getattr(grads, name)) == 0), name


def test_tensor_parallel_jit_on_explicit_axes_matches_one_device():
  """jit (no shard_map) on jax.make_mesh's default Explicit axes: tokens split over
  "data", d_ff over "model"; the block runs on Auto axes inside, the GEMMs partition
  by their rules (local d_ff), and y comes back typed with the tokens' split."""
  from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
  from sharding_checks import cpu_mesh, custom_calls

  rng = np.random.default_rng(9)
  d_model, d_ff, experts = 16, 24, 8
  w = random_weights(rng, d_model, d_ff, experts)
  x = jnp.asarray(rng.standard_normal((64, d_model)), jnp.float32)
  probe = jnp.asarray(rng.standard_normal(x.shape), jnp.float32)

  def loss(x, w):
    y, aux_loss = moe.moe_layer(x, w, top_k=2)
    return jnp.sum(y * probe) + aux_loss, y

  grad = jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True))
  want_grads, want_y = grad(x, w)
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  with jax.set_mesh(mesh):
    put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
    xs = put(x, P("data"))
    ws = moe.MoEWeights(router=put(w.router, P()), gate=put(w.gate, P(None, None, "model")),
                        up=put(w.up, P(None, None, "model")), down=put(w.down, P(None, "model")))
    got_grads, got_y = grad(xs, ws)
    assert tuple(jax.typeof(got_y).sharding.spec)[:1] == ("data",)
    hlo = grad.lower(xs, ws).compile().as_text()
  assert relative_error(got_y, want_y) < 1e-6
  for got, want in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads)):
    assert relative_error(got, want) < 1e-5
  weights_seen = {operands[1] for _, _, operands in custom_calls(hlo)}
  assert f"f32[{experts},1,{d_model},{d_ff // 4}]" in weights_seen, weights_seen


def test_an_empty_batch_has_the_dtype_of_any_other():
  """Zero tokens return early, in the dtype the layer gives one token: x's with bf16 weights
  and f32 x -> f32; bf16 x with f32 weights -> f32 (the projection's promotion)."""
  rng = np.random.default_rng(6)
  w32 = random_weights(rng, d_model=8, d_ff=16, experts=4)
  w16 = jax.tree.map(lambda a: a.astype(jnp.bfloat16), w32)
  for weights, x_dtype in ((w16, jnp.bfloat16), (w32, jnp.bfloat16), (w16, jnp.float32)):
    some, _ = moe.moe_layer(jnp.ones((3, 8), x_dtype), weights, top_k=2)
    none, _ = moe.moe_layer(jnp.ones((0, 8), x_dtype), weights, top_k=2)
    assert none.dtype == some.dtype and none.shape == (0, 8), (none.dtype, some.dtype)
