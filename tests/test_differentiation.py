"""Gradients, forward mode, linearize, higher order and vmap of ragged_dot."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_grouped_gemm as jgg
import reference

SIZES = [9, 0, 14, 6]  # sums to 29 of M = 33: the last 4 rows belong to no group


def _operands(seed, m=33, k=12, n=10, g=4, dtype=jnp.float32):
  k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(k1, (m, k), jnp.float32).astype(dtype),
          jax.random.normal(k2, (g, k, n), jnp.float32).astype(dtype),
          jax.random.normal(k3, (m, n), jnp.float32).astype(dtype))


def _loss(dot, group_sizes):
  return lambda lhs, rhs, ct: jnp.sum(dot(lhs, rhs, group_sizes).astype(jnp.float32) * ct)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16],
                         ids=lambda d: jnp.dtype(d).name)
def test_grad_matches_jax_lax(dtype):
  lhs, rhs, ct = _operands(0, dtype=dtype)
  group_sizes = jnp.array(SIZES, jnp.int32)
  ours = jax.jit(jax.grad(_loss(jgg.ragged_dot, group_sizes), (0, 1)))(lhs, rhs, ct)
  theirs = reference.on_cpu(jax.grad(_loss(jax.lax.ragged_dot, group_sizes), (0, 1)), lhs, rhs, ct)
  for a, b in zip(ours, theirs):
    assert a.dtype == b.dtype
    err = reference.relative_error(a, np.asarray(b.astype(jnp.float32), np.float64))
    assert err <= reference.TOLERANCE[jnp.dtype(dtype).name], err


def test_dgrad_and_wgrad_against_float64():
  lhs, rhs, ct = _operands(1)
  group_sizes = jnp.array(SIZES, jnp.int32)
  _, vjp = jax.vjp(lambda a, b: jgg.ragged_dot(a, b, group_sizes), lhs, rhs)
  d_lhs, d_rhs = vjp(ct)
  # dgrad: ct . rhs^T per group; wgrad: lhs^T . ct per group.
  expected_lhs = reference.ragged_m(ct, rhs, SIZES, rhs_transposed=True)
  expected_rhs = reference.ragged_k(lhs, ct, SIZES, num_groups=len(SIZES))
  assert reference.relative_error(d_lhs, expected_lhs) < 1e-5
  assert reference.relative_error(d_rhs, expected_rhs) < 1e-5


def test_empty_expert_wgrad_is_exactly_zero():
  lhs, rhs, ct = _operands(2)
  group_sizes = jnp.array(SIZES, jnp.int32)  # expert 1 is empty
  d_rhs = jax.grad(_loss(jgg.ragged_dot, group_sizes), 1)(lhs, rhs, ct)
  assert np.all(np.asarray(d_rhs[1]) == 0.0)
  assert np.all(np.isfinite(np.asarray(d_rhs)))


def test_grad_with_group_offset():
  lhs, rhs, ct = _operands(3)
  group_sizes = jnp.array(SIZES, jnp.int32)
  offset = jnp.array([2], jnp.int32)
  loss = lambda a, b: jnp.sum(jgg.ragged_dot(a, b, group_sizes, group_offset=offset) * ct)
  d_lhs, d_rhs = jax.grad(loss, (0, 1))(lhs, rhs[2:])
  full_lhs, full_rhs = jax.grad(_loss(jgg.ragged_dot, group_sizes), (0, 1))(lhs, rhs, ct)
  rows = slice(9, 29)  # the rows of groups 2 and 3
  np.testing.assert_allclose(d_lhs[rows], full_lhs[rows], rtol=1e-5, atol=1e-5)
  assert np.all(np.asarray(d_lhs[:9]) == 0) and np.all(np.asarray(d_lhs[29:]) == 0)
  np.testing.assert_allclose(d_rhs, full_rhs[2:], rtol=1e-5, atol=1e-5)


def test_check_grads_forward_and_reverse_second_order():
  lhs, rhs, _ = _operands(4, m=11, k=5, n=6, g=3)
  group_sizes = jnp.array([4, 0, 5], jnp.int32)
  check_grads(lambda a, b: jgg.ragged_dot(a, b, group_sizes), (lhs, rhs), order=2,
              modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)


def test_jvp_and_linearize_match_jax_lax():
  lhs, rhs, _ = _operands(5)
  t_lhs, t_rhs, _ = _operands(6)
  group_sizes = jnp.array(SIZES, jnp.int32)
  ours = jax.jvp(lambda a, b: jgg.ragged_dot(a, b, group_sizes), (lhs, rhs), (t_lhs, t_rhs))
  theirs = reference.on_cpu(
      lambda a, b, g, ta, tb: jax.jvp(lambda x, w: jax.lax.ragged_dot(x, w, g), (a, b), (ta, tb)),
      lhs, rhs, group_sizes, t_lhs, t_rhs)
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  _, linear = jax.linearize(lambda a, b: jgg.ragged_dot(a, b, group_sizes), lhs, rhs)
  np.testing.assert_allclose(linear(t_lhs, t_rhs), theirs[1], rtol=1e-5, atol=1e-5)


def test_group_sizes_cotangent_is_float0():
  lhs, rhs, ct = _operands(7)
  group_sizes = jnp.array(SIZES, jnp.int32)
  _, vjp = jax.vjp(jgg.ragged_dot, lhs, rhs, group_sizes)
  assert vjp(ct)[2].dtype == jax.dtypes.float0


@pytest.mark.parametrize("vmapped_rhs", [True, False])
def test_vmap_folds_into_the_batch(vmapped_rhs):
  keys = jax.random.split(jax.random.PRNGKey(8), 3)
  lhs = jax.random.normal(keys[0], (3, 20, 6))
  rhs = jax.random.normal(keys[1], (3, 2, 6, 5) if vmapped_rhs else (2, 6, 5))
  sizes = np.array([[5, 15], [0, 20], [12, 3]], np.int32)
  out = jax.vmap(jgg.ragged_dot, in_axes=(0, 0 if vmapped_rhs else None, 0))(
      lhs, rhs, jnp.asarray(sizes))
  text = jax.jit(jax.vmap(jgg.ragged_dot, in_axes=(0, 0 if vmapped_rhs else None, 0))).lower(
      lhs, rhs, jnp.asarray(sizes)).as_text()
  assert text.count("custom_call @jgg_ragged_m") == 1  # one call, not a loop
  for i in range(3):
    expected = reference.ragged_m(lhs[i], rhs[i] if vmapped_rhs else rhs, sizes[i])
    assert reference.relative_error(out[i], expected) < 1e-5


def test_batches_above_the_grid_limit_split_into_calls(monkeypatch):
  """A vmap folds into the kernels' batch, which CUDA grids cap at 65535: larger batches become
  several calls (here the cap is lowered to 2), forward and both gradients."""
  from jax_grouped_gemm import ragged_gemm_ops
  monkeypatch.setattr(ragged_gemm_ops, "MAX_BATCH_PER_CALL", 2)
  keys = jax.random.split(jax.random.PRNGKey(11), 3)
  lhs = jax.random.normal(keys[0], (5, 12, 4))
  rhs = jax.random.normal(keys[1], (5, 3, 4, 6))
  ct = jax.random.normal(keys[2], (5, 12, 6))
  sizes = np.array([[3, 0, 9], [12, 0, 0], [1, 2, 3], [0, 0, 0], [4, 4, 4]], np.int32)
  loss = lambda f: (lambda a, b, s, c: jnp.sum(f(a, b, s) * c))
  batched = jax.jit(jax.vmap(jax.value_and_grad(loss(jgg.ragged_dot), (0, 1))))
  assert batched.lower(lhs, rhs, sizes, ct).as_text().count("custom_call @jgg_ragged_m") == 6
  value, (d_lhs, d_rhs) = batched(lhs, rhs, jnp.asarray(sizes), ct)
  for i in range(5):
    theirs = reference.on_cpu(jax.value_and_grad(loss(jax.lax.ragged_dot), (0, 1)),
                              lhs[i], rhs[i], sizes[i], ct[i])
    np.testing.assert_allclose(value[i], theirs[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_lhs[i], theirs[1][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_rhs[i], theirs[1][1], rtol=1e-5, atol=1e-5)


def test_vmap_of_grad():
  lhs = jax.random.normal(jax.random.PRNGKey(9), (2, 16, 4))
  rhs = jax.random.normal(jax.random.PRNGKey(10), (2, 4, 3))
  sizes = jnp.array([[6, 10], [16, 0]], jnp.int32)
  loss = lambda f: (lambda a, b, s: jnp.sum(f(a, b, s) ** 2))
  ours = jax.vmap(jax.grad(loss(jgg.ragged_dot), 1), (0, None, 0))(lhs, rhs, sizes)
  for i in range(2):  # jax.lax.ragged_dot has no batching rule for this: compare per example
    theirs = reference.on_cpu(jax.grad(loss(jax.lax.ragged_dot), 1), lhs[i], rhs, sizes[i])
    np.testing.assert_allclose(ours[i], theirs, rtol=1e-5, atol=1e-5)
