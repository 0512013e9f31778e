"""The benchmark's named shapes and its harness (tools/bench), on the CPU in seconds.

The GPU numbers come from `python3 -m tools.bench.grouped_gemm_bench` on the
device. Here: the shapes against SPEC section 8; the harness end to end on a
tiny shape with the JAX competitors (Pallas Mosaic GPU is n/a on the CPU) and
a worker made to die mid-measurement; the command's restarts with a fake
worker that hangs or loses its CUDA context; the torch worker against a NumPy
stand-in for torch; the loop check against a loop XLA hoists. One GPU smoke
test runs every competitor on the device.
"""

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tools.bench

from conftest import has_gpu, requires_gpu  # noqa: E402
from tools.bench import grouped_gemm_bench, report  # noqa: E402
from tools.bench import shapes as shapes_lib  # noqa: E402
from tools.bench import worker_protocol as wp  # noqa: E402

# The harness's end-to-end checks run on the CPU only.
cpu_harness_check = pytest.mark.skipif(
    has_gpu(), reason="a CPU check of the harness: on a GPU its workers need the memory this "
    "pytest process's JAX holds; run the harness standalone there")

SPEC_ANCHORS = {  # SPEC section 8: M (tokens x top-k), K (hidden), N (ffn), G (experts)
    "mixtral": (16384, 4096, 14336, 8),
    "deepseek-ep8": (32768, 7168, 2048, 32),
    "qwen3-30b": (65536, 2048, 768, 128),
    "decode": (256, 4096, 1536, 64),
}


def test_anchor_shapes_match_the_spec():
  table = {s.name: s for s in shapes_lib.ANCHOR_SHAPES}
  assert len(table) == len(shapes_lib.ANCHOR_SHAPES), "names must be unique"
  for name, dims in SPEC_ANCHORS.items():
    assert table[name].dims == dims
    assert table[name].routing == "uniform"
  for name in ("mixtral", "deepseek-ep8", "qwen3-30b"):
    zipf = table[f"{name}-zipf"]
    assert zipf.dims == table[name].dims and zipf.routing == "zipf"
  decode_zipf = table["decode-zipf"]
  assert decode_zipf.dims == table["decode"].dims and decode_zipf.routing == "zipf"
  decode = {"decode", "decode-zipf"}
  assert {table[name].bound for name in decode} == {"weight_bandwidth"}
  assert {s.bound for s in shapes_lib.ANCHOR_SHAPES if s.name not in decode} == {"compute"}


@pytest.mark.parametrize("shape", shapes_lib.ANCHOR_SHAPES, ids=lambda s: s.name)
def test_group_sizes_are_valid_and_deterministic(shape):
  sizes = shape.group_sizes()
  assert sizes.dtype == np.int32 and sizes.shape == (shape.experts,)
  assert sizes.min() >= 0 and int(sizes.sum()) == shape.tokens
  np.testing.assert_array_equal(sizes, shape.group_sizes())
  assert shape.flops() == 2 * shape.tokens * shape.hidden * shape.ffn
  assert shape.weight_bytes("wgrad") == shape.experts * shape.hidden * shape.ffn * 2
  with_rows = int((sizes > 0).sum())  # fwd and dgrad read no weights of experts without rows
  assert shape.weight_bytes("fwd") == shape.weight_bytes("dgrad") == (
      with_rows * shape.hidden * shape.ffn * 2)


def test_zipf_routing_is_skewed_and_uniform_is_balanced():
  for name in ("mixtral", "deepseek-ep8", "qwen3-30b"):
    uniform, zipf = shapes_lib.by_name([name, f"{name}-zipf"])
    even = uniform.tokens / uniform.experts
    u, z = uniform.group_sizes(), zipf.group_sizes()
    assert np.abs(u - even).max() < 0.25 * even, "a balanced router jitters a little"
    assert z.max() > 3 * even, "the hottest Zipf expert takes several times its share"
  # The hottest of 8 Zipf(1.2) experts gets about 43% of the rows (shapes.py says so).
  mixtral_zipf = shapes_lib.by_name(["mixtral-zipf"])[0]
  assert 0.38 < mixtral_zipf.group_sizes().max() / mixtral_zipf.tokens < 0.48


def test_operand_shapes_per_pass():
  s = shapes_lib.GroupedGemmShape("t", 10, 3, 5, 2)
  assert shapes_lib.operand_shapes(s, "fwd") == ((10, 3), (2, 3, 5), (10, 5))
  assert shapes_lib.operand_shapes(s, "dgrad") == ((10, 5), (2, 3, 5), (10, 3))
  assert shapes_lib.operand_shapes(s, "wgrad") == ((10, 3), (10, 5), (2, 3, 5))
  with pytest.raises(ValueError, match="pass"):
    shapes_lib.operand_shapes(s, "bwd")


def test_bad_names_and_fields_raise():
  with pytest.raises(ValueError, match="unknown"):
    shapes_lib.by_name(["mixtral", "llama"])
  with pytest.raises(ValueError, match="routing"):
    shapes_lib.GroupedGemmShape("t", 8, 8, 8, 2, routing="powerlaw")
  with pytest.raises(ValueError, match="experts"):
    shapes_lib.GroupedGemmShape("t", 8, 8, 8, 0)


def test_plan_round_trips_and_slow_competitors_get_fewer_runs():
  plan = wp.Plan(shapes=shapes_lib.by_name(["decode"]), passes=["fwd"],
                 competitors=["ours", "torch", "copy_jax"], skip=["decode|fwd|ours"])
  again = wp.Plan.from_json(plan.to_json())
  assert again == plan
  assert again.tasks("jax") == ["copy|-|copy_jax", "decode|fwd|ours"]
  assert again.tasks("torch") == ["decode|fwd|torch"]
  assert wp.runs_within_budget(plan, 0.01) == 20  # 20 x 10 ms fits the 2 s budget
  assert wp.runs_within_budget(plan, 0.5) == 4
  assert wp.runs_within_budget(plan, 30.0) == 3  # never fewer than min_runs


def test_warm_up_runs_until_its_time_is_up_and_not_at_all_when_zero():
  plan = wp.Plan(shapes=[], passes=[], competitors=[], warmup_seconds=0.05)
  assert wp.Plan.from_json(plan.to_json()).warmup_seconds == 0.05
  runs = []

  def run_and_wait():
    runs.append(time.perf_counter())
    time.sleep(0.01)

  start = time.perf_counter()
  wp.sustain(plan, run_and_wait)
  assert time.perf_counter() - start >= 0.05  # ran until the time was up ...
  assert len(runs) >= 2 and runs[-1] - start < 0.05  # ... and started no run after it
  runs.clear()
  wp.sustain(dataclasses.replace(plan, warmup_seconds=0.0), run_and_wait)
  assert runs == []


FAKE_WORKER = """
import os, sys, time
sys.path.insert(0, {root!r})
from tools.bench import worker_protocol as wp
args = sys.argv[sys.argv.index("--plan"):]
plan = wp.Plan.from_json(open(args[1]).read())
writer = wp.RecordWriter(args[3])
framework = "jax" if "jax" in sys.argv[2] else "torch"
writer.write("device", framework=framework, device="fake")
for key in plan.tasks(framework):
  if key in plan.skip:
    continue
  writer.start(key)
  if key == os.environ["FAKE_HANG_AT"]:
    time.sleep(600)
  if key == os.environ["FAKE_POISON_AT"]:
    writer.result(key, error="RuntimeError: CUDA error: an illegal memory access was encountered")
    os._exit(wp.POISONED_EXIT_CODE)
  writer.result(key, seconds=1e-3, runs=3, calls=2)
"""


def test_worker_that_hangs_or_loses_its_context_is_replaced(tmp_path, monkeypatch):
  """The command's side of the protocol, with a fake worker: no JAX, no GPU."""
  fake = tmp_path / "fake_worker.py"
  fake.write_text(FAKE_WORKER.format(root=str(Path(__file__).resolve().parents[1])))
  python = tmp_path / "python"
  python.write_text(f"#!/bin/sh\nexec {sys.executable} {fake} \"$@\"\n")
  python.chmod(0o755)
  plan = wp.Plan(shapes=[shapes_lib.GroupedGemmShape("s", 64, 64, 64, 2)], passes=["fwd", "dgrad"],
                 competitors=["ours", "lax", "dense_jax"])
  monkeypatch.setenv("FAKE_HANG_AT", "s|fwd|lax")
  monkeypatch.setenv("FAKE_POISON_AT", "s|dgrad|ours")
  results, devices = grouped_gemm_bench.run_worker("jax", plan, tmp_path, task_timeout_s=2.0,
                                                   python=str(python))
  assert set(results) == set(plan.tasks("jax"))
  assert results["s|fwd|lax"]["error"].startswith("hung")
  assert "illegal memory access" in results["s|dgrad|ours"]["error"]
  measured = [k for k, r in results.items() if "seconds" in r]
  assert sorted(measured) == sorted(set(plan.tasks("jax")) - {"s|fwd|lax", "s|dgrad|ours"})
  assert len(devices) == 3  # the first worker, and one after each failure


STAND_IN_TORCH = """
# Just enough of torch's API, on NumPy, for the torch worker's code paths.
import time
import numpy as np
__version__ = "stand-in"
bfloat16, int32 = "bfloat16", "int32"
class version:
  cuda = "none"
class Tensor:
  def __init__(self, a): self.a = a
  def t(self): return Tensor(self.a.T)
  def transpose(self, i, j): return Tensor(np.swapaxes(self.a, i, j))
  def clone(self): return Tensor(self.a.copy())
  def __getitem__(self, i): return Tensor(self.a[i])
  def numel(self): return self.a.size
  def random_(self):
    self.a[...] = np.arange(self.a.size).reshape(self.a.shape)
    return self
  def copy_(self, other):
    self.a[...] = other.a
    return self
class Generator:
  def __init__(self, device): pass
  def manual_seed(self, seed):
    self.rng = np.random.default_rng(seed)
    return self
def randn(*shape, generator, device, dtype): return Tensor(generator.rng.standard_normal(shape))
def empty(n, dtype, device): return Tensor(np.zeros(n, np.int64))
def empty_like(t): return Tensor(np.zeros_like(t.a))
def as_tensor(a, dtype, device):
  assert dtype == int32
  return Tensor(np.asarray(a, np.int32))
def mm(a, b): return Tensor(a.a @ b.a)
def _grouped_mm(a, b, offs):  # the documented layouts: 2D x 3D (ragged M) and 2D x 2D (ragged K)
  ends = offs.a
  starts = np.concatenate([[0], ends[:-1]])
  if b.a.ndim == 3:
    out = np.zeros((a.a.shape[0], b.a.shape[2]))
    for g, (s, e) in enumerate(zip(starts, ends)):
      out[s:e] = a.a[s:e] @ b.a[g]
    return Tensor(out)
  return Tensor(np.stack([a.a[:, s:e] @ b.a[s:e] for s, e in zip(starts, ends)]))
class cuda:
  is_available = staticmethod(lambda: True)
  get_device_name = staticmethod(lambda: "stand-in GPU")
  synchronize = staticmethod(lambda: None)
  empty_cache = staticmethod(lambda: None)
  class Event:
    def __init__(self, enable_timing): pass
    def record(self): self.t = time.perf_counter()
    def synchronize(self): pass
    def elapsed_time(self, end): return (end.t - self.t) * 1e3
"""


def test_torch_worker_runs_against_a_stand_in_torch(tmp_path, monkeypatch):
  """torch is not installed here: a NumPy stand-in checks the worker's calls and layouts."""
  (tmp_path / "torch").mkdir()
  (tmp_path / "torch" / "__init__.py").write_text(STAND_IN_TORCH)
  monkeypatch.setenv("PYTHONPATH", str(tmp_path))
  shape = shapes_lib.GroupedGemmShape("s", 40, 16, 24, 3, routing="zipf")
  plan = wp.Plan(shapes=[shape], passes=list(shapes_lib.PASSES),
                 competitors=["torch", "dense_torch", "copy_torch"], calls=2, runs=3,
                 copy_bytes=4096)
  results, devices = grouped_gemm_bench.run_worker("torch", plan, tmp_path, task_timeout_s=60)
  assert [d["device"] for d in devices] == ["stand-in GPU"]
  assert set(results) == set(plan.tasks("torch"))
  for key, record in results.items():
    assert record.get("seconds", 0) > 0, (key, record)
  assert results["copy|-|copy_torch"]["bytes_moved"] == 2 * 4096


@cpu_harness_check
def test_loop_report_sees_hoisted_work_and_the_chained_loop_keeps_each_call():
  import functools

  import jax
  import jax.numpy as jnp
  from jax import lax

  from tools.bench import jax_competitors, jax_loop

  kx, kw = jax.random.split(jax.random.key(0))
  operands = (jax.random.normal(kx, (1024, 512), jnp.bfloat16),
              jax.random.normal(kw, (512, 1024), jnp.bfloat16))
  carry = jnp.zeros((1024, 1024), jnp.bfloat16)  # 2 MiB: above the report's size floor
  dense = jax_competitors._dense_fn("fwd")
  naive = jax.jit(lambda ops, out: lax.fori_loop(0, 10, lambda i, _: dense(*ops), out))
  report = jax_loop.loop_report(naive.lower(operands, carry).compile().as_text())
  assert report["loops"] == 1 and report["hoisted"], "XLA computes an unchained dot once"
  chained = jax.jit(functools.partial(jax_loop.call_loop, dense, 10, jax_loop.OUTPUT_CHAIN))
  report = jax_loop.loop_report(chained.lower(operands, carry).compile().as_text())
  assert report == {"loops": 1, "body_copy_bytes": 0, "hoisted": []}
  np.testing.assert_allclose(  # and it still computes the dot
      np.asarray(chained(operands, carry), np.float32),
      np.asarray(dense(*operands), np.float32), rtol=1e-2, atol=1e-2)


@cpu_harness_check
def test_a_row_whose_check_failed_meets_no_target():
  """Speed does not make a wrong result count: a failed check turns met into SHORT, and the
  cell says why; no check run leaves the speed verdict alone."""
  shape = shapes_lib.by_name(["qwen3-30b"])[0]
  fast = {"ours/torch": 1.2, "ours/dense": 0.8, "torch/dense": 0.6}
  assert report._target(shape, fast, None, checked_ok=None)["met"]
  assert report._target(shape, fast, None, checked_ok=True)["met"]
  failed = report._target(shape, fast, None, checked_ok=False)
  assert failed["met"] is False
  assert report._target_cell(failed) == "SHORT (check failed; 1.200x torch)"
  short = report._target(shape, {**fast, "ours/torch": 1.0466}, None)
  assert report._target_cell(short) == "SHORT (1.047x torch < 1.05x)"  # why it is short


@cpu_harness_check
def test_harness_runs_end_to_end_on_cpu(tmp_path):
  """Tiny shape, JAX competitors, --check; one worker dies mid-measurement and is replaced."""
  tiny = [shapes_lib.GroupedGemmShape("tiny", 96, 64, 128, 4, seed=3),
          shapes_lib.GroupedGemmShape("tiny-zipf", 96, 64, 128, 4, routing="zipf", seed=3)]
  crash_key = "tiny|dgrad|lax"
  os.environ[wp.CRASH_AT_ENV] = crash_key
  try:
    text = grouped_gemm_bench.run_benchmark(
        shapes=tiny, competitors=["ours", "lax", "pallas", "dense_jax", "copy_jax"],
        out_dir=tmp_path, quick=True, check=True, copy_gib=1 / 1024, task_timeout_s=120)
  finally:
    del os.environ[wp.CRASH_AT_ENV]

  summary = json.loads((tmp_path / "results.json").read_text())
  assert (tmp_path / "chart.png").stat().st_size > 1000
  assert (tmp_path / "results.md").read_text() == text
  rows = report.rows_by_key(summary)
  assert set(rows) == {(s.name, p) for s in tiny for p in shapes_lib.PASSES}
  for (shape, pass_name), row in rows.items():
    for competitor in ("ours", "dense_jax"):
      assert math.isfinite(row["tflops"][competitor]) and row["tflops"][competitor] > 0
    assert row["check_rel_err"] is not None and row["check_rel_err"] < report.CHECK_TOLERANCE
    assert row["ratios"]["ours/dense"] > 0
    assert row["errors"]["pallas"]  # Mosaic GPU kernels do not run on the CPU: n/a, with why
    if pass_name != "wgrad":
      assert "Only interpret mode is supported" in row["errors"]["pallas"]
    if (shape, pass_name) == ("tiny", "dgrad"):
      assert f"code {wp.CRASH_EXIT_CODE}" in row["errors"]["lax"]
    else:
      assert row["tflops"]["lax"] > 0
  assert summary["ceilings"]["copy_bytes_per_second"] > 0
  # Group sizes are the cheap operand to chain the loop's calls through (see jax_loop).
  assert summary["records"]["tiny|fwd|ours"]["method"] == "operand-chain"
  assert "| tiny | fwd |" in text and "n/a (ValueError: Only interpret mode" in text
  assert text.count("\n| tiny") == 6


@requires_gpu
def test_every_competitor_runs_on_the_gpu(tmp_path, monkeypatch):
  """Smoke run on the device: every competitor gives a time, and ours matches jax.lax.

  This pytest process already holds most of the GPU's memory (jax preallocates
  it), so the JAX worker gets a small share; the benchmark proper runs alone.
  """
  monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.08")
  small = [shapes_lib.GroupedGemmShape("small", 2048, 256, 512, 4, seed=5),
           shapes_lib.GroupedGemmShape("small-zipf", 2048, 256, 512, 4, routing="zipf", seed=5)]
  grouped_gemm_bench.run_benchmark(shapes=small, out_dir=tmp_path, quick=True, check=True,
                                   copy_gib=0.25, task_timeout_s=240)
  summary = json.loads((tmp_path / "results.json").read_text())
  for row in summary["rows"]:
    for competitor in ("ours", "torch", "pallas", "lax", "dense_jax", "dense_torch"):
      assert competitor in row["tflops"], (row["shape"], row["pass"], row["errors"])
    assert row["check_rel_err"] < report.CHECK_TOLERANCE
  assert set(summary["ceilings"]["copy_by_method"]) == {"copy_jax", "copy_torch"}
  assert all(summary["ceilings"]["copy_by_method"].values())
