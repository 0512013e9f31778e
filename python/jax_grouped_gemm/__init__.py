"""jax-grouped-gemm: grouped (ragged) GEMMs for Mixture-of-Experts layers in JAX.

`ragged_dot` and `ragged_dot_general` are drop-in replacements for jax.lax's,
running on this package's XLA FFI kernels (CPU and, where built, CUDA).
"""

from jax_grouped_gemm.ragged_dot import (
    RaggedDotDimensionNumbers,
    ragged_dot,
    ragged_dot_general,
)
# Imported for its effect: the ops' lowerings partition under jit with sharded inputs.
from jax_grouped_gemm import partitioning  # noqa: E402,F401
# MXFP8 grouped quantize / dequantize: jgg.mxfp8.quantize, jgg.mxfp8.dequantize.
from jax_grouped_gemm import mxfp8  # noqa: E402,F401

__all__ = ["RaggedDotDimensionNumbers", "ragged_dot", "ragged_dot_general"]
__version__ = "0.1.0"
