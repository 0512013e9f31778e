"""One sharding spec per canonical op, and the plan every sharding rule derives from it.

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
                    computed on the device from the global sizes.
  groups            g: a shard of the experts computes them with
                    group_offset + axis_index * G_local.

From that one spec come all three sharding rules, so they cannot drift:
Shardy's `sharding_rule` (the factor string and factor kinds), GSPMD's
`infer_sharding_from_operands` and the partitioned computation
(partitioning.py), and the result type's sharding on meshes of Explicit axes
(`result_sharding_in_types`, used by the ops' abstract evaluation). Each of
them asks `plan_sharding`, which decides.

The plan, when operands disagree: factors claim mesh axes in priority order,
experts first (expert weights never move: tokens sharded on the experts' axis
are all-gathered and the result reduce-scattered back, as Megatron's all-gather
token dispatcher does), then batch, then the ragged rows (so FSDP-sharded
weights are all-gathered, not the tokens), then the free dims, then the
contracted ones. A sharding that would split an axis across two factors, or
does not divide its dimension evenly, or splits it over part of a mesh axis
(Shardy's sub-axes: `dim_axes`), is not honoured: that dimension is computed
replicated (the partitioner inserts the all-gather), which is always correct.

Pure Python over shapes, mesh axis names and devices: no primitives, no tracing.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Mapping

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

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

def dim_axes(sharding, ndim: int, mesh=None) -> tuple[Axes, ...]:
  """Per dimension, the whole mesh axes a sharding splits it over (major to minor).

  A NamedSharding names them. Any other sharding (the partitioner's own, which
  custom_partitioning hands over undecoded: partitioning.py) is read off its
  devices' shards on `mesh`: a dimension is split over the mesh axes its shards
  follow exactly. A split that follows no whole mesh axes reads as unsplit, so
  the plan computes that dimension replicated: Shardy shards a dimension over
  part of an axis (a sub-axis) where a reshape merges a dimension that the axis
  does not divide into a larger one (a size-2 dimension split over an axis of 4
  gives the merged dimension the axis' first factor of 2), and no mesh of whole
  axes can name that split. Without a mesh, a sharding reads as replicated. Axes of size 1
  split nothing and are not read off shards (a NamedSharding's spec may still name them).
  """
  if isinstance(sharding, NamedSharding):
    entries = tuple(sharding.spec) + (None,) * (ndim - len(sharding.spec))
    return tuple(() if e is None or e is PartitionSpec.UNCONSTRAINED else
                 (e,) if isinstance(e, str) else tuple(e) for e in entries)
  if sharding is None or mesh is None or mesh.empty or ndim == 0:
    return ((),) * ndim
  return _axes_of_shards(sharding, mesh, ndim)


def _axes_of_shards(sharding, mesh, ndim: int) -> tuple[Axes, ...]:
  """dim_axes of a sharding given by its devices: on a global shape of mesh.size per
  dimension (every split of the devices divides it), each device's shard index along
  a dimension must be its mixed-radix coordinate over some whole mesh axes."""
  extent = mesh.size
  where = {device: index for index, device in np.ndenumerate(mesh.devices)}
  shards = sharding.devices_indices_map((extent,) * ndim)
  if set(shards) != set(where):  # not this mesh's devices: nothing to name
    return ((),) * ndim
  coords = np.array([where[d] for d in shards]).reshape(len(shards), len(mesh.axis_names))
  bounds = np.array([[s.indices(extent)[:2] for s in index] for index in shards.values()])
  starts, lengths = bounds[..., 0], bounds[..., 1] - bounds[..., 0]
  names = [a for a in mesh.axis_names if mesh.shape[a] > 1]

  def radix(axes):  # each device's index over `axes`, the first major
    index = np.zeros(len(shards), np.int64)
    for a in axes:
      index = index * mesh.shape[a] + coords[:, mesh.axis_names.index(a)]
    return index

  out = []
  for d in range(ndim):
    if np.all(lengths[:, d] == extent) or np.any(lengths[:, d] != lengths[0, d]):
      out.append(())
      continue
    tiles, index = extent // lengths[0, d], starts[:, d] // lengths[0, d]
    candidates = (axes for count in range(1, len(names) + 1)
                  for axes in itertools.permutations(names, count)
                  if math.prod(mesh.shape[a] for a in axes) == tiles)
    out.append(next((axes for axes in candidates
                     if np.array_equal(radix(axes), index)), ()))
  return tuple(out)


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


# --- sharding in types (meshes with Explicit axes) ----------------------------------

def result_sharding_in_types(spec: OpShardingSpec, operand_avals, result_shape):
  """The result type's sharding when operand types name Explicit mesh axes, else None.

  Types name only Explicit axes, so this is the plan's result sharding for
  those axes: split factors stay split, sharded reductions come back summed
  (replicated over their axes). The lowering constrains the result to it, and
  the partitioner's plan for that constraint is the same plan.
  """
  meshes = {a.sharding.mesh for a in operand_avals if not a.sharding.mesh.empty}
  if len(meshes) > 1:
    raise ValueError(f"operands live on different meshes: {sorted(map(str, meshes))}")
  mesh = next(iter(meshes), None)
  if mesh is None or not mesh.explicit_axes:
    return None
  plan = plan_sharding(spec, mesh, [a.shape for a in operand_avals],
                       [dim_axes(a.sharding, a.ndim) for a in operand_avals], result_shape)
  return plan.result_sharding()
