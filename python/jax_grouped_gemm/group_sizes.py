"""Group sizes and offsets as they enter the library, and the group boundaries they give.

The clamping rule (xla_plugin/common/ragged_layout.h, applied by every kernel): negative
sizes count as 0, the running sum stops at the ragged extent, and group_offset is clamped
to [0, G]. The kernels take int32, so user values of other integer types are narrowed
here by saturation, never by wrapping: under the rule a size or offset past int32's range
means the same as int32's largest (or smallest) value, so saturating changes no result,
where wrapping would turn 2**32 - 1 rows into none. (Host int64 values passed as arguments
of a jitted function are converted by jax before the library sees them, wrapping with x64
off: pass such sizes as uint32 or int32 there.)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

_INT32 = jnp.iinfo(jnp.int32)


def _saturated(values, xp):
  """Integer `values` (of array module xp) as int32, saturating."""
  if values.dtype == xp.int32:
    return values
  info = np.iinfo(values.dtype)
  if info.max > _INT32.max:
    values = xp.minimum(values, _INT32.max)
  if info.min < _INT32.min:
    values = xp.maximum(values, _INT32.min)
  return values.astype(xp.int32)


def sizes_array(values):
  """jnp.asarray for group sizes and offsets: host integers (lists, NumPy arrays) are
  saturated to int32 first, since jnp.asarray would wrap int64 values with x64 off."""
  if isinstance(values, (list, tuple, int, np.ndarray, np.generic)):
    host = np.asarray(values)
    if np.issubdtype(host.dtype, np.integer):
      values = _saturated(host, np)
  return jnp.asarray(values)


def to_int32(values):
  """An integer array as int32, values beyond int32's range saturated to its ends."""
  return _saturated(sizes_array(values), jnp)


def checked_group_offset(group_offset):
  """group_offset as the kernels take it: an int32 [1] array (a clear error otherwise)."""
  group_offset = sizes_array(group_offset)
  if group_offset.shape != (1,) or not jnp.issubdtype(group_offset.dtype, jnp.integer):
    raise TypeError("group_offset: expected an integer array of shape (1,), got "
                    f"{group_offset.dtype}{list(group_offset.shape)}")
  return to_int32(group_offset)


def group_ends(group_sizes, rows: int):
  """Clamped end row of every group ([..., G] int32), by the rule above.

  A saturating scan: min(a, rows - b) + b is min(a + b, rows) without forming a + b, so
  no int32 overflow whatever the sizes, for any rows below 2**31.
  """
  sizes = jnp.clip(to_int32(group_sizes), 0, rows)
  return lax.associative_scan(lambda a, b: jnp.minimum(a, rows - b) + b, sizes, axis=-1)
