"""Test configuration shared by every test module.

Outputs are poisoned (NaN) by the handlers before each kernel runs
(JGG_POISON_OUTPUTS, read by the native module), so an element a kernel
forgets to write fails the comparison. Must be set before the first call.
"""

import os

os.environ.setdefault("JGG_POISON_OUTPUTS", "1")
# 8 CPU devices for the sharding tests (a 2x4 mesh); read when jax initializes.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_force_host_platform_device_count=8").strip()

import hypothesis  # noqa: E402
import jax  # noqa: E402
import pytest  # noqa: E402

# References computed with jax (dots, check_grads) must be exact f32: on a GPU
# the default matmul precision is TF32 (~3e-4 relative error).
jax.config.update("jax_default_matmul_precision", "highest")

hypothesis.settings.register_profile(
    "default", deadline=None, print_blob=True,
    max_examples=int(os.environ.get("JGG_HYPOTHESIS_EXAMPLES", "25")))
hypothesis.settings.load_profile("default")


def has_gpu() -> bool:
  try:
    return bool(jax.devices("gpu"))
  except RuntimeError:
    return False


def gpu_count() -> int:
  return len(jax.devices("gpu")) if has_gpu() else 0


requires_gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")
requires_two_gpus = pytest.mark.skipif(gpu_count() < 2, reason="needs two CUDA GPUs")
