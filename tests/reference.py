"""Float64 NumPy references of the ragged GEMMs, with the library's clamping rule."""

from __future__ import annotations

import numpy as np


def group_boundaries(group_sizes, extent, group_offset=0, num_local_groups=None):
  """Row boundaries [G_local + 1] of the local groups: negative sizes count as 0,
  the running sum is clamped at `extent`, the offset is clamped to [0, G]."""
  sizes = np.maximum(np.asarray(group_sizes, np.int64), 0)
  num_global = len(sizes)
  num_local = num_global if num_local_groups is None else num_local_groups
  first = min(max(int(group_offset), 0), num_global)
  row = 0
  for g in range(first):
    row = min(extent, row + sizes[g])
  bounds = [row]
  for j in range(num_local):
    g = first + j
    row = min(extent, row + (sizes[g] if g < num_global else 0))
    bounds.append(row)
  return bounds


def ragged_m(lhs, rhs, group_sizes, group_offset=0, rhs_transposed=False):
  """lhs [M, K], rhs [G, K, N] (or [G, N, K]) -> [M, N] in float64; rows of no group are 0."""
  lhs = np.asarray(lhs, np.float64)
  rhs = np.asarray(rhs, np.float64)
  if rhs_transposed:
    rhs = np.swapaxes(rhs, 1, 2)
  out = np.zeros((lhs.shape[0], rhs.shape[2]))
  bounds = group_boundaries(group_sizes, lhs.shape[0], group_offset, rhs.shape[0])
  for g in range(rhs.shape[0]):
    out[bounds[g]:bounds[g + 1]] = lhs[bounds[g]:bounds[g + 1]] @ rhs[g]
  return out


def ragged_k(lhs, rhs, group_sizes, num_groups, group_offset=0):
  """lhs [M, P], rhs [M, N] -> [G, P, N] in float64; empty groups are 0."""
  lhs = np.asarray(lhs, np.float64)
  rhs = np.asarray(rhs, np.float64)
  out = np.zeros((num_groups, lhs.shape[1], rhs.shape[1]))
  bounds = group_boundaries(group_sizes, lhs.shape[0], group_offset, num_groups)
  for g in range(num_groups):
    out[g] = lhs[bounds[g]:bounds[g + 1]].T @ rhs[bounds[g]:bounds[g + 1]]
  return out


def relative_error(actual, expected):
  """‖actual − expected‖ / ‖expected‖ in float64; inf if actual has a NaN (an unwritten element)."""
  actual = np.asarray(actual, np.float64)
  expected = np.asarray(expected, np.float64)
  if not np.all(np.isfinite(actual)):
    return np.inf
  scale = np.linalg.norm(expected)
  diff = np.linalg.norm(actual - expected)
  return diff / scale if scale > 0 else diff


# Norm-wise tolerances by the output's dtype: f32 accumulation everywhere, so
# the error is the output's rounding (and for f32, summation order).
TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 2e-3}


def on_cpu(fn, *args, **kwargs):
  """Runs a jax.lax reference on the CPU: on a GPU, jax.lax.ragged_dot is a masked
  dense dot that defaults to TF32 (errors ~3e-4) and fails to compile for some
  layouts; on the CPU it is exact f32."""
  import jax  # the reference module is otherwise NumPy-only
  cpu = jax.devices("cpu")[0]
  to_cpu = lambda x: jax.device_put(x, cpu) if isinstance(x, jax.Array) else x
  with jax.default_device(cpu):
    return fn(*map(to_cpu, args), **kwargs)
