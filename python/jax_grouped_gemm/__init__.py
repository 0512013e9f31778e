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
# One expert projection, optionally with MXFP8 numerics in forward, dgrad and wgrad.
from jax_grouped_gemm.grouped_dense import MXFP8Recipe, grouped_dense  # noqa: E402

__all__ = ["MXFP8Recipe", "RaggedDotDimensionNumbers", "grouped_dense", "ragged_dot",
           "ragged_dot_general"]
__version__ = "0.1.0"

# The MoE block (jgg.moe) and the Flax modules (jgg.flax.nnx, jgg.flax.linen). jgg.flax is
# imported on first use: flax is a heavy import that users of the ops alone need not pay.
from jax_grouped_gemm import moe  # noqa: E402,F401
# jgg.export: jax.export artifacts of functions calling our kernels, with a manifest that
# load() checks (targets and versions). Imported eagerly: it registers our pytrees for
# serialization, which a fresh process needs before it deserializes.
from jax_grouped_gemm import export  # noqa: E402,F401


def __getattr__(name):
  if name == "flax":
    import importlib
    return importlib.import_module("jax_grouped_gemm.flax")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
