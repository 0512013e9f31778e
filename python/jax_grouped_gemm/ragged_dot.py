"""Drop-in `ragged_dot` / `ragged_dot_general` with jax.lax's signatures.

Every jax.lax.RaggedDotDimensionNumbers mode is mapped onto the two canonical
kernels of ragged_gemm_ops:
  * ragged non-contracting ([b, m, k] x [g, b, k, n] -> [b, m, n]) -> ragged_m;
  * ragged contracting ([b, m, k] x [b, k, n] -> [g, b, m, n]) -> ragged_k;
  * ragged batch -> a plain dot_general, exactly as jax.lax defines it (group
    sizes do not change the result in that mode).
Operands are permuted only when their layout is not one a kernel reads in
place: the canonical layouts, and the rhs [g, b, n, k] of a dgrad.

Shapes, dtypes and dimension numbers are checked at trace time with jax.lax's
own shape rule (so errors match jax's) after our own checks, which name the
argument. group_sizes and group_offset are device values and never read on
the host; what they hold is clamped (see xla_plugin/common/ragged_layout.h).

`out_sharding` is jax.lax's: on meshes of Explicit axes the result's sharding
is otherwise inferred from the operands' by the ops' one sharding spec
(sharding_rules.py), where jax.lax raises and asks for it.
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
import operator
from typing import Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from jax_grouped_gemm import ragged_gemm_ops as ops
from jax_grouped_gemm.group_sizes import checked_group_offset, sizes_array, to_int32

RaggedDotDimensionNumbers = lax.RaggedDotDimensionNumbers

BASIC_DIMENSION_NUMBERS = RaggedDotDimensionNumbers(
    dot_dimension_numbers=(([1], [1]), ([], [])),
    lhs_ragged_dimensions=[0],
    rhs_group_dimensions=[0],
)


class Mode(enum.Enum):
  RAGGED_NONCONTRACTING = 1
  RAGGED_CONTRACTING = 2
  RAGGED_BATCH = 3


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
  """lhs [m, k] . rhs [g, k, n] -> [m, n]; rows of group i use rhs[i].

  Rows past sum(group_sizes) are 0. With `group_offset` (an int32 array of
  shape (1,)), rhs holds the groups [offset, offset + rhs.shape[0]) of
  `group_sizes`: only their rows are computed, all other rows are 0.
  """
  return ragged_dot_general(lhs, rhs, group_sizes, BASIC_DIMENSION_NUMBERS, precision=precision,
                            preferred_element_type=preferred_element_type,
                            group_offset=group_offset, out_sharding=out_sharding)


def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision=None,
                       preferred_element_type=None, group_offset=None, out_sharding=None):
  """jax.lax.ragged_dot_general on the grouped-GEMM kernels (same signature and results).

  Operands and results are f32, bf16 or f16 (the kernels' types): f64 and integer types,
  which jax.lax also takes, raise a TypeError naming the argument.
  `precision` is accepted for compatibility: f32 operands are always multiplied
  in full f32, bf16/f16 operands always accumulate in f32. MXFP8Tensor operands
  (jgg.mxfp8.quantize) are multiplied at their exact dequantized values
  (jax_grouped_gemm.mxfp8_gemm).
  With `group_offset` in ragged-contracting mode, output group j is global group
  offset + j (groups past the end of group_sizes are zero); where the ragged dimension is a
  batch dimension, group_offset is refused.
  """
  out_sharding = ops.canonical_out_sharding(out_sharding)
  if _is_mxfp8(lhs) or _is_mxfp8(rhs):
    from jax_grouped_gemm import mxfp8_gemm  # imported here: mxfp8_gemm imports this module
    return _resharded(mxfp8_gemm.ragged_dot_general(
        lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision, preferred_element_type,
        group_offset), out_sharding)
  lhs, rhs, group_sizes = jnp.asarray(lhs), jnp.asarray(rhs), sizes_array(group_sizes)
  dims = ragged_dot_dimension_numbers
  _check_dtypes(lhs, rhs, group_sizes)
  mode = _mode(lhs.ndim, dims)
  if group_offset is not None:
    group_offset = _checked_group_offset(group_offset, mode, rhs, dims, group_sizes)
  out_aval = result_aval(lhs, rhs, group_sizes, dims, precision, preferred_element_type,
                         group_offset is not None)
  if mode is Mode.RAGGED_BATCH:
    return lax.dot_general(lhs, rhs, dims.dot_dimension_numbers, precision=precision,
                           preferred_element_type=out_aval.dtype, out_sharding=out_sharding)
  if group_offset is None:
    group_offset = jnp.zeros((1,), jnp.int32)
  canonical = _ragged_noncontracting if mode is Mode.RAGGED_NONCONTRACTING else _ragged_contracting
  out = canonical(lhs, rhs, group_sizes, group_offset, dims, out_aval, out_sharding)
  return _resharded(out, out_sharding)


def _resharded(out, out_sharding):
  """out typed (and placed) as out_sharding asks, where the kernel's layout did not carry it
  (an N-D layout, or the MXFP8 path's result)."""
  if out_sharding is None or out.aval.sharding.is_equivalent_to(out_sharding, out.ndim):
    return out
  return jax.sharding.reshard(out, out_sharding)


def _is_mxfp8(x) -> bool:
  # Imported at call time: the mxfp8 package imports this module.
  from jax_grouped_gemm.mxfp8.tensor import MXFP8Tensor
  return isinstance(x, MXFP8Tensor)


# --- trace-time checks ----------------------------------------------------------

def _check_dtypes(lhs, rhs, group_sizes):
  for name, x in (("lhs", lhs), ("rhs", rhs)):
    if x.dtype not in ops.SUPPORTED_DTYPES:
      raise TypeError(f"{name}: dtype {x.dtype} is not supported; expected one of "
                      f"{', '.join(str(d) for d in ops.SUPPORTED_DTYPES)}")
  if not jnp.issubdtype(group_sizes.dtype, jnp.integer):
    raise TypeError(f"group_sizes: expected an integer dtype, got {group_sizes.dtype}")


def _mode(lhs_ndim: int, dims) -> Mode:
  if len(dims.lhs_ragged_dimensions) != 1:
    raise TypeError("ragged_dot_dimension_numbers: expected exactly one lhs ragged dimension, "
                    f"got {dims.lhs_ragged_dimensions}")
  ragged = dims.lhs_ragged_dimensions[0]
  (contracting, _), (batch, _) = dims.dot_dimension_numbers
  if not 0 <= ragged < lhs_ndim:
    raise TypeError(f"ragged_dot_dimension_numbers: lhs ragged dimension {ragged} is out of "
                    f"range for lhs of rank {lhs_ndim}")
  if ragged in contracting:
    return Mode.RAGGED_CONTRACTING
  if ragged in batch:
    return Mode.RAGGED_BATCH
  return Mode.RAGGED_NONCONTRACTING


def _rhs_group_dim(rhs_ndim: int, dims, group_sizes) -> int | None:
  """rhs's group dimension where the dimension numbers and group_sizes name a valid one;
  None otherwise, and jax.lax's shape rule (result_aval) then reports what is wrong."""
  if len(dims.rhs_group_dimensions) != 1 or len(group_sizes.shape) < 1:
    return None
  d = dims.rhs_group_dimensions[0]
  return d if 0 <= d < rhs_ndim else None


def _checked_group_offset(group_offset, mode, rhs, dims, group_sizes):
  if mode is Mode.RAGGED_BATCH:
    raise TypeError("group_offset: not supported where the ragged dimension is a batch "
                    "dimension (group sizes do not select rhs groups there)")
  group_offset = checked_group_offset(group_offset)
  d = _rhs_group_dim(rhs.ndim, dims, group_sizes)
  if mode is Mode.RAGGED_NONCONTRACTING and d is not None:
    if rhs.shape[d] > group_sizes.shape[-1]:
      raise TypeError(f"rhs: holds {rhs.shape[d]} groups, more than the {group_sizes.shape[-1]} "
                      "of group_sizes (with group_offset, rhs holds a slice of the groups)")
  return group_offset


def result_aval(lhs, rhs, group_sizes, dims, precision, preferred_element_type,
                has_offset: bool):
  """Output shape and dtype by jax.lax's own rules, so shape and dtype errors match
  jax's (its sharding is ours: jax.lax only asks for one on Explicit axes), then the
  kernels' result dtypes. lhs and rhs need only .shape and .dtype: the MXFP8 path passes
  its operands' logical shapes."""
  mode = _mode(len(lhs.shape), dims)
  rhs_shape = list(rhs.shape)
  d = _rhs_group_dim(len(rhs_shape), dims, group_sizes)
  if has_offset and mode is Mode.RAGGED_NONCONTRACTING and d is not None:
    rhs_shape[d] = group_sizes.shape[-1]  # rhs holds a slice
  struct = lambda shape, dtype: jax.ShapeDtypeStruct(tuple(shape), dtype)
  mesh = jax.sharding.get_abstract_mesh()
  replicated = NamedSharding(mesh, P()) if not mesh.empty and mesh.explicit_axes else None
  out_aval = jax.eval_shape(
      functools.partial(lax.ragged_dot_general, ragged_dot_dimension_numbers=dims,
                        precision=precision, preferred_element_type=preferred_element_type,
                        out_sharding=replicated),
      struct(lhs.shape, lhs.dtype), struct(rhs_shape, rhs.dtype),
      struct(group_sizes.shape, group_sizes.dtype))
  if out_aval.dtype not in ops.SUPPORTED_DTYPES:
    raise TypeError(f"preferred_element_type: the kernels write "
                    f"{', '.join(str(d) for d in ops.SUPPORTED_DTYPES)}, got {out_aval.dtype}")
  return out_aval


# --- mapping onto the canonical kernels -------------------------------------------

def _size(shape, axes: Sequence[int]) -> int:
  return math.prod(shape[a] for a in axes)


def _permute(x, perm):
  perm = list(perm)
  return x if perm == list(range(x.ndim)) else jnp.transpose(x, perm)


def merged(x, shape):
  """x.reshape(shape), where shape merges runs of consecutive dims of x (unit dims may come
  and go). On Explicit mesh axes a merged dim can carry only the split of its run's first
  dim: a split of a later one is gathered first; and jax's reshape rule takes one merge of
  two dims at a time, not several in one reshape, so the runs are merged pair by pair."""
  sharding = jax.typeof(x).sharding
  if sharding.mesh.empty or not sharding.mesh.explicit_axes:
    return x.reshape(shape)
  starts = set(itertools.accumulate(shape, operator.mul, initial=1))
  spec = list(sharding.spec) + [None] * (x.ndim - len(sharding.spec))
  behind = [spec[d] is not None and math.prod(x.shape[:d]) not in starts for d in range(x.ndim)]
  if any(behind):
    x = jax.sharding.reshard(x, sharding.update(
        spec=P(*(None if b else s for b, s in zip(behind, spec)))))
  at = 0
  for size in shape if x.size else ():  # (nothing to place in an empty array)
    if size == 1 and (at >= x.ndim or x.shape[at] != 1):
      continue  # a unit dim that comes: the last reshape inserts it
    while at + 1 < x.ndim and x.shape[at] < size:
      x = x.reshape(x.shape[:at] + (x.shape[at] * x.shape[at + 1],) + x.shape[at + 2:])
    at += 1
  return x.reshape(shape)


def _canonical_group_sizes(group_sizes, prefix_shape, ragged_extent, rows_per_index):
  """group_sizes as [B, g] int32, counted in rows of the flattened ragged dimension.

  When dims inner to the ragged one are flattened into it, every index of the
  ragged dimension is `rows_per_index` rows; clamping first keeps the product in
  range (the kernels clamp again, so any device value stays in bounds).
  """
  num_groups = group_sizes.shape[-1]
  group_sizes = jnp.broadcast_to(to_int32(group_sizes), tuple(prefix_shape) + (num_groups,))
  group_sizes = group_sizes.reshape(math.prod(prefix_shape), num_groups)
  if rows_per_index != 1:
    group_sizes = jnp.clip(group_sizes, 0, ragged_extent) * rows_per_index
  return group_sizes


def _with_unit_axis(sharding, axis: int):
  """The sharding of a result reshaped to carry a unit axis at `axis` (None stays None)."""
  if sharding is None:
    return None
  spec = list(sharding.spec)
  return sharding.update(spec=P(*spec[:axis], None, *spec[axis:]))


def _ragged_noncontracting(lhs, rhs, group_sizes, group_offset, dims, out_aval, out_sharding):
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dims.dot_dimension_numbers
  ragged = dims.lhs_ragged_dimensions[0]
  group_dim = dims.rhs_group_dimensions[0]
  lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
  outer = [d for d in lhs_free if d < ragged]  # own group sizes each: part of the batch
  inner = [d for d in lhs_free if d > ragged]  # flattened into the ragged rows
  rhs_free = [d for d in range(rhs.ndim)
              if d not in rhs_contract and d not in rhs_batch and d != group_dim]

  batch = _size(lhs.shape, list(lhs_batch) + outer)
  rows_per_index = _size(lhs.shape, inner)
  k = _size(lhs.shape, lhs_contract)
  n = _size(rhs.shape, rhs_free)
  num_groups = rhs.shape[group_dim]
  lhs3 = _permute(lhs, list(lhs_batch) + outer + [ragged] + inner + list(lhs_contract))
  lhs3 = merged(lhs3, (batch, lhs.shape[ragged] * rows_per_index, k))

  kn = [group_dim] + list(rhs_batch) + list(rhs_contract) + rhs_free
  nk = [group_dim] + list(rhs_batch) + rhs_free + list(rhs_contract)
  rhs_transposed = nk == list(range(rhs.ndim)) and kn != nk  # read [g, b, n, k] in place
  rhs_batch_size = _size(rhs.shape, rhs_batch)
  rhs4 = _permute(rhs, nk if rhs_transposed else kn)
  rhs4 = merged(rhs4, (num_groups, rhs_batch_size) + ((n, k) if rhs_transposed else (k, n)))
  outer_size = _size(lhs.shape, outer)
  if outer_size != 1:  # lhs dims outer to the ragged one reuse the same weights
    rhs4 = jnp.broadcast_to(rhs4[:, :, None], rhs4.shape[:2] + (outer_size,) + rhs4.shape[2:])
    rhs4 = rhs4.reshape((num_groups, batch) + rhs4.shape[3:])

  prefix = [lhs.shape[d] for d in list(lhs_batch) + outer]
  group_sizes = _canonical_group_sizes(group_sizes, prefix, lhs.shape[ragged], rows_per_index)
  # The common [m, k] case: the kernel's [1, m, n] result carries out_sharding itself.
  plain = batch == 1 and rows_per_index == 1 and out_aval.ndim == 2
  out = ops.ragged_m(lhs3, rhs4, group_sizes, group_offset, rhs_transposed=rhs_transposed,
                     out_dtype=out_aval.dtype,
                     out_sharding=_with_unit_axis(out_sharding, 0) if plain else None)
  return out.reshape(out_aval.shape)


def _ragged_contracting(lhs, rhs, group_sizes, group_offset, dims, out_aval, out_sharding):
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dims.dot_dimension_numbers
  ragged = dims.lhs_ragged_dimensions[0]
  i = list(lhs_contract).index(ragged)
  outer, inner = list(lhs_contract[:i]), list(lhs_contract[i + 1:])  # in the list's order
  lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
  rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch]

  batch = _size(lhs.shape, list(lhs_batch) + outer)
  rows_per_index = _size(lhs.shape, inner)
  rows = lhs.shape[ragged] * rows_per_index
  p, n = _size(lhs.shape, lhs_free), _size(rhs.shape, rhs_free)
  lhs3 = merged(_permute(lhs, list(lhs_batch) + outer + [ragged] + inner + lhs_free),
                 (batch, rows, p))
  rhs3 = merged(_permute(rhs, list(rhs_batch) + list(rhs_contract) + rhs_free), (batch, rows, n))

  prefix = [lhs.shape[d] for d in list(lhs_batch) + outer]
  group_sizes = _canonical_group_sizes(group_sizes, prefix, lhs.shape[ragged], rows_per_index)
  num_groups = group_sizes.shape[-1]
  outer_size = _size(lhs.shape, outer)
  # Contracting dims outer to the ragged one have group sizes of their own: each
  # index is a batch entry of the kernel, summed afterwards in f32.
  kernel_dtype = jnp.float32 if outer_size != 1 else out_aval.dtype
  # The common [m, k] x [m, n] case: the kernel's [g, 1, k, n] result carries out_sharding.
  plain = batch == 1 and out_aval.ndim == 3 and len(lhs_free) == 1 and len(rhs_free) == 1
  out = ops.ragged_k(lhs3, rhs3, group_sizes, group_offset, num_groups=num_groups,
                     out_dtype=kernel_dtype,
                     out_sharding=_with_unit_axis(out_sharding, 1) if plain else None)
  if outer_size != 1:
    # The batch dims' size from the shape, not batch // outer_size: an outer dim may be 0.
    out = out.reshape((num_groups, _size(lhs.shape, lhs_batch), outer_size, p, n)).sum(axis=2)
    out = out.astype(out_aval.dtype)
  return out.reshape(out_aval.shape)
