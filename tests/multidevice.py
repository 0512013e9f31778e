"""Runs a test body on a mesh of CPU devices.

XLA_FLAGS=--xla_force_host_platform_device_count must be set before jax is
imported, so when this process has too few devices the body runs in a child
Python with the flag set (JGG_POISON_OUTPUTS and the rest of the environment
are inherited).
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def run_on_cpu_devices(module: str, function: str, count: int = 8, timeout: int = 600):
  """Calls tests/<module>.py:<function>() where jax's default backend is `count` CPU devices
  (or more): in this process if it is so (tests/conftest.py asks for 8), else in a child."""
  if jax.default_backend() == "cpu" and jax.device_count() >= count:
    getattr(__import__(module), function)()
    return
  code = f"import sys; sys.path.insert(0, {TESTS_DIR!r}); import {module}; {module}.{function}()"
  run_script_on_cpu_devices(code, count=count, timeout=timeout)


def run_script_on_cpu_devices(script: str, *argv: str, count: int = 8, timeout: int = 600) -> str:
  """Runs `python -c script *argv` in a child whose jax has `count` CPU devices, so that a
  crash or an abort of XLA there is a failed assertion here; returns its stdout."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                      f" --xla_force_host_platform_device_count={count}").strip()
  env["JAX_PLATFORMS"] = "cpu"
  done = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True,
                        text=True, timeout=timeout)
  assert done.returncode == 0, (
      f"child on {count} CPU devices failed (exit {done.returncode}):\n{done.stdout[-4000:]}"
      f"\n{done.stderr[-8000:]}")
  return done.stdout
