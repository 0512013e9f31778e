"""GPU-only checks: the CUDA handlers run, and are captured in XLA command buffers.

(The value tests in the other modules run on the GPU too when one is present.)
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native
import command_buffers
from conftest import requires_gpu
import reference


def _f64(a):
  return np.asarray(a.astype(jnp.float32), np.float64)


# dgrad: dy [M, N] . w [G, K, N] over N, rows ragged; wgrad: x [M, K]^T . dy [M, N] over the
# ragged rows, out [G, K, N].
_DGRAD = jax.lax.RaggedDotDimensionNumbers((([1], [2]), ([], [])), [0], [0])
_WGRAD = jax.lax.RaggedDotDimensionNumbers((([0], [0]), ([], [])), [0], [])


def _wgrad(**kwargs):
  return lambda a, b, sizes: jgg.ragged_dot_general(a, b, sizes, _WGRAD, **kwargs)


@requires_gpu
def test_cuda_handlers_are_built_and_used():
  assert _native.CUDA_BUILT
  lhs = jax.device_put(jnp.ones((64, 32), jnp.bfloat16), jax.devices("gpu")[0])
  rhs = jnp.ones((2, 32, 16), jnp.bfloat16)
  compiled = jax.jit(jgg.ragged_dot).lower(lhs, rhs, jnp.array([30, 34], jnp.int32)).compile()
  assert _native.RAGGED_M_TARGET in compiled.as_text()


# Run in a fresh process: XLA_FLAGS are read once, when the backend starts. The test puts
# DTYPE and TOLERANCE in front: f32 takes the SIMT kernels, bf16 the tensor-core GEMMs (with
# wgrad's streamed kernel for the groups of at most 8 rows, launched beside the GEMM).
_COMMAND_BUFFER_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    import jax_grouped_gemm as jgg
    import reference

    def moe_step(x, w, sizes, ct):
      def loss(x, w):
        return jnp.sum(jgg.ragged_dot(x, w, sizes).astype(jnp.float32) * ct)
      return jax.grad(loss, (0, 1))(x, w)

    step = jax.jit(moe_step)
    rng = np.random.default_rng(0)
    m, k, n, g = 256, 64, 96, 4
    x, w, ct = (jnp.asarray(rng.standard_normal(shape), DTYPE)
                for shape in ((m, k), (g, k, n), (m, n)))
    f32 = lambda a: np.asarray(a.astype(jnp.float32))
    for sizes in ([64, 64, 64, 64], [256, 0, 0, 0], [0, 0, 0, 0], [10, 200, 0, 3], [-4, 300, 1, 1],
                  [2, 5, 240, 9]):
      dx, dw = step(x, w, jnp.asarray(sizes, jnp.int32), ct.astype(jnp.float32))
      expect_dx = reference.ragged_m(f32(ct), f32(w), sizes, rhs_transposed=True)
      expect_dw = reference.ragged_k(f32(x), f32(ct), sizes, num_groups=g)
      assert reference.relative_error(dx, expect_dx) < TOLERANCE, sizes
      assert reference.relative_error(dw, expect_dw) < TOLERANCE, sizes
    print("replays ok")
""")


@requires_gpu
@pytest.mark.parametrize("dtype,tolerance", [("float32", 1e-5), ("bfloat16", 1e-2)])
def test_captured_in_command_buffer_and_replays_with_new_group_sizes(tmp_path, dtype, tolerance):
  # Capture also proves no device-to-host copy or sync in our handlers: stream
  # capture rejects both.
  script = f"import jax.numpy as jnp\nDTYPE, TOLERANCE = jnp.{dtype}, {tolerance}\n"
  ours = command_buffers.custom_calls_after_capture(script + _COMMAND_BUFFER_SCRIPT, tmp_path,
                                                    "moe_step")
  assert ours and all(map(command_buffers.nested_in_a_command_buffer, ours)), ours


# Shapes that take each CUDA path (see docs/ARCHITECTURE.md, "CUDA kernels"), bf16.
_PATH_CASES = {
    "large_groups_tensor_cores": (1024, 64, 256, [300, 0, 500, 224]),
    # Groups ending in last row tiles of every kind: exactly 64 rows, 65, 128 (no tail), 129
    # (a 1-row tail), 0, 192 (a 64-row tail behind a full tile), 300 (44 rows behind two); sum < M.
    "large_groups_row_tails": (1200, 64, 256, [64, 65, 128, 129, 0, 192, 300]),
    # Thousands of rows per group (tens of row tiles per weight tile, as mixtral's): an empty
    # group, tails of 104, 52 and 5 rows, sum < M.
    "long_groups": (8448, 64, 256, [4200, 0, 2100, 1029]),
    # A hot expert of 33 row tiles, which the forward and dgrad walk in bands of row tiles (two
    # bands of 17 and 16 on 132 SMs), over 5 (forward) and 3 (dgrad) column tiles whose last
    # ones are partial; an empty group, sum < M.
    "hot_group_in_row_bands": (5000, 528, 1040, [4200, 0, 700]),
    # Wgrad's output of 25 row tiles (13 rows of 2x1 clusters, the last half padding) over 3
    # column tiles: in bands of cluster rows under the narrow_row_bands override below.
    "wide_wgrad_output_in_row_bands": (1500, 3200, 520, [1200, 0, 250]),
    # 80 rows per group on average: past the ping-pong tile's 64, in the cooperative tile.
    "tens_of_rows_per_group_cooperative_tile": (400, 64, 192, [90, 0, 110, 75, 70]),
    "few_rows_per_group_small_tile": (96, 64, 128, [5, 0, 30, 1, 20, 40]),
    "very_few_rows_per_group": (40, 32, 64, [3, 0, 8, 1, 6, 2, 9, 4, 0, 7]),
    "sum_below_rows": (512, 128, 64, [100, 0, 37]),
    # Skewed groups, two of equal size: wgrad's problems run largest first, ties in group order.
    "skewed_groups_with_ties": (3300, 64, 256, [9, 700, 0, 130, 700, 3, 400, 58, 1200]),
    # Wgrad contractions of 9 to 65 rows (one 64-row k-block or a row past it) on P = 200 and
    # N = 264 rows and columns of output: partial tiles on both edges.
    "short_contractions_partial_wgrad_tiles": (700, 200, 264,
                                               [9, 64, 65, 0, 33, 17, 16, 1, 47, 200]),
}


@requires_gpu
@pytest.mark.parametrize("case", _PATH_CASES)
def test_every_cuda_path_forward_dgrad_wgrad(case):
  m, k, n, sizes = _PATH_CASES[case]
  rng = np.random.default_rng(len(case))
  x = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
  w = jnp.asarray(rng.standard_normal((len(sizes), k, n)), jnp.bfloat16)
  ct = jnp.asarray(rng.standard_normal((m, n)), jnp.bfloat16)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  out, vjp = jax.jit(lambda a, b: jax.vjp(lambda a, b: jgg.ragged_dot(a, b, group_sizes), a, b))(x, w)
  dx, dw = vjp(ct)
  f32 = lambda a: np.asarray(a.astype(jnp.float32))
  assert reference.relative_error(out, reference.ragged_m(f32(x), f32(w), sizes)) < 1e-2
  assert reference.relative_error(dx, reference.ragged_m(f32(ct), f32(w), sizes, rhs_transposed=True)) < 1e-2
  expected_dw = reference.ragged_k(f32(x), f32(ct), sizes, len(sizes))
  assert reference.relative_error(dw, expected_dw) < 1e-2
  assert np.all(np.asarray(dw)[[i for i, s in enumerate(sizes) if s == 0]] == 0)


# The tuning overrides of the BF16 GEMM (ragged_dot_cuda.cu, sm90/grouped_gemm_sm90.cuh): each
# set sends every path case's forward and dgrad to one tile or schedule (with
# JGG_WGRAD_STREAMED_ROWS=0, every non-empty wgrad group to the tensor cores), or every wgrad
# routing to one schedule, so that the numbers of a tuning run come from correct results.
_TUNING_OVERRIDES = {
    "pingpong_tile_everywhere": {"JGG_SM90_SMALL_M_ROWS": "1000000",
                                 "JGG_WGRAD_STREAMED_ROWS": "0"},
    "cooperative_tile_everywhere": {"JGG_SM90_SMALL_M_ROWS": "0"},
    "raster_along_n": {"JGG_SM90_RASTER": "n"},
    "cutlass_tile_order_without_row_bands": {"JGG_SM90_ROW_BAND": "0",
                                             "JGG_SM90_WGRAD_ROW_BAND": "0"},
    "narrow_row_bands": {"JGG_SM90_ROW_BAND": "5", "JGG_SM90_WGRAD_ROW_BAND": "4"},
    "no_tail_split_no_pdl": {"JGG_SM90_TAIL_SPLIT": "0", "JGG_SM90_PDL": "0",
                             "JGG_WGRAD_STREAMED_BESIDE": "0"},
    "wgrad_static_tiles_in_group_order": {"JGG_SM90_WGRAD_TILES": "static",
                                          "JGG_SM90_WGRAD_ORDER": "groups"},
    "wgrad_tiles_on_demand_in_group_order": {"JGG_SM90_WGRAD_ORDER": "groups"},
    "wgrad_tiles_always_on_demand": {"JGG_SM90_WGRAD_TILES": "demand"},
    "wgrad_tiles_on_demand_where_uneven": {"JGG_SM90_WGRAD_TILES": "uneven"},
}


@requires_gpu
@pytest.mark.parametrize("overrides", _TUNING_OVERRIDES)
def test_every_cuda_path_under_each_tuning_override(overrides):
  # A fresh process: the overrides are read once per process.
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", **_TUNING_OVERRIDES[overrides])
  tests = os.path.dirname(os.path.abspath(__file__))
  result = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
       f"{tests}/test_cuda.py::test_every_cuda_path_forward_dgrad_wgrad",
       f"{tests}/test_cuda.py::test_wgrad_past_the_first_round_covers_every_tile_of_each_cluster"],
      cwd=os.path.dirname(tests), env=env, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
  passed = len(_PATH_CASES) + len(_WGRAD_ROUTINGS)
  assert f"{passed} passed" in result.stdout, result.stdout[-2000:]


@requires_gpu
@pytest.mark.parametrize("rows", [1024, 100], ids=["large_tile", "small_tile"])
@pytest.mark.parametrize("shard", [0, 1, 2])
def test_tensor_core_local_window_zeroes_the_other_rows_of_a_donated_buffer(rows, shard):
  # The output takes the donated lhs's buffer (K == N), so it starts full of lhs values:
  # every row outside this shard's groups must be zeroed by the call itself.
  sizes, local, k = [150, 0, 300, 200, 120, 90], 2, 64
  sizes = [s * rows // 1024 for s in sizes]  # sum < rows either way
  rng = np.random.default_rng(rows + shard)
  x = jnp.asarray(rng.standard_normal((rows, k)), jnp.bfloat16)
  w = jnp.asarray(rng.standard_normal((local, k, k)), jnp.bfloat16)
  f32 = lambda a: np.asarray(a.astype(jnp.float32))
  expected = reference.ragged_m(f32(x), f32(w), sizes, group_offset=shard * local)
  x_buffer = x.unsafe_buffer_pointer()
  out = jax.jit(jgg.ragged_dot, donate_argnums=0)(
      x, w, jnp.asarray(sizes, jnp.int32), group_offset=jnp.asarray([shard * local], jnp.int32))
  assert out.unsafe_buffer_pointer() == x_buffer  # the premise: out starts as lhs
  assert reference.relative_error(out, expected) < 1e-2
  np.testing.assert_array_equal(np.asarray(out, np.float32)[expected == 0], 0)


@requires_gpu
@pytest.mark.parametrize("in_dtype", [jnp.bfloat16, jnp.float16], ids=lambda t: jnp.dtype(t).name)
def test_tail_tiles_among_many_tiles_per_cta_row_by_row(in_dtype):
  """Groups ending in row tiles of every kind (tails of 1 to 72 rows, none, empty groups) with
  each CTA running several tiles over k-tile counts that are no multiple of the pipeline's
  stages: a stage consumed out of step, or a tail tile that wrote past its group, would corrupt
  other rows. Checked row by row, forward and dgrad: one wrong row fails."""
  # Last row tiles of 1, 64, 1, 72, 65, (none), (none), 65, 64 and 44 rows.
  sizes = [129, 64, 1, 200, 65, 0, 128, 193, 320, 300] * 20
  # > 128 rows per group (the cooperative 128-row tile); 500 rows of no group, which must be 0.
  m, k, n = sum(sizes) + 500, 328, 264
  rng = np.random.default_rng(7)
  x = jnp.asarray(rng.standard_normal((m, k)), in_dtype)
  w = jnp.asarray(rng.standard_normal((len(sizes), k, n)), in_dtype)
  dy = jnp.asarray(rng.standard_normal((m, n)), in_dtype)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  out = jax.jit(jgg.ragged_dot)(x, w, group_sizes)
  dx = jax.jit(lambda a, b, g: jgg.ragged_dot_general(a, b, g, _DGRAD))(dy, w, group_sizes)
  for actual, expected, length in ((out, reference.ragged_m(_f64(x), _f64(w), sizes), k),
                                   (dx, reference.ragged_m(_f64(dy), _f64(w), sizes,
                                                           rhs_transposed=True), n)):
    # Products of unit normals: each output ~ sqrt(length); 16-bit results round to 2^-8.
    np.testing.assert_allclose(np.asarray(actual.astype(jnp.float32)), expected, rtol=1e-2,
                               atol=1e-2 * np.sqrt(length))


def _sizes_with_row_tiles(row_tiles, rng):
  """Group sizes (> 128 rows per group on average, tails of every kind, an empty group)
  whose 128-row tiles number exactly row_tiles."""
  sizes = [0]
  while row_tiles > 0:
    tiles = min(int(rng.integers(1, 5)), row_tiles)
    sizes.append(128 * (tiles - 1) + int(rng.integers(1, 129)))
    row_tiles -= tiles
  return sizes


@requires_gpu
@pytest.mark.parametrize("last_round", [1, 3, 20, 45, 0, -1])
@pytest.mark.parametrize("in_dtype,out_dtype", [(jnp.bfloat16, jnp.bfloat16),
                                                (jnp.float16, jnp.float32)],
                         ids=["bf16", "f16_to_f32"])
def test_last_round_split_along_k_row_by_row(last_round, in_dtype, out_dtype):
  """The GEMM's last round of r tiles (r = tiles mod SMs) is split along K where r is small
  (kernels/cuda/sm90/tail_split_sm90.cuh: 4 pieces for r = 1, 3 and 20, 2 for 45, none for 0
  or SMs - 1). Group sizes are chosen to give each r on this GPU, forward and dgrad; 17
  k-tiles, so the pieces are uneven. Checked row by row: a piece lost, added twice or taken
  from another tile's slot fails."""
  sms = jax.devices("gpu")[0].core_count
  k = n = 1088  # 5 column tiles of 256 and 17 k-tiles of 64, both ways
  col_tiles = 5
  r = last_round % sms
  # Tiles = col_tiles * row_tiles = sms + r (mod sms), at least a round and a half.
  row_tiles = next(t for t in range(sms, 3 * sms) if (col_tiles * t) % sms == r)
  rng = np.random.default_rng(last_round + 10)
  sizes = _sizes_with_row_tiles(row_tiles, rng)
  m = sum(sizes) + 77  # rows of no group, which must be 0
  x = jnp.asarray(rng.standard_normal((m, k)), in_dtype)
  w = jnp.asarray(rng.standard_normal((len(sizes), k, n)), in_dtype)
  dy = jnp.asarray(rng.standard_normal((m, n)), in_dtype)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  out = jax.jit(lambda a, b, g: jgg.ragged_dot(a, b, g, preferred_element_type=out_dtype))(
      x, w, group_sizes)
  dx = jax.jit(lambda a, b, g: jgg.ragged_dot_general(a, b, g, _DGRAD,
                                                      preferred_element_type=out_dtype))(
      dy, w, group_sizes)
  tol = 1e-2 if out_dtype != jnp.float32 else 1e-4
  for actual, expected in ((out, reference.ragged_m(_f64(x), _f64(w), sizes)),
                           (dx, reference.ragged_m(_f64(dy), _f64(w), sizes, rhs_transposed=True))):
    assert actual.dtype == out_dtype
    # Products of unit normals: each output ~ sqrt(1088); results round to their type.
    np.testing.assert_allclose(np.asarray(actual.astype(jnp.float32)), expected, rtol=tol,
                               atol=tol * np.sqrt(k))


_Dims = jax.lax.RaggedDotDimensionNumbers
_BATCHED = {  # lhs [2, 600, 64]; batch entry b routes its rows with group_sizes[b]
    "fwd": ((3, 2, 64, 64), _Dims((([2], [2]), ([0], [1])), [1], [0])),
    "dgrad": ((3, 2, 64, 64), _Dims((([2], [3]), ([0], [1])), [1], [0])),
    "wgrad": ((2, 600, 64), _Dims((([1], [1]), ([0], [0])), [1], [])),
}


@requires_gpu
@pytest.mark.parametrize("name", _BATCHED)
def test_tensor_cores_batched_with_group_sizes_per_batch_entry(name):
  # One preparation block per batch entry: each must describe its own groups' rows.
  rhs_shape, dims = _BATCHED[name]
  sizes = np.array([[300, 0, 250], [100, 400, 50]], np.int32)  # sums 550 < 600 rows
  rng = np.random.default_rng(len(name))
  lhs = jnp.asarray(rng.standard_normal((2, 600, 64)), jnp.bfloat16)
  rhs = jnp.asarray(rng.standard_normal(rhs_shape), jnp.bfloat16)
  ours = jax.jit(jgg.ragged_dot_general, static_argnums=3)(lhs, rhs, jnp.asarray(sizes), dims)
  f32 = lambda a: jnp.asarray(a, jnp.float32)
  theirs = reference.on_cpu(jax.lax.ragged_dot_general, f32(lhs), f32(rhs), sizes, dims)
  assert ours.shape == theirs.shape
  assert reference.relative_error(ours, theirs) < 1e-2


# (inputs, results) of each tensor-core instantiation (xla_plugin/BUILD SM90_TYPE_PAIRS).
_TYPE_PAIRS = [(jnp.bfloat16, jnp.bfloat16), (jnp.float16, jnp.float16),
               (jnp.bfloat16, jnp.float32), (jnp.float16, jnp.float32)]
_PASS_DIMS = {  # contracting dims of (lhs, rhs), rhs group dims
    "fwd": (([1], [1]), [0]), "dgrad": (([1], [2]), [0]), "wgrad": (([0], [0]), []),
}


@requires_gpu
@pytest.mark.parametrize("case", ["large_groups_tensor_cores", "long_groups",
                                  "few_rows_per_group_small_tile"])
@pytest.mark.parametrize("in_dtype, out_dtype", _TYPE_PAIRS,
                         ids=lambda t: jnp.dtype(t).name)
def test_tensor_core_type_pairs_every_pass(case, in_dtype, out_dtype):
  """Each (inputs, results) pair of the Hopper path, forward, dgrad and wgrad, against float64
  products of the same inputs. Outputs are poisoned before the kernels run (conftest), so an
  element no kernel wrote is NaN; empty experts' weight gradients are 0."""
  m, k, n, sizes = _PATH_CASES[case]
  rng = np.random.default_rng(m + k + n)
  x = jnp.asarray(rng.standard_normal((m, k)), in_dtype)
  w = jnp.asarray(rng.standard_normal((len(sizes), k, n)), in_dtype)
  dy = jnp.asarray(rng.standard_normal((m, n)), in_dtype)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  expected = {
      "fwd": reference.ragged_m(_f64(x), _f64(w), sizes),
      "dgrad": reference.ragged_m(_f64(dy), _f64(w), sizes, rhs_transposed=True),
      "wgrad": reference.ragged_k(_f64(x), _f64(dy), sizes, len(sizes)),
  }
  operands = {"fwd": (x, w), "dgrad": (dy, w), "wgrad": (x, dy)}
  for name, (contracting, rhs_groups) in _PASS_DIMS.items():
    dims = jax.lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=(contracting, ([], [])), lhs_ragged_dimensions=[0],
        rhs_group_dimensions=rhs_groups)
    out = jax.jit(lambda a, b: jgg.ragged_dot_general(a, b, group_sizes, dims,
                                                      preferred_element_type=out_dtype))(
        *operands[name])
    assert out.dtype == jnp.dtype(out_dtype), name
    assert np.all(np.isfinite(np.asarray(out.astype(jnp.float32)))), name
    # f32 results carry the f32 accumulation; 16-bit ones add one rounding.
    tolerance = 1e-5 if out_dtype == jnp.float32 else 1e-2
    assert reference.relative_error(out, expected[name]) < tolerance, name
    if name == "wgrad":
      assert np.all(np.asarray(out)[[i for i, s in enumerate(sizes) if s == 0]] == 0)


@requires_gpu
@pytest.mark.parametrize("in_dtype, out_dtype", _TYPE_PAIRS, ids=lambda t: jnp.dtype(t).name)
def test_wgrad_streams_few_row_groups_beside_tensor_core_groups(in_dtype, out_dtype):
  """Wgrad groups of at most 8 rows are streamed (ragged_k_streamed.cu) and larger ones run on
  the tensor cores, in one call: sizes on both sides of the threshold, K not a multiple of
  the streamed kernel's 64 output rows, N wider than one block's 2048 columns, sum < M.
  Outputs are poisoned first (conftest); empty groups must come back as exact zeros."""
  sizes = [0, 1, 2, 3, 4, 5, 8, 9, 16, 0, 7, 33]
  m, k, n = sum(sizes) + 11, 200, 2056
  rng = np.random.default_rng(7)
  x = jnp.asarray(rng.standard_normal((m, k)), in_dtype)
  dy = jnp.asarray(rng.standard_normal((m, n)), in_dtype)
  out = jax.jit(_wgrad(preferred_element_type=out_dtype))(x, dy, jnp.asarray(sizes, jnp.int32))
  expected = reference.ragged_k(_f64(x), _f64(dy), sizes, len(sizes))
  tolerance = 1e-5 if out_dtype == jnp.float32 else 1e-2
  for g, size in enumerate(sizes):
    assert reference.relative_error(out[g], expected[g]) < tolerance, (g, size)
  assert np.all(np.asarray(out)[[g for g, s in enumerate(sizes) if s == 0]] == 0)


# Group sizes of the wgrad schedules (TilesGoOnDemand, sm90/dynamic_tiles_sm90.cuh), over the
# groups with tiles (> 8 rows): the longest 3.4x the mean (uneven: tiles on demand, largest
# first); 1.07x the mean of 676 rows (the static order, in group order); 1.06x the mean of
# 1085 rows (long: on demand).
_WGRAD_ROUTINGS = {
    "skewed": [1500, 9, 0, 640, 3, 200, 1500, 77, 310, 1, 2600, 40],
    "even": [700, 650, 0, 720, 690, 600, 710, 3, 680, 705, 640, 660],
    "even_long": [1100, 1050, 0, 1150, 1080, 1030, 1120, 3, 1090, 1130, 1040, 1060],
}


@requires_gpu
@pytest.mark.parametrize("routing", _WGRAD_ROUTINGS)
def test_wgrad_past_the_first_round_covers_every_tile_of_each_cluster(routing):
  """Wgrad runs on 2x1 clusters whose two CTAs take a cluster's two row tiles, past the first
  round from a ticket they share (skewed or long contractions) or from CUTLASS's static order
  (even and short ones):
  with P = 640 rows of output (five 128-row tiles, the last cluster's second half padding) and
  N = 1280 (five column tiles), there are more tiles than SMs. Every group is checked whole
  against float64."""
  sizes = _WGRAD_ROUTINGS[routing]
  m, p, n = sum(sizes) + 13, 640, 1280
  tiles = sum(6 * 5 for size in sizes if size > 8)
  assert tiles > jax.devices("gpu")[0].core_count  # the premise: a second round
  rng = np.random.default_rng(11)
  x = jnp.asarray(rng.standard_normal((m, p)), jnp.bfloat16)
  dy = jnp.asarray(rng.standard_normal((m, n)), jnp.bfloat16)
  out = jax.jit(_wgrad())(x, dy, jnp.asarray(sizes, jnp.int32))
  expected = reference.ragged_k(_f64(x), _f64(dy), sizes, len(sizes))
  for g, size in enumerate(sizes):
    assert reference.relative_error(out[g], expected[g]) < 1e-2, (g, size)


@requires_gpu
@pytest.mark.parametrize("batch, groups", [(3, 6), (3, 400), (1, 1024), (1, 1025)],
                         ids=["one_gemm", "several_gemms", "most_ranked_groups", "too_many_to_rank"])
def test_vmapped_wgrad_orders_each_batch_entry_by_its_own_group_sizes(batch, groups):
  """Wgrad's problems run largest first within each batch entry whose routing is skewed, its
  tiles on demand (sm90/dynamic_tiles_sm90.cuh): ranked among up to 1024 groups, several per
  preparation thread; a call of more than 1024 problems runs as several GEMMs in CUTLASS's
  order. Skewed sizes with ties, empty and streamed (<= 8 rows) groups."""
  rng = np.random.default_rng(groups)
  sizes = np.minimum((rng.pareto(1.2, (batch, groups)) * 40).astype(np.int32), 900)
  sizes[:, 1] = sizes[:, 2]  # a tie in every batch entry
  sizes[:, 3] = 0
  m, k, n = int(sizes.sum(1).max()) + 5, 64, 128
  x = jnp.asarray(rng.standard_normal((batch, m, k)), jnp.bfloat16)
  dy = jnp.asarray(rng.standard_normal((batch, m, n)), jnp.bfloat16)
  out = jax.jit(jax.vmap(_wgrad()))(x, dy, jnp.asarray(sizes))
  for b in range(batch):
    expected = reference.ragged_k(_f64(x[b]), _f64(dy[b]), sizes[b], groups)
    assert reference.relative_error(out[b], expected) < 1e-2, b
    assert np.all(np.asarray(out[b])[sizes[b] == 0] == 0), b


@requires_gpu
def test_a_vmap_beyond_the_grid_limit_runs():
  """70,000 vmapped problems: more batch entries than a CUDA grid dimension holds (65,535),
  so the lowering splits the batch into two calls; forward and both gradients."""
  batch, rows, k, n, g = 70_000, 8, 16, 8, 2
  rng = np.random.default_rng(3)
  lhs = jnp.asarray(rng.standard_normal((batch, rows, k)), jnp.float32)
  rhs = jnp.asarray(rng.standard_normal((g, k, n)), jnp.float32)
  sizes = jnp.asarray(rng.integers(0, 5, (batch, g)), jnp.int32)
  loss = lambda a, b, s: jnp.sum(jgg.ragged_dot(a, b, s) ** 2)
  out = jax.jit(jax.vmap(jgg.ragged_dot, (0, None, 0)))(lhs, rhs, sizes)
  d_lhs, d_rhs = jax.jit(jax.vmap(jax.grad(loss, (0, 1)), (0, None, 0)))(lhs, rhs, sizes)
  for i in (0, 65_534, 65_535, batch - 1):  # both sides of the split
    expected = reference.ragged_m(lhs[i], rhs, np.asarray(sizes[i]))
    assert reference.relative_error(out[i], expected) < 1e-5, i
    theirs = reference.on_cpu(jax.grad(lambda a, b, s: jnp.sum(jax.lax.ragged_dot(a, b, s) ** 2),
                                       (0, 1)), lhs[i], rhs, sizes[i])
    np.testing.assert_allclose(d_lhs[i], theirs[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d_rhs[i], theirs[1], rtol=1e-4, atol=1e-4)
