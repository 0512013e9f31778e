"""Grouped MXFP8: the four layouts, any group sizes, compared group by group with the NumPy
reference quantizing each group alone; elements and scale bytes of no group are 0.

Runs on the default backend (CPU kernels in CI, CUDA on a GPU), outputs poisoned first.
"""

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
import mxfp8_reference as ref

mxfp8 = jgg.mxfp8
name = lambda d: jnp.dtype(d).name

# Sizes every ragged layout must survive: empty, 1, around one block (31, 33), around one
# 128-row scale tile (127, 129), a large group, and a sum below the extent (a zero tail).
EDGE_SIZES = [0, 1, 31, 33, 127, 129, 0, 700]


def _values(rng, shape, dtype=jnp.bfloat16):
  """Random values over many binades (so blocks get different scales), with zeros."""
  x = rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))
  x[rng.random(shape) < 0.05] = 0.0
  with np.errstate(over="ignore"):  # float16 overflows to +-Inf: a case the tests want
    return x.astype(dtype)


def groups_of(layout, shape, sizes):
  """[(index into x, rows, cols)] of every group, by the clamping rule, and the scale offset of
  every group (Python, independent of the library's helpers)."""
  groups, offsets = [], []
  if layout == "same_dims":
    slot = ref.group_scale_bytes(shape[1], shape[2])
    for g in range(shape[0]):
      groups.append(((g, slice(None), slice(None)), shape[1], shape[2]))
      offsets.append(g * slot)
  elif layout == "varying_both":
    slot = ref.group_scale_bytes(shape[1], shape[2])
    for g, (r, c) in enumerate(np.asarray(sizes)):
      r, c = min(max(int(r), 0), shape[1]), min(max(int(c), 0), shape[2])
      groups.append(((g, slice(0, r), slice(0, c)), r, c))
      offsets.append(g * slot)
  else:
    axis = 0 if layout == "varying_first" else 1
    extent, begin, offset = shape[axis], 0, 0
    for size in np.asarray(sizes):
      end = min(extent, begin + max(int(size), 0))
      span = slice(begin, end)
      rows, cols = (end - begin, shape[1]) if axis == 0 else (shape[0], end - begin)
      groups.append(((span, slice(None)) if axis == 0 else (slice(None), span), rows, cols))
      offsets.append(offset)
      offset += ref.group_scale_bytes(rows, cols)
      begin = end
  return groups, offsets


def check_grouped(q, x, layout, sizes, fp8_dtype, out_dtype=jnp.float32):
  """Every orientation of q (and its dequantization) against the reference, group by group."""
  x32 = np.asarray(x, np.float32)
  groups, offsets = groups_of(layout, x.shape, sizes)
  np.testing.assert_array_equal(np.asarray(mxfp8.scale_offsets(q))[:-1], offsets)
  np.testing.assert_array_equal(np.asarray(mxfp8.group_extents(q)),
                                [(r, c) for _, r, c in groups])
  swizzled = q.scale_layout == "swizzled"
  for colwise in (False, True):
    if not (q.colwise if colwise else q.rowwise):
      continue
    data, scales = q.orientation(colwise)
    data, scales = np.asarray(data).view(np.uint8), np.asarray(scales).reshape(-1)
    deq = ref.bits_of(mxfp8.dequantize(q, out_dtype, colwise=colwise))
    data_owned = np.zeros(data.shape, bool)
    scale_owned = np.zeros(scales.shape, bool)
    for g, ((index, rows, cols), offset) in enumerate(zip(groups, offsets)):
      want_data, want_scales = ref.quantize_2d(x32[index], fp8_dtype, colwise)
      np.testing.assert_array_equal(data[index], want_data, err_msg=f"group {g} data")
      region = ref.scale_region(want_scales, colwise, swizzled)
      assert region.size == ref.group_scale_bytes(rows, cols)
      np.testing.assert_array_equal(scales[offset:offset + region.size], region,
                                    err_msg=f"group {g} scales")
      np.testing.assert_array_equal(
          deq[index], ref.dequantize_2d(want_data, want_scales, fp8_dtype, colwise, out_dtype),
          err_msg=f"group {g} dequantized")
      data_owned[index] = True
      scale_owned[offset:offset + region.size] = True
    # Deterministic content of what belongs to no group: zeros (poisoned outputs would be 0xFF).
    assert not data[~data_owned].any(), "data of no group must be 0"
    assert not deq[~data_owned].any(), "dequantized elements of no group must be 0"
    assert not scales[~scale_owned].any(), "scale bytes of no group must be 0"


def _quantize(x, sizes, layout, fp8_dtype=jnp.float8_e4m3fn, scale_layout="compact"):
  axis = 1 if layout == "varying_last" else 0
  return mxfp8.quantize(x, None if sizes is None else jnp.asarray(sizes, jnp.int32),
                        ragged_axis=axis, rowwise=True, colwise=True, dtype=fp8_dtype,
                        scale_layout=scale_layout)


def _sizes_pairs():
  rows = [0, 1, 31, 33, 127, 129, 300, 160]  # 300 > capacity 160: clamped
  cols = [5, 0, 33, 129, 1, 31, 150, 64]
  return np.stack([rows, cols], axis=1)


LAYOUT_CASES = {
    # name: (layout, shape, sizes)
    "varying_first": ("varying_first", (1100, 200), EDGE_SIZES),
    "varying_first_odd_cols": ("varying_first", (1100, 45), EDGE_SIZES),
    "varying_last": ("varying_last", (70, 1100), EDGE_SIZES),
    "varying_both": ("varying_both", (8, 160, 150), _sizes_pairs()),
    "same_dims": ("same_dims", (3, 129, 97), None),
}


@pytest.mark.parametrize("scale_layout", ["compact", "swizzled"])
@pytest.mark.parametrize("case", LAYOUT_CASES)
def test_layouts_group_by_group(case, scale_layout):
  layout, shape, sizes = LAYOUT_CASES[case]
  x = _values(np.random.default_rng(len(case)), shape)
  q = _quantize(x, sizes, layout, scale_layout=scale_layout)
  assert q.layout == layout and q.shape == shape
  check_grouped(q, x, layout, sizes, jnp.float8_e4m3fn)


@pytest.mark.parametrize("fp8_dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2], ids=name)
@pytest.mark.parametrize("in_dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=name)
def test_varying_first_every_dtype(in_dtype, fp8_dtype):
  x = _values(np.random.default_rng(1), (600, 96), in_dtype)
  sizes = [129, 0, 31, 33, 1, 127, 200]
  check_grouped(_quantize(x, sizes, "varying_first", fp8_dtype), x, "varying_first", sizes,
                fp8_dtype, out_dtype=in_dtype)


@pytest.mark.parametrize("case, sizes", [
    ("negative_and_past_the_end", [-5, 40, 1000, 7]),
    ("all_empty", [0, 0, 0]),
    ("one_group_holds_all", [0, 100, 0]),
    ("huge_group", [3, 4097, 0, 1]),
])
def test_clamping_rule(case, sizes):
  rows = 4200 if case == "huge_group" else 100
  x = _values(np.random.default_rng(2), (rows, 64))
  for layout in ("varying_first", "varying_last"):
    xl = x if layout == "varying_first" else x.T
    check_grouped(_quantize(xl, sizes, layout), xl, layout, sizes, jnp.float8_e4m3fn)


def test_sizes_wider_than_int32_saturate():
  """uint32 sizes past int32's range mean "the rest of the rows": saturated, not wrapped to
  negative (which would count as 0)."""
  x = _values(np.random.default_rng(6), (100, 64))
  sizes = [7, 2**32 - 1, 0]
  q = mxfp8.quantize(x, jnp.asarray(np.array(sizes, np.uint32)), rowwise=True, colwise=True)
  check_grouped(q, x, "varying_first", sizes, jnp.float8_e4m3fn)
  # Host int64 sizes (a Python list, NumPy's default) saturate too; jnp.asarray alone
  # would wrap 2**32 + 8 to 8 with x64 off.
  sizes = [7, 2**32 + 8, 0]
  for host in (sizes, np.array(sizes)):
    q = mxfp8.quantize(x, host, rowwise=True, colwise=True)
    check_grouped(q, x, "varying_first", sizes, jnp.float8_e4m3fn)


def test_no_groups():
  x = _values(np.random.default_rng(3), (64, 64))
  q = mxfp8.quantize(x, jnp.zeros((0,), jnp.int32), colwise=True)
  assert not np.asarray(q.data).view(np.uint8).any() and not np.asarray(q.scale_inv).any()
  assert not np.asarray(mxfp8.dequantize(q)).any()


def test_scale_layout_of_no_groups_changes_its_leaf_shapes():
  """An empty stack has no scale bytes to move, but its leaves take the new layout's shapes:
  the tensor stays one that dequantize (and every GEMM) accepts."""
  q = mxfp8.quantize(jnp.ones((0, 40, 64)), rowwise=True, colwise=True)
  swizzled = mxfp8.with_scale_layout(q, "swizzled")
  assert swizzled.scale_inv.shape == (0, 1, 512) != q.scale_inv.shape
  assert mxfp8.dequantize(swizzled).shape == (0, 40, 64)
  assert mxfp8.with_scale_layout(swizzled, "compact").scale_inv.shape == q.scale_inv.shape


def test_many_groups():
  """More groups than a CUDA block has threads: the in-kernel prefix sums run in chunks."""
  rng = np.random.default_rng(4)
  sizes = rng.integers(0, 9, size=300)
  x = _values(rng, (int(sizes.sum()) + 5, 40))
  check_grouped(_quantize(x, sizes, "varying_first", scale_layout="swizzled"), x,
                "varying_first", sizes, jnp.float8_e4m3fn)


def test_same_dims_groups_equal_quantizing_each_alone():
  """Through the library too: the stack's group g equals quantize(x[g]) byte for byte."""
  x = _values(np.random.default_rng(5), (4, 150, 70))
  for scale_layout in ("compact", "swizzled"):
    q = mxfp8.quantize(x, colwise=True, scale_layout=scale_layout)
    for g in range(4):
      alone = mxfp8.quantize(x[g], colwise=True, scale_layout=scale_layout)
      np.testing.assert_array_equal(np.asarray(q.data[g]).view(np.uint8),
                                    np.asarray(alone.data).view(np.uint8))
      for s, s_alone in ((q.scale_inv, alone.scale_inv), (q.colwise_scale_inv, alone.colwise_scale_inv)):
        # A stack's scale leaf leads with its groups; a matrix's has no group axis.
        np.testing.assert_array_equal(np.asarray(s)[g], np.asarray(s_alone))


@pytest.mark.parametrize("case", LAYOUT_CASES)
def test_scale_layout_conversion_round_trips(case):
  layout, shape, sizes = LAYOUT_CASES[case]
  x = _values(np.random.default_rng(6), shape)
  compact = _quantize(x, sizes, layout)
  swizzled = _quantize(x, sizes, layout, scale_layout="swizzled")
  to_swizzled = jax.jit(lambda q: mxfp8.with_scale_layout(q, "swizzled"))(compact)
  back = jax.jit(lambda q: mxfp8.with_scale_layout(q, "compact"))(swizzled)
  for a, b in ((to_swizzled, swizzled), (back, compact)):
    assert a.scale_layout == b.scale_layout
    np.testing.assert_array_equal(np.asarray(a.scale_inv), np.asarray(b.scale_inv))
    np.testing.assert_array_equal(np.asarray(a.colwise_scale_inv), np.asarray(b.colwise_scale_inv))
  # The host helper reads a group's padded compact matrix from either layout.
  groups, _ = groups_of(layout, shape, sizes)
  g = next(i for i, (_, r, c) in enumerate(groups) if r > 40 and c > 40)
  index, rows, cols = groups[g]
  _, want = ref.quantize_2d(np.asarray(x, np.float32)[index], jnp.float8_e4m3fn, False)
  for q in (compact, swizzled):
    np.testing.assert_array_equal(mxfp8.group_scale_inv(q, g), ref.padded_scales(want, False))


@hypothesis.given(
    sizes=st.lists(st.integers(-3, 90), min_size=5, max_size=5),
    axis=st.sampled_from([0, 1]),
    scale_layout=st.sampled_from(["compact", "swizzled"]))
def test_any_group_sizes(sizes, axis, scale_layout):
  x = _values(np.random.default_rng(sum(map(abs, sizes))), (257, 40))
  layout = "varying_first" if axis == 0 else "varying_last"
  xl = x if axis == 0 else np.ascontiguousarray(x.T)
  check_grouped(_quantize(xl, sizes, layout, scale_layout=scale_layout), xl, layout, sizes,
                jnp.float8_e4m3fn)
