"""A bounded loopback load test of jax_grouped_gemm.serve.

  .venv/bin/python tools/serve_load_test.py --artifact DIR [--requests 400 --threads 4
      --rows 1-8 --window-ms 2 --check 16 --json OUT.json]
  .venv/bin/python tools/serve_load_test.py --url http://127.0.0.1:8000 [...]

With --artifact it starts `python -m jax_grouped_gemm.serve` in a child
process on 127.0.0.1 (a free port) and stops it at the end (SIGTERM, then the
server prints its stats); with --url it loads a running one. A few client
threads send --requests POST /v1/infer requests in all (each of a random
number of rows in --rows, random normal values), one keep-alive connection per
thread, and stop after --timeout seconds whatever is left. Prints client-side
latency p50/p90/p99, throughput (requests/s, rows/s), errors, and the server's
own /v1/stats (batches, batch fill, its latency and batch time percentiles).
--check N (with --artifact) compares the first N answers with a direct call of
the artifact on the same rows.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import numpy as np


def _connection(url: str, timeout: float) -> http.client.HTTPConnection:
  parts = urllib.parse.urlsplit(url)
  return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)


def spawn_server(artifact: str, *, window_ms: float = 2.0, timeout: float = 300.0,
                 env=None) -> tuple[subprocess.Popen, str]:
  """Starts the server on a free loopback port in a child process; returns (process, url).

  The child does not preallocate GPU memory (XLA_PYTHON_CLIENT_PREALLOCATE=false
  unless env says otherwise): this process may already hold jax's default 75%.
  """
  env = dict(os.environ if env is None else env)
  env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  process = subprocess.Popen(
      [sys.executable, "-m", "jax_grouped_gemm.serve", artifact, "--host", "127.0.0.1",
       "--port", "0", "--window-ms", str(window_ms)],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
  deadline = time.monotonic() + timeout
  output = []
  while time.monotonic() < deadline:  # the first line names the URL once it serves
    line = process.stdout.readline()
    if not line:
      break
    output.append(line)
    match = re.search(r" at (http://\S+)", line)
    if line.startswith("serving") and match:
      return process, match.group(1)
  process.kill()
  process.wait()
  raise RuntimeError("the server did not start:\n" + "".join(output)[-4000:])


def stop_server(process: subprocess.Popen, timeout: float = 60.0) -> str:
  """SIGTERM, wait (kill after `timeout`); returns what it printed after starting."""
  process.send_signal(signal.SIGTERM)
  try:
    output, _ = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    output, _ = process.communicate()
  return output


def request_json(connection, method: str, path: str, body=None):
  """(status, decoded JSON) of one request on a kept-alive connection."""
  data = None if body is None else json.dumps(body).encode()
  headers = {} if data is None else {"Content-Type": "application/json"}
  connection.request(method, path, body=data, headers=headers)
  response = connection.getresponse()
  return response.status, json.loads(response.read())


def run_load(url: str, *, requests: int = 400, threads: int = 4, rows=(1, 8), seed: int = 0,
             timeout: float = 120.0, keep: int = 0) -> dict:
  """Sends `requests` requests from `threads` threads; returns the measurements.

  keep: how many (rows, outputs) pairs of the first successful requests to
  return under "answers" (for checking).
  """
  info_connection = _connection(url, timeout)
  _, info = request_json(info_connection, "GET", "/v1/info")
  row_shape = tuple(info["row_shape"])
  deadline = time.monotonic() + timeout
  counter = iter(range(requests))
  lock = threading.Lock()
  latencies, errors, answers, row_count = [], [], [], [0]

  def client(index):
    rng = np.random.default_rng([seed, index])
    connection = _connection(url, timeout)
    try:
      while time.monotonic() < deadline:
        with lock:
          number = next(counter, None)
        if number is None:
          return
        n = int(rng.integers(rows[0], rows[1] + 1))
        x = rng.standard_normal((n,) + row_shape).astype(np.float32)
        start = time.perf_counter()
        try:
          status, body = request_json(connection, "POST", "/v1/infer", {"inputs": x.tolist()})
        except (OSError, http.client.HTTPException) as e:
          status, body = None, {"error": f"{type(e).__name__}: {e}"}
          connection.close()
          connection = _connection(url, timeout)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        with lock:
          if status == 200:
            latencies.append(elapsed_ms)
            row_count[0] += n
            if len(answers) < keep:
              answers.append((x, [np.asarray(out, np.float32) for out in body["outputs"]]))
          else:
            errors.append(f"{status}: {body.get('error')}")
    finally:
      connection.close()

  start = time.perf_counter()
  workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(threads)]
  for worker in workers:
    worker.start()
  for worker in workers:
    worker.join(max(0.0, deadline - time.monotonic()) + 5.0)
  wall_s = time.perf_counter() - start
  _, server_stats = request_json(info_connection, "GET", "/v1/stats")
  info_connection.close()
  done = len(latencies)
  result = {
      "url": url, "requests_sent": done + len(errors), "requests_ok": done, "errors": errors[:10],
      "error_count": len(errors), "threads": threads, "rows_per_request": list(rows),
      "rows_ok": row_count[0], "wall_s": wall_s, "requests_per_s": done / wall_s,
      "rows_per_s": row_count[0] / wall_s,
      "latency_ms": _percentiles(latencies), "server": server_stats, "info": info,
      "timed_out": any(worker.is_alive() for worker in workers) or done + len(errors) < requests,
  }
  if keep:
    result["answers"] = answers
  return result


def _percentiles(values):
  if not values:
    return {}
  p50, p90, p99 = np.percentile(values, (50, 90, 99))
  return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(max(values))}


def check_answers(artifact, answers, *, rtol: float = 1e-5) -> float:
  """Largest relative error of the served answers vs direct calls of the artifact on the
  same rows (padded to its batch); raises AssertionError above rtol."""
  batch = artifact.manifest["inputs"][0]["shape"][0]
  dtype = artifact.exported.in_avals[0].dtype
  worst = 0.0
  for x, outputs in answers:
    padded = np.zeros((batch,) + x.shape[1:], dtype)
    padded[:x.shape[0]] = x.astype(dtype)
    direct = artifact.call_flat(padded, *artifact.params)
    served = [d for d in direct if d.shape[:1] == (batch,)]
    for got, want in zip(outputs, served):
      want = np.asarray(want, np.float64)[:x.shape[0]]
      error = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
      worst = max(worst, float(error))
  assert worst <= rtol, f"served answers differ from direct calls: relative error {worst:.3g}"
  return worst


def summary(result: dict) -> str:
  latency, server = result["latency_ms"], result["server"]
  lines = [
      f"{result['requests_ok']} requests ok, {result['error_count']} errors, "
      f"{result['threads']} threads, {result['rows_per_request'][0]}-"
      f"{result['rows_per_request'][1]} rows each, {result['wall_s']:.2f} s"
      + (" (stopped at the time limit)" if result["timed_out"] else ""),
      f"client latency ms: p50 {latency.get('p50', float('nan')):.2f}  "
      f"p90 {latency.get('p90', float('nan')):.2f}  p99 {latency.get('p99', float('nan')):.2f}",
      f"throughput: {result['requests_per_s']:.1f} requests/s, {result['rows_per_s']:.1f} rows/s",
      f"server: {server['batches']} batches of {server['batch_size']} rows, mean fill "
      f"{server['mean_batch_fill']:.2f}, latency ms {_fmt(server['latency_ms'])}, batch ms "
      f"{_fmt(server['batch_ms'])}, request ms {_fmt(server['request_ms'])}",
  ]
  return "\n".join(lines)


def _fmt(p):
  return " ".join(f"{k} {v:.2f}" for k, v in p.items()) if p else "n/a"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  target = parser.add_mutually_exclusive_group(required=True)
  target.add_argument("--artifact", help="serve this artifact in-process on a free loopback port")
  target.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000")
  parser.add_argument("--requests", type=int, default=400)
  parser.add_argument("--threads", type=int, default=4)
  parser.add_argument("--rows", default="1-8", help="rows per request: N or LO-HI")
  parser.add_argument("--window-ms", type=float, default=2.0, help="with --artifact")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--timeout", type=float, default=120.0, help="seconds, for the whole run")
  parser.add_argument("--check", type=int, default=0, help="verify the first N answers")
  parser.add_argument("--json", help="write the result here")
  args = parser.parse_args(argv)
  lo, _, hi = args.rows.partition("-")
  rows = (int(lo), int(hi or lo))
  if args.check and not args.artifact:
    parser.error("--check needs --artifact")

  process, url = None, args.url
  if args.artifact:
    process, url = spawn_server(args.artifact, window_ms=args.window_ms)
  try:
    result = run_load(url, requests=args.requests, threads=args.threads, rows=rows,
                      seed=args.seed, timeout=args.timeout, keep=args.check)
  finally:
    if process is not None:
      print("server:", stop_server(process).strip())
  print(summary(result))
  if args.check:
    import jax_grouped_gemm as jgg
    worst = check_answers(jgg.export.load(args.artifact), result.pop("answers"))
    print(f"checked {args.check} answers against direct calls: max relative error {worst:.2e}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  return 1 if result["error_count"] or result["timed_out"] else 0


if __name__ == "__main__":
  sys.exit(main())
