"""Serves an exported artifact over HTTP (JSON), batching concurrent requests.

  python -m jax_grouped_gemm.serve ARTIFACT_DIR [--host 127.0.0.1] [--port 8000] [--window-ms 2]

Loads a directory written by `jgg.export.save` (e.g. tools/export_moe.py) with
`jgg.export.load`: no model code, only this package (which registers the
kernels). Runs on jax's default backend (GPU if present, else CPU).

What it serves: input 0 of the artifact is a batch of rows [B, ...] with B
static; the other inputs are the params saved with it (weights, bound once on
the device). Outputs whose leading dimension is B are answered row by row;
others (e.g. a batch-level loss) are not returned. Batching is only correct
when each output row depends on its input row alone: true for the MoE block
(dropless top-k routing, no capacity), not for, say, batch normalisation.

Batching: a request's rows wait at most `window` after the oldest pending
request arrived (or until B rows are pending), then up to B rows from the
queue, across requests and splitting large ones, run as one call; the rest of
the batch is zero padding. One thread drives the device, so calls never
overlap; while it runs, new requests queue and go in the next batch.

Endpoints:
  POST /v1/infer  {"inputs": [[...], ...]} (n rows of input 0)
                  -> {"outputs": [[n rows of output j], ...]}
  GET  /v1/info   batch size, row shape and dtype, outputs, platform, targets
  GET  /v1/stats  requests, rows, batches, mean batch fill; percentiles
                  (p50/p90/p99/max, ms) of latency_ms (queued -> answered),
                  batch_ms (one device call) and request_ms (body read ->
                  answer sent, JSON included)
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import http.server
import json
import signal
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_grouped_gemm import export as jgg_export

MAX_BODY_BYTES = 64 << 20
READ_TIMEOUT_S = 60.0  # per read of a request: an idle or stalled connection is closed
_PERCENTILES = (50, 90, 99)


@dataclasses.dataclass(eq=False)
class _Request:
  rows: np.ndarray
  outputs: list[np.ndarray]
  submitted: float
  taken: int = 0  # rows put into batches
  done: int = 0  # rows answered
  error: str | None = None
  finished: threading.Event = dataclasses.field(default_factory=threading.Event)


def percentiles(values) -> dict[str, float]:
  """{"p50", "p90", "p99", "max"} of `values` (ms), empty if there are none."""
  if len(values) == 0:
    return {}
  values = np.asarray(values, np.float64)
  result = {f"p{p}": float(v) for p, v in zip(_PERCENTILES, np.percentile(values, _PERCENTILES))}
  result["max"] = float(values.max())
  return result


class RowBatcher:
  """Runs an artifact on batches of rows gathered from concurrent requests."""

  def __init__(self, artifact: jgg_export.Artifact, *, window_s: float = 0.002,
               history: int = 100_000):
    info = artifact.manifest
    if artifact.exported.nr_devices != 1:
      raise ValueError(f"artifact: serves one-device artifacts, this one needs "
                       f"{artifact.exported.nr_devices} devices")
    num_inputs = len(info["inputs"]) - len(artifact.params)
    if num_inputs != 1 or not info["inputs"][0]["shape"]:
      raise ValueError(f"artifact: expected one batched input [B, ...] besides its params, got "
                       f"inputs {[i['shape'] for i in info['inputs'][:num_inputs]]}")
    if not all(isinstance(n, int) for n in info["inputs"][0]["shape"]):
      raise ValueError(f"artifact: serves static shapes, its input is "
                       f"{info['inputs'][0]['shape']} (export with a fixed batch size)")
    self.artifact = artifact
    self.batch, *row_shape = info["inputs"][0]["shape"]
    self.row_shape = tuple(row_shape)
    self.dtype = jnp.dtype(info["inputs"][0]["dtype"])
    self.served_outputs = [j for j, out in enumerate(info["outputs"])
                           if out["shape"][:1] == [self.batch]]
    if not self.served_outputs:
      raise ValueError(f"artifact: no output has the batch dimension {self.batch}")
    # Answers are JSON numbers: floats kept as float32 (bf16 widened), integers as int64.
    is_float = lambda j: jnp.issubdtype(jnp.dtype(info["outputs"][j]["dtype"]), jnp.floating)
    self._output_rows = [(tuple(info["outputs"][j]["shape"][1:]),
                          np.float32 if is_float(j) else np.int64) for j in self.served_outputs]
    self.window_s = window_s
    params = [jax.device_put(p) for p in artifact.params]  # once, on the default device
    run = jax.jit(lambda x, *p: artifact.call_flat(x, *p))
    self._run = lambda x: run(x, *params)
    self._run(np.zeros((self.batch,) + self.row_shape, self.dtype))  # compile before serving

    self._cond = threading.Condition()
    self._pending: collections.deque[_Request] = collections.deque()
    self._pending_rows = 0
    self._stopping = False
    self._stats_lock = threading.Lock()
    self._latency_ms = collections.deque(maxlen=history)
    self._batch_ms = collections.deque(maxlen=history)
    self._counts = collections.Counter()
    self._thread = threading.Thread(target=self._loop, name="jgg-serve-batcher", daemon=True)
    self._thread.start()

  # --- requests ---------------------------------------------------------------

  def check_rows(self, rows: np.ndarray):
    if rows.ndim == 0 or rows.shape[1:] != self.row_shape or rows.shape[0] == 0:
      raise ValueError(f"inputs: expected n >= 1 rows of shape {list(self.row_shape)}, got an "
                       f"array of shape {list(rows.shape)}")

  def submit(self, rows: np.ndarray) -> _Request:
    """Queues rows [n, *row_shape] (n >= 1); wait on the result's `finished`."""
    self.check_rows(rows)
    outputs = [np.empty((rows.shape[0],) + shape, dtype) for shape, dtype in self._output_rows]
    request = _Request(rows=np.asarray(rows, self.dtype), outputs=outputs,
                       submitted=time.perf_counter())
    with self._cond:
      if self._stopping:
        raise RuntimeError("the server is shutting down")
      self._pending.append(request)
      self._pending_rows += rows.shape[0]
      self._cond.notify()
    return request

  def __call__(self, rows: np.ndarray, timeout: float | None = None) -> list[np.ndarray]:
    request = self.submit(rows)
    if not request.finished.wait(timeout):
      raise TimeoutError(f"no answer within {timeout} s")
    if request.error:
      raise RuntimeError(request.error)
    return request.outputs

  def close(self):
    """Refuses new requests, answers the queued ones (no more waiting for the window), stops."""
    with self._cond:
      self._stopping = True
      self._cond.notify()
    self._thread.join()
    for request in self._pending:  # only if the device thread died: do not hang the clients
      request.error = "the server shut down before answering"
      request.finished.set()

  # --- the device thread ----------------------------------------------------------

  def _loop(self):
    while True:
      with self._cond:
        while not self._pending and not self._stopping:
          self._cond.wait()
        if not self._pending:  # stopping, and everything queued has been answered
          return
        deadline = self._pending[0].submitted + self.window_s
        while self._pending_rows < self.batch and not self._stopping:
          remaining = deadline - time.perf_counter()
          if remaining <= 0:
            break
          self._cond.wait(remaining)
        pieces = self._take_batch()
      self._run_batch(pieces)

  def _take_batch(self):
    """[(request, first row, rows, row in batch)] of up to `batch` queued rows, FIFO."""
    pieces, filled = [], 0
    while self._pending and filled < self.batch:
      request = self._pending[0]
      count = min(request.rows.shape[0] - request.taken, self.batch - filled)
      pieces.append((request, request.taken, count, filled))
      request.taken += count
      filled += count
      if request.taken == request.rows.shape[0]:
        self._pending.popleft()
    self._pending_rows -= filled
    return pieces

  def _run_batch(self, pieces):
    batch = np.zeros((self.batch,) + self.row_shape, self.dtype)
    for request, first, count, at in pieces:
      batch[at:at + count] = request.rows[first:first + count]
    start = time.perf_counter()
    try:
      results = self._run(batch)
      results = [np.asarray(results[j]).astype(dtype)
                 for j, (_, dtype) in zip(self.served_outputs, self._output_rows)]
    except Exception as e:  # noqa: BLE001 - reported to every request of the batch
      error = f"{type(e).__name__}: {e}"
      for request, *_ in pieces:
        request.error = error
        request.finished.set()
      return
    end = time.perf_counter()
    rows = sum(count for _, _, count, _ in pieces)
    finished = []
    for request, first, count, at in pieces:
      for out, result in zip(request.outputs, results):
        out[first:first + count] = result[at:at + count]
      request.done += count
      if request.done == request.rows.shape[0]:
        finished.append(request)
    with self._stats_lock:
      self._batch_ms.append((end - start) * 1e3)
      self._counts.update(batches=1, rows=rows, requests=len(finished))
      self._latency_ms.extend((end - r.submitted) * 1e3 for r in finished)
    for request in finished:
      request.finished.set()

  # --- reports ---------------------------------------------------------------------

  def stats(self) -> dict:
    with self._stats_lock:
      counts = dict(self._counts)
      latency, batch_ms = list(self._latency_ms), list(self._batch_ms)
    batches = counts.get("batches", 0)
    return {"requests": counts.get("requests", 0), "rows": counts.get("rows", 0),
            "batches": batches, "batch_size": self.batch,
            "mean_batch_fill": counts.get("rows", 0) / (batches * self.batch) if batches else 0.0,
            "latency_ms": percentiles(latency), "batch_ms": percentiles(batch_ms)}

  def info(self) -> dict:
    info = self.artifact.manifest
    return {"artifact": self.artifact.path, "function": info["function"],
            "platform": jax.default_backend(), "device": str(jax.devices()[0]),
            "batch_size": self.batch, "row_shape": list(self.row_shape),
            "dtype": str(self.dtype), "window_ms": self.window_s * 1e3,
            "outputs": [info["outputs"][j] for j in self.served_outputs],
            "targets": [t["name"] for t in info["targets"]]}


# --- HTTP -----------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
  server: "Server"
  protocol_version = "HTTP/1.1"  # keep-alive: clients reuse one connection
  # Headers and body go out as two writes; with Nagle on, the client's delayed ACK held the
  # second one back ~40 ms per request on loopback (measured: p50 49 ms vs 3 ms in the server).
  disable_nagle_algorithm = True
  # A client that sends less than its Content-Length (or nothing) gives up its thread after
  # this long instead of holding it forever.
  timeout = READ_TIMEOUT_S

  def _reply(self, status: int, body: dict):
    try:
      data = json.dumps(body, allow_nan=False).encode()  # strict JSON: no bare NaN / Infinity
    except ValueError:
      status, data = 500, json.dumps({"error": "the outputs hold NaN or Inf, which JSON "
                                               "cannot carry"}).encode()
    self.send_response(status)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def do_GET(self):  # noqa: N802 - http.server's naming
    batcher = self.server.batcher
    if self.path == "/v1/stats":
      self._reply(200, self.server.stats())
    elif self.path == "/v1/info":
      self._reply(200, batcher.info())
    else:
      self._reply(404, {"error": f"no such endpoint: GET {self.path}"})

  def do_POST(self):  # noqa: N802
    if self.path != "/v1/infer":
      self._reply(404, {"error": f"no such endpoint: POST {self.path}"})
      return
    start = time.perf_counter()
    if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
      self.close_connection = True  # the chunked body is not read
      self._reply(411, {"error": "Content-Length: required (chunked bodies are not accepted)"})
      return
    header = self.headers.get("Content-Length") or "0"
    length = int(header) if header.isascii() and header.isdigit() else -1
    if length < 0:  # unreadable: the body's end is unknown, the connection cannot be reused
      self.close_connection = True
      self._reply(400, {"error": f"Content-Length: expected a byte count, got {header!r}"})
      return
    if length > MAX_BODY_BYTES:
      self.close_connection = True  # the body is not read: the connection cannot be reused
      self._reply(413, {"error": f"body of {length} bytes exceeds {MAX_BODY_BYTES}"})
      return
    try:
      body = self.rfile.read(length)
    except TimeoutError:
      self.close_connection = True
      self._reply(408, {"error": f"the body's {length} bytes did not arrive within "
                                 f"{self.timeout:g} s"})
      return
    try:
      rows = self._rows(json.loads(body, parse_constant=_refuse_non_finite))
    except (ValueError, TypeError, KeyError, RecursionError) as e:
      self._reply(400, {"error": str(e) or type(e).__name__})
      return
    try:
      outputs = self.server.batcher(rows, timeout=self.server.request_timeout_s)
    except TimeoutError as e:
      self._reply(503, {"error": str(e)})
      return
    except RuntimeError as e:
      self._reply(500, {"error": str(e)})
      return
    self._reply(200, {"outputs": [out.tolist() for out in outputs]})
    self.server.record_request((time.perf_counter() - start) * 1e3)

  def _rows(self, body) -> np.ndarray:
    batcher = self.server.batcher
    if not isinstance(body, dict) or "inputs" not in body:
      raise KeyError('body: expected a JSON object {"inputs": [row, ...]}')
    rows = np.asarray(body["inputs"])
    if rows.dtype.kind not in "biuf":
      raise TypeError(f"inputs: expected numbers, got {rows.dtype.name} values")
    batcher.check_rows(rows)
    if rows.shape[0] > self.server.max_rows:
      raise ValueError(f"inputs: {rows.shape[0]} rows, at most {self.server.max_rows} per request")
    return rows.astype(batcher.dtype)

  def log_message(self, format, *args):  # noqa: A002 - http.server's signature
    if self.server.verbose:
      super().log_message(format, *args)


def _refuse_non_finite(token: str):
  raise ValueError(f"inputs: {token} is not a JSON number")


class Server(http.server.ThreadingHTTPServer):
  """An HTTP server (one thread per connection) in front of a RowBatcher."""
  daemon_threads = True
  request_queue_size = 128  # socketserver's 5 reset a third of 48 simultaneous connections

  def __init__(self, batcher: RowBatcher, host: str = "127.0.0.1", port: int = 0, *,
               max_rows: int | None = None, request_timeout_s: float = 60.0,
               verbose: bool = False):
    if max_rows is not None and max_rows < 1:
      raise ValueError(f"max_rows: expected at least 1, got {max_rows}")
    super().__init__((host, port), _Handler)
    self.batcher = batcher
    self.max_rows = max_rows or 64 * batcher.batch
    self.request_timeout_s = request_timeout_s
    self.verbose = verbose
    self._thread: threading.Thread | None = None
    self._request_ms = collections.deque(maxlen=100_000)
    self._request_lock = threading.Lock()

  def record_request(self, milliseconds: float):
    with self._request_lock:
      self._request_ms.append(milliseconds)

  def stats(self) -> dict:
    """The batcher's stats plus request_ms: body read to answer sent, JSON work included."""
    with self._request_lock:
      request_ms = list(self._request_ms)
    return {**self.batcher.stats(), "request_ms": percentiles(request_ms)}

  @property
  def url(self) -> str:
    host, port = self.server_address[:2]
    return f"http://{host}:{port}"

  def start(self) -> "Server":
    """Serves from a background thread; returns self."""
    self._thread = threading.Thread(target=self.serve_forever, name="jgg-serve-http", daemon=True)
    self._thread.start()
    return self

  def close(self):
    """Stops accepting, answers what is queued (with an error only if the device thread
    died), stops the batcher."""
    if self._thread is not None:
      self.shutdown()
      self._thread.join()
    self.server_close()
    self.batcher.close()


def start(artifact_path, *, host: str = "127.0.0.1", port: int = 0, window_ms: float = 2.0,
          **server_options) -> Server:
  """Loads the artifact and serves it from background threads (port 0: any free port)."""
  batcher = RowBatcher(jgg_export.load(artifact_path), window_s=window_ms * 1e-3)
  try:
    server = Server(batcher, host, port, **server_options)
  except BaseException:  # the address (in use, unknown host) or the options
    batcher.close()
    raise
  return server.start()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("artifact", help="a directory written by jax_grouped_gemm.export.save")
  parser.add_argument("--host", default="127.0.0.1")
  parser.add_argument("--port", type=int, default=8000, help="0: any free port")
  parser.add_argument("--window-ms", type=float, default=2.0,
                      help="how long the oldest queued request may wait for more rows")
  parser.add_argument("--max-rows", type=int, default=None, help="rows per request (64 batches)")
  parser.add_argument("--verbose", action="store_true", help="log every request")
  args = parser.parse_args(argv)
  if not 0 <= args.port <= 65535:
    parser.error(f"--port: expected 0 to 65535, got {args.port}")
  if args.max_rows is not None and args.max_rows < 1:
    parser.error(f"--max-rows: expected at least 1, got {args.max_rows}")
  if args.window_ms < 0:
    parser.error(f"--window-ms: expected a duration >= 0, got {args.window_ms}")
  try:
    server = start(args.artifact, host=args.host, port=args.port, window_ms=args.window_ms,
                   max_rows=args.max_rows, verbose=args.verbose)
  except (jgg_export.IncompatibleArtifactError, OSError) as e:  # the artifact; host and port
    print(f"serve: {e}", file=sys.stderr)
    return 2
  info = server.batcher.info()
  print(f"serving {args.artifact} at {server.url} on {info['device']} (batch {info['batch_size']}"
        f", rows of {info['row_shape']} {info['dtype']})", flush=True)
  stop = threading.Event()
  for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda *_: stop.set())
  stop.wait()
  stats = server.stats()
  server.close()
  print(json.dumps(stats), flush=True)


if __name__ == "__main__":
  sys.exit(main())
