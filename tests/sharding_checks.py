"""What the sharding tests read off a mesh and a compiled program.

The meshes are built from CPU devices (tests/conftest.py asks XLA for 8 of
them), so the tests run the same on a machine with a GPU.
"""

from __future__ import annotations

import collections
import re

import jax
import pytest
from jax.sharding import AxisType

NUM_DEVICES = 8


def cpu_mesh(shape=(2, 4), names=("data", "model"), axis_type=AxisType.Auto):
  """A mesh of CPU devices; Auto axes by default (jax.make_mesh defaults to Explicit)."""
  devices = jax.devices("cpu")
  if len(devices) < NUM_DEVICES:
    pytest.skip(f"needs {NUM_DEVICES} CPU devices: XLA_FLAGS="
                f"--xla_force_host_platform_device_count={NUM_DEVICES} before jax starts")
  count = 1
  for n in shape:
    count *= n
  return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape),
                       devices=devices[:count])


@pytest.fixture(autouse=True)
def on_cpu():
  """Unsharded references and fresh arrays on the CPU too, where the meshes live."""
  with jax.default_device(jax.devices("cpu")[0]):
    yield


@pytest.fixture(params=["shardy", "gspmd"])
def partitioner(request):
  """Runs the test under Shardy (jax's default) and under GSPMD, restoring the setting."""
  previous = jax.config.jax_use_shardy_partitioner
  jax.config.update("jax_use_shardy_partitioner", request.param == "shardy")
  try:
    yield request.param
  finally:
    jax.config.update("jax_use_shardy_partitioner", previous)


# "%name = TYPE kind(", or asynchronous (GPU) "%name = (TYPE, ...) kind-start(".
_COLLECTIVE = re.compile(r"%\S+ = (.*?) (all-reduce|all-gather|reduce-scatter|all-to-all|"
                         r"ragged-all-to-all|collective-permute|collective-broadcast)"
                         r"(?:-start)?\(")
_SHAPE = re.compile(r"\w+\[[\d,]*\]")


def _strip_layout(shape: str) -> str:
  return re.sub(r"\{[^}]*\}", "", shape)


def collectives(hlo_text: str) -> collections.Counter:
  """Counter of "kind shape" for every collective of a compiled HLO module."""
  found = collections.Counter()
  for line in hlo_text.splitlines():
    m = _COLLECTIVE.search(line)
    if m:
      found[f"{m.group(2)} {_strip_layout(m.group(1))}"] += 1
  return found


def custom_calls(hlo_text: str, target_prefix: str = "jgg_"):
  """[(target, result shape, operand shapes)] of our custom calls in a compiled module."""
  calls = []
  for line in hlo_text.splitlines():
    m = re.search(r'custom_call_target="(' + target_prefix + r'[^"]*)"', line)
    if not m or "custom-call(" not in line:
      continue
    result = _SHAPE.search(line.split("=", 1)[1]).group(0)  # first result; the workspace follows
    constraints = line.split("operand_layout_constraints=", 1)[1]
    operands = tuple(_SHAPE.findall(constraints)[:4])
    calls.append((m.group(1), result, operands))
  return calls


def shape_str(dtype: str, shape) -> str:
  return f"{dtype}[{','.join(str(n) for n in shape)}]"
