"""Float64 references of the MXFP8 grouped GEMMs: an MXFP8Tensor's values read from its raw
fp8 bits and E8M0 scale bytes, their ragged products, and the f32-accumulation check.

Independent of the dequantize op (the MXFP8 GEMMs run on it): fp8 codes are
decoded by ml_dtypes, each group's scales are read from the tensor's compact
scale matrix (group_scale_inv) and applied as exact powers of two, and group
regions follow the clamping rule of tests/reference.py. Elements of no group
are 0; a NaN scale (0xFF) gives NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import reference

import jax_grouped_gemm as jgg
from jax_grouped_gemm import mxfp8_gemm
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


def product(gemm, lhs, rhs, sizes, group_offset=0, num_groups=None):
  """float64 result of one GEMM of the layer: "fwd" x . w[g], "dgrad" dy . w[g]^T (w [G, K, N]),
  "wgrad" x^T . dy per group (num_groups outputs, len(sizes) by default)."""
  if gemm == "fwd":
    return reference.ragged_m(lhs, rhs, sizes, group_offset)
  if gemm == "dgrad":
    return reference.ragged_m(lhs, rhs, sizes, group_offset, rhs_transposed=True)
  return reference.ragged_k(lhs, rhs, sizes, len(sizes) if num_groups is None else num_groups,
                          group_offset)


# One rounding of the f32 accumulator to the output dtype (half an ulp, relative).
OUTPUT_ROUNDING = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def check_product(out, gemm, lhs, rhs, sizes, group_offset=0, num_groups=None):
  """Element by element: out is the float64 product of the dequantized values up to f32
  accumulation ((n + 2) u sum|a b| over a contraction of n terms, u = 2^-24) and one
  rounding to out's dtype. Per element, so small rows (where a wrong orientation of the
  scales shows) count as much as large ones; a NaN (an unwritten element) fails."""
  want = product(gemm, lhs, rhs, sizes, group_offset, num_groups)
  magnitude = product(gemm, np.abs(lhs), np.abs(rhs), sizes, group_offset, num_groups)
  assert out.shape == want.shape
  length = lhs.shape[0] if gemm == "wgrad" else lhs.shape[1]
  bound = ((length + 2) * 2.0 ** -24 * magnitude
           + OUTPUT_ROUNDING[jnp.dtype(out.dtype).name] * np.abs(want))
  error = np.abs(np.asarray(out.astype(jnp.float32), np.float64) - want)
  bad = ~(error <= bound)
  assert not bad.any(), (f"{bad.sum()} of {bad.size} elements off; worst error/bound "
                         f"{np.nanmax(error / np.maximum(bound, 1e-300)):.3g}")


def fused_and_dequantized(make_problem):
  """(fused, plain): the f32 results of make_problem(**options), an MXFP8GemmProblem that must
  choose "fused_few_rows", on that backend and on the dequantize backend at HIGHEST precision
  (the exact bf16 values' f32 products: where NaN and Inf must agree)."""
  problem = make_problem(preferred_element_type=jnp.float32)
  assert mxfp8_gemm.choose_backend(problem) == "fused_few_rows"
  fused = np.asarray(mxfp8_gemm.BACKENDS["fused_few_rows"](problem))
  plain = np.asarray(mxfp8_gemm.BACKENDS["dequantize"](make_problem(
      precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)))
  return fused, plain
