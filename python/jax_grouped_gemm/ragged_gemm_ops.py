"""The two canonical ragged GEMMs as JAX primitives, and their rules.

  ragged_m: lhs [B, M, K] . rhs [G, B, K, N] (or [G, B, N, K]) -> [B, M, N]
            ragged non-contracting: forward and dgrad.
  ragged_k: lhs [B, R, P], rhs [B, R, N] -> [G, B, P, N]
            ragged contracting: wgrad.

group_sizes is [B, num_global_groups] int32 and group_offset [1] int32, both
device values (see xla_plugin/common/ragged_layout.h for the clamping rule).

Both ops are bilinear in (lhs, rhs) and the set is closed under transposition
(the transpose of a ragged_m is a ragged_m with the weight read transposed, or
a ragged_k; the transpose of a ragged_k is a ragged_m), so JVP + transpose
rules give forward and reverse mode, linearize and higher order, all running
on our kernels. `jax_grouped_gemm.ragged_dot` maps jax.lax's general dimension
numbers onto these two.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core
from jax.interpreters import ad, batching, mlir
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P

from jax_grouped_gemm import _native, sharding_rules

SUPPORTED_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))

_native.register_targets()

NOT_MAPPED = None  # how batching rules receive an argument without the vmapped axis

ragged_m_p = jex_core.Primitive("jgg_ragged_m")
ragged_k_p = jex_core.Primitive("jgg_ragged_k")


def _same_input_dtype(lhs, rhs):
  """The kernels take one input dtype: promote mixed operands (as XLA's dot does)."""
  if lhs.dtype == rhs.dtype:
    return lhs, rhs
  common = jnp.promote_types(lhs.dtype, rhs.dtype)
  return lhs.astype(common), rhs.astype(common)


def vary_alike(*operands):
  """Inside shard_map, gives every operand the union of the manual axes any of
  them varies over (pcast, whose transpose is the psum the gradient needs), so
  the result's varying axes are well defined and check_vma holds."""
  varying = [jax.typeof(x).mat.varying for x in operands]
  union = frozenset().union(*varying)
  return tuple(x if axes == union else jax.lax.pcast(x, tuple(union - axes), to="varying")
               for x, axes in zip(operands, varying))


def canonical_out_sharding(out_sharding):
  """out_sharding as jax.lax takes it (NamedSharding, PartitionSpec of the current
  mesh, or None: inferred) -> a NamedSharding on the abstract mesh (what avals carry) or None."""
  if out_sharding is None:
    return None
  if isinstance(out_sharding, NamedSharding):
    mesh = out_sharding.mesh
    return out_sharding if isinstance(mesh, AbstractMesh) else NamedSharding(
        mesh.abstract_mesh, out_sharding.spec)
  if isinstance(out_sharding, P):
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
      raise ValueError(f"out_sharding: the PartitionSpec {out_sharding} needs a mesh "
                       "context (jax.set_mesh) or a NamedSharding instead")
    return NamedSharding(mesh, out_sharding)
  raise TypeError(f"out_sharding: expected a NamedSharding, PartitionSpec or None, got "
                  f"{type(out_sharding).__name__}")


def _bind(primitive, lhs, rhs, group_sizes, group_offset, out_dtype, out_sharding, **params):
  lhs, rhs = _same_input_dtype(lhs, rhs)
  lhs, rhs, group_sizes, group_offset = vary_alike(lhs, rhs, group_sizes, group_offset)
  return primitive.bind(lhs, rhs, group_sizes, group_offset, out_dtype=jnp.dtype(out_dtype),
                        out_sharding=canonical_out_sharding(out_sharding), **params)


def ragged_m(lhs, rhs, group_sizes, group_offset, *, rhs_transposed: bool, out_dtype,
             out_sharding=None):
  return _bind(ragged_m_p, lhs, rhs, group_sizes, group_offset, out_dtype, out_sharding,
               rhs_transposed=bool(rhs_transposed))


def ragged_k(lhs, rhs, group_sizes, group_offset, *, num_groups: int, out_dtype,
             out_sharding=None):
  return _bind(ragged_k_p, lhs, rhs, group_sizes, group_offset, out_dtype, out_sharding,
               num_groups=int(num_groups))


# --- shapes -------------------------------------------------------------------

def _ragged_m_out_shape(lhs_shape, rhs_shape, rhs_transposed):
  batch, rows, _ = lhs_shape
  return (batch, rows, rhs_shape[2] if rhs_transposed else rhs_shape[3])


def _ragged_k_out_shape(lhs_shape, rhs_shape, num_groups):
  batch, _, p = lhs_shape
  return (num_groups, batch, p, rhs_shape[2])


def varying_like(shape, dtype, like, sharding=None):
  """A result type that varies over the same manual axes as `like` (an operand's type after
  vary_alike); unsharded inside shard_map unless `sharding` says otherwise."""
  if sharding is None:
    if not like.mat.varying:
      return jax.core.ShapedArray(shape, dtype)
    sharding = NamedSharding(like.sharding.mesh, P())
  return jax.core.ShapedArray(shape, dtype, sharding=sharding, manual_axis_type=like.mat)


def ffi_call_varying(target, results, *operands, **attributes):
  """jax.ffi.ffi_call (vmapped sequentially) for shard_map bodies too: the operands get the
  union of the manual axes any of them varies over (vary_alike), and so do the results.
  ffi_call's own results vary over none, so a per-shard result would pass out_specs=P()
  (only shard 0's value coming back) and break scan carries and cond branches."""
  operands = vary_alike(*operands)
  like = jax.typeof(operands[0])
  types = tuple(varying_like(r.shape, r.dtype, like) for r in results)
  return jax.ffi.ffi_call(target, types, vmap_method="sequential")(*operands, **attributes)


def _result_aval(shape, dtype, operands, spec, out_sharding):
  """The result's type: its sharding is the caller's out_sharding, else, on meshes of
  Explicit axes, the one spec's plan (sharding_rules.py); it varies over the same
  manual axes as the (aligned) operands."""
  sharding = out_sharding or sharding_rules.result_sharding_in_types(spec, operands, shape)
  return varying_like(shape, dtype, operands[0], sharding)


def _ragged_m_abstract_eval(*operands, rhs_transposed, out_dtype, out_sharding):
  lhs, rhs = operands[:2]
  return _result_aval(_ragged_m_out_shape(lhs.shape, rhs.shape, rhs_transposed), out_dtype,
                      operands, sharding_rules.ragged_m_spec(rhs_transposed), out_sharding)


def _ragged_k_abstract_eval(*operands, num_groups, out_dtype, out_sharding):
  lhs, rhs = operands[:2]
  return _result_aval(_ragged_k_out_shape(lhs.shape, rhs.shape, num_groups), out_dtype,
                      operands, sharding_rules.ragged_k_spec(), out_sharding)


# --- lowering: one custom call, workspace sized here from static shapes -------

def _call_target(target, op, out_shape, out_dtype, batch, num_groups, operands, **attrs):
  if not isinstance(batch, int):
    # The workspace (a schedule per batch entry) is sized here, so the batch must be static;
    # symbolic ragged rows and free dims are fine.
    raise TypeError(f"ragged_dot: a symbolic batch size ({batch}) is not supported: batch "
                    "dims, lhs dims outer to the ragged one and vmapped dims need static sizes")
  workspace = _native.workspace_bytes(op, batch, num_groups)
  out, _ = jax.ffi.ffi_call(
      target,
      (jax.ShapeDtypeStruct(out_shape, out_dtype), jax.ShapeDtypeStruct((workspace,), jnp.uint8)),
  )(*operands, **attrs)
  return out


# The CUDA kernels put the batch on a grid dimension of at most 65535 blocks; a larger batch
# (a vmap folds its axis into the batch) becomes several calls, on every platform (one
# lowering for all; the CPU kernels would not need it, and it costs them a concatenate).
MAX_BATCH_PER_CALL = 65535


def _by_batch_chunks(call, operands, batch_axes, out_axis):
  """call(*operands), split along each operand's batch axis into calls of at most
  MAX_BATCH_PER_CALL entries whose results are concatenated along out_axis."""
  batch = operands[0].shape[batch_axes[0]]
  if not isinstance(batch, int) or batch <= MAX_BATCH_PER_CALL:
    return call(*operands)
  return jnp.concatenate([
      call(*(jax.lax.slice_in_dim(x, start, min(start + MAX_BATCH_PER_CALL, batch), axis=axis)
             for x, axis in zip(operands, batch_axes)))
      for start in range(0, batch, MAX_BATCH_PER_CALL)], axis=out_axis)


def _ragged_m_ffi(lhs, rhs, group_sizes, group_offset, *, rhs_transposed, out_dtype,
                  out_sharding=None):
  del out_sharding  # the per-device call; placement is the partitioner's

  def call(lhs, rhs, group_sizes):
    return _call_target(
        _native.RAGGED_M_TARGET, "ragged_m",
        _ragged_m_out_shape(lhs.shape, rhs.shape, rhs_transposed), out_dtype,
        lhs.shape[0], rhs.shape[0], (lhs, rhs, group_sizes, group_offset),
        rhs_transposed=bool(rhs_transposed))
  return _by_batch_chunks(call, (lhs, rhs, group_sizes), batch_axes=(0, 1, 0), out_axis=0)


def _ragged_k_ffi(lhs, rhs, group_sizes, group_offset, *, num_groups, out_dtype,
                  out_sharding=None):
  del out_sharding  # the per-device call; placement is the partitioner's

  def call(lhs, rhs, group_sizes):
    return _call_target(
        _native.RAGGED_K_TARGET, "ragged_k",
        _ragged_k_out_shape(lhs.shape, rhs.shape, num_groups), out_dtype,
        lhs.shape[0], num_groups, (lhs, rhs, group_sizes, group_offset))
  return _by_batch_chunks(call, (lhs, rhs, group_sizes), batch_axes=(0, 0, 0), out_axis=1)


# --- differentiation ----------------------------------------------------------

def _bilinear_jvp(primitive):
  def jvp(primals, tangents, **params):
    lhs, rhs, group_sizes, group_offset = primals
    d_lhs, d_rhs = tangents[0], tangents[1]
    out = primitive.bind(*primals, **params)
    terms = []
    if type(d_lhs) is not ad.Zero:
      terms.append(primitive.bind(d_lhs, rhs, group_sizes, group_offset, **params))
    if type(d_rhs) is not ad.Zero:
      terms.append(primitive.bind(lhs, d_rhs, group_sizes, group_offset, **params))
    if not terms:
      return out, ad.Zero.from_primal_value(out)
    return out, terms[0] if len(terms) == 1 else terms[0] + terms[1]
  return jvp


def _typed_sharding(x):
  """A cotangent takes its primal's sharding where types carry one (Explicit axes)."""
  sharding = x.aval.sharding
  return sharding if not sharding.mesh.empty and sharding.mesh.explicit_axes else None


def _ragged_m_transpose(ct, lhs, rhs, group_sizes, group_offset, *, rhs_transposed, out_dtype,
                        out_sharding):
  # out[b, m] = lhs[b, m] . rhs[g(m), b]
  if type(ct) is ad.Zero:
    return None, None, None, None
  lhs_bar = rhs_bar = None
  if ad.is_undefined_primal(lhs):  # dgrad: the same weights, read the other way round
    lhs_bar = ragged_m(ct, rhs, group_sizes, group_offset, rhs_transposed=not rhs_transposed,
                       out_dtype=lhs.aval.dtype, out_sharding=_typed_sharding(lhs))
  if ad.is_undefined_primal(rhs):  # wgrad: ragged contraction over the tokens
    num_groups = rhs.aval.shape[0]
    a, b = (ct, lhs) if rhs_transposed else (lhs, ct)
    rhs_bar = ragged_k(a, b, group_sizes, group_offset, num_groups=num_groups,
                       out_dtype=rhs.aval.dtype, out_sharding=_typed_sharding(rhs))
  return lhs_bar, rhs_bar, None, None


def _ragged_k_transpose(ct, lhs, rhs, group_sizes, group_offset, *, num_groups, out_dtype,
                        out_sharding):
  # out[g, b] = lhs[b, rows of g]^T . rhs[b, rows of g]
  if type(ct) is ad.Zero:
    return None, None, None, None
  lhs_bar = rhs_bar = None
  if ad.is_undefined_primal(lhs):  # [B, R, N] . ct[g]^T -> [B, R, P]
    lhs_bar = ragged_m(rhs, ct, group_sizes, group_offset, rhs_transposed=True,
                       out_dtype=lhs.aval.dtype, out_sharding=_typed_sharding(lhs))
  if ad.is_undefined_primal(rhs):  # [B, R, P] . ct[g] -> [B, R, N]
    rhs_bar = ragged_m(lhs, ct, group_sizes, group_offset, rhs_transposed=False,
                       out_dtype=rhs.aval.dtype, out_sharding=_typed_sharding(rhs))
  return lhs_bar, rhs_bar, None, None


# --- batching: fold the vmapped axis into the kernels' batch dimension --------

def _fold_into(x, bdim, size, axis):
  """Moves (or broadcasts) the vmapped axis to `axis` and merges it with the next one."""
  if bdim is NOT_MAPPED:
    x = jnp.broadcast_to(jnp.expand_dims(x, axis), x.shape[:axis] + (size,) + x.shape[axis:])
  else:
    x = jnp.moveaxis(x, bdim, axis)
  return x.reshape(x.shape[:axis] + (x.shape[axis] * x.shape[axis + 1],) + x.shape[axis + 2:])


def _unmapped_size(x, bdim, axis):
  """Size of axis `axis` of x as the primitive sees it (without the vmapped axis)."""
  mapped_before = bdim is not NOT_MAPPED and bdim <= axis
  return x.shape[axis + 1 if mapped_before else axis]


def _batch_by_loop(primitive, args, dims, params):
  """A vmapped group_offset cannot fold into one call: one call per element."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not NOT_MAPPED)
  args = [jnp.moveaxis(a, d, 0) if d is not NOT_MAPPED else
          jnp.broadcast_to(a, (size,) + a.shape) for a, d in zip(args, dims)]
  return jax.lax.map(lambda xs: primitive.bind(*xs, **params), tuple(args)), 0


def _folding_batch_rule(primitive, rhs_batch_axis, out_batch_axis):
  """The vmapped axis joins the kernel's batch axis B of every operand: lhs and
  group_sizes hold B at axis 0, rhs and the result at the given axes."""
  def rule(args, dims, **params):
    if dims[3] is not NOT_MAPPED:
      return _batch_by_loop(primitive, args, dims, params)
    lhs, rhs, group_sizes, group_offset = args
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not NOT_MAPPED)
    params = {**params, "out_sharding": None}  # of the unfolded shape: inferred again
    out = primitive.bind(_fold_into(lhs, dims[0], size, 0),
                         _fold_into(rhs, dims[1], size, rhs_batch_axis),
                         _fold_into(group_sizes, dims[2], size, 0), group_offset, **params)
    a = out_batch_axis
    unfolded = out.shape[:a] + (size, _unmapped_size(lhs, dims[0], 0)) + out.shape[a + 1:]
    return out.reshape(unfolded), a
  return rule


_ragged_m_batch = _folding_batch_rule(ragged_m_p, rhs_batch_axis=1, out_batch_axis=0)
_ragged_k_batch = _folding_batch_rule(ragged_k_p, rhs_batch_axis=0, out_batch_axis=1)


for _primitive, _abstract_eval, _ffi, _transpose, _batch in (
    (ragged_m_p, _ragged_m_abstract_eval, _ragged_m_ffi, _ragged_m_transpose, _ragged_m_batch),
    (ragged_k_p, _ragged_k_abstract_eval, _ragged_k_ffi, _ragged_k_transpose, _ragged_k_batch),
):
  _primitive.def_impl(_ffi)
  _primitive.def_abstract_eval(_abstract_eval)
  # The unpartitioned lowering; partitioning.py (imported by the package) wraps
  # it in custom_partitioning so that sharded jit programs partition it.
  mlir.register_lowering(_primitive, mlir.lower_fun(_ffi, multiple_results=False))
  ad.primitive_jvps[_primitive] = _bilinear_jvp(_primitive)
  ad.primitive_transposes[_primitive] = _transpose
  batching.primitive_batchers[_primitive] = _batch
