"""The computation behind the Flax modules of both APIs (one copy, so nnx and linen agree).

`apply_grouped_dense` is y[r] = x[r] . kernel[group(r)] (+ bias[group(r)]) for
inputs [rows, in_features] and a kernel [groups, in_features, out_features];
rows of no group (past sum(group_sizes), or of no local group under
`group_offset`) are 0, bias included.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax.nnx.nn import dtypes

from jax_grouped_gemm.group_sizes import group_ends, sizes_array, to_int32
from jax_grouped_gemm.grouped_dense import grouped_dense
from jax_grouped_gemm.ragged_dot import ragged_dot as jgg_ragged_dot

# LeCun normal per group: fan-in is in_features, not groups x in_features.
default_kernel_init = jax.nn.initializers.variance_scaling(
    1.0, "fan_in", "truncated_normal", in_axis=-2, out_axis=-1, batch_axis=(0,))
default_bias_init = jax.nn.initializers.zeros


def grouped_matmul(lhs, rhs, group_sizes, *, group_offset=None, precision=None,
                   preferred_element_type=None, recipe=None,
                   ragged_dot=jgg_ragged_dot):
  """lhs [rows, in] . rhs [groups, in, out] -> [rows, out] by `ragged_dot`, or by the recipe.

  `ragged_dot` is any function with jax.lax.ragged_dot's signature (jgg's by
  default; jax.lax's builds the reference model). With a `recipe`
  (jgg.MXFP8Recipe) the product is jgg.grouped_dense's, which fixes precision
  and result dtype itself.
  """
  if recipe is not None:  # the recipe's own custom VJP (MXFP8: quantize, MXFP8 GEMMs)
    return grouped_dense(lhs, rhs, group_sizes, recipe=recipe, group_offset=group_offset)
  # jax.lax.ragged_dot accepts group_offset only as None: pass it only when set.
  offset = {} if group_offset is None else {"group_offset": group_offset}
  return ragged_dot(lhs, rhs, group_sizes, precision=precision,
                    preferred_element_type=preferred_element_type, **offset)


def module_ragged_dot(module, lhs, rhs, group_sizes, precision, preferred_element_type,
                      group_offset):
  """The RaggedDot modules' call: per-call precision and result dtype override the
  module's fields (precision, preferred_element_type, recipe)."""
  return grouped_matmul(
      lhs, rhs, group_sizes, group_offset=group_offset,
      precision=module.precision if precision is None else precision,
      preferred_element_type=(module.preferred_element_type if preferred_element_type is None
                              else preferred_element_type),
      recipe=module.recipe)


def group_bias(bias, group_sizes, num_rows: int, group_offset=None):
  """[num_rows, out]: each row's bias[group]; 0 for rows of no local group.

  Same clamping rule as the kernels (xla_plugin/common/ragged_layout.h):
  negative sizes count as 0, the running sum is clamped at num_rows, the
  offset at [0, num_global_groups]; all on the device.
  """
  num_local, num_global = bias.shape[0], group_sizes.shape[0]
  bounds = jnp.concatenate([jnp.zeros((1,), jnp.int32), group_ends(group_sizes, num_rows)])
  first = 0 if group_offset is None else jnp.clip(to_int32(group_offset).reshape(()), 0,
                                                   num_global)
  local_bounds = bounds[jnp.minimum(first + jnp.arange(num_local + 1), num_global)]
  rows = jnp.arange(num_rows, dtype=jnp.int32)
  group = jnp.searchsorted(local_bounds, rows, side="right").astype(jnp.int32) - 1
  in_group = (rows >= local_bounds[0]) & (rows < local_bounds[num_local])
  return jnp.where(in_group[:, None], bias[jnp.clip(group, 0, num_local - 1)], 0)


def apply_grouped_dense(inputs, kernel, group_sizes, *, bias=None, group_offset=None, dtype=None,
                        precision=None, preferred_element_type=None, recipe=None,
                        ragged_dot=jgg_ragged_dot):
  """The GroupedDense forward: checks shapes, promotes to `dtype` (as flax Dense), multiplies."""
  if inputs.ndim != 2:
    raise TypeError(f"inputs: expected [rows, in_features], got shape {inputs.shape}")
  if kernel.ndim != 3:
    raise TypeError(f"kernel: expected [groups, in_features, out_features], got shape "
                    f"{kernel.shape}")
  if kernel.shape[1] != inputs.shape[1]:  # the module's kernel is fixed: the inputs are off
    raise TypeError(f"inputs: expected [rows, {kernel.shape[1]}] (the kernel's in_features), "
                    f"got shape {inputs.shape}")
  group_sizes = sizes_array(group_sizes)
  if group_sizes.ndim != 1:
    raise TypeError(f"group_sizes: expected [groups], got shape {group_sizes.shape}")
  if group_offset is None and group_sizes.shape[0] != kernel.shape[0]:
    raise TypeError(f"group_sizes: expected {kernel.shape[0]} groups (kernel.shape[0]), got "
                    f"{group_sizes.shape[0]}; with group_offset it may hold more")
  if group_offset is not None and group_sizes.shape[0] < kernel.shape[0]:
    raise TypeError(f"group_sizes: expected at least {kernel.shape[0]} groups (kernel.shape[0]; "
                    f"with group_offset the kernel holds a slice of them), got "
                    f"{group_sizes.shape[0]}")
  inputs, kernel, bias = dtypes.promote_dtype((inputs, kernel, bias), dtype=dtype)
  y = grouped_matmul(inputs, kernel, group_sizes, group_offset=group_offset, precision=precision,
                     preferred_element_type=preferred_element_type, recipe=recipe,
                     ragged_dot=ragged_dot)
  if bias is not None:
    y = y + group_bias(bias, group_sizes, inputs.shape[0], group_offset).astype(y.dtype)
  return y
