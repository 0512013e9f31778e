"""Where a persistent MXFP8 kernel's time goes, CTA by CTA: globaltimer stamps of each CTA of
the last two calls of the bench's loop.

Needs a diagnostic module: `git apply tools/device/mxfp8_cta_trace.patch && tools/build` (the
patch stamps ForEachDynamicJob and exports jgg_mxfp8_trace_read; revert it after). For each
row, times the bench's loop (mxfp8_bench.timer_and_copy), then reads, for the newest call:
the kernel's span (first CTA entry to last exit) and the gap since the previous call's last
exit (the loop's other work, the counter's memset, the launch), the medians of each CTA's
start (prefix sums built; first job indices fetched, since the static first two rounds the
same stamp as the prefix sums; first loads issued; first job done), and its end (the last
job's length, how long before the last exit the CTAs leave).
Run on the device: PYTHONPATH=python:tests:. python3 tools/device/mxfp8_cta_trace.py
"""

from __future__ import annotations

import ctypes

import numpy as np

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _jgg_native
from tools.bench import mxfp8_bench
from tools.bench import shapes as shapes_lib

ROWS = (("mixtral", "activation", "quantize_rowwise"), ("mixtral", "activation", "quantize_both"),
        ("mixtral", "activation", "dequantize"), ("qwen3-30b", "activation", "quantize_rowwise"),
        ("qwen3-30b", "activation", "dequantize"), ("mixtral", "weight", "quantize_rowwise"))
TRACE_CTAS, FIELDS = 2048, 8  # the patch's g_trace[2][kTraceCtas][kTraceFields]
ENTRY, PREFIX, FETCHED, ISSUED, FIRST_DONE, LAST_START, EXIT, PACKED = range(FIELDS)


def read_trace(lib):
  """The two parity buffers of stamps, each trimmed to the CTAs of the call that wrote it."""
  buf = np.zeros((2, TRACE_CTAS, FIELDS), np.uint64)
  if lib.jgg_mxfp8_trace_read(ctypes.c_void_p(buf.ctypes.data)) != 0:
    raise RuntimeError("jgg_mxfp8_trace_read failed")
  calls = []
  for stamps in buf.astype(np.int64):
    ctas = min(TRACE_CTAS, int((stamps[0, PACKED] >> 16) & 0xFFFF))  # CTA 0's grid size
    if ctas == 0:
      raise RuntimeError("no stamps: the kernel took its static jobs (no job counter)")
    calls.append(stamps[:ctas])
  return calls


def summary(stamps):
  """Microseconds from the call's first CTA entry (medians over CTAs)."""
  t0 = stamps[:, ENTRY].min()
  rel = (stamps[:, :PACKED] - t0) / 1e3
  exits = rel[:, EXIT]
  last = exits.max()
  jobs = stamps[:, PACKED] & 0xFFFF
  median = lambda v: float(np.median(v))
  return dict(t0=t0, t_end=int(stamps[:, EXIT].max()), ctas=len(stamps), span=last,
              entry_spread=rel[:, ENTRY].max(), prefix=median(rel[:, PREFIX]),
              fetched=median(rel[:, FETCHED]), issued=median(rel[:, ISSUED]),
              first_done=median(rel[:, FIRST_DONE]), last_job=median(exits - rel[:, LAST_START]),
              exits_before_last=[float(last - np.percentile(exits, q)) for q in (90, 50, 10)],
              idle_at_end=float(np.mean(last - exits)), jobs=(int(jobs.min()), int(jobs.max())))


def main():
  lib = ctypes.CDLL(_jgg_native.__file__)  # the module already loaded: the same handle
  if not hasattr(lib, "jgg_mxfp8_trace_read"):
    raise SystemExit("this module has no trace: build it with tools/device/mxfp8_cta_trace.patch")
  timer, copy = mxfp8_bench.timer_and_copy(calls=30, runs=7)
  print(f"device copy {copy['gb_per_s']:.0f} GB/s", flush=True)
  for name, tensor, op in ROWS:
    shape = shapes_lib.by_name([name])[0]
    x, sizes = mxfp8_bench._operands(shape, tensor)
    reference = jgg.mxfp8.quantize(x, sizes)
    fn, operands, moved = mxfp8_bench._call(op, x, sizes, reference)
    for _ in range(2):
      seconds = timer(fn, operands)["seconds"]
      older, newer = sorted((summary(s) for s in read_trace(lib)), key=lambda s: s["t0"])
      s = newer
      print(f"{name} {tensor} {op}: {seconds * 1e6:.1f} us per call "
            f"({moved / seconds / 1e9 / copy['gb_per_s'] * 100:.1f}% of copy); kernel span "
            f"{s['span']:.2f} us, gap before it {(s['t0'] - older['t_end']) / 1e3:.2f} us", flush=True)
      print(f"  start (medians): prefix sums {s['prefix']:.2f}, first indices {s['fetched']:.2f}, "
            f"first loads {s['issued']:.2f}, first job done {s['first_done']:.2f} us "
            f"(entries within {s['entry_spread']:.2f}) | end: last job {s['last_job']:.2f} us, "
            "exits before the last (p90/p50/p10) "
            + "/".join(f"{v:.2f}" for v in s["exits_before_last"])
            + f", mean idle {s['idle_at_end']:.2f} us | jobs per CTA {s['jobs']}, {s['ctas']} CTAs",
            flush=True)
    del x, sizes, reference, operands


if __name__ == "__main__":
  main()
