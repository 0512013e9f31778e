"""The native module: loads it once and registers its XLA FFI handlers.

Every custom-call target is registered for "cpu" and, when the CUDA kernels
were built, for "CUDA" under the same name, so one lowering serves both
platforms (and a multi-platform `jax.export` artifact finds both).
"""

from __future__ import annotations

import functools

import jax

try:
  from jax_grouped_gemm import _jgg_native as _module
except ImportError as e:  # pragma: no cover - only without a build
  raise ImportError(
      "jax_grouped_gemm's native module is not built: run ./tools/build "
      "(or ./tools/test, which builds first) from the checkout root."
  ) from e

RAGGED_M_TARGET: str = _module.RAGGED_M_TARGET
RAGGED_K_TARGET: str = _module.RAGGED_K_TARGET
MXFP8_QUANTIZE_TARGET: str = _module.MXFP8_QUANTIZE_TARGET
MXFP8_DEQUANTIZE_TARGET: str = _module.MXFP8_DEQUANTIZE_TARGET
# The fused MXFP8 grouped GEMM (mxfp8_gemm.py, backend "fused_few_rows").
MXFP8_RAGGED_M_TARGET: str = _module.MXFP8_RAGGED_M_TARGET
# Its forward-only first version (no rhs_transposed attribute), registered for old artifacts.
MXFP8_RAGGED_M_TARGET_V1: str = _module.MXFP8_RAGGED_M_TARGET_V1
# The fused MXFP8 wgrad (the same backend, a ragged contraction).
MXFP8_RAGGED_K_TARGET: str = _module.MXFP8_RAGGED_K_TARGET
# The block-scaled MXFP8 grouped GEMM (mxfp8_gemm.py, backend "blockscaled_sm100"): on CUDA
# the sm_100 kernels (compute capability 10.0 only), on the CPU the reference.
MXFP8_BLOCKSCALED_TARGET: str = _module.MXFP8_BLOCKSCALED_TARGET
# Older versions of the MXFP8 targets, still registered for the artifacts that name them.
MXFP8_LEGACY_TARGETS: tuple[str, ...] = tuple(_module.MXFP8_LEGACY_TARGETS)
# The workspace result of the MXFP8 calls (the CUDA kernels' job counter).
MXFP8_WORKSPACE_BYTES: int = int(_module.MXFP8_WORKSPACE_BYTES)
CUDA_BUILT: bool = bool(_module.cuda_built)


@functools.cache
def register_targets() -> dict[str, tuple[str, ...]]:
  """Registers every handler with jax.ffi; idempotent. Returns what it registered."""
  registered = {}
  for platform, targets in handler_capsules().items():
    for name, capsule in targets.items():
      jax.ffi.register_ffi_target(name, capsule, platform=platform)
    registered[platform] = tuple(sorted(targets))
  return registered


def handler_capsules() -> dict[str, dict[str, object]]:
  """platform -> {target name: handler capsule}, as the native module exports them."""
  return _module.registrations()


def workspace_bytes(op: str, batch: int, num_local_groups: int) -> int:
  """Scratch bytes one call of `op` needs; the formula lives in C++."""
  return int(_module.workspace_bytes(op, batch, num_local_groups))


def mxfp8_scale_bytes(layout: int, num_groups: int, rows: int, cols: int) -> int:
  """Bytes of one orientation's MXFP8 scale buffer; the formula lives in C++
  (xla_plugin/common/mxfp8_layout.h)."""
  return int(_module.mxfp8_scale_bytes(layout, num_groups, rows, cols))


def mxfp8_blockscaled_workspace_bytes(num_groups: int) -> int:
  """Scratch bytes of one block-scaled MXFP8 grouped GEMM call (formula in C++)."""
  return int(_module.mxfp8_blockscaled_workspace_bytes(num_groups))


def mxfp8_blockscaled_layout_mismatches(rows: int, depth: int) -> int:
  """Elements of a [rows, depth] operand whose scale byte CUTLASS's sm_100 layout puts
  elsewhere than our swizzled layout (0: the contract holds; -1: no CUDA build)."""
  return int(_module.mxfp8_blockscaled_layout_mismatches(rows, depth))
