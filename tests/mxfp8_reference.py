"""NumPy reference of MXFP8 quantization (TransformerEngine's scale rule), for bit-exact tests.

Written independently of the C++ integer rounding: it uses float32 NumPy arithmetic (IEEE, with
denormals) and ml_dtypes' float8 casts, the way TE's own CPU reference does:
  amax = max |x| of a block, NaN ignored (np.fmax);  s = float32(amax) * float32(1 / max_norm);
  e    = TE float_to_e8m0(s)  (exponent of s, +1 if its mantissa is non-zero; NaN 0xFF, Inf 0xFE,
         0 -> 0, an fp32-denormal s <= 2^-127 -> 0, exponent 0xFE never rounds up);
  q    = float8(clip(x * float32(2^(127 - e)), -max, max))  (RNE; satfinite), NaN -> 0x7F;
  dequantized = round(float64(q) * 2^(e - 127)) to the output dtype (exact in float64).
Functions work on one 2-D matrix (one group); grouped tests compare group by group.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BLOCK = 32
FP8 = {
    "float8_e4m3fn": (ml_dtypes.float8_e4m3fn, 448.0),
    "float8_e5m2": (ml_dtypes.float8_e5m2, 57344.0),
}
CANONICAL_NAN = {np.dtype(np.float32): 0x7FC00000, np.dtype(ml_dtypes.bfloat16): 0x7FC0,
                 np.dtype(np.float16): 0x7E00}
UINT_OF = {4: np.uint32, 2: np.uint16, 1: np.uint8}


def fp8_info(dtype):
  return FP8[np.dtype(dtype).name]


def scale_exponent(amax, dtype) -> np.ndarray:
  """E8M0 scale exponents (uint8) of float32 block maxima, TE's rule."""
  _, max_norm = fp8_info(dtype)
  with np.errstate(over="ignore", invalid="ignore"):
    s = np.asarray(amax, np.float32) * np.float32(1.0 / max_norm)
  bits = s.view(np.uint32) & np.uint32(0x7FFFFFFF)
  exponent = (bits >> 23).astype(np.int64)
  mantissa = (bits & 0x7FFFFF).astype(np.int64)
  round_up = (mantissa > 0) & (exponent != 0xFE) & ~((exponent == 0) & (mantissa <= 0x400000))
  e = exponent + round_up
  e = np.where(bits > 0x7F800000, 0xFF, np.where(bits == 0x7F800000, 0xFE, e))
  return e.astype(np.uint8)


def scale_reciprocal(e) -> np.ndarray:
  """float32 2^(127 - e) (TE's exp2f_rcp): NaN for 0xFF, the denormal 2^-127 for 0xFE."""
  e = np.asarray(e, np.int64)
  bits = np.where(e == 0xFF, 0x7FFFFFFF, np.where(e == 0xFE, 0x00400000, (254 - e) << 23))
  return bits.astype(np.uint32).view(np.float32)


def quantize_elements(x, e, dtype) -> np.ndarray:
  """uint8 fp8 bits of satfinite-RNE(x * 2^(127 - e)); x float32, e broadcastable."""
  fp8, max_norm = fp8_info(dtype)
  with np.errstate(over="ignore", invalid="ignore", under="ignore"):
    scaled = np.asarray(x, np.float32) * scale_reciprocal(e)
    clipped = np.clip(scaled, -max_norm, max_norm)  # NaN stays NaN
  bits = clipped.astype(fp8).view(np.uint8)
  return np.where(np.isnan(scaled), np.uint8(0x7F), bits).astype(np.uint8)


def _block_amax(blocks):
  """float32 max |x| over the last axis, NaN ignored, 0 for empty or all-NaN blocks."""
  return np.fmax.reduce(np.abs(blocks), axis=-1, initial=np.float32(0)).astype(np.float32)


def quantize_2d(x, dtype, colwise: bool = False):
  """One matrix x [R, C] (any float dtype; exact in float32) -> (data uint8 [R, C], scales).

  Rowwise scales are [R, ceil(C/32)] (1x32 blocks along rows), colwise ones
  [ceil(R/32), C] (32x1 blocks along columns); the last block may be partial.
  """
  x = np.asarray(x).astype(np.float32)
  if colwise:
    data, scales = quantize_2d(x.T, dtype, colwise=False)
    return data.T.copy(), scales.T.copy()
  rows, cols = x.shape
  blocks = -(-cols // BLOCK)
  padded = np.zeros((rows, blocks * BLOCK), np.float32)
  padded[:, :cols] = x
  grouped = padded.reshape(rows, blocks, BLOCK)
  e = scale_exponent(_block_amax(grouped), dtype)
  data = quantize_elements(grouped, e[:, :, None], dtype).reshape(rows, blocks * BLOCK)[:, :cols]
  return data, e


def padded_scales(scales, colwise: bool) -> np.ndarray:
  """The compact padded scale matrix: rowwise [128*ceil(r/128), 4*ceil(c/4)] of a [r, c] scale
  matrix, colwise [4*ceil(r/4), 128*ceil(c/128)]; padding is 0."""
  r, c = scales.shape
  tile = (4, 128) if colwise else (128, 4)
  out = np.zeros((-(-r // tile[0]) * tile[0], -(-c // tile[1]) * tile[1]), np.uint8)
  out[:r, :c] = scales
  return out


def swizzle(padded, colwise: bool) -> np.ndarray:
  """Flat 128x4-interleaved scales of a compact padded matrix (colwise: of its transpose)."""
  m = padded.T if colwise else padded
  rows, cols = m.shape
  i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
  index = ((i // 128) * (cols // 4) + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4
  out = np.zeros(rows * cols, np.uint8)
  out[index.reshape(-1)] = m.reshape(-1)
  return out


def scale_region(scales, colwise: bool, swizzled: bool) -> np.ndarray:
  """The flat bytes a group's scales occupy in a scale buffer."""
  padded = padded_scales(scales, colwise)
  return swizzle(padded, colwise) if swizzled else padded.reshape(-1)


def group_scale_bytes(rows: int, cols: int) -> int:
  return 512 * (-(-rows // 128)) * (-(-cols // 128))


def dequantize_2d(data, scales, dtype, colwise: bool, out_dtype) -> np.ndarray:
  """Output bits (unsigned ints of out_dtype's width) of data * 2^(e - 127) rounded to out_dtype."""
  fp8, _ = fp8_info(dtype)
  out_dtype = np.dtype(out_dtype)
  rows, cols = data.shape
  e = np.repeat(scales, BLOCK, axis=0)[:rows] if colwise else np.repeat(scales, BLOCK, axis=1)[:, :cols]
  q = np.asarray(data, np.uint8).view(fp8).astype(np.float64)
  with np.errstate(over="ignore", invalid="ignore"):
    exact = q * np.exp2(e.astype(np.float64) - 127.0)
    exact = np.where(e == 0xFF, np.nan, exact)
    if out_dtype == np.dtype(ml_dtypes.bfloat16):
      out = exact.astype(np.float32).astype(out_dtype)  # exact in float32: one rounding
    else:
      out = exact.astype(out_dtype)
  bits = out.view(UINT_OF[out_dtype.itemsize])
  return np.where(np.isnan(exact), bits.dtype.type(CANONICAL_NAN[out_dtype]), bits)


def bits_of(array) -> np.ndarray:
  """The raw bits of a float array as unsigned ints (for bit-exact comparisons)."""
  array = np.asarray(array)
  return array.view(UINT_OF[array.dtype.itemsize])
