"""Grouped GEMM benchmark: ours against torch._grouped_mm, Pallas, jax.lax and dense cuBLAS.

Run on the GPU machine from the repository root:

  PYTHONPATH=python python3 -m tools.bench.grouped_gemm_bench --out bench_results --check

For each shape of tools/bench/shapes.py and each pass (fwd, dgrad, wgrad) it
times every competitor and writes results.json, results.md and chart.png to
--out; the Markdown table is printed last. The default run took
257 s on an H200 (2026-11-22, with --check): ~75 s of timed GPU work (jax.lax,
densified over all groups, is a third of it: its runs are cut to fit a 2 s
budget each), the rest compiling and starting workers. --pallas-configs 5
widens the Pallas sweep; --shapes and --passes narrow the run. TFLOP/s count 2 * sum(group_sizes)
* K * N per pass; the dense ceiling of a row is the faster of jnp.dot and
torch.mm on the same FLOPs and layouts, the bandwidth ceiling the faster of
two large device copies (bytes read + written). Each measurement first runs
back to back for --warmup-seconds (1.5 by default), so every competitor is timed
at the sustained clock of the GPU's power limit, not in the faster first second
after an idle spell (the default run grew by about that much per measurement).

The competitors run in worker processes, torch's first, then JAX's, one at a
time (each gets the whole GPU memory and frees it on exit). A worker that
crashes, hangs or loses its CUDA context (a device-side assert, an illegal
address, a deadlock) costs only the measurement in flight: it is reported n/a
with the reason and a new worker carries on past it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.bench import report
from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPETITOR_ALIASES = {"dense": ("dense_jax", "dense_torch"), "copy": ("copy_jax", "copy_torch")}
WORKERS = ("torch", "jax")  # torch first: it is quick, and its numbers are the targets
MAX_WORKER_RESTARTS = 6
# torch compiles nothing, so a torch measurement silent this long has hung (a
# known failure mode of grouped GEMMs with empty groups); JAX's get --task-timeout.
TORCH_TIMEOUT_SECONDS = 90.0
POLL_SECONDS = 0.5


def main(argv=None):
  args = _parse_args(argv)
  command = "PYTHONPATH=python python3 -m tools.bench.grouped_gemm_bench " + " ".join(
      shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
  markdown = run_benchmark(
      shapes=shapes_lib.by_name(args.shapes),
      passes=args.passes,
      competitors=args.competitors,
      out_dir=args.out,
      quick=args.quick,
      check=args.check,
      copy_gib=args.copy_gib,
      pallas_configs=args.pallas_configs,
      calls=args.calls,
      runs=args.runs,
      warmup_seconds=args.warmup_seconds,
      task_timeout_s=args.task_timeout,
      command=command)
  print(markdown)


def run_benchmark(shapes, passes=shapes_lib.PASSES, competitors=wp.COMPETITORS,
                  out_dir="bench_results", quick=False, check=False, copy_gib=4.0,
                  pallas_configs=None, calls=None, runs=None, warmup_seconds=None,
                  task_timeout_s=300.0, command="", python=sys.executable) -> str:
  """Runs the workers, writes results.json / results.md / chart.png; returns the Markdown."""
  out_dir = Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  plan = wp.Plan(
      shapes=list(shapes), passes=list(passes), competitors=list(competitors),
      calls=calls or (2 if quick else 10), runs=runs or (3 if quick else 20),
      min_runs=3 if not quick else 2, check=check, copy_bytes=int(copy_gib * (1 << 30)),
      pallas_configs=pallas_configs or (1 if quick else 3),
      warmup_seconds=(0.0 if quick else wp.DEFAULT_WARMUP_SECONDS) if warmup_seconds is None
      else warmup_seconds)
  started = datetime.datetime.now(datetime.timezone.utc)
  results, devices, markdown = {}, [], ""
  for framework in WORKERS:
    if not plan.tasks(framework):
      continue
    print(f"== {framework} competitors", flush=True)
    timeout = min(task_timeout_s, TORCH_TIMEOUT_SECONDS) if framework == "torch" else task_timeout_s
    worker_results, worker_devices = run_worker(framework, plan, out_dir, timeout, python)
    results.update(worker_results)
    devices += worker_devices
    # Written after each worker, so a run cut short still leaves its results.
    elapsed = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    summary = report.build(plan, results, devices, command=command, started=started,
                           wall_seconds=elapsed)
    markdown = report.write_all(summary, out_dir)
  return markdown


def run_worker(framework, plan, out_dir, task_timeout_s, python=sys.executable):
  """Runs one framework's worker until each of its tasks has a result (or an error).

  The worker's stderr goes to OUT/worker_FRAMEWORK.log and its records to
  OUT/records_FRAMEWORK.jsonl (raw, as measured: what a run cut short leaves);
  its plan lives in a temporary folder.
  """
  keys = plan.tasks(framework)
  log_path = Path(out_dir) / f"worker_{framework}.log"
  records_path = Path(out_dir) / f"records_{framework}.jsonl"
  for path in (log_path, records_path):
    path.unlink(missing_ok=True)
  with tempfile.TemporaryDirectory(prefix=f"bench_{framework}_") as scratch:
    plan_path = Path(scratch) / "plan.json"
    results, devices, seen, restarts = {}, [], 0, 0
    while any(k not in results for k in keys):
      done = [k for k in keys if k in results]
      plan_path.write_text(dataclasses.replace(plan, skip=done).to_json())
      returncode, hung = _run_watched(framework, plan_path, records_path, log_path,
                                      task_timeout_s, python)
      records = wp.read_records(str(records_path))
      in_flight = None
      for record in records[seen:]:
        if record["event"] == "device":
          devices.append(record)
        elif record["event"] == "start":
          in_flight = record["key"]
        elif record["event"] == "result":
          results[record["key"]] = record
          if record["key"] == in_flight:
            in_flight = None
      seen = len(records)
      if returncode == 0 and not hung:
        for key in keys:
          results.setdefault(key, {"error": "the worker ended without measuring this"})
        break
      reason = (f"hung: no progress for {task_timeout_s:.0f} s" if hung else
                f"worker exited with code {returncode}: {_last_line(log_path)}")
      print(f"[{framework}] worker failed ({reason}); in flight: {in_flight}", flush=True)
      restarts += 1
      if in_flight is not None:
        results[in_flight] = {"error": reason}
      elif returncode != wp.POISONED_EXIT_CODE:  # it failed outside any measurement: give up
        restarts = MAX_WORKER_RESTARTS + 1
      if restarts > MAX_WORKER_RESTARTS:
        for key in keys:
          results.setdefault(key, {"error": reason})
        break
  return results, devices


def _run_watched(framework, plan_path, records_path, log_path, task_timeout_s, python):
  """Runs the worker; kills its process group if the records file stops growing."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [str(REPO_ROOT), str(REPO_ROOT / "python")] + [p for p in [env.get("PYTHONPATH")] if p])
  env["JGG_POISON_OUTPUTS"] = "0"  # the test seam's extra fill would be timed too
  if framework == "jax":
    # Alone on the GPU: more than jax's default 75%, for jax.lax's densified operands.
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.85")
  command = [python, "-m", f"tools.bench.{framework}_competitors", "--plan", str(plan_path),
             "--records", str(records_path)]
  with open(log_path, "a", encoding="utf-8") as log:
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=None, stderr=log,
                               start_new_session=True)
    launched = time.time()
    while process.poll() is None:
      time.sleep(POLL_SECONDS)
      last_progress = max(launched, _mtime(records_path))
      if time.time() - last_progress > task_timeout_s:
        os.killpg(process.pid, signal.SIGKILL)  # the group this call started
        process.wait()
        return process.returncode, True
  return process.returncode, False


def _mtime(path) -> float:
  try:
    return os.path.getmtime(path)
  except FileNotFoundError:
    return 0.0


def _last_line(log_path) -> str:
  try:
    text = Path(log_path).read_text(errors="replace")
  except FileNotFoundError:
    return "(no log)"
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  return lines[-1][:300] if lines else "(empty log)"


def _comma_list(text: str, known, aliases=None):
  names = []
  for name in (n.strip() for n in text.split(",") if n.strip()):
    names += (aliases or {}).get(name, (name,))
  unknown = [n for n in names if n not in known]
  if unknown:
    raise argparse.ArgumentTypeError(f"unknown {unknown}; known: {', '.join(known)}")
  return list(dict.fromkeys(names))


def _parse_args(argv):
  shape_names = [s.name for s in shapes_lib.ANCHOR_SHAPES]
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", type=lambda t: _comma_list(t, shape_names), default=None,
                      help=f"comma-separated names (default all): {', '.join(shape_names)}")
  parser.add_argument("--passes", type=lambda t: _comma_list(t, shapes_lib.PASSES),
                      default=list(shapes_lib.PASSES), help="default fwd,dgrad,wgrad")
  parser.add_argument("--competitors",
                      type=lambda t: _comma_list(t, wp.COMPETITORS, COMPETITOR_ALIASES),
                      default=list(wp.COMPETITORS),
                      help=f"default all: {', '.join(wp.COMPETITORS)} (dense, copy: both "
                           "frameworks')")
  parser.add_argument("--out", default="bench_results",
                      help="directory for results.json, results.md, chart.png, worker logs and "
                           "raw records")
  parser.add_argument("--quick", action="store_true",
                      help="smoke test: 2 calls x 3 runs, one Pallas config")
  parser.add_argument("--check", action="store_true",
                      help="check ours against jax.lax on a sample of each output before timing")
  parser.add_argument("--copy-gib", type=float, default=4.0,
                      help="buffer size of the bandwidth ceiling's copy (GiB, default 4)")
  parser.add_argument("--pallas-configs", type=int, default=None,
                      help="Pallas block configs tried per pass (default 3, at most 5; "
                           "--quick 1)")
  parser.add_argument("--calls", type=int, default=None, help="calls per timed run (default 10)")
  parser.add_argument("--runs", type=int, default=None, help="timed runs (default 20)")
  parser.add_argument("--warmup-seconds", type=float, default=None,
                      help=f"seconds each measurement runs back to back before it is timed "
                           f"(default {wp.DEFAULT_WARMUP_SECONDS:g}, --quick 0; 0 times the "
                           "first second after an idle spell, above the sustained rate)")
  parser.add_argument("--task-timeout", type=float, default=300.0,
                      help="seconds without progress before a worker is taken as hung")
  args = parser.parse_args(argv)
  if (args.calls or 10) < 1 or (args.runs or 20) < 1:
    parser.error("--calls and --runs must be positive")
  if args.warmup_seconds is not None and args.warmup_seconds < 0:
    parser.error("--warmup-seconds must not be negative")
  return args


if __name__ == "__main__":
  main()
