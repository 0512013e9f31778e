"""Expert- and tensor-parallel grouped GEMMs on 2 GPUs, checked against 1 GPU.

Run on a machine with at least 2 GPUs (kind nvidia-h200-x2), from the repository root:
  PYTHONPATH=python python3 tools/device/sharding_2gpu.py
(`--platform=cpu` runs the same checks, smaller, on 2 CPU devices: a smoke test of the
script itself.) Exits non-zero on a mismatch. For every case, forward and gradients under jit
with named shardings (Shardy, then GSPMD; meshes of Auto axes, then of Explicit axes with
out_sharding and typed gradients): the 2-GPU result agrees with the same function on one GPU,
and the compiled program holds the expected collectives and no all-gather of expert weights.
Then an MXFP8 weight stack quantized split along its experts (bit-exact, no collectives), and
the shard_map expert-parallel MLP on the real ragged all-to-all (XLA:CPU has none, so CI only
runs a stand-in).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jax_grouped_gemm as jgg
from jax_grouped_gemm import expert_parallel

G = 8
SHAPES = {"gpu": (4096, 1024, 2048), "cpu": (256, 64, 96)}  # M, K, N: K/2, N/2 multiples of 8
TOLERANCE = {jnp.float32: 1e-5, jnp.bfloat16: 1e-2}

# name: (x spec, w spec, y spec, collectives expected in forward, in gradient)
CASES = {
    "column": (P(), P(None, None, "x"), P(None, "x"), set(), {"all-reduce"}),
    "row": (P(None, "x"), P(None, "x", None), P(), {"all-reduce"}, set()),
    "expert": (P(), P("x"), P(), {"all-reduce"}, {"all-reduce"}),
    "expert_tokens_split": (P("x"), P("x"), P("x"), {"all-gather", "reduce-scatter"},
                            {"all-gather", "reduce-scatter"}),
    "data": (P("x"), P(), P("x"), set(), {"all-reduce"}),
}
# "%name = TYPE kind(" or, asynchronous on GPU, "%name = (TYPE, TYPE) kind-start(".
_COLLECTIVE = re.compile(r"%\S+ = (.*?) (all-reduce|all-gather|reduce-scatter|all-to-all)"
                         r"(?:-start)?\(")


def relative_error(actual, expected):
  actual = np.asarray(jnp.asarray(actual, jnp.float32), np.float64)
  expected = np.asarray(jnp.asarray(expected, jnp.float32), np.float64)
  if not np.all(np.isfinite(actual)):
    return np.inf
  return np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30)


def collectives(hlo):
  """{kind: [result shapes]} of a compiled module (async collectives counted by their start)."""
  found = {}
  for line in hlo.splitlines():
    m = _COLLECTIVE.search(line)
    if m:
      found.setdefault(m.group(2), []).append(m.group(1))
  return found


def loss(x, w, sizes, ct):
  return jnp.sum(jgg.ragged_dot(x, w, sizes).astype(jnp.float32) * ct)


def check_case(name, mesh, one_gpu, dtype, operands):
  x_spec, w_spec, y_spec, want_fwd, want_grad = CASES[name]
  x, w, sizes, ct = operands
  put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
  on_one = lambda a: jax.device_put(a, one_gpu)
  want = [jax.jit(jgg.ragged_dot)(on_one(x), on_one(w), on_one(sizes)),
          *jax.jit(jax.grad(loss, (0, 1)))(on_one(x), on_one(w), on_one(sizes), on_one(ct))]
  explicit = mesh.axis_types[0] == AxisType.Explicit
  with jax.set_mesh(mesh) if explicit else contextlib.nullcontext():
    xs, ws, cts, sizes = put(x, x_spec), put(w, w_spec), put(ct, y_spec), put(sizes, P())
    if explicit:  # shardings are types: out_sharding as jax.lax's, gradients come typed
      forward = jax.jit(lambda a, b, s: jgg.ragged_dot(a, b, s, out_sharding=y_spec))
      gradient = jax.jit(jax.grad(loss, (0, 1)))
    else:
      forward = jax.jit(jgg.ragged_dot, out_shardings=NamedSharding(mesh, y_spec))
      gradient = jax.jit(jax.grad(loss, (0, 1)), out_shardings=(xs.sharding, ws.sharding))
    got = [forward(xs, ws, sizes), *gradient(xs, ws, sizes, cts)]
    found_fwd = collectives(forward.lower(xs, ws, sizes).compile().as_text())
    found_grad = collectives(gradient.lower(xs, ws, sizes, cts).compile().as_text())
  errors = [relative_error(a, b) for a, b in zip(got, want)]
  weight_shape = f"[{','.join(map(str, w.shape))}]"
  gathered_weights = [s for s in found_fwd.get("all-gather", []) if weight_shape in s]
  placed = all(a.sharding.is_equivalent_to(NamedSharding(mesh, spec), a.ndim)
               for a, spec in zip(got, (y_spec, x_spec, w_spec)))
  ok = (max(errors) <= TOLERANCE[dtype] and set(found_fwd) == want_fwd
        and set(found_grad) == want_grad and not gathered_weights and placed)
  print(f"{name:22s} {jnp.dtype(dtype).name:9s} err y/dx/dw "
        f"{' '.join(f'{e:.1e}' for e in errors)}  fwd {sorted(found_fwd)} grad "
        f"{sorted(found_grad)}  {'ok' if ok else 'MISMATCH'}")
  return ok


def check_mxfp8_stack_split(mesh, one_gpu, small):
  """An expert weight stack quantized split along its experts: per-GPU calls, bit-exact."""
  g, k, n = (G, 64, 96) if small else (G, 1024, 2048)
  w = jax.random.normal(jax.random.key(3), (g, k, n), jnp.bfloat16)
  quantize = jax.jit(lambda w: jgg.mxfp8.quantize(w, rowwise=True, colwise=True))
  split = quantize(jax.device_put(w, NamedSharding(mesh, P("x"))))
  whole = quantize(jax.device_put(w, one_gpu))
  leaves = lambda q: (q.data, q.scale_inv, q.colwise_data, q.colwise_scale_inv)
  exact = all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
              for a, b in zip(leaves(split), leaves(whole)))
  found = collectives(quantize.lower(jax.device_put(w, NamedSharding(mesh, P("x"))))
                      .compile().as_text())
  ok = exact and not found
  print(f"{'mxfp8_stack_split':22s} bfloat16  bit-exact {exact}  collectives {sorted(found)}  "
        f"{'ok' if ok else 'MISMATCH'}")
  return ok


def check_expert_parallel_mlp(mesh, one_gpu, small):
  """shard_map + real ragged_all_to_all on 2 GPUs vs each device's rows on one GPU."""
  shards, rows, d, f = (2, 64, 32, 48) if small else (2, 512, 256, 512)
  rng = np.random.default_rng(7)
  x = rng.standard_normal((shards * rows, d)).astype(np.float32)
  sizes = np.stack([rng.multinomial(rows - 17 * s, np.ones(G) / G) for s in range(shards)])
  sizes = sizes.astype(np.int32)
  sizes[0, 3] = 0  # an empty expert
  w_in = (rng.standard_normal((G, d, f)) / np.sqrt(d)).astype(np.float32)
  w_out = (rng.standard_normal((G, f, d)) / np.sqrt(f)).astype(np.float32)
  layer = jax.jit(jax.shard_map(
      lambda x, s, a, b: expert_parallel.expert_parallel_mlp(x, s[0], a, b, axis_name="x"),
      mesh=mesh, in_specs=(P("x"),) * 4, out_specs=P("x")))
  put = lambda a: jax.device_put(a, NamedSharding(mesh, P("x")))
  got = layer(put(x), put(sizes), put(w_in), put(w_out))

  def one(x, w_in, w_out):
    return jnp.concatenate([
        jgg.ragged_dot(jax.nn.silu(jgg.ragged_dot(x[s * rows:(s + 1) * rows], w_in, sizes[s])),
                       w_out, sizes[s]) for s in range(shards)])

  want = jax.jit(one)(*[jax.device_put(a, one_gpu) for a in (x, w_in, w_out)])
  ct = rng.standard_normal(got.shape).astype(np.float32)
  grads = jax.jit(jax.grad(lambda x, a, b: jnp.sum(layer(x, put(sizes), a, b) * ct), (0, 1, 2)))(
      put(x), put(w_in), put(w_out))
  want_grads = jax.jit(jax.grad(lambda x, a, b: jnp.sum(one(x, a, b) * ct), (0, 1, 2)))(
      *[jax.device_put(a, one_gpu) for a in (x, w_in, w_out)])
  errors = [relative_error(got, want)] + [relative_error(a, b) for a, b in zip(grads, want_grads)]
  hlo = layer.lower(put(x), put(sizes), put(w_in), put(w_out)).compile().as_text()
  ragged = "ragged-all-to-all" in hlo
  ok = max(errors) <= 1e-5 and (ragged or small)  # XLA:CPU runs the all_gather stand-in
  print(f"{'expert_parallel_mlp':22s} float32   err y/dx/dw_in/dw_out "
        f"{' '.join(f'{e:.1e}' for e in errors)}  ragged-all-to-all in HLO: {ragged}  "
        f"{'ok' if ok else 'MISMATCH'}")
  return ok


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--platform", choices=("gpu", "cpu"), default="gpu")
  platform = parser.parse_args().platform
  gpus = jax.devices(platform)
  if len(gpus) < 2:
    print(f"needs 2 {platform} devices, found {len(gpus)}")
    return 2
  mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,), devices=gpus[:2])
  M, K, N = SHAPES[platform]
  rng = np.random.default_rng(0)
  sizes = rng.multinomial(M - 100, np.ones(G) / G).astype(np.int32)
  sizes[2] = 0
  ok = True
  for axis_type in (AxisType.Auto, AxisType.Explicit):
    typed_mesh = jax.make_mesh((2,), ("x",), axis_types=(axis_type,), devices=gpus[:2])
    for shardy in (True, False):
      jax.config.update("jax_use_shardy_partitioner", shardy)
      print(f"--- {'Shardy' if shardy else 'GSPMD'}, {axis_type.name} axes")
      for dtype in (jnp.bfloat16, jnp.float32):
        operands = (rng.standard_normal((M, K)).astype(dtype),
                    (rng.standard_normal((G, K, N)) / np.sqrt(K)).astype(dtype),
                    jnp.asarray(sizes), rng.standard_normal((M, N)).astype(np.float32))
        for name in CASES:
          ok &= check_case(name, typed_mesh, gpus[0], dtype, operands)
  jax.config.update("jax_use_shardy_partitioner", True)
  ok &= check_mxfp8_stack_split(mesh, gpus[0], small=platform == "cpu")
  ok &= check_expert_parallel_mlp(mesh, gpus[0], small=platform == "cpu")
  print("all agree with one GPU" if ok else "MISMATCHES above")
  return 0 if ok else 1


if __name__ == "__main__":
  if "--platform=cpu" in sys.argv:  # before jax starts its CPU client
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=2")
  sys.exit(main())
