"""MXFP8 quantize / dequantize of one matrix: bit-exact against the NumPy reference of
TransformerEngine's rule, special values, both element types and orientations, scale layouts,
trace-time errors.

Runs on the default backend: the CPU kernels in CI, the CUDA kernels on a GPU. Outputs are
poisoned before every kernel (conftest), and the comparisons cover every byte, padding included.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native
import mxfp8_reference as ref

mxfp8 = jgg.mxfp8
IN_DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]
FP8_DTYPES = [jnp.float8_e4m3fn, jnp.float8_e5m2]
ORIENTATIONS = {"rowwise": (True, False), "colwise": (False, True), "both": (True, True)}
name = lambda d: jnp.dtype(d).name

# Exponent ranges (of normal values) an input dtype can hold.
EXPONENTS = {"float32": (-126, 127), "bfloat16": (-126, 127), "float16": (-14, 15)}


def special_matrix(rng, shape, in_dtype, fp8_dtype):
  """Values over the input dtype's whole range, block by block, with every edge case:
  all-zero blocks, denormals, signed zeros, block maxima at / just beyond max_norm * 2^k
  (where the fp32 reciprocal rounds), the dtype's largest values, NaN (alone and whole blocks),
  +-Inf."""
  rows, cols = shape
  lo, hi = EXPONENTS[name(in_dtype)]
  # Each 32x32 tile gets its own base binade; elements spread over 24 binades below it.
  base = rng.integers(lo + 24, hi + 1, size=(-(-rows // 32), -(-cols // 32)))
  base = np.repeat(np.repeat(base, 32, 0), 32, 1)[:rows, :cols]
  x = rng.uniform(1, 2, shape) * np.exp2(base - rng.integers(0, 24, shape).astype(np.float64))
  x *= rng.choice([-1.0, 1.0], shape)
  flat = x.reshape(-1)
  n = flat.size
  pick = lambda k: rng.choice(n, size=k, replace=False)
  max_norm = ref.fp8_info(fp8_dtype)[1]
  tiny = 2.0 ** (lo - 1)
  flat[pick(n // 50)] = rng.uniform(0, 1, n // 50) * tiny  # denormals of the input dtype
  flat[pick(n // 100)] = -0.0
  for k in (0, 1, 2, 3, 5, 7):  # max_norm * 2^j * (1 + k ulp): the rcp-rounding boundary
    idx = pick(n // 200)
    flat[idx] = max_norm * np.exp2(rng.integers(lo + 10, hi - 10, idx.size)) * (1 + k * 2.0 ** -23)
  finfo_max = float(jnp.finfo(in_dtype).max)
  # Sparse enough that most blocks keep a finite, ordinary scale.
  flat[pick(n // 1000)] = finfo_max * rng.choice([-1.0, 1.0], n // 1000)
  flat[pick(n // 100)] = np.nan
  flat[pick(n // 2000)] = np.inf
  flat[pick(n // 2000)] = -np.inf
  x = flat.reshape(shape)
  x[:32, 32:64] = 0.0  # an all-zero block (both orientations)
  x[32:64, :32] = np.nan  # an all-NaN block
  x[-1, :] = tiny / 4  # a row of denormals
  with np.errstate(over="ignore"):
    return x.astype(in_dtype)


def _quantize(x, fp8_dtype, orientation, scale_layout="compact"):
  rowwise, colwise = ORIENTATIONS[orientation]
  return mxfp8.quantize(x, rowwise=rowwise, colwise=colwise, dtype=fp8_dtype,
                        scale_layout=scale_layout)


def _check_orientation(q, x, fp8_dtype, colwise, swizzled=False):
  data, scales = q.orientation(colwise)
  want_data, want_scales = ref.quantize_2d(x, fp8_dtype, colwise)
  got = np.asarray(data).view(np.uint8)
  bad = np.argwhere(got != want_data)
  assert bad.size == 0, (f"{bad.shape[0]} data bytes differ, first at {bad[0]}: x="
                         f"{np.asarray(x, np.float32)[tuple(bad[0])]} got {got[tuple(bad[0])]:#x} "
                         f"want {want_data[tuple(bad[0])]:#x}")
  np.testing.assert_array_equal(np.asarray(scales).reshape(-1),
                                ref.scale_region(want_scales, colwise, swizzled))
  return want_data, want_scales


@pytest.mark.parametrize("orientation", ORIENTATIONS)
@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES, ids=name)
@pytest.mark.parametrize("in_dtype", IN_DTYPES, ids=name)
def test_bit_exact_on_special_values(in_dtype, fp8_dtype, orientation):
  rng = np.random.default_rng(hash((name(in_dtype), name(fp8_dtype), orientation)) % 2**32)
  x = special_matrix(rng, (161, 301), in_dtype, fp8_dtype)  # partial blocks both ways
  q = _quantize(x, fp8_dtype, orientation)
  assert q.shape == x.shape and q.dtype == jnp.dtype(fp8_dtype)
  rowwise, colwise = ORIENTATIONS[orientation]
  for c in (False, True):
    if (rowwise, colwise)[c]:
      _check_orientation(q, x, fp8_dtype, c)
    else:
      assert (q.colwise_data if c else q.data) is None
      assert (q.colwise_scale_inv if c else q.scale_inv) is None


@pytest.mark.parametrize("colwise", [False, True], ids=["rowwise", "colwise"])
@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES, ids=name)
def test_scale_of_every_bfloat16_amax(fp8_dtype, colwise):
  """Every bf16 bit pattern as a block's amax (alone in its block): the scale and the element."""
  values = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
  x = np.zeros((values.size, 32), ml_dtypes.bfloat16)
  x[:, 7] = values
  x = x.T if colwise else x
  q = mxfp8.quantize(x, rowwise=not colwise, colwise=colwise, dtype=fp8_dtype)
  _check_orientation(q, x, fp8_dtype, colwise)


@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES, ids=name)
def test_random_float32_bit_patterns(fp8_dtype):
  """Any float32 bits (NaN payloads, denormals, every binade), blocks of mixed magnitudes."""
  rng = np.random.default_rng(7)
  x = rng.integers(0, 1 << 32, size=(512, 256), dtype=np.uint64).astype(np.uint32).view(np.float32)
  q = mxfp8.quantize(x, rowwise=True, colwise=True, dtype=fp8_dtype)
  _check_orientation(q, x, fp8_dtype, False)
  _check_orientation(q, x, fp8_dtype, True)


def test_scale_rule_edge_cases():
  """The rule's documented corners, on hand-picked block maxima (E4M3, rowwise)."""
  cases = {  # amax -> expected E8M0
      0.0: 0x00,                          # all-zero block
      448.0: 127,                         # exactly max_norm: scale 2^0
      448.0 * (1 + 2.0 ** -23): 128,      # just above: rounds up
      1.0: 119,                           # 1/448 = 2^-8.8 -> 2^-8
      float(np.float32(2.0 ** -149)): 0,  # fp32 denormal s <= 2^-127 -> 0
      float(np.inf): 0xFE,
      float(np.finfo(np.float32).max): 247,
  }
  x = np.zeros((len(cases), 32), np.float32)
  x[:, 0] = list(cases)
  q = mxfp8.quantize(x)
  got = np.asarray(q.scale_inv).reshape(128, 4)[: len(cases), 0]
  np.testing.assert_array_equal(got, list(cases.values()))
  np.testing.assert_array_equal(ref.scale_exponent(np.abs(x[:, 0]), jnp.float8_e4m3fn),
                                list(cases.values()))
  # NaN elements are ignored by amax and become 0x7F; Inf saturates to +-448 (0x7E / 0xFE).
  y = np.array([[np.nan, -np.nan, np.inf, -np.inf, 1.0] + [0.0] * 27], np.float32)
  qy = mxfp8.quantize(y)
  assert int(np.asarray(qy.scale_inv)[0, 0]) == 0xFE
  np.testing.assert_array_equal(np.asarray(qy.data).view(np.uint8)[0, :5], [0x7F, 0x7F, 0x7E, 0xFE, 0])


@pytest.mark.parametrize("out_dtype", IN_DTYPES, ids=name)
@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES, ids=name)
@pytest.mark.parametrize("colwise", [False, True], ids=["rowwise", "colwise"])
def test_dequantize_round_trip_bit_exact(colwise, fp8_dtype, out_dtype):
  rng = np.random.default_rng(3)
  x = special_matrix(rng, (97, 130), jnp.float32, fp8_dtype)
  q = mxfp8.quantize(x, rowwise=not colwise, colwise=colwise, dtype=fp8_dtype)
  y = mxfp8.dequantize(q, out_dtype)
  assert y.shape == x.shape and y.dtype == jnp.dtype(out_dtype)
  want_data, want_scales = ref.quantize_2d(x, fp8_dtype, colwise)
  np.testing.assert_array_equal(
      ref.bits_of(y), ref.dequantize_2d(want_data, want_scales, fp8_dtype, colwise, out_dtype))


def test_dequantize_picks_the_orientation_asked_for():
  rng = np.random.default_rng(4)
  x = rng.standard_normal((64, 64)).astype(np.float32) * np.exp2(rng.integers(-8, 8, (64, 64)))
  q = mxfp8.quantize(x, rowwise=True, colwise=True)
  for colwise in (False, True):
    d, s = ref.quantize_2d(x, jnp.float8_e4m3fn, colwise)
    np.testing.assert_array_equal(
        ref.bits_of(mxfp8.dequantize(q, jnp.float32, colwise=colwise)),
        ref.dequantize_2d(d, s, jnp.float8_e4m3fn, colwise, np.float32))
  # The rowwise and colwise round trips are different roundings of the same values.
  assert not np.array_equal(np.asarray(mxfp8.dequantize(q, jnp.float32)),
                            np.asarray(mxfp8.dequantize(q, jnp.float32, colwise=True)))


@pytest.mark.parametrize("orientation", ORIENTATIONS)
@pytest.mark.parametrize("shape", [(300, 700), (1, 1), (129, 33)], ids=str)
def test_swizzled_scales_match_the_interleave_formula(shape, orientation):
  rng = np.random.default_rng(5)
  x = special_matrix(rng, shape, jnp.bfloat16, jnp.float8_e4m3fn) if min(shape) > 64 else \
      rng.standard_normal(shape).astype(jnp.bfloat16)
  rowwise, colwise = ORIENTATIONS[orientation]
  q = _quantize(x, jnp.float8_e4m3fn, orientation, scale_layout="swizzled")
  compact = _quantize(x, jnp.float8_e4m3fn, orientation)
  for c in (False, True):
    if (rowwise, colwise)[c]:
      _check_orientation(q, x, jnp.float8_e4m3fn, c, swizzled=True)
      np.testing.assert_array_equal(np.asarray(q.orientation(c)[0]).view(np.uint8),
                                    np.asarray(compact.orientation(c)[0]).view(np.uint8))
  # Conversions between the layouts round-trip exactly.
  for a, b in ((compact, q), (q, compact)):
    converted = mxfp8.with_scale_layout(a, b.scale_layout)
    for got, want in ((converted.scale_inv, b.scale_inv),
                      (converted.colwise_scale_inv, b.colwise_scale_inv)):
      if want is not None:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("dims", [(128, 4), (256, 8), (384, 12)], ids=str)
def test_swizzle_helpers_round_trip(dims):
  rng = np.random.default_rng(6)
  m = rng.integers(0, 256, size=(2,) + dims, dtype=np.uint8)
  flat = mxfp8.swizzle_scale_matrix(m)
  for i in range(2):
    np.testing.assert_array_equal(flat[i], ref.swizzle(m[i], colwise=False))
  np.testing.assert_array_equal(mxfp8.unswizzle_scale_matrix(flat, *dims), m)
  np.testing.assert_array_equal(np.asarray(mxfp8.unswizzle_scale_matrix(jnp.asarray(flat), *dims)), m)


@pytest.mark.parametrize("flat_len, dims, message", [
    (100 * 4, (128, 4), r"flat: expected \[..., 512\]"),  # a cut buffer
    (512, (64, 8), r"rows, cols: expected dims padded"),  # same bytes, dims not in tiles
], ids=["cut", "unpadded"])
def test_unswizzle_refuses_what_swizzle_cannot_give(flat_len, dims, message):
  with pytest.raises(ValueError, match=message):
    mxfp8.unswizzle_scale_matrix(np.zeros((flat_len,), np.uint8), *dims)


def test_scale_buffer_sizes_are_the_padded_tiles():
  # A single matrix: rowwise [roundup(rows, 128), roundup(cols / 32, 4)] and the colwise mirror.
  for rows, cols in ((1, 1), (128, 128), (129, 33), (1000, 4096)):
    want = (-(-rows // 128) * 128) * (-(-(-(-cols // 32)) // 4) * 4)
    assert _native.mxfp8_scale_bytes(0, 1, rows, cols) == want
    q = mxfp8.quantize(np.ones((rows, cols), np.float32), colwise=True)
    row_tiles, col_tiles = -(-rows // 128), -(-cols // 128)
    # The leaves keep the data's axes: the padded scale matrices (tensor.py).
    assert q.scale_inv.shape == (128 * row_tiles, 4 * col_tiles)
    assert q.colwise_scale_inv.shape == (4 * row_tiles, 128 * col_tiles)
    assert q.scale_inv.size == q.colwise_scale_inv.size == want
    assert q.scale_inv.dtype == jnp.uint8
    swizzled = mxfp8.quantize(np.ones((rows, cols), np.float32), colwise=True,
                              scale_layout="swizzled")
    assert swizzled.scale_inv.shape == (row_tiles, col_tiles * 512)
    assert swizzled.colwise_scale_inv.shape == (col_tiles, row_tiles * 512)


def test_v1_targets_stay_registered_and_agree_with_v2():
  """Artifacts exported before the workspace result (_v2) name the _v1 targets: they still run
  (a static job split on CUDA) and give the same bytes."""
  rng = np.random.default_rng(11)
  x = jnp.asarray(rng.standard_normal((300, 200)) * 8, jnp.bfloat16)
  sizes = jnp.asarray([100, 0, 150, 3], jnp.int32)
  q = jgg.mxfp8.quantize(x, sizes, rowwise=True, colwise=True)
  quantize_v1, dequantize_v1 = _native.MXFP8_LEGACY_TARGETS
  assert (quantize_v1, dequantize_v1) == ("jgg_mxfp8_quantize_v1", "jgg_mxfp8_dequantize_v1")
  data = jax.ShapeDtypeStruct(x.shape, jnp.float8_e4m3fn)
  scales = jax.ShapeDtypeStruct(q.scale_inv.shape, jnp.uint8)
  attrs = dict(layout=np.int32(1), swizzled=False)
  v1 = jax.ffi.ffi_call(quantize_v1, (data, scales, data, scales))(
      x, sizes, rowwise=True, colwise=True, **attrs)
  for got, want in zip(v1, (q.data, q.scale_inv, q.colwise_data, q.colwise_scale_inv)):
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))
  out = jax.ffi.ffi_call(dequantize_v1, jax.ShapeDtypeStruct(x.shape, jnp.bfloat16))(
      q.data, q.scale_inv, sizes, colwise=False, **attrs)
  np.testing.assert_array_equal(np.asarray(out).view(np.uint16),
                                np.asarray(jgg.mxfp8.dequantize(q)).view(np.uint16))


def test_lowers_to_our_custom_calls():
  x = jnp.ones((64, 64), jnp.bfloat16)
  text = jax.jit(lambda x: mxfp8.dequantize(mxfp8.quantize(x))).lower(x).as_text()
  assert f"custom_call @{_native.MXFP8_QUANTIZE_TARGET}" in text
  assert f"custom_call @{_native.MXFP8_DEQUANTIZE_TARGET}" in text


@pytest.mark.parametrize("call, message", [
    (lambda: mxfp8.quantize(jnp.ones((4, 32), jnp.int32)), "x: dtype"),
    (lambda: mxfp8.quantize(jnp.ones((4, 32)), dtype=jnp.float16), "dtype: expected float8"),
    (lambda: mxfp8.quantize(jnp.ones((4, 32)), dtype="not a dtype"), "dtype: expected float8"),
    (lambda: mxfp8.quantize(jnp.ones((4, 32)), scale_layout="tiled"), "scale_layout"),
    (lambda: mxfp8.quantize(jnp.ones((4, 32)), rowwise=False), "rowwise, colwise"),
    (lambda: mxfp8.quantize(jnp.ones((32,))), "x: without group_sizes"),
    (lambda: mxfp8.quantize(jnp.ones((2, 4, 32)), jnp.ones((2,), jnp.int32)), "x: with group_sizes"),
    (lambda: mxfp8.quantize(jnp.ones((4, 32)), jnp.ones((2,), jnp.float32)), "group_sizes: dtype"),
    (lambda: mxfp8.quantize(jnp.ones((4, 32)), jnp.ones((2,), jnp.int32), ragged_axis=2),
     "ragged_axis"),
    (lambda: mxfp8.quantize(jnp.ones((4, 32)), jnp.ones((2,), jnp.int32), ragged_axis=True),
     "ragged_axis: expected an int"),
    (lambda: mxfp8.quantize(jnp.ones((4, 32)), ragged_axis=1), "ragged_axis: only group sizes"),
    (lambda: mxfp8.quantize(jnp.ones((2, 4, 32)), jnp.ones((2, 2), jnp.int32), ragged_axis=1),
     "ragged_axis: only group sizes"),
    (lambda: mxfp8.quantize(mxfp8.quantize(jnp.ones((4, 32)))), "x: already an MXFP8Tensor"),
    (lambda: mxfp8.quantize(jnp.ones((3, 4, 32)), jnp.ones((2, 2), jnp.int32)), "x: with group_sizes"),
    (lambda: mxfp8.quantize(jnp.ones((3, 4, 32)), jnp.ones((3, 3), jnp.int32)), "group_sizes: expected"),
    (lambda: mxfp8.dequantize(jnp.ones((4, 32))), "q: expected an MXFP8Tensor"),
    (lambda: mxfp8.dequantize(mxfp8.quantize(jnp.ones((4, 32))), colwise=True), "q: has no colwise"),
    (lambda: mxfp8.dequantize(mxfp8.quantize(jnp.ones((4, 32))), jnp.int8), "dtype: must be"),
    (lambda: jax.export.export(jax.jit(mxfp8.quantize))(
        jax.ShapeDtypeStruct((*jax.export.symbolic_shape("m"), 32), jnp.float32)),
     "x: the shape must be static"),
])
def test_bad_arguments_name_the_argument(call, message):
  with pytest.raises((TypeError, ValueError), match=message):
    call()
