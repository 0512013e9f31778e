"""The tile view of a stack: quantize / dequantize calls that split along groups and tiles.

A stack [G, M, N] (a matrix is a stack of one) whose M and N are multiples of
128 is a grid of 128x128 tiles that quantize independently: 32-blocks never
cross a tile edge, and a tile's scales are one 128x4 (rowwise) or 4x128
(colwise) tile of its group's padded scale matrix, a 512-byte tile when
swizzled. So the custom call sees every buffer as leading with the batch axes
(G, row tiles Rt, column tiles Ct): x as [G, Rt, Ct, 128, 128], scales as
[G, Rt, Ct, ...], with operand layouts that make each view the original bytes
(on the GPU the view compiles to a bitcast, see tools/device/view_layout_probe.py;
the CPU compiler copies). XLA's batch partitioner then splits a stack sharded
along groups, rows or columns shard by shard with no communication
(batch_partitionable.py), and each shard's handler sees a plain row-major
stack [G', Rt' * 128, Ct' * 128] with its own scale slots.

A dimension that is not a multiple of 128 is one tile (Rt or Ct = 1), as is
every varying_both slot (its group's extent is relative to the slot's origin).

A tile dim must never be split finer than its tiles. Where a mesh axis that does not
divide the tile count splits the dimension (N = 256, 2 tiles, on a 4-way axis), the
partitioners' reshape rules put a part of the axis (a sub-axis, Shardy's "a":(1)2, or
GSPMD's partially replicated tiling) on the tile dim and the rest on the rows or
columns within the tiles, which the call gathers; the results then carry that
sub-axis, which jax cannot express: GSPMD fails to name the jit's output shardings
(IndivisibleError) and a custom_partitioning call reading them (the BF16 grouped GEMM
after dequantize) fails under both partitioners. On Explicit axes the split is known
and such a dim is gathered first (`_gathered_unless_divisible`). On Auto axes only the
mesh is known at trace time, so a dim whose tile count no Auto axis of the value's
mesh divides is one tile (`_tile_count`): any split of it is gathered before the call,
and no split is lost, since none could be in whole tiles. Where some Auto axis divides
the count and another does not (2 tiles on a mesh of 2 x 4), the tiles stay, for the
axis that divides it; a split on the other one, or on both at once (each axis divides
the count, their product does not), is the limitation docs/ARCHITECTURE.md describes, as is
an array that jit's in_shardings places with no mesh in context (its type names none).
Coarser tiles do not change a leaf's shape or bytes: a dim of several 128-tiles called as
one tile is the same row-major stack to the handler.

Scale leaves of a stack keep the axes that shard (see tensor.py):
  compact rowwise   [G, padded rows, padded cols]        the scale matrix
  compact colwise   [G, padded block rows, padded cols]
  swizzled rowwise  [G, row tiles, col tiles * 512]      (tile rows, then tiles)
  swizzled colwise  [G, col tiles, row tiles * 512]      (read as the transposed operand)
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from jax_grouped_gemm.ragged_dot import merged

TILE = 128  # data rows and columns of one tile
SCALE_TILE_BYTES = 512
BATCH_DIMS = 3  # (G, Rt, Ct)
# Major-to-minor order of a view's dims that gives the bytes of the original array:
# the group, the row tile, the rows within it, the column tile, the columns within it.
DATA_ORDER = (0, 1, 3, 2, 4)


def _ceil_div(a: int, b: int) -> int:
  return -(-a // b)


# The views' splits go one dim in two at a time: on meshes of Explicit axes jax's reshape
# rule takes each such step (a split dim keeps its sharding on the major part) but refuses
# two in one reshape. Merging back is ragged_dot.merged.
def _split(x, parts):
  """x [d0, d1, ...] -> [*parts[0], *parts[1], ...] (prod(parts[i]) == di)."""
  at = 0
  for sizes in parts:
    for k in range(len(sizes) - 1):
      x = _gathered_unless_divisible(x, at, sizes[k])
      shape = x.shape
      x = x.reshape(shape[:at] + (sizes[k], math.prod(sizes[k + 1:])) + shape[at + 1:])
      at += 1
    at += 1
  return x


def _gathered_unless_divisible(x, dim: int, major: int):
  """x, with its split of `dim` on Explicit mesh axes gathered where the major part of a
  split of that dim (`major` of its size) cannot carry it: fewer tiles than shards."""
  sharding = jax.typeof(x).sharding
  if sharding.mesh.empty or not sharding.mesh.explicit_axes or dim >= len(sharding.spec):
    return x
  axes = sharding.spec[dim]
  if axes is None:
    return x
  shards = math.prod(sharding.mesh.shape[a] for a in ((axes,) if isinstance(axes, str) else axes))
  if major % shards == 0:
    return x
  spec = list(sharding.spec)
  spec[dim] = None
  return jax.sharding.reshard(x, sharding.update(spec=jax.sharding.PartitionSpec(*spec)))


def _auto_axis_sizes(like, ndim: int) -> tuple[tuple[int, ...], tuple[bool, ...]]:
  """(the sizes above 1 of the Auto axes of `like`'s mesh, or of the context's, which the
  partitioner may split any dim on; for each dim, whether Explicit axes split it)."""
  if like is None:
    return (), (False,) * ndim
  sharding = getattr(jax.typeof(like), "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or mesh.empty:
    mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return (), (False,) * ndim
  auto = set(mesh.auto_axes)
  sizes = tuple(n for name, n in mesh.shape.items() if name in auto and n > 1)
  spec = tuple(sharding.spec) if sharding is not None and sharding.mesh == mesh else ()
  spec += (None,) * (ndim - len(spec))
  return sizes, tuple(axes is not None for axes in spec[:ndim])


def _tile_count(extent: int, tiled: bool, auto_sizes, explicit_split: bool) -> int:
  """How many tiles a dim of `extent` is called as: its 128-tiles (if `tiled`), or one where
  it is not a multiple of 128, or where no Auto axis (`auto_sizes`) divides its count of
  128-tiles (a split of it on one would be finer than the tiles: gathered first, see the
  module doc), unless Explicit axes split it (_gathered_unless_divisible sees those)."""
  if not tiled or extent <= 0 or extent % TILE:
    return 1
  tiles = extent // TILE
  if tiles > 1 and auto_sizes and not explicit_split and all(tiles % n for n in auto_sizes):
    return 1
  return tiles


@dataclasses.dataclass(frozen=True)
class TileView:
  """A stack [groups, row_tiles * tile_rows, col_tiles * tile_cols] as a grid of tiles; a
  matrix (`matrix`: no group axis in its data and scale leaves) is a stack of one."""
  groups: int
  row_tiles: int
  col_tiles: int
  tile_rows: int
  tile_cols: int
  matrix: bool = False

  @classmethod
  def of(cls, shape, split: bool = True, like=None) -> "TileView":
    """The finest grid of shape [G, M, N] or [M, N] (`split=False`: one tile per group)
    whose tile dims the Auto axes of `like`'s mesh (an array of that shape) can split in
    whole tiles (`_tile_count`)."""
    matrix = len(shape) == 2
    g, m, n = (1,) + tuple(shape) if matrix else shape
    auto_sizes, explicit = _auto_axis_sizes(like, len(shape))
    rt, ct = (_tile_count(extent, split, auto_sizes, explicit[d])
              for extent, d in ((m, len(shape) - 2), (n, len(shape) - 1)))
    return cls(g, rt, ct, m // rt, n // ct, matrix)

  @classmethod
  def for_tensor(cls, layout: str, shape, like=None) -> "TileView":
    """The grid a tensor of `layout` ("dense", "same_dims", "varying_both") is called over:
    a varying_both slot is one tile, as its group's extents start at the slot's corner.
    `like`: the array called over (its mesh); the leaves' shapes do not depend on it."""
    return cls.of(shape, split=layout != "varying_both", like=like)

  @property
  def batch(self) -> tuple[int, int, int]:
    return (self.groups, self.row_tiles, self.col_tiles)

  # --- data ---------------------------------------------------------------------------------

  def data_shape(self) -> tuple[int, ...]:
    return self.batch + (self.tile_rows, self.tile_cols)

  def _as_stack(self, x):
    return x.reshape((1,) + x.shape) if self.matrix else x

  def data_to_view(self, stack):
    g, rt, ct = self.batch
    parts = ((g,), (rt, self.tile_rows), (ct, self.tile_cols))
    return _split(self._as_stack(stack), parts).transpose(DATA_ORDER)

  def data_from_view(self, view):
    g, rt, ct = self.batch
    shape = (g, rt * self.tile_rows, ct * self.tile_cols)
    return merged(view.transpose(DATA_ORDER), shape[1:] if self.matrix else shape)

  # --- scales -------------------------------------------------------------------------------

  def _tile_scale_dims(self, colwise: bool) -> tuple[int, int]:
    """(rows, cols) of one tile's padded compact scale matrix."""
    row_tiles, col_tiles = _ceil_div(self.tile_rows, TILE), _ceil_div(self.tile_cols, TILE)
    return (4 * row_tiles, TILE * col_tiles) if colwise else (TILE * row_tiles, 4 * col_tiles)

  def _leaf_split(self, colwise: bool, swizzled: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the leaf's dims split into tile factors, the view's order of those factors)."""
    g, rt, ct = self.batch
    if not swizzled:  # (g, rt, rows, ct, cols): the padded matrix, tile by tile
      rows, cols = self._tile_scale_dims(colwise)
      return (g, rt, rows, ct, cols), DATA_ORDER
    rtc, ctc = _ceil_div(self.tile_rows, TILE), _ceil_div(self.tile_cols, TILE)
    if not colwise:  # (g, rt, rtc, ct, ctc, 512): 512-byte tiles, tile rows first
      return (g, rt, rtc, ct, ctc, SCALE_TILE_BYTES), (0, 1, 3, 2, 4, 5)
    # (g, ct, ctc, rt, rtc, 512): the transposed operand's tiles, column tiles first
    return (g, ct, ctc, rt, rtc, SCALE_TILE_BYTES), (0, 3, 1, 4, 2, 5)

  def scale_leaf_shape(self, colwise: bool, swizzled: bool) -> tuple[int, ...]:
    split, _ = self._leaf_split(colwise, swizzled)
    shape = (split[0], split[1] * split[2], math.prod(split[3:]))
    return shape[1:] if self.matrix else shape

  def scale_view_order(self, colwise: bool, swizzled: bool) -> tuple[int, ...]:
    """The view's layout: the major-to-minor order of its dims in the leaf's bytes."""
    _, to_view = self._leaf_split(colwise, swizzled)
    return tuple(to_view.index(d) for d in range(len(to_view)))

  def scale_view_shape(self, colwise: bool, swizzled: bool) -> tuple[int, ...]:
    split, to_view = self._leaf_split(colwise, swizzled)
    return tuple(split[d] for d in to_view)

  def scales_to_view(self, leaf, colwise: bool, swizzled: bool):
    split, to_view = self._leaf_split(colwise, swizzled)
    parts = (split[:1], split[1:3], split[3:])  # the leaf's dims (scale_leaf_shape)
    return _split(self._as_stack(leaf), parts).transpose(to_view)

  def scales_from_view(self, view, colwise: bool, swizzled: bool):
    return merged(view.transpose(self.scale_view_order(colwise, swizzled)),
                  self.scale_leaf_shape(colwise, swizzled))

  # --- the other buffers ----------------------------------------------------------------------

  def empty(self, dtype) -> jax.ShapeDtypeStruct:
    """A result that is not asked for."""
    return jax.ShapeDtypeStruct(self.batch + (0,), dtype)

  def group_sizes_operand(self, group_sizes):
    """[G, 2] extents (varying_both, one tile per group), leading with the batch; a matrix or
    same_dims stack has none and passes one ignored zero per tile: a zero-sized operand
    crashes XLA's compiler inside shard_map under Shardy (a scan's gradient, eager calls)."""
    if group_sizes is None:
      return jnp.zeros(self.batch + (1,), jnp.int32)
    assert self.row_tiles == self.col_tiles == 1, "varying_both slots are one tile each"
    return group_sizes.reshape(self.batch + (group_sizes.shape[-1],))
