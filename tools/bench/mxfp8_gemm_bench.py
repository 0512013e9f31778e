"""MXFP8 grouped GEMM (jgg.mxfp8.ragged_dot_general, whichever backend it picks) vs our BF16 one.

Run on the GPU machine from the repository root:

  PYTHONPATH=python python3 -m tools.bench.mxfp8_gemm_bench --out build/mxfp8_gemm_bench

For every anchor shape of tools/bench/shapes.py and every pass (fwd, dgrad, wgrad):
  BF16   jgg.ragged_dot_general on bf16 x [M, K], w [G, K, N], dy [M, N] (standard normal).
  MXFP8  jgg.mxfp8.ragged_dot_general on the same tensors quantized once, outside the timed
         loop, in the orientations the pass reads (fwd: x rowwise, w colwise; dgrad: dy
         rowwise, w rowwise; wgrad: x and dy colwise along M, blocks restarting at the
         routing's group boundaries), E4M3, compact scales.
speedup = BF16 time / MXFP8 time. SPEC section 8 targets: >= 1.0x on compute-bound shapes,
>= 1.3x on the weight-bandwidth-bound (decode) shape.

Each row names the backend mxfp8_gemm.choose_backend picked: "fused_few_rows" (forward
and dgrad of few rows per group, fp8 weight codes on tensor cores) or "dequantize" (a bf16
copy of each operand in HBM, then the BF16 grouped GEMM: slower than BF16 by the dequantize
passes).

check_rel_err: ||MXFP8 - BF16 GEMM of the dequantized operands|| / ||the latter||, on the
full output (0 by construction on the dequantize path; f32-accumulation level on the fused
one). Timing: jax_loop.LoopTimer (jitted fori_loops of --calls calls, the compiled loop
read for hoisted work and copies, --runs >= 20 timed runs, the median, each measurement
after --warmup-seconds of the same loops back to back: the sustained clock). Writes
mxfp8_gemm_bench.json and mxfp8_gemm_bench.md to --out.
"""

from __future__ import annotations

import argparse

from tools.bench import jax_competitors, jax_loop
from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp

TARGET_SPEEDUP = {"compute": 1.0, "weight_bandwidth": 1.3}
# Both sides accumulate the same products in f32: the dequantize backend agrees exactly, the
# fused kernels to f32 rounding (<= 3e-5 measured). Above this a row fails and meets nothing.
CHECK_TOLERANCE = 1e-3
PATH_NOTE = ("backend: fused_few_rows = the fused kernels, no bf16 copy (forward and dgrad: "
             "fp8 weight codes multiplied on tensor cores; wgrad: values dequantized on load, "
             "f32 multiply-adds, groups of 32-128 rows bf16 mma.sync); dequantize = a bf16 "
             "copy of each operand in HBM, then the BF16 grouped GEMM (more bytes and work "
             "than BF16: below target by construction).")
# (lhs tensor, its orientation is colwise, rhs tensor, colwise) of each pass.
ORIENTATIONS = {"fwd": ("x", False, "w", True), "dgrad": ("dy", False, "w", False),
                "wgrad": ("x", True, "dy", True)}


def _quantized(tensors, group_sizes, pass_name):
  """(lhs, rhs) MXFP8Tensors of one pass holding just the orientation it reads."""
  import jax_grouped_gemm as jgg

  lhs_name, lhs_colwise, rhs_name, rhs_colwise = ORIENTATIONS[pass_name]

  def quantize(name, colwise):
    sizes = None if name == "w" else group_sizes  # activations are grouped by the routing
    return jgg.mxfp8.quantize(tensors[name], sizes, rowwise=not colwise, colwise=colwise)
  return quantize(lhs_name, lhs_colwise), quantize(rhs_name, rhs_colwise)


def _leaves(q):
  data, scale_inv = q.orientation(q.colwise)
  return data, scale_inv


def _mxfp8_fn(pass_name, lhs_layout, rhs_layout):
  """fn(lhs data, lhs scales, rhs data, rhs scales, group_sizes): the loop timer's operands
  are arrays, so the tensors are rebuilt inside (free: a pytree of the same buffers)."""
  import jax_grouped_gemm as jgg

  _, lhs_colwise, _, rhs_colwise = ORIENTATIONS[pass_name]
  dims = jax_competitors._dimension_numbers(pass_name)

  def tensor(data, scale_inv, colwise, layout, group_sizes):
    sizes = group_sizes if layout == "varying_first" else None
    pair = (None, None, data, scale_inv) if colwise else (data, scale_inv, None, None)
    return jgg.mxfp8.MXFP8Tensor(*pair, sizes, layout, "compact")

  def fn(lhs_data, lhs_scales, rhs_data, rhs_scales, group_sizes):
    lhs = tensor(lhs_data, lhs_scales, lhs_colwise, lhs_layout, group_sizes)
    rhs = tensor(rhs_data, rhs_scales, rhs_colwise, rhs_layout, group_sizes)
    return jgg.mxfp8.ragged_dot_general(lhs, rhs, group_sizes, dims)
  return fn


def _bf16_fn(pass_name):
  import jax_grouped_gemm as jgg

  dims = jax_competitors._dimension_numbers(pass_name)
  return lambda lhs, rhs, group_sizes: jgg.ragged_dot_general(lhs, rhs, group_sizes, dims)


def _backend(pass_name, lhs, rhs, group_sizes) -> str:
  from jax_grouped_gemm import mxfp8_gemm

  dims = jax_competitors._dimension_numbers(pass_name)
  return mxfp8_gemm.choose_backend(mxfp8_gemm.resolve_problem(lhs, rhs, group_sizes, dims))


def _check_rel_err(pass_name, lhs, rhs, group_sizes, out) -> float:
  """Against the BF16 GEMM of the dequantized operands, on the device, in f32."""
  import jax
  import jax.numpy as jnp
  import jax_grouped_gemm as jgg

  @jax.jit
  def rel_err(lhs, rhs, group_sizes, out):
    dequantize = lambda q: jgg.mxfp8.dequantize(q, jnp.bfloat16, colwise=q.colwise)
    want = _bf16_fn(pass_name)(dequantize(lhs), dequantize(rhs), group_sizes).astype(jnp.float32)
    diff = out.astype(jnp.float32) - want
    return jnp.sqrt(jnp.sum(diff * diff) / jnp.maximum(jnp.sum(want * want), 1e-30))
  return float(rel_err(lhs, rhs, group_sizes, out))


def loop_timer(calls: int, runs: int, warmup_seconds: float) -> jax_loop.LoopTimer:
  """A LoopTimer of `runs` timed runs of `calls` calls each, after `warmup_seconds`."""
  plan = wp.Plan(shapes=[], passes=[], competitors=[], calls=calls, runs=runs, min_runs=runs,
                 run_budget_s=float("inf"), warmup_seconds=warmup_seconds)
  return jax_loop.LoopTimer(plan)


def shapes_with_operands(shapes):
  """(shape, {"x", "w", "dy"}: random bf16 tensors, its group sizes) per shape; routing
  variants of the same dims share the tensors, and one dims' tensors live at a time."""
  import jax.numpy as jnp

  operands_of = {}
  for shape in shapes:
    if shape.dims not in operands_of:
      operands_of.clear()
      operands_of[shape.dims] = jax_competitors._random_operands(shape.dims)
    yield shape, operands_of[shape.dims], jnp.asarray(shape.group_sizes())


def run(shapes, passes, out_dir: str, calls: int, runs: int, log=print,
        warmup_seconds: float = 0.0) -> dict:
  import jax

  timer = loop_timer(calls, runs, warmup_seconds)
  device = jax.devices()[0]
  log(PATH_NOTE)
  records = []
  for shape, tensors, group_sizes in shapes_with_operands(shapes):
    for pass_name in passes:
      record = dict(shape=shape.name, dims=list(shape.dims), routing=shape.routing,
                    bound=shape.bound, pass_name=pass_name,
                    target_speedup=TARGET_SPEEDUP[shape.bound])
      try:
        lhs_name, _, rhs_name, _ = ORIENTATIONS[pass_name]
        bf16 = timer(_bf16_fn(pass_name), (tensors[lhs_name], tensors[rhs_name], group_sizes))
        lhs, rhs = _quantized(tensors, group_sizes, pass_name)
        record["backend"] = _backend(pass_name, lhs, rhs, group_sizes)
        fn = _mxfp8_fn(pass_name, lhs.layout, rhs.layout)
        leaves = (*_leaves(lhs), *_leaves(rhs), group_sizes)
        mxfp8 = timer(fn, leaves)
        check = _check_rel_err(pass_name, lhs, rhs, group_sizes, jax.jit(fn)(*leaves))
        del lhs, rhs, leaves
      except Exception as e:  # a failed entry is a row, not the end of the run
        if wp.poisons_context(e):
          raise
        record["error"] = wp.short_error(e)
        log(f"{shape.name} {pass_name}: n/a ({wp.short_error(e, 160)})")
        records.append(record)
        continue
      speedup = bf16["seconds"] / mxfp8["seconds"]
      record.update(bf16=bf16, mxfp8=mxfp8, speedup=speedup, check_rel_err=check,
                    check_ok=bool(check <= CHECK_TOLERANCE),
                    meets_target=bool(speedup >= record["target_speedup"] and check <= CHECK_TOLERANCE),
                    tflops_bf16=shape.flops() / bf16["seconds"] / 1e12,
                    tflops_mxfp8=shape.flops() / mxfp8["seconds"] / 1e12)
      records.append(record)
      log(f"{shape.name:>18} {pass_name:>5} [{record['backend']}]: BF16 "
          f"{bf16['seconds'] * 1e3:8.3f} ms  MXFP8 {mxfp8['seconds'] * 1e3:8.3f} ms  {speedup:5.2f}x (target "
          f"{record['target_speedup']:.1f}x)  check {check:.1e}")
  result = {"device": f"{device.platform}: {device.device_kind}", "jax": jax.__version__,
            "note": PATH_NOTE, "calls": calls, "runs": runs, "warmup_seconds": warmup_seconds,
            "records": records}
  table = markdown(result)
  wp.save_results(out_dir, "mxfp8_gemm_bench", result, table)
  log(table)
  return result


def markdown(result: dict) -> str:
  timed = [r for r in result["records"] if "error" not in r]
  met = sum(r["meets_target"] for r in timed)
  lines = [f"MXFP8 vs BF16 grouped GEMM, {result['device']}, jax {result['jax']}; median of "
           f"{result['runs']} runs of {result['calls']} calls, each measurement after "
           f"{result.get('warmup_seconds', 0):g} s of warm-up.", "", result["note"], "",
           f"Targets met: {met} of {len(timed)} timed entries"
           f"{'' if len(timed) == len(result['records']) else ' (some entries failed)'}.", "",
           "| shape | M, K, N, G | pass | bound | backend | BF16 ms | MXFP8 ms | BF16 TFLOP/s | "
           "MXFP8 TFLOP/s | speedup | target | met | check rel err |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in result["records"]:
    dims = ", ".join(map(str, r["dims"]))
    if "error" in r:
      lines.append(f"| {r['shape']} | {dims} | {r['pass_name']} | {r['bound']} | "
                   f"{r.get('backend', '')} | n/a: {r['error']} | | | | | | | |")
      continue
    lines.append(
        f"| {r['shape']} | {dims} | {r['pass_name']} | {r['bound']} | {r['backend']} | "
        f"{r['bf16']['seconds'] * 1e3:.3f} | {r['mxfp8']['seconds'] * 1e3:.3f} | "
        f"{r['tflops_bf16']:.0f} | {r['tflops_mxfp8']:.0f} | {r['speedup']:.2f}x | "
        f">= {r['target_speedup']:.1f}x | {'yes' if r['meets_target'] else 'no'} | "
        f"{r['check_rel_err']:.1e}{'' if r['check_ok'] else ' FAIL'} |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", required=True, help="directory for mxfp8_gemm_bench.{json,md}")
  parser.add_argument("--shapes", default=None,
                      help="comma-separated anchor names (default: all of tools/bench/shapes.py)")
  parser.add_argument("--passes", default=",".join(shapes_lib.PASSES),
                      help="comma-separated passes (default: fwd,dgrad,wgrad)")
  parser.add_argument("--calls", type=int, default=10, help="calls per timed run (>= 10)")
  parser.add_argument("--runs", type=int, default=20, help="timed runs, median reported (>= 20)")
  parser.add_argument("--warmup-seconds", type=float, default=wp.DEFAULT_WARMUP_SECONDS,
                      help="seconds each measurement runs back to back before it is timed, so "
                           "both sides run at the sustained power-limited clock (default "
                           f"{wp.DEFAULT_WARMUP_SECONDS:g})")
  args = parser.parse_args(argv)
  names = None if args.shapes is None else [s for s in args.shapes.split(",") if s]
  passes = [p for p in args.passes.split(",") if p]
  unknown = [p for p in passes if p not in shapes_lib.PASSES]
  if unknown:
    parser.error(f"--passes: unknown {unknown}; known: {', '.join(shapes_lib.PASSES)}")
  run(shapes_lib.by_name(names), passes, args.out, args.calls, args.runs,
      warmup_seconds=args.warmup_seconds)


if __name__ == "__main__":
  main()
