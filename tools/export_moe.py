"""Exports a MoE block with random weights as a serving artifact (jgg.export.save).

  .venv/bin/python tools/export_moe.py OUT_DIR [--tokens 64 --d-model 64 --d-ff 128
      --experts 8 --top-k 2 --dtype float32 --seed 0 --platforms cuda,cpu]

The artifact computes y = moe_block(x, weights)[0] for x [tokens, d_model]; the
weights are its trailing inputs, stored in params.npz, so `python -m
jax_grouped_gemm.serve OUT_DIR` runs it without this code. Rows are
independent (dropless routing, no capacity): a server may batch requests'
rows together and pad the rest.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jax_grouped_gemm as jgg
from jax_grouped_gemm import moe


def random_weights(*, d_model: int, d_ff: int, experts: int, dtype, seed: int) -> moe.MoEWeights:
  """Weights scaled by 1/sqrt(fan_in), so activations stay O(1) at any size."""
  rng = np.random.default_rng(seed)
  shapes = {"router": (d_model, experts), "gate": (experts, d_model, d_ff),
            "up": (experts, d_model, d_ff), "down": (experts, d_ff, d_model)}
  return moe.MoEWeights(**{
      name: jnp.asarray(rng.standard_normal(shape) / np.sqrt(shape[-2]), dtype)
      for name, shape in shapes.items()})


def serving_function(top_k: int):
  """(x, weights) -> y: the block's output without the (batch-level) aux loss."""
  return jax.jit(lambda x, weights: moe.moe_block(x, weights, top_k=top_k)[0])


def export_moe(path, *, tokens: int, d_model: int, d_ff: int, experts: int, top_k: int,
               dtype="float32", seed: int = 0, platforms=jgg.export.DEFAULT_PLATFORMS,
               precision: str | None = None):
  """Writes the artifact into `path`; returns (the jitted function, the weights).

  precision: jax's default matmul precision while tracing (the router and
  combine dots; our grouped GEMMs accumulate in f32 regardless). It is baked
  into the artifact: "highest" keeps f32 dots exact on GPUs, whose default is TF32.
  """
  weights = random_weights(d_model=d_model, d_ff=d_ff, experts=experts, dtype=dtype, seed=seed)
  fn = serving_function(top_k)
  x_spec = jax.ShapeDtypeStruct((tokens, d_model), jnp.dtype(dtype))
  with jax.default_matmul_precision(precision):
    exported = jgg.export.export(fn, x_spec, weights, platforms=platforms)
  jgg.export.save(exported, path, params=weights)
  return fn, weights


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("out")
  parser.add_argument("--tokens", type=int, default=64, help="the artifact's static batch (rows)")
  parser.add_argument("--d-model", type=int, default=64)
  parser.add_argument("--d-ff", type=int, default=128)
  parser.add_argument("--experts", type=int, default=8)
  parser.add_argument("--top-k", type=int, default=2)
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--platforms", default=",".join(jgg.export.DEFAULT_PLATFORMS))
  parser.add_argument("--precision", choices=("default", "high", "highest"), default=None,
                      help="matmul precision baked into the artifact (default: jax's)")
  args = parser.parse_args(argv)
  for flag in ("tokens", "d_model", "d_ff", "experts", "top_k"):
    if getattr(args, flag) < 1:
      parser.error(f"--{flag.replace('_', '-')}: expected at least 1, got {getattr(args, flag)}")
  if args.top_k > args.experts:
    parser.error(f"--top-k: a token's experts are distinct, so at most --experts "
                 f"({args.experts}), got {args.top_k}")
  try:
    export_moe(args.out, tokens=args.tokens, d_model=args.d_model, d_ff=args.d_ff,
               experts=args.experts, top_k=args.top_k, dtype=args.dtype, seed=args.seed,
               platforms=tuple(args.platforms.split(",")), precision=args.precision)
  except (ValueError, OSError) as e:  # --platforms, the output directory
    print(f"export_moe: {e}", file=sys.stderr)
    return 2
  print(f"wrote {args.out}")


if __name__ == "__main__":
  sys.exit(main())
