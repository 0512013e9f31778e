"""The CUDA MXFP8 kernels, run on the CPU under a SIMT emulator, against the CPU kernels.

tests/emulation/ compiles xla_plugin/kernels/cuda/mxfp8_*.cuh unchanged with g++ (one fiber
per CUDA thread, barriers for __syncthreads and warp shuffles, NVIDIA's host
reference of the fp8 conversions), so CI without a GPU still checks the CUDA kernels' tiling,
in-kernel group prefix sums, 16-byte vector and scalar paths and scale-padding ownership. The
hardware instructions themselves are checked on the GPU (test_mxfp8*.py run there unchanged).
Outputs are poisoned (0xFF) before each emulated launch.
"""

import ctypes
import hashlib
import os
import pathlib
import shutil
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native
from jax_grouped_gemm.mxfp8.tensor import LAYOUT_CODES

mxfp8 = jgg.mxfp8
ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "tests/emulation/mxfp8_emulated.cc", ROOT / "tests/emulation/simt_shim.h"] + sorted(
    (ROOT / "xla_plugin/kernels/cuda").glob("*.cuh")) + sorted((ROOT / "xla_plugin/common").glob("*.h"))
IN_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}
FP8_CODES = {"float8_e4m3fn": 0, "float8_e5m2": 1}


def _cuda_include_dir():
  for candidate in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
    if candidate and (pathlib.Path(candidate) / "include/cuda_fp8.h").exists():
      return pathlib.Path(candidate) / "include"
  nvcc = shutil.which("nvcc")
  if nvcc:
    include = pathlib.Path(nvcc).resolve().parents[1] / "include"
    if (include / "cuda_fp8.h").exists():
      return include
  return None


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
  include = _cuda_include_dir()
  if include is None or shutil.which("g++") is None:
    pytest.skip("needs g++ and the CUDA headers (cuda_fp8.h)")
  digest = hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES)).hexdigest()[:16]
  library = tmp_path_factory.mktemp("mxfp8_emulation") / f"mxfp8_emulated_{digest}.so"
  subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-fPIC", "-shared",
                  f"-I{ROOT}", f"-I{include}", str(SOURCES[0]), "-o", str(library), "-lpthread"],
                 check=True, capture_output=True, text=True)
  lib = ctypes.CDLL(str(library))
  i64, i32, ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
  lib.EmulateMxfp8Quantize.argtypes = [i32, i64, i64, i64, i32, i32, i32, i32, i32] + [ptr] * 6
  lib.EmulateMxfp8Dequantize.argtypes = [i32, i64, i64, i64, i32, i32, i32, i32] + [ptr] * 4
  lib.SetEmulatedJobCounter.argtypes = [i32, i32, i32]
  lib.EmulateExactScalingMismatches.argtypes = [i32, i32, ctypes.POINTER(i64)]
  lib.EmulateExactScalingMismatches.restype = i64
  return lib


# name: (job counter passed, CTAs last to first, small kernels where they serve)
JOB_SPLITS = {
    "static": (False, False, False),  # each CTA's static share (_v1)
    "dynamic": (True, False, False),  # jobs from a zeroed counter (what the CUDA launches pass)
    "dynamic_reversed": (True, True, False),  # the same, CTA 0 last: no reliance on CTA order
    # One job per warp and a thread per scale word (what small CUDA calls take), CTA 0 last.
    "small_reversed": (False, True, True),
}
SMALL_WIDTH_BASE = 100000  # emulate() returns this plus the tile width for the small kernels


@pytest.fixture(params=JOB_SPLITS)
def job_split(request, emulator):
  """Runs a test under every job split of the kernels."""
  emulator.SetEmulatedJobCounter(*JOB_SPLITS[request.param])
  yield request.param
  emulator.SetEmulatedJobCounter(False, False, False)


def _address(a):
  return None if a is None else a.ctypes.data


def _misaligned_copy(x):
  """x in a buffer whose data starts 2 bytes past a 16-byte boundary (forces scalar paths)."""
  raw = np.empty(x.nbytes + 32, np.uint8)
  start = (-raw.ctypes.data) % 16 + 2
  view = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
  view[...] = x
  return view


def _call_dims(q_layout, shape, group_sizes):
  if q_layout == "dense":
    return 1, shape[0], shape[1]
  if q_layout in ("same_dims", "varying_both"):
    return shape
  return len(group_sizes), shape[0], shape[1]


def emulate(emulator, x, group_sizes, layout, fp8_dtype, rowwise, colwise, swizzled, aligned=True):
  """(row data, row scales, col data, col scales) of the emulated CUDA quantize."""
  code = LAYOUT_CODES[layout]
  groups, rows, cols = _call_dims(layout, x.shape, group_sizes)
  scale_bytes = _native.mxfp8_scale_bytes(code, groups, rows, cols)
  poisoned = lambda shape: np.full(shape, 0xFF, np.uint8)
  out = [poisoned(x.shape) if rowwise else None, poisoned(scale_bytes) if rowwise else None,
         poisoned(x.shape) if colwise else None, poisoned(scale_bytes) if colwise else None]
  x = np.ascontiguousarray(x) if aligned else _misaligned_copy(x)
  sizes = None if group_sizes is None else np.ascontiguousarray(group_sizes, np.int32)
  threads = emulator.EmulateMxfp8Quantize(
      code, groups, rows, cols, IN_CODES[x.dtype.name], FP8_CODES[jnp.dtype(fp8_dtype).name],
      rowwise, colwise, swizzled, _address(x), _address(sizes), *map(_address, out))
  return out, threads


def emulate_dequantize(emulator, q, out_dtype, colwise):
  """(the emulated CUDA dequantize's output, its kernel width as emulate() returns it)."""
  data, scales = (np.asarray(a) for a in q.orientation(colwise))
  data = np.ascontiguousarray(data.view(np.uint8))
  sizes = None if q.group_sizes is None else np.asarray(q.group_sizes, np.int32)
  groups, rows, cols = _call_dims(q.layout, q.shape, sizes)
  out = np.full(q.shape, np.nan, out_dtype)
  width = emulator.EmulateMxfp8Dequantize(
      LAYOUT_CODES[q.layout], groups, rows, cols, FP8_CODES[q.dtype.name], colwise,
      q.scale_layout == "swizzled", IN_CODES[jnp.dtype(out_dtype).name], data.ctypes.data,
      scales.ctypes.data, _address(sizes), out.ctypes.data)
  return out, width


def _values(seed, shape, dtype):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))
  x[rng.random(shape) < 0.05] = 0.0
  x[rng.random(shape) < 0.01] = np.nan
  x.reshape(-1)[:3] = [np.inf, -np.inf, 2.0 ** -140]
  with np.errstate(over="ignore"):  # float16 overflows to +-Inf: a case the tests want
    return x.astype(dtype)


def _sizes_pairs():
  return np.stack([[0, 1, 31, 33, 127, 129, 300, 70], [5, 0, 33, 129, 1, 31, 150, 90]], axis=1)


EDGE_SIZES = [0, 1, 31, 33, 127, 129, 0, 700]
CASES = {
    # name: (layout, shape, input dtype, group sizes)
    "dense_vector": ("dense", (64, 256), "bfloat16", None),
    "dense_scalar_stride": ("dense", (100, 300), "bfloat16", None),
    "dense_f32": ("dense", (70, 96), "float32", None),
    "dense_two_col_tiles": ("dense", (33, 1030), "float16", None),
    "varying_first_wide": ("varying_first", (72, 1024), "bfloat16", [33, 0, 7, 32]),
    "same_dims": ("same_dims", (3, 65, 136), "bfloat16", None),
    "varying_first": ("varying_first", (1100, 64), "bfloat16", EDGE_SIZES),
    "varying_first_odd": ("varying_first", (1100, 45), "float32", EDGE_SIZES),
    "varying_last": ("varying_last", (40, 1104), "bfloat16", EDGE_SIZES),
    "varying_both": ("varying_both", (8, 160, 152), "float16", _sizes_pairs()),
    # More groups (80) than the CTA has threads (32): the prefix sums run in chunks.
    "many_groups": ("varying_first", (300, 40), "bfloat16",
                    np.random.default_rng(0).integers(-2, 9, size=80)),
    # Wide tiles (rows of whole 16-byte chunks filling their column tiles): f32, a stack, and
    # varying-both groups whose last chunk is partly data.
    "dense_f32_wide": ("dense", (70, 128), "float32", None),
    "same_dims_wide": ("same_dims", (3, 65, 256), "bfloat16", None),
    "varying_both_wide": ("varying_both", (4, 70, 256), "float16",
                          np.array([[70, 256], [33, 5], [0, 129], [1, 250]])),
    # Wide tiles with more groups (300) than their CTA has threads (128).
    "many_groups_wide": ("varying_first", (700, 256), "bfloat16",
                         np.random.default_rng(1).integers(-2, 6, size=300)),
    # 256 groups (two whole slices of the warp's group count), the first 130 empty: every group
    # of the first slice ends before any job.
    "many_groups_whole_slices": ("varying_first", (600, 256), "bfloat16",
                                 [0] * 130 + list(np.random.default_rng(3).integers(0, 5, size=126))),
    # Locating jobs among 40 groups: one group of 47 row tiles between runs of empty groups,
    # small groups, and 443 rows past the groups.
    "varying_first_skewed": ("varying_first", (2500, 256), "float16",
                              [0] * 10 + [1500] + [0] * 8 + [3, 40, 0, 70, 2, 0, 33, 31, 64, 1, 5,
                                                             0, 96, 17, 0, 9, 128, 1, 0, 45, 12]),
    # Groups of a few rows (a decode batch's experts) across several column tiles, and 8 rows
    # past the groups.
    "varying_first_few_rows": ("varying_first", (48, 2048), "bfloat16", [3, 8, 0, 9, 1, 5, 6, 8]),
    # Groups of 17 rows and no tail: the small kernels' worst case of warp jobs, met exactly
    # (each group is one tile of four strips).
    "varying_first_tight_strips": ("varying_first", (204, 256), "bfloat16", [17] * 12),
    # Sizes past the extent (clamped: the running sums stop at the rows), within one lane's
    # groups and across the lanes of the small kernels' warp scans (40 groups, 2 per lane).
    "varying_first_clamped": ("varying_first", (100, 512), "bfloat16",
                              [30, -5, 2**31 - 1, 7, 50]),
    "varying_first_clamped_lanes": ("varying_first", (300, 256), "float16",
                                    np.random.default_rng(2).integers(-3, 40, size=40)),
    # 768 columns: dequantize in 256-column tiles of 8-byte chunks (512-column tiles would
    # leave a third of the lanes idle); 256 columns (dense_vector) take them too.
    "dense_768": ("dense", (40, 768), "bfloat16", None),
    "varying_first_768": ("varying_first", (130, 768), "float16", [33, 0, 60, 7]),
    # Rows that are not whole 16-byte chunks: 8-byte strips, 64- and 128-thread CTAs.
    "dense_strips_64": ("dense", (40, 202), "bfloat16", None),
    "dense_strips_128": ("dense", (40, 482), "float16", None),
}


def _library_quantize(x, sizes, layout, fp8_dtype, rowwise, colwise, scale_layout):
  axis = 1 if layout == "varying_last" else 0
  cpu = jax.devices("cpu")[0]
  x = jax.device_put(jnp.asarray(x), cpu)
  sizes = None if sizes is None else jax.device_put(jnp.asarray(sizes, jnp.int32), cpu)
  return mxfp8.quantize(x, sizes, ragged_axis=axis, rowwise=rowwise, colwise=colwise,
                        dtype=fp8_dtype, scale_layout=scale_layout)


def _assert_same(emulated, q):
  row_data, row_scales, col_data, col_scales = emulated
  for got, want in ((row_data, q.data), (row_scales, q.scale_inv), (col_data, q.colwise_data),
                    (col_scales, q.colwise_scale_inv)):
    if want is None:
      assert got is None
      continue
    want = np.asarray(want).view(np.uint8).reshape(np.shape(got))  # scale leaves: flat bytes
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{bad.shape[0]} bytes differ, first at {bad[0]}: {got[tuple(bad[0])]:#x} vs {want[tuple(bad[0])]:#x}"


@pytest.mark.parametrize("case", CASES)
def test_emulated_cuda_kernels_equal_the_cpu_kernels(emulator, job_split, case):
  layout, shape, in_dtype, sizes = CASES[case]
  x = _values(len(case), shape, jnp.dtype(in_dtype))
  for fp8_dtype, (rowwise, colwise), scale_layout in (
      (jnp.float8_e4m3fn, (True, True), "compact"),
      (jnp.float8_e5m2, (True, True), "swizzled"),
      (jnp.float8_e4m3fn, (True, False), "swizzled"),
      (jnp.float8_e5m2, (False, True), "compact")):
    q = _library_quantize(x, sizes, layout, fp8_dtype, rowwise, colwise, scale_layout)
    emulated, _ = emulate(emulator, x, sizes, layout, fp8_dtype, rowwise, colwise,
                          scale_layout == "swizzled")
    _assert_same(emulated, q)
    for c in [c for c in (False, True) if (rowwise, colwise)[c]]:
      for out_dtype in (np.float32, jnp.bfloat16, np.float16):
        got, _ = emulate_dequantize(emulator, q, jnp.dtype(out_dtype), c)
        want = np.asarray(mxfp8.dequantize(q, out_dtype, colwise=c))
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("in_dtype", ["float32", "bfloat16", "float16"])
def test_emulated_unaligned_input_takes_the_scalar_path(emulator, job_split, in_dtype):
  x = _values(9, (96, 128), jnp.dtype(in_dtype))
  sizes = [40, 0, 50]
  q = _library_quantize(x, sizes, "varying_first", jnp.float8_e4m3fn, True, True, "compact")
  emulated, _ = emulate(emulator, x, sizes, "varying_first", jnp.float8_e4m3fn, True, True, False,
                        aligned=False)
  _assert_same(emulated, q)


def _quantize_width(emulator, case):
  layout, shape, in_dtype, sizes = CASES[case]
  x = _values(1, shape, jnp.dtype(in_dtype))
  return emulate(emulator, x, sizes, layout, jnp.float8_e4m3fn, True, False, False)[1]


def _dequantize_width(emulator, case):
  layout, shape, in_dtype, sizes = CASES[case]
  q = _library_quantize(_values(1, shape, jnp.dtype(in_dtype)), sizes, layout,
                        jnp.float8_e4m3fn, True, True, "compact")
  widths = {emulate_dequantize(emulator, q, jnp.dtype(jnp.bfloat16), c)[1] for c in (0, 1)}
  assert len(widths) == 1, widths
  return widths.pop()


def test_emulation_covers_both_kernel_families(emulator):
  """The cases above run the wide kernels (16-byte chunks, 128-thread CTAs; dequantize also
  8-byte chunks) and the strip kernels at 32-, 64-, 96- and 128-thread CTAs (more groups than
  threads included). Widths as emulate() returns them: strips the CTA's threads, wide tiles
  minus their columns."""
  quantize_width = lambda case: _quantize_width(emulator, case)
  dequantize_width = lambda case: _dequantize_width(emulator, case)
  wide = {case: quantize_width(case) for case in ("dense_vector", "dense_f32_wide",
                                               "varying_first_wide", "same_dims_wide",
                                               "varying_both_wide", "many_groups_wide",
                                               "dense_768")}
  assert set(wide.values()) == {-256, -128}, wide  # bf16/f16: 256 columns, f32: 128
  strips = {quantize_width(case) for case in ("varying_first_odd", "dense_strips_64",
                                           "dense_scalar_stride", "varying_last",
                                           "dense_strips_128")}
  assert strips == {32, 64, 96, 128}
  dequantize = {case: dequantize_width(case) for case in ("varying_first_wide", "dense_768",
                                                          "varying_first_768", "dense_vector",
                                                          "dense_strips_128")}
  assert dequantize == {"varying_first_wide": -512, "dense_768": -256,
                        "varying_first_768": -256, "dense_vector": -256,
                        "dense_strips_128": 128}, dequantize


def test_emulation_covers_the_small_kernels(emulator):
  """Under "small_reversed" every layout but varying-last takes the small kernels: 16-byte
  chunks (bf16/f16 256 columns, f32 128), dequantize 16 fp8 codes per lane or 8 where the rows
  are not whole 16-byte chunks; varying-last, and rows that are not whole chunks, keep the
  others. Widths as emulate() returns them (SMALL_WIDTH_BASE plus the tile's columns)."""
  emulator.SetEmulatedJobCounter(*JOB_SPLITS["small_reversed"])
  try:
    quantize = {case: _quantize_width(emulator, case) for case in (
        "dense_vector", "dense_f32_wide", "varying_first", "same_dims", "varying_both",
        "many_groups_wide", "varying_first_few_rows", "varying_last", "varying_first_odd")}
    dequantize = {case: _dequantize_width(emulator, case) for case in (
        "varying_first_wide", "same_dims", "varying_both", "dense_strips_128")}
  finally:
    emulator.SetEmulatedJobCounter(False, False, False)
  small = SMALL_WIDTH_BASE
  assert quantize == {"dense_vector": small + 256, "dense_f32_wide": small + 128,
                      "varying_first": small + 256, "same_dims": small + 256,
                      "varying_both": small + 256, "many_groups_wide": small + 256,
                      "varying_first_few_rows": small + 256, "varying_last": 96,
                      "varying_first_odd": 32}, quantize
  assert dequantize == {"varying_first_wide": small + 512, "same_dims": small + 256,
                        "varying_both": small + 256, "dense_strips_128": 128}, dequantize


# Scales whose dequantization the kernels do with integer operations and one multiply (every
# finite code's result a normal Out value): f16 takes it only near 2^0, and for e5m2 codes not
# at all. Non-special codes: e4m3 254 (no NaN), e5m2 248 (no Inf/NaN).
EXACT_SCALING = {("float32", "float8_e4m3fn"): (10, 134, 254),
                 ("bfloat16", "float8_e4m3fn"): (10, 134, 254),
                 ("float16", "float8_e4m3fn"): (122, 134, 254),
                 ("float32", "float8_e5m2"): (17, 142, 248),
                 ("bfloat16", "float8_e5m2"): (17, 142, 248),
                 ("float16", "float8_e5m2"): (1, 0, 248)}


@pytest.mark.parametrize("out_dtype,fp8_dtype", EXACT_SCALING)
def test_exact_scaling_path_equals_the_element_rule_for_every_code_and_scale(
    emulator, out_dtype, fp8_dtype):
  lo, hi, codes = EXACT_SCALING[out_dtype, fp8_dtype]
  checked = ctypes.c_int64(-1)
  bad = emulator.EmulateExactScalingMismatches(IN_CODES[out_dtype], FP8_CODES[fp8_dtype],
                                               ctypes.byref(checked))
  assert bad == 0
  assert checked.value == max(0, hi - lo + 1) * codes
