"""Worker: times the torch competitors of a benchmark plan (see worker_protocol).

  python -m tools.bench.torch_competitors --plan PLAN.json --records RECORDS.jsonl

torch._grouped_mm (CUTLASS on sm90, bf16 in and out, f32 accumulation):
  fwd    _grouped_mm(x [M, K], w [G, K, N], offs)                -> [M, N]
  dgrad  _grouped_mm(dy [M, N], w.transpose(-2, -1), offs)       -> [M, K]  (w read in place)
  wgrad  _grouped_mm(x.t() [K, M], dy [M, N], offs)              -> [G, K, N]
with offs the int32 cumulative group ends on the device. torch.mm of the same
FLOPs is the dense ceiling, Tensor.copy_ the bandwidth one. Each timed run is
`calls` calls between two CUDA events; the median per call is reported.
Runs in its own process: a device-side assert poisons the CUDA context, and
the command then restarts this worker past the measurement that raised it.
"""

from __future__ import annotations

import functools
import gc
import math

import numpy as np

from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp

FWD, DGRAD, WGRAD = shapes_lib.PASSES
WARMUP_CALLS = 3


def run_plan(plan: wp.Plan, writer: wp.RecordWriter) -> None:
  todo = [k for k in plan.tasks("torch") if k not in set(plan.skip)]
  if not todo:
    return
  try:
    import torch
    if not torch.cuda.is_available():
      raise RuntimeError("torch sees no CUDA device")
  except Exception as e:  # no torch here (CI, this project's venv): every entry n/a
    for key in todo:
      writer.result(key, error=wp.short_error(e))
    return
  writer.write("device", framework="torch", device=torch.cuda.get_device_name(),
               versions={"torch": torch.__version__, "cuda": torch.version.cuda})
  timer = EventTimer(plan)
  copy_key = wp.task_key(wp.COPY_SHAPE, wp.COPY_PASS, "copy_torch")
  if copy_key in todo:
    _attempt(writer, copy_key, lambda: _time_copy(timer, plan.copy_bytes))
    torch.cuda.empty_cache()  # the copy's buffers, before the GEMM operands
  by_dims: dict[tuple, list] = {}
  for s in plan.shapes:
    by_dims.setdefault(s.dims, []).append(s)
  for dims, variants in by_dims.items():
    keys = {wp.task_key(s.name, p, c) for s in variants for p in plan.passes
            for c in ("torch", "dense_torch")}
    if not keys & set(todo):
      continue
    print(f"[torch] {'/'.join(s.name for s in variants)}", flush=True)
    try:
      operands = _random_operands(dims)
    except Exception as e:  # out of memory, say: this shape's entries are n/a
      for key in sorted(keys & set(todo)):
        writer.result(key, error="operands: " + wp.short_error(e))
      continue
    for pass_name in plan.passes:
      if "torch" in plan.competitors:
        for shape in variants:
          key = wp.task_key(shape.name, pass_name, "torch")
          if key in todo:
            offs = torch.as_tensor(np.cumsum(shape.group_sizes()), dtype=torch.int32,
                                   device="cuda")
            call = _grouped_mm_call(pass_name, operands, offs)
            _attempt(writer, key, functools.partial(timer, call))
      if "dense_torch" in plan.competitors:
        _time_dense_once(writer, timer, todo, pass_name, variants, operands)
    del operands
    gc.collect()
    torch.cuda.empty_cache()


class EventTimer:
  """Median seconds per call of `call()` over runs of calls between two CUDA events.

  A run is plan.calls calls, repeated until it lasts wp.MIN_RUN_SECONDS, so the
  host's latency before the first kernel of a run stays well under 1%.
  """

  def __init__(self, plan: wp.Plan):
    self.plan = plan

  def __call__(self, call) -> dict:
    import torch

    for _ in range(WARMUP_CALLS):
      call()
    torch.cuda.synchronize()
    one_run = self._time(call, self.plan.calls)
    calls = self.plan.calls * max(1, math.ceil(wp.MIN_RUN_SECONDS / max(one_run, 1e-9)))
    wanted = wp.runs_within_budget(self.plan, one_run * calls / self.plan.calls)
    wp.sustain(self.plan, lambda: self._time(call, calls))
    per_call = [self._time(call, calls) / calls for _ in range(wanted)]
    return wp.timing_fields(per_call, calls)

  @staticmethod
  def _time(call, calls) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
      call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _attempt(writer, key, measure) -> None:
  writer.start(key)
  try:
    fields = measure()
  except Exception as e:
    print(f"[torch] {key}: n/a ({wp.short_error(e, 160)})", flush=True)
    writer.result(key, error=wp.short_error(e))
    wp.exit_if_poisoned(e)
  else:
    print(f"[torch] {key}: {fields['seconds'] * 1e3:.3f} ms/call", flush=True)
    writer.result(key, **fields)


def _random_operands(dims) -> dict:
  import torch

  m, k, n, g = dims
  generator = torch.Generator(device="cuda").manual_seed(sum(dims))
  normal = lambda *shape: torch.randn(*shape, generator=generator, device="cuda",
                                      dtype=torch.bfloat16)
  w = normal(g, k, n)
  return {"x": normal(m, k), "w": w, "dy": normal(m, n), "w0": w[0].clone()}


def _grouped_mm_call(pass_name, operands, offs):
  import torch

  x, w, dy = operands["x"], operands["w"], operands["dy"]
  lhs, rhs = {FWD: (x, w), DGRAD: (dy, w.transpose(-2, -1)), WGRAD: (x.t(), dy)}[pass_name]
  return lambda: torch._grouped_mm(lhs, rhs, offs=offs)


def _dense_operands(operands, pass_name):
  """(lhs, rhs) of torch.mm with the pass's FLOPs and operand layouts (w0: one expert)."""
  x, dy, w0 = operands["x"], operands["dy"], operands["w0"]
  return {FWD: (x, w0), DGRAD: (dy, w0.t()), WGRAD: (x.t(), dy)}[pass_name]


def _time_dense_once(writer, timer, todo, pass_name, variants, operands):
  """torch.mm with the pass's FLOPs and layouts; routing does not change it: timed once."""
  import torch

  keys = [wp.task_key(s.name, pass_name, "dense_torch") for s in variants]
  keys = [k for k in keys if k in todo]
  if not keys:
    return
  lhs, rhs = _dense_operands(operands, pass_name)
  writer.start(keys[0])
  try:
    fields = timer(lambda: torch.mm(lhs, rhs))
  except Exception as e:
    fields, error = {"error": wp.short_error(e)}, e
  else:
    error = None
  for key in keys:
    writer.result(key, **fields, **({} if key == keys[0] else {"reused_from": keys[0]}))
  if error is not None:
    wp.exit_if_poisoned(error)


def _time_copy(timer, nbytes) -> dict:
  import torch

  source = torch.empty(max(nbytes // 4, 1), dtype=torch.int32, device="cuda").random_()
  target = torch.empty_like(source)
  fields = timer(functools.partial(target.copy_, source))
  return {**fields, "bytes_moved": 2 * source.numel() * 4,
          "copy_method": "Tensor.copy_ (read + write)"}


if __name__ == "__main__":
  wp.worker_main(run_plan, __doc__)
