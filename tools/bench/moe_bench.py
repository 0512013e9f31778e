"""Tokens/s of one MoE block, forward + backward, on three grouped-GEMM backends.

Run on the GPU machine from the repository root:

  PYTHONPATH=python python3 -m tools.bench.moe_bench --out build/moe_bench

Every backend runs the same block, jax_grouped_gemm.moe.moe_block (float32
router, top-k, sort by expert, gated expert MLP, weighted unpermute), so rows
differ only in the grouped GEMMs (3 per step forward, 6 backward):
  ours    jgg.ragged_dot (forward, dgrad and wgrad on our kernels)
  ours_mxfp8  jgg.grouped_dense with jgg.MXFP8Recipe() (quantize, then the MXFP8
          grouped GEMMs; checked against lax with MXFP8's looser tolerance)
  lax     jax.lax.ragged_dot
  pallas  jax.experimental.pallas.ops.gpu: ragged_dot_mgpu forward and dgrad
          (transpose_rhs), transposed_ragged_dot_mgpu wgrad, joined by a
          custom_vjp; the first block configuration of jax_competitors' lists
          that fits each GEMM (no sweep; the GEMM benchmark sweeps)
Block shapes are the named anchors of tools/bench/shapes.py read as MoE
layers: tokens = M / top_k, d_model = K, d_ff = N, experts = G.

Timing: one jitted fori_loop of --calls steps whose router is chained to the
previous step's gradients (a flag that is always 0 but XLA cannot know, as in
jax_loop.py; for ours_mxfp8 every weight is, so its weight quantization runs
every step as in training), the compiled loop read for hoisted work and
per-step copies, 1.5 s of the loop back to back (the sustained clock, as the GEMM benches
warm up), --runs timed runs, the median reported. Before timing, our output and input
gradient are checked against the lax block's. Writes moe_bench.json and
moe_bench.md to --out and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import statistics
import time

import numpy as np

from tools.bench import jax_competitors, jax_loop
from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp

BACKENDS = ("ours", "ours_mxfp8", "lax", "pallas")
TOP_K = {"mixtral": 2, "deepseek-ep8": 8, "qwen3-30b": 8, "decode": 8}
CHECK_TOLERANCE = 2e-2  # bf16 block: outputs rounded to bf16 at every GEMM
# e4m3 keeps 3 mantissa bits: ~2.7% rms per quantized operand, ~7% after the block's
# three chained GEMMs (measured 6.7% on random data).
MXFP8_CHECK_TOLERANCE = 0.15


@dataclasses.dataclass(frozen=True)
class BlockShape:
  name: str
  tokens: int
  d_model: int
  d_ff: int
  experts: int
  top_k: int

  @property
  def gemm_flops(self) -> int:
    """3 GEMMs x (forward, dgrad, wgrad), each 2 * tokens * top_k * d_model * d_ff."""
    return 9 * 2 * self.tokens * self.top_k * self.d_model * self.d_ff


def block_shapes(names=None) -> list[BlockShape]:
  shapes = shapes_lib.by_name(names or list(TOP_K))
  return [BlockShape(s.name, s.tokens // TOP_K[s.name], s.hidden, s.ffn, s.experts,
                     TOP_K[s.name]) for s in shapes]


# --- the block on each backend -----------------------------------------------------------

def projection(backend: str, shape: BlockShape):
  """(x, kernel, group_sizes) -> x . kernel[group] on one backend."""
  import jax
  import jax_grouped_gemm as jgg

  if backend == "ours":
    return lambda x, kernel, group_sizes: jgg.ragged_dot(x, kernel, group_sizes)
  if backend == "ours_mxfp8":
    recipe = jgg.MXFP8Recipe()
    return lambda x, kernel, group_sizes: jgg.grouped_dense(x, kernel, group_sizes, recipe=recipe)
  if backend == "lax":
    return lambda x, kernel, group_sizes: jax.lax.ragged_dot(x, kernel, group_sizes)
  if backend == "pallas":
    return _pallas_projection(shape)
  raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")


def _pallas_projection(shape: BlockShape):
  import jax
  from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu, transposed_ragged_dot_mgpu

  def config(contraction, out_cols):
    for c in jax_competitors.RAGGED_DOT_CONFIGS:
      if contraction % c["block_k"] == 0 and out_cols % (c["block_n"] * c["grid_block_n"]) == 0:
        return c
    raise ValueError(f"no Pallas ragged_dot config fits K={contraction} N={out_cols}")

  def wgrad_config(rows, cols):
    for c in jax_competitors.TRANSPOSED_RAGGED_DOT_CONFIGS:
      if rows % c["block_m"] == 0 and cols % (c["block_n"] * c["grid_block_n"]) == 0:
        return c
    raise ValueError(f"no Pallas transposed_ragged_dot config fits {rows}x{cols}")

  @jax.custom_vjp
  def project(x, kernel, group_sizes):
    _, k, n = kernel.shape
    return ragged_dot_mgpu.ragged_dot(x, kernel, group_sizes=group_sizes, **config(k, n))

  def forward(x, kernel, group_sizes):
    return project(x, kernel, group_sizes), (x, kernel, group_sizes)

  def backward(residuals, dy):
    x, kernel, group_sizes = residuals
    _, k, n = kernel.shape
    dx = ragged_dot_mgpu.ragged_dot(dy, kernel, group_sizes=group_sizes, transpose_rhs=True,
                                    **config(n, k))
    dkernel = transposed_ragged_dot_mgpu.transposed_ragged_dot(
        x, dy, group_sizes=group_sizes, **wgrad_config(k, n))
    return dx, dkernel, None

  project.defvjp(forward, backward)
  del shape
  return project


def block_operands(shape: BlockShape, seed: int = 0):
  """x, the block's weights and the output probe: bf16 (router float32), never zeros."""
  import jax
  import jax.numpy as jnp
  from jax_grouped_gemm import moe

  keys = jax.random.split(jax.random.key(seed), 6)
  normal = lambda key, dims, fan_in, dtype=jnp.bfloat16: (
      jax.random.normal(key, dims, jnp.float32) / math.sqrt(fan_in)).astype(dtype)
  e, d, f = shape.experts, shape.d_model, shape.d_ff
  weights = moe.MoEWeights(router=normal(keys[0], (d, e), d, jnp.float32),
                           gate=normal(keys[1], (e, d, f), d), up=normal(keys[2], (e, d, f), d),
                           down=normal(keys[3], (e, f, d), f))
  x = normal(keys[4], (shape.tokens, d), 1)
  probe = normal(keys[5], (shape.tokens, d), 1)
  return x, weights, probe


def step_fn(backend: str, shape: BlockShape):
  """(x, weights, probe) -> (y, grads wrt x and weights): one forward + backward."""
  import jax
  import jax.numpy as jnp
  from jax_grouped_gemm import moe

  block = functools.partial(moe.moe_block, top_k=shape.top_k,
                            projection=projection(backend, shape))

  def step(x, weights, probe):
    def loss(x, weights):
      y, aux_loss = block(x, weights)
      return jnp.sum(y.astype(jnp.float32) * probe) + aux_loss, y
    grads, y = jax.grad(loss, argnums=(0, 1), has_aux=True)(x, weights)
    return y, grads
  return step


# --- timing ------------------------------------------------------------------------------

def time_step(step, operands, *, calls: int, runs: int, chain_weights: bool = False,
              warmup_seconds: float = wp.DEFAULT_WARMUP_SECONDS) -> dict:
  """Median seconds per step over `runs` runs of a jitted loop of `calls` chained steps.

  Each step's flag (always 0, unknown to XLA) goes into the router, the
  smallest operand, so XLA can neither hoist the step nor merge steps, at the
  cost of a tiny copy. With `chain_weights` it goes into every weight, carried
  through the loop, so nothing derived from the weights is hoisted either (an
  MXFP8 step re-quantizes them, as training must); XLA may then copy the
  weights around opaque custom calls (reported as loop_copy_bytes), which
  counts against that row.
  """
  import jax
  from jax import lax

  x, weights, probe = operands
  flagged = lambda w, flag: w.at[(0,) * w.ndim].add(flag.astype(w.dtype))

  def loop(x, probe, carry):
    def body(_, carry):
      weights, (_, (dx, _)) = carry
      flag = dx.reshape(-1)[0] == jax_loop.never_held(dx.dtype)
      if chain_weights:
        weights = jax.tree.map(lambda w: flagged(w, flag), weights)
        step_weights = weights
      else:
        step_weights = dataclasses.replace(weights, router=flagged(weights.router, flag))
      return weights, step(x, step_weights, probe)
    return lax.fori_loop(0, calls, body, carry)

  out = jax.tree.map(lambda a: jax.numpy.zeros(a.shape, a.dtype),
                     jax.eval_shape(step, x, weights, probe))
  carry = (jax.tree.map(lambda w: w.copy(), weights), out)
  start = time.perf_counter()
  compiled = jax.jit(loop, donate_argnums=(2,)).lower(x, probe, carry).compile()
  report = jax_loop.loop_report(compiled.as_text())
  carry = jax.block_until_ready(compiled(x, probe, carry))  # warm up
  compile_seconds = time.perf_counter() - start
  start = time.perf_counter()  # then the loop back to back: the power-limited sustained clock
  while time.perf_counter() - start < warmup_seconds:
    carry = jax.block_until_ready(compiled(x, probe, carry))
  per_step = []
  for _ in range(runs):
    start = time.perf_counter()
    carry = jax.block_until_ready(compiled(x, probe, carry))
    per_step.append((time.perf_counter() - start) / calls)
  return {"seconds": statistics.median(per_step), "min_seconds": min(per_step),
          "max_seconds": max(per_step), "runs": runs, "calls": calls,
          "compile_seconds": compile_seconds, "loop_copy_bytes": report["body_copy_bytes"],
          "hoisted": report["hoisted"][:3]}


def relative_error(actual, expected) -> float:
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  if not np.all(np.isfinite(actual)):
    return math.inf
  return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def run(shapes, backends, *, calls: int, runs: int, check: bool = True, log=print,
        warmup_seconds: float = wp.DEFAULT_WARMUP_SECONDS) -> dict:
  import jax

  device = jax.devices()[0]
  rows = []
  for shape in shapes:
    operands = block_operands(shape)
    reference = None
    if check:
      y, grads = jax.jit(step_fn("lax", shape))(*operands)
      reference = (y, grads[0])
    for backend in backends:
      row = {"block": dataclasses.asdict(shape), "backend": backend}
      try:
        if backend == "pallas" and device.platform != "gpu":
          raise RuntimeError("Pallas Mosaic GPU needs a GPU")
        step = step_fn(backend, shape)
        if reference is not None and backend != "lax":
          y, grads = jax.jit(step)(*operands)
          row["check_rel_err"] = max(relative_error(y, reference[0]),
                                     relative_error(grads[0], reference[1]))
          row["check_ok"] = row["check_rel_err"] <= (
              MXFP8_CHECK_TOLERANCE if backend == "ours_mxfp8" else CHECK_TOLERANCE)
        row.update(time_step(step, operands, calls=calls, runs=runs,
                             chain_weights=backend == "ours_mxfp8",
                             warmup_seconds=warmup_seconds))
        row["tokens_per_second"] = shape.tokens / row["seconds"]
        row["gemm_tflops"] = shape.gemm_flops / row["seconds"] / 1e12
        log(f"[moe] {shape.name} {backend}: {row['seconds'] * 1e3:.3f} ms/step, "
            f"{row['tokens_per_second']:,.0f} tokens/s")
      except Exception as e:  # one backend's failure is a table entry, not the end of the run
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}" if str(e) else (
            type(e).__name__)
        log(f"[moe] {shape.name} {backend}: n/a ({row['error']})")
      rows.append(row)
    del operands
  return {"device": f"{device.platform}: {device.device_kind}", "jax": jax.__version__,
          "calls": calls, "runs": runs, "rows": rows}


def markdown(summary: dict) -> str:
  by_block: dict[str, dict] = {}
  for row in summary["rows"]:
    by_block.setdefault(row["block"]["name"], {})[row["backend"]] = row
  lines = [f"MoE block forward + backward, {summary['device']}, jax {summary['jax']}: tokens/s "
           f"(grouped-GEMM TFLOP/s), median of {summary['runs']} runs of {summary['calls']} "
           "steps.", "",
           "| block (tokens, d_model, d_ff, experts, top-k) | ours | ours MXFP8 | jax.lax | "
           "Pallas | ours / lax | ours / Pallas | check vs lax (ours, MXFP8) |",
           "|---|---|---|---|---|---|---|---|"]
  for name, rows in by_block.items():
    b = next(iter(rows.values()))["block"]
    cell = lambda r: ("n/a" if r is None or "error" in r else
                      f"{r['tokens_per_second']:,.0f} ({r['gemm_tflops']:.1f})")
    ratio = lambda a, c: ("" if not a or not c or "error" in a or "error" in c else
                          f"{c['seconds'] / a['seconds']:.2f}x")
    check = lambda r: ("" if not r or r.get("check_rel_err") is None else
                       f"{r['check_rel_err']:.1e}" + ("" if r["check_ok"] else " FAIL"))
    ours = rows.get("ours")
    lines.append(
        f"| {name} ({b['tokens']}, {b['d_model']}, {b['d_ff']}, {b['experts']}, {b['top_k']}) "
        f"| {cell(ours)} | {cell(rows.get('ours_mxfp8'))} | {cell(rows.get('lax'))} "
        f"| {cell(rows.get('pallas'))} | {ratio(ours, rows.get('lax'))} "
        f"| {ratio(ours, rows.get('pallas'))} | {check(ours)}, {check(rows.get('ours_mxfp8'))} |")
  notes = [f"- {r['block']['name']} {r['backend']}: {r['error']}"
           for r in summary["rows"] if "error" in r]
  notes += [f"- {r['block']['name']} {r['backend']}: work outside the timed loop: {r['hoisted']}"
            for r in summary["rows"] if r.get("hoisted")]
  notes += [f"- {r['block']['name']} {r['backend']}: copies {r['loop_copy_bytes']:,} bytes per "
            "step inside the loop (layout changes of the block itself, or the chain's)"
            for r in summary["rows"] if r.get("loop_copy_bytes")]
  return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--blocks", default=",".join(TOP_K),
                      help="anchor names of tools/bench/shapes.py, comma-separated")
  parser.add_argument("--backends", default=",".join(BACKENDS))
  parser.add_argument("--calls", type=int, default=10, help="steps per timed run")
  parser.add_argument("--runs", type=int, default=20, help="timed runs (median reported)")
  parser.add_argument("--no-check", dest="check", action="store_false")
  parser.add_argument("--out", default="build/moe_bench")
  args = parser.parse_args(argv)
  shapes = block_shapes(args.blocks.split(","))
  summary = run(shapes, args.backends.split(","), calls=args.calls, runs=args.runs,
                check=args.check)
  table = markdown(summary)
  wp.save_results(args.out, "moe_bench", summary, table)
  print(table)


if __name__ == "__main__":
  main()
