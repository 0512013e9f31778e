"""Expert parallelism inside shard_map: a reference grouped MLP on a ragged all-to-all.

The way MoE layers are written in practice: experts are sharded over one mesh
axis, every device routes its own tokens, and rows travel to the device that
owns their expert and back. Here the grouped GEMMs run on a layout that makes
`group_offset` do the selection:

  dispatch  one `ragged_all_to_all` sends, for every global expert e, this
            device's rows of e to e's owner, landing at the row they would
            have in the *global* expert-sorted order of all devices' rows
            (expert-major, then sender). The receive buffer is that global
            order with only this device's experts filled in.
  experts   the grouped GEMMs read the buffer with the global group sizes
            (summed over senders) and group_offset = axis_index * G_local:
            exactly the rows of the local experts are computed, the rest are 0.
  return    a second ragged all-to-all sends each computed slice back to the
            row it came from.

No sort or permutation of the received rows is needed, and every offset is
computed on the device from the all-gathered [devices, G] counts (a few bytes).
The receive buffer holds the worst case, every row of every device (dropless);
the GEMMs write zeros into its rows of other experts ((S-1)/S of it), which
costs bandwidth, not FLOPs. Contrast with the jit + named-shardings path
(partitioning.py), which never moves ragged rows between devices.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jax_grouped_gemm.group_sizes import group_ends
from jax_grouped_gemm.ragged_dot import ragged_dot


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *,
                      axis_name):
  """`jax.lax.ragged_all_to_all` (same arguments and semantics).

  `output` must vary over `axis_name` like `operand` (under shard_map's
  check_vma), e.g. `jnp.zeros_like(operand, shape=...)`.

  XLA:CPU has no ragged-all-to-all, so on CPU the same result is built from
  all_gathers (each device gathers every operand and picks the slices sent to
  it): S times the traffic, meant for CPU meshes (tests), not for speed.
  """
  if jnp.result_type(operand) != jnp.result_type(output) or (
      jnp.shape(operand)[1:] != jnp.shape(output)[1:]):
    raise TypeError(f"output: expected {jnp.result_type(operand)}[*, "
                    f"{', '.join(map(str, jnp.shape(operand)[1:]))}] like operand, got "
                    f"{jnp.result_type(output)}{list(jnp.shape(output))}")
  shapes = {jnp.shape(a) for a in (input_offsets, send_sizes, output_offsets, recv_sizes)}
  devices = lax.axis_size(axis_name)
  (shape,) = shapes if len(shapes) == 1 else ((),)
  if len(shape) != 1 or shape[0] % devices:
    raise TypeError(f"input_offsets, send_sizes, output_offsets, recv_sizes: expected one "
                    f"length, a multiple of the {devices} devices of {axis_name!r}, got shapes "
                    f"{sorted(shapes)}")
  args = (operand, output) + tuple(jnp.asarray(a, jnp.int32) for a in
                                   (input_offsets, send_sizes, output_offsets, recv_sizes))
  return lax.platform_dependent(
      *args, cpu=functools.partial(_ragged_all_to_all_by_all_gather, axis_name=axis_name),
      default=functools.partial(lax.ragged_all_to_all, axis_name=axis_name))


def _ragged_all_to_all_by_all_gather(operand, output, input_offsets, send_sizes, output_offsets,
                                     recv_sizes, *, axis_name):
  del recv_sizes  # the senders' send_sizes say the same
  shards = lax.axis_size(axis_name)
  per_device = input_offsets.shape[0] // shards
  me = lax.axis_index(axis_name)

  def addressed_to_me(a):  # [slices] on every device -> [senders * per_device] sent here
    gathered = lax.all_gather(a, axis_name)
    return lax.dynamic_slice_in_dim(gathered, me * per_device, per_device, axis=1).reshape(-1)

  start, size, target = map(addressed_to_me, (input_offsets, send_sizes, output_offsets))
  sender = jnp.repeat(jnp.arange(shards), per_device)
  row = jnp.arange(output.shape[0])
  inside = (row >= target[:, None]) & (row < target[:, None] + size[:, None])  # [slices, rows]
  which = jnp.argmax(inside, axis=0)
  source_row = jnp.clip(start[which] + row - target[which], 0, operand.shape[0] - 1)
  received = lax.all_gather(operand, axis_name)[sender[which], source_row]
  hit = inside.any(axis=0).reshape((-1,) + (1,) * (operand.ndim - 1))
  return jnp.where(hit, received, output)


def _exclusive_cumsum(x, axis):
  return jnp.cumsum(x, axis=axis) - x


def _check_mlp_operands(x, group_sizes, w_in, w_out, shards: int) -> None:
  """Trace-time errors naming the argument, for the shapes expert_parallel_mlp documents."""
  if jnp.ndim(x) != 2:
    raise TypeError(f"x: expected [T, D], got shape {jnp.shape(x)}")
  d = x.shape[1]
  if jnp.ndim(w_in) != 3 or w_in.shape[1] != d:
    raise TypeError(f"w_in: expected [G_local, {d}, F] (D of x), got shape {jnp.shape(w_in)}")
  local, f = w_in.shape[0], w_in.shape[2]
  if jnp.shape(w_out) != (local, f, d):
    raise TypeError(f"w_out: expected [{local}, {f}, {d}] (G_local and F of w_in, D of x), got "
                    f"shape {jnp.shape(w_out)}")
  if (jnp.ndim(group_sizes) != 1
      or not jnp.issubdtype(jnp.result_type(group_sizes), jnp.integer)):
    raise TypeError(f"group_sizes: expected integers [G] (this device's rows of every global "
                    f"expert), got {jnp.result_type(group_sizes)}{list(jnp.shape(group_sizes))}")
  if group_sizes.shape[0] != shards * local:
    raise TypeError(f"group_sizes: expected {shards * local} experts ({shards} devices x "
                    f"{local} local experts of w_in), got {group_sizes.shape[0]}")


def expert_parallel_mlp(x, group_sizes, w_in, w_out, *, axis_name, activation=jax.nn.silu):
  """y = activation(x . w_in[e]) . w_out[e] per row, for experts sharded over `axis_name`.

  Call inside a shard_map that is manual over `axis_name` (size S), under jit (jax 0.11.2's
  eager shard_map of its prefix scans crashes XLA:CPU's compiler; jitted, it runs):
    x          [T, D]  this device's rows, sorted by global expert
    group_sizes [G]    int32, this device's rows of each of the G = S * G_local
                       global experts (device values: clamped like the ops'
                       group sizes, rows past their sum give 0)
    w_in       [G_local, D, F], w_out [G_local, F, D]: this device's experts
                       (global experts axis_index * G_local + j).
  Returns [T, D], each row computed by its expert on the device that owns it.
  """
  shards = lax.axis_size(axis_name)
  me = lax.axis_index(axis_name)
  _check_mlp_operands(x, group_sizes, w_in, w_out, shards)
  num_groups, local_groups = group_sizes.shape[0], w_in.shape[0]
  rows = x.shape[0]
  ends = group_ends(group_sizes, rows)
  sizes = jnp.diff(ends, prepend=0)  # clamped: the offsets below stay in bounds
  counts = lax.all_gather(sizes, axis_name)  # [sender, expert]
  totals = counts.sum(axis=0)  # the global group sizes
  # Row of (sender, expert) in the global order: experts first, then senders.
  landing = _exclusive_cumsum(totals, 0)[None, :] + _exclusive_cumsum(counts, 0)
  starts = _exclusive_cumsum(counts, 1)  # [sender, expert]: first row in the sender's x
  # [sender, expert] -> the entries of this device's experts, flat as [sender * G_local]: the
  # slice order of a ragged all-to-all that sends each sender its own rows back.
  mine = lambda a: a.reshape(shards, shards, local_groups)[:, me].reshape(num_groups)

  buffer = ragged_all_to_all(
      x, jnp.zeros_like(x, shape=(shards * rows,) + x.shape[1:]),
      input_offsets=starts[me], send_sizes=sizes, output_offsets=landing[me],
      recv_sizes=mine(counts), axis_name=axis_name)
  offset = (me * local_groups).astype(jnp.int32)[None]
  hidden = activation(ragged_dot(buffer, w_in, totals, group_offset=offset))
  out = ragged_dot(hidden, w_out, totals, group_offset=offset)
  return ragged_all_to_all(
      out, jnp.zeros_like(out, shape=(rows,) + out.shape[1:]),
      input_offsets=mine(landing), send_sizes=mine(counts), output_offsets=mine(starts),
      recv_sizes=sizes, axis_name=axis_name)
