"""What the group count itself costs the BF16 grouped GEMM, apart from ragged padding.

Each anchor's FLOPs are split into G equal groups of a multiple of 128 rows (no idle
rows in any 128-row tile) for several G, timed as the bench times ours (LoopTimer), next
to the anchor's own jittered sizes and the dense GEMM of the same FLOPs. If equal groups
run as fast at G = 128 as at G = 1, a group costs nothing and what the anchors lose is
their tiles' idle rows; if not, the difference is per-group work (CUTLASS's tensor-map
update at each change of group, L2 reuse across groups). Beside each equal split, XLA's
batched GEMM of the same groups ("batched": one strided-batch call, no per-group pointers
or tensor maps) shows what groups of that size cost a dense kernel.
Run on the device:
  PYTHONPATH=python:tests:. python3 tools/device/group_count_probe.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from tools.bench import jax_competitors as jc
from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp
from tools.bench.jax_loop import LoopTimer

# (anchor, group counts of equal multiple-of-128 groups)
SPLITS = (("qwen3-30b", (1, 8, 32, 128)), ("deepseek-ep8", (1, 8, 32)))


def _time(timer, fn, operands) -> float:
  return timer(fn, operands)["seconds"]


# The pass as a batched GEMM over G equal groups: (lhs, rhs) of the pass -> [G, ...] result.
_BATCHED_CONTRACTING = {"fwd": ((2,), (1,)), "dgrad": ((2,), (2,)), "wgrad": ((1,), (1,))}


def _batched_fn(pass_name, g):
  def fn(lhs, rhs):
    lhs = lhs.reshape(g, lhs.shape[0] // g, lhs.shape[1])
    if pass_name == "wgrad":
      rhs = rhs.reshape(g, rhs.shape[0] // g, rhs.shape[1])
    return jax.lax.dot_general(lhs, rhs, (_BATCHED_CONTRACTING[pass_name], ((0,), (0,))))
  return fn


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=None, help="write the rows as JSON here")
  parser.add_argument("--passes", default="fwd,dgrad,wgrad")
  args = parser.parse_args(argv)
  passes = args.passes.split(",")
  timer = LoopTimer(wp.Plan(shapes=[], passes=passes, competitors=["ours"]))
  rows = []
  print(f"{jax.devices()[0].device_kind}")
  print("| anchor | pass | sizes | G | rows per group | ms | TFLOP/s | / dense |")
  print("|---|---|---|---:|---:|---:|---:|---:|")
  for name, counts in SPLITS:
    anchor = shapes_lib.by_name([name])[0]
    m, k, n, g_anchor = anchor.dims
    for pass_name in passes:
      cases = [("anchor", g_anchor, anchor.group_sizes())]
      cases += [("equal", g, np.full(g, m // g, np.int32)) for g in counts]
      dense_operands = jc._dense_operands(jc._random_operands((m, k, n, 1)), pass_name)
      dense_s = _time(timer, jc._dense_fn(pass_name), dense_operands)
      flops = 2 * m * k * n
      for kind, g, sizes in cases:
        assert sizes.sum() == m
        operands = jc._random_operands((m, k, n, g))
        pass_operands = jc._pass_operands(operands, pass_name)
        timed = [(kind, _time(timer, jc._grouped_fn("ours", pass_name),
                              pass_operands + (jnp.asarray(sizes),)))]
        if kind == "equal" and g > 1:
          timed.append(("batched", _time(timer, _batched_fn(pass_name, g), pass_operands)))
        del operands, pass_operands
        for label, seconds in timed:
          row = dict(anchor=name, pass_name=pass_name, sizes=label, groups=g,
                     rows_per_group=m // g, ms=seconds * 1e3, tflops=flops / seconds / 1e12,
                     dense_ms=dense_s * 1e3)
          rows.append(row)
          print(f"| {name} | {pass_name} | {label} | {g} | {m // g} | {row['ms']:.3f} | "
                f"{row['tflops']:.0f} | {dense_s / seconds:.2f}x |", flush=True)
      print(f"| {name} | {pass_name} | dense | - | - | {dense_s * 1e3:.3f} | "
            f"{flops / dense_s / 1e12:.0f} | 1.00x |", flush=True)
  if args.out:
    with open(args.out, "w") as f:
      json.dump(rows, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
