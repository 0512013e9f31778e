"""A dropless Mixture-of-Experts block on grouped GEMMs.

  route     softmax over experts, top-k, optional renormalisation of the k weights,
            Switch-style load-balancing loss
  permute   sort the token x top-k assignments by expert (a stable argsort);
            group sizes counted on the device (bincount), never read on the host
  expert    gated MLP: down(act(gate(x)) * up(x)), three grouped GEMMs
  unpermute inverse permutation, then the weighted sum over each token's k experts

Every shape is static and group sizes stay on the device, so the block jits,
differentiates and has no host sync. No capacity factor: every assignment is
computed, whatever the router decides (dropless).

Expert parallelism (`axis_name`, inside `shard_map`; `moe_layer(expert_axis=...)`
wraps it): experts are sharded over a mesh axis and so are the tokens. Each
device routes its own tokens, sends each expert's rows to the device that owns
it with one ragged all-to-all (expert_parallel.ragged_all_to_all: jax.lax's,
with a CPU stand-in), runs its local experts, and sends the results back the
same way. The slices are laid out so that a device receives its rows sorted by
local expert from row 0 (so no second sort, and plain local group sizes); the
receive buffer holds the worst case, every row of every device (dropless).
expert_parallel.expert_parallel_mlp shows the other layout, the global expert
order read with group_offset; this one keeps the gated MLP's projections
ignorant of the sharding.

The Flax modules (`jax_grouped_gemm.flax.nnx.MoE`, `jax_grouped_gemm.flax.linen.MoE`)
hold the parameters and call `moe_layer` (which calls `moe_block`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from jax_grouped_gemm.expert_parallel import ragged_all_to_all
from jax_grouped_gemm.ragged_dot import ragged_dot as jgg_ragged_dot

# (x [rows, in], kernel [groups, in, out], group_sizes [groups]) -> [rows, out]
Projection = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def default_projection(x, kernel, group_sizes):
  return jgg_ragged_dot(x, kernel, group_sizes)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MoEWeights:
  """Parameters of one block. Under expert parallelism gate/up/down hold the local experts."""
  router: jax.Array  # [d_model, experts]
  gate: jax.Array  # [experts, d_model, d_ff]
  up: jax.Array  # [experts, d_model, d_ff]
  down: jax.Array  # [experts, d_ff, d_model]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Routing:
  weights: jax.Array  # [tokens, k] float32 combine weights
  experts: jax.Array  # [tokens, k] int32
  aux_loss: jax.Array  # [] float32 load-balancing loss, 1.0 when perfectly balanced


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Permutation:
  order: jax.Array  # [tokens * k] int32: sorted row r holds assignment order[r] = token * k + slot
  group_sizes: jax.Array  # [experts] int32: rows of each expert, in sorted order


# --- routing --------------------------------------------------------------------

def route(logits, top_k: int, *, normalize_weights: bool = True, axis_name=None) -> Routing:
  """Softmax top-k routing of `logits` [tokens, experts] (computed in float32).

  With `axis_name` (inside shard_map, tokens sharded over it) the load-balancing
  loss is the one of the global batch.
  """
  if logits.ndim != 2:
    raise TypeError(f"logits: expected [tokens, experts], got shape {logits.shape}")
  num_experts = logits.shape[1]
  if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
    raise TypeError(f"top_k: expected an int, got {top_k!r}")
  if not 1 <= top_k <= num_experts:
    raise ValueError(f"top_k: expected 1 <= top_k <= {num_experts} (experts), got {top_k}")
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  weights, experts = lax.top_k(probs, top_k)
  if normalize_weights:
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
  aux_loss = load_balancing_loss(probs, experts, axis_name=axis_name)
  return Routing(weights=weights, experts=experts.astype(jnp.int32), aux_loss=aux_loss)


def load_balancing_loss(probs, experts, *, axis_name=None):
  """Switch Transformer's auxiliary loss: E * sum_e f_e * P_e.

  f_e is the fraction of assignments routed to expert e (not differentiable),
  P_e the mean router probability of e; the gradient flows through P_e.
  """
  num_experts = probs.shape[-1]
  # An empty batch has no assignments and no probabilities: its loss is 0, not 0 / 0.
  fraction = jnp.bincount(experts.reshape(-1), length=num_experts) / max(experts.size, 1)
  mean_prob = jnp.sum(probs, axis=0) / max(probs.shape[0], 1)
  if axis_name is not None:  # equal token counts per shard: the mean of means is global
    fraction = lax.pmean(fraction, axis_name)
    mean_prob = lax.pmean(mean_prob, axis_name)
  return num_experts * jnp.sum(lax.stop_gradient(fraction) * mean_prob)


# --- permutation ------------------------------------------------------------------

def permute(x, experts, num_experts: int):
  """Rows of `x` [tokens, d] for every assignment in `experts` [tokens, k], sorted by expert.

  Returns (x_sorted [tokens * k, d], Permutation). A stable sort keeps each
  expert's rows in token order.
  """
  top_k = experts.shape[-1]
  assignments = experts.reshape(-1)
  order = jnp.argsort(assignments, stable=True).astype(jnp.int32)
  group_sizes = jnp.bincount(assignments, length=num_experts).astype(jnp.int32)
  return jnp.take(x, order // top_k, axis=0), Permutation(order=order, group_sizes=group_sizes)


def unpermute(y_sorted, permutation: Permutation, weights):
  """Each token's weighted sum of its k expert outputs: [tokens, d], in y_sorted's dtype."""
  tokens, top_k = weights.shape
  order = permutation.order
  inverse = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype),
                                                unique_indices=True)
  y = jnp.take(y_sorted, inverse, axis=0).reshape(tokens, top_k, y_sorted.shape[-1])
  # Sum the k outputs in float32 (with bf16 activations: one rounding, not k), elementwise:
  # as a dot, a GPU would be free to run it in TF32.
  combined = jnp.sum(y.astype(jnp.float32) * weights.astype(jnp.float32)[..., None], axis=1)
  return combined.astype(y_sorted.dtype)


# --- experts ----------------------------------------------------------------------

def gated_mlp(x, group_sizes, weights: MoEWeights, *, activation=jax.nn.silu,
              projection: Projection = default_projection):
  """down(activation(gate(x)) * up(x)) per expert; rows past sum(group_sizes) give 0.

  gate and up are separate GEMMs rather than one [.., 2 * d_ff] kernel so that
  sharding d_ff (tensor parallelism) keeps each gate column with its up column.
  """
  hidden = activation(projection(x, weights.gate, group_sizes)) * projection(x, weights.up,
                                                                             group_sizes)
  return projection(hidden, weights.down, group_sizes)


# --- the block ----------------------------------------------------------------------

def moe_block(x, weights: MoEWeights, *, top_k: int, normalize_weights: bool = True,
              activation=jax.nn.silu, projection: Projection = default_projection,
              axis_name=None):
  """The MoE block: x [tokens, d_model] -> (y [tokens, d_model], aux_loss []).

  Router logits are computed in float32 (bf16 logits would flip near-tied
  top-k choices). With `axis_name`, call inside shard_map with x and the expert
  weights sharded over that axis (router replicated): see the module docstring.
  """
  _check_shapes(x, weights, axis_name)
  num_experts = weights.router.shape[1]
  # HIGHEST: a GPU's default f32 dot is TF32, whose ~1e-3 error would flip near-tied picks.
  logits = jnp.dot(x.astype(jnp.float32), weights.router.astype(jnp.float32),
                   precision=lax.Precision.HIGHEST)
  routing = route(logits, top_k, normalize_weights=normalize_weights, axis_name=axis_name)
  x_sorted, permutation = permute(x, routing.experts, num_experts)
  mlp = functools.partial(gated_mlp, weights=weights, activation=activation, projection=projection)
  if axis_name is None:
    y_sorted = mlp(x_sorted, permutation.group_sizes)
  else:
    y_sorted = _expert_parallel(mlp, x_sorted, permutation.group_sizes, axis_name)
  return unpermute(y_sorted, permutation, routing.weights), routing.aux_loss


def moe_layer(x, weights: MoEWeights, *, top_k: int, normalize_weights: bool = True,
              activation=jax.nn.silu, projection: Projection = default_projection,
              expert_axis=None, mesh=None):
  """moe_block for x [..., d_model] (leading dims are tokens) -> (y [..., d_model], aux_loss).

  With `expert_axis`, runs moe_block in shard_map over that mesh axis (`mesh`,
  or the context mesh set by jax.set_mesh): tokens and the expert dimension of
  gate/up/down are sharded over it, the router is replicated. A `mesh` of Explicit axes
  becomes the context mesh of the call (outside jit: call it under jit, or under
  jax.set_mesh, to vmap or differentiate it).
  """
  if x.ndim == 0:
    raise TypeError("x: expected [..., d_model], got a scalar")
  if (expert_axis is not None and mesh is not None and mesh.explicit_axes and
      jax.sharding.get_abstract_mesh() != mesh.abstract_mesh):
    # Explicit axes type every value by the context mesh: make `mesh` the context, so that
    # the layer puts its inputs as its shard_map takes them (below).
    with _mesh_context(mesh):
      return moe_layer(x, weights, top_k=top_k, normalize_weights=normalize_weights,
                       activation=activation, projection=projection, expert_axis=expert_axis,
                       mesh=mesh)
  tokens_shape = (math.prod(x.shape[:-1]), x.shape[-1])
  block = functools.partial(moe_block, top_k=top_k, normalize_weights=normalize_weights,
                            activation=activation, projection=projection)
  if tokens_shape[0] == 0:  # nothing to route; and Shardy (jax 0.11) crashes compiling the
    # gradient of empty shard_map'ed GEMMs. y has the dtype the block gives one token.
    y_type, _ = jax.eval_shape(block, jax.ShapeDtypeStruct((1, x.shape[-1]), x.dtype), weights)
    return jnp.zeros_like(x, dtype=y_type.dtype), jnp.zeros((), jnp.float32)
  x_spec = _typed_spec(x)
  if expert_axis is None:
    def flat_block(x, weights):
      y, aux_loss = block(x.reshape(tokens_shape), weights)
      return y.reshape(x.shape), aux_loss
    return _on_auto_axes(flat_block, out_sharding=(x_spec, P()))(x, weights)
  experts = P(expert_axis)
  in_specs = (P(expert_axis, None), MoEWeights(P(), experts, experts, experts))
  block = jax.shard_map(functools.partial(block, axis_name=expert_axis), mesh=mesh,
                        in_specs=in_specs, out_specs=(P(expert_axis, None), P()))
  # On Explicit axes shard_map takes its inputs only in its in_specs: put them so.
  tokens = _on_auto_axes(lambda x: x.reshape(tokens_shape), out_sharding=in_specs[0])(x)
  weights = _resharded(weights, in_specs[1])
  y, aux_loss = block(tokens, weights)
  return _on_auto_axes(lambda y: y.reshape(x.shape), out_sharding=x_spec)(y), aux_loss


def _mesh_context(mesh):
  """jax.set_mesh(mesh) where jax allows it (outside any trace, a concrete mesh), else the
  abstract mesh, which is what tracing needs."""
  try:
    return jax.set_mesh(mesh)  # refuses before it changes anything
  except ValueError:
    return jax.sharding.use_abstract_mesh(mesh.abstract_mesh)


def _explicit_mesh():
  """The context mesh if it has Explicit axes (sharding in types), else None."""
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty or not mesh.explicit_axes else mesh


def _typed_spec(x):
  return jax.typeof(x).sharding.spec if _explicit_mesh() is not None else None


def _on_auto_axes(fn, *, out_sharding):
  """On a mesh of Explicit axes, the block's sorts, gathers and scatters over sharded
  tokens (and reshapes of tokens split on any dim) have no sharding jax can infer: run
  fn on Auto axes (the partitioner places them; the grouped GEMMs partition by their
  own rules) and type its results `out_sharding`. Elsewhere fn as is."""
  mesh = _explicit_mesh()
  if mesh is None:
    return fn
  return jax.sharding.auto_axes(fn, axes=mesh.explicit_axes, out_sharding=out_sharding)


def _resharded(weights: MoEWeights, specs: MoEWeights) -> MoEWeights:
  if _explicit_mesh() is None:
    return weights
  return MoEWeights(*(jax.sharding.reshard(getattr(weights, f), getattr(specs, f))
                      for f in ("router", "gate", "up", "down")))


def _check_shapes(x, weights: MoEWeights, axis_name):
  if x.ndim != 2:
    raise TypeError(f"x: expected [tokens, d_model], got shape {x.shape}")
  layouts = {"router": "[d_model, experts]", "gate": "[experts, d_model, d_ff]",
             "up": "[experts, d_model, d_ff]", "down": "[experts, d_ff, d_model]"}
  for name, layout in layouts.items():
    if getattr(weights, name).ndim != layout.count(",") + 1:
      raise TypeError(f"weights.{name}: expected {layout}, got shape "
                      f"{getattr(weights, name).shape}")
  if weights.router.shape[0] != x.shape[1]:
    raise TypeError(f"weights.router: expected [{x.shape[1]}, experts] (x's d_model), got shape "
                    f"{weights.router.shape}")
  d_model, num_experts = weights.router.shape
  local_experts, _, d_ff = weights.gate.shape
  shards = 1 if axis_name is None else lax.axis_size(axis_name)
  if local_experts * shards != num_experts:
    raise TypeError(f"weights.gate: {local_experts} experts x {shards} shards of axis "
                    f"{axis_name!r} != {num_experts} router experts")
  expected = {"gate": (local_experts, d_model, d_ff), "up": (local_experts, d_model, d_ff),
              "down": (local_experts, d_ff, d_model)}
  for name, shape in expected.items():
    if getattr(weights, name).shape != shape:
      raise TypeError(f"weights.{name}: expected shape {shape}, got {getattr(weights, name).shape}")


# --- expert parallelism: ragged all-to-all dispatch and return ---------------------

def _exclusive_cumsum(x, axis):
  return jnp.cumsum(x, axis=axis) - x


def _expert_parallel(mlp, x_sorted, group_sizes, axis_name):
  """Runs `mlp` on the experts of this device for the expert-sorted rows of every device.

  Slice (destination p, local expert e) of each sender lands on p at
  [rows of p's experts before e, from all senders] + [rows for e from senders
  before this one], so each device receives its rows sorted by local expert.
  """
  shards = lax.axis_size(axis_name)
  me = lax.axis_index(axis_name)
  num_experts = group_sizes.shape[0]
  local_experts = num_experts // shards
  counts = lax.all_gather(group_sizes, axis_name)  # [sender, expert]
  by_owner = counts.reshape(shards, shards, local_experts)  # [sender, owner, local expert]
  rows_per_expert = by_owner.sum(axis=0)  # [owner, local expert]
  landing = (_exclusive_cumsum(rows_per_expert, axis=1)[None]
             + _exclusive_cumsum(by_owner, axis=0))  # [sender, owner, local expert]
  start = _exclusive_cumsum(counts, axis=1)  # [sender, expert]: row in the sender's buffer

  capacity = shards * x_sorted.shape[0]  # dropless: every row of every device may come here
  received = ragged_all_to_all(
      x_sorted, jnp.zeros_like(x_sorted, shape=(capacity,) + x_sorted.shape[1:]),
      input_offsets=start[me], send_sizes=counts[me],
      output_offsets=landing[me].reshape(num_experts),
      recv_sizes=by_owner[:, me].reshape(num_experts), axis_name=axis_name)
  y_local = mlp(received, rows_per_expert[me])
  return ragged_all_to_all(
      y_local, jnp.zeros_like(y_local, shape=(x_sorted.shape[0],) + y_local.shape[1:]),
      input_offsets=landing[:, me].reshape(num_experts),
      send_sizes=by_owner[:, me].reshape(num_experts),
      output_offsets=start.reshape(shards, shards, local_experts)[:, me].reshape(num_experts),
      recv_sizes=counts[me], axis_name=axis_name)


def __getattr__(name):
  # `jgg.moe.MoE` is the NNX module; imported lazily because it imports this module.
  if name == "MoE":
    from jax_grouped_gemm.flax import nnx
    return nnx.MoE
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
