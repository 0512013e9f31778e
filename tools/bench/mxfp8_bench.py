"""Achieved bandwidth of jgg.mxfp8 quantize / dequantize on the anchor shapes, vs a device copy.

Run on the GPU machine from the repository root:

  PYTHONPATH=python python3 -m tools.bench.mxfp8_bench --out build/mxfp8_bench

For every anchor shape of tools/bench/shapes.py (M, K, N, G; uniform and Zipf routing):
  activation  x [M, K] bf16, grouped by expert (varying first dim, the routing's device
              group sizes): quantize rowwise (forward), colwise (wgrad: 32x1 blocks along
              the ragged token dim), both in one pass; dequantize (rowwise data -> bf16)
  weight      w [G, K, N] bf16, a stack (same dims): the same four ops
Bytes moved = input read + outputs written (data and the whole scale buffer); GB/s = bytes /
median time per call; "% copy" against a device copy (x + 1 over uint32, read + write)
timed in the same run, and against the same copy over this call's bytes ("% of same-bytes
copy": what any one-kernel op of that size reaches in this loop, whose iterations cost a few
microseconds each: see tools/device/mxfp8_timeline.py). Timing: jax_loop.LoopTimer (jitted fori_loops of --calls calls, the
compiled loop read for hoisting and copies, --runs >= 20 timed runs, the median). SPEC target:
>= 85% of the copy bandwidth. Writes mxfp8_bench.json and mxfp8_bench.md to --out.

Memory check of the same kernels (small shapes, every layout):
  compute-sanitizer --tool memcheck python3 -m pytest -q tests/test_mxfp8_cuda.py -k odd_columns
"""

from __future__ import annotations

import argparse

from tools.bench import jax_competitors, jax_loop
from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp

OPS = ("quantize_rowwise", "quantize_colwise", "quantize_both", "dequantize")
TENSORS = ("activation", "weight")
TARGET_FRACTION = 0.85


def _operands(shape: shapes_lib.GroupedGemmShape, tensor: str):
  import jax
  import jax.numpy as jnp

  m, k, n, g = shape.dims
  key = jax.random.key(sum(shape.dims))
  if tensor == "activation":
    x = jax.random.normal(key, (m, k), jnp.bfloat16)
    return x, jnp.asarray(shape.group_sizes(), jnp.int32)
  return jax.random.normal(key, (g, k, n), jnp.bfloat16), None


def _function(op: str, grouped: bool):
  """fn(*operands) -> one array, for the loop timer (the call writes all of its outputs)."""
  import jax.numpy as jnp
  import jax_grouped_gemm as jgg

  mx = jgg.mxfp8
  if op == "dequantize":
    layout = "varying_first" if grouped else "same_dims"

    def dequantize(data, scale_inv, *sizes):
      q = mx.MXFP8Tensor(data, scale_inv, None, None, sizes[0] if sizes else None, layout,
                         "compact")
      return mx.dequantize(q, jnp.bfloat16)
    return dequantize
  rowwise, colwise = {"quantize_rowwise": (True, False), "quantize_colwise": (False, True),
                      "quantize_both": (True, True)}[op]

  def quantize(x, *sizes):
    q = mx.quantize(x, sizes[0] if sizes else None, rowwise=rowwise, colwise=colwise)
    return q.data if rowwise else q.colwise_data
  return quantize


def _bytes_moved(op: str, x, scale_bytes: int) -> int:
  elements = x.size
  if op == "dequantize":
    return elements * 1 + scale_bytes + elements * 2
  outputs = 2 if op == "quantize_both" else 1
  return elements * x.dtype.itemsize + outputs * (elements + scale_bytes)


def _call(op: str, x, sizes, reference):
  """(fn, operands, bytes moved) of one op on x; reference is x quantized (dequantize's input)."""
  extra = () if sizes is None else (sizes,)
  operands = ((reference.data, reference.scale_inv) if op == "dequantize" else (x,)) + extra
  return _function(op, sizes is not None), operands, _bytes_moved(op, x, reference.scale_inv.size)


def timer_and_copy(calls: int, runs: int, copy_bytes: int = 1 << 30,
                   warmup_seconds: float = 0.0):
  """The bench's loop timer (median of `runs` timed loops of `calls` calls) and the device copy
  it measures over copy_bytes (the fields of jax_competitors._time_copy, plus gb_per_s): what
  the bench and the probes beside it (tools/device/mxfp8_*_probe.py) time against."""
  plan = wp.Plan(shapes=[], passes=[], competitors=[], calls=calls, runs=runs, min_runs=runs,
                 run_budget_s=float("inf"), copy_bytes=copy_bytes, warmup_seconds=warmup_seconds)
  timer = jax_loop.LoopTimer(plan)
  copy = jax_competitors._time_copy(timer, plan.copy_bytes)
  return timer, {**copy, "gb_per_s": copy["bytes_moved"] / copy["seconds"] / 1e9}


def same_bytes_copy_seconds(timer, moved: int, cache: dict) -> float:
  """Seconds per call of x + 1 over moved // 2 bytes (it reads and writes them: `moved` bytes
  in all) in the timer's loop, timed once per size in `cache` (bytes moved -> seconds)."""
  if moved not in cache:
    cache[moved] = jax_competitors._time_copy(timer, moved // 2)["seconds"]
  return cache[moved]


def run(shapes, out_dir: str, calls: int, runs: int, copy_gib: float,
        warmup_seconds: float = wp.DEFAULT_WARMUP_SECONDS, ops=OPS,
        tensors=TENSORS) -> list[dict]:
  import jax
  import jax_grouped_gemm as jgg

  timer, copy = timer_and_copy(calls, runs, int(copy_gib * (1 << 30)), warmup_seconds)
  device = jax.devices()[0]
  copy_gbs = copy["gb_per_s"]
  print(f"device copy: {copy_gbs:.0f} GB/s ({copy['copy_method']})", flush=True)
  records = []
  same_bytes_copy = {}  # same_bytes_copy_seconds' cache
  done_weights = set()
  for shape in shapes:
    for tensor in tensors:
      if tensor == "weight" and shape.dims in done_weights:
        continue  # routing variants share the weights
      done_weights.add(shape.dims) if tensor == "weight" else None
      x, sizes = _operands(shape, tensor)
      reference = jgg.mxfp8.quantize(x, sizes)
      for op in ops:
        fn, operands, moved = _call(op, x, sizes, reference)
        try:
          fields = timer(fn, operands)
        except Exception as e:  # a failed entry is a row, not the end of the run
          records.append(dict(shape=shape.name, tensor=tensor, op=op, error=wp.short_error(e)))
          print(f"{shape.name} {tensor} {op}: n/a ({wp.short_error(e, 160)})", flush=True)
          continue
        gbs = moved / fields["seconds"] / 1e9
        same = same_bytes_copy_seconds(timer, moved, same_bytes_copy)
        record = dict(shape=shape.name, tensor=tensor, op=op, dims=list(x.shape),
                      groups=None if sizes is None else int(sizes.shape[0]), bytes_moved=moved,
                      gb_per_s=gbs, fraction_of_copy=gbs / copy_gbs,
                      same_bytes_copy_seconds=same, fraction_of_same_bytes_copy=same / fields["seconds"],
                      **fields)
        records.append(record)
        print(f"{shape.name:>16} {tensor:>10} {op:>17}: {fields['seconds'] * 1e6:9.1f} us "
              f"{gbs:7.0f} GB/s {100 * gbs / copy_gbs:5.1f}% of copy "
              f"({100 * same / fields['seconds']:5.1f}% of a copy of the same bytes)", flush=True)
      del x, sizes, reference
  result = {"device": f"{device.platform}: {device.device_kind}", "jax": jax.__version__,
            "copy": copy, "target_fraction_of_copy": TARGET_FRACTION,
            "records": records}
  table = markdown(result)
  wp.save_results(out_dir, "mxfp8_bench", result, table)
  print(table)
  return records


def markdown(result: dict) -> str:
  lines = [f"MXFP8 quantize / dequantize, {result['device']}, jax {result['jax']}: device copy "
           f"{result['copy']['gb_per_s']:.0f} GB/s; target >= "
           f"{100 * result['target_fraction_of_copy']:.0f}% of copy (bytes read + written).", "",
           "| shape | tensor | dims | op | us/call | GB/s | % of copy | % of same-bytes copy | target |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in result["records"]:
    if "error" in r:
      lines.append(f"| {r['shape']} | {r['tensor']} | | {r['op']} | n/a: {r['error']} | | | | |")
      continue
    dims = "x".join(map(str, r["dims"])) + (f", G={r['groups']}" if r["groups"] else "")
    ok = "yes" if r["fraction_of_copy"] >= result["target_fraction_of_copy"] else "no"
    lines.append(f"| {r['shape']} | {r['tensor']} | {dims} | {r['op']} | "
                 f"{r['seconds'] * 1e6:.1f} | {r['gb_per_s']:.0f} | "
                 f"{100 * r['fraction_of_copy']:.1f} | "
                 f"{100 * r['fraction_of_same_bytes_copy']:.1f} | {ok} |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", required=True, help="directory for mxfp8_bench.{json,md}")
  parser.add_argument("--shapes", default=None,
                      help="comma-separated anchor names (default: all of tools/bench/shapes.py)")
  parser.add_argument("--ops", default=",".join(OPS),
                      help=f"comma-separated ops to time (default: all of {', '.join(OPS)})")
  parser.add_argument("--tensors", default=",".join(TENSORS),
                      help=f"comma-separated tensors to time (default: {', '.join(TENSORS)})")
  parser.add_argument("--calls", type=int, default=10, help="calls per timed run (>= 10)")
  parser.add_argument("--runs", type=int, default=20, help="timed runs, median reported (>= 20)")
  parser.add_argument("--copy-gib", type=float, default=4.0, help="copy buffer size (GiB)")
  args = parser.parse_args(argv)
  names = None if args.shapes is None else [s for s in args.shapes.split(",") if s]

  def chosen(flag, value, known):
    """The comma-separated names of `flag`, each one of `known`."""
    picked = [v for v in value.split(",") if v]
    unknown = [v for v in picked if v not in known]
    if unknown:
      parser.error(f"{flag}: unknown {unknown}; known: {', '.join(known)}")
    return picked

  run(shapes_lib.by_name(names), args.out, args.calls, args.runs, args.copy_gib,
      ops=chosen("--ops", args.ops, OPS), tensors=chosen("--tensors", args.tensors, TENSORS))


if __name__ == "__main__":
  main()
