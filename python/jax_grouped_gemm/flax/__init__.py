"""Flax modules on jax_grouped_gemm, for both Flax APIs.

  jax_grouped_gemm.flax.nnx    GroupedDense, RaggedDot, MoE  (flax.nnx)
  jax_grouped_gemm.flax.linen  GroupedDense, RaggedDot, MoE  (flax.linen)
"""

from jax_grouped_gemm.flax import linen, nnx

__all__ = ["linen", "nnx"]
