"""SM clock and board power while one GEMM runs back to back, from idle to steady state.

Large GEMMs run the H100 at its power limit, where the clock (and so the rate) depends on
the energy each kernel spends per FLOP, and on how long the GPU idled before: the limiter
needs a moment to pull the clock down. This probe runs ours, torch._grouped_mm and
torch.mm (cuBLAS) on anchor passes, each for SECONDS after IDLE seconds of idle, while
nvidia-smi samples the SM clock and power, and prints each one's rate and mean clock in
windows of its run (the first quarter second to the steady state). Run on the device:
  PYTHONPATH=python:tests:. XLA_PYTHON_CLIENT_PREALLOCATE=false \
    python3 tools/device/gemm_power_probe.py [shape:pass,...]
"""

from __future__ import annotations

import subprocess
import sys
import time

import jax
import jax.numpy as jnp

from tools.bench import jax_competitors
from tools.bench import shapes as shapes_lib
from tools.bench import torch_competitors

SECONDS = 4.0
IDLE = 3.0
WINDOWS = ((0.0, 0.25), (0.25, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, 4.0))
DEFAULT_ROWS = "mixtral:fwd,deepseek-ep8:fwd,qwen3-30b:fwd,qwen3-30b:wgrad"


def from_idle(run_batch, sync):
  """Idles IDLE seconds, then runs synced batches for SECONDS; [(end time, batch seconds)]."""
  run_batch()
  sync()  # compiled and loaded
  time.sleep(IDLE)
  batches, start = [], time.time()
  while time.time() - start < SECONDS:
    begin = time.time()
    run_batch()
    sync()
    batches.append((time.time(), time.time() - begin))
  return start, batches


def main(argv):
  import torch

  rows = [r.split(":") for r in (argv[1] if len(argv) > 1 else DEFAULT_ROWS).split(",")]
  sampler = subprocess.Popen(
      ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
       "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
  windows = []
  for shape_name, pass_name in rows:
    shape = shapes_lib.by_name([shape_name])[0]
    flops = 2 * shape.tokens * shape.hidden * shape.ffn
    j_ops = jax_competitors._random_operands(shape.dims)
    sizes = jnp.asarray(shape.group_sizes())
    fn = jax.jit(jax_competitors._grouped_fn("ours", pass_name))
    operands = jax_competitors._pass_operands(j_ops, pass_name) + (sizes,)
    out = [None]

    def ours_batch():
      for _ in range(10):
        out[0] = fn(*operands)

    t_ops = torch_competitors._random_operands(shape.dims)
    offs = torch.cumsum(torch.as_tensor(shape.group_sizes(), device="cuda"), 0).to(torch.int32)
    grouped = torch_competitors._grouped_mm_call(pass_name, t_ops, offs)
    lhs, rhs = torch_competitors._dense_operands(t_ops, pass_name)

    def torch_batch(call):
      def batch():
        for _ in range(10):
          call()
      return batch

    for name, batch, sync in (
        ("ours", ours_batch, lambda: jax.block_until_ready(out[0])),
        ("torch._grouped_mm", torch_batch(grouped), torch.cuda.synchronize),
        ("torch.mm", torch_batch(lambda: torch.mm(lhs, rhs)), torch.cuda.synchronize)):
      start, batches = from_idle(batch, sync)
      for lo, hi in WINDOWS:
        inside = [seconds for t, seconds in batches if start + lo <= t < start + hi]
        rate = 10 * flops * len(inside) / max(sum(inside), 1e-9) / 1e12
        windows.append((f"{shape_name} {pass_name} {name} {lo}-{hi} s", rate, start + lo,
                        start + hi))
      print(f"{shape_name} {pass_name} {name}: " +
            " ".join(f"{w[1]:.0f}" for w in windows[-len(WINDOWS):]) + " TFLOP/s", flush=True)
    del j_ops, operands, out, t_ops
  time.sleep(0.2)
  sampler.terminate()
  samples = []
  for line in sampler.stdout.read().splitlines():
    stamp, clock, power, temp = [f.strip() for f in line.split(",")]
    seconds = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S"))
    seconds += float("0." + stamp.split(".")[1]) if "." in stamp else 0.0
    samples.append((seconds, float(clock), float(power), float(temp)))
  print("| row | TFLOP/s | SM MHz | W | C | samples |\n|---|---:|---:|---:|---:|---:|")
  for label, rate, start, end in windows:
    inside = [s for s in samples if start <= s[0] < end]
    if not inside:
      print(f"| {label} | {rate:.0f} | - | - | - | 0 |")
      continue
    mean = lambda i: sum(s[i] for s in inside) / len(inside)
    print(f"| {label} | {rate:.0f} | {mean(1):.0f} | {mean(2):.0f} | {mean(3):.0f} | "
          f"{len(inside)} |")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
