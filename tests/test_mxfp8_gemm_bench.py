"""tools/bench/mxfp8_gemm_bench.py end to end on a tiny shape (CPU, seconds); the numbers come
from the GPU run (`PYTHONPATH=python python3 -m tools.bench.mxfp8_gemm_bench --out DIR`)."""

import json
import sys
from pathlib import Path

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


def test_wgrad_crossover_times_both_backends_and_restores_the_limit(tmp_path):
  """tools/device/mxfp8_wgrad_crossover.py: the "chosen" arm dequantizes past the fused
  wgrad's limit, the "fused" arm lifts it, and the limit is back afterwards."""
  from jax_grouped_gemm import mxfp8_gemm
  from tools.device import mxfp8_wgrad_crossover

  limit = mxfp8_gemm.FUSED_WGRAD_MAX_ROWS_PER_GROUP
  mxfp8_wgrad_crossover.main(["--out", str(tmp_path), "--dims", "64,48,4", "--rows", "4,16",
                              "--calls", "2", "--runs", "2", "--warmup-seconds", "0"])
  assert mxfp8_gemm.FUSED_WGRAD_MAX_ROWS_PER_GROUP == limit
  saved = json.loads((tmp_path / "crossover.json").read_text())
  backends = {arm: {r["shape"]: r["backend"] for r in saved[arm]} for arm in ("chosen", "fused")}
  assert backends["chosen"] == {"r4-uniform": "fused_few_rows", "r4-zipf": "fused_few_rows",
                                "r16-uniform": "dequantize", "r16-zipf": "dequantize"}
  assert set(backends["fused"].values()) == {"fused_few_rows"}
  assert all(r["check_ok"] for arm in ("chosen", "fused") for r in saved[arm])
  table = (tmp_path / "crossover.md").read_text()
  assert "| r16-zipf |" in table and "dequantize)" in table and "n/a" not in table
