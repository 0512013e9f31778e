"""FFI calls over a stack of independent groups: XLA partitions them along the groups.

A call whose every operand and result leads with the group axis G, and whose
groups do not interact, needs no communication when the stack is sharded along
whole groups: each shard runs the same handler on its G / shards groups. XLA's
batch partitioner does that for targets registered as batch-partitionable, from
two attributes on the custom call: `num_batch_dims` (here 1) and a Shardy rule
that shares the group factor across all operands and results and marks every
other dimension as needing replication (a shard of rows or columns is gathered
first: the scale layouts do not split along them). No Python callback is kept,
so such calls `jax.export` sharded too (custom_partitioning calls cannot).

The batch-partitionable targets are the MXFP8 handlers under a second name
(`batched_target`), so only the stack layouts' calls carry the rule.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import jax
import jax.numpy as jnp
from jax.extend import core as jex_core
from jax.interpreters import batching, mlir
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxlib.mlir import ir

from jax_grouped_gemm import _native

_BATCHED_SUFFIX = "_group_batched"


def batched_target(target: str) -> str:
  """The batch-partitionable name of `target` (same handler)."""
  return target + _BATCHED_SUFFIX


def register(targets: Sequence[str]) -> None:
  """Registers each target's handlers a second time, batch-partitionable."""
  for platform, capsules in _native.handler_capsules().items():
    for target in targets:
      if target in capsules:
        jax.ffi.register_ffi_target(batched_target(target), capsules[target], platform=platform)
  for target in targets:
    jax.ffi.register_ffi_target_as_batch_partitionable(batched_target(target))


def sharding_rule(operand_shapes, result_shapes) -> str:
  """Shardy's rule: one factor for every leading dimension (the groups), a factor of its own
  (needing replication) for every other one."""
  # Shardy's factor names: i..z, then z_1, z_2, ... ("i" is the groups').
  names = itertools.chain("jklmnopqrstuvwxyz", (f"z_{n}" for n in itertools.count(1)))
  private = []

  def factors(shape):
    own = [next(names) for _ in shape[1:]]
    private.extend(own)
    return "[" + ", ".join(["i"] + own) + "]"

  operands = ", ".join(factors(s) for s in operand_shapes)
  results = ", ".join(factors(s) for s in result_shapes)
  sizes = dict(zip(private, (n for s in list(operand_shapes) + list(result_shapes)
                             for n in s[1:])))
  sizes = ", ".join(f"{f}={n}" for f, n in [("i", operand_shapes[0][0])] + list(sizes.items()))
  replicated = f" need_replication={{{', '.join(private)}}}" if private else ""
  return f"#sdy.op_sharding_rule<({operands})->({results}) {{{sizes}}}{replicated}, custom>"


_call_p = jex_core.Primitive("jgg_group_batched_call")
_call_p.multiple_results = True


def call(target: str, results: Sequence[jax.ShapeDtypeStruct], *operands, **attributes):
  """jax.ffi.ffi_call of `target` over a group-leading stack, batch-partitionable.

  Every operand and result must lead with the same group count (an empty
  result is [G, 0]); attributes as jax.ffi.ffi_call takes them.
  """
  groups = {x.shape[0] for x in operands} | {r.shape[0] for r in results}
  if len(groups) != 1 or any(x.ndim == 0 for x in operands):
    raise ValueError(f"{target}: every operand and result must lead with the group axis, got "
                     f"{[x.shape for x in operands]} -> {[r.shape for r in results]}")
  return _call_p.bind(*operands, target=target,
                      results=tuple((tuple(r.shape), jnp.dtype(r.dtype)) for r in results),
                      attributes=tuple(sorted(attributes.items())))


def _abstract_eval(*operands, target, results, attributes):
  del target, attributes
  # On meshes of Explicit axes the results are split along the groups as the first
  # operand is (the rule gathers every other dimension).
  like = operands[0].sharding
  if like.mesh.empty or not like.mesh.explicit_axes:
    return [jax.core.ShapedArray(shape, dtype) for shape, dtype in results]
  groups_spec = like.spec[0] if len(like.spec) else None
  return [jax.core.ShapedArray(shape, dtype, sharding=NamedSharding(
      like.mesh, P(groups_spec, *[None] * (len(shape) - 1)))) for shape, dtype in results]


def _lowering(ctx, *operands, target, results, attributes):
  extra = {"mhlo.frontend_attributes": ir.DictAttr.get({"num_batch_dims": ir.StringAttr.get("1")})}
  if jax.config.jax_use_shardy_partitioner:
    rule = sharding_rule([a.shape for a in ctx.avals_in], [shape for shape, _ in results])
    extra["sdy.sharding_rule"] = ir.Attribute.parse(rule)
  return jax.ffi.ffi_lowering(batched_target(target), extra_attributes=extra)(
      ctx, *operands, **dict(attributes))


def _batch_sequentially(args, dims, **params):
  """Under vmap: one call per element (the groups axis is the call's own)."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not batching.not_mapped)
  args = [jnp.moveaxis(a, d, 0) if d is not batching.not_mapped else
          jnp.broadcast_to(a, (size,) + a.shape) for a, d in zip(args, dims)]
  outs = jax.lax.map(lambda xs: _call_p.bind(*xs, **params), tuple(args))
  return outs, [0] * len(outs)


_call_p.def_impl(lambda *args, **params: jax.jit(
    lambda *a: _call_p.bind(*a, **params))(*args))
_call_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(_call_p, _lowering)
batching.primitive_batchers[_call_p] = _batch_sequentially
