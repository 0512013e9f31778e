"""ragged_dot (ragged non-contracting mode): values, lowering, clamping, group_offset.

Runs on the default backend: the CPU kernels in CI, the CUDA kernels on a GPU.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native
import reference

DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]

# (M, K, N, group_sizes): the edge cases the semantics must survive.
CASES = {
    "empty_group": (64, 32, 48, [20, 0, 30, 14]),
    "one_group_holds_all": (40, 16, 24, [0, 40, 0]),
    "sum_below_m": (50, 24, 40, [10, 5, 7]),
    "single_group": (33, 17, 9, [33]),
    "odd_sizes": (77, 31, 45, [13, 0, 29, 1, 34]),
    "all_empty": (16, 8, 8, [0, 0]),
    "one_row": (1, 5, 3, [1, 0]),
}


def _operands(key, m, k, n, g, dtype):
  k1, k2 = jax.random.split(key)
  lhs = jax.random.normal(k1, (m, k), jnp.float32).astype(dtype)
  rhs = jax.random.normal(k2, (g, k, n), jnp.float32).astype(dtype)
  return lhs, rhs


def _check(actual, expected):
  err = reference.relative_error(actual, expected)
  assert err <= reference.TOLERANCE[jnp.dtype(actual.dtype).name], err


def test_lowers_to_our_custom_call():
  lhs, rhs = _operands(jax.random.PRNGKey(0), 8, 4, 4, 2, jnp.float32)
  text = jax.jit(jgg.ragged_dot).lower(lhs, rhs, jnp.array([3, 5], jnp.int32)).as_text()
  assert f'custom_call @{_native.RAGGED_M_TARGET}' in text
  assert "dot_general" not in text  # no dense fallback


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_float64_reference(case, dtype):
  m, k, n, sizes = CASES[case]
  lhs, rhs = _operands(jax.random.PRNGKey(hash(case) % 2**31), m, k, n, len(sizes), dtype)
  group_sizes = jnp.array(sizes, jnp.int32)
  out = jax.jit(jgg.ragged_dot)(lhs, rhs, group_sizes)
  assert out.dtype == dtype and out.shape == (m, n)
  _check(out, reference.ragged_m(lhs.astype(jnp.float32), rhs.astype(jnp.float32), sizes))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
def test_matches_jax_lax(dtype):
  m, k, n, sizes = CASES["odd_sizes"]
  lhs, rhs = _operands(jax.random.PRNGKey(1), m, k, n, len(sizes), dtype)
  group_sizes = jnp.array(sizes, jnp.int32)
  for preferred in (None, jnp.float32):
    ours = jgg.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=preferred)
    theirs = reference.on_cpu(jax.lax.ragged_dot, lhs, rhs, group_sizes,
                              preferred_element_type=preferred)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    _check(ours, np.asarray(theirs.astype(jnp.float32), np.float64))


@pytest.mark.parametrize("sizes", [[-5, 30, 10], [100, 3, 2], [2**31 - 1, 2**31 - 1, 5],
                                   [-2**31, 7, -1], [10, -3, 100]], ids=str)
def test_out_of_range_group_sizes_are_clamped(sizes):
  lhs, rhs = _operands(jax.random.PRNGKey(2), 37, 12, 20, 3, jnp.float32)
  out = jax.jit(jgg.ragged_dot)(lhs, rhs, jnp.array(sizes, jnp.int32))
  _check(out, reference.ragged_m(lhs, rhs, sizes))


@pytest.mark.parametrize("num_shards", [2, 4])
def test_group_offset_computes_only_its_groups(num_shards):
  m, k, n, sizes = 90, 16, 24, [7, 0, 30, 11, 2, 25, 1, 9]
  lhs, rhs = _operands(jax.random.PRNGKey(3), m, k, n, len(sizes), jnp.float32)
  group_sizes = jnp.array(sizes, jnp.int32)
  local = len(sizes) // num_shards
  call = jax.jit(jgg.ragged_dot)
  total = 0
  for shard in range(num_shards):
    offset = jnp.array([shard * local], jnp.int32)
    part = call(lhs, rhs[shard * local:(shard + 1) * local], group_sizes, group_offset=offset)
    _check(part, reference.ragged_m(lhs, rhs[shard * local:(shard + 1) * local], sizes,
                                    group_offset=shard * local))
    total = total + part
  _check(total, reference.ragged_m(lhs, rhs, sizes))


@pytest.mark.parametrize("offset", [-3, 7, 100])
def test_group_offset_out_of_range_is_clamped(offset):
  lhs, rhs = _operands(jax.random.PRNGKey(4), 40, 8, 8, 8, jnp.float32)
  sizes = [5] * 8
  out = jgg.ragged_dot(lhs, rhs[:2], jnp.array(sizes, jnp.int32),
                       group_offset=jnp.array([offset], jnp.int32))
  _check(out, reference.ragged_m(lhs, rhs[:2], sizes, group_offset=offset))


def test_sizes_and_offsets_wider_than_int32_saturate():
  """Unsigned sizes past int32's range mean "all the rows" under the clamping rule, as in
  jax.lax: they are saturated, not wrapped to negative (which would count as 0)."""
  lhs, rhs = _operands(jax.random.PRNGKey(5), 37, 12, 20, 3, jnp.float32)
  sizes = np.array([2**32 - 1, 0, 3], np.uint32)
  _check(jgg.ragged_dot(lhs, rhs, jnp.asarray(sizes)),
         reference.ragged_m(lhs, rhs, [int(s) for s in sizes]))
  past_every_group = jnp.array([2**32 - 1], jnp.uint32)
  out = jgg.ragged_dot(lhs, rhs[:2], jnp.array([5, 5, 5], jnp.int32),
                       group_offset=past_every_group)
  _check(out, reference.ragged_m(lhs, rhs[:2], [5, 5, 5], group_offset=2**32 - 1))
  # Host int64 values (NumPy's default, Python lists) saturate too, x64 or not: jnp.asarray
  # alone would wrap 2**32 + 8 to 8 with x64 off.
  for host in (np.array([2**32 + 8, 0, 3]), [2**32 + 8, 0, 3]):
    _check(jgg.ragged_dot(lhs, rhs, host), reference.ragged_m(lhs, rhs, [2**32 + 8, 0, 3]))
  out = jgg.ragged_dot(lhs, rhs[:2], jnp.array([5, 5, 5], jnp.int32),
                       group_offset=np.array([2**32 + 1]))
  _check(out, reference.ragged_m(lhs, rhs[:2], [5, 5, 5], group_offset=2**32 + 1))


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int8, jnp.bool_, jnp.float8_e4m3fn])
def test_result_dtypes_the_kernels_cannot_write_are_refused_at_trace_time(dtype):
  lhs, rhs = _operands(jax.random.PRNGKey(6), 8, 4, 5, 2, jnp.float32)
  with pytest.raises(TypeError, match="preferred_element_type: the kernels write float32"):
    jax.eval_shape(lambda a, b: jgg.ragged_dot(a, b, jnp.array([3, 5], jnp.int32),
                                               preferred_element_type=dtype), lhs, rhs)


def test_donated_buffers():
  # lhs [M, K] and out [M, N] match when K == N: XLA may hand lhs's buffer to out.
  lhs, rhs = _operands(jax.random.PRNGKey(5), 32, 16, 16, 2, jnp.float32)
  group_sizes = jnp.array([10, 22], jnp.int32)
  expected = reference.ragged_m(lhs, rhs, [10, 22])
  out = jax.jit(jgg.ragged_dot, donate_argnums=0)(lhs, rhs, group_sizes)
  assert lhs.is_deleted()
  _check(out, expected)


def test_same_executable_new_group_sizes():
  lhs, rhs = _operands(jax.random.PRNGKey(6), 48, 16, 8, 3, jnp.float32)
  call = jax.jit(jgg.ragged_dot)
  for sizes in ([48, 0, 0], [0, 0, 48], [16, 16, 16], [0, 0, 0], [5, 40, 3]):
    _check(call(lhs, rhs, jnp.array(sizes, jnp.int32)), reference.ragged_m(lhs, rhs, sizes))
