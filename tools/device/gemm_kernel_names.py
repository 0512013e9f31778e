"""Which kernels the BF16 anchors' competitors run, with their device times.

For each shape and pass: torch._grouped_mm and torch.mm (the dense ceiling) under
torch.profiler, then XLA's dense dot (jnp, the bench's dense_jax) and ours under
jax.profiler, each kernel's full name and mean time over CALLS calls. The names say
which tile, cluster and schedule CUTLASS (torch) and cuBLAS (dense) picked. Run on the
device:
  PYTHONPATH=python:tests:. XLA_PYTHON_CLIENT_PREALLOCATE=false \
    python3 tools/device/gemm_kernel_names.py [shape,...]
With `--once SHAPE PASS` it runs ours and torch.mm once each, for ncu:
  ncu -k regex:"device_kernel|nvjet|gemm|xmma" --section SpeedOfLight ... python3 \
    tools/device/gemm_kernel_names.py --once mixtral fwd
"""

from __future__ import annotations

import collections
import sys

import jax
import jax.numpy as jnp

from mxfp8_timeline import device_events
from tools.bench import jax_competitors
from tools.bench import shapes as shapes_lib
from tools.bench import torch_competitors

CALLS = 5
DEFAULT_SHAPES = "mixtral,deepseek-ep8,qwen3-30b"


def torch_kernels(call) -> dict:
  import torch
  from torch.profiler import ProfilerActivity, profile

  for _ in range(2):
    call()
  torch.cuda.synchronize()
  with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(CALLS):
      call()
    torch.cuda.synchronize()
  times = collections.defaultdict(list)
  for event in prof.events():
    if event.device_type.name == "CUDA":
      times[event.name].append(event.device_time)  # us
  return times


def jax_kernels(fn, operands) -> dict:
  import tempfile

  jitted = jax.jit(fn)
  jax.block_until_ready(jitted(*operands))
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir):
      for _ in range(CALLS):
        out = jitted(*operands)
      jax.block_until_ready(out)
    events = device_events(trace_dir)
  times = collections.defaultdict(list)
  for name, _, duration in events:
    times[name].append(duration / 1e3)
  return times


def report(label, times):
  print(f"  {label}")
  for name, durations in sorted(times.items(), key=lambda kv: -sum(kv[1])):
    print(f"    {len(durations):3d} x {sum(durations) / len(durations):9.2f} us  {name}")


def once(shape_name, pass_name):
  shape = shapes_lib.by_name([shape_name])[0]
  j_ops = jax_competitors._random_operands(shape.dims)
  sizes = jnp.asarray(shape.group_sizes())
  jax.block_until_ready(jax.jit(jax_competitors._grouped_fn("ours", pass_name))(
      *jax_competitors._pass_operands(j_ops, pass_name), sizes))
  import torch

  t_ops = torch_competitors._random_operands(shape.dims)
  torch.mm(*torch_competitors._dense_operands(t_ops, pass_name))
  torch.cuda.synchronize()
  return 0


def main(argv):
  import torch

  if len(argv) == 4 and argv[1] == "--once":
    return once(argv[2], argv[3])
  names = (argv[1] if len(argv) > 1 else DEFAULT_SHAPES).split(",")
  for shape in shapes_lib.by_name(names):
    print(f"== {shape.name} (M, K, N, G) = {shape.dims}", flush=True)
    t_ops = torch_competitors._random_operands(shape.dims)
    offs = torch.cumsum(torch.as_tensor(shape.group_sizes(), device="cuda"), 0).to(torch.int32)
    j_ops = jax_competitors._random_operands(shape.dims)
    sizes = jnp.asarray(shape.group_sizes())
    for pass_name in shapes_lib.PASSES:
      print(f" {pass_name}")
      report("torch._grouped_mm",
             torch_kernels(torch_competitors._grouped_mm_call(pass_name, t_ops, offs)))
      lhs, rhs = torch_competitors._dense_operands(t_ops, pass_name)
      report("torch.mm", torch_kernels(lambda: torch.mm(lhs, rhs)))
      report("XLA dot", jax_kernels(jax_competitors._dense_fn(pass_name),
                                    jax_competitors._dense_operands(j_ops, pass_name)))
      report("ours", jax_kernels(jax_competitors._grouped_fn("ours", pass_name),
                                 jax_competitors._pass_operands(j_ops, pass_name) + (sizes,)))
    sys.stdout.flush()
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
