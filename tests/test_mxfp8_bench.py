"""tools/bench/mxfp8_bench.py end to end on a tiny shape (CPU, seconds); the numbers come from
the GPU run (`PYTHONPATH=python python3 -m tools.bench.mxfp8_bench --out DIR`)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tools.bench

from tools.bench import mxfp8_bench  # noqa: E402
from tools.bench import shapes as shapes_lib  # noqa: E402


def test_tiny_shapes_time_every_op_and_report(tmp_path):
  # Zipf sizes over 4 experts (not multiples of 32); a second routing shares the weights.
  shapes = [shapes_lib.GroupedGemmShape("tiny", 96, 64, 48, 4, routing="zipf", seed=3),
            shapes_lib.GroupedGemmShape("tiny-u", 96, 64, 48, 4)]
  records = mxfp8_bench.run(shapes, str(tmp_path), calls=2, runs=2, copy_gib=1 / 1024,
                            warmup_seconds=0)
  rows = {(r["shape"], r["tensor"], r["op"]) for r in records}
  assert rows == ({("tiny", t, op) for t in ("activation", "weight") for op in mxfp8_bench.OPS}
                  | {("tiny-u", "activation", op) for op in mxfp8_bench.OPS})
  for r in records:
    assert "error" not in r, r.get("error")
    assert r["runs"] == 2 and r["gb_per_s"] > 0
    assert r["same_bytes_copy_seconds"] > 0 and r["fraction_of_same_bytes_copy"] > 0
  both = next(r for r in records if r["op"] == "quantize_both" and r["tensor"] == "weight")
  # 4 x 64 x 48 bf16 read; two fp8 copies and two scale buffers (4 slots of 512 bytes) written.
  assert both["bytes_moved"] == 4 * 64 * 48 * 2 + 2 * (4 * 64 * 48 + 4 * 512)
  saved = json.loads((tmp_path / "mxfp8_bench.json").read_text())
  assert saved["copy"]["gb_per_s"] > 0 and saved["target_fraction_of_copy"] == 0.85
  table = (tmp_path / "mxfp8_bench.md").read_text()
  assert "| tiny | weight | 4x64x48 | quantize_both |" in table


def test_ops_time_only_the_ops_named(tmp_path):
  shapes = [shapes_lib.GroupedGemmShape("tiny", 96, 64, 48, 4)]
  records = mxfp8_bench.run(shapes, str(tmp_path), calls=2, runs=2, copy_gib=1 / 1024,
                            warmup_seconds=0, ops=("dequantize",))
  assert {(r["tensor"], r["op"]) for r in records} == {("activation", "dequantize"),
                                                       ("weight", "dequantize")}


def test_ops_flag_rejects_an_unknown_op(tmp_path, capsys):
  with pytest.raises(SystemExit):
    mxfp8_bench.main(["--out", str(tmp_path), "--ops", "dequantise"])
  assert "--ops: unknown ['dequantise']" in capsys.readouterr().err


def test_tensors_time_only_the_tensors_named(tmp_path):
  shapes = [shapes_lib.GroupedGemmShape("tiny", 96, 64, 48, 4)]
  records = mxfp8_bench.run(shapes, str(tmp_path), calls=2, runs=2, copy_gib=1 / 1024,
                            warmup_seconds=0, ops=("quantize_rowwise",), tensors=("activation",))
  assert {(r["tensor"], r["op"]) for r in records} == {("activation", "quantize_rowwise")}


def test_tensors_flag_rejects_an_unknown_tensor(tmp_path, capsys):
  with pytest.raises(SystemExit):
    mxfp8_bench.main(["--out", str(tmp_path), "--tensors", "weights"])
  assert "--tensors: unknown ['weights']" in capsys.readouterr().err
