"""Grouped GEMMs with MXFP8 operands: `jgg.mxfp8.ragged_dot` / `jgg.mxfp8.ragged_dot_general`.

jax.lax's signatures; either operand (or both) may be an MXFP8Tensor, the other
a plain float array. Each MXFP8 operand is read in the orientation whose
32-element blocks run along its contracted axis:

  contracted axis = the last one         -> rowwise data  (1x32 blocks)
  contracted axis = the one before it    -> colwise data  (32x1 blocks)

which is what every GEMM of an MoE layer needs (x [M, K], W [G, K, N], dy [M, N]):
  forward  y  = x . W[g]     x rowwise (along K),  W colwise (along K)
  dgrad    dx = dy . W[g]^T  dy rowwise (along N), W rowwise (along N)
  wgrad    dW = x^T . dy     x and dy colwise along the ragged token axis M, whose
                             blocks must restart at group boundaries (quantize them
                             with the GEMM's group_sizes: layout "varying_first").

Numerics: the exact dequantized values (element * 2^(scale - 127)) multiplied
and accumulated in f32, i.e. `dequantize -> f32 matmul`. Exactness of the
dequantized values (checked exhaustively over every code and scale in
tests/test_mxfp8_gemm.py):
  * f32 holds every finite one (e4m3 elements have 4 significant bits, e5m2 3;
    f32 subnormals reach 2^-149, below the smallest value 2^-136 / 2^-143).
  * bf16 holds them for scale exponents e in BF16_EXACT_SCALE_EXPONENTS
    ([3, 246] e4m3, [10, 239] e5m2): with smaller scales the smallest elements
    become bf16 subnormals finer than bf16's 2^-133 step. Such scales only occur
    in blocks whose largest magnitude is below 448 * 2^-125 ~ 1e-35 (e4m3) or
    57344 * 2^-118 ~ 2e-31 (e5m2).
  * above the range (e > 246 / 239) the largest codes overflow f32 too (+-Inf,
    as dequantize documents); TE's scale rule gives such scales only to blocks
    whose largest magnitude is above 1.75 * 2^127 ~ 3e38, near the f32 maximum.
So operands are dequantized to bf16 (the tensor-core GEMM) unless `precision`
is HIGHEST or a plain operand is f32/f16, which give f32 (exact for every value,
on the slower f32 kernel).

Backends. `choose_backend(problem)` picks an entry of BACKENDS for an
`MXFP8GemmProblem` (operands with their orientation resolved, group sizes,
dimension numbers, result dtype) from static facts only:
  * "fused_few_rows": the forward and dgrad of groups averaging at most
    FUSED_MAX_ROWS_PER_GROUP rows (decode, small experts), where the GEMM is a
    stream of the weights. One custom call (MXFP8_RAGGED_M_TARGET, attribute
    rhs_transposed for dgrad's W read rowwise in place): on CUDA, up to 16 rows
    per group on average, a kernel that reads the fp8 weights and their scales
    once per pass of up to 16 group rows (dgrad 32) and multiplies their codes
    on tensor cores, each 32-block's sum scaled once; above that on Hopper (K a
    multiple of 32, N of 16), a wgmma kernel that dequantizes 64-row tiles on load into bf16 in
    shared memory (exact for scales in its range, element by element otherwise);
    no bf16 copy in HBM either way. On the CPU the portable reference. It takes x (dy) rowwise
    ("dense" or "varying_first", grouped by any sizes) and w a "same_dims"
    stack, compact scales, the contracted dimension a multiple of 4, the
    result's columns of 8, no group_offset. Its products are the
    exact f32 ones whatever `precision` says (more exact than the bf16 values
    of "dequantize" only where those are inexact, see above).
    Also the wgrad of groups averaging at most FUSED_WGRAD_MAX_ROWS_PER_GROUP
    rows, whose time is writing the [G, K, N] result: one custom call
    (MXFP8_RAGGED_K_TARGET) of x and dy colwise along the token axis, each with
    its own group sizes (the GEMM's in every real use), compact scales, K and N
    multiples of 8; on CUDA the values dequantized on load, multiplied with f32
    multiply-adds (groups of 32-128 rows: bf16 mma.sync on values bf16 holds
    exactly, else the multiply-adds).
  * "dequantize" (everything else): the MXFP8 dequantize op on each MXFP8
    operand in the orientation the GEMM needs, then the BF16 (or f32) grouped
    GEMM. A dequantized bf16 copy of each operand makes a round trip through
    HBM, so this is slower than BF16 (issue 6: the fused Hopper kernel for
    compute-bound shapes, a mainloop converting fp8 tiles to bf16 in shared
    memory before wgmma, is not built).

  * "blockscaled_sm100" (opt-in: JGG_MXFP8_BACKEND=blockscaled_sm100): one call
    of MXFP8_BLOCKSCALED_TARGET for the forward, dgrad or wgrad, whose CUDA
    handler runs CUTLASS's sm_100 block-scaled grouped GEMM (tcgen05 MMA on the
    fp8 codes, the "swizzled" scales read in place: group g's at its scale
    offset, colwise scales as the transposed operand, which is how
    scale_layout.py lays them out) and whose CPU handler is the reference. It
    is built for sm_100a but was never run on a Blackwell GPU, hence opt-in; on
    any other GPU the call fails with an error naming the compute capability.
    It takes swizzled scales, x (dy) "varying_first" quantized with the GEMM's
    group sizes (so each group's scales are a matrix of their own), w a
    "same_dims" stack (wgrad: x and dy both "varying_first"), contracted and
    result dims multiples of 16, bf16 or f32 results, no group_offset.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

# From the module: the package attribute `ragged_dot` is the function.
import os

import numpy as np

from jax_grouped_gemm import _native
from jax_grouped_gemm.group_sizes import sizes_array, to_int32
from jax_grouped_gemm.ragged_gemm_ops import ffi_call_varying
from jax_grouped_gemm.ragged_dot import BASIC_DIMENSION_NUMBERS
from jax_grouped_gemm.ragged_dot import ragged_dot_general as plain_ragged_dot_general
from jax_grouped_gemm.ragged_dot import merged, result_aval
from jax_grouped_gemm.mxfp8.quantize import check_tensor, dequantize
from jax_grouped_gemm.mxfp8.tensor import MXFP8Tensor

E4M3, E5M2 = jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2)

# dy [M, N] . W [G, K, N] contracting N -> dx [M, K]: dy and W both rowwise.
DGRAD_DIMENSION_NUMBERS = lax.RaggedDotDimensionNumbers(
    dot_dimension_numbers=(([1], [2]), ([], [])), lhs_ragged_dimensions=[0],
    rhs_group_dimensions=[0])
# x [M, K], dy [M, N] contracting the ragged M -> dW [G, K, N]: both colwise along M.
WGRAD_DIMENSION_NUMBERS = lax.RaggedDotDimensionNumbers(
    dot_dimension_numbers=(([0], [0]), ([], [])), lhs_ragged_dimensions=[0],
    rhs_group_dimensions=[])
# Scale exponents e (E8M0, bias 127) for which element * 2^(e - 127) of every finite
# element is exact in bf16, resp. finite (and then exact) in f32. See the module doc.
BF16_EXACT_SCALE_EXPONENTS = {E4M3: (3, 246), E5M2: (10, 239)}
F32_EXACT_SCALE_EXPONENTS = {E4M3: (0, 246), E5M2: (0, 239)}


@dataclasses.dataclass(frozen=True)
class MXFP8Operand:
  """An MXFP8 operand as a GEMM reads it: the tensor and the orientation whose
  32-blocks run along the contracted axis (colwise=False: rowwise)."""
  tensor: MXFP8Tensor
  colwise: bool

  @property
  def data(self):
    return self.tensor.orientation(self.colwise)[0]

  @property
  def scale_inv(self):
    """The scale bytes as the kernels read them: one flat buffer (tensor.py)."""
    leaf = self.tensor.orientation(self.colwise)[1]
    return merged(leaf, (leaf.size,))


@dataclasses.dataclass(frozen=True)
class MXFP8GemmProblem:
  """One grouped GEMM with at least one MXFP8 operand, checked and resolved at trace time.

  What a backend receives: jax.lax.ragged_dot_general's arguments with each
  MXFP8 operand wrapped in an MXFP8Operand, the result dtype decided, and the
  dtype the dequantized values are exact in for this call (`compute_dtype`).
  """
  lhs: jax.Array | MXFP8Operand
  rhs: jax.Array | MXFP8Operand
  group_sizes: jax.Array
  dimension_numbers: lax.RaggedDotDimensionNumbers
  precision: object
  out_dtype: jnp.dtype
  compute_dtype: jnp.dtype
  group_offset: jax.Array | None
  ragged_contracting: bool


def _dequantize_backend(problem: MXFP8GemmProblem) -> jax.Array:
  """Dequantize each MXFP8 operand (an HBM copy), then the plain grouped GEMM."""
  def operand(x):
    if isinstance(x, MXFP8Operand):
      return dequantize(x.tensor, problem.compute_dtype, colwise=x.colwise)
    return x.astype(problem.compute_dtype)
  return plain_ragged_dot_general(
      operand(problem.lhs), operand(problem.rhs), problem.group_sizes,
      problem.dimension_numbers, precision=problem.precision,
      preferred_element_type=problem.out_dtype, group_offset=problem.group_offset)


# Groups averaging at most this many rows take the fused kernels (on Hopper: up to 16 the mma
# kernel on the fp8 codes, above that the wgmma kernel dequantizing on load). Measured on an
# H100 (PERFORMANCE.md, twelfth session, decode dims): at 128 rows per group both GEMMs beat
# the dequantize backend (forward 0.73 against 0.88 ms, dgrad 0.68 against 0.87), at 256
# neither does (1.26 against 0.97); larger groups run the dequantize backend's BF16 tensor
# cores. H200 (PERFORMANCE.md, forty-sixth session, tools/device/mxfp8_backend_crossover.py):
# at 16-128 rows the wgmma kernel takes 0.40-0.93x the dequantize backend's time, the two tie
# at 160 and the backend wins from 192 (forty-seventh session), so one limit serves both chips.
FUSED_MAX_ROWS_PER_GROUP = 128
# The fused wgrad does rows_g multiply-adds per element of the [G, K, N] result, on the CUDA
# cores for most groups (an H100 does about 10 per byte it can write to HBM), so at 8 rows
# per group on average (4 per byte of a bf16 result) they hide behind writing the result;
# calls with larger groups take the dequantize path's CUTLASS GEMM. H200 (PERFORMANCE.md,
# 2026-11-30, tools/device/mxfp8_backend_crossover.py): at 16-128 rows per group the fused
# kernel took 2-50x the dequantize backend's time (its groups of 9-31 and over 128 rows run
# on multiply-adds).
FUSED_WGRAD_MAX_ROWS_PER_GROUP = 8
FUSED_WGRAD_MAX_GROUPS = 65535  # one grid dimension of the CUDA kernel
_FUSED_OUT_DTYPES = tuple(map(jnp.dtype, (jnp.bfloat16, jnp.float16, jnp.float32)))
_FUSED_MAX_EXTENT = 2**31 - 1  # K and N of the forward / dgrad kernels: 32-bit row offsets


def _fused_call(target, out_shape, out_dtype, operands, **attributes) -> jax.Array:
  """ffi_call of a fused kernel, typed for shard_map bodies (ffi_call_varying)."""
  out, = ffi_call_varying(target, (jax.ShapeDtypeStruct(out_shape, out_dtype),), *operands,
                          **attributes)
  return out


def _fused_few_rows_backend(problem: MXFP8GemmProblem) -> jax.Array:
  """One call of a fused MXFP8 grouped GEMM: x rowwise . w colwise stack (forward), dy
  rowwise . (w rowwise stack)^T read in place (dgrad, rhs_transposed), or x^T . dy, both
  colwise along the ragged token axis (wgrad)."""
  lhs, rhs = problem.lhs, problem.rhs
  group_sizes = to_int32(problem.group_sizes)
  if problem.ragged_contracting:
    return _fused_call(
        _native.MXFP8_RAGGED_K_TARGET,
        (group_sizes.shape[0], lhs.tensor.shape[1], rhs.tensor.shape[1]), problem.out_dtype,
        (lhs.data, lhs.scale_inv, rhs.data, rhs.scale_inv, group_sizes,
         to_int32(lhs.tensor.group_sizes), to_int32(rhs.tensor.group_sizes)))
  rhs_transposed = not rhs.colwise
  n = rhs.tensor.shape[1 if rhs_transposed else 2]
  lhs_grouped = lhs.tensor.layout == "varying_first"
  lhs_group_sizes = lhs.tensor.group_sizes if lhs_grouped else jnp.zeros((0,), jnp.int32)
  return _fused_call(
      _native.MXFP8_RAGGED_M_TARGET, (lhs.tensor.shape[0], n), problem.out_dtype,
      (lhs.data, lhs.scale_inv, rhs.data, rhs.scale_inv, group_sizes,
       to_int32(lhs_group_sizes)),
      lhs_grouped=lhs_grouped, rhs_transposed=rhs_transposed)


_BLOCKSCALED_OUT_DTYPES = tuple(map(jnp.dtype, (jnp.bfloat16, jnp.float32)))
BACKEND_ENV = "JGG_MXFP8_BACKEND"


def _blockscaled_backend(problem: MXFP8GemmProblem) -> jax.Array:
  """The block-scaled call where its token operands were quantized with the GEMM's group
  sizes, else the dequantize backend. The kernel locates their scales by the GEMM's sizes,
  so other values would misread them; where the operands do not hold the GEMM's very
  array, the values are compared on the device (a conditional: no host sync)."""
  grouped = (problem.lhs, problem.rhs) if _blockscaled_gemm(problem.dimension_numbers) == 2 else (
      problem.lhs,)
  unproven = [q.tensor.group_sizes for q in grouped
              if q.tensor.group_sizes is not problem.group_sizes]
  if not unproven:
    return _blockscaled_call(problem)
  gemm_sizes = to_int32(problem.group_sizes)
  same = functools.reduce(jnp.logical_and,
                          [jnp.all(to_int32(s) == gemm_sizes) for s in unproven])
  return lax.cond(same, lambda: _blockscaled_call(problem), lambda: _dequantize_backend(problem))


def _blockscaled_call(problem: MXFP8GemmProblem) -> jax.Array:
  """One block-scaled grouped GEMM call: group g's operands and swizzled scales in place."""
  lhs, rhs = problem.lhs, problem.rhs
  gemm = _blockscaled_gemm(problem.dimension_numbers)
  num_groups = problem.group_sizes.shape[0]
  (m, k) = lhs.tensor.shape
  if gemm == 2:  # wgrad: [G, K, N]
    out_shape = (num_groups, k, rhs.tensor.shape[1])
  else:
    out_shape = (m, rhs.tensor.shape[2 if gemm == 0 else 1])
  out = jax.ShapeDtypeStruct(out_shape, problem.out_dtype)
  workspace = jax.ShapeDtypeStruct((_native.mxfp8_blockscaled_workspace_bytes(num_groups),),
                                   jnp.uint8)
  result, _ = ffi_call_varying(_native.MXFP8_BLOCKSCALED_TARGET, (out, workspace), lhs.data,
                               lhs.scale_inv, rhs.data, rhs.scale_inv,
                               to_int32(problem.group_sizes), gemm=np.int32(gemm))
  return result


BACKENDS: dict[str, Callable[[MXFP8GemmProblem], jax.Array]] = {
    "dequantize": _dequantize_backend,
    "fused_few_rows": _fused_few_rows_backend,
    "blockscaled_sm100": _blockscaled_backend,
}


def fused_few_rows_misfit(problem: MXFP8GemmProblem) -> str | None:
  """Why "fused_few_rows" cannot compute `problem` (None: it can); static facts only."""
  lhs, rhs = problem.lhs, problem.rhs
  if not (isinstance(lhs, MXFP8Operand) and isinstance(rhs, MXFP8Operand)):
    return "a plain operand"
  if lhs.tensor.scale_layout != "compact" or rhs.tensor.scale_layout != "compact":
    return "swizzled scales"
  if problem.group_offset is not None:
    return "a group_offset"
  if problem.group_sizes.ndim != 1:
    return "batched group sizes"
  if problem.out_dtype not in _FUSED_OUT_DTYPES:
    return f"result dtype {problem.out_dtype}"
  if problem.ragged_contracting:
    return _fused_wgrad_misfit(problem)
  dims = _as_tuples(problem.dimension_numbers)
  if dims not in (_as_tuples(BASIC_DIMENSION_NUMBERS), _as_tuples(DGRAD_DIMENSION_NUMBERS)):
    return "not the forward's or dgrad's dimension numbers"
  if len(lhs.tensor.shape) != 2:
    return "x is not a matrix"
  # The orientation follows from the dimension numbers: the forward's w colwise, dgrad's rowwise.
  assert not lhs.colwise and rhs.colwise == (dims == _as_tuples(BASIC_DIMENSION_NUMBERS))
  if rhs.tensor.layout != "same_dims":
    return "w is not a stack"
  if lhs.tensor.layout not in ("dense", "varying_first"):
    return f"x has layout {lhs.tensor.layout!r}"
  (m, k), n = lhs.tensor.shape, rhs.tensor.shape[2 if rhs.colwise else 1]
  if k % 4 or n % 8:
    return (f"contracted dim {k} not a multiple of 4 or result columns {n} not a multiple "
            "of 8")
  if max(k, n) > _FUSED_MAX_EXTENT:
    return f"contracted dim {k} or result columns {n} past {_FUSED_MAX_EXTENT} (32-bit offsets)"
  if m > FUSED_MAX_ROWS_PER_GROUP * rhs.tensor.shape[0]:
    return f"more than {FUSED_MAX_ROWS_PER_GROUP} rows per group on average (compute-bound)"
  return None


def _fused_wgrad_misfit(problem: MXFP8GemmProblem) -> str | None:
  """The wgrad part of fused_few_rows_misfit (both operands MXFP8 with compact scales)."""
  if _as_tuples(problem.dimension_numbers) != _as_tuples(WGRAD_DIMENSION_NUMBERS):
    return "not wgrad's dimension numbers"
  # resolve_problem made both colwise "varying_first" tensors with the GEMM's number of groups.
  (m, k), n = problem.lhs.tensor.shape, problem.rhs.tensor.shape[1]
  num_groups = problem.group_sizes.shape[0]
  if k % 8 or n % 8:
    return f"result dims {k} x {n} not multiples of 8"
  if num_groups > FUSED_WGRAD_MAX_GROUPS:
    return f"more than {FUSED_WGRAD_MAX_GROUPS} groups"
  if m > FUSED_WGRAD_MAX_ROWS_PER_GROUP * num_groups:
    return (f"more than {FUSED_WGRAD_MAX_ROWS_PER_GROUP} rows per group on average "
            "(compute-bound)")
  return None


def blockscaled_misfit(problem: MXFP8GemmProblem) -> str | None:
  """Why "blockscaled_sm100" cannot compute `problem` (None: it can); static facts only."""
  lhs, rhs = problem.lhs, problem.rhs
  if not (isinstance(lhs, MXFP8Operand) and isinstance(rhs, MXFP8Operand)):
    return "a plain operand"
  gemm = _blockscaled_gemm(problem.dimension_numbers)
  if gemm is None:
    return "not the forward's, dgrad's or wgrad's dimension numbers"
  if lhs.tensor.scale_layout != "swizzled" or rhs.tensor.scale_layout != "swizzled":
    return "compact scales"
  if problem.group_offset is not None:
    return "a group_offset"
  if problem.group_sizes.ndim != 1:
    return "batched group sizes"
  grouped = (lhs, rhs) if gemm == 2 else (lhs,)
  for q in grouped:
    if q.tensor.layout != "varying_first" or q.tensor.group_sizes.shape != problem.group_sizes.shape:
      return "a token operand not quantized with the GEMM's group sizes (varying_first)"
  if gemm != 2 and rhs.tensor.layout != "same_dims":
    return "w is not a stack"
  dims = (lhs.tensor.shape[1], rhs.tensor.shape[-1] if gemm != 1 else rhs.tensor.shape[1])
  if any(d % 16 for d in dims):
    return f"dims {dims} not multiples of 16"
  if problem.out_dtype not in _BLOCKSCALED_OUT_DTYPES:
    return f"result dtype {problem.out_dtype}"
  if max(lhs.tensor.shape[0], *dims) >= 2**31:
    return "an extent of 2**31 or more (CUTLASS's int problem shapes)"
  if gemm == 2 and problem.group_sizes.shape[0] > 65535:
    return "a wgrad of more than 65535 groups (one grid row per group)"
  return None


def _blockscaled_gemm(dims: lax.RaggedDotDimensionNumbers) -> int | None:
  """The block-scaled call's `gemm` attribute (0 forward, 1 dgrad, 2 wgrad) for these
  dimension numbers, or None."""
  known = (BASIC_DIMENSION_NUMBERS, DGRAD_DIMENSION_NUMBERS, WGRAD_DIMENSION_NUMBERS)
  matches = [i for i, d in enumerate(known) if _as_tuples(d) == _as_tuples(dims)]
  return matches[0] if matches else None


def _as_tuples(dims: lax.RaggedDotDimensionNumbers):
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dims.dot_dimension_numbers
  return tuple(tuple(axes) for axes in (lhs_contract, rhs_contract, lhs_batch, rhs_batch,
                                        dims.lhs_ragged_dimensions, dims.rhs_group_dimensions))


def choose_backend(problem: MXFP8GemmProblem) -> str:
  """The BACKENDS entry that computes `problem`; static facts only (never device values).

  $JGG_MXFP8_BACKEND=blockscaled_sm100 asks for the sm_100 kernels (read at trace time)
  wherever they fit the call; other calls choose as without it.
  """
  if os.environ.get(BACKEND_ENV) == "blockscaled_sm100" and blockscaled_misfit(problem) is None:
    return "blockscaled_sm100"
  return "fused_few_rows" if fused_few_rows_misfit(problem) is None else "dequantize"


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None):
  """jgg.ragged_dot with MXFP8Tensor operands allowed: lhs [m, k] . rhs [g, k, n] -> [m, n].

  An MXFP8 lhs is read rowwise, an MXFP8 rhs (a [g, k, n] stack) colwise.
  """
  return ragged_dot_general(lhs, rhs, group_sizes, BASIC_DIMENSION_NUMBERS,
                            precision=precision, preferred_element_type=preferred_element_type,
                            group_offset=group_offset)


def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision=None,
                       preferred_element_type=None, group_offset=None):
  """jgg.ragged_dot_general with MXFP8Tensor operands allowed (see the module doc).

  Result dtype: `preferred_element_type`, else the one jax.lax gives when each
  MXFP8 operand is taken as bf16 (bf16 for two MXFP8 operands; f32 with an f32
  operand). Plain operands alone go straight to jgg.ragged_dot_general.
  """
  if not (isinstance(lhs, MXFP8Tensor) or isinstance(rhs, MXFP8Tensor)):
    return plain_ragged_dot_general(
        lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision=precision,
        preferred_element_type=preferred_element_type, group_offset=group_offset)
  problem = resolve_problem(lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision,
                            preferred_element_type, group_offset)
  return BACKENDS[choose_backend(problem)](problem)


def resolve_problem(lhs, rhs, group_sizes, dims, precision=None, preferred_element_type=None,
                    group_offset=None) -> MXFP8GemmProblem:
  """Checks the MXFP8 operands against the dimension numbers; errors name the argument."""
  group_sizes = sizes_array(group_sizes)
  if not jnp.issubdtype(group_sizes.dtype, jnp.integer):
    raise TypeError(f"group_sizes: expected an integer dtype, got {group_sizes.dtype}")
  (lhs_contract, rhs_contract), _ = dims.dot_dimension_numbers
  if len(lhs_contract) != len(rhs_contract):
    raise TypeError("ragged_dot_dimension_numbers: lhs and rhs contracting dimensions differ in "
                    f"number: {list(lhs_contract)} and {list(rhs_contract)}")
  if len(dims.lhs_ragged_dimensions) != 1:
    raise TypeError("ragged_dot_dimension_numbers: expected exactly one lhs ragged dimension, "
                    f"got {dims.lhs_ragged_dimensions}")
  lhs_ragged = dims.lhs_ragged_dimensions[0]
  ragged_contracting = lhs_ragged in lhs_contract
  # In a ragged contraction the rhs axis paired with the lhs ragged axis is ragged too.
  rhs_ragged = (rhs_contract[list(lhs_contract).index(lhs_ragged)] if ragged_contracting
                else None)
  operands = []
  for name, x, contract, ragged in (("lhs", lhs, lhs_contract, lhs_ragged),
                                    ("rhs", rhs, rhs_contract, rhs_ragged)):
    if isinstance(x, MXFP8Tensor):
      x = _oriented(name, x, contract, ragged if ragged_contracting else None, group_sizes)
    else:
      x = jnp.asarray(x)
    operands.append(x)
  lhs, rhs = operands
  plain = [x.dtype for x in operands if not isinstance(x, MXFP8Operand)]
  if preferred_element_type is None:
    out_dtype = jnp.dtype(jnp.result_type(jnp.bfloat16, *plain))
  else:
    out_dtype = jnp.dtype(preferred_element_type)
  # Shapes and the result dtype by the plain path's rules (jax.lax's), each MXFP8 operand
  # taken at its logical shape: a mismatch fails here, not in the kernel at run time.
  result_aval(*(jax.ShapeDtypeStruct(tuple(x.tensor.shape), jnp.bfloat16)
                if isinstance(x, MXFP8Operand) else x for x in operands),
              group_sizes, dims, precision, out_dtype, group_offset is not None)
  wants_f32 = _asks_for_highest(precision) or any(d != jnp.dtype(jnp.bfloat16) for d in plain)
  compute_dtype = jnp.dtype(jnp.float32 if wants_f32 else jnp.bfloat16)
  return MXFP8GemmProblem(lhs, rhs, group_sizes, dims, precision, out_dtype, compute_dtype,
                          group_offset, ragged_contracting)


def _oriented(name, q: MXFP8Tensor, contract, ragged_axis, group_sizes) -> MXFP8Operand:
  """The orientation of q whose blocks run along its one contracted axis."""
  check_tensor(name, q)
  rank = len(q.shape)
  if len(contract) != 1:
    raise TypeError(f"{name}: an MXFP8 operand must contract exactly one axis (its 32-blocks "
                    f"run along it), got contracting dimensions {list(contract)}")
  axis = contract[0]
  if axis not in (rank - 1, rank - 2):
    raise TypeError(f"{name}: MXFP8 blocks run along axis {rank - 1} (rowwise) or {rank - 2} "
                    f"(colwise) of shape {q.shape}; the GEMM contracts axis {contract[0]}")
  colwise = axis == rank - 2
  if not (q.colwise if colwise else q.rowwise):
    which = "colwise" if colwise else "rowwise"
    raise ValueError(f"{name}: the GEMM contracts axis {axis} of shape {q.shape}, which needs "
                     f"{which} data; quantize with {which}=True")
  if ragged_axis is not None:
    _check_blocks_restart_at_groups(name, q, axis, group_sizes)
  return MXFP8Operand(q, colwise)


def _check_blocks_restart_at_groups(name, q: MXFP8Tensor, axis, group_sizes):
  """A ragged contraction needs 32-blocks that never span two groups: q grouped along axis."""
  wanted = {0: "varying_first", 1: "varying_last"}.get(axis) if len(q.shape) == 2 else None
  if q.layout != wanted:
    raise ValueError(
        f"{name}: the GEMM contracts the ragged axis {axis} of shape {q.shape}, so its blocks "
        f"must restart at group boundaries: quantize it with the GEMM's group_sizes"
        f"{'' if wanted is None else f' and ragged_axis={axis} (layout {wanted!r})'}; "
        f"got layout {q.layout!r}")
  if q.group_sizes.shape != group_sizes.shape[-1:] or group_sizes.ndim != 1:
    raise ValueError(f"{name}: quantized with group_sizes of shape {q.group_sizes.shape}, the "
                     f"GEMM's group_sizes have shape {group_sizes.shape}; they must be the same")


def _asks_for_highest(precision) -> bool:
  precisions = precision if isinstance(precision, (tuple, list)) else (precision,)
  for p in precisions:
    try:
      if p is not None and lax.Precision(p) == lax.Precision.HIGHEST:
        return True
    except (ValueError, TypeError):  # a DotAlgorithmPreset or the like: not a Precision
      pass
  return False
