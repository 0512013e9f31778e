"""The main job: a grouped GEMM forward and gradient of an MoE expert layer.

Runs on the default backend (the GPU when there is one, else the CPU), checks
the results against jax.lax.ragged_dot, and reports what ran where and how
long it took. Later issues grow this into an MoE training run.

  ./tools/demo [--tokens=4096 --hidden=512 --ffn=1024 --experts=8 --dtype=bfloat16]
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native

FLAGS = flags.DEFINE_integer("tokens", 2048, "tokens x top-k: rows of the grouped GEMM (M)")
flags.DEFINE_integer("hidden", 256, "model width (K)")
flags.DEFINE_integer("ffn", 512, "expert width (N)")
flags.DEFINE_integer("experts", 8, "number of experts (G)")
flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16", "float16"], "operand dtype")
flags.DEFINE_integer("repeats", 10, "timed calls per measurement")
flags.DEFINE_integer("seed", 0, "random seed")
F = flags.FLAGS


def expert_layer(dot):
  """Loss of one expert layer and its gradients (dgrad and wgrad) w.r.t. x and w."""
  def loss(x, w, group_sizes):
    y = dot(x, w, group_sizes, preferred_element_type=jnp.float32)
    return jnp.mean(jax.nn.gelu(y) ** 2)
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def skewed_group_sizes(rng, tokens, experts):
  """Zipf-like routing: a few hot experts, some empty ones."""
  weights = 1.0 / np.arange(1, experts + 1) ** 1.2
  sizes = rng.multinomial(tokens, weights / weights.sum())
  return rng.permutation(sizes).astype(np.int32)


def median_seconds(fn, *args, repeats):
  jax.block_until_ready(fn(*args))  # compile and warm up
  times = []
  for _ in range(5):
    start = time.perf_counter()
    for _ in range(repeats):
      out = fn(*args)
    jax.block_until_ready(out)
    times.append((time.perf_counter() - start) / repeats)
  return float(np.median(times))


def main(argv):
  del argv
  rng = np.random.default_rng(F.seed)
  m, k, n, g = F.tokens, F.hidden, F.ffn, F.experts
  dtype = jnp.dtype(F.dtype)
  device = jax.devices()[0]
  registered = _native.register_targets()
  print(f"device: {device.platform} ({device.device_kind}); native handlers: "
        f"{', '.join(f'{p}: {len(t)}' for p, t in registered.items())}; "
        f"CUDA kernels built: {_native.CUDA_BUILT}")

  x = jnp.asarray(rng.standard_normal((m, k)), dtype)
  w = jnp.asarray(rng.standard_normal((g, k, n)) / np.sqrt(k), dtype)
  group_sizes = jnp.asarray(skewed_group_sizes(rng, m, g))
  print(f"grouped GEMM: M={m} K={k} N={n} G={g} {dtype.name}; group sizes "
        f"{np.asarray(group_sizes).tolist()}")

  ours, theirs = expert_layer(jgg.ragged_dot), expert_layer(jax.lax.ragged_dot)
  hlo = ours.lower(x, w, group_sizes).as_text()
  assert _native.RAGGED_M_TARGET in hlo and _native.RAGGED_K_TARGET in hlo
  (loss, (dx, dw)) = ours(x, w, group_sizes)
  (ref_loss, (ref_dx, ref_dw)) = theirs(x, w, group_sizes)

  def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
  errors = {"loss": rel(loss, ref_loss), "dgrad": rel(dx.astype(jnp.float32), ref_dx.astype(jnp.float32)),
            "wgrad": rel(dw.astype(jnp.float32), ref_dw.astype(jnp.float32))}
  tolerance = 1e-5 if dtype == jnp.float32 else 2e-2
  print("check vs jax.lax.ragged_dot (relative error): " +
        ", ".join(f"{name} {err:.1e}" for name, err in errors.items()))
  ok = all(err <= tolerance for err in errors.values())

  flops = 3 * 2 * m * k * n  # forward, dgrad, wgrad
  for name, fn in (("jax_grouped_gemm", ours), ("jax.lax.ragged_dot", theirs)):
    seconds = median_seconds(fn, x, w, group_sizes, repeats=F.repeats)
    print(f"  {name:20s} fwd+bwd {seconds * 1e3:8.3f} ms  {flops / seconds / 1e12:8.3f} TFLOP/s")
  print("check: " + ("PASSED" if ok else f"FAILED (tolerance {tolerance:g})"))
  if not ok:
    raise SystemExit(1)


if __name__ == "__main__":
  app.run(main)
