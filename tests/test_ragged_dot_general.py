"""ragged_dot_general: every jax.lax mode and dimension layout, property tests, trace-time errors."""

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src.lax.lax import _ragged_dot_general_impl as _jax_dense_ragged_dot_general

import jax_grouped_gemm as jgg
import reference

Dims = lax.RaggedDotDimensionNumbers

# name: (lhs shape, rhs shape, group_sizes shape, dimension numbers). The group
# count is the last dimension of group_sizes.
LAYOUTS = {
    "forward": ((30, 8), (3, 8, 6), (3,), Dims((([1], [1]), ([], [])), [0], [0])),
    "dgrad_rhs_nk_in_place": ((30, 6), (3, 8, 6), (3,), Dims((([1], [2]), ([], [])), [0], [0])),
    "lhs_km": ((8, 30), (3, 8, 6), (3,), Dims((([0], [1]), ([], [])), [1], [0])),
    "group_dim_last": ((30, 8), (8, 6, 3), (3,), Dims((([1], [0]), ([], [])), [0], [2])),
    "batched": ((2, 30, 8), (3, 2, 8, 6), (2, 3), Dims((([2], [2]), ([0], [1])), [1], [0])),
    "batched_broadcast_sizes": ((2, 30, 8), (3, 2, 8, 6), (3,),
                                Dims((([2], [2]), ([0], [1])), [1], [0])),
    "outer_free_dim": ((4, 30, 8), (3, 8, 6), (4, 3), Dims((([2], [1]), ([], [])), [1], [0])),
    "inner_free_dim": ((30, 2, 8), (3, 8, 6), (3,), Dims((([2], [1]), ([], [])), [0], [0])),
    "two_contracting": ((30, 4, 2), (3, 4, 2, 6), (3,), Dims((([1, 2], [1, 2]), ([], [])), [0], [0])),
    "wgrad": ((30, 8), (30, 6), (3,), Dims((([0], [0]), ([], [])), [0], [])),
    "wgrad_batched": ((2, 30, 8), (2, 30, 6), (2, 3), Dims((([1], [1]), ([0], [0])), [1], [])),
    "wgrad_transposed_operands": ((8, 30), (6, 30), (3,), Dims((([1], [1]), ([], [])), [1], [])),
    "wgrad_outer_contracting": ((5, 30, 8), (5, 30, 6), (5, 3),
                                Dims((([0, 1], [0, 1]), ([], [])), [1], [])),
    # An outer contracting dim of size 0: the result is a sum over nothing, zeros.
    "wgrad_outer_contracting_of_size_0": ((0, 30, 8), (0, 30, 6), (0, 3),
                                          Dims((([0, 1], [0, 1]), ([], [])), [1], [])),
    "wgrad_inner_contracting": ((30, 5, 8), (30, 5, 6), (3,),
                                Dims((([0, 1], [0, 1]), ([], [])), [0], [])),
    "ragged_batch": ((3, 10, 8), (3, 8, 6), (3,), Dims((([2], [1]), ([0], [0])), [0], [])),
}


def _random_sizes(rng, shape, ragged_extent):
  """Per-row group sizes summing to at most the ragged extent (jax's valid domain)."""
  flat = []
  for _ in range(int(np.prod(shape[:-1]))):
    cuts = np.sort(rng.integers(0, ragged_extent + 1, shape[-1]))
    flat.append(np.diff(np.concatenate([[0], cuts])))
  return np.array(flat, np.int32).reshape(shape)


@pytest.mark.parametrize("name", LAYOUTS)
def test_matches_jax_lax(name):
  lhs_shape, rhs_shape, gs_shape, dims = LAYOUTS[name]
  rng = np.random.default_rng(abs(hash(name)) % 2**32)
  lhs = jnp.asarray(rng.standard_normal(lhs_shape), jnp.float32)
  rhs = jnp.asarray(rng.standard_normal(rhs_shape), jnp.float32)
  group_sizes = jnp.asarray(_random_sizes(rng, gs_shape, lhs_shape[dims.lhs_ragged_dimensions[0]]))
  ours = jax.jit(jgg.ragged_dot_general, static_argnums=3)(lhs, rhs, group_sizes, dims)
  theirs = reference.on_cpu(lax.ragged_dot_general, lhs, rhs, group_sizes, dims)
  assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
  assert reference.relative_error(ours, theirs) < 1e-5
  # And the gradients, through our JVP/transpose rules.
  ct = jnp.asarray(rng.standard_normal(theirs.shape), jnp.float32)
  grads = lambda f: jax.grad(lambda a, b: jnp.sum(f(a, b, group_sizes, dims) * ct), (0, 1))(lhs, rhs)
  # jax.lax's primitive has no transpose rule in the ragged contracting and batch
  # modes; its dense masked implementation (plain jnp ops) differentiates in all.
  theirs_grads = reference.on_cpu(lambda: grads(_jax_dense_ragged_dot_general))
  for a, b in zip(grads(jgg.ragged_dot_general), theirs_grads):
    assert reference.relative_error(a, b) < 1e-5


def test_dgrad_layout_reads_rhs_in_place():
  _, _, _, dims = LAYOUTS["dgrad_rhs_nk_in_place"]
  text = jax.jit(jgg.ragged_dot_general, static_argnums=3).lower(
      jnp.ones((30, 6)), jnp.ones((3, 8, 6)), jnp.array([10, 10, 10], jnp.int32), dims).as_text()
  assert "stablehlo.transpose" not in text and "rhs_transposed = true" in text


@hypothesis.given(
    m=st.integers(1, 40), k=st.integers(1, 24), n=st.integers(1, 24),
    sizes=st.lists(st.integers(-10, 50), min_size=1, max_size=6),
    dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
    seed=st.integers(0, 2**31 - 1))
def test_property_forward_and_grads_any_group_sizes(m, k, n, sizes, dtype, seed):
  """Any device-side group sizes (negative, sum past M): clamped, never out of bounds."""
  rng = np.random.default_rng(seed)
  lhs = jnp.asarray(rng.standard_normal((m, k)), dtype)
  rhs = jnp.asarray(rng.standard_normal((len(sizes), k, n)), dtype)
  ct = jnp.asarray(rng.standard_normal((m, n)), dtype)
  group_sizes = jnp.asarray(sizes, jnp.int32)
  out, vjp = jax.vjp(lambda a, b: jgg.ragged_dot(a, b, group_sizes), lhs, rhs)
  d_lhs, d_rhs = vjp(ct)
  f32 = lambda x: np.asarray(x.astype(jnp.float32))
  tol = reference.TOLERANCE[dtype]
  assert reference.relative_error(out, reference.ragged_m(f32(lhs), f32(rhs), sizes)) <= tol
  expected_lhs = reference.ragged_m(f32(ct), f32(rhs), sizes, rhs_transposed=True)
  expected_rhs = reference.ragged_k(f32(lhs), f32(ct), sizes, num_groups=len(sizes))
  assert reference.relative_error(d_lhs, expected_lhs) <= tol
  assert reference.relative_error(d_rhs, expected_rhs) <= tol


@hypothesis.given(
    r=st.integers(1, 40), p=st.integers(1, 16), n=st.integers(1, 16),
    sizes=st.lists(st.integers(-10, 50), min_size=1, max_size=6),
    offset=st.integers(-2, 7), seed=st.integers(0, 2**31 - 1))
def test_property_ragged_contracting_with_offset(r, p, n, sizes, offset, seed):
  rng = np.random.default_rng(seed)
  lhs = jnp.asarray(rng.standard_normal((r, p)), jnp.float32)
  rhs = jnp.asarray(rng.standard_normal((r, n)), jnp.float32)
  out = jgg.ragged_dot_general(lhs, rhs, jnp.asarray(sizes, jnp.int32), LAYOUTS["wgrad"][3],
                               group_offset=jnp.array([offset], jnp.int32))
  expected = reference.ragged_k(lhs, rhs, sizes, num_groups=len(sizes), group_offset=offset)
  assert reference.relative_error(out, expected) < 1e-5


ERRORS = {
    "lhs_dtype": (dict(lhs=jnp.ones((4, 3), jnp.int32)), "lhs: dtype int32"),
    "rhs_dtype": (dict(rhs=jnp.ones((2, 3, 5), jnp.float64 if jax.config.x64_enabled else jnp.int8)),
                  "rhs: dtype"),
    "group_sizes_dtype": (dict(group_sizes=jnp.ones((2,), jnp.float32)), "group_sizes: expected an integer"),
    "group_count_mismatch": (dict(group_sizes=jnp.ones((3,), jnp.int32)), "group dimension size"),
    "k_mismatch": (dict(rhs=jnp.ones((2, 4, 5))), "contracting"),
    "group_offset_shape": (dict(group_offset=jnp.zeros((2,), jnp.int32)), "group_offset: expected"),
    "rhs_more_groups_than_sizes": (dict(rhs=jnp.ones((3, 3, 5)), group_offset=jnp.zeros((1,), jnp.int32)),
                                   "rhs: holds 3 groups"),
}


@pytest.mark.parametrize("name", ERRORS)
def test_trace_time_errors_name_the_argument(name):
  args = dict(lhs=jnp.ones((4, 3)), rhs=jnp.ones((2, 3, 5)), group_sizes=jnp.array([1, 3], jnp.int32),
              group_offset=None)
  overrides, message = ERRORS[name]
  args.update(overrides)
  with pytest.raises(TypeError, match=message):
    jax.jit(jgg.ragged_dot).lower(**args)


_NT = lax.RaggedDotDimensionNumbers


def test_group_offset_is_refused_where_the_ragged_dimension_is_a_batch_dimension():
  lhs, rhs, group_sizes = jnp.ones((3, 10, 8)), jnp.ones((3, 8, 6)), jnp.array([4, 3, 3])
  dims = _NT((([2], [1]), ([0], [0])), [0], [])
  assert jgg.ragged_dot_general(lhs, rhs, group_sizes, dims).shape == (3, 10, 6)
  with pytest.raises(TypeError, match="group_offset: not supported where the ragged dimension"):
    jgg.ragged_dot_general(lhs, rhs, group_sizes, dims, group_offset=jnp.zeros((1,), jnp.int32))


@pytest.mark.parametrize("dims, group_sizes", [
    (_NT((([1], [1]), ([], [])), [0], [3]), jnp.array([2, 3], jnp.int32)),   # past rhs's rank
    (_NT((([1], [1]), ([], [])), [0], [-1]), jnp.array([2, 3], jnp.int32)),  # negative
    (_NT((([1], [1]), ([], [])), [0], [0]), jnp.array(5, jnp.int32)),        # rank-0 sizes
], ids=["group_dim_past_rank", "group_dim_negative", "scalar_group_sizes"])
def test_group_offset_leaves_bad_dimension_numbers_to_jaxs_shape_rule(dims, group_sizes):
  lhs, rhs = jnp.ones((5, 3)), jnp.ones((2, 3, 4))
  with pytest.raises(TypeError) as expected:
    lax.ragged_dot_general(lhs, rhs, group_sizes, dims)
  with pytest.raises(TypeError) as ours:
    jgg.ragged_dot_general(lhs, rhs, group_sizes, dims, group_offset=jnp.zeros((1,), jnp.int32))
  assert str(ours.value) == str(expected.value)
