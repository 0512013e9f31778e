"""Float64 values of an MXFP8Tensor, read from its raw fp8 bits and E8M0 scale bytes.

Independent of the dequantize op (the MXFP8 GEMMs run on it): fp8 codes are
decoded by ml_dtypes, each group's scales are read from the tensor's compact
scale matrix (group_scale_inv) and applied as exact powers of two, and group
regions follow the clamping rule of tests/reference.py. Elements of no group
are 0; a NaN scale (0xFF) gives NaN.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import jax_grouped_gemm as jgg
from reference import group_boundaries

BLOCK = 32


def group_regions(q) -> list[tuple]:
  """Index tuples into q's data of every group, in group order."""
  shape = q.shape
  if q.layout == "dense":
    return [(slice(None), slice(None))]
  if q.layout == "same_dims":
    return [(g,) for g in range(shape[0])]
  sizes = np.asarray(q.group_sizes)
  if q.layout == "varying_both":
    return [(g, slice(0, min(max(int(r), 0), shape[1])), slice(0, min(max(int(c), 0), shape[2])))
            for g, (r, c) in enumerate(sizes)]
  axis = 0 if q.layout == "varying_first" else 1
  bounds = group_boundaries(sizes, shape[axis])
  spans = [slice(b, e) for b, e in zip(bounds[:-1], bounds[1:])]
  return [(s, slice(None)) if axis == 0 else (slice(None), s) for s in spans]


def dequantized(q, colwise: bool) -> np.ndarray:
  """float64 [q.shape]: element * 2^(scale - 127) of the orientation asked for."""
  data, _ = q.orientation(colwise)
  codes = np.asarray(data).view(np.uint8).view(getattr(ml_dtypes, np.dtype(data.dtype).name))
  values = codes.astype(np.float64)
  out = np.zeros(values.shape)
  for g, region in enumerate(group_regions(q)):
    block = values[region]
    rows, cols = block.shape
    if rows == 0 or cols == 0:
      continue
    scales = jgg.mxfp8.group_scale_inv(q, g, colwise=colwise).astype(np.int64)
    if colwise:
      e = np.repeat(scales[:-(-rows // BLOCK), :cols], BLOCK, axis=0)[:rows]
    else:
      e = np.repeat(scales[:rows, :-(-cols // BLOCK)], BLOCK, axis=1)[:, :cols]
    out[region] = np.where(e == 0xFF, np.nan, block * np.exp2(e - 127.0))
  return out
