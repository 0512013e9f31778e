"""Where each group's scales live, and compact <-> swizzled conversion.

A group of r x c elements owns GROUP scale bytes = 512 * ceil(r/128) * ceil(c/128)
in each orientation: its padded scale matrix, rowwise [128*ceil(r/128), 4*ceil(c/128)]
or colwise [4*ceil(r/128), 128*ceil(c/128)]. "compact" stores it row-major;
"swizzled" stores element (i, j) of a matrix with `padded_cols` columns at
    ((i // 128) * (padded_cols // 4) + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4
(colwise matrices are swizzled as their transpose [column, block], the way a
GEMM reads that operand). Regions follow each other in group order from the
offsets below; the C++ side (xla_plugin/common/mxfp8_layout.h) writes them.
Everything here is jittable and reads group sizes on the device only, except
group_scale_inv (a host helper for tests and debugging).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jax_grouped_gemm import _native
from jax_grouped_gemm.group_sizes import group_ends
from jax_grouped_gemm.mxfp8.tensor import LAYOUT_CODES, SCALE_LAYOUTS, MXFP8Tensor
from jax_grouped_gemm.mxfp8.tile_view import TileView

TILE_ROWS, TILE_COLS = 128, 4
TILE_BYTES = TILE_ROWS * TILE_COLS


def _ceil_div(a, b):
  return (a + b - 1) // b


def group_scale_bytes(rows, cols):
  """Scale bytes of one r x c group in either orientation (ints or int arrays)."""
  return TILE_BYTES * _ceil_div(rows, TILE_ROWS) * _ceil_div(cols, TILE_ROWS)


def padded_scale_dims(rows, cols, colwise: bool):
  """(padded_rows, padded_cols) of a group's scale matrix."""
  row_tiles, col_tiles = _ceil_div(rows, TILE_ROWS), _ceil_div(cols, TILE_ROWS)
  if colwise:
    return TILE_COLS * row_tiles, TILE_ROWS * col_tiles
  return TILE_ROWS * row_tiles, TILE_COLS * col_tiles


def swizzled_index(i, j, padded_cols):
  """Position of element (i, j) of a padded scale matrix in the 128x4 interleave."""
  return (((i // 128) * (padded_cols // 4) + j // 4) * 512 + (i % 32) * 16 +
          ((i % 128) // 32) * 4 + j % 4)


def unswizzled_position(index, padded_cols):
  """(i, j) stored at `index` of the 128x4 interleave (inverse of swizzled_index)."""
  tile, within = index // 512, index % 512
  tiles_per_row = jnp.maximum(padded_cols // 4, 1)
  i = (tile // tiles_per_row) * 128 + ((within % 16) // 4) * 32 + within // 16
  j = (tile % tiles_per_row) * 4 + within % 4
  return i, j


def _check_padded(name: str, rows: int, cols: int) -> None:
  if rows % TILE_ROWS or cols % TILE_COLS:
    raise ValueError(f"{name}: expected dims padded to multiples of (128, 4), got "
                     f"({rows}, {cols})")


def swizzle_scale_matrix(matrix):
  """A padded compact scale matrix [..., R, C] (R % 128 == 0, C % 4 == 0) -> [..., R*C]."""
  if len(matrix.shape) < 2:
    raise ValueError(f"matrix: expected [..., rows, cols], got shape {matrix.shape}")
  rows, cols = matrix.shape[-2:]
  _check_padded("matrix", rows, cols)
  i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
  order = np.argsort(swizzled_index(i, j, cols).reshape(-1))
  return matrix.reshape(matrix.shape[:-2] + (rows * cols,))[..., order]


def unswizzle_scale_matrix(flat, rows: int, cols: int):
  """Inverse of swizzle_scale_matrix: [..., rows*cols] -> [..., rows, cols]."""
  _check_padded("rows, cols", rows, cols)
  if len(flat.shape) < 1 or flat.shape[-1] != rows * cols:
    raise ValueError(f"flat: expected [..., {rows * cols}] (rows * cols), got shape {flat.shape}")
  i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
  return flat[..., swizzled_index(i, j, cols).reshape(-1)].reshape(flat.shape[:-1] + (rows, cols))


def scale_leaf_shape(layout: str, shape, colwise: bool, scale_layout: str,
                     num_groups: int) -> tuple[int, ...]:
  """The shape of a scale leaf: flat for the ragged layouts (the worst case of `num_groups`
  groups, sized by C++), along the data axes for a matrix or stack (tile_view.py says how)."""
  if layout in ("varying_first", "varying_last"):
    return (_native.mxfp8_scale_bytes(LAYOUT_CODES[layout], num_groups, *shape),)
  return TileView.for_tensor(layout, shape).scale_leaf_shape(colwise, scale_layout == "swizzled")


def group_extents(q: MXFP8Tensor):
  """int32 [G, 2]: (rows, cols) of each group after the clamping rule."""
  shape = q.shape
  if q.layout == "dense":
    return jnp.asarray([shape], jnp.int32)
  if q.layout == "same_dims":
    return jnp.broadcast_to(jnp.asarray(shape[1:], jnp.int32), (shape[0], 2))
  if q.layout == "varying_both":
    return jnp.stack([jnp.clip(q.group_sizes[:, 0], 0, shape[1]),
                      jnp.clip(q.group_sizes[:, 1], 0, shape[2])], axis=1).astype(jnp.int32)
  axis = 0 if q.layout == "varying_first" else 1
  ends = group_ends(q.group_sizes, shape[axis])
  spans = jnp.diff(ends, prepend=0)
  other = jnp.full_like(spans, shape[1 - axis])
  return jnp.stack([spans, other] if axis == 0 else [other, spans], axis=1).astype(jnp.int32)


def scale_offsets(q: MXFP8Tensor):
  """int32 [G + 1]: byte offset of each group's scale region, then the end of the last."""
  extents = group_extents(q)
  if q.layout in ("dense", "same_dims", "varying_both"):
    slot = group_scale_bytes(*q.shape[-2:])
    return jnp.arange(q.num_groups + 1, dtype=jnp.int32) * slot
  sizes = group_scale_bytes(extents[:, 0], extents[:, 1])
  return jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(sizes, dtype=jnp.int32)])


def _convert(scales, extents, offsets, colwise: bool, to_swizzled: bool):
  """Rewrites every group's region in the other scale layout; bytes of no region become 0."""
  num_groups = extents.shape[0]
  position = jnp.arange(scales.shape[0], dtype=jnp.int32)
  group = jnp.searchsorted(offsets[1:], position, side="right").astype(jnp.int32)
  g = jnp.minimum(group, num_groups - 1)
  local = position - offsets[g]
  padded_rows, padded_cols = padded_scale_dims(extents[g, 0], extents[g, 1], colwise)
  valid = (group < num_groups) & (local < padded_rows * padded_cols)
  # Colwise matrices are swizzled as their transpose: swap the roles of i and j.
  swz_cols = padded_rows if colwise else padded_cols
  if to_swizzled:  # destination swizzled: find the compact element it holds
    a, b = unswizzled_position(local, swz_cols)
    i, j = (b, a) if colwise else (a, b)
    source = i * padded_cols + j
  else:
    i, j = local // jnp.maximum(padded_cols, 1), local % jnp.maximum(padded_cols, 1)
    source = swizzled_index(j, i, swz_cols) if colwise else swizzled_index(i, j, swz_cols)
  source = jnp.where(valid, offsets[g] + source, 0)
  return jnp.where(valid, scales[source], jnp.zeros((), scales.dtype))


def with_scale_layout(q: MXFP8Tensor, scale_layout: str) -> MXFP8Tensor:
  """q with its scales rewritten in `scale_layout` ("compact" or "swizzled"); jittable."""
  if scale_layout not in SCALE_LAYOUTS:
    raise ValueError(f"scale_layout: expected one of {SCALE_LAYOUTS}, got {scale_layout!r}")
  if scale_layout == q.scale_layout:
    return q
  extents, offsets = group_extents(q), scale_offsets(q)
  to_swizzled = scale_layout == "swizzled"

  def convert(scales, colwise):
    if scales is None:
      return None
    flat = scales.reshape(-1)
    if q.num_groups:  # no groups: no bytes to move, only the leaf's (empty) shape
      flat = _convert(flat, extents, offsets, colwise, to_swizzled)
    return flat.reshape(scale_leaf_shape(q.layout, q.shape, colwise, scale_layout,
                                         q.num_groups))

  return MXFP8Tensor(q.data, convert(q.scale_inv, False), q.colwise_data,
                     convert(q.colwise_scale_inv, True), q.group_sizes, q.layout, scale_layout)


def group_scale_inv(q: MXFP8Tensor, group: int, *, colwise: bool = False) -> np.ndarray:
  """Host helper: group `group`'s padded compact scale matrix (uint8, padding included)."""
  compact = with_scale_layout(q, "compact")
  scales = np.asarray(compact.orientation(colwise)[1]).reshape(-1)
  rows, cols = (int(v) for v in np.asarray(group_extents(q))[group])
  offset = int(np.asarray(scale_offsets(q))[group])
  padded_rows, padded_cols = padded_scale_dims(rows, cols, colwise)
  return scales[offset:offset + padded_rows * padded_cols].reshape(padded_rows, padded_cols)
