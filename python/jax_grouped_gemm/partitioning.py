"""Partitioning of the canonical ragged GEMMs under jit with sharded inputs.

The rules come from one spec per op (sharding_rules.py): Shardy's
`sharding_rule` and GSPMD's `infer_sharding_from_operands` are generated from
it, and both partitioners then call the same `partition`, which asks
`plan_sharding` for the plan and runs it (`_local_computation`): local group
boundaries for a shard of the ragged rows (computed on the device from the
global sizes, `local_group_sizes`), `group_offset + axis_index * G_local` for
a shard of the experts, then one psum or reduce-scatter for sharded
reductions. Every canonical dimension is one factor: the reshapes from
jax.lax's N-D dimension numbers to the canonical shapes happen outside the
partitioned op (ragged_dot.py), where the partitioners see through them, so no
compound factors (and no factor sizes) are needed. Seeing through a merge, Shardy
splits the merged dim over part of a mesh axis when the axis does not divide the
dim it came from (rhs [G, K, 2, N2] split 4 ways on the 2: the canonical N gets
the axis' first factor of 2), a sharding no mesh of whole axes names: the
callbacks read the partitioner's shardings themselves (`dim_axes`), and such a
dim reads as unsplit, so it is computed replicated. The ragged data itself
never moves between shards here; moving rows to their experts is the
shard_map path (expert_parallel.py).

Wiring: the lowering of ragged_m_p / ragged_k_p is a `custom_partitioning` call
around the FFI call, so forward, dgrad and wgrad (all binds of the two
primitives, whatever jax.grad produced) are partitioned. On one device, or
inside a shard_map, it lowers to the plain FFI call, which `jax.export`
serializes; a jit over several devices with sharded operands cannot be
exported (custom_partitioning keeps a Python callback): export the shard_map
form instead. Meshes of Auto and of Explicit axes both work: with Explicit
axes the result's type carries the plan's sharding (or the caller's
`out_sharding`) and the lowering constrains the call's result to it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax.numpy as jnp
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir
from jax.sharding import AbstractMesh, use_abstract_mesh

# Private: marks a primitive whose lowering needs the device assignment, without
# which custom_partitioning gets no mesh under jit (jax's own cuDNN ops do this).
from jax._src import dispatch as _dispatch
from jax._src import sharding_impls as _sharding_impls
# Private: the sharding constraint jax's own lowerings put on Explicit-typed results.
from jax._src.interpreters.mlir import lower_with_sharding_in_types as _constrain_to_type

from jax_grouped_gemm import ragged_gemm_ops as ops
from jax_grouped_gemm.group_sizes import group_ends
from jax_grouped_gemm.sharding_rules import (
    OpShardingSpec, ShardingPlan, dim_axes, plan_sharding, ragged_k_spec, ragged_m_spec)


# --- device-side group boundaries -------------------------------------------------

def local_group_sizes(group_sizes, rows: int, local_rows: int, shard_index):
  """Group sizes of the rows [shard_index * local_rows, + local_rows) of a ragged
  dimension of `rows` rows, from the global sizes; computed on the device."""
  ends = group_ends(group_sizes, rows)
  bounds = jnp.concatenate([jnp.zeros_like(ends[..., :1]), ends], axis=-1)
  local = jnp.clip(bounds - shard_index * local_rows, 0, local_rows)
  return jnp.diff(local, axis=-1)


# --- one op's partitioned lowering -------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PartitionedOp:
  """A canonical op: its spec (from its static params) and its unpartitioned call."""
  spec: Callable[..., OpShardingSpec]   # (**params) -> spec
  call: Callable                        # (lhs, rhs, group_sizes, group_offset, **params)
  localize: Callable[[dict, tuple], dict] = lambda params, local_result_shape: params


_NO_MESH = AbstractMesh((), ())


def _local_computation(op: PartitionedOp, params: dict, plan: ShardingPlan):
  """The per-shard function of a plan: local group sizes / offset, call, combine."""
  spec = plan.spec
  rows_axes = plan.split.get(spec.ragged, ())
  groups_axes = plan.split.get(spec.groups, ())
  params = op.localize(params, plan.local_result_shape())

  def run(*operands):
    # Traced while jit's mesh is the context: on Explicit axes jax would put sharding
    # constraints inside (even in psum's reducer), which a per-device module cannot hold.
    with use_abstract_mesh(_NO_MESH):
      return run_on_shard(*operands)

  def run_on_shard(lhs, rhs, group_sizes, group_offset):
    if rows_axes:
      group_sizes = local_group_sizes(group_sizes, plan.sizes[spec.ragged],
                                      plan.local_size(spec.ragged), lax.axis_index(rows_axes))
    if groups_axes:  # this shard's experts start G_local * index past the offset
      num_global = group_sizes.shape[-1]
      group_offset = (jnp.clip(group_offset, 0, num_global)
                      + lax.axis_index(groups_axes) * plan.local_size(spec.groups))
    out = op.call(lhs, rhs, group_sizes, group_offset, **params)
    for factor, axes in plan.scattered.items():
      out = lax.psum_scatter(out, axes, scatter_dimension=spec.result_factors.index(factor),
                             tiled=True)
    if plan.summed_axes:
      out = lax.psum(out, plan.summed_axes)
    return out

  return run


def _shapes_and_axes(arg_shapes, mesh):
  return ([a.shape for a in arg_shapes],
          [dim_axes(a.sharding, len(a.shape), mesh) for a in arg_shapes])


def _partitioned(op: PartitionedOp):
  """custom_partitioning of `op.call`, its rules generated from `op.spec`.

  Static params travel as a sorted tuple of items (hashable), first argument of
  every callback. The callbacks take the partitioner's shardings undecoded
  (`decode_shardings=False`) and read them with `dim_axes`: jax's own decoding to
  a NamedSharding raises, before any callback runs, on a split over part of a
  mesh axis, which Shardy propagates onto a dimension the canonical reshape
  merged from one the axis does not divide; `dim_axes` reads it as unsplit.
  """
  fn = custom_partitioning(lambda *args: op.call(*args[:4], **dict(args[4])),
                           static_argnums=(4,))

  def infer_sharding_from_operands(params, mesh, arg_shapes, result_shape):
    shapes, axes = _shapes_and_axes(arg_shapes, mesh)
    return plan_sharding(op.spec(**dict(params)), mesh, shapes, axes,
                         result_shape.shape).result_sharding()

  def partition(params, mesh, arg_shapes, result_shape):
    shapes, axes = _shapes_and_axes(arg_shapes, mesh)
    plan = plan_sharding(op.spec(**dict(params)), mesh, shapes, axes, result_shape.shape,
                         dim_axes(result_shape.sharding, len(result_shape.shape), mesh))
    return (mesh, _local_computation(op, dict(params), plan), plan.result_sharding(),
            plan.operand_shardings())

  def sharding_rule(params, mesh, operand_types, result_types):
    del mesh, operand_types, result_types
    return op.spec(**dict(params)).sharding_rule()

  fn.def_partition(partition, infer_sharding_from_operands=infer_sharding_from_operands,
                   sharding_rule=sharding_rule, decode_shardings=False)
  return fn


def _lowers_unpartitioned(ctx) -> bool:
  """One device or inside shard_map: the plain FFI call.

  Fully manual, the call is the per-device program. Partially manual (shard_map
  with axis_names), the partitioners treat a plain custom call as replicated
  over the remaining axes (its operands are gathered: correct, not fast), while
  custom_partitioning there aborts the process under GSPMD in jax 0.11.
  """
  context = ctx.module_context.axis_context
  if isinstance(context, _sharding_impls.ShardingContext):
    return context.num_devices == 1
  if isinstance(context, _sharding_impls.SPMDAxisContext):
    return bool(context.manual_axes)
  return True


def _partitioned_lowering(op: PartitionedOp):
  fn = _partitioned(op)

  def rule(ctx, *args, out_sharding, **params):
    del out_sharding  # already the result's type: ctx.avals_out
    if _lowers_unpartitioned(ctx):
      call = functools.partial(op.call, **params)
    else:
      call = functools.partial(lambda frozen, *a: fn(*a, frozen), tuple(sorted(params.items())))
    out, = mlir.lower_fun(call, multiple_results=False)(ctx, *args)
    # Explicit mesh axes: the partitioner must produce the sharding the type promises.
    return [_constrain_to_type(ctx, out, ctx.avals_out[0])]

  return rule


PARTITIONED_OPS = {
    ops.ragged_m_p: PartitionedOp(
        spec=lambda rhs_transposed, **_: ragged_m_spec(rhs_transposed),
        call=ops._ragged_m_ffi),  # pylint: disable=protected-access
    ops.ragged_k_p: PartitionedOp(
        spec=lambda **_: ragged_k_spec(),
        call=ops._ragged_k_ffi,  # pylint: disable=protected-access
        localize=lambda params, shape: {**params, "num_groups": shape[0]}),
}

for _primitive, _op in PARTITIONED_OPS.items():
  mlir.register_lowering(_primitive, _partitioned_lowering(_op))
  _dispatch.prim_requires_devices_during_lowering.add(_primitive)
