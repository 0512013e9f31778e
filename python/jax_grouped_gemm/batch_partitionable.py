"""FFI calls over independent pieces: XLA partitions them along the leading batch axes.

A call whose every operand and result leads with the same batch axes (the
groups G of a stack, and for the MXFP8 tile views also its row and column
tiles), and whose pieces do not interact, needs no communication when sharded
along those axes: each shard runs the same handler on its pieces. XLA's batch
partitioner does that for targets registered as batch-partitionable, from two
attributes on the custom call: `num_batch_dims` and a Shardy rule that shares
one factor per batch axis across all operands and results and marks every other
dimension as needing replication. Operands and results may carry layouts (a
view whose bytes are those of the original array, see mxfp8/tile_view.py); the
partitioner keeps them on the shards. No Python callback is kept, so such calls
`jax.export` sharded too (custom_partitioning calls cannot).

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
from jax_grouped_gemm.ragged_gemm_ops import vary_alike, varying_like

BATCHED_SUFFIX = "_group_batched"

# {jax.ffi platform: the batch-partitionable names registered}, for export's allowlist and
# its version checks (export.registered_targets).
_registered: dict[str, set[str]] = {}


def batched_target(target: str) -> str:
  """The batch-partitionable name of `target` (same handler)."""
  return target + BATCHED_SUFFIX


def register(targets: Sequence[str]) -> None:
  """Registers each target's handlers a second time, batch-partitionable."""
  for platform, capsules in _native.handler_capsules().items():
    for target in targets:
      if target in capsules:
        jax.ffi.register_ffi_target(batched_target(target), capsules[target], platform=platform)
        _registered.setdefault(platform, set()).add(batched_target(target))
  for target in targets:
    jax.ffi.register_ffi_target_as_batch_partitionable(batched_target(target))


def registered_targets() -> dict[str, tuple[str, ...]]:
  """{jax.ffi platform: the batch-partitionable target names registered}."""
  return {platform: tuple(sorted(names)) for platform, names in _registered.items()}


def sharding_rule(operand_shapes, result_shapes, num_batch_dims: int = 1) -> str:
  """Shardy's rule: one shared factor per leading batch dimension, a factor of its own
  (needing replication) for every other one."""
  # Shardy's factor names: i..z, then z_1, z_2, ...; the batch axes take the first ones.
  names = itertools.chain("ijklmnopqrstuvwxyz", (f"z_{n}" for n in itertools.count(1)))
  batch = [next(names) for _ in range(num_batch_dims)]
  private = []

  def factors(shape):
    own = [next(names) for _ in shape[num_batch_dims:]]
    private.extend(own)
    return "[" + ", ".join(batch + own) + "]"

  operands = ", ".join(factors(s) for s in operand_shapes)
  results = ", ".join(factors(s) for s in result_shapes)
  sizes = list(zip(batch, operand_shapes[0][:num_batch_dims]))
  sizes += list(zip(private, (n for s in list(operand_shapes) + list(result_shapes)
                              for n in s[num_batch_dims:])))
  sizes = ", ".join(f"{f}={n}" for f, n in sizes)
  replicated = f" need_replication={{{', '.join(private)}}}" if private else ""
  return f"#sdy.op_sharding_rule<({operands})->({results}) {{{sizes}}}{replicated}, custom>"


_call_p = jex_core.Primitive("jgg_group_batched_call")
_call_p.multiple_results = True


def call(target: str, results: Sequence[jax.ShapeDtypeStruct], *operands, num_batch_dims: int = 1,
         layouts: Sequence[Sequence[int] | None] | None = None, **attributes):
  """jax.ffi.ffi_call of `target` over operands and results that lead with the same
  `num_batch_dims` batch axes, batch-partitionable.

  layouts: a major-to-minor dimension order per operand then per result (None:
  row-major), as jax.ffi.ffi_call's input_layouts / output_layouts take them.
  An empty result is [*batch, 0]; attributes as jax.ffi.ffi_call takes them.
  """
  batch = {tuple(x.shape[:num_batch_dims]) for x in operands}
  batch |= {tuple(r.shape[:num_batch_dims]) for r in results}
  if len(batch) != 1 or any(x.ndim < num_batch_dims for x in operands):
    raise ValueError(f"{target}: every operand and result must lead with the same "
                     f"{num_batch_dims} batch axes, got {[x.shape for x in operands]} -> "
                     f"{[r.shape for r in results]}")
  layouts = tuple(None if l is None else tuple(l) for l in
                  (layouts or [None] * (len(operands) + len(results))))
  operands = vary_alike(*operands)  # inside shard_map: one set of manual axes (_abstract_eval)
  return _call_p.bind(*operands, target=target,
                      results=tuple((tuple(r.shape), jnp.dtype(r.dtype)) for r in results),
                      num_batch_dims=num_batch_dims, layouts=layouts,
                      attributes=tuple(sorted(attributes.items())))


def _abstract_eval(*operands, target, results, num_batch_dims, layouts, attributes):
  del target, layouts, attributes
  # On meshes of Explicit axes the results are split along the batch axes as the first
  # operand is (the rule gathers every other dimension). Inside shard_map they vary over the
  # manual axes the operands vary over.
  like = operands[0]
  mesh = like.sharding.mesh
  if mesh.empty or not mesh.explicit_axes:
    return [varying_like(shape, dtype, like) for shape, dtype in results]
  batch_spec = tuple(like.sharding.spec)[:num_batch_dims]
  batch_spec += (None,) * (num_batch_dims - len(batch_spec))
  return [varying_like(shape, dtype, like, NamedSharding(
      mesh, P(*batch_spec, *[None] * (len(shape) - num_batch_dims))))
          for shape, dtype in results]


def _minor_to_major(order):
  """The lowering's layout: ffi_lowering takes minor-to-major tuples (None: row-major)."""
  return None if order is None else tuple(reversed(order))


def _lowering(ctx, *operands, target, results, num_batch_dims, layouts, attributes):
  extra = {"mhlo.frontend_attributes": ir.DictAttr.get(
      {"num_batch_dims": ir.StringAttr.get(str(num_batch_dims))})}
  if jax.config.jax_use_shardy_partitioner:
    rule = sharding_rule([a.shape for a in ctx.avals_in], [shape for shape, _ in results],
                         num_batch_dims)
    extra["sdy.sharding_rule"] = ir.Attribute.parse(rule)
  lowered = [_minor_to_major(order) for order in layouts]
  n = len(ctx.avals_in)
  return jax.ffi.ffi_lowering(batched_target(target), extra_attributes=extra,
                              operand_layouts=lowered[:n], result_layouts=lowered[n:])(
      ctx, *operands, **dict(attributes))


def _batch_sequentially(args, dims, **params):
  """Under vmap: one call per element (the groups axis is the call's own)."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  args = [jnp.moveaxis(a, d, 0) if d is not None else
          jnp.broadcast_to(a, (size,) + a.shape) for a, d in zip(args, dims)]
  outs = jax.lax.map(lambda xs: _call_p.bind(*xs, **params), tuple(args))
  return outs, [0] * len(outs)


_call_p.def_impl(lambda *args, **params: jax.jit(
    lambda *a: _call_p.bind(*a, **params))(*args))
_call_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(_call_p, _lowering)
batching.primitive_batchers[_call_p] = _batch_sequentially
