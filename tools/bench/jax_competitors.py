"""Worker: times the JAX competitors of a benchmark plan (see worker_protocol).

  python -m tools.bench.jax_competitors --plan PLAN.json --records RECORDS.jsonl

Every competitor is timed the same way (jax_loop.LoopTimer): jitted fori_loops
of `calls` calls (dispatch amortised), `runs` timed runs, the median per call;
the compiled loop is checked for hoisted work and per-call copies first.
"""

from __future__ import annotations

import functools
import gc
import itertools

import numpy as np

from tools.bench import shapes as shapes_lib
from tools.bench import worker_protocol as wp
from tools.bench.jax_loop import LoopTimer

FWD, DGRAD, WGRAD = shapes_lib.PASSES
JAX_GEMM_COMPETITORS = ("ours", "lax", "pallas", "dense_jax")

# Pallas block configurations, in the order tried: the first `plan.pallas_configs`
# (default 3) that fit a pass's dimensions are timed on its first routing, and
# the fastest is kept for the others. Ordered by the first H200 run (every one
# of its winners is among the first three that fit): 128x128 tiles walked in
# bands of 4 (L2 reuse of the weights) won the large shapes, 128x192 qwen3's
# forward (N = 768), 64-row tiles the decode shape's few rows per expert.
RAGGED_DOT_CONFIGS = (
    dict(block_m=128, block_n=128, block_k=64, max_concurrent_steps=4, grid_block_n=4),
    dict(block_m=128, block_n=192, block_k=64, max_concurrent_steps=4, grid_block_n=1),
    dict(block_m=64, block_n=128, block_k=64, max_concurrent_steps=6, grid_block_n=1),
    dict(block_m=128, block_n=128, block_k=64, max_concurrent_steps=4, grid_block_n=1),
    dict(block_m=128, block_n=64, block_k=64, max_concurrent_steps=6, grid_block_n=1),
)
TRANSPOSED_RAGGED_DOT_CONFIGS = (
    dict(block_m=128, block_n=128, block_k=64, max_concurrent_steps=4, grid_block_n=1),
    dict(block_m=128, block_n=128, block_k=64, max_concurrent_steps=4, grid_block_n=4),
    dict(block_m=64, block_n=128, block_k=64, max_concurrent_steps=6, grid_block_n=1),
)
CHECK_ROWS = 512  # rows of a fwd/dgrad output checked against jax.lax
CHECK_COLUMNS = 64  # K and N columns of a wgrad output checked against jax.lax


def run_plan(plan: wp.Plan, writer: wp.RecordWriter) -> None:
  import jax  # here, after the parent has set this process's environment

  device = jax.devices()[0]
  writer.write("device", framework="jax", device=f"{device.platform}: {device.device_kind}",
               versions={"jax": jax.__version__, "jaxlib": _jaxlib_version()})
  todo = [k for k in plan.tasks("jax") if k not in set(plan.skip)]
  if not todo:
    return
  timer = LoopTimer(plan, on_progress=lambda: writer.write("progress"))
  copy_key = wp.task_key(wp.COPY_SHAPE, wp.COPY_PASS, "copy_jax")
  if copy_key in todo:
    _attempt(writer, copy_key, lambda: _time_copy(timer, plan.copy_bytes))
  gemm_competitors = [c for c in plan.competitors if c in JAX_GEMM_COMPETITORS]
  for dims, variants in _group_by_dims(plan.shapes):
    keys = {wp.task_key(s.name, p, c)
            for s in variants for p in plan.passes for c in gemm_competitors}
    if not keys & set(todo):
      continue
    print(f"[jax] {'/'.join(s.name for s in variants)}: M={dims[0]} K={dims[1]} N={dims[2]} "
          f"G={dims[3]}", flush=True)
    try:
      operands = _random_operands(dims)
    except Exception as e:  # out of memory, say: this shape's entries are n/a
      for key in sorted(keys & set(todo)):
        writer.result(key, error="operands: " + wp.short_error(e))
      continue
    for pass_name in plan.passes:
      for competitor in gemm_competitors:
        _run_competitor(plan, writer, timer, todo, competitor, pass_name, variants, operands)
    del operands
    gc.collect()


def _attempt(writer: wp.RecordWriter, key: str, measure) -> None:
  writer.start(key)
  try:
    fields = measure()
  except Exception as e:  # one competitor's failure is a table entry, not the end of the run
    print(f"[jax] {key}: n/a ({wp.short_error(e, 160)})", flush=True)
    writer.result(key, error=wp.short_error(e))
    wp.exit_if_poisoned(e)
  else:
    outcome = (f"{fields['seconds'] * 1e3:.3f} ms/call" if "seconds" in fields else
               f"n/a ({fields.get('error', '')[:160]})")
    print(f"[jax] {key}: {outcome}", flush=True)
    writer.result(key, **fields)


def _time_copy(timer: LoopTimer, nbytes: int) -> dict:
  import jax.numpy as jnp

  source = jnp.arange(max(nbytes // 4, 1), dtype=jnp.uint32)
  # The increment is an operand of its own, so the loop chains its calls through
  # it (jax_loop) and never copies the large buffer to do so.
  increment = jnp.ones((1,), jnp.uint32)
  fields = timer(_stream_add, (source, increment))
  return {**fields, "bytes_moved": 2 * source.size * 4,
          "copy_method": "x + 1 over uint32 (read + write)"}


def _stream_add(buffer, increment):
  return buffer + increment[0]


# --- operands and competitors -------------------------------------------------------

def _group_by_dims(shapes):
  """Shapes with equal (M, K, N, G), in plan order: they share operands and programs."""
  groups: dict[tuple, list] = {}
  for s in shapes:
    groups.setdefault(s.dims, []).append(s)
  return list(groups.items())


def _random_operands(dims) -> dict:
  """x, w, dy (bf16, standard normal: never zeros) and the dense weight w[0]."""
  import jax
  import jax.numpy as jnp

  m, k, n, g = dims
  kx, kw, kdy = jax.random.split(jax.random.key(sum(dims)), 3)
  x = jax.random.normal(kx, (m, k), jnp.bfloat16)
  w = jax.random.normal(kw, (g, k, n), jnp.bfloat16)
  dy = jax.random.normal(kdy, (m, n), jnp.bfloat16)
  return {"x": x, "w": w, "dy": dy, "w0": jax.block_until_ready(w[0])}


def _pass_operands(operands, pass_name):
  x, w, dy = operands["x"], operands["w"], operands["dy"]
  return {FWD: (x, w), DGRAD: (dy, w), WGRAD: (x, dy)}[pass_name]


def _dimension_numbers(pass_name):
  from jax import lax

  contracting = {FWD: ([1], [1]), DGRAD: ([1], [2]), WGRAD: ([0], [0])}[pass_name]
  return lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(contracting, ([], [])),
      lhs_ragged_dimensions=[0],
      rhs_group_dimensions=[] if pass_name == WGRAD else [0])


@functools.cache
def _grouped_fn(competitor, pass_name, pallas_config: tuple = ()):
  """fn(lhs, rhs, group_sizes) of one grouped competitor, bf16 out, f32 accumulation.

  Cached, so the routings of one shape reuse the compiled loop (group sizes are
  device values, not part of the program).
  """
  pallas_config = dict(pallas_config)
  if competitor in ("ours", "lax"):
    if competitor == "ours":
      import jax_grouped_gemm as jgg
      ragged_dot_general = jgg.ragged_dot_general
    else:
      from jax import lax
      ragged_dot_general = lax.ragged_dot_general
    dims = _dimension_numbers(pass_name)
    return lambda lhs, rhs, gs: ragged_dot_general(lhs, rhs, gs, dims)
  if competitor == "pallas":
    if pass_name == WGRAD:
      from jax.experimental.pallas.ops.gpu import transposed_ragged_dot_mgpu
      return lambda lhs, rhs, gs: transposed_ragged_dot_mgpu.transposed_ragged_dot(
          lhs, rhs, group_sizes=gs, **pallas_config)
    from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu
    return lambda lhs, rhs, gs: ragged_dot_mgpu.ragged_dot(
        lhs, rhs, group_sizes=gs, transpose_rhs=pass_name == DGRAD, **pallas_config)
  raise ValueError(competitor)


@functools.cache
def _dense_fn(pass_name):
  """fn(lhs, rhs): the dense GEMM with the same FLOPs and operand layouts as the pass."""
  from jax import lax

  contracting = {FWD: ((1,), (0,)), DGRAD: ((1,), (1,)), WGRAD: ((0,), (0,))}[pass_name]
  return lambda lhs, rhs: lax.dot_general(lhs, rhs, (contracting, ((), ())))


def _dense_operands(operands, pass_name):
  x, dy, w0 = operands["x"], operands["dy"], operands["w0"]
  return {FWD: (x, w0), DGRAD: (dy, w0), WGRAD: (x, dy)}[pass_name]


def _pallas_candidates(pass_name, shape, limit):
  m, k, n, _ = shape.dims
  if pass_name == WGRAD:  # out [G, K, N], contraction over the ragged rows
    fits = lambda c: k % c["block_m"] == 0 and n % (c["block_n"] * c["grid_block_n"]) == 0
    configs = TRANSPOSED_RAGGED_DOT_CONFIGS
  else:
    contraction, out_cols = (k, n) if pass_name == FWD else (n, k)
    fits = lambda c: (contraction % c["block_k"] == 0
                      and out_cols % (c["block_n"] * c["grid_block_n"]) == 0)
    configs = RAGGED_DOT_CONFIGS
  return list(itertools.islice((c for c in configs if fits(c)), limit))


def _config_name(config) -> str:
  short = {"block_m": "bm", "block_n": "bn", "block_k": "bk", "max_concurrent_steps": "steps",
           "grid_block_n": "gbn"}
  return " ".join(f"{short[k]}{v}" for k, v in config.items())


def _run_competitor(plan, writer, timer, todo, competitor, pass_name, variants, operands):
  import jax.numpy as jnp

  keys = [wp.task_key(s.name, pass_name, competitor) for s in variants]
  if not any(k in todo for k in keys):
    return
  if competitor == "dense_jax":  # routing does not change a dense GEMM: time it once
    first = next(k for k in keys if k in todo)
    writer.start(first)
    fields = _measure(lambda: timer(_dense_fn(pass_name), _dense_operands(operands, pass_name)))
    for key in keys:
      if key in todo:
        writer.result(key, **fields, **({} if key == first else {"reused_from": first}))
    return
  pallas_best = []  # the config the first routing's sweep chose, reused for the others
  for shape, key in zip(variants, keys):
    if key in todo:
      grouped = (*_pass_operands(operands, pass_name), jnp.asarray(shape.group_sizes()))
      _attempt(writer, key, functools.partial(_measure_grouped, plan, timer, competitor,
                                              pass_name, shape, grouped, pallas_best))


def _measure_grouped(plan, timer, competitor, pass_name, shape, operands, pallas_best) -> dict:
  if competitor == "pallas":
    if pallas_best:
      fields = timer(_grouped_fn("pallas", pass_name, tuple(pallas_best[0].items())), operands)
      return {**fields, "config": _config_name(pallas_best[0])}
    fields, config = _pallas_sweep(timer, pass_name, shape, operands, plan.pallas_configs)
    if config is not None:
      pallas_best.append(config)
    return fields
  fn = _grouped_fn(competitor, pass_name)
  checked = _check_fields(plan, fn, pass_name, shape, operands) if competitor == "ours" else {}
  return {**checked, **timer(fn, operands)}


def _measure(measure) -> dict:
  """measure()'s fields, or its error; a lost CUDA context propagates (the worker restarts)."""
  try:
    return measure()
  except Exception as e:
    if wp.poisons_context(e):
      raise
    return {"error": wp.short_error(e)}


def _pallas_sweep(timer, pass_name, shape, operands, limit):
  """Times the first `limit` fitting configs; returns the fastest's fields and config.

  Where every config fails, the fields hold the error and the config is None.
  """
  candidates = _pallas_candidates(pass_name, shape, limit)
  if not candidates:
    raise ValueError(f"no Pallas block config fits M={shape.tokens} K={shape.hidden} "
                     f"N={shape.ffn}")
  tried, best = [], None
  for config in candidates:
    fn = _grouped_fn("pallas", pass_name, tuple(config.items()))
    fields = _measure(lambda: timer(fn, operands))
    tried.append({"config": _config_name(config), **fields})
    if "seconds" in fields and (best is None or fields["seconds"] < best[1]["seconds"]):
      best = (config, fields)
  if best is None:  # report the first config's reason: usually all fail alike
    more = f" (as did {len(tried) - 1} more configs)" if len(tried) > 1 else ""
    return {"error": tried[0]["error"] + more, "candidates": tried}, None
  return {**best[1], "config": _config_name(best[0]), "candidates": tried}, best[0]


# --- correctness check ---------------------------------------------------------------

def _check_fields(plan, fn, pass_name, shape, operands) -> dict:
  """Relative error of ours against jax.lax on a sample of the full-shape output."""
  if not plan.check:
    return {}
  try:
    return {"check_rel_err": check_against_lax(fn, pass_name, shape, operands)}
  except Exception as e:
    return {"check_error": wp.short_error(e)}


def check_against_lax(fn, pass_name, shape, operands) -> float:
  """||ours - lax|| / ||lax|| (lax in f32) on sampled rows (fwd, dgrad) or K x N columns (wgrad).

  `fn` runs at the full shape, so the kernel configuration checked is the one
  timed; jax.lax (which densifies across all groups) only sees the sample.
  """
  import jax
  import jax.numpy as jnp
  from jax import lax

  lhs, rhs, gs = operands
  out = jax.jit(fn)(lhs, rhs, gs)
  sizes = shape.group_sizes()
  rng = np.random.default_rng(1234)
  dims = _dimension_numbers(pass_name)
  if pass_name == WGRAD:
    kc = np.sort(rng.choice(shape.hidden, min(CHECK_COLUMNS, shape.hidden), replace=False))
    nc = np.sort(rng.choice(shape.ffn, min(CHECK_COLUMNS, shape.ffn), replace=False))
    ref = lax.ragged_dot_general(lhs[:, kc], rhs[:, nc], gs, dims,
                                 preferred_element_type=jnp.float32)
    got = out[:, kc][:, :, nc]
  else:
    rows = np.sort(rng.choice(shape.tokens, min(CHECK_ROWS, shape.tokens), replace=False))
    group_of_row = np.repeat(np.arange(shape.experts), sizes)  # rows past the sum: no group
    in_groups = rows[rows < group_of_row.size]
    sample_sizes = np.bincount(group_of_row[in_groups], minlength=shape.experts).astype(np.int32)
    ref = lax.ragged_dot_general(lhs[rows], rhs, jnp.asarray(sample_sizes), dims,
                                 preferred_element_type=jnp.float32)
    got = out[rows]
  got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
  return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def _jaxlib_version() -> str:
  try:
    import jaxlib
    return jaxlib.__version__
  except Exception:  # pragma: no cover
    return "?"


if __name__ == "__main__":
  wp.worker_main(run_plan, __doc__)
