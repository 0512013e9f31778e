"""tools/bench/moe_bench.py end to end on a tiny block (CPU, seconds); the numbers come from
the GPU run (`PYTHONPATH=python python3 -m tools.bench.moe_bench`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tools.bench

from tools.bench import moe_bench  # noqa: E402


def test_anchor_blocks_are_the_anchor_gemms_read_as_moe_layers():
  blocks = {b.name: b for b in moe_bench.block_shapes()}
  assert blocks["mixtral"].tokens * blocks["mixtral"].top_k == 16384
  assert (blocks["qwen3-30b"].d_model, blocks["qwen3-30b"].d_ff, blocks["qwen3-30b"].experts) == (
      2048, 768, 128)


def test_small_block_runs_checks_and_reports():
  # d_model and d_ff fit the Pallas block configurations (multiples of 128).
  block = moe_bench.BlockShape("small", tokens=48, d_model=128, d_ff=256, experts=4, top_k=2)
  summary = moe_bench.run([block], moe_bench.BACKENDS, calls=2, runs=2, log=lambda _: None,
                          warmup_seconds=0)
  rows = {r["backend"]: r for r in summary["rows"]}
  on_gpu = summary["device"].startswith("gpu")
  timed = ("ours", "ours_mxfp8", "lax") + (("pallas",) if on_gpu else ())
  for backend in timed:
    assert "error" not in rows[backend], rows[backend].get("error")
    assert rows[backend]["seconds"] > 0 and rows[backend]["runs"] == 2
    assert rows[backend]["hoisted"] == []
    if backend != "lax":
      assert rows[backend]["check_ok"], (backend, rows[backend]["check_rel_err"])
  assert rows["ours"]["check_rel_err"] < 1e-2  # bf16: same roundings as lax but for order
  if not on_gpu:
    assert "error" in rows["pallas"]  # Mosaic GPU: n/a on the CPU, reported, not raised
  table = moe_bench.markdown(summary)
  assert "| small (48, 128, 256, 4, 2) |" in table
