"""Benchmarks of the grouped GEMMs against their competitors (run on the GPU machine).

  shapes.py             the named anchor shapes and their group sizes (one list)
  grouped_gemm_bench.py the command: runs the competitors' workers, writes the report
  worker_protocol.py    the plan and records the command and its workers exchange
  jax_competitors.py    worker timing the JAX competitors (ours, jax.lax, Pallas, dense)
  jax_loop.py           jitted loops of calls, checked for hoisted work and copies
  torch_competitors.py  worker timing torch._grouped_mm, torch.mm and a torch copy
  report.py             TFLOP/s, ratios and targets as Markdown, JSON and a PNG chart
  moe_bench.py          tokens/s of one MoE block fwd+bwd: ours vs jax.lax vs Pallas
  mxfp8_gemm_bench.py   MXFP8 grouped GEMM (today: dequantize + BF16 GEMM) vs our BF16 one
"""
