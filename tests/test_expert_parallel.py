"""The shard_map path: the ops with group_offset inside shard_map, the ragged all-to-all
expert-parallel MLP, and export of both. On CPU, ragged_all_to_all is the all_gather
stand-in (XLA:CPU has none); tools/device/sharding_2gpu.py runs the real one on GPUs.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native, expert_parallel
import reference
from sharding_checks import (  # noqa: F401  (fixtures: on_cpu, partitioner)
    collectives, cpu_mesh, custom_calls, on_cpu, partitioner)

T, D, F, G = 12, 8, 6, 8  # rows per device, model dim, hidden dim, global experts
TOL = 1e-5


def _shard_map(fn, mesh, in_specs, out_specs):
  return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


def _mlp_reference(x, group_sizes, w_in, w_out, shards):
  """Float64: every device's rows through their experts, as if on one device."""
  rows = x.shape[0] // shards
  out = []
  for s in range(shards):
    xs = x[s * rows:(s + 1) * rows]
    hidden = reference.ragged_m(xs, w_in, group_sizes[s])
    hidden = hidden / (1 + np.exp(-hidden))  # silu
    out.append(reference.ragged_m(hidden, w_out, group_sizes[s]))
  return np.concatenate(out)


def _mlp_operands(shards, seed, group_sizes=None):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((shards * T, D)).astype(np.float32)
  if group_sizes is None:  # some experts empty, some devices with rows past the last group
    group_sizes = np.stack([rng.multinomial(rng.integers(T // 2, T + 1), np.ones(G) / G)
                            for _ in range(shards)]).astype(np.int32)
  w_in = (rng.standard_normal((G, D, F)) / np.sqrt(D)).astype(np.float32)
  w_out = (rng.standard_normal((G, F, D)) / np.sqrt(F)).astype(np.float32)
  return x, np.asarray(group_sizes, np.int32), w_in, w_out


MESHES = {
    # experts over one axis of 4
    "expert4": ((4,), ("expert",), "expert", P("expert")),
    # 2x4: tokens over both axes, experts over "model" (each data row of the mesh is a replica)
    "data2_expert4": ((2, 4), ("data", "model"), "model", P(("data", "model"))),
}


@pytest.mark.parametrize("mesh_name", MESHES)
def test_expert_parallel_mlp_matches_unsharded(mesh_name, partitioner):
  shape, names, expert_axis, token_spec = MESHES[mesh_name]
  mesh = cpu_mesh(shape, names)
  shards = mesh.size
  x, group_sizes, w_in, w_out = _mlp_operands(shards, seed=0)

  layer = _shard_map(
      lambda x, s, a, b: expert_parallel.expert_parallel_mlp(x, s[0], a, b, axis_name=expert_axis),
      mesh, (token_spec, token_spec, P(expert_axis), P(expert_axis)), token_spec)
  put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
  args = (put(x, token_spec), put(group_sizes, token_spec), put(w_in, P(expert_axis)),
          put(w_out, P(expert_axis)))
  out = jax.jit(layer)(*args)
  assert reference.relative_error(out, _mlp_reference(x, group_sizes, w_in, w_out, shards)) < TOL

  # Each device's grouped GEMMs read the global-order receive buffer and its local experts.
  hlo = jax.jit(layer).lower(*args).compile().as_text()
  local_experts = G // mesh.shape[expert_axis]
  senders = mesh.shape[expert_axis]
  shapes = {(t, ops[0], ops[1]) for t, _, ops in custom_calls(hlo)}
  assert shapes == {
      (_native.RAGGED_M_TARGET, f"f32[1,{senders * T},{D}]", f"f32[{local_experts},1,{D},{F}]"),
      (_native.RAGGED_M_TARGET, f"f32[1,{senders * T},{F}]", f"f32[{local_experts},1,{F},{D}]")}

  ct = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
  loss = lambda fn: (lambda x, a, b: jnp.sum(fn(x, a, b) * ct))
  grads = jax.jit(jax.grad(loss(lambda x, a, b: layer(x, args[1], a, b)), (0, 1, 2)))(
      args[0], args[2], args[3])
  unsharded = functools.partial(_mlp_on_one_device, group_sizes=group_sizes, shards=shards)
  expected = jax.jit(jax.grad(loss(unsharded), (0, 1, 2)))(x, w_in, w_out)
  for got, want, name in zip(grads, expected, ("dx", "dw_in", "dw_out")):
    err = reference.relative_error(got, want)
    assert err < TOL, f"{name}: {err}"


def _mlp_on_one_device(x, w_in, w_out, *, group_sizes, shards):
  rows = x.shape[0] // shards
  return jnp.concatenate([
      jgg.ragged_dot(jax.nn.silu(jgg.ragged_dot(x[s * rows:(s + 1) * rows], w_in, group_sizes[s])),
                     w_out, group_sizes[s]) for s in range(shards)])


def test_expert_parallel_mlp_clamps_device_group_sizes(partitioner):
  """Negative sizes and sums past T follow the ops' clamping rule; nothing leaves bounds."""
  mesh = cpu_mesh((4,), ("expert",))
  sizes = np.array([[-3, 5, 2, 0, 40, 1, 0, 0], [0] * 8, [12, 0, 0, 0, 0, 0, 0, 0],
                    [1, 1, 1, 1, 1, 1, 1, -7]], np.int32)
  x, sizes, w_in, w_out = _mlp_operands(4, seed=2, group_sizes=sizes)
  layer = _shard_map(
      lambda x, s, a, b: expert_parallel.expert_parallel_mlp(x, s[0], a, b, axis_name="expert"),
      mesh, (P("expert"),) * 4, P("expert"))
  out = jax.jit(layer)(x, sizes, w_in, w_out)
  assert reference.relative_error(out, _mlp_reference(x, sizes, w_in, w_out, 4)) < TOL


@pytest.mark.parametrize("change, message", [
    (dict(x=np.ones((4 * T, 2, D), np.float32)), r"x: expected \[T, D\]"),
    (dict(w_in=np.ones((G, D), np.float32)), r"w_in: expected \[G_local, 8, F\]"),
    (dict(w_out=np.ones((G, F + 1, D), np.float32)), r"w_out: expected \[2, 6, 8\]"),
    (dict(w_out=np.ones((G, F, D + 2), np.float32)), r"w_out: expected \[2, 6, 8\]"),
    (dict(sizes=np.ones((4, 12), np.int32)), r"group_sizes: expected 8 experts \(4 devices x 2"),
    (dict(sizes=np.ones((4, G), np.float32)), r"group_sizes: expected integers \[G\]"),
], ids=["x_rank", "w_in_rank", "w_out_f", "w_out_d", "sizes_length", "sizes_dtype"])
def test_expert_parallel_mlp_names_the_bad_argument(change, message):
  """Shapes the docstring rules out are TypeErrors naming the argument at trace time (were
  jax's lhs/rhs messages, a blame on the weights, or, for w_out's D, accepted)."""
  mesh = cpu_mesh((4,), ("expert",))
  x, sizes, w_in, w_out = _mlp_operands(4, seed=3)
  args = {**dict(x=x, sizes=sizes, w_in=w_in, w_out=w_out), **change}
  layer = _shard_map(
      lambda x, s, a, b: expert_parallel.expert_parallel_mlp(x, s[0], a, b, axis_name="expert"),
      mesh, (P("expert"),) * 4, P("expert"))
  with pytest.raises(TypeError, match=message):
    jax.jit(layer).trace(args["x"], args["sizes"], args["w_in"], args["w_out"])


def _ragged_all_to_all_model(operands, input_offsets, send_sizes, output_offsets, out_rows):
  """jax.lax.ragged_all_to_all's documented semantics, device by device, in NumPy."""
  shards = len(operands)
  per_device = len(input_offsets[0]) // shards
  results = [np.zeros((out_rows,) + operands[0].shape[1:], operands[0].dtype)
             for _ in range(shards)]
  for sender in range(shards):
    for i in range(len(input_offsets[sender])):
      start, size, target = (input_offsets[sender][i], send_sizes[sender][i],
                             output_offsets[sender][i])
      results[i // per_device][target:target + size] = operands[sender][start:start + size]
  return np.concatenate(results)


@pytest.mark.parametrize("per_device", [1, 3])
def test_ragged_all_to_all_stand_in_has_jax_semantics(per_device):
  """The CPU stand-in agrees with the documented semantics, one or several slices per device."""
  shards = 4
  slices = shards * per_device
  rows = out_rows = 2 * slices + 3  # slices of up to 2 rows, and rows no slice touches
  mesh = cpu_mesh((shards,), ("x",))
  rng = np.random.default_rng(per_device)
  operands = rng.standard_normal((shards, rows, 3)).astype(np.float32)
  send = rng.integers(0, 3, (shards, slices))
  start = np.stack([np.cumsum(s) - s for s in send])  # packed, in slice order
  # Receivers pack what they get by sender, then slice: offsets the senders can compute.
  recv = send.reshape(shards, shards, per_device).transpose(1, 0, 2)  # [receiver, sender, j]
  landing = (np.cumsum(recv.reshape(shards, -1), axis=1) - recv.reshape(shards, -1))
  output_offsets = landing.reshape(shards, shards, per_device).transpose(1, 0, 2).reshape(
      shards, slices)
  recv_sizes = recv.reshape(shards, slices)
  expected = _ragged_all_to_all_model(operands, start, send, output_offsets, out_rows)

  def body(op, a, b, c, d):
    out = jnp.zeros_like(op[0], shape=(out_rows, 3))
    return expert_parallel.ragged_all_to_all(op[0], out, a[0], b[0], c[0], d[0], axis_name="x")

  fn = _shard_map(body, mesh, (P("x"),) * 5, P("x"))
  got = jax.jit(fn)(operands, start.astype(np.int32), send.astype(np.int32),
                    output_offsets.astype(np.int32), recv_sizes.astype(np.int32))
  np.testing.assert_array_equal(np.asarray(got), expected)


@pytest.mark.parametrize("output, slices, message", [
    (np.ones((8, 2), jnp.bfloat16), 4, r"output: expected float32\[\*, 2\] like operand"),
    (np.ones((8, 1), np.float32), 4, r"output: expected float32\[\*, 2\] like operand"),
    (np.ones((8, 2), np.float32), 6, r"expected one length, a multiple of the 4 devices"),
], ids=["dtype", "trailing_dims", "slices_per_device"])
def test_ragged_all_to_all_names_mismatched_arguments(output, slices, message):
  """The CPU stand-in promoted, broadcast or dropped slices where these are mistakes."""
  mesh = cpu_mesh((4,), ("x",))
  offsets = np.zeros((4, slices), np.int32)
  body = lambda a, b, c: expert_parallel.ragged_all_to_all(a, b, c[0], c[0], c[0], c[0],
                                                            axis_name="x")
  fn = _shard_map(body, mesh, (P("x"),) * 3, P("x"))
  with pytest.raises(TypeError, match=message):
    jax.jit(fn).trace(np.ones((8, 2), np.float32), np.tile(output, (4, 1)), offsets)


def _replicated_token_experts(mesh):
  """Tokens replicated, experts split over "model": group_offset selects, one psum combines."""
  local = G // mesh.shape["model"]

  def body(x, w, sizes):
    offset = (jax.lax.axis_index("model") * local).astype(jnp.int32)[None]
    return jax.lax.psum(jgg.ragged_dot(x, w, sizes, group_offset=offset), "model")

  return _shard_map(body, mesh, (P(), P("model"), P()), P())


def _replicated_token_operands():
  rng = np.random.default_rng(3)
  x = rng.standard_normal((T * 2, D)).astype(np.float32)
  w = rng.standard_normal((G, D, F)).astype(np.float32)
  sizes = np.array([3, 0, 5, 2, 4, 0, 6, 1], np.int32)  # 21 of 24 rows
  return x, w, sizes, reference.ragged_m(x, w, sizes)


def test_ops_in_shard_map_with_group_offset(partitioner):
  mesh = cpu_mesh()
  x, w, sizes, expected = _replicated_token_operands()
  fn = jax.jit(_replicated_token_experts(mesh))
  assert reference.relative_error(fn(x, w, sizes), expected) < TOL
  hlo = fn.lower(x, w, sizes).compile().as_text()
  assert collectives(hlo) == {f"all-reduce f32[{2 * T},{F}]": 1}, hlo
  (_, _, operands), = custom_calls(hlo)
  assert operands[1] == f"f32[{G // 4},1,{D},{F}]"  # the local experts only


def test_shard_map_program_exports():
  """Fully manual: plain custom calls, so the sharded program exports and reloads.

  Under Shardy only: jax 0.11.2 cannot call a sharded export under GSPMD at all.
  """
  mesh = cpu_mesh()
  x, w, sizes, expected = _replicated_token_operands()
  fn = jax.jit(_replicated_token_experts(mesh))
  checks = [jax.export.DisabledSafetyCheck.custom_call(_native.RAGGED_M_TARGET)]
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, s))
           for a, s in ((x, P()), (w, P("model")), (sizes, P()))]
  exported = jax.export.export(fn, disabled_checks=checks, platforms=("cpu",))(*specs)
  assert "CustomSPMDPartitioning" not in exported.mlir_module()
  restored = jax.export.deserialize(exported.serialize())
  out = restored.call(*[jax.device_put(a, s.sharding) for a, s in zip((x, w, sizes), specs)])
  assert reference.relative_error(out, expected) < TOL
