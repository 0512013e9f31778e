"""The quantized tensor as a JAX value: a pytree through jit, grad (a constant), scan, vmap
and shard_map (8 CPU devices, in a child process when this one has fewer)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
import multidevice

mxfp8 = jgg.mxfp8
P = jax.sharding.PartitionSpec


def _x(shape, seed=0, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  return jnp.asarray(rng.standard_normal(shape) * np.exp2(rng.integers(-10, 10, shape)), dtype)


def _bits(a):
  a = np.asarray(a)
  return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)


def assert_same_tensor(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(_bits(u), _bits(v))


def test_pytree_leaves_and_static_metadata():
  sizes = jnp.array([10, 0, 22], jnp.int32)
  q = mxfp8.quantize(_x((40, 64)), sizes, colwise=True)
  leaves, treedef = jax.tree.flatten(q)
  assert len(leaves) == 5  # data, scale_inv, colwise data, colwise scale_inv, group_sizes
  assert_same_tensor(jax.tree.unflatten(treedef, leaves), q)
  rowwise_only = mxfp8.quantize(_x((40, 64)))
  assert len(jax.tree.leaves(rowwise_only)) == 2  # absent orientations and group sizes are None
  # Layouts are static: a different layout or scale layout is a different tree structure.
  swizzled = mxfp8.quantize(_x((40, 64)), sizes, colwise=True, scale_layout="swizzled")
  assert jax.tree.structure(swizzled) != treedef
  assert (q.layout, q.scale_layout, q.shape, q.num_groups) == ("varying_first", "compact", (40, 64), 3)


def test_through_jit():
  x, sizes = _x((96, 80), 1, jnp.bfloat16), jnp.array([50, 0, 33], jnp.int32)
  quantize = functools.partial(mxfp8.quantize, colwise=True, scale_layout="swizzled")
  q = jax.jit(quantize)(x, sizes)
  assert isinstance(q, mxfp8.MXFP8Tensor)
  assert_same_tensor(q, quantize(x, sizes))
  y = jax.jit(lambda q: mxfp8.dequantize(q, jnp.float32))(q)
  np.testing.assert_array_equal(_bits(y), _bits(mxfp8.dequantize(q, jnp.float32)))
  # The group sizes stay device values: new sizes, same compiled program.
  q2 = jax.jit(quantize)(x, jnp.array([1, 90, 5], jnp.int32))
  assert_same_tensor(q2, quantize(x, jnp.array([1, 90, 5], jnp.int32)))


def test_grad_treats_quantization_as_a_constant():
  x = _x((64, 64), 2)

  def loss(x):
    return jnp.sum(mxfp8.dequantize(mxfp8.quantize(x), jnp.float32) * x)

  grad = jax.jit(jax.grad(loss))(x)
  np.testing.assert_array_equal(np.asarray(grad),
                                np.asarray(mxfp8.dequantize(mxfp8.quantize(x), jnp.float32)))
  # A quantized value as a non-differentiated argument of a differentiated function.
  q = mxfp8.quantize(x, colwise=True)
  grad_x = jax.grad(lambda x, q: jnp.sum(mxfp8.dequantize(q, jnp.float32, colwise=True) * x))(x, q)
  np.testing.assert_array_equal(np.asarray(grad_x),
                                np.asarray(mxfp8.dequantize(q, jnp.float32, colwise=True)))


def test_scan_carries_and_stacks_quantized_values():
  xs = _x((4, 48, 64), 3)
  sizes = jnp.array([20, 28], jnp.int32)

  def step(previous, x):
    return mxfp8.quantize(x, sizes, colwise=True), mxfp8.dequantize(previous, jnp.float32)

  first = mxfp8.quantize(xs[0], sizes, colwise=True)
  last, ys = jax.lax.scan(step, first, xs)
  assert_same_tensor(last, mxfp8.quantize(xs[-1], sizes, colwise=True))
  for t in range(4):
    want = mxfp8.dequantize(mxfp8.quantize(xs[max(t - 1, 0)], sizes, colwise=True), jnp.float32)
    np.testing.assert_array_equal(np.asarray(ys[t]), np.asarray(want))
  # Quantized values stacked as scan outputs carry a leading axis on every leaf.
  _, stacked = jax.lax.scan(lambda c, x: (c, mxfp8.quantize(x, sizes)), 0, xs)
  assert stacked.data.shape == (4, 48, 64) and stacked.group_sizes.shape == (4, 2)
  assert_same_tensor(jax.tree.map(lambda a: a[2], stacked), mxfp8.quantize(xs[2], sizes))


def test_vmap():
  xs = _x((3, 40, 96), 4, jnp.bfloat16)
  round_trip = lambda x: mxfp8.dequantize(mxfp8.quantize(x, colwise=True), jnp.float32, colwise=True)
  got = jax.vmap(round_trip)(xs)
  for i in range(3):
    np.testing.assert_array_equal(np.asarray(got[i]), np.asarray(round_trip(xs[i])))


def shard_map_body():
  """Runs with 8 CPU devices: quantize / dequantize inside shard_map, values in and out."""
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("g",))

  def shard(f, specs_in, specs_out):
    mapped = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=specs_in, out_specs=specs_out))
    place = lambda args, specs: jax.tree.map(
        lambda a, s: jax.device_put(a, jax.sharding.NamedSharding(mesh, s)), args, specs)
    if isinstance(specs_in, tuple):
      return lambda *args: mapped(*place(args, specs_in))
    return lambda arg: mapped(place(arg, jax.tree.map(lambda _: specs_in, arg)))

  # A stack sharded along its groups: each device quantizes its own experts; the global value
  # equals quantizing the whole stack (scale slots are per group, so the flat buffer splits).
  x = _x((8, 64, 96), 5, jnp.bfloat16)
  q = shard(lambda x: mxfp8.quantize(x, colwise=True), P("g"), P("g"))(x)
  assert_same_tensor(q, mxfp8.quantize(x, colwise=True))
  y = shard(lambda q: mxfp8.dequantize(q, jnp.float32), P("g"), P("g"))(q)
  np.testing.assert_array_equal(np.asarray(y), np.asarray(mxfp8.dequantize(q, jnp.float32)))
  # Tokens sharded (data parallel): every device quantizes its rows with its own group sizes.
  tokens = _x((8 * 100, 64), 6)
  sizes = jnp.asarray(np.random.default_rng(7).integers(0, 40, size=(8 * 3,)), jnp.int32)
  local = shard(lambda t, s: mxfp8.quantize(t, s, colwise=True, scale_layout="swizzled"),
                (P("g"), P("g")), P("g"))(tokens, sizes)
  per_device = local.scale_inv.shape[0] // 8
  for d in range(8):
    alone = mxfp8.quantize(tokens[100 * d:100 * (d + 1)], sizes[3 * d:3 * (d + 1)], colwise=True,
                           scale_layout="swizzled")
    np.testing.assert_array_equal(_bits(local.data[100 * d:100 * (d + 1)]), _bits(alone.data))
    np.testing.assert_array_equal(
        np.asarray(local.colwise_scale_inv[per_device * d:per_device * (d + 1)]),
        np.asarray(alone.colwise_scale_inv))


def test_shard_map_on_8_devices():
  multidevice.run_on_cpu_devices("test_mxfp8_tensor", "shard_map_body", count=8)


def test_dequantize_checks_the_group_sizes_a_layout_needs():
  """Hand-built or relabelled tensors: the group sizes their layout needs, of any integer
  type (narrowed like quantize's), else a TypeError naming them."""
  import dataclasses
  sizes = jnp.asarray([30, 34], jnp.int32)
  x = jnp.asarray(np.random.default_rng(2).normal(size=(64, 64)), jnp.float32)
  q = jgg.mxfp8.quantize(x, sizes)
  narrow = dataclasses.replace(q, group_sizes=sizes.astype(jnp.int16))
  np.testing.assert_array_equal(np.asarray(jgg.mxfp8.dequantize(narrow)),
                                np.asarray(jgg.mxfp8.dequantize(q)))
  stack = jgg.mxfp8.quantize(jnp.ones((2, 64, 8)), colwise=True)
  for bad, message in (
      (dataclasses.replace(q, group_sizes=None), "needs integer group_sizes \\[G\\], got None"),
      (dataclasses.replace(q, group_sizes=sizes.astype(jnp.float32)), "got float32\\[2\\]"),
      (dataclasses.replace(q, group_sizes=sizes[:, None]), "got int32\\[2, 1\\]"),
      (dataclasses.replace(stack, group_sizes=sizes), "'same_dims' has no group sizes"),
      (dataclasses.replace(q, data=None, scale_inv=None), "needs rowwise or colwise data")):
    with pytest.raises(TypeError, match="q: .*" + message):
      jgg.mxfp8.dequantize(bad)
