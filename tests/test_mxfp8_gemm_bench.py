"""tools/bench/mxfp8_gemm_bench.py end to end on a tiny shape (CPU, seconds); the numbers come
from the GPU run (`PYTHONPATH=python python3 -m tools.bench.mxfp8_gemm_bench --out DIR`)."""

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tools.bench

from tools.bench import mxfp8_gemm_bench  # noqa: E402
from tools.bench import shapes as shapes_lib  # noqa: E402


def test_tiny_shape_times_checks_and_reports_every_pass(tmp_path):
  # 640 rows over 4 experts: Zipf sizes, not multiples of 32; K, N multiples of 8.
  shape = shapes_lib.GroupedGemmShape("tiny", 640, 64, 48, 4, routing="zipf", seed=3)
  result = mxfp8_gemm_bench.run([shape], shapes_lib.PASSES, str(tmp_path), calls=2, runs=2,
                                log=lambda _: None)
  records = {r["pass_name"]: r for r in result["records"]}
  assert set(records) == set(shapes_lib.PASSES)
  for r in records.values():
    assert "error" not in r, r.get("error")
    assert r["bf16"]["runs"] == r["mxfp8"]["runs"] == 2
    assert r["speedup"] > 0 and r["target_speedup"] == 1.0
    assert r["check_rel_err"] < 1e-2  # against the BF16 GEMM of the dequantized operands
    assert r["check_ok"] and r["meets_target"] == (r["speedup"] >= 1.0)
    assert r["backend"] == "dequantize"  # 160 rows per group: compute-bound
  saved = json.loads((tmp_path / "mxfp8_gemm_bench.json").read_text())
  assert [r["backend"] for r in saved["records"]] == ["dequantize"] * len(shapes_lib.PASSES)
  table = (tmp_path / "mxfp8_gemm_bench.md").read_text()
  assert "| tiny | 640, 64, 48, 4 | wgrad | compute | dequantize |" in table
  assert "FAIL" not in table


def test_a_row_whose_check_fails_meets_no_target(tmp_path, monkeypatch):
  # Any result checks as wrong when the tolerance is below every error: even a fast row fails.
  monkeypatch.setattr(mxfp8_gemm_bench, "CHECK_TOLERANCE", -1.0)
  shape = shapes_lib.GroupedGemmShape("tiny", 640, 64, 48, 4, seed=3)
  result = mxfp8_gemm_bench.run([shape], ["fwd"], str(tmp_path), calls=2, runs=2,
                                log=lambda _: None)
  record, = result["records"]
  assert not record["check_ok"] and not record["meets_target"]
  assert " FAIL |" in (tmp_path / "mxfp8_gemm_bench.md").read_text()


def test_few_rows_per_group_forward_runs_the_fused_backend(tmp_path):
  shape = shapes_lib.GroupedGemmShape("tiny-decode", 16, 64, 48, 4, bound="weight_bandwidth")
  result = mxfp8_gemm_bench.run([shape], ["fwd"], str(tmp_path), calls=2, runs=2,
                                log=lambda _: None)
  record, = result["records"]
  assert record["backend"] == "fused_few_rows" and record["target_speedup"] == 1.3
  assert record["check_rel_err"] < 1e-2
  table = (tmp_path / "mxfp8_gemm_bench.md").read_text()
  assert "| tiny-decode | 16, 64, 48, 4 | fwd | weight_bandwidth | fused_few_rows |" in table


def test_backend_crossover_times_both_backends_and_restores_the_limits(tmp_path):
  """tools/device/mxfp8_backend_crossover.py: each arm runs the backend it forces, the
  default's choice is named (fused up to its limit, dequantize past it), and the limits are
  back afterwards."""
  from jax_grouped_gemm import mxfp8_gemm
  from tools.device import mxfp8_backend_crossover as crossover

  limits = [getattr(mxfp8_gemm, name) for name in crossover.LIMITS]
  crossover.main(["--out", str(tmp_path), "--passes", "fwd,wgrad", "--dims", "64,48,4",
                  "--rows", "4,16", "--calls", "2", "--runs", "2", "--warmup-seconds", "0"])
  assert [getattr(mxfp8_gemm, name) for name in crossover.LIMITS] == limits
  saved = json.loads((tmp_path / "crossover.json").read_text())
  for arm in ("fused", "dequantize"):
    assert {r["backend"] for r in saved[arm]} == {f"{arm}_few_rows" if arm == "fused" else arm}
    assert len(saved[arm]) == 8 and all(r["check_ok"] for r in saved[arm])
  # 16 rows per group: the forward's fused kernels take it, wgrad's stop at 8.
  assert saved["chosen"] == {
      "r4-uniform fwd": "fused_few_rows", "r4-uniform wgrad": "fused_few_rows",
      "r4-zipf fwd": "fused_few_rows", "r4-zipf wgrad": "fused_few_rows",
      "r16-uniform fwd": "fused_few_rows", "r16-uniform wgrad": "dequantize",
      "r16-zipf fwd": "fused_few_rows", "r16-zipf wgrad": "dequantize"}
  table = (tmp_path / "crossover.md").read_text()
  assert "| r16-zipf | wgrad |" in table and "| dequantize |" in table and "n/a" not in table


def test_backend_crossover_times_only_the_arms_asked_for(tmp_path):
  """--arms fused times the fused kernels alone (one kernel against another, by env var);
  an unknown arm is refused by name."""
  from tools.device import mxfp8_backend_crossover as crossover

  crossover.main(["--out", str(tmp_path), "--passes", "fwd", "--dims", "64,48,4", "--rows", "4",
                  "--arms", "fused", "--calls", "2", "--runs", "2", "--warmup-seconds", "0"])
  saved = json.loads((tmp_path / "crossover.json").read_text())
  assert "dequantize" not in saved and len(saved["fused"]) == 2
  assert "| shape | pass | BF16 | fused | chosen |" in (tmp_path / "crossover.md").read_text()
  with pytest.raises(SystemExit):
    crossover.main(["--out", str(tmp_path), "--arms", "fused,bf16"])


def test_bf16_tile_crossover_times_every_shape_and_pass(tmp_path):
  """tools/device/bf16_tile_crossover.py: a row per routing, rows-per-group average and pass,
  with its time, in both outputs."""
  from tools.device import bf16_tile_crossover

  bf16_tile_crossover.main(["--out", str(tmp_path), "--dims", "64,48,4", "--rows", "4,16",
                            "--calls", "2", "--runs", "2", "--warmup-seconds", "0"])
  saved = json.loads((tmp_path / "bf16_tile_crossover.json").read_text())
  assert [(r["shape"], r["pass_name"]) for r in saved["records"]] == [
      (f"r{rows}-{routing}", p) for rows in (4, 16) for routing in ("uniform", "zipf")
      for p in ("fwd", "dgrad")]
  assert all(r["ms"] > 0 for r in saved["records"])
  assert "| r16-zipf | dgrad |" in (tmp_path / "bf16_tile_crossover.md").read_text()


def test_bf16_tile_crossover_compares_settings_in_fresh_processes(tmp_path):
  """--settings: one child per JGG_SM90_SMALL_M_ROWS value, each saving its own run under that
  setting, and a table of every shape and pass with each setting's time over the first's."""
  from tools.device import bf16_tile_crossover

  bf16_tile_crossover.main(["--out", str(tmp_path), "--dims", "64,48,4", "--rows", "8",
                            "--passes", "fwd", "--calls", "2", "--runs", "2",
                            "--warmup-seconds", "0", "--settings", "0,1000000"])
  for setting in ("0", "1000000"):
    saved = json.loads((tmp_path / f"setting_{setting}" / "bf16_tile_crossover.json").read_text())
    assert saved["small_m_rows"] == setting
    assert [r["shape"] for r in saved["records"]] == ["r8-uniform", "r8-zipf"]
  table = (tmp_path / "bf16_tile_crossover_compare.md").read_text().splitlines()
  assert "| shape | pass | 0 | 1000000 |" in table
  rows = [line for line in table if line.startswith("| r8-")]
  assert [r.split(" | ")[:2] for r in rows] == [["| r8-uniform", "fwd"], ["| r8-zipf", "fwd"]]
  assert all(re.search(r"\| \d+\.\d{3} \| \d+\.\d{3} \(\d+\.\d\d\) \|$", r) for r in rows), rows
