"""jit with named shardings: every parallelism case on a 2x4 CPU mesh, Shardy and GSPMD.

For each case, forward and gradients: the numbers equal the unsharded
computation, the compiled program holds exactly the collectives the plan
calls for (so, e.g., no all-gather of expert weights under expert or column
parallelism), and each device's custom calls see their local shapes.
"""

import collections
import dataclasses
import functools

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native, partitioning
from jax_grouped_gemm.group_sizes import group_ends
from jax_grouped_gemm.sharding_rules import dim_axes
from jax_grouped_gemm import ragged_gemm_ops as ops
import reference
from sharding_checks import (  # noqa: F401  (fixtures: on_cpu, partitioner)
    collectives, cpu_mesh, custom_calls, on_cpu, partitioner)

M, K, N, G = 32, 16, 24, 8
SIZES = [5, 0, 7, 3, 6, 1, 0, 4]  # 26 of 32 rows; boundaries cut across every shard split
TOL = 1e-5


@functools.cache
def _operands(seed=0):
  rng = np.random.default_rng(seed)
  return (rng.standard_normal((M, K)).astype(np.float32),
          rng.standard_normal((G, K, N)).astype(np.float32),
          rng.standard_normal((M, N)).astype(np.float32))


def _loss(lhs, rhs, group_sizes, ct):
  return jnp.sum(jgg.ragged_dot(lhs, rhs, group_sizes) * ct)


@functools.cache
def _unsharded():
  lhs, rhs, ct = _operands()
  sizes = np.array(SIZES, np.int32)
  out = jax.jit(jgg.ragged_dot)(lhs, rhs, sizes)
  grads = jax.jit(jax.grad(_loss, (0, 1)))(lhs, rhs, sizes, ct)
  return np.asarray(out), tuple(np.asarray(g) for g in grads)


def _put(mesh, x, spec):
  return jax.device_put(x, NamedSharding(mesh, spec))


def collectives_of(lines):
  return collections.Counter(lines)


def _f32(shape):
  return f"f32[{','.join(map(str, shape))}]"


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  lhs: P  # sharding of x [M, K]
  rhs: P  # sharding of the weights [G, K, N]
  out: P  # wanted sharding of y [M, N] (and of its cotangent)
  forward: tuple  # the collectives of the forward program, "kind shape"
  gradient: tuple  # ... of the program computing (dx, dw), sharded like (x, w)
  local_lhs: tuple  # the forward custom call's operands on one device
  local_rhs: tuple
  local_dw: tuple  # the wgrad custom call's result on one device

  def __str__(self):
    return self.name


CASES = [
    # Column parallel: weights split on N; the forward needs nothing, dgrad sums over N.
    Case("column", P(), P(None, None, "model"), P(None, "model"),
         (), ("all-reduce f32[1,32,16]",),
         (1, 32, 16), (8, 1, 16, 6), (8, 1, 16, 6)),
    # Row parallel: K split; one all-reduce of the forward output, none in the backward.
    Case("row", P(None, "model"), P(None, "model", None), P(),
         ("all-reduce f32[1,32,24]",), (),
         (1, 32, 4), (8, 1, 4, 24), (8, 1, 4, 24)),
    # Expert parallel, tokens replicated: local experts by group_offset, one psum combine;
    # wgrad of the local experts needs nothing.
    Case("expert", P(), P("model"), P(),
         ("all-reduce f32[1,32,24]",), ("all-reduce f32[1,32,16]",),
         (1, 32, 16), (2, 1, 16, 24), (2, 1, 16, 24)),
    # Expert parallel with tokens split on the experts' axis: the tokens are gathered (never
    # the weights) and the combine is a reduce-scatter back onto the token split; wgrad sums
    # every expert's partial dW over the local rows and reduce-scatters it onto the experts.
    Case("expert_tokens_split", P("model"), P("model"), P("model"),
         ("all-gather f32[1,32,16]", "reduce-scatter f32[1,8,24]"),
         ("all-gather f32[1,32,24]", "reduce-scatter f32[1,8,16]",
          "reduce-scatter f32[2,1,16,24]"),
         (1, 32, 16), (2, 1, 16, 24), (8, 1, 16, 24)),
    # Data parallel: per-shard group boundaries from the global sizes; dW all-reduced.
    Case("data", P("data"), P(), P("data"),
         (), ("all-reduce f32[8,1,16,24]",),
         (1, 16, 16), (8, 1, 16, 24), (8, 1, 16, 24)),
    # FSDP: weights split on K over the data axis are gathered; dW reduce-scattered back.
    Case("fsdp", P("data"), P(None, "data", None), P("data"),
         ("all-gather f32[8,1,16,24]",),
         ("all-gather f32[8,1,16,24]", "reduce-scatter f32[8,1,8,24]"),
         (1, 16, 16), (8, 1, 16, 24), (8, 1, 16, 24)),
    # 2x4 combinations.
    Case("data_column", P("data"), P(None, None, "model"), P("data", "model"),
         (), ("all-reduce f32[1,16,16]", "all-reduce f32[8,1,16,6]"),
         (1, 16, 16), (8, 1, 16, 6), (8, 1, 16, 6)),
    Case("data_row", P("data", "model"), P(None, "model", None), P("data"),
         ("all-reduce f32[1,16,24]",), ("all-reduce f32[8,1,4,24]",),
         (1, 16, 4), (8, 1, 4, 24), (8, 1, 4, 24)),
    Case("data_expert", P("data"), P("model"), P("data"),
         ("all-reduce f32[1,16,24]",), ("all-reduce f32[1,16,16]", "all-reduce f32[2,1,16,24]"),
         (1, 16, 16), (2, 1, 16, 24), (2, 1, 16, 24)),
    Case("expert_column", P(), P("data", None, "model"), P(None, "model"),
         ("all-reduce f32[1,32,6]",), ("all-reduce f32[1,32,16]",),
         (1, 32, 16), (4, 1, 16, 6), (4, 1, 16, 6)),
    Case("fsdp_column", P("data"), P(None, "data", "model"), P("data", "model"),
         ("all-gather f32[8,1,16,6]",),
         ("all-gather f32[8,1,16,6]", "all-reduce f32[1,16,16]", "reduce-scatter f32[8,1,8,6]"),
         (1, 16, 16), (8, 1, 16, 6), (8, 1, 16, 6)),
    Case("expert_over_both_axes", P(), P(("data", "model")), P(),
         ("all-reduce f32[1,32,24]",), ("all-reduce f32[1,32,16]",),
         (1, 32, 16), (1, 1, 16, 24), (1, 1, 16, 24)),
]


def _assert_close(actual, expected, what):
  err = reference.relative_error(actual, expected)
  assert err <= TOL, f"{what}: relative error {err}"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_case_forward_and_gradients(case, partitioner):
  mesh = cpu_mesh()
  lhs, rhs, ct = _operands()
  sizes = jnp.array(SIZES, jnp.int32)
  x, w, y_bar = _put(mesh, lhs, case.lhs), _put(mesh, rhs, case.rhs), _put(mesh, ct, case.out)
  expected_out, expected_grads = _unsharded()

  forward = jax.jit(lambda a, b, s: jgg.ragged_dot(a, b, s),
                    out_shardings=NamedSharding(mesh, case.out))
  out = forward(x, w, sizes)
  _assert_close(out, expected_out, "forward")
  assert out.sharding.is_equivalent_to(NamedSharding(mesh, case.out), 2)
  hlo = forward.lower(x, w, sizes).compile().as_text()
  assert collectives(hlo) == collectives_of(case.forward), hlo
  (target, _, operands), = custom_calls(hlo)
  assert target == _native.RAGGED_M_TARGET
  assert operands[:2] == (_f32(case.local_lhs), _f32(case.local_rhs))

  gradient = jax.jit(jax.grad(_loss, (0, 1)), out_shardings=(x.sharding, w.sharding))
  dx, dw = gradient(x, w, sizes, y_bar)
  _assert_close(dx, expected_grads[0], "dx")
  _assert_close(dw, expected_grads[1], "dw")
  hlo = gradient.lower(x, w, sizes, y_bar).compile().as_text()
  assert collectives(hlo) == collectives_of(case.gradient), hlo
  calls = {t: (result, operands) for t, result, operands in custom_calls(hlo)}
  assert sorted(calls) == sorted([_native.RAGGED_M_TARGET, _native.RAGGED_K_TARGET])
  assert calls[_native.RAGGED_K_TARGET][0] == _f32(case.local_dw)


def _unit_dims_dropped(counter):
  """Collectives by kind and volume: whether a unit dimension is reshaped away before
  or after a collective is XLA's choice, not a different plan."""
  def drop(key):
    kind, shape = key.split(" ")
    dtype, dims = shape[:-1].split("[")
    return f"{kind} {dtype}[{','.join(d for d in dims.split(',') if d != '1')}]"
  return collections.Counter(drop(k) for k in counter.elements())


def _padded(spec, ndim):
  return tuple(spec) + (None,) * (ndim - len(spec))


def _typed_spec(x):
  """The partition spec of x's type (Explicit axes), one entry per dimension."""
  return _padded(jax.typeof(x).sharding.spec, x.ndim)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_explicit_axes_case(case, partitioner):
  """Sharding in types (jax.make_mesh's default Explicit axes): ragged_dot takes
  out_sharding as jax.lax's does, the gradients come back typed like their primals,
  and the compiled programs hold the same collectives as on Auto axes."""
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  lhs, rhs, ct = _operands()
  expected_out, expected_grads = _unsharded()
  with jax.set_mesh(mesh):
    sizes = jnp.array(SIZES, jnp.int32)
    x, w, y_bar = _put(mesh, lhs, case.lhs), _put(mesh, rhs, case.rhs), _put(mesh, ct, case.out)
    forward = jax.jit(lambda a, b, s: jgg.ragged_dot(a, b, s, out_sharding=case.out))
    out = forward(x, w, sizes)
    assert _typed_spec(out) == _padded(case.out, out.ndim)
    _assert_close(out, expected_out, "forward")
    hlo = forward.lower(x, w, sizes).compile().as_text()
    assert _unit_dims_dropped(collectives(hlo)) == _unit_dims_dropped(
        collectives_of(case.forward)), hlo

    gradient = jax.jit(jax.grad(_loss, (0, 1)))
    dx, dw = gradient(x, w, sizes, y_bar)
    assert _typed_spec(dx) == _padded(case.lhs, dx.ndim)
    assert _typed_spec(dw) == _padded(case.rhs, dw.ndim)
    _assert_close(dx, expected_grads[0], "dx")
    _assert_close(dw, expected_grads[1], "dw")
    hlo = gradient.lower(x, w, sizes, y_bar).compile().as_text()
    assert _unit_dims_dropped(collectives(hlo)) == _unit_dims_dropped(
        collectives_of(case.gradient)), hlo


@pytest.mark.parametrize("lhs_spec, rhs_spec, expected", [
    (P(), P(None, None, "model"), P(None, "model")),  # column: split on N
    (P("data"), P(), P("data")),                     # data: split on M
    (P(None, "model"), P(None, "model", None), P()),  # row: summed, replicated
    (P(), P("model"), P()),                          # expert: combined, replicated
    (P("data"), P(None, "data", None), P("data")),    # fsdp: weights gathered, not tokens
], ids=["column", "data", "row", "expert", "fsdp"])
def test_explicit_axes_infer_the_result_type(lhs_spec, rhs_spec, expected, partitioner):
  """Without out_sharding (where jax.lax.ragged_dot raises), the result's type is the
  one spec's plan, and the program computes it."""
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  lhs, rhs, _ = _operands()
  with jax.set_mesh(mesh):
    x, w = _put(mesh, lhs, lhs_spec), _put(mesh, rhs, rhs_spec)
    sizes = jnp.array(SIZES, jnp.int32)
    out = jax.jit(jgg.ragged_dot)(x, w, sizes)
    assert _typed_spec(out) == _padded(expected, out.ndim)
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, expected), 2), out.sharding
    _assert_close(out, _unsharded()[0], "forward")


def _batched_problem(seed):
  """A ragged_dot_general with a batch dimension of 2 (each entry its own group sizes):
  (lhs, rhs, sizes, dimension numbers, the float64 reference result)."""
  rng = np.random.default_rng(seed)
  lhs = rng.standard_normal((2, M, K)).astype(np.float32)
  rhs = rng.standard_normal((2, G, K, N)).astype(np.float32)
  sizes = np.array([SIZES, SIZES[::-1]], np.int32)
  dims = jax.lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(([2], [2]), ([0], [0])), lhs_ragged_dimensions=[1],
      rhs_group_dimensions=[1])
  expected = np.stack([reference.ragged_m(lhs[i], rhs[i], sizes[i]) for i in range(2)])
  return lhs, rhs, sizes, dims, expected


def test_explicit_axes_out_sharding_of_n_d_layouts(partitioner):
  """An N-D ragged_dot_general whose result the kernel's layout cannot carry directly
  still ends typed (and placed) as out_sharding asks."""
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  lhs, rhs, sizes, dims, expected = _batched_problem(4)
  with jax.set_mesh(mesh):
    fn = jax.jit(lambda a, b, s: jgg.ragged_dot_general(a, b, s, dims,
                                                        out_sharding=P(None, None, "model")))
    out = fn(_put(mesh, lhs, P("data")), _put(mesh, rhs, P("data")), jnp.asarray(sizes))
    assert _typed_spec(out) == _padded(P(None, None, "model"), out.ndim)
    _assert_close(out, expected, "forward")


def test_explicit_axes_out_sharding_on_the_concrete_mesh(partitioner):
  """out_sharding may name the concrete mesh (jax.lax takes it so), not only the abstract one."""
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  lhs, rhs, _ = _operands()
  with jax.set_mesh(mesh):
    x, w = _put(mesh, lhs, P()), _put(mesh, rhs, P(None, None, "model"))
    out = jax.jit(lambda a, b, s: jgg.ragged_dot(
        a, b, s, out_sharding=NamedSharding(mesh, P(None, "model"))))(
            x, w, jnp.array(SIZES, jnp.int32))
    assert _typed_spec(out) == (None, "model")
  _assert_close(out, _unsharded()[0], "forward")


def test_explicit_axes_split_of_a_dim_the_kernel_merges(partitioner):
  """rhs [G, K, N1, N2] split on N2, which the canonical [G, K, N1 * N2] cannot carry behind
  N1: it is gathered before the merge, and forward and gradients are still right and typed."""
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  rng = np.random.default_rng(11)
  lhs = rng.standard_normal((M, K)).astype(np.float32)
  rhs = rng.standard_normal((G, K, 3, 8)).astype(np.float32)
  dims = jax.lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(([1], [1]), ([], [])), lhs_ragged_dimensions=[0],
      rhs_group_dimensions=[0])
  expected = reference.ragged_m(lhs, rhs.reshape(G, K, 24), SIZES).reshape(M, 3, 8)

  def loss(a, b, s):
    return jnp.sum(jgg.ragged_dot_general(a, b, s, dims, out_sharding=P(None, None, "model")))

  with jax.set_mesh(mesh):
    x, w = _put(mesh, lhs, P()), _put(mesh, rhs, P(None, None, None, "model"))
    sizes = jnp.array(SIZES, jnp.int32)
    out = jax.jit(lambda a, b, s: jgg.ragged_dot_general(
        a, b, s, dims, out_sharding=P(None, None, "model")))(x, w, sizes)
    assert _typed_spec(out) == (None, None, "model")
    dx, dw = jax.jit(jax.grad(loss, (0, 1)))(x, w, sizes)
    assert _typed_spec(dw) == (None, None, None, "model")
  _assert_close(out, expected, "forward")
  ones = np.ones((M, 3, 8))
  _assert_close(dx, reference.ragged_m(ones.reshape(M, 24), np.swapaxes(
      rhs.reshape(G, K, 24), 1, 2), SIZES), "dx")
  _assert_close(dw, reference.ragged_k(lhs, ones.reshape(M, 24), SIZES, G).reshape(G, K, 3, 8),
                "dw")


@pytest.mark.parametrize("lhs_spec, rhs_spec, expected", [
    (P(), P(None, None, "model"), P(None, None, "model")),  # column: stays split on N
    (P("data"), P(), P(None, "data")),                    # data: stays split on M
    (P(None, "model"), P(None, "model", None), P()),      # row: summed, replicated
    (P(), P("model"), P()),                               # expert: combined, replicated
], ids=["column", "data", "row", "expert"])
def test_result_sharding_is_inferred_alike(lhs_spec, rhs_spec, expected, partitioner):
  """Without out_shardings each partitioner infers the result's sharding from the one spec."""
  mesh = cpu_mesh()
  lhs, rhs, _ = _operands()
  fn = jax.jit(_canonical_ragged_m)
  out = fn(_put(mesh, lhs, lhs_spec), _put(mesh, rhs, rhs_spec), jnp.array(SIZES, jnp.int32))
  assert out.sharding.is_equivalent_to(NamedSharding(mesh, expected), 3), out.sharding
  _assert_close(out[0], _unsharded()[0], "forward")


def _canonical_ragged_m(lhs, rhs, sizes):
  """The canonical op itself, so its [B, M, N] result sharding is read without a reshape."""
  return ops.ragged_m(lhs[None], rhs[:, None], sizes[None], jnp.zeros((1,), jnp.int32),
                      rhs_transposed=False, out_dtype=jnp.float32)


@pytest.mark.parametrize("offset, first", [(4, 4), (-3, 0), (6, 6)])
def test_group_offset_with_split_experts(offset, first, partitioner):
  """rhs holds global experts [offset, offset + 4) (offset clamped to [0, G]), split 4 ways."""
  mesh = cpu_mesh()
  lhs, rhs, ct = _operands(1)
  held = rhs[first:first + 4]
  held = np.concatenate([held, np.zeros((4 - len(held),) + held.shape[1:], held.dtype)])
  sizes = jnp.array(SIZES, jnp.int32)
  group_offset = jnp.array([offset], jnp.int32)

  def loss(a, b):
    return jnp.sum(jgg.ragged_dot(a, b, sizes, group_offset=group_offset) * ct)

  expected = reference.ragged_m(lhs, held, SIZES, group_offset=offset)
  expected_grads = jax.jit(jax.grad(loss, (0, 1)))(lhs, held)
  x, w = _put(mesh, lhs, P()), _put(mesh, held, P("model"))
  out = jax.jit(lambda a, b: jgg.ragged_dot(a, b, sizes, group_offset=group_offset))(x, w)
  _assert_close(out, expected, "forward")
  grads = jax.jit(jax.grad(loss, (0, 1)), out_shardings=(x.sharding, w.sharding))(x, w)
  for got, want, name in zip(grads, expected_grads, ("dx", "dw")):
    _assert_close(got, want, name)


def test_batch_dimension_split(partitioner):
  """ragged_dot_general with a batch dimension split over data: no communication."""
  mesh = cpu_mesh()
  lhs, rhs, sizes, dims, expected = _batched_problem(2)
  fn = jax.jit(lambda a, b, s: jgg.ragged_dot_general(a, b, s, dims))
  args = (_put(mesh, lhs, P("data")), _put(mesh, rhs, P("data")), _put(mesh, sizes, P("data")))
  _assert_close(fn(*args), expected, "forward")
  hlo = fn.lower(*args).compile().as_text()
  assert not collectives(hlo), hlo
  (_, result, operands), = custom_calls(hlo)
  assert operands[0] == _f32((1, M, K)) and result == _f32((1, M, N))


# Ragged contracting (the wgrad op) as the forward: lhs [M, P] . rhs [M, N] -> [G, P, N].
CONTRACTING_CASES = [
    # rows split: partial sums over data; experts split: each device its experts' dW.
    ("rows_and_experts", P("data"), P("data"), P("model"), ("all-reduce f32[2,1,16,24]",)),
    # rows and experts on the same axis: partial dW of all experts, reduce-scattered on g.
    ("rows_to_experts", P("model"), P("model"), P("model"), ("reduce-scatter f32[2,1,16,24]",)),
    # rows over both axes, experts wanted over both: one reduce-scatter over the pair.
    ("rows_to_experts_both_axes", P(("data", "model")), P(("data", "model")),
     P(("data", "model")), ("reduce-scatter f32[1,1,16,24]",)),
    # P split (the forward's K): no communication.
    ("p_split", P(None, "model"), P(), P(None, "model"), ()),
]


@pytest.mark.parametrize("name, lhs_spec, rhs_spec, out_spec, expected_collectives",
                         CONTRACTING_CASES, ids=[c[0] for c in CONTRACTING_CASES])
def test_ragged_contracting_forward(name, lhs_spec, rhs_spec, out_spec, expected_collectives,
                                   partitioner):
  del name
  mesh = cpu_mesh()
  lhs, _, ct = _operands(3)
  dims = jax.lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(([0], [0]), ([], [])), lhs_ragged_dimensions=[0],
      rhs_group_dimensions=[])
  sizes = jnp.array(SIZES, jnp.int32)
  fn = jax.jit(lambda a, b: jgg.ragged_dot_general(a, b, sizes, dims),
               out_shardings=NamedSharding(mesh, out_spec))
  args = (_put(mesh, lhs, lhs_spec), _put(mesh, ct, rhs_spec))
  _assert_close(fn(*args), reference.ragged_k(lhs, ct, SIZES, num_groups=G), "forward")
  hlo = fn.lower(*args).compile().as_text()
  assert collectives(hlo) == collectives_of(expected_collectives), hlo


def test_uneven_split_is_computed_replicated(partitioner):
  """33 rows cannot split 4 ways: the plan computes them whole (still correct)."""
  mesh = cpu_mesh()
  rng = np.random.default_rng(4)
  lhs = rng.standard_normal((33, K)).astype(np.float32)
  _, rhs, _ = _operands()
  sizes = jnp.array(SIZES, jnp.int32)

  def fn(a, b):
    a = jax.lax.with_sharding_constraint(a, NamedSharding(mesh, P("model")))
    return jgg.ragged_dot(a, b, sizes)

  out = jax.jit(fn)(lhs, _put(mesh, rhs, P(None, None, "model")))
  _assert_close(out, reference.ragged_m(lhs, rhs, SIZES), "forward")


def test_row_parallel_bfloat16_sums_in_output_dtype(partitioner):
  mesh = cpu_mesh()
  lhs, rhs, _ = _operands(5)
  lhs, rhs = lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16)
  out = jax.jit(jgg.ragged_dot)(_put(mesh, lhs, P(None, "model")),
                                _put(mesh, rhs, P(None, "model", None)), jnp.array(SIZES))
  assert out.dtype == jnp.bfloat16
  err = reference.relative_error(out.astype(jnp.float32), reference.ragged_m(lhs, rhs, SIZES))
  assert err <= reference.TOLERANCE["bfloat16"], err


@hypothesis.given(
    sizes=st.lists(st.integers(-5, 40), min_size=1, max_size=9),
    rows_per_shard=st.integers(1, 12), shards=st.sampled_from([1, 2, 4]))
@hypothesis.settings(max_examples=30)
def test_local_group_sizes_partition_the_global_rows(sizes, rows_per_shard, shards):
  """Row r of shard i falls in the same group as global row i * rows_per_shard + r."""
  rows = rows_per_shard * shards
  bounds = reference.group_boundaries(sizes, rows)
  global_group = np.searchsorted(bounds, np.arange(rows), side="right") - 1  # len(sizes): none
  local = np.asarray(jax.vmap(
      lambda i: partitioning.local_group_sizes(jnp.array(sizes, jnp.int32), rows,
                                               rows_per_shard, i))(jnp.arange(shards)))
  for i in range(shards):
    local_bounds = np.concatenate([[0], np.cumsum(local[i])])
    assert local_bounds[-1] <= rows_per_shard and np.all(local[i] >= 0)
    group = np.searchsorted(local_bounds, np.arange(rows_per_shard), side="right") - 1
    np.testing.assert_array_equal(group, global_group[i * rows_per_shard:(i + 1) * rows_per_shard])


def test_huge_group_sizes_do_not_overflow():
  sizes = jnp.array([2**31 - 1] * 4, jnp.int32)
  np.testing.assert_array_equal(group_ends(sizes, 100), [100] * 4)
  np.testing.assert_array_equal(partitioning.local_group_sizes(sizes, 100, 25, 2), [25, 0, 0, 0])


def test_export_on_one_device_is_the_plain_custom_call():
  """On one device the op lowers to the FFI call itself, which jax.export serializes."""
  lhs, rhs, ct = _operands()
  sizes = jnp.array(SIZES, jnp.int32)
  checks = [jax.export.DisabledSafetyCheck.custom_call(t)
            for t in (_native.RAGGED_M_TARGET, _native.RAGGED_K_TARGET)]
  exported = jax.export.export(jax.jit(jax.grad(_loss, (0, 1))), disabled_checks=checks,
                               platforms=("cpu",))(
      lhs, rhs, sizes, ct)
  text = exported.mlir_module()
  assert "CustomSPMDPartitioning" not in text and _native.RAGGED_K_TARGET in text
  restored = jax.export.deserialize(exported.serialize())
  for got, want in zip(restored.call(lhs, rhs, sizes, ct), _unsharded()[1]):
    _assert_close(got, want, "exported gradient")


def test_partially_manual_shard_map_is_correct(partitioner):
  """Manual over "data" only: the op is replicated over "model" (operands gathered), correct."""
  mesh = cpu_mesh()
  lhs, rhs, _ = _operands()
  sizes = jnp.array(SIZES, jnp.int32)

  def body(a, b):
    b = jax.lax.with_sharding_constraint(b, NamedSharding(mesh, P(None, None, "model")))
    return jgg.ragged_dot(a, b, sizes)

  fn = jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=P(), axis_names={"data"},
                     check_vma=False)
  out = jax.jit(fn)(_put(mesh, lhs, P()), _put(mesh, rhs, P(None, None, "model")))
  _assert_close(out, _unsharded()[0], "forward")


@pytest.mark.parametrize("rhs_spec", [P("model"), P(None, None, None, "model"),
                                      P(None, "data")], ids=["groups", "n1", "k1"])
def test_explicit_axes_canonical_reshape_of_several_runs(rhs_spec, partitioner):
  """Two contracted dims and two free dims: the canonical reshape merges two runs of rhs at
  once, which jax's Explicit-axes rule refuses in one reshape (ragged_dot.merged merges them
  pair by pair)."""
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  rng = np.random.default_rng(12)
  lhs = rng.standard_normal((M, 4, 2)).astype(np.float32)
  rhs = rng.standard_normal((G, 4, 2, 4, 2)).astype(np.float32)
  dims = jax.lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(([1, 2], [1, 2]), ([], [])), lhs_ragged_dimensions=[0],
      rhs_group_dimensions=[0])
  expected = reference.ragged_m(lhs.reshape(M, 8), rhs.reshape(G, 8, 8), SIZES).reshape(M, 4, 2)
  with jax.set_mesh(mesh):
    out = jax.jit(lambda a, b, s: jgg.ragged_dot_general(a, b, s, dims))(
        _put(mesh, lhs, P()), _put(mesh, rhs, rhs_spec), jnp.array(SIZES, jnp.int32))
  _assert_close(out, expected, "forward")


# A dim that ragged_dot_general merges into a canonical one, split over an axis that does not
# divide it: Shardy propagates part of the axis (a sub-axis) onto the merged dim, which no
# mesh of whole axes names. (lhs shape, rhs shape, dimension numbers, group sizes, lhs spec,
# rhs spec); "model" (4) over a dim of 2 or 6.
_RaggedDims = jax.lax.RaggedDotDimensionNumbers
SIZES_OF_6 = [2, 0, 1, 0, 1, 0, 0, 1]  # 5 of 6 ragged indices
MERGED_UNEVEN_CASES = {
    # rhs [G, K, N1, N2] split on N1: the canonical N is N1 * N2.
    "rhs_n1": ((M, K), (G, K, 2, 12), _RaggedDims((([1], [1]), ([], [])), [0], [0]),
               SIZES, P(), P(None, None, "model")),
    # two contracting dims, the first split: the canonical K is K1 * K2.
    "two_contracting": ((M, 2, 8), (G, 2, 8, N), _RaggedDims((([1, 2], [1, 2]), ([], [])),
                                                             [0], [0]),
                        SIZES, P(None, "model"), P(None, "model")),
    # lhs free dims inside the ragged one, the ragged dim split: the canonical M is 6 * 4.
    "lhs_free_inside_ragged": ((6, 4, K), (G, K, N), _RaggedDims((([2], [1]), ([], [])),
                                                                 [0], [0]),
                               SIZES_OF_6, P("model"), P()),
    # ragged contracting with a contracting dim inside the ragged one, the ragged dim split.
    "inner_ragged_contracting": ((6, 4, K), (6, 4, N), _RaggedDims((([0, 1], [0, 1]), ([], [])),
                                                                   [0], []),
                                 SIZES_OF_6, P("model"), P("model")),
}


@pytest.mark.parametrize("mesh_shape", [(4,), (2, 4)], ids=["model", "data_model"])
@pytest.mark.parametrize("layout", list(MERGED_UNEVEN_CASES))
def test_uneven_split_of_a_merged_dim_is_computed_replicated(layout, mesh_shape, partitioner):
  """The merged dim reaches the partitioned op split over a sub-axis of "model", which jax's
  custom_partitioning could not decode (IndivisibleError on one axis, KeyError with "data"
  beside it): the plan reads it as unsplit and computes it replicated, forward and
  gradients equal to the unsharded computation under both partitioners."""
  mesh = cpu_mesh(mesh_shape, ("data", "model")[-len(mesh_shape):])
  lhs_shape, rhs_shape, dims, group_sizes, lhs_spec, rhs_spec = MERGED_UNEVEN_CASES[layout]
  rng = np.random.default_rng(13)
  lhs = rng.standard_normal(lhs_shape).astype(np.float32)
  rhs = rng.standard_normal(rhs_shape).astype(np.float32)
  sizes = jnp.array(group_sizes, jnp.int32)

  def unsharded(a, b):
    return jgg.ragged_dot_general(a, b, sizes, dims)

  def sharded(a, b):
    a = jax.lax.with_sharding_constraint(a, NamedSharding(mesh, lhs_spec))
    b = jax.lax.with_sharding_constraint(b, NamedSharding(mesh, rhs_spec))
    return jgg.ragged_dot_general(a, b, sizes, dims)

  expected = jax.jit(functools.partial(jax.lax.ragged_dot_general, group_sizes=sizes,
                                       ragged_dot_dimension_numbers=dims))(lhs, rhs)
  ct = rng.standard_normal(expected.shape).astype(np.float32)
  grad = lambda fn: jax.jit(jax.grad(lambda a, b: jnp.sum(fn(a, b) * ct), (0, 1)))
  _assert_close(jax.jit(unsharded)(lhs, rhs), expected, "unsharded forward")
  _assert_close(jax.jit(sharded)(lhs, rhs), expected, "forward")
  for got, want, name in zip(grad(sharded)(lhs, rhs), grad(unsharded)(lhs, rhs), ("dx", "dw")):
    _assert_close(got, want, name)


@pytest.mark.parametrize("spec", [P(), P("data"), P(None, "model"), P(("data", "model")),
                                  P(("model", "data")), P("model", "data"),
                                  P(None, None, ("model", "data"))], ids=str)
def test_partitioners_sharding_is_read_as_its_mesh_axes(spec):
  """custom_partitioning hands the partitioner's shardings over undecoded: dim_axes reads
  a split over whole mesh axes as exactly those axes, in their order."""
  from jax._src.sharding_impls import GSPMDSharding  # what custom_partitioning passes
  mesh = cpu_mesh()
  hlo = NamedSharding(mesh, spec)._to_xla_hlo_sharding(3)
  assert (dim_axes(GSPMDSharding(mesh._flat_devices_tuple, hlo), 3, mesh)
          == dim_axes(NamedSharding(mesh, spec), 3))


@pytest.mark.parametrize("tiles, order, expected", [
    ([1, 2, 1, 4], [1, 0, 2], ((), (), ())),               # "model":(1)2 on dim 1
    ([2, 2, 1, 2], [0, 1, 2], (("data",), (), ())),        # "data" on dim 0, "model":(1)2 on 1
    ([1, 1, 2, 4], [2, 0, 1], ((), (), ())),               # "model":(2)2 on dim 2
], ids=["sub_axis", "whole_and_sub_axis", "minor_sub_axis"])
def test_split_over_part_of_a_mesh_axis_reads_as_unsplit(tiles, order, expected):
  """Shardy's sub-axes (no mesh of whole axes names them) read as unsplit dims."""
  from jax._src.lib import xla_client as xc
  from jax._src.sharding_impls import GSPMDSharding
  mesh = cpu_mesh()
  hlo = xc.HloSharding.iota_tile(tiles, [2, 2, 2], order, [xc.OpSharding.Type.REPLICATED])
  assert dim_axes(GSPMDSharding(mesh._flat_devices_tuple, hlo), 3, mesh) == expected
