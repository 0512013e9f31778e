"""On the GPU machine: artifacts made under CPU-only settings run on CUDA and match; serve latency.

  PYTHONPATH=python python3 tools/device/export_gpu_check.py [--out DIR] [--requests 2000]

1. Exports two MoE blocks in a child process with JAX_PLATFORMS=cpu (as CI
   would): float32 (64 tokens, d_model 256, d_ff 512, 8 experts, top-2) and
   bfloat16 (256 tokens, 1024/2048, 8 experts, top-2), both for ("cuda",
   "cpu") with matmul precision "highest" (no TF32 in the router and combine
   dots), and runs them there on fixed random inputs: the CPU answers.
2. Loads each artifact here (platform cuda), runs it on the GPU, compares with
   the CPU answers (relative error: f32 1e-4, bf16 1e-2). The committed
   tests/data/export_moe_v1 (made on a CPU-only machine) too.
3. Serves the bfloat16 artifact (`python -m jax_grouped_gemm.serve`, GPU)
   and loads it on loopback with tools/serve_load_test.py (--threads client
   threads, 1-16 rows per request), for two batching windows; prints
   client and server latency percentiles and throughput as Markdown for
   docs/PERFORMANCE.md.
Writes DIR/export_gpu_check.json and DIR/export_gpu_check.md (DIR: --out, else
$OUT, else /tmp/jgg-export-gpu); the artifacts go to --artifacts (default: a
temporary directory). Exit status 1 if any comparison fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tools.*

try:
  import flatbuffers  # noqa: F401 - jax.export (de)serialization needs it
except ImportError:
  sys.exit("flatbuffers is missing (jax.export needs it). Offline: carry "
           ".venv/lib/python3.12/site-packages/flatbuffers, copy it to a directory on PYTHONPATH.")
import jax  # noqa: E402
import numpy as np  # noqa: E402

import jax_grouped_gemm as jgg  # noqa: E402
from tools import serve_load_test  # noqa: E402

CONFIGS = {  # name: (tokens, d_model, d_ff, experts, top_k, dtype, tolerance)
    "moe_f32": (64, 256, 512, 8, 2, "float32", 1e-4),
    "moe_bf16": (256, 1024, 2048, 8, 2, "bfloat16", 1e-2),
}
COMMITTED = ("committed_moe_v1", ROOT / "tests" / "data" / "export_moe_v1", 1e-4)

# Runs under JAX_PLATFORMS=cpu: exports the configs, then answers fixed inputs on the CPU.
CPU_SIDE = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, {root!r})
    import jax_grouped_gemm as jgg
    from tools import export_moe
    out, configs, committed = {out!r}, {configs!r}, {committed!r}
    artifacts = {{}}
    for name, (tokens, d_model, d_ff, experts, top_k, dtype, _) in configs.items():
      artifacts[name] = f"{{out}}/{{name}}"
      export_moe.export_moe(artifacts[name], tokens=tokens, d_model=d_model, d_ff=d_ff,
                            experts=experts, top_k=top_k, dtype=dtype, seed=11,
                            precision="highest")
    artifacts[committed[0]] = committed[1]
    for name, path in artifacts.items():
      artifact = jgg.export.load(path, platform="cpu")
      spec = artifact.exported.in_avals[0]
      x = np.random.default_rng(5).standard_normal(spec.shape).astype(spec.dtype)
      (y,) = artifact.call_flat(x, *artifact.params)
      np.savez(f"{{out}}/{{name}}_cpu.npz", x=x.astype(np.float32), y=np.asarray(y, np.float32))
    print("ARTIFACTS " + json.dumps(artifacts))
""")


def relative_error(actual, expected):
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  if not np.all(np.isfinite(actual)):
    return float("inf")
  return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def make_on_cpu(out: Path) -> dict[str, str]:
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  code = CPU_SIDE.format(root=str(ROOT), out=str(out), configs=CONFIGS,
                         committed=(COMMITTED[0], str(COMMITTED[1])))
  done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        timeout=900)
  lines = [l for l in done.stdout.splitlines() if l.startswith("ARTIFACTS ")]
  if done.returncode or not lines:
    raise RuntimeError(f"CPU-only export failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}")
  return json.loads(lines[-1][len("ARTIFACTS "):])


def check_on_gpu(out: Path, artifacts: dict[str, str], platform: str = "cuda") -> list[dict]:
  tolerances = {name: cfg[-1] for name, cfg in CONFIGS.items()} | {COMMITTED[0]: COMMITTED[2]}
  gpu = jax.devices(platform)[0]
  rows = []
  for name, path in artifacts.items():
    artifact = jgg.export.load(path, platform=platform)
    with np.load(out / f"{name}_cpu.npz") as cpu:
      x, y_cpu = cpu["x"], cpu["y"]
    x = x.astype(artifact.exported.in_avals[0].dtype)
    args = jax.device_put((x,) + artifact.params, gpu)
    (y,) = artifact.call_flat(*args)
    y.block_until_ready()
    start = time.perf_counter()
    for _ in range(10):
      (y,) = artifact.call_flat(*args)
    y.block_until_ready()
    call_ms = (time.perf_counter() - start) / 10 * 1e3
    error = relative_error(y, y_cpu)
    rows.append({"artifact": name, "platforms": artifact.manifest["platforms"],
                 "targets": [t["name"] for t in artifact.manifest["targets"]],
                 "on": str(next(iter(y.devices()))), "relative_error_vs_cpu": error,
                 "tolerance": tolerances[name], "ok": error <= tolerances[name],
                 "call_ms_incl_dispatch": call_ms})
    print(f"{name}: {platform} vs CPU relative error {error:.2e} (tolerance {tolerances[name]:g}) "
          f"{'ok' if rows[-1]['ok'] else 'FAILED'}; {call_ms:.3f} ms per call", flush=True)
  return rows


def serve_latency(path: str, *, requests: int, threads: int, windows_ms) -> list[dict]:
  results = []
  for window_ms in windows_ms:
    process, url = serve_load_test.spawn_server(path, window_ms=window_ms, timeout=600)
    try:
      serve_load_test.run_load(url, requests=max(threads * 4, 32), threads=threads, rows=(1, 16),
                               seed=1, timeout=120)  # warm-up: connections, first batches
      result = serve_load_test.run_load(url, requests=requests, threads=threads, rows=(1, 16),
                                        seed=2, timeout=300)
    finally:
      serve_load_test.stop_server(process)
    result["window_ms"] = window_ms
    print(f"window {window_ms} ms:\n{serve_load_test.summary(result)}", flush=True)
    results.append(result)
  return results


def markdown(device: str, checks: list[dict], serving: list[dict], command: str) -> str:
  lines = [f"Device: {device}; jax {jax.__version__}. Command: `{command}`", "",
           "| artifact (made with JAX_PLATFORMS=cpu) | targets | GPU vs CPU rel. error | "
           "tolerance | ms per call |", "|---|---|---:|---:|---:|"]
  for c in checks:
    lines.append(f"| {c['artifact']} | {', '.join(c['targets'])} | "
                 f"{c['relative_error_vs_cpu']:.1e} | {c['tolerance']:g} | "
                 f"{c['call_ms_incl_dispatch']:.3f} |")
  if serving:
    info = serving[0]["info"]
    lines += ["", f"Serving {info['artifact']} ({info['dtype']}, batch {info['batch_size']} rows "
              f"of {info['row_shape']}) on {info['device']}: {serving[0]['threads']} loopback "
              f"client threads, 1-16 rows per JSON request.", "",
              "| window ms | requests | req/s | rows/s | client p50 / p90 / p99 ms | "
              "server request p50 / p99 ms | queue->answer p50 / p99 ms | device batch p50 ms | "
              "mean batch fill |", "|---:|---:|---:|---:|---|---|---|---:|---:|"]
    for r in serving:
      c, s = r["latency_ms"], r["server"]
      lines.append(
          f"| {r['window_ms']:g} | {r['requests_ok']} | {r['requests_per_s']:.0f} | "
          f"{r['rows_per_s']:.0f} | {c['p50']:.2f} / {c['p90']:.2f} / {c['p99']:.2f} | "
          f"{s['request_ms']['p50']:.2f} / {s['request_ms']['p99']:.2f} | "
          f"{s['latency_ms']['p50']:.2f} / {s['latency_ms']['p99']:.2f} | "
          f"{s['batch_ms']['p50']:.2f} | {s['mean_batch_fill']:.2f} |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/jgg-export-gpu"))
  parser.add_argument("--requests", type=int, default=2000)
  parser.add_argument("--threads", type=int, default=8)
  parser.add_argument("--windows-ms", default="0,2", help="batching windows to measure")
  parser.add_argument("--no-serve", action="store_true", help="skip the latency measurement")
  parser.add_argument("--platform", default="cuda", help="cpu: a dry run of the script")
  parser.add_argument("--artifacts", default=None,
                      help="where to write the artifacts (default: a temporary directory; the "
                           "bf16 one holds 100 MB of weights, kept out of --out)")
  args = parser.parse_args(argv)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  artifacts_dir = Path(args.artifacts or tempfile.mkdtemp(prefix="jgg-export-"))
  artifacts_dir.mkdir(parents=True, exist_ok=True)
  if args.platform == "cuda" and jax.default_backend() != "gpu":
    sys.exit(f"needs a GPU: jax's default backend is {jax.default_backend()}")
  device = str(jax.devices()[0].device_kind)
  artifacts = make_on_cpu(artifacts_dir)
  checks = check_on_gpu(artifacts_dir, artifacts, args.platform)
  serving = [] if args.no_serve else serve_latency(
      artifacts["moe_bf16"], requests=args.requests, threads=args.threads,
      windows_ms=[float(w) for w in args.windows_ms.split(",")])
  command = "PYTHONPATH=python python3 " + " ".join([Path(__file__).relative_to(ROOT).as_posix()]
                                                   + (argv or sys.argv[1:]))
  report = markdown(device, checks, serving, command)
  print(report)
  (out / "export_gpu_check.md").write_text(report)
  for r in serving:
    r.pop("answers", None)
  (out / "export_gpu_check.json").write_text(json.dumps(
      {"device": device, "checks": checks, "serving": serving}, indent=1))
  return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
  sys.exit(main())
