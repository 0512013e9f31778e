"""Flax linen modules on jax_grouped_gemm: GroupedDense, RaggedDot and the MoE block.

Conventions follow flax.linen.Dense: `features` is the output width (the input
width comes from the inputs), `dtype` the computation dtype, `param_dtype` the
storage dtype, and sharding is metadata: wrap an initialiser with
`nn.with_partitioning(init, ("expert", None, "model"))`, then
`nn.get_partition_spec(variables)` gives the specs to shard the weights by name.

    layer = GroupedDense(num_groups=8, features=1024)
    variables = layer.init(key, x, group_sizes)   # x [rows, in], group_sizes [8] int32
    y = layer.apply(variables, x, group_sizes)    # [rows, 1024]

The computation is the same function the NNX modules call
(jax_grouped_gemm.flax._grouped_dense, jax_grouped_gemm.moe).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jax_grouped_gemm import moe as moe_lib
from jax_grouped_gemm.ragged_dot import ragged_dot as jgg_ragged_dot
from jax_grouped_gemm.flax import _grouped_dense

default_kernel_init = _grouped_dense.default_kernel_init
default_bias_init = _grouped_dense.default_bias_init


class GroupedDense(nn.Module):
  """A linear layer per group: y[r] = x[r] . kernel[g] + bias[g] for the rows r of group g.

  Parameters: `kernel` [num_groups, in_features, features] and, with
  `use_bias`, `bias` [num_groups, features]. Rows past sum(group_sizes) are 0.
  With `group_offset` ([1] int32) the layer holds groups [offset, offset +
  num_groups) of `group_sizes` (expert parallelism): other rows are 0.
  `recipe` runs the layer through `jgg.grouped_dense`; `ragged_dot` swaps the op.
  """
  num_groups: int
  features: int
  use_bias: bool = True
  dtype: Any = None
  param_dtype: Any = jnp.float32
  precision: Any = None
  kernel_init: Callable = default_kernel_init
  bias_init: Callable = default_bias_init
  preferred_element_type: Any = None
  recipe: Any = None
  ragged_dot: Callable = jgg_ragged_dot

  @nn.compact
  def __call__(self, inputs, group_sizes, group_offset=None):
    kernel = self.param("kernel", self.kernel_init,
                        (self.num_groups, jnp.shape(inputs)[-1], self.features), self.param_dtype)
    bias = None
    if self.use_bias:
      bias = self.param("bias", self.bias_init, (self.num_groups, self.features),
                        self.param_dtype)
    return _grouped_dense.apply_grouped_dense(
        inputs, kernel, group_sizes, bias=bias, group_offset=group_offset, dtype=self.dtype,
        precision=self.precision, preferred_element_type=self.preferred_element_type,
        recipe=self.recipe, ragged_dot=self.ragged_dot)


class RaggedDot(nn.Module):
  """jgg.ragged_dot as a parameter-free module, for code that takes its op as a module.

  Called like jax.lax.ragged_dot(lhs, rhs, group_sizes, group_offset=None).
  """
  precision: Any = None
  preferred_element_type: Any = None
  recipe: Any = None

  def __call__(self, lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None):
    return _grouped_dense.module_ragged_dot(self, lhs, rhs, group_sizes, precision,
                                            preferred_element_type, group_offset)


class MoE(nn.Module):
  """A dropless MoE block (see jax_grouped_gemm.moe): x [..., d] -> (y, aux_loss).

  Parameters `router` [d, num_experts] (float32 logits), `gate`, `up`
  [num_experts, d, hidden_features] and `down` [num_experts, hidden_features, d],
  boxed with partitioning metadata over `expert_axis` / `hidden_axis` when either
  names a mesh axis (plain otherwise, so the block stacks under nn.scan as is). With
  `expert_parallel=True` the block runs in shard_map over `expert_axis`
  (ragged all-to-all dispatch; other mesh axes see the whole block); `mesh`
  defaults to the context mesh.
  """
  num_experts: int
  hidden_features: int
  top_k: int = 2
  normalize_weights: bool = True
  activation: Callable = jax.nn.silu
  dtype: Any = None
  param_dtype: Any = jnp.float32
  precision: Any = None
  kernel_init: Callable = default_kernel_init
  router_init: Callable = nn.initializers.lecun_normal()
  expert_axis: str | None = None
  hidden_axis: str | None = None
  expert_parallel: bool = False
  mesh: Any = None
  recipe: Any = None
  ragged_dot: Callable = jgg_ragged_dot

  @nn.compact
  def __call__(self, x):
    if self.expert_parallel and self.expert_axis is None:
      raise ValueError("expert_parallel=True needs expert_axis (the mesh axis of the experts)")
    d_model, shape_in = x.shape[-1], (self.num_experts, x.shape[-1], self.hidden_features)
    # Partitioning metadata only when an axis is named (as the nnx module): annotated
    # parameters need nn.scan's metadata_params to be stacked, plain ones do not.
    sharded = self.expert_axis is not None or self.hidden_axis is not None
    annotated = lambda init, axes: nn.with_partitioning(init, axes) if sharded else init
    expert_kernel = lambda axes: annotated(self.kernel_init, axes)
    weights = moe_lib.MoEWeights(
        router=self.param("router", annotated(self.router_init, (None, None)),
                          (d_model, self.num_experts), self.param_dtype),
        gate=self.param("gate", expert_kernel((self.expert_axis, None, self.hidden_axis)),
                        shape_in, self.param_dtype),
        up=self.param("up", expert_kernel((self.expert_axis, None, self.hidden_axis)),
                      shape_in, self.param_dtype),
        down=self.param("down", expert_kernel((self.expert_axis, self.hidden_axis, None)),
                        (self.num_experts, self.hidden_features, d_model), self.param_dtype))
    projection = functools.partial(
        _grouped_dense.apply_grouped_dense, dtype=self.dtype, precision=self.precision,
        recipe=self.recipe, ragged_dot=self.ragged_dot)
    return moe_lib.moe_layer(
        x, weights, top_k=self.top_k, normalize_weights=self.normalize_weights,
        activation=self.activation, projection=projection,
        expert_axis=self.expert_axis if self.expert_parallel else None, mesh=self.mesh)
