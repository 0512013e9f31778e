"""`jgg.grouped_dense`: one MoE expert projection y[r] = x[r] . kernel[group(r)], optionally MXFP8.

  y = jgg.grouped_dense(x, kernel, group_sizes, *, recipe=None, group_offset=None)

x [M, K] (rows sorted by group), kernel [G, K, N] or a pre-quantized MXFP8Tensor
(a [G, K, N] stack), group_sizes [G_global] int32 on the device; with
group_offset ([1] int32) the kernel holds groups [offset, offset + G) and only
their rows are computed. Rows of no (local) group are 0.

recipe=None: jgg.ragged_dot, differentiable through the grouped-GEMM
primitives' JVP/transpose rules (a pre-quantized kernel is dequantized:
weight-only MXFP8).

recipe=MXFP8Recipe(...): a custom VJP with MXFP8 numerics in all three GEMMs
(see mxfp8_gemm.py for the orientations and what "exact" means):
  forward  quantize x once, rowwise + colwise in one pass (group_sizes given, so
           colwise blocks restart at group boundaries), and the kernel once,
           rowwise + colwise; y = x(rowwise) . W(colwise).
  backward quantize dy once, rowwise + colwise; dx = dy(rowwise) . W(rowwise)^T,
           dW = x(colwise)^T . dy(colwise) per group.
Not differentiated (serving), only x rowwise and the kernel colwise are quantized.
The residuals are the fp8 halves the backward reads (x colwise, W rowwise: half
the bytes of a bf16 x), named with checkpoint_name (RESIDUAL_NAMES) so a remat
policy can save them, e.g.
  jax.checkpoint(f, policy=jax.checkpoint_policies.save_only_these_names(*RESIDUAL_NAMES))
Gradients come back in the input dtypes (the straight-through estimator:
quantization is treated as the identity). A pre-quantized kernel gets no
gradient; it needs colwise data for the forward and rowwise data for dx.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding

from jax_grouped_gemm import mxfp8_gemm
from jax_grouped_gemm.group_sizes import checked_group_offset, sizes_array, to_int32
from jax_grouped_gemm.ragged_gemm_ops import vary_alike
from jax_grouped_gemm.mxfp8_gemm import DGRAD_DIMENSION_NUMBERS, WGRAD_DIMENSION_NUMBERS
from jax_grouped_gemm.mxfp8.quantize import INPUT_DTYPES, quantize
from jax_grouped_gemm.mxfp8.tensor import ELEMENT_DTYPES, SCALE_LAYOUTS, MXFP8Tensor
from jax_grouped_gemm.ragged_dot import ragged_dot

X_RESIDUAL, KERNEL_RESIDUAL = "jgg_mxfp8_x", "jgg_mxfp8_kernel"
RESIDUAL_NAMES = (X_RESIDUAL, KERNEL_RESIDUAL)


@dataclasses.dataclass(frozen=True)
class MXFP8Recipe:
  """MXFP8 training/serving recipe for grouped_dense (OCP MX v1.0, TE's scale rule).

  forward_dtype: fp8 elements of x and the kernel (forward GEMM and residuals).
  gradient_dtype: fp8 elements of dy (dgrad and wgrad). E4M3 by default, as
    TransformerEngine's MXFP8 recipe: per-32 scales leave E5M2's extra range
    little to do; E5M2 is available.
  scale_layout: "compact" or "swizzled" (the Blackwell block-scaled layout).
  """
  forward_dtype: object = jnp.float8_e4m3fn
  gradient_dtype: object = jnp.float8_e4m3fn
  scale_layout: str = "compact"

  def __post_init__(self):
    for field in ("forward_dtype", "gradient_dtype"):
      value = getattr(self, field)
      try:
        dtype = jnp.dtype(value)
      except TypeError as e:
        raise TypeError(f"{field}: expected float8_e4m3fn or float8_e5m2, got {value!r}") from e
      if dtype not in ELEMENT_DTYPES:
        raise TypeError(f"{field}: expected float8_e4m3fn or float8_e5m2, got {dtype}")
      object.__setattr__(self, field, dtype)  # canonical, so equal recipes hash alike
    if self.scale_layout not in SCALE_LAYOUTS:
      raise ValueError(f"scale_layout: expected one of {SCALE_LAYOUTS}, got "
                       f"{self.scale_layout!r}")


def grouped_dense(x, kernel, group_sizes, *, recipe: MXFP8Recipe | None = None,
                  group_offset=None):
  """y [M, N] = x [M, K] . kernel[group of the row]; see the module docstring."""
  if recipe is not None and not isinstance(recipe, MXFP8Recipe):
    raise TypeError(f"recipe: expected None or jgg.MXFP8Recipe, got {recipe!r}")
  if isinstance(x, MXFP8Tensor):
    raise TypeError("x: expected an array (grouped_dense quantizes x as its recipe says; "
                    "multiply a pre-quantized x with jgg.mxfp8.ragged_dot)")
  x = jnp.asarray(x)
  prequantized = isinstance(kernel, MXFP8Tensor)
  kernel = kernel if prequantized else jnp.asarray(kernel)
  group_sizes = sizes_array(group_sizes)
  _check_operands(x, kernel, group_sizes, group_offset)
  if recipe is None:
    if prequantized:
      return mxfp8_gemm.ragged_dot(x, kernel, group_sizes, preferred_element_type=x.dtype,
                                   group_offset=group_offset)
    return ragged_dot(x, kernel, group_sizes, group_offset=group_offset)
  if x.dtype not in INPUT_DTYPES:
    raise TypeError(f"x: dtype must be float32, bfloat16 or float16 with an MXFP8 recipe, got "
                    f"{x.dtype}")
  if not prequantized and kernel.dtype not in INPUT_DTYPES:
    raise TypeError(f"kernel: dtype must be float32, bfloat16 or float16 with an MXFP8 recipe, "
                    f"got {kernel.dtype}")
  if prequantized and not kernel.colwise:
    raise ValueError("kernel: a pre-quantized kernel needs colwise data (32x1 blocks along K) "
                     "for the forward GEMM; quantize it with colwise=True")
  out_dtype = x.dtype if prequantized else jnp.result_type(x.dtype, kernel.dtype)
  config = _Config(recipe, jnp.dtype(x.dtype),
                   None if prequantized else jnp.dtype(kernel.dtype), jnp.dtype(out_dtype),
                   kernel.shape[0], _typed_sharding(x),
                   None if prequantized else _typed_sharding(kernel))
  if group_offset is not None:
    group_offset = checked_group_offset(group_offset)
  # Inside shard_map every primal varies over the same manual axes, as the plain path's
  # operands do: a gradient must have its primal's type, and dW of a replicated kernel is
  # computed from varying x and dy (pcast's transpose sums it over those axes).
  primals, tree = jax.tree.flatten((x, kernel, to_int32(group_sizes), group_offset))
  x, kernel, group_sizes, group_offset = jax.tree.unflatten(tree, vary_alike(*primals))
  return _mxfp8_grouped_dense(config, x, kernel, group_sizes, group_offset)


def _check_operands(x, kernel, group_sizes, group_offset):
  if x.ndim != 2:
    raise TypeError(f"x: expected [rows, K], got shape {x.shape}")
  if isinstance(kernel, MXFP8Tensor) and kernel.layout != "same_dims":
    raise ValueError(f"kernel: a pre-quantized kernel must be a [G, K, N] stack (layout "
                     f"'same_dims', from jgg.mxfp8.quantize(w) with w of rank 3), got layout "
                     f"{kernel.layout!r}")
  if len(kernel.shape) != 3 or kernel.shape[1] != x.shape[1]:
    raise TypeError(f"kernel: expected [groups, {x.shape[1]}, N], got shape {kernel.shape}")
  if group_sizes.ndim != 1 or not jnp.issubdtype(group_sizes.dtype, jnp.integer):
    raise TypeError(f"group_sizes: expected an integer array [groups], got "
                    f"{group_sizes.dtype}{list(group_sizes.shape)}")
  if group_offset is None and group_sizes.shape[0] != kernel.shape[0]:
    raise TypeError(f"group_sizes: expected {kernel.shape[0]} groups (kernel.shape[0]), got "
                    f"{group_sizes.shape[0]}; with group_offset it may hold more")
  if group_offset is not None and kernel.shape[0] > group_sizes.shape[0]:
    raise TypeError(f"kernel: holds {kernel.shape[0]} groups, more than the "
                    f"{group_sizes.shape[0]} of group_sizes (with group_offset, kernel holds a "
                    "slice of the groups)")


@dataclasses.dataclass(frozen=True)
class _Config:
  """The static part of one call (hashable: the custom VJP's non-differentiable argument)."""
  recipe: MXFP8Recipe
  x_dtype: jnp.dtype
  kernel_dtype: jnp.dtype | None  # None: a pre-quantized kernel (no gradient)
  out_dtype: jnp.dtype
  num_local_groups: int
  x_sharding: NamedSharding | None       # the primals' shardings where types carry them
  kernel_sharding: NamedSharding | None  # (Explicit mesh axes): the gradients' too


def _typed_sharding(x) -> NamedSharding | None:
  sharding = jax.typeof(x).sharding
  return sharding if not sharding.mesh.empty and sharding.mesh.explicit_axes else None


def _typed_as(gradient, sharding):
  """A custom VJP's gradient must have its primal's type, sharding included."""
  return gradient if sharding is None else jax.sharding.reshard(gradient, sharding)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mxfp8_grouped_dense(config, x, kernel, group_sizes, group_offset):
  # Not differentiated (serving): only the forward's orientations are quantized.
  qx, qw = _quantized(config, x, kernel, group_sizes, for_backward=False)
  return mxfp8_gemm.ragged_dot(qx, qw, group_sizes, preferred_element_type=config.out_dtype,
                               group_offset=group_offset)


def _quantized(config, x, kernel, group_sizes, for_backward: bool):
  """x rowwise and the kernel colwise (the forward); their other halves too for_backward."""
  recipe = config.recipe
  fp8 = dict(dtype=recipe.forward_dtype, scale_layout=recipe.scale_layout)
  qx = quantize(x, group_sizes, rowwise=True, colwise=for_backward, **fp8)
  if isinstance(kernel, MXFP8Tensor):
    return qx, kernel
  return qx, quantize(kernel, rowwise=for_backward, colwise=True, **fp8)


def _forward(config, x, kernel, group_sizes, group_offset):
  qx, qw = _quantized(config, x, kernel, group_sizes, for_backward=True)
  y = mxfp8_gemm.ragged_dot(qx, qw, group_sizes, preferred_element_type=config.out_dtype,
                            group_offset=group_offset)
  # Keep only the orientations the backward reads: x colwise (wgrad), W rowwise (dgrad).
  x_colwise = checkpoint_name(_only(qx, colwise=True), X_RESIDUAL)
  w_rowwise = checkpoint_name(_only(qw, colwise=False), KERNEL_RESIDUAL) if qw.rowwise else None
  return y, (x_colwise, w_rowwise, group_sizes, group_offset)


def _only(q: MXFP8Tensor, colwise: bool) -> MXFP8Tensor:
  """q with one orientation dropped, so the residual holds just what the backward needs."""
  if colwise:
    return dataclasses.replace(q, data=None, scale_inv=None)
  return dataclasses.replace(q, colwise_data=None, colwise_scale_inv=None)


def _backward(config, residuals, dy):
  x_colwise, w_rowwise, group_sizes, group_offset = residuals
  recipe = config.recipe
  if w_rowwise is None:
    raise ValueError("kernel: the pre-quantized kernel has no rowwise data (1x32 blocks along "
                     "N), which the gradient dx = dy . kernel^T needs; quantize it with "
                     "rowwise=True")
  qdy = quantize(dy, group_sizes, rowwise=True, colwise=True, dtype=recipe.gradient_dtype,
                 scale_layout=recipe.scale_layout)
  dx = mxfp8_gemm.ragged_dot_general(qdy, w_rowwise, group_sizes, DGRAD_DIMENSION_NUMBERS,
                                     preferred_element_type=config.x_dtype,
                                     group_offset=group_offset)
  dw = None
  if config.kernel_dtype is not None:
    dw = mxfp8_gemm.ragged_dot_general(x_colwise, qdy, group_sizes, WGRAD_DIMENSION_NUMBERS,
                                       preferred_element_type=config.kernel_dtype,
                                       group_offset=group_offset)
    # A ragged contraction returns one group per entry of group_sizes (jax.lax's
    # shape); with group_offset only the first num_local_groups are the kernel's.
    dw = _typed_as(dw[:config.num_local_groups], config.kernel_sharding)
  return _typed_as(dx, config.x_sharding), dw, None, None


_mxfp8_grouped_dense.defvjp(_forward, _backward)
