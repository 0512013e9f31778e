"""What the benchmark command and its worker processes exchange.

The command writes a plan (JSON): the shapes, passes, competitors, repeat
counts and the task keys to skip. A worker appends one JSON line per event to
its records file, flushed at once: {"event": "start", "key"} before a
measurement and {"event": "result", "key", ...} after it. A worker that dies
or hangs inside a measurement leaves a start without a result: the command
records that measurement as failed and starts a new worker past it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
import traceback
from typing import Any

from tools.bench.shapes import GroupedGemmShape

# Every competitor, and the worker that times it.
WORKER_OF = {
    "ours": "jax",  # jax_grouped_gemm.ragged_dot_general
    "lax": "jax",  # jax.lax.ragged_dot_general
    "pallas": "jax",  # jax 0.11.2's ragged_dot_mgpu / transposed_ragged_dot_mgpu
    "dense_jax": "jax",  # jnp.dot of the same FLOPs (cuBLAS): the compute ceiling
    "copy_jax": "jax",  # a streaming x + 1 over a large buffer: the bandwidth ceiling
    "torch": "torch",  # torch._grouped_mm
    "dense_torch": "torch",  # torch.mm of the same FLOPs
    "copy_torch": "torch",  # Tensor.copy_ between two large buffers
}
COMPETITORS = tuple(WORKER_OF)
# Every timed run lasts at least this long (calls are repeated to reach it), so the host's
# dispatch, wait and first-launch latency stay well under 1% of it. JAX runs are timed on the
# host clock and torch's by CUDA events, which leave the host's wake-up out: 30-150 us a run
# that 10 ms runs charged to JAX alone at 0.3-1.5% (benchmark audit, 2026-11-27); 50 ms runs
# make it 0.1-0.3%.
MIN_RUN_SECONDS = 0.05
# The GEMM benches' warm-up per measurement (Plan.warmup_seconds): the H100's clock settles
# at its power limit about a second into a large GEMM's back-to-back runs.
DEFAULT_WARMUP_SECONDS = 1.5
COPY_SHAPE = "copy"  # task key shape of the bandwidth measurements (no GEMM shape)
COPY_PASS = "-"
# Test seam: a worker whose environment names a task key here dies (os._exit) as
# that measurement starts, as it would on a device-side assert.
CRASH_AT_ENV = "JGG_BENCH_CRASH_AT"
CRASH_EXIT_CODE = 86
# A worker exits with this after recording an error that leaves the CUDA context
# unusable (every later call would fail too): the command starts a fresh one.
POISONED_EXIT_CODE = 87
_POISONING_ERRORS = ("illegal memory access", "illegal address", "device-side assert",
                     "unspecified launch failure", "misaligned address", "illegal instruction",
                     "cuda_error_launch_failed", "cuda_error_illegal")


def task_key(shape_name: str, pass_name: str, competitor: str) -> str:
  return f"{shape_name}|{pass_name}|{competitor}"


def split_key(key: str) -> tuple[str, str, str]:
  shape_name, pass_name, competitor = key.split("|")
  return shape_name, pass_name, competitor


@dataclasses.dataclass
class Plan:
  shapes: list[GroupedGemmShape]
  passes: list[str]
  competitors: list[str]
  calls: int = 10  # calls per timed run (one jitted loop, one event pair)
  runs: int = 20  # timed runs; the median is reported
  min_runs: int = 3  # runs are cut to no fewer than this ...
  run_budget_s: float = 2.0  # ... only where `runs` runs would take longer than this
  check: bool = False
  copy_bytes: int = 4 << 30
  pallas_configs: int = 3
  # Seconds each measurement runs back to back before its timed runs. Large GEMMs hold the
  # GPU at its power limit, and for about a second after an idle spell the clock runs
  # higher than the limit sustains (docs/PERFORMANCE.md, 2026-11-27 nineteenth session);
  # timing after the warm-up measures every competitor at the sustained rate of a training
  # step instead of wherever in that transient its runs happen to fall. 0: no warm-up.
  warmup_seconds: float = 0.0
  skip: list[str] = dataclasses.field(default_factory=list)

  def to_json(self) -> str:
    data = dataclasses.asdict(self)
    return json.dumps(data)

  @classmethod
  def from_json(cls, text: str) -> "Plan":
    data = json.loads(text)
    data["shapes"] = [GroupedGemmShape(**s) for s in data["shapes"]]
    return cls(**data)

  def tasks(self, worker: str) -> list[str]:
    """Keys of every measurement of `worker` in this plan, skipped ones included."""
    mine = [c for c in self.competitors if WORKER_OF[c] == worker]
    keys = [task_key(COPY_SHAPE, COPY_PASS, c) for c in mine if c.startswith("copy")]
    gemm = [c for c in mine if not c.startswith("copy")]
    keys += [task_key(s.name, p, c) for s in self.shapes for p in self.passes for c in gemm]
    return keys


class RecordWriter:
  """Appends events to the records file, one flushed JSON line each."""

  def __init__(self, path: str):
    self._file = open(path, "a", encoding="utf-8")

  def write(self, event: str, **fields: Any) -> None:
    fields = {"event": event, "time": time.time(), **fields}
    self._file.write(json.dumps(fields) + "\n")
    self._file.flush()

  def start(self, key: str) -> None:
    self.write("start", key=key)
    if os.environ.get(CRASH_AT_ENV) == key:
      os._exit(CRASH_EXIT_CODE)

  def result(self, key: str, **fields: Any) -> None:
    self.write("result", key=key, **fields)


def worker_main(run_plan, description: str) -> None:
  """A worker's command line: --plan FILE (a Plan as JSON) --records FILE (appended to)."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--plan", required=True)
  parser.add_argument("--records", required=True)
  args = parser.parse_args()
  with open(args.plan, encoding="utf-8") as f:
    plan = Plan.from_json(f.read())
  run_plan(plan, RecordWriter(args.records))


def read_records(path: str) -> list[dict]:
  records = []
  try:
    with open(path, encoding="utf-8") as f:
      for line in f:
        line = line.strip()
        if line:
          try:
            records.append(json.loads(line))
          except json.JSONDecodeError:
            pass  # a line cut short by a killed worker
  except FileNotFoundError:
    pass
  return records


def save_results(out_dir: str, name: str, result: dict, table: str) -> None:
  """Writes a benchmark's raw result as out_dir/name.json and its table as out_dir/name.md."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, f"{name}.json"), "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1)
  with open(os.path.join(out_dir, f"{name}.md"), "w", encoding="utf-8") as f:
    f.write(table)


def timing_fields(per_call_seconds: list[float], calls: int) -> dict:
  """Median (what is reported), min and max seconds per call over the runs."""
  return {
      "seconds": statistics.median(per_call_seconds),
      "min_seconds": min(per_call_seconds),
      "max_seconds": max(per_call_seconds),
      "runs": len(per_call_seconds),
      "calls": calls,
  }


def sustain(plan: Plan, run_and_wait) -> None:
  """Calls run_and_wait() (one timed run's work, waited for) until plan.warmup_seconds pass."""
  deadline = time.perf_counter() + plan.warmup_seconds
  while time.perf_counter() < deadline:
    run_and_wait()


def runs_within_budget(plan: Plan, first_run_seconds: float) -> int:
  """`plan.runs`, cut where they would take longer than the budget (slow competitors)."""
  if first_run_seconds * plan.runs <= plan.run_budget_s:
    return plan.runs
  return max(plan.min_runs, min(plan.runs, int(plan.run_budget_s / max(first_run_seconds, 1e-9))))


def poisons_context(exc: BaseException) -> bool:
  """Whether the error is a kernel fault after which the process's CUDA context is lost."""
  text = str(exc).lower()
  return any(pattern in text for pattern in _POISONING_ERRORS)


def exit_if_poisoned(exc: BaseException) -> None:
  if poisons_context(exc):
    os._exit(POISONED_EXIT_CODE)


def short_error(exc: BaseException, limit: int = 300) -> str:
  """The exception's type and first meaningful line, short enough for a table note."""
  lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
  if lines:
    text = f"{type(exc).__name__}: {lines[0]}"
  else:  # a bare exception: say where it was raised instead
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    text = f"{type(exc).__name__} (no message){where}"
  return text if len(text) <= limit else text[:limit - 3] + "..."
