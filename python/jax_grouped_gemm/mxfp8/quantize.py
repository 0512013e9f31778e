"""quantize / dequantize: trace-time checks, then one custom call each.

Both are non-differentiable: their inputs go through stop_gradient, so a
quantized value flows through jax.grad as a constant (gradients through
quantize are zero, as for any rounding), and the ops batch under vmap by a
sequential loop.

Sharding: matrices and stacks (dense, same_dims, varying_both) run as calls
batched over groups and 128x128 tiles (tile_view.py, batch_partitionable.py),
so a stack sharded along whole groups (expert weights under expert
parallelism), or a matrix or same_dims stack sharded along rows or columns in
multiples of 128 (tensor parallelism), quantizes and dequantizes shard by shard
with no communication, exportably. The ragged layouts (varying_first /
varying_last: one scale buffer packs all groups at device-computed offsets) are
computed whole: the partitioner gathers the input first.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax_grouped_gemm import _native, batch_partitionable
from jax_grouped_gemm.group_sizes import sizes_array, to_int32
from jax_grouped_gemm.ragged_gemm_ops import ffi_call_varying
from jax_grouped_gemm.mxfp8.scale_layout import scale_leaf_shape
from jax_grouped_gemm.mxfp8.tensor import ELEMENT_DTYPES, LAYOUT_CODES, SCALE_LAYOUTS, MXFP8Tensor
from jax_grouped_gemm.mxfp8.tile_view import BATCH_DIMS, DATA_ORDER, TileView

INPUT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))

_native.register_targets()
batch_partitionable.register([_native.MXFP8_QUANTIZE_TARGET, _native.MXFP8_DEQUANTIZE_TARGET,
                              *_native.MXFP8_LEGACY_TARGETS])
STACK_LAYOUTS = ("same_dims", "varying_both")  # one fixed-size scale slot per group
TILED_LAYOUTS = ("dense",) + STACK_LAYOUTS  # called through a TileView


def _dtype_names(dtypes) -> str:
  return ", ".join(jnp.dtype(d).name for d in dtypes)


def _grouped_layout(x, group_sizes, ragged_axis) -> str:
  """The layout implied by x's rank and group_sizes' shape (errors name the argument)."""
  if isinstance(ragged_axis, bool) or not isinstance(ragged_axis, (int, np.integer)):
    raise TypeError(f"ragged_axis: expected an int, got {ragged_axis!r}")
  if ragged_axis not in (0, -2) and (group_sizes is None or group_sizes.ndim != 1):
    raise ValueError(f"ragged_axis: only group sizes of shape [G] split an axis of x; got "
                     f"ragged_axis={ragged_axis} with group_sizes of shape "
                     f"{None if group_sizes is None else group_sizes.shape}")
  if group_sizes is None:
    if x.ndim == 2:
      return "dense"
    if x.ndim == 3:
      return "same_dims"
    raise ValueError(f"x: without group_sizes, expected rank 2 (a matrix) or 3 (a stack "
                     f"[G, M, N]), got shape {x.shape}")
  if group_sizes.ndim == 1:
    if x.ndim != 2:
      raise ValueError(f"x: with group_sizes of shape [G], expected rank 2 [M, N], got shape "
                       f"{x.shape}")
    if ragged_axis in (0, -2):
      return "varying_first"
    if ragged_axis in (1, -1):
      return "varying_last"
    raise ValueError(f"ragged_axis: expected 0 or 1 (or -2, -1) for x of rank 2, got "
                     f"{ragged_axis!r}")
  if group_sizes.ndim == 2 and group_sizes.shape[1] == 2:
    if x.ndim != 3 or x.shape[0] != group_sizes.shape[0]:
      raise ValueError(f"x: with group_sizes of shape [G, 2] (rows, cols per group), expected "
                       f"[G, max_rows, max_cols] with G = {group_sizes.shape[0]}, got shape "
                       f"{x.shape}")
    return "varying_both"
  raise ValueError(f"group_sizes: expected shape [G] (ragged along ragged_axis) or [G, 2] "
                   f"(rows and cols per group), got shape {group_sizes.shape}")


def _workspace(batch=()):
  """The CUDA kernels' job counter (each call's first bytes serve); dropped from the results."""
  return jax.ShapeDtypeStruct(batch + (_native.MXFP8_WORKSPACE_BYTES,), jnp.uint8)


def _ragged_call(target, results, *operands, **attributes):
  """One call with the whole tensor (varying_first / varying_last)."""
  outs = ffi_call_varying(target, (*results, _workspace()), *operands, **attributes)
  return outs[:-1]


def quantize(x, group_sizes=None, *, ragged_axis: int = 0, rowwise: bool = True,
             colwise: bool = False, scale_layout: str = "compact",
             dtype=jnp.float8_e4m3fn) -> MXFP8Tensor:
  """Quantizes x to MXFP8 (OCP MX v1.0, TransformerEngine's scale rule).

  Args:
    x: float32, bfloat16 or float16. [M, N] (one matrix), [G, M, N] (a stack of
      G matrices), [M, N] with group_sizes [G] (groups are row ranges for
      ragged_axis=0, column ranges for ragged_axis=1), or [G, M, N] with
      group_sizes [G, 2] (group g is x[g, :rows_g, :cols_g]).
    group_sizes: integer array on the device (narrowed to int32, saturating);
      negative sizes count as 0, running sums are clamped at the extent.
    ragged_axis: which axis of a 2-D x the [G] group sizes split.
    rowwise: quantize 1x32 blocks along rows (the last axis).
    colwise: quantize 32x1 blocks along columns (both: one pass over x).
    scale_layout: "compact" (row-major, padded to 128x4 tiles) or "swizzled"
      (the cuBLAS/CUTLASS block-scaled 128x4 interleave).
    dtype: jnp.float8_e4m3fn (max 448) or jnp.float8_e5m2 (max 57344).

  Returns:
    An MXFP8Tensor (a pytree: passes through jit, scan, shard_map; constant
    under grad).
  """
  if isinstance(x, MXFP8Tensor):
    raise TypeError("x: already an MXFP8Tensor (dequantize it first to quantize it again)")
  x = jnp.asarray(x)
  if x.dtype not in INPUT_DTYPES:
    raise TypeError(f"x: dtype must be one of {_dtype_names(INPUT_DTYPES)}, got {x.dtype}")
  if not all(isinstance(d, int) for d in x.shape):
    raise TypeError(f"x: the shape must be static (the scale buffer is sized for the worst "
                    f"case at trace time), got {x.shape}")
  try:
    element_dtype = jnp.dtype(dtype)
  except TypeError as e:
    raise TypeError(f"dtype: expected float8_e4m3fn or float8_e5m2, got {dtype!r}") from e
  if element_dtype not in ELEMENT_DTYPES:
    raise TypeError(f"dtype: expected float8_e4m3fn or float8_e5m2, got {element_dtype}")
  if scale_layout not in SCALE_LAYOUTS:
    raise ValueError(f"scale_layout: expected one of {SCALE_LAYOUTS}, got {scale_layout!r}")
  if not (rowwise or colwise):
    raise ValueError("rowwise, colwise: at least one must be True")
  if group_sizes is not None:
    group_sizes = sizes_array(group_sizes)
    if not jnp.issubdtype(group_sizes.dtype, jnp.integer):
      raise TypeError(f"group_sizes: dtype must be an integer type (int32), got "
                      f"{group_sizes.dtype}")
    group_sizes = to_int32(group_sizes)
  layout = _grouped_layout(x, group_sizes, ragged_axis)
  code = LAYOUT_CODES[layout]
  swizzled = scale_layout == "swizzled"
  attributes = dict(layout=np.int32(code), rowwise=bool(rowwise), colwise=bool(colwise),
                    swizzled=swizzled)
  x = jax.lax.stop_gradient(x)
  if layout in TILED_LAYOUTS:
    row_data, row_scales, col_data, col_scales = _quantize_tiles(
        x, group_sizes, layout, element_dtype, rowwise, colwise, swizzled, attributes)
  else:
    data_struct = jax.ShapeDtypeStruct(x.shape, element_dtype)
    scale_struct = jax.ShapeDtypeStruct(
        scale_leaf_shape(layout, x.shape, False, scale_layout, group_sizes.shape[0]), jnp.uint8)
    empty_data = jax.ShapeDtypeStruct((0,), element_dtype)
    empty_scales = jax.ShapeDtypeStruct((0,), jnp.uint8)
    row_data, row_scales, col_data, col_scales = _ragged_call(
        _native.MXFP8_QUANTIZE_TARGET,
        (data_struct if rowwise else empty_data, scale_struct if rowwise else empty_scales,
         data_struct if colwise else empty_data, scale_struct if colwise else empty_scales),
        x, group_sizes, **attributes)
  return MXFP8Tensor(
      data=row_data if rowwise else None,
      scale_inv=row_scales if rowwise else None,
      colwise_data=col_data if colwise else None,
      colwise_scale_inv=col_scales if colwise else None,
      group_sizes=group_sizes, layout=layout, scale_layout=scale_layout)


def _quantize_tiles(x, group_sizes, layout, element_dtype, rowwise, colwise, swizzled,
                    attributes):
  """The quantize call of a matrix or stack, batched over groups and tiles (tile_view.py)."""
  view = TileView.for_tensor(layout, x.shape, like=x)
  data = jax.ShapeDtypeStruct(view.data_shape(), element_dtype)
  scales = lambda c: jax.ShapeDtypeStruct(view.scale_view_shape(c, swizzled), jnp.uint8)
  results = (data if rowwise else view.empty(element_dtype),
             scales(False) if rowwise else view.empty(jnp.uint8),
             data if colwise else view.empty(element_dtype),
             scales(True) if colwise else view.empty(jnp.uint8), _workspace(view.batch))
  order = lambda asked, c: None if not asked else view.scale_view_order(c, swizzled)
  layouts = (DATA_ORDER, None, DATA_ORDER if rowwise else None, order(rowwise, False),
             DATA_ORDER if colwise else None, order(colwise, True), None)
  outs = batch_partitionable.call(
      _native.MXFP8_QUANTIZE_TARGET, results,
      view.data_to_view(x), view.group_sizes_operand(group_sizes), num_batch_dims=BATCH_DIMS,
      layouts=layouts, **attributes)
  data_out = view.data_from_view
  scales_out = lambda v, c: view.scales_from_view(v, c, swizzled)
  return (data_out(outs[0]) if rowwise else None, scales_out(outs[1], False) if rowwise else None,
          data_out(outs[2]) if colwise else None, scales_out(outs[3], True) if colwise else None)


_LAYOUT_RANKS = {"dense": 2, "varying_first": 2, "varying_last": 2, "same_dims": 3,
                 "varying_both": 3}


_GROUP_SIZES_SHAPES = {"varying_first": "[G]", "varying_last": "[G]", "varying_both": "[G, 2]"}


def _check_group_sizes(name: str, q: MXFP8Tensor) -> None:
  """q.group_sizes as its layout needs them: none for a matrix or a stack, integers [G] or
  [G, 2] for the ragged layouts (of any integer type: the kernels' int32 by saturation)."""
  sizes, wanted = q.group_sizes, _GROUP_SIZES_SHAPES.get(q.layout)
  if wanted is None:
    if sizes is not None:
      raise TypeError(f"{name}: an MXFP8 tensor of layout {q.layout!r} has no group sizes, got "
                      f"group_sizes of shape {jnp.shape(sizes)}")
    return
  ok_shape = sizes is not None and (
      jnp.ndim(sizes) == 1 if q.layout != "varying_both" else jnp.shape(sizes)[1:] == (2,))
  if not ok_shape or not jnp.issubdtype(jnp.result_type(sizes), jnp.integer):
    got = "None" if sizes is None else f"{jnp.result_type(sizes)}{list(jnp.shape(sizes))}"
    raise TypeError(f"{name}: an MXFP8 tensor of layout {q.layout!r} needs integer group_sizes "
                    f"{wanted}, got {got}")


def check_tensor(name: str, q: MXFP8Tensor) -> None:
  """Raises a TypeError naming `name` where q's leaves are not what quantize gives for its
  layout and scale layout (a hand-built, relabelled or vmapped-over tensor), so a kernel
  never reads its bytes in another layout's order."""
  if not (q.rowwise or q.colwise):
    raise TypeError(f"{name}: an MXFP8 tensor needs rowwise or colwise data, got neither")
  _check_group_sizes(name, q)
  shape, rank = q.shape, _LAYOUT_RANKS[q.layout]
  if len(shape) != rank:
    raise TypeError(f"{name}: an MXFP8 tensor of layout {q.layout!r} has rank {rank}, got shape "
                    f"{shape} (under vmap, map the GEMM, not the quantized operand)")
  for colwise in (False, True):
    if not (q.colwise if colwise else q.rowwise):
      continue
    data, scales = q.orientation(colwise)
    which = "colwise" if colwise else "rowwise"
    if data.dtype not in ELEMENT_DTYPES or tuple(data.shape) != shape:
      raise TypeError(f"{name}: {which} data must be float8_e4m3fn or float8_e5m2 of shape "
                      f"{shape}, got {data.dtype}{list(data.shape)}")
    expected = scale_leaf_shape(q.layout, shape, colwise, q.scale_layout, q.num_groups)
    if scales.dtype != jnp.uint8 or tuple(scales.shape) != tuple(expected):
      raise TypeError(f"{name}: {which} scales of layout {q.layout!r} with {q.scale_layout} "
                      f"scales must be uint8{list(expected)}, got {scales.dtype}"
                      f"{list(scales.shape)}")


def dequantize(q: MXFP8Tensor, dtype=jnp.bfloat16, *, colwise: bool | None = None) -> jax.Array:
  """x' = data * 2^(scale - 127) rounded to `dtype`, of q's logical shape.

  Reads the rowwise data when present (or colwise=True asks for the colwise
  copy). Elements of no group are 0; a NaN element or a NaN scale (0xFF) gives
  NaN; a value beyond dtype's range gives +-Inf.
  """
  if not isinstance(q, MXFP8Tensor):
    raise TypeError(f"q: expected an MXFP8Tensor (from jgg.mxfp8.quantize), got {type(q).__name__}")
  check_tensor("q", q)
  out_dtype = jnp.dtype(dtype)
  if out_dtype not in INPUT_DTYPES:
    raise TypeError(f"dtype: must be one of {_dtype_names(INPUT_DTYPES)}, got {out_dtype}")
  use_colwise = (not q.rowwise) if colwise is None else bool(colwise)
  data, scales = q.orientation(use_colwise)
  data = jax.lax.stop_gradient(data)
  scales = jax.lax.stop_gradient(scales)
  group_sizes = None if q.group_sizes is None else to_int32(jax.lax.stop_gradient(q.group_sizes))
  swizzled = q.scale_layout == "swizzled"
  attributes = dict(layout=np.int32(LAYOUT_CODES[q.layout]), colwise=use_colwise,
                    swizzled=swizzled)
  if q.layout not in TILED_LAYOUTS:
    out, = _ragged_call(_native.MXFP8_DEQUANTIZE_TARGET,
                        [jax.ShapeDtypeStruct(data.shape, out_dtype)], data, scales,
                        group_sizes, **attributes)
    return out
  view = TileView.for_tensor(q.layout, data.shape, like=data)
  out, = batch_partitionable.call(
      _native.MXFP8_DEQUANTIZE_TARGET,
      [jax.ShapeDtypeStruct(view.data_shape(), out_dtype), _workspace(view.batch)],
      view.data_to_view(data), view.scales_to_view(scales, use_colwise, swizzled),
      view.group_sizes_operand(group_sizes), num_batch_dims=BATCH_DIMS,
      layouts=(DATA_ORDER, view.scale_view_order(use_colwise, swizzled), None, DATA_ORDER, None),
      **attributes)[:1]
  return view.data_from_view(out)
