"""The quantized tensor: a registered pytree dataclass.

Leaves: the fp8 data and uint8 E8M0 scales of each orientation asked for
(None otherwise) and the group sizes (None for a plain matrix or a stack).
Static metadata: the grouped layout and the scale layout. The logical shape is
the data's shape (data always has the input's shape), so it stays right inside
shard_map and vmap, where leaves are local slices.

Layouts (see xla_plugin/common/mxfp8_layout.h for the byte-exact rules):
  "dense"          x [M, N]                                  one matrix
  "same_dims"      x [G, M, N]                               group g = x[g]
  "varying_first"  x [M, N], group_sizes [G]                 group g = a row range
  "varying_last"   x [M, N], group_sizes [G]                 group g = a column range
  "varying_both"   x [G, M, N], group_sizes [G, 2]           group g = x[g, :rows_g, :cols_g]
Every group is quantized as if it were a matrix alone (blocks restart at group
boundaries). Elements of no group are 0 in the data.

Scales: "rowwise" = one scale per 1x32 block along a row (the last axis),
"colwise" = one per 32x1 block along a column. The scale bytes hold, group
after group, each group's padded scale matrix (rowwise [128*ceil(r/128),
4*ceil(c/128)], colwise [4*ceil(r/128), 128*ceil(c/128)] for a group of r x c)
row-major ("compact") or 128x4-interleaved ("swizzled"); bytes that hold no
real scale are 0. `scale_layout.scale_offsets(q)` gives where each group's
region starts in those bytes (`scale_inv.reshape(-1)`). The leaf's shape keeps
the axes a sharding splits: flat for varying_first / varying_last (one buffer
packs groups of device-side sizes); for a matrix or stack the group axis (not
for "dense") then the scale matrix, [G, padded rows, padded cols] compact, or
its 512-byte tiles, [G, row tiles, col tiles * 512] rowwise and
[G, col tiles, row tiles * 512] colwise when swizzled (mxfp8/tile_view.py).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

LAYOUTS = ("dense", "same_dims", "varying_first", "varying_last", "varying_both")
SCALE_LAYOUTS = ("compact", "swizzled")
# The integer codes of the layouts in the custom call (mxfp8_layout.h GroupedLayout);
# "dense" runs as a one-group stack.
LAYOUT_CODES = {"dense": 0, "same_dims": 0, "varying_first": 1, "varying_last": 2,
                "varying_both": 3}
ELEMENT_DTYPES = (jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MXFP8Tensor:
  """MXFP8 data and E8M0 scales of a (grouped) tensor; see the module docstring."""
  data: jax.Array | None
  scale_inv: jax.Array | None
  colwise_data: jax.Array | None
  colwise_scale_inv: jax.Array | None
  group_sizes: jax.Array | None
  layout: str = dataclasses.field(metadata=dict(static=True))
  scale_layout: str = dataclasses.field(metadata=dict(static=True))

  def __post_init__(self):
    if self.layout not in LAYOUTS:
      raise ValueError(f"layout: expected one of {LAYOUTS}, got {self.layout!r}")
    if self.scale_layout not in SCALE_LAYOUTS:
      raise ValueError(f"scale_layout: expected one of {SCALE_LAYOUTS}, got {self.scale_layout!r}")

  @property
  def rowwise(self) -> bool:
    return self.data is not None

  @property
  def colwise(self) -> bool:
    return self.colwise_data is not None

  def _any_data(self):
    return self.data if self.data is not None else self.colwise_data

  @property
  def shape(self) -> tuple[int, ...]:
    """The logical (input) shape."""
    return tuple(self._any_data().shape)

  @property
  def dtype(self):
    """The fp8 element type."""
    return self._any_data().dtype

  @property
  def num_groups(self) -> int:
    if self.layout == "dense":
      return 1
    if self.layout in ("same_dims",):
      return self.shape[0]
    return self.group_sizes.shape[0]

  def orientation(self, colwise: bool):
    """(data, scale_inv) of one orientation; raises if it was not quantized."""
    if colwise:
      if not self.colwise:
        raise ValueError("q: has no colwise data (quantize with colwise=True)")
      return self.colwise_data, self.colwise_scale_inv
    if not self.rowwise:
      raise ValueError("q: has no rowwise data (quantize with rowwise=True)")
    return self.data, self.scale_inv
