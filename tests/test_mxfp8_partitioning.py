"""MXFP8 quantize / dequantize under jit with named shardings, Shardy and GSPMD.

A stack (same_dims, varying_both) sharded along whole groups, and a matrix or
same_dims stack sharded along rows or columns in multiples of 128 (its 128x128
tiles), runs shard by shard with no communication and gives the unsharded
result bit for bit (data and scale leaves); any other sharding is gathered
first and is still bit-exact. The batched calls also export, sharded.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native, batch_partitionable
import mxfp8_reference as ref
from multidevice import run_script_on_cpu_devices
from sharding_checks import (  # noqa: F401  (fixtures: on_cpu, partitioner)
    collectives, cpu_mesh, custom_calls, on_cpu, partitioner)

mxfp8 = jgg.mxfp8
G, R, C = 8, 40, 72  # rows and columns not multiples of 32: partial blocks in every group
QUANTIZE = batch_partitionable.batched_target(_native.MXFP8_QUANTIZE_TARGET)
DEQUANTIZE = batch_partitionable.batched_target(_native.MXFP8_DEQUANTIZE_TARGET)


@functools.cache
def _stack(layout):
  """x [G, R, C] over many binades, and [G, 2] sizes for varying_both (0, partial, whole)."""
  rng = np.random.default_rng(7)
  x = (rng.standard_normal((G, R, C)) * np.exp2(rng.integers(-20, 20, (G, R, C))))
  sizes = None
  if layout == "varying_both":
    sizes = np.stack([rng.integers(0, R + 1, G), rng.integers(0, C + 1, G)], axis=1)
    sizes[0] = (0, C)
    sizes[1] = (R, C)
    sizes = sizes.astype(np.int32)
  return x.astype(jnp.bfloat16), sizes


def _quantize(x, sizes, scale_layout):
  return mxfp8.quantize(x, sizes, rowwise=True, colwise=True, scale_layout=scale_layout)


def _leaves_bits(q):
  return [ref.bits_of(np.asarray(leaf)) for leaf in
          (q.data, q.scale_inv, q.colwise_data, q.colwise_scale_inv)]


def _assert_bit_equal(got, want):
  for a, b, what in zip(_leaves_bits(got), _leaves_bits(want),
                        ("data", "scale_inv", "colwise data", "colwise scale_inv")):
    np.testing.assert_array_equal(a, b, err_msg=what)


def _quantized_bit_exact(mesh, shape, spec, scale_layout, seed):
  """Random values over many binades, put on `mesh` as `spec` and quantized under jit:
  (the jitted quantize, the sharded input, its result, the unsharded quantize), the result
  checked bit for bit against the last."""
  rng = np.random.default_rng(seed)
  x = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, shape))).astype(jnp.bfloat16)
  xs = _put(mesh, x, spec)
  fn = jax.jit(functools.partial(_quantize, sizes=None, scale_layout=scale_layout))
  q, expected = fn(xs), _quantize(x, None, scale_layout)
  _assert_bit_equal(q, expected)
  return fn, xs, q, expected


def _put(mesh, x, spec):
  return None if x is None else jax.device_put(x, NamedSharding(mesh, spec))


@pytest.mark.parametrize("scale_layout", ["compact", "swizzled"])
@pytest.mark.parametrize("layout", ["same_dims", "varying_both"])
def test_stack_split_along_groups_needs_no_communication(layout, scale_layout, partitioner):
  mesh = cpu_mesh()
  x, sizes = _stack(layout)
  expected = _quantize(x, sizes, scale_layout)
  xs, ss = _put(mesh, x, P("model")), _put(mesh, sizes, P("model"))
  fn = jax.jit(functools.partial(_quantize, scale_layout=scale_layout))
  q = fn(xs, ss)
  _assert_bit_equal(q, expected)
  assert q.data.sharding.is_equivalent_to(NamedSharding(mesh, P("model")), 3), q.data.sharding
  assert q.scale_inv.sharding.is_equivalent_to(NamedSharding(mesh, P("model")), 3)
  hlo = fn.lower(xs, ss).compile().as_text()
  assert not collectives(hlo), hlo
  (target, result, operands), = custom_calls(hlo)
  # The tile view of the local groups: R and C are not multiples of 128, one tile each.
  assert target == QUANTIZE and operands[0] == f"bf16[{G // 4},1,1,{R},{C}]", (target, operands)

  back = jax.jit(lambda q: mxfp8.dequantize(q, jnp.float32))
  np.testing.assert_array_equal(back(q), mxfp8.dequantize(expected, jnp.float32))
  hlo = back.lower(q).compile().as_text()
  assert not collectives(hlo), hlo
  (target, result, _), = custom_calls(hlo)
  assert target == DEQUANTIZE and result == f"f32[{G // 4},1,1,{R},{C}]"


@pytest.mark.parametrize("scale_layout", ["compact", "swizzled"])
@pytest.mark.parametrize("case", ["stack_rows", "stack_cols", "stack_groups_and_cols",
                                  "matrix_rows_and_cols"])
def test_tiles_split_along_rows_and_columns_need_no_communication(case, scale_layout,
                                                                  partitioner):
  """Dims in multiples of 128 split into 128x128 tiles that quantize alone (tile_view.py): a
  stack or matrix sharded along rows or columns (tensor parallelism) runs shard by shard,
  bit for bit as unsharded, and its scale leaves stay split along the same axes."""
  mesh = cpu_mesh()
  shape, spec, local = {
      "stack_rows": ((2, 512, 256), P(None, "model"), "bf16[2,1,2,128,128]"),
      "stack_cols": ((2, 256, 512), P(None, None, "model"), "bf16[2,2,1,128,128]"),
      "stack_groups_and_cols": ((2, 256, 512), P("data", None, "model"), "bf16[1,2,1,128,128]"),
      "matrix_rows_and_cols": ((256, 1024), P("data", "model"), "bf16[1,1,2,128,128]"),
  }[case]
  fn, xs, q, expected = _quantized_bit_exact(mesh, shape, spec, scale_layout, seed=3)
  assert q.data.sharding.is_equivalent_to(NamedSharding(mesh, spec), len(shape)), q.data.sharding
  shards = 4 if case in ("stack_rows", "stack_cols") else 8  # the mesh is data 2 x model 4
  for leaf in (q.scale_inv, q.colwise_scale_inv):  # each shard holds its tiles' scales only
    assert leaf.addressable_shards[0].data.size == leaf.size // shards, leaf.sharding
  hlo = fn.lower(xs).compile().as_text()
  assert not collectives(hlo), hlo
  (target, _, operands), = custom_calls(hlo)
  assert target == QUANTIZE and operands[0] == local, (target, operands)

  back = jax.jit(lambda q: mxfp8.dequantize(q, jnp.float32, colwise=True))
  np.testing.assert_array_equal(back(q), mxfp8.dequantize(expected, jnp.float32, colwise=True))
  assert not collectives(back.lower(q).compile().as_text())


@pytest.mark.parametrize("spec", [P(None, "model"), P(None, None, "model"), P("data", "model")],
                         ids=["rows", "cols", "groups_and_rows"])
def test_stack_split_otherwise_is_gathered_and_exact(spec, partitioner):
  """Rows or columns that are not multiples of 128 are one tile: gathered first, still exact."""
  mesh = cpu_mesh()
  x, _ = _stack("same_dims")
  xs = _put(mesh, x, spec)
  _assert_bit_equal(jax.jit(functools.partial(_quantize, scale_layout="compact"))(xs, None),
                    _quantize(x, None, "compact"))


def test_ragged_layouts_are_computed_whole(partitioner):
  """varying_first packs every group into one scale buffer: sharded input is gathered."""
  mesh = cpu_mesh()
  rng = np.random.default_rng(8)
  x = rng.standard_normal((64, 96)).astype(jnp.bfloat16)
  sizes = np.array([5, 0, 33, 2, 0, 9, 1, 7], np.int32)
  want = _quantize(x, sizes, "compact")
  for spec in (P("data"), P(None, "model")):
    got = jax.jit(functools.partial(_quantize, scale_layout="compact"))(
        _put(mesh, x, spec), jnp.asarray(sizes))
    _assert_bit_equal(got, want)


def test_explicit_axes_stack_keeps_its_group_split():
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  x, _ = _stack("same_dims")
  with jax.set_mesh(mesh):
    q = jax.jit(functools.partial(_quantize, sizes=None, scale_layout="compact"))(
        _put(mesh, x, P("model")))
    assert tuple(jax.typeof(q.data).sharding.spec)[:1] == ("model",)
    assert tuple(jax.typeof(q.scale_inv).sharding.spec)[:1] == ("model",)
  _assert_bit_equal(q, _quantize(x, None, "compact"))


def test_group_batched_quantize_exports_sharded():
  """No Python callback: the sharded program serializes and runs after a round trip."""
  mesh = cpu_mesh()
  x, _ = _stack("same_dims")
  xs = _put(mesh, x, P("model"))
  fn = jax.jit(lambda x: _quantize(x, None, "swizzled"))
  exported = jax.export.export(
      fn, platforms=("cpu",),
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(QUANTIZE)])(xs)
  text = exported.mlir_module()
  assert "CustomSPMDPartitioning" not in text and QUANTIZE in text
  restored = jax.export.deserialize(exported.serialize())
  _assert_bit_equal(restored.call(xs), _quantize(x, None, "swizzled"))
  # A matrix split along its columns (tiles as batch axes) exports the same way.
  w = jnp.asarray(np.random.default_rng(4).standard_normal((256, 512)), jnp.bfloat16)
  ws = _put(mesh, w, P(None, "model"))
  exported = jax.export.export(
      fn, platforms=("cpu",),
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(QUANTIZE)])(ws)
  restored = jax.export.deserialize(exported.serialize())
  _assert_bit_equal(restored.call(ws), _quantize(w, None, "swizzled"))
  assert not collectives(jax.jit(restored.call).lower(ws).compile().as_text())


def test_sharding_rule_shares_only_the_groups():
  rule = batch_partitionable.sharding_rule([(8, 4, 5), (8, 2)], [(8, 4, 5), (8, 0)])
  assert rule == ("#sdy.op_sharding_rule<([i, j, k], [i, l])->([i, m, n], [i, o]) "
                  "{i=8, j=4, k=5, l=2, m=4, n=5, o=0} need_replication={j, k, l, m, n, o}, "
                  "custom>")


def test_explicit_axes_mxfp8_product_takes_out_sharding():
  """jgg.ragged_dot with an MXFP8 operand ends typed as out_sharding asks, as a plain one does."""
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  rng = np.random.default_rng(8)
  x = jnp.asarray(rng.standard_normal((64, 64)), jnp.bfloat16)
  qw = mxfp8.quantize(jnp.asarray(rng.standard_normal((4, 64, 48)), jnp.bfloat16), colwise=True)
  sizes = jnp.array([10, 0, 30, 20], jnp.int32)
  want = jgg.ragged_dot(x, qw, sizes)
  with jax.set_mesh(mesh):
    out = jax.jit(lambda a, q, s: jgg.ragged_dot(a, q, s, out_sharding=P(None, "model")))(
        x, qw, sizes)
    assert tuple(jax.typeof(out).sharding.spec) == (None, "model")
  np.testing.assert_array_equal(np.asarray(out), np.asarray(want))


@pytest.mark.parametrize("layout", ["varying_first", "same_dims"])
def test_inside_shard_map_results_vary_over_the_inputs_axes(layout):
  """quantize / dequantize results carry x's varying manual axes: a per-shard value cannot
  leave through out_specs=P() (only shard 0's would come back) and a scan carries it."""
  mesh = cpu_mesh((8,), ("x",))
  sizes = jnp.array([10, 0, 22], jnp.int32) if layout == "varying_first" else None
  shape = (8 * 32, 40) if layout == "varying_first" else (8 * 2, 32, 40)
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, shape)), jnp.float32)

  def round_trip(block):
    q = mxfp8.quantize(block, sizes, rowwise=True, colwise=True)
    return mxfp8.dequantize(q, jnp.float32)

  replicated_out = jax.shard_map(round_trip, mesh=mesh, in_specs=P("x"), out_specs=P())
  with pytest.raises(ValueError, match="out_specs"):
    jax.jit(replicated_out)(x)

  def scanned(block):
    return jax.lax.scan(lambda c, _: (round_trip(c), None), block, None, length=2)[0]
  per_shard = jax.jit(jax.shard_map(scanned, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)
  blocks = jnp.split(x, 8)
  want = jnp.concatenate([round_trip(round_trip(b)) for b in blocks])
  np.testing.assert_array_equal(np.asarray(per_shard), np.asarray(want))


@pytest.mark.parametrize("spec", [P("model"), P(None, "model"), P(None, None, "model"),
                                  P("data", None, "model"), P(None, "data")],
                         ids=["groups", "rows_4_tiles", "cols_4_tiles", "groups_and_cols",
                              "rows_2_tiles"])
@pytest.mark.parametrize("scale_layout", ["compact", "swizzled"])
def test_explicit_axes_stack_of_many_tiles(spec, scale_layout):
  """A stack of several 128x128 tiles a group, split on Explicit axes: the tile view's
  reshapes keep the split where the tiles can carry it (gathering a dim whose tiles are
  fewer than its shards), the leaves are the unsharded ones bit for bit, and dequantize and
  an MXFP8 product take them."""
  mesh = cpu_mesh(axis_type=AxisType.Explicit)
  rng = np.random.default_rng(11)
  x = jnp.asarray(rng.standard_normal((4, 512, 512)) * np.exp2(rng.integers(-9, 9, (4, 512, 512))),
                  jnp.bfloat16)
  quantize = functools.partial(_quantize, sizes=None, scale_layout=scale_layout)
  want = quantize(x)
  with jax.set_mesh(mesh):
    q = jax.jit(quantize)(_put(mesh, x, spec))
    back = jax.jit(mxfp8.dequantize)(q)
    lhs = jnp.ones((16, 512), jnp.bfloat16)
    product = jax.jit(lambda q: jgg.ragged_dot(lhs, q, jnp.array([4, 4, 4, 4], jnp.int32),
                                               preferred_element_type=jnp.float32))(q)
  _assert_bit_equal(q, want)
  np.testing.assert_array_equal(np.asarray(back), np.asarray(mxfp8.dequantize(want)))
  # A split of K (the rows) sums partial products: equal up to f32 summation order.
  np.testing.assert_allclose(
      np.asarray(product), np.asarray(jgg.ragged_dot(lhs, want, jnp.array([4, 4, 4, 4]),
                                                     preferred_element_type=jnp.float32)),
      rtol=1e-5, atol=1e-3)


_SHARD_MAP_SCAN_GRAD = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import PartitionSpec as P, AxisType
import jax_grouped_gemm as jgg
mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
rng = np.random.default_rng(0)
x = jnp.asarray(rng.standard_normal((8 * 16, 64)), jnp.float32)
ws = jnp.asarray(rng.standard_normal((2, 4, 64, 64)) / 8, jnp.float32)
sizes = jnp.full((8 * 4,), 4, jnp.int32)
layer = jax.shard_map(lambda h, w, s: jgg.grouped_dense(h, w, s, recipe=jgg.MXFP8Recipe()),
                      mesh=mesh, in_specs=(P("x"), P(), P("x")), out_specs=P("x"))
loss = lambda ws, x: jnp.sum(jax.lax.scan(lambda h, w: (jnp.tanh(layer(h, w, sizes)), None),
                                          x, ws)[0] ** 2)
grads = jax.jit(jax.grad(loss, (0, 1)))(ws, x)
eager = jax.shard_map(lambda w: jgg.mxfp8.quantize(w).data, mesh=mesh, in_specs=P("x"),
                      out_specs=P("x"))(ws.reshape(8, 64, 64))
assert all(bool(jnp.isfinite(g).all()) for g in grads), grads
print("ok", [g.shape for g in grads], eager.shape)
"""


def test_stack_quantize_in_shard_map_compiles_under_scan_gradients_and_eagerly():
  """A matrix or stack passes no group sizes: a zero-sized operand there crashed XLA's
  compiler (SIGSEGV) in a scanned shard_map's gradient and in an eager shard_map. Run in a
  child process so that a crash is a failure, not the end of the session."""
  assert run_script_on_cpu_devices(_SHARD_MAP_SCAN_GRAD).startswith("ok")


@pytest.mark.parametrize("case", ["matrix_rows_4", "matrix_cols_4", "stack_rows_8"])
@pytest.mark.parametrize("scale_layout", ["compact", "swizzled"])
def test_auto_axes_split_finer_than_the_tiles_is_gathered_and_exact(case, scale_layout,
                                                                    partitioner):
  """A dim split on an Auto axis that does not divide its count of 128-tiles (256 rows, 2
  tiles, 4 or 8 ways) is one tile, gathered before the call: under GSPMD the jit's output
  shardings could not be named (IndivisibleError) when the partitioner had put part of the
  axis on the tile dim."""
  devices, shape, spec, local = {
      "matrix_rows_4": (4, (256, 512), P("a"), "bf16[1,1,4,256,128]"),
      "matrix_cols_4": (4, (512, 256), P(None, "a"), "bf16[1,4,1,128,256]"),
      "stack_rows_8": (8, (8, 256, 72), P(None, "a"), "bf16[8,1,1,256,72]"),
  }[case]
  mesh = cpu_mesh((devices,), ("a",))
  fn, xs, q, expected = _quantized_bit_exact(mesh, shape, spec, scale_layout, seed=5)
  for leaf in jax.tree.leaves(q):
    assert isinstance(leaf.sharding, NamedSharding), leaf.sharding
  (target, _, operands), = custom_calls(fn.lower(xs).compile().as_text())
  assert target == QUANTIZE and operands[0] == local, (target, operands)
  back = jax.jit(lambda q: mxfp8.dequantize(q, jnp.float32, colwise=True))(q)
  np.testing.assert_array_equal(back, mxfp8.dequantize(expected, jnp.float32, colwise=True))


_DATA_PARALLEL_GEMM = """
import sys, jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P, AxisType
import jax_grouped_gemm as jgg
jax.config.update("jax_use_shardy_partitioner", sys.argv[1] == "shardy")
mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])
rng = np.random.default_rng(0)
x = rng.standard_normal((256, 128)).astype(jnp.bfloat16)
w = (rng.standard_normal((2, 128, 256)) / 8).astype(jnp.bfloat16)
sizes = jnp.array([128, 128], jnp.int32)
for scale_layout in ("swizzled", "compact"):
  def f(x, w):
    qx = jgg.mxfp8.quantize(x, scale_layout=scale_layout)
    qw = jgg.mxfp8.quantize(w, rowwise=False, colwise=True, scale_layout=scale_layout)
    return jgg.ragged_dot(qx, qw, sizes, preferred_element_type=jnp.float32)
  want = jax.jit(f)(x, w)
  got = jax.jit(f)(jax.device_put(x, NamedSharding(mesh, P("data"))), w)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
print("ok")
"""


@pytest.mark.parametrize("which", ["shardy", "gspmd"])
def test_data_parallel_mxfp8_gemm_with_fewer_row_tiles_than_shards(which):
  """x [256, K] split 4 ways on rows (2 tiles) quantized and multiplied (the dequantize
  backend, swizzled scales; the fused one, compact): the tile dim split on part of the
  axis reached the BF16 GEMM's custom_partitioning, which Shardy refused (IndivisibleError)
  and GSPMD aborted on (a CHECK failure): a child process, so that an abort is a failure."""
  assert run_script_on_cpu_devices(_DATA_PARALLEL_GEMM, which).startswith("ok")


_WEIGHT_SPLIT_FINER_THAN_ITS_TILES = """
import sys, jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P, AxisType
import jax_grouped_gemm as jgg
jax.config.update("jax_use_shardy_partitioner", sys.argv[1] == "shardy")
mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2,
                     devices=jax.devices()[:8])
x = jnp.asarray(np.random.default_rng(1).standard_normal((640, 256)), jnp.float32)
sizes = jnp.array([160] * 4, jnp.int32)  # > 128 rows a group: the dequantize backend
w = np.random.default_rng(2).standard_normal((4, 256, 256)).astype(np.float32) / 16
layer = jax.jit(lambda x, w: jgg.grouped_dense(x, w, sizes, recipe=jgg.MXFP8Recipe()))
want = layer(x, w)
got = layer(x, jax.device_put(w, NamedSharding(mesh, P(None, None, "model"))))  # 2 tiles, 4 ways
np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
print("ok")
"""


@pytest.mark.parametrize("which", ["shardy", "gspmd"])
def test_auto_axes_weight_split_finer_than_its_tiles_reaching_the_bf16_gemm(which):
  """N = 256 (2 tiles) split on a 4-way axis of a mesh whose other axis (2) divides the
  tile count: the tiles stay (tile_view._tile_count), the partitioner splits the tile dim
  over part of the axis, and the dequantized weight reaches the BF16 GEMM's
  custom_partitioning, which reads that split as unsplit (partitioning.py, dim_axes) and
  computes it replicated. It failed before (Shardy: a KeyError in jax's decoding; GSPMD:
  a CHECK failure, hence a child process)."""
  assert run_script_on_cpu_devices(_WEIGHT_SPLIT_FINER_THAN_ITS_TILES, which).startswith("ok")


@pytest.mark.xfail(strict=True, raises=ValueError,  # jax's IndivisibleError
                   reason="known limit (docs/ARCHITECTURE.md, MXFP8 partitioning): under GSPMD "
                          "the tile view cannot see these splits at trace time")
@pytest.mark.parametrize("case", ["placed_by_in_shardings", "one_dim_over_two_axes"])
def test_gspmd_splits_finer_than_the_tiles_that_the_view_cannot_see(case):
  """(a) A host array placed by jit's in_shardings carries no mesh in its type, and no mesh is
  in context: the view keeps 2 row tiles that a 4-way split cuts. (b) 4 row tiles split over
  both axes of a 2 x 4 mesh (8 ways): each axis alone divides the tile count, their product
  does not. Both raise jax's IndivisibleError naming the outputs' sharding; jax.set_mesh (a)
  or Explicit axes avoid it."""
  previous = jax.config.jax_use_shardy_partitioner
  jax.config.update("jax_use_shardy_partitioner", False)
  try:
    rng = np.random.default_rng(7)
    if case == "placed_by_in_shardings":
      mesh, shape, spec = cpu_mesh((4,), ("a",)), (256, 512), P("a")
      x = rng.standard_normal(shape).astype(jnp.bfloat16)
      run = jax.jit(lambda x: mxfp8.quantize(x), in_shardings=NamedSharding(mesh, spec))
    else:
      mesh, shape = cpu_mesh(), (512, 256)
      x = _put(mesh, rng.standard_normal(shape).astype(jnp.bfloat16), P(("data", "model")))
      run = jax.jit(lambda x: mxfp8.quantize(x))
    _assert_bit_equal(run(x), _quantize(np.asarray(x), None, "compact"))
  finally:
    jax.config.update("jax_use_shardy_partitioner", previous)
