"""Partitioning of the canonical ragged GEMMs under jit with sharded inputs.

One `OpShardingSpec` per op names a factor for every dimension of every
operand and of the result, and says what sharding each factor costs:

  ragged_m  "b m k, g b k n, b h, o -> b m n"   (rhs "g b n k" when read transposed)
  ragged_k  "b r p, b r n, b h, o -> g b p n"

  reduction         k, and g of ragged_m (a shard holding some experts leaves the
                    rows of the others 0), and r of ragged_k (a shard of the tokens
                    gives a partial dW): sharded -> one psum, or a reduce-scatter
                    when the result is wanted sharded on those axes.
  need_replication  h (the global group sizes every shard reads) and o.
  ragged            m / r: a shard of the rows gets its own group boundaries,
                    computed on the device from the global sizes (local_group_sizes).
  groups            g: a shard of the experts computes them with
                    group_offset + axis_index * G_local.

From that one spec come both partitioners' rules, so they cannot drift:
Shardy's `sharding_rule` (the factor string and factor kinds) and GSPMD's
`infer_sharding_from_operands`; both partitioners then call the same
`partition` (`plan_sharding` decides, `_local_computation` runs the plan).
Every canonical dimension is one factor: the reshapes from jax.lax's N-D
dimension numbers to the canonical shapes happen outside the partitioned op
(ragged_dot.py), where the partitioners see through them, so no compound
factors (and no factor sizes) are needed.

The plan, when operands disagree: factors claim mesh axes in priority order,
experts first (expert weights never move: tokens sharded on the experts' axis
are all-gathered and the result reduce-scattered back, as Megatron's all-gather
token dispatcher does), then batch, then the ragged rows (so FSDP-sharded
weights are all-gathered, not the tokens), then the free dims, then the
contracted ones. A sharding that would split an axis across two factors, or
does not divide its dimension evenly, is not honoured: that dimension is
computed replicated (the partitioner inserts the all-gather), which is always
correct. The ragged data itself never moves between shards here; moving rows
to their experts is the shard_map path (expert_parallel.py).

Wiring: the lowering of ragged_m_p / ragged_k_p is a `custom_partitioning` call
around the FFI call, so forward, dgrad and wgrad (all binds of the two
primitives, whatever jax.grad produced) are partitioned. On one device, or
inside a shard_map, it lowers to the plain FFI call, which `jax.export`
serializes; a jit over several devices with sharded operands cannot be
exported (custom_partitioning keeps a Python callback): export the shard_map
form instead. Mesh axes must be AxisType.Auto: the ops do not implement
sharding-in-types for Explicit axes yet.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec

# Private: marks a primitive whose lowering needs the device assignment, without
# which custom_partitioning gets no mesh under jit (jax's own cuDNN ops do this).
from jax._src import dispatch as _dispatch
from jax._src import sharding_impls as _sharding_impls

from jax_grouped_gemm import ragged_gemm_ops as ops

Axes = tuple[str, ...]  # mesh axes one dimension is split over, major to minor


# --- the spec -------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class OpShardingSpec:
  """Factors of one op's dimensions and what sharding each of them costs."""
  operands: tuple[str, ...]          # one factor string per operand, e.g. "b m k"
  result: str
  reduction: tuple[str, ...]         # sharded -> partial results to sum
  need_replication: tuple[str, ...]  # every shard needs the whole dimension
  ragged: str                        # rows split at device-side group boundaries
  groups: str                        # experts: a shard holds a contiguous slice
  priority: tuple[str, ...]          # order in which factors claim mesh axes

  def __post_init__(self):
    named = {f for s in self.operands + (self.result,) for f in s.split()}
    assert set(self.priority) | set(self.need_replication) == named, (self, named)

  @property
  def operand_factors(self) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(s.split()) for s in self.operands)

  @property
  def result_factors(self) -> tuple[str, ...]:
    return tuple(self.result.split())

  def sharding_rule(self) -> tuple[str, dict]:
    """Shardy's rule: the einsum-like string and the factor kinds."""
    return (", ".join(self.operands) + " -> " + self.result,
            dict(reduction_factors=self.reduction,
                 need_replication_factors=self.need_replication))

  def factor_sizes(self, operand_shapes, result_shape) -> dict[str, int]:
    sizes = {}
    for factors, shape in zip(self.operand_factors + (self.result_factors,),
                              tuple(operand_shapes) + (result_shape,)):
      for f, n in zip(factors, shape):
        if sizes.setdefault(f, n) != n:
          raise ValueError(f"{self}: factor {f!r} has sizes {sizes[f]} and {n}")
    return sizes


def ragged_m_spec(rhs_transposed: bool) -> OpShardingSpec:
  return OpShardingSpec(
      operands=("b m k", "g b n k" if rhs_transposed else "g b k n", "b h", "o"),
      result="b m n",
      reduction=("k", "g"),
      need_replication=("h", "o"),
      ragged="m", groups="g",
      priority=("g", "b", "m", "n", "k"))


def ragged_k_spec() -> OpShardingSpec:
  return OpShardingSpec(
      operands=("b r p", "b r n", "b h", "o"),
      result="g b p n",
      reduction=("r",),
      need_replication=("h", "o"),
      ragged="r", groups="g",
      priority=("g", "b", "r", "p", "n"))


# --- the plan -------------------------------------------------------------------

def dim_axes(sharding, ndim: int) -> tuple[Axes, ...]:
  """Per dimension, the mesh axes a NamedSharding splits it over."""
  if not isinstance(sharding, NamedSharding):  # no mesh to name: treat as replicated
    return ((),) * ndim
  entries = tuple(sharding.spec) + (None,) * (ndim - len(sharding.spec))
  return tuple(() if e is None or e is PartitionSpec.UNCONSTRAINED else
               (e,) if isinstance(e, str) else tuple(e) for e in entries)


@dataclasses.dataclass(frozen=True)
class ShardingPlan:
  """Which mesh axes each factor is split over, and how partial results combine."""
  spec: OpShardingSpec
  mesh: jax.sharding.Mesh
  sizes: Mapping[str, int]          # global factor sizes
  split: Mapping[str, Axes]         # factor -> axes its operands/result are split over
  scattered: Mapping[str, Axes]     # result factor -> axes it is reduce-scattered over

  def shards(self, axes: Axes) -> int:
    return math.prod(self.mesh.shape[a] for a in axes)

  def local_size(self, factor: str) -> int:
    return self.sizes[factor] // self.shards(self.split.get(factor, ()))

  def _sharding(self, factors, extra=None) -> NamedSharding:
    axes = [self.split.get(f) or (extra or {}).get(f) or None for f in factors]
    return NamedSharding(self.mesh, PartitionSpec(
        *[a if a is None or len(a) > 1 else a[0] for a in axes]))

  def operand_shardings(self) -> tuple[NamedSharding, ...]:
    return tuple(self._sharding(f) for f in self.spec.operand_factors)

  def result_sharding(self) -> NamedSharding:
    return self._sharding(self.spec.result_factors, self.scattered)

  @property
  def reduced_axes(self) -> Axes:
    return tuple(a for f in self.spec.reduction for a in self.split.get(f, ()))

  @property
  def summed_axes(self) -> Axes:
    scattered = {a for axes in self.scattered.values() for a in axes}
    return tuple(a for a in self.reduced_axes if a not in scattered)

  def local_result_shape(self) -> tuple[int, ...]:
    """The result's shape on one shard before any reduce-scatter."""
    return tuple(self.local_size(f) for f in self.spec.result_factors)


def plan_sharding(spec: OpShardingSpec, mesh, operand_shapes, operand_axes,
                  result_shape, result_axes=None) -> ShardingPlan:
  """Chooses the split of every factor from the operands' (and result's) shardings.

  1. Operand shardings, factors in `spec.priority` order: a factor takes the
     axes of the first operand dimension that is split, unless an axis is
     already taken or the split does not divide the dimension.
  2. The wanted result sharding, for factors no operand split (slicing a
     replicated operand is free).
  3. Result dimensions wanted split over axes that only a reduction uses are
     reduce-scattered over them instead of summed whole.
  `result_axes` is None when only the operands are known (GSPMD's inference).
  """
  sizes = spec.factor_sizes(operand_shapes, result_shape)
  split: dict[str, Axes] = {}
  taken: set[str] = set()

  def divides(factor, axes):
    return sizes[factor] % math.prod(mesh.shape[a] for a in axes) == 0

  def claim(factor, axes):
    if (factor in split or not axes or factor in spec.need_replication
        or taken & set(axes) or not divides(factor, axes)):
      return
    split[factor] = axes
    taken.update(axes)

  for factor in spec.priority:
    for factors, axes in zip(spec.operand_factors, operand_axes):
      for f, a in zip(factors, axes):
        if f == factor:
          claim(f, a)
  if result_axes is not None:
    for f, a in zip(spec.result_factors, result_axes):
      claim(f, a)

  scattered: dict[str, Axes] = {}
  if result_axes is not None:
    free = {a for f in spec.reduction for a in split.get(f, ())}
    for f, a in zip(spec.result_factors, result_axes):
      if a and f not in split and set(a) <= free and divides(f, a):
        scattered[f] = a
        free -= set(a)
  return ShardingPlan(spec, mesh, sizes, split, scattered)


# --- device-side group boundaries -------------------------------------------------

def group_ends(group_sizes, rows: int):
  """Clamped end row of every group ([..., G] int32): negative sizes count as 0
  and the running sum stops at `rows` (the rule of common/ragged_layout.h).

  A saturating scan, so no int32 overflow whatever the sizes (rows < 2**30).
  """
  sizes = jnp.clip(group_sizes.astype(jnp.int32), 0, rows)
  return lax.associative_scan(lambda a, b: jnp.minimum(a + b, rows), sizes, axis=-1)


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


def _local_computation(op: PartitionedOp, params: dict, plan: ShardingPlan):
  """The per-shard function of a plan: local group sizes / offset, call, combine."""
  spec = plan.spec
  rows_axes = plan.split.get(spec.ragged, ())
  groups_axes = plan.split.get(spec.groups, ())
  params = op.localize(params, plan.local_result_shape())

  def run(lhs, rhs, group_sizes, group_offset):
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


def _shapes_and_axes(arg_shapes):
  return ([a.shape for a in arg_shapes],
          [dim_axes(a.sharding, len(a.shape)) for a in arg_shapes])


def _partitioned(op: PartitionedOp):
  """custom_partitioning of `op.call`, its rules generated from `op.spec`.

  Static params travel as a sorted tuple of items (hashable), first argument of
  every callback.
  """
  fn = custom_partitioning(lambda *args: op.call(*args[:4], **dict(args[4])),
                           static_argnums=(4,))

  def infer_sharding_from_operands(params, mesh, arg_shapes, result_shape):
    shapes, axes = _shapes_and_axes(arg_shapes)
    return plan_sharding(op.spec(**dict(params)), mesh, shapes, axes,
                         result_shape.shape).result_sharding()

  def partition(params, mesh, arg_shapes, result_shape):
    shapes, axes = _shapes_and_axes(arg_shapes)
    plan = plan_sharding(op.spec(**dict(params)), mesh, shapes, axes, result_shape.shape,
                         dim_axes(result_shape.sharding, len(result_shape.shape)))
    return (mesh, _local_computation(op, dict(params), plan), plan.result_sharding(),
            plan.operand_shardings())

  def sharding_rule(params, mesh, operand_types, result_types):
    del mesh, operand_types, result_types
    return op.spec(**dict(params)).sharding_rule()

  fn.def_partition(partition, infer_sharding_from_operands=infer_sharding_from_operands,
                   sharding_rule=sharding_rule)
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

  def rule(ctx, *args, **params):
    if _lowers_unpartitioned(ctx):
      call = functools.partial(op.call, **params)
    else:
      call = functools.partial(lambda frozen, *a: fn(*a, frozen), tuple(sorted(params.items())))
    return mlir.lower_fun(call, multiple_results=False)(ctx, *args)

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
