"""jgg.serve: an exported MoE block answered over loopback HTTP, batched, against direct calls.

Every request goes through sockets with a timeout, and the servers are closed
by the tests, so nothing here can hang for long.
"""

import concurrent.futures
import json
import os
import socket
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reference import relative_error

import jax_grouped_gemm as jgg
from jax_grouped_gemm import serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tools
from tools import export_moe, serve_load_test  # noqa: E402

BATCH, D_MODEL = 16, 16
COMMITTED_MOE = os.path.join(os.path.dirname(__file__), "data", "export_moe_v1")


@pytest.fixture(scope="module")
def moe_artifact(tmp_path_factory):
  """(artifact dir, the jitted MoE function, its weights): rows of 16, a batch of 16."""
  path = str(tmp_path_factory.mktemp("serve") / "moe")
  fn, weights = export_moe.export_moe(path, tokens=BATCH, d_model=D_MODEL, d_ff=32, experts=4,
                                      top_k=2, seed=3)
  return path, fn, weights


@pytest.fixture(scope="module")
def server(moe_artifact):
  # A long window so that requests sent together are answered together.
  running = serve.start(moe_artifact[0], window_ms=50.0)
  yield running
  running.close()


def _post(url, body, timeout=30.0):
  connection = serve_load_test._connection(url, timeout)
  try:
    return serve_load_test.request_json(connection, "POST", "/v1/infer", body)
  finally:
    connection.close()


def _direct(fn, weights, rows):
  """The MoE function called directly, BATCH rows at a time (zero padding)."""
  out = []
  for start in range(0, rows.shape[0], BATCH):
    chunk = rows[start:start + BATCH]
    padded = np.zeros((BATCH, D_MODEL), np.float32)
    padded[:chunk.shape[0]] = chunk
    out.append(np.asarray(fn(padded, weights))[:chunk.shape[0]])
  return np.concatenate(out)


def test_concurrent_requests_are_batched_and_match_the_direct_call(moe_artifact, server):
  _, fn, weights = moe_artifact
  rng = np.random.default_rng(0)
  # Five small requests and one larger than a batch (split over two or three batches).
  requests = [rng.standard_normal((n, D_MODEL)).astype(np.float32) for n in (1, 3, 5, 2, 4, 37)]
  answers = [None] * len(requests)
  barrier = threading.Barrier(len(requests))
  before = server.stats()

  def client(i):
    barrier.wait(timeout=30)
    answers[i] = _post(server.url, {"inputs": requests[i].tolist()})

  threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join(timeout=60)
  for rows, (status, body) in zip(requests, answers):
    assert status == 200, body
    (outputs,) = body["outputs"]  # the artifact has one output with the batch dimension
    got = np.asarray(outputs, np.float32)
    assert got.shape == rows.shape
    assert relative_error(got, _direct(fn, weights, rows)) < 1e-5
  stats = server.stats()
  served_rows = sum(r.shape[0] for r in requests)
  assert stats["requests"] - before["requests"] == len(requests)
  assert stats["rows"] - before["rows"] == served_rows
  batches = stats["batches"] - before["batches"]
  assert -(-served_rows // BATCH) <= batches < len(requests) + 2  # rows of several requests shared
  for key in ("latency_ms", "batch_ms", "request_ms"):
    p = stats[key]
    assert 0 < p["p50"] <= p["p90"] <= p["p99"] <= p["max"], (key, p)


def test_info_and_bad_requests_get_clear_answers(server):
  connection = serve_load_test._connection(server.url, 30.0)
  try:
    status, info = serve_load_test.request_json(connection, "GET", "/v1/info")
    assert status == 200
    assert (info["batch_size"], info["row_shape"], info["dtype"]) == (BATCH, [D_MODEL], "float32")
    assert info["targets"] == ["jgg_ragged_m_v1"] and info["platform"] == jax.default_backend()
    status, body = serve_load_test.request_json(connection, "POST", "/v1/infer",
                                                {"inputs": [[1.0, 2.0]]})
    assert status == 400 and body["error"] == (
        "inputs: expected n >= 1 rows of shape [16], got an array of shape [1, 2]")
    status, body = serve_load_test.request_json(connection, "POST", "/v1/infer", {"x": []})
    assert status == 400 and "inputs" in body["error"]
    status, body = serve_load_test.request_json(connection, "POST", "/v1/infer",
                                                {"inputs": [["a"] * D_MODEL]})
    assert status == 400 and "expected numbers" in body["error"]
    status, body = serve_load_test.request_json(connection, "GET", "/v2/nothing")
    assert status == 404
    connection.request("POST", "/v1/infer", body=b"{not json", headers={"Content-Length": "9"})
    response = connection.getresponse()
    assert response.status == 400 and "error" in json.loads(response.read())
  finally:
    connection.close()


@pytest.mark.parametrize("length", ["abc", "-1"])
def test_unreadable_content_length_gets_a_400(server, length):
  connection = serve_load_test._connection(server.url, 30.0)
  try:
    connection.putrequest("POST", "/v1/infer")
    connection.putheader("Content-Length", length)
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 400
    assert json.loads(response.read())["error"] == (
        f"Content-Length: expected a byte count, got {length!r}")
  finally:
    connection.close()


def test_close_answers_what_is_queued_then_stops(moe_artifact):
  path, fn, weights = moe_artifact
  batcher = serve.RowBatcher(jgg.export.load(path), window_s=600.0)  # rows wait for the window...
  rows = np.random.default_rng(1).standard_normal((3, D_MODEL)).astype(np.float32)
  request = batcher.submit(rows)
  running = serve.Server(batcher).start()
  url = running.url
  running.close()  # ...until the server closes: then they are answered at once
  assert request.finished.is_set() and request.error is None
  assert relative_error(request.outputs[0], _direct(fn, weights, rows)) < 1e-5
  with pytest.raises(RuntimeError, match="shutting down"):
    batcher.submit(np.ones((1, D_MODEL), np.float32))
  host, port = url.removeprefix("http://").split(":")
  with pytest.raises(OSError):
    socket.create_connection((host, int(port)), timeout=5).close()


def test_refuses_artifacts_it_cannot_batch(tmp_path):
  lhs = np.ones((8, 4), np.float32)
  exported = jgg.export.export(jgg.ragged_dot, lhs, np.ones((2, 4, 4), np.float32),
                               np.array([3, 5], np.int32))
  jgg.export.save(exported, tmp_path / "unbound")  # three inputs, no params
  with pytest.raises(ValueError, match=r"expected one batched input \[B, \.\.\.\] besides its "
                                       r"params, got inputs \[\[8, 4\], \[2, 4, 4\], \[2\]\]"):
    serve.RowBatcher(jgg.export.load(tmp_path / "unbound"))
  (batch,) = jax.export.symbolic_shape("b")
  weights = np.ones((2, 4, 4), np.float32)
  exported = jgg.export.export(lambda x, w: jgg.ragged_dot(x, w, jnp.array([3, 5], jnp.int32)),
                               jax.ShapeDtypeStruct((batch, 4), jnp.float32), weights)
  jgg.export.save(exported, tmp_path / "symbolic", params=[weights])
  with pytest.raises(ValueError, match=r"serves static shapes, its input is \['b', 4\]"):
    serve.RowBatcher(jgg.export.load(tmp_path / "symbolic"))


def test_command_line_server_under_the_load_test():
  """`python -m jax_grouped_gemm.serve` on a free port, loaded by tools/serve_load_test.py,
  stopped with SIGTERM (it prints its stats); answers checked against direct calls."""
  process, url = serve_load_test.spawn_server(COMMITTED_MOE, window_ms=2.0, timeout=120)
  try:
    result = serve_load_test.run_load(url, requests=24, threads=3, rows=(1, 6), timeout=60,
                                      keep=4)
  finally:
    printed = serve_load_test.stop_server(process, timeout=60)
  assert process.returncode == 0, printed
  assert result["error_count"] == 0 and result["requests_ok"] == 24 and not result["timed_out"]
  assert result["latency_ms"]["p50"] <= result["latency_ms"]["p99"]
  final_stats = json.loads(printed.strip().splitlines()[-1])
  assert (final_stats["requests"], final_stats["rows"]) == (24, result["rows_ok"])
  serve_load_test.check_answers(jgg.export.load(COMMITTED_MOE), result["answers"], rtol=1e-5)


def test_malformed_bodies_get_4xx_and_the_server_stays_up(server):
  """Nesting past the parser's recursion limit, NaN / Infinity tokens (not JSON numbers) and
  chunked bodies get a 4xx with a message; the server then answers normally."""
  def raw(body: bytes, headers: dict):
    connection = serve_load_test._connection(server.url, 30.0)
    try:
      connection.request("POST", "/v1/infer", body=body, headers=headers)
      response = connection.getresponse()
      return response.status, json.loads(response.read())
    finally:
      connection.close()

  nested = b"[" * 100_000 + b"]" * 100_000
  status, body = raw(nested, {"Content-Length": str(len(nested))})
  assert status == 400 and "recursion" in body["error"]
  for token in ("NaN", "Infinity", "-Infinity"):
    text = json.dumps({"inputs": [[0.5] * (D_MODEL - 1)]})[:-3] + f", {token}]]}}"
    status, body = raw(text.encode(), {"Content-Length": str(len(text))})
    assert status == 400 and body["error"] == f"inputs: {token} is not a JSON number", body
  status, body = raw(b'{"inputs": []}', {"Transfer-Encoding": "chunked"})
  assert status == 411 and "Content-Length: required" in body["error"]
  status, body = _post(server.url, {"inputs": [[0.25] * D_MODEL]})
  assert status == 200 and np.asarray(body["outputs"][0]).shape == (1, D_MODEL)


def test_many_simultaneous_connections_are_all_answered(moe_artifact):
  """More connections at once than socketserver's default backlog of 5 held."""
  running = serve.start(moe_artifact[0], window_ms=5.0)
  try:
    rows = [[float(i % 7)] * D_MODEL for i in range(3)]
    with concurrent.futures.ThreadPoolExecutor(48) as pool:
      answers = list(pool.map(lambda _: _post(running.url, {"inputs": rows}), range(48)))
    assert [status for status, _ in answers] == [200] * 48
  finally:
    running.close()


def test_command_line_errors_are_one_line(tmp_path, capsys):
  assert serve.main([str(tmp_path / "nothing")]) == 2
  assert capsys.readouterr().err.startswith(f"serve: {tmp_path / 'nothing'}: no manifest.json")
  for flags, message in ((["--port", "70000"], "--port: expected 0 to 65535"),
                         (["--max-rows", "0"], "--max-rows: expected at least 1")):
    with pytest.raises(SystemExit):
      serve.main([str(tmp_path)] + flags)
    assert message in capsys.readouterr().err


def test_a_body_shorter_than_its_content_length_times_out_with_a_408(server, monkeypatch):
  monkeypatch.setattr(serve._Handler, "timeout", 0.5)  # READ_TIMEOUT_S, shortened
  with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), 30) as s:
    s.sendall(b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"inputs\"")
    chunks = []
    while chunk := s.recv(4096):  # headers and body come as two writes; then the server closes
      chunks.append(chunk)
    reply = b"".join(chunks).decode()
  assert reply.startswith("HTTP/1.1 408") and "did not arrive within" in reply, reply
