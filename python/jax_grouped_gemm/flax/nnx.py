"""Flax NNX modules on jax_grouped_gemm: GroupedDense, RaggedDot and the MoE block.

Conventions follow flax.nnx.Linear: `dtype` is the computation dtype (None: from
the inputs and parameters), `param_dtype` the storage dtype, initialisers take
(key, shape, dtype), and sharding is parameter metadata: wrap an initialiser
with `nnx.with_partitioning(init, ("expert", None, "model"))`, or pass
`kernel_metadata={"out_sharding": (...)}`, and `nnx.get_partition_spec(nnx.state(m))`
gives the specs to shard the weights by name. Build such a module under a mesh
(`jax.set_mesh(mesh)`) or inside `nnx.use_eager_sharding(False)`: flax shards annotated
parameters as it creates them.

    layer = GroupedDense(num_groups=8, in_features=512, out_features=1024, rngs=nnx.Rngs(0))
    y = layer(x, group_sizes)          # x [rows, 512], group_sizes [8] int32 -> [rows, 1024]
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from jax_grouped_gemm import moe as moe_lib
from jax_grouped_gemm.ragged_dot import ragged_dot as jgg_ragged_dot
from jax_grouped_gemm.flax import _grouped_dense

default_kernel_init = _grouped_dense.default_kernel_init
default_bias_init = _grouped_dense.default_bias_init


class GroupedDense(nnx.Module):
  """A linear layer per group: y[r] = x[r] . kernel[g] + bias[g] for the rows r of group g.

  Parameters: `kernel` [num_groups, in_features, out_features] and, with
  `use_bias`, `bias` [num_groups, out_features]. Rows past sum(group_sizes)
  are 0. With `group_offset` ([1] int32) the layer holds groups [offset,
  offset + num_groups) of `group_sizes` (expert parallelism): other rows are 0.

  `recipe` (e.g. an MXFP8 recipe) runs the layer through `jgg.grouped_dense`;
  `ragged_dot` swaps the op (jax.lax.ragged_dot builds a reference model).
  """

  def __init__(self, num_groups: int, in_features: int, out_features: int, *,
               use_bias: bool = True, dtype=None, param_dtype=jnp.float32, precision=None,
               kernel_init=default_kernel_init, bias_init=default_bias_init,
               preferred_element_type=None, recipe=None,
               ragged_dot: Callable = jgg_ragged_dot, rngs: nnx.Rngs,
               kernel_metadata: Mapping[str, Any] = MappingProxyType({}),
               bias_metadata: Mapping[str, Any] = MappingProxyType({})):
    self.kernel = nnx.Param(
        kernel_init(rngs.params(), (num_groups, in_features, out_features), param_dtype),
        **kernel_metadata)
    self.bias: nnx.Param | None
    if use_bias:
      self.bias = nnx.Param(bias_init(rngs.params(), (num_groups, out_features), param_dtype),
                            **bias_metadata)
    else:
      self.bias = nnx.data(None)
    self.num_groups = num_groups
    self.in_features = in_features
    self.out_features = out_features
    self.use_bias = use_bias
    self.dtype = dtype
    self.param_dtype = param_dtype
    self.precision = precision
    self.preferred_element_type = preferred_element_type
    self.recipe = recipe
    self.ragged_dot = ragged_dot

  def __call__(self, inputs, group_sizes, group_offset=None):
    return _grouped_dense.apply_grouped_dense(
        inputs, self.kernel[...], group_sizes,
        bias=None if self.bias is None else self.bias[...], group_offset=group_offset,
        dtype=self.dtype, precision=self.precision,
        preferred_element_type=self.preferred_element_type, recipe=self.recipe,
        ragged_dot=self.ragged_dot)


class RaggedDot(nnx.Module):
  """jgg.ragged_dot as a parameter-free module, for code that takes its op as a module.

  Called like jax.lax.ragged_dot(lhs, rhs, group_sizes, group_offset=None), so an
  instance can be passed wherever a ragged_dot function is expected (e.g.
  `GroupedDense(..., ragged_dot=RaggedDot(recipe=...))`).
  """

  def __init__(self, *, precision=None, preferred_element_type=None, recipe=None):
    self.precision = precision
    self.preferred_element_type = preferred_element_type
    self.recipe = recipe

  def __call__(self, lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None):
    return _grouped_dense.module_ragged_dot(self, lhs, rhs, group_sizes, precision,
                                            preferred_element_type, group_offset)


class MoE(nnx.Module):
  """A dropless MoE block (see jax_grouped_gemm.moe): x [..., in_features] -> (y, aux_loss).

  Parameters `router` [in_features, num_experts] (float32 logits), `gate`, `up`
  [num_experts, in_features, hidden_features] and `down` [num_experts,
  hidden_features, in_features]. `expert_axis` / `hidden_axis` name the mesh
  axes the expert and hidden dimensions are sharded over (partitioning
  metadata). With `expert_parallel=True` the block runs in `shard_map` over
  `expert_axis` (tokens and experts sharded over it, ragged all-to-all
  dispatch; other mesh axes, `hidden_axis` included, see the whole block);
  `mesh` defaults to the context mesh (`jax.set_mesh`).
  """

  def __init__(self, num_experts: int, in_features: int, hidden_features: int, *,
               top_k: int = 2, normalize_weights: bool = True,
               activation: Callable = jax.nn.silu, dtype=None, param_dtype=jnp.float32,
               precision=None, kernel_init=default_kernel_init,
               router_init=nnx.initializers.lecun_normal(), expert_axis: str | None = None,
               hidden_axis: str | None = None, expert_parallel: bool = False, mesh=None,
               recipe=None, ragged_dot: Callable = jgg_ragged_dot, rngs: nnx.Rngs):
    if expert_parallel and expert_axis is None:
      raise ValueError("expert_parallel=True needs expert_axis (the mesh axis of the experts)")
    # Sharding metadata only when an axis is named: flax shards annotated
    # parameters eagerly, which needs a mesh in context.
    sharded = expert_axis is not None or hidden_axis is not None
    metadata = lambda *axes: {"out_sharding": axes} if sharded else {}
    shape_in = (num_experts, in_features, hidden_features)
    self.router = nnx.Param(router_init(rngs.params(), (in_features, num_experts), param_dtype))
    self.gate = nnx.Param(kernel_init(rngs.params(), shape_in, param_dtype),
                          **metadata(expert_axis, None, hidden_axis))
    self.up = nnx.Param(kernel_init(rngs.params(), shape_in, param_dtype),
                        **metadata(expert_axis, None, hidden_axis))
    self.down = nnx.Param(
        kernel_init(rngs.params(), (num_experts, hidden_features, in_features), param_dtype),
        **metadata(expert_axis, hidden_axis, None))
    self.num_experts = num_experts
    self.top_k = top_k
    self.normalize_weights = normalize_weights
    self.activation = activation
    self.dtype = dtype
    self.precision = precision
    self.expert_axis = expert_axis
    self.expert_parallel = expert_parallel
    self.mesh = mesh
    self.recipe = recipe
    self.ragged_dot = ragged_dot

  def __call__(self, x):
    weights = moe_lib.MoEWeights(router=self.router[...], gate=self.gate[...], up=self.up[...],
                                 down=self.down[...])
    projection = functools.partial(
        _grouped_dense.apply_grouped_dense, dtype=self.dtype, precision=self.precision,
        recipe=self.recipe, ragged_dot=self.ragged_dot)
    return moe_lib.moe_layer(
        x, weights, top_k=self.top_k, normalize_weights=self.normalize_weights,
        activation=self.activation, projection=projection,
        expert_axis=self.expert_axis if self.expert_parallel else None, mesh=self.mesh)

