"""MXFP8 (OCP MX v1.0) grouped quantization, bit-compatible with TransformerEngine.

  q = jgg.mxfp8.quantize(x, group_sizes=None, *, ragged_axis=0, rowwise=True,
                         colwise=False, scale_layout="compact", dtype=jnp.float8_e4m3fn)
  y = jgg.mxfp8.dequantize(q, dtype=jnp.bfloat16)

Layouts, scale placement and the scale rule: see tensor.py, scale_layout.py and
xla_plugin/common/mxfp8_{math,layout}.h.
"""

from jax_grouped_gemm.mxfp8.quantize import dequantize, quantize
from jax_grouped_gemm.mxfp8.scale_layout import (
    group_extents,
    group_scale_inv,
    scale_offsets,
    swizzle_scale_matrix,
    unswizzle_scale_matrix,
    with_scale_layout,
)
from jax_grouped_gemm.mxfp8.tensor import LAYOUTS, SCALE_LAYOUTS, MXFP8Tensor

__all__ = [
    "LAYOUTS", "MXFP8Tensor", "SCALE_LAYOUTS", "dequantize", "group_extents", "group_scale_inv",
    "quantize", "scale_offsets", "swizzle_scale_matrix", "unswizzle_scale_matrix",
    "with_scale_layout",
]

# Grouped GEMMs on MXFP8 operands (python/jax_grouped_gemm/mxfp8_gemm.py); imported last, as it
# builds on the modules above.
from jax_grouped_gemm.mxfp8_gemm import ragged_dot, ragged_dot_general  # noqa: E402

__all__ += ["ragged_dot", "ragged_dot_general"]
