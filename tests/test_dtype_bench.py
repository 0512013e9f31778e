"""tools/bench/dtype_bench.py end to end on a tiny shape (CPU, seconds); the numbers come from
the GPU run (`PYTHONPATH=python python3 -m tools.bench.dtype_bench --out DIR`)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tools.bench

from tools.bench import dtype_bench  # noqa: E402
from tools.bench import shapes as shapes_lib  # noqa: E402


def test_tiny_shape_times_every_pair_and_pass(tmp_path):
  shape = shapes_lib.GroupedGemmShape("tiny", 96, 64, 48, 4, routing="zipf", seed=3)
  result = dtype_bench.run([shape], shapes_lib.PASSES, str(tmp_path), calls=2, runs=2,
                           log=lambda _: None, warmup_seconds=0)
  records = result["records"]
  assert {(r["pass_name"], r["inputs"], r["results"]) for r in records} == {
      (p, i, o) for p in shapes_lib.PASSES for i, o in dtype_bench.PAIRS}
  for r in records:
    assert "error" not in r, r.get("error")
    assert r["runs"] == 2 and r["tflops"] > 0
    if (r["inputs"], r["results"]) == dtype_bench.PAIRS[0]:
      assert r["vs_bf16"] == 1.0  # the reference row of its pass
  assert json.loads((tmp_path / "dtype_bench.json").read_text())["records"] == records
  table = (tmp_path / "dtype_bench.md").read_text()
  assert "| tiny | 96, 64, 48, 4 | wgrad | float16 -> float32 |" in table
