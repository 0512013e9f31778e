"""jgg.export: artifacts that a fresh process runs with the same numbers, checked manifests.

A module fixture exports, in this process, the grouped GEMM (forward and a
gradient), the MXFP8 quantize + dequantize ops, the MoE block and the
expert-parallel MoE layer in shard_map on 8 CPU devices, all for
platforms=("cuda", "cpu"), and saves each with its inputs and this process's
outputs. One fresh Python process (CPU only, 8 host devices) that imports only
jax_grouped_gemm then loads and calls every artifact; each test compares one.
"""

import functools
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import moe_reference
import reference
from conftest import has_gpu, requires_gpu

import jax_grouped_gemm as jgg
from jax_grouped_gemm import moe

COMMITTED_MOE = os.path.join(os.path.dirname(__file__), "data", "export_moe_v1")
# Made on this CPU-only machine with
#   JAX_PLATFORMS=cpu .venv/bin/python tools/export_moe.py tests/data/export_moe_v1 --tokens 16
#       --d-model 32 --d-ff 32 --experts 4 --top-k 2 --seed 7 --precision highest
# and never regenerated: it stands for "an artifact made by an older build".
COMMITTED_TOP_K = 2

# Runs in the fresh process: argv[1] is {name: artifact dir}. Inputs and outputs travel as
# the bits of each leaf (npz cannot hold bfloat16), typed by the manifest.
FRESH_RUNNER = r"""
import json, os, sys
import numpy as np
import jax_grouped_gemm as jgg

def bits(a):
  a = np.asarray(a)
  return a.view(np.dtype(f"u{a.dtype.itemsize}"))

results = {}
for name, path in json.loads(sys.argv[1]).items():
  try:
    artifact = jgg.export.load(path)
    with np.load(os.path.join(path, "inputs.npz")) as stored:
      leaves = [stored[f"arr_{i}"].view(aval.dtype)
                for i, aval in enumerate(artifact.exported.in_avals)]
    outputs = artifact.call_flat(*leaves)
    np.savez(os.path.join(path, "fresh_outputs.npz"), *[bits(o) for o in outputs])
    results[name] = "ok"
  except Exception as e:
    results[name] = f"{type(e).__name__}: {e}"
print("RESULTS " + json.dumps(results))
"""


def _bits(a):
  a = np.asarray(a)
  return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _cpu_mesh():
  devices = jax.devices("cpu")
  if len(devices) < 8:
    pytest.skip("needs 8 CPU devices (tests/conftest.py sets XLA_FLAGS)")
  return Mesh(np.asarray(devices[:8]), ("expert",))


def _moe_weights(rng, d_model, d_ff, experts, dtype=jnp.float32):
  scale = lambda fan_in: 1.0 / np.sqrt(fan_in)
  return moe.MoEWeights(
      router=jnp.asarray(rng.standard_normal((d_model, experts)), jnp.float32),
      gate=jnp.asarray(rng.standard_normal((experts, d_model, d_ff)) * scale(d_model), dtype),
      up=jnp.asarray(rng.standard_normal((experts, d_model, d_ff)) * scale(d_model), dtype),
      down=jnp.asarray(rng.standard_normal((experts, d_ff, d_model)) * scale(d_ff), dtype))


def _ragged_operands(dtype=np.float32):
  rng = np.random.default_rng(1)
  lhs = rng.standard_normal((37, 24)).astype(dtype)
  rhs = rng.standard_normal((5, 24, 16)).astype(dtype)
  sizes = np.array([7, 0, 12, 1, 9], np.int32)  # an empty group, 29 of 37 rows
  return lhs, rhs, sizes


def _ragged_loss(lhs, rhs, sizes, cotangent):
  return jnp.sum(jgg.ragged_dot(lhs, rhs, sizes) * cotangent)


def _cases():
  """{name: (function, args)}: args are arrays, the export's specs and the inputs."""
  lhs, rhs, sizes = _ragged_operands()
  cotangent = np.random.default_rng(2).standard_normal((37, 16)).astype(np.float32)
  x_q = jnp.asarray(np.random.default_rng(3).standard_normal((70, 64)) * 5, jnp.bfloat16)
  q_sizes = np.array([30, 0, 33], np.int32)  # ragged rows, an empty group, 63 of 70
  rng = np.random.default_rng(4)
  x_moe = rng.standard_normal((24, 16)).astype(np.float32)
  weights = _moe_weights(rng, 16, 32, 4)
  # A [G, K, N] stack quantizes through the batch-partitionable aliases of the MXFP8 targets.
  x_dense = jnp.asarray(rng.standard_normal((37, 64)), jnp.bfloat16)
  kernel = jnp.asarray(rng.standard_normal((5, 64, 32)), jnp.bfloat16)
  return {
      "ragged_dot": (jgg.ragged_dot, (lhs, rhs, sizes)),
      "ragged_dot_bf16": (jgg.ragged_dot, tuple(jnp.asarray(a, jnp.bfloat16) for a in (lhs, rhs))
                          + (sizes,)),
      "ragged_dot_grad": (jax.grad(_ragged_loss, argnums=(0, 1)), (lhs, rhs, sizes, cotangent)),
      "mxfp8": (lambda x, s: (q := jgg.mxfp8.quantize(x, s, rowwise=True, colwise=True),
                              jgg.mxfp8.dequantize(q, jnp.float32)), (x_q, q_sizes)),
      "moe_block": (functools.partial(moe.moe_block, top_k=2), (x_moe, weights)),
      "grouped_dense_mxfp8": (functools.partial(jgg.grouped_dense, recipe=jgg.MXFP8Recipe()),
                              (x_dense, kernel, sizes)),
  }


def _expert_parallel_case():
  mesh = _cpu_mesh()
  rng = np.random.default_rng(5)
  x = rng.standard_normal((8 * 6, 16)).astype(np.float32)  # 6 tokens per device
  weights = _moe_weights(rng, 16, 24, 16)  # 2 experts per device
  fn = functools.partial(moe.moe_layer, top_k=2, expert_axis="expert", mesh=mesh)
  experts = NamedSharding(mesh, P("expert"))
  shardings = (NamedSharding(mesh, P("expert", None)),
               moe.MoEWeights(NamedSharding(mesh, P()), experts, experts, experts))
  return fn, (x, weights), shardings


def _save_case(root, name, fn, args, shardings=None):
  path = os.path.join(root, name)
  specs = args if shardings is None else jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), args, shardings)
  if shardings is None:
    exported = jgg.export.export(fn, *specs)
  else:  # the expert-parallel all-to-all branches on the platform inside shard_map
    exported = jgg.export.export_per_platform(fn, *specs)
  jgg.export.save(exported, path)
  if shardings is not None:
    args = jax.device_put(args, shardings)
    expected = jax.jit(fn)(*args)
  else:
    with jax.default_device(jax.devices("cpu")[0]):  # the fresh process runs on the CPU
      expected = jax.jit(fn)(*args)
  np.savez(os.path.join(path, "inputs.npz"), *map(_bits, jax.tree_util.tree_leaves(args)))
  return path, args, jax.tree_util.tree_leaves(expected)


def _missing_target_artifact(root):
  """An artifact calling jgg_ragged_m_v999: a version no build registers (yet)."""
  def call_v999(x):
    return jax.ffi.ffi_call("jgg_ragged_m_v999", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
  exported = jgg.export.export(call_v999, jax.ShapeDtypeStruct((4,), jnp.float32), disabled_checks=[
      jax.export.DisabledSafetyCheck.custom_call("jgg_ragged_m_v999")])
  path = jgg.export.save(exported, os.path.join(root, "missing_target"))
  np.savez(os.path.join(path, "inputs.npz"), np.zeros(4, np.float32))
  return path


@pytest.fixture(scope="module")
def exported_cases(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("artifacts"))
  cases = {name: _save_case(root, name, fn, args) for name, (fn, args) in _cases().items()}
  fn, args, shardings = _expert_parallel_case()
  cases["moe_expert_parallel"] = _save_case(root, "moe_expert_parallel", fn, args, shardings)
  return root, cases


@pytest.fixture(scope="module")
def fresh_results(exported_cases):
  """Runs every artifact (and the missing-target one) in one fresh CPU-only process."""
  root, cases = exported_cases
  paths = {name: os.path.join(root, name) for name in cases}
  paths["missing_target"] = _missing_target_artifact(root)
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  done = subprocess.run([sys.executable, "-c", FRESH_RUNNER, json.dumps(paths)], env=env,
                        capture_output=True, text=True, timeout=300)
  lines = [l for l in done.stdout.splitlines() if l.startswith("RESULTS ")]
  assert done.returncode == 0 and lines, f"fresh process failed:\n{done.stdout}\n{done.stderr}"
  return json.loads(lines[-1][len("RESULTS "):])


def _fresh_outputs(path, expected):
  with np.load(os.path.join(path, "fresh_outputs.npz")) as stored:
    return [stored[f"arr_{i}"].view(e.dtype) for i, e in enumerate(expected)]


@pytest.mark.parametrize("name", ["ragged_dot", "ragged_dot_bf16", "ragged_dot_grad", "mxfp8",
                                  "moe_block", "moe_expert_parallel", "grouped_dense_mxfp8"])
def test_fresh_process_reproduces_the_function(name, exported_cases, fresh_results):
  root, cases = exported_cases
  assert fresh_results[name] == "ok", fresh_results[name]
  path, _, expected = cases[name]
  got = _fresh_outputs(path, expected)
  assert len(got) == len(expected)
  for g, e in zip(got, expected):
    # Same StableHLO, same XLA, same CPU kernels: the same bits.
    np.testing.assert_array_equal(_bits(g), _bits(np.asarray(e)), err_msg=name)


def test_fresh_outputs_match_references(exported_cases):
  """The compared originals are right too (float64 references)."""
  _, cases = exported_cases
  lhs, rhs, sizes = _ragged_operands()
  (out,) = cases["ragged_dot"][2]
  assert reference.relative_error(out, reference.ragged_m(lhs, rhs, sizes)) < 1e-5
  for name in ("moe_block", "moe_expert_parallel"):
    _, (x, w), (y, aux_loss) = cases[name]
    want, want_aux, _ = moe_reference.moe_block(
        np.asarray(x), *(np.asarray(a) for a in (w.router, w.gate, w.up, w.down)), top_k=2)
    assert reference.relative_error(y, want) < 1e-5, name
    np.testing.assert_allclose(aux_loss, want_aux, rtol=1e-5)


def test_missing_target_fails_with_a_clear_error(fresh_results):
  message = fresh_results["missing_target"]
  assert message.startswith("IncompatibleArtifactError"), message
  assert ("custom-call target jgg_ragged_m_v999 has an incompatible version: the artifact needs "
          "jgg_ragged_m version 999, this build provides version 1 on") in message


def test_manifest_lists_targets_platforms_mesh_and_specs(exported_cases):
  root, _ = exported_cases
  read = lambda name: json.load(open(os.path.join(root, name, "manifest.json")))
  info = read("ragged_dot_grad")
  assert info["library"] == {"name": "jax_grouped_gemm", "version": jgg.__version__}
  assert info["platforms"] == ["cuda", "cpu"] and info["devices"] == 1 and info["mesh"] is None
  assert [m["file"] for m in info["modules"]] == ["exported.cuda+cpu.bin"]
  assert info["targets"] == [{"name": "jgg_ragged_k_v1", "op": "jgg_ragged_k", "version": 1},
                             {"name": "jgg_ragged_m_v1", "op": "jgg_ragged_m", "version": 1}]
  assert [i["shape"] for i in info["inputs"]] == [[37, 24], [5, 24, 16], [5], [37, 16]]
  assert [o["shape"] for o in info["outputs"]] == [[37, 24], [5, 24, 16]]
  assert [t["name"] for t in read("mxfp8")["targets"]] == ["jgg_mxfp8_dequantize_v2",
                                                          "jgg_mxfp8_quantize_v2"]
  # The stack's batch-partitionable alias is ours, version-checked like its target.
  assert {"name": "jgg_mxfp8_quantize_v2_group_batched", "op": "jgg_mxfp8_quantize_group_batched",
          "version": 2} in read("grouped_dense_mxfp8")["targets"]
  assert read("grouped_dense_mxfp8")["other_custom_calls"] == []
  sharded = read("moe_expert_parallel")
  assert sharded["mesh"] == {"axis_names": ["expert"], "axis_sizes": [8]}
  assert sharded["devices"] == 8
  assert sharded["inputs"][0]["spec"] == ["expert", None]
  assert [i["spec"] for i in sharded["inputs"][1:]] == [[], ["expert"], ["expert"], ["expert"]]
  # One module per platform; XLA's own collective on GPU only (all_gathers on the CPU).
  assert [(m["platforms"], m["other_custom_calls"]) for m in sharded["modules"]] == [
      (["cuda"], ["ragged_all_to_all"]), (["cpu"], [])]
  assert sharded["platforms"] == ["cuda", "cpu"]


def test_stablehlo_of_the_moe_block_shows_typed_custom_calls():
  rng = np.random.default_rng(6)
  x = rng.standard_normal((12, 16)).astype(np.float32)
  weights = _moe_weights(rng, 16, 32, 4)
  forward = jgg.export.export(functools.partial(moe.moe_block, top_k=2), x, weights)
  text = forward.mlir_module()
  assert text.count("stablehlo.custom_call @jgg_ragged_m_v1") == 3  # gate, up, down
  assert "rhs_transposed = false" in text and "rhs_transposed = true" not in text
  loss = lambda x, w: jnp.sum(moe.moe_block(x, w, top_k=2)[0] ** 2)
  backward = jgg.export.export(jax.grad(loss, argnums=(0, 1)), x, weights).mlir_module()
  assert "rhs_transposed = true" in backward  # dgrad reads the weights transposed
  assert backward.count("stablehlo.custom_call @jgg_ragged_k_v1") == 3  # wgrad of each weight
  quantize = jgg.export.export(functools.partial(jgg.mxfp8.quantize, colwise=True), x,
                               np.array([5, 7], np.int32)).mlir_module()
  assert ("stablehlo.custom_call @jgg_mxfp8_quantize_v2" in quantize
          and "colwise = true, layout = 1 : i32, rowwise = true, swizzled = false" in quantize)


def _export_small(tmp_path, name="small", platforms=jgg.export.DEFAULT_PLATFORMS, **save_options):
  lhs, rhs, sizes = _ragged_operands()
  exported = jgg.export.export(jgg.ragged_dot, lhs, rhs, sizes, platforms=platforms)
  return pathlib.Path(jgg.export.save(exported, tmp_path / name, **save_options))


def test_load_checks_the_manifest_before_deserializing(tmp_path):
  path = _export_small(tmp_path)
  with open(path / "exported.cuda+cpu.bin", "wb") as f:
    f.write(b"not a serialized module")
  info = json.load(open(path / "manifest.json"))
  targets = info["modules"][0]["targets"]  # what load checks for the platform it runs on
  targets.append({"name": "jgg_grouped_conv_v1", "op": "jgg_grouped_conv", "version": 1})
  json.dump(info, open(path / "manifest.json", "w"))
  with pytest.raises(jgg.export.IncompatibleArtifactError,
                     match="custom-call target jgg_grouped_conv_v1 is missing: this build "
                           "registers no jgg_grouped_conv on (cpu|cuda)"):
    jgg.export.load(path)
  targets.pop()
  json.dump(info, open(path / "manifest.json", "w"))
  with pytest.raises(jgg.export.IncompatibleArtifactError, match="does not match the manifest's"):
    jgg.export.load(path)


def test_load_refuses_other_platforms_and_foreign_manifests(tmp_path):
  path = _export_small(tmp_path, platforms=("cuda",))
  with pytest.raises(jgg.export.IncompatibleArtifactError,
                     match=r"exported for platforms \['cuda'\], cannot run on cpu"):
    jgg.export.load(path, platform="cpu")
  if not has_gpu():
    with pytest.raises(jgg.export.IncompatibleArtifactError, match="has 0 cuda devices"):
      jgg.export.load(path, platform="cuda")
  info = json.load(open(path / "manifest.json"))
  info["format"] = "jax_grouped_gemm.export/2"
  json.dump(info, open(path / "manifest.json", "w"))
  with pytest.raises(jgg.export.IncompatibleArtifactError, match="manifest format"):
    jgg.export.load(path)
  with pytest.raises(jgg.export.IncompatibleArtifactError, match="no manifest.json"):
    jgg.export.load(tmp_path)


def test_params_are_bound_to_the_trailing_inputs_bit_for_bit(tmp_path):
  lhs, rhs, sizes = _ragged_operands()
  rhs = jnp.asarray(rhs, jnp.bfloat16)
  lhs = jnp.asarray(lhs, jnp.bfloat16)
  exported = jgg.export.export(jgg.ragged_dot, lhs, rhs, sizes)
  jgg.export.save(exported, tmp_path / "bound", params=(rhs, sizes))
  artifact = jgg.export.load(tmp_path / "bound")
  stored = (tmp_path / "bound" / "params.npz").read_bytes()
  assert artifact.manifest["params"] == {"file": "params.npz", "first_input": 1, "count": 2,
                                         "sha256": hashlib.sha256(stored).hexdigest()}
  assert artifact.params[0].dtype == jnp.bfloat16
  np.testing.assert_array_equal(_bits(artifact.params[0]), _bits(rhs))
  (out,) = artifact.call_flat(lhs, *artifact.params)
  np.testing.assert_array_equal(_bits(out), _bits(jax.jit(jgg.ragged_dot)(lhs, rhs, sizes)))
  with pytest.raises(ValueError, match=r"params: leaf 0 is int32\[5\], input 1 of the exported "
                                       r"function is bfloat16\[5, 24, 16\]"):
    jgg.export.save(exported, tmp_path / "wrong", params=(sizes, rhs))


def test_committed_artifact_of_an_older_build_still_runs():
  """The compatibility rule in CI: an artifact saved once (tests/data) runs on this build and
  computes the MoE block of its saved weights (float64 reference)."""
  artifact = jgg.export.load(COMMITTED_MOE)
  router, gate, up, down = artifact.params
  x = np.random.default_rng(8).standard_normal(artifact.manifest["inputs"][0]["shape"])
  (y,) = artifact.call_flat(x.astype(np.float32), *artifact.params)
  want, _, _ = moe_reference.moe_block(x, router, gate, up, down, top_k=COMMITTED_TOP_K)
  assert reference.relative_error(y, want) < 1e-5


@requires_gpu
def test_cpu_made_artifact_runs_on_the_gpu():
  """The committed artifact was made on a CPU-only machine; on CUDA it matches its CPU run."""
  artifact = jgg.export.load(COMMITTED_MOE, platform="cuda")
  x = np.random.default_rng(9).standard_normal(
      artifact.manifest["inputs"][0]["shape"]).astype(np.float32)
  gpu = jax.devices("gpu")[0]
  (on_gpu,) = artifact.call_flat(*jax.device_put((x,) + artifact.params, gpu))
  assert on_gpu.devices() == {gpu}
  cpu = jax.devices("cpu")[0]
  (on_cpu,) = artifact.call_flat(*jax.device_put((x,) + artifact.params, cpu))
  # Exported with matmul precision "highest": no TF32 on the GPU, f32 sums in another order.
  assert reference.relative_error(on_gpu, on_cpu) < 1e-4


def test_symbolic_ragged_rows_export_and_a_symbolic_batch_is_refused_by_name():
  struct = jax.ShapeDtypeStruct
  (m,) = jax.export.symbolic_shape("m")
  exported = jgg.export.export(jgg.ragged_dot, struct((m, 3), jnp.float32),
                               struct((2, 3, 4), jnp.float32), struct((2,), jnp.int32))
  x, w = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)), jnp.float32), jnp.ones((2, 3, 4))
  sizes = jnp.array([2, 3], jnp.int32)
  np.testing.assert_allclose(exported.call(x, w, sizes), reference.ragged_m(x, w, sizes),
                             rtol=1e-5, atol=1e-6)

  (b,) = jax.export.symbolic_shape("b")
  dims = jax.lax.RaggedDotDimensionNumbers((([2], [2]), ([0], [1])), [1], [0])
  with pytest.raises(TypeError, match=r"symbolic batch size \(b\) is not supported"):
    jgg.export.export(lambda x, w, s: jgg.ragged_dot_general(x, w, s, dims),
                      struct((b, 7, 3), jnp.float32), struct((3, b, 3, 4), jnp.float32),
                      struct((b, 3), jnp.int32), platforms=("cpu",))


def test_a_partitioned_jit_is_refused_with_the_way_out():
  mesh = _cpu_mesh()
  x = jax.device_put(jnp.ones((16, 3)), NamedSharding(mesh, P("expert")))
  w, sizes = jnp.ones((2, 3, 4)), jnp.array([9, 7], jnp.int32)
  with pytest.raises(NotImplementedError, match="Export a fully manual jax.shard_map"):
    jgg.export.export(jgg.ragged_dot, x, w, sizes, platforms=("cpu",))


def test_load_names_a_damaged_artifact_in_one_error(tmp_path):
  """Whatever is wrong with the files is an IncompatibleArtifactError naming the file, at
  load time: not a KeyError, a JSON, NumPy or OS error, nor a shape error at the first call."""
  lhs, rhs, sizes = _ragged_operands()
  exported = jgg.export.export(jgg.ragged_dot, lhs, rhs, sizes)
  error = jgg.export.IncompatibleArtifactError

  def damaged(name, damage):
    path = jgg.export.save(exported, tmp_path / name, params=(rhs, sizes))
    damage(pathlib.Path(path))
    return path

  manifest = lambda p: json.loads((p / "manifest.json").read_text())
  cases = {
      "not JSON": (lambda p: (p / "manifest.json").write_text("{"), "manifest.json is unreadable"),
      "no modules": (lambda p: (p / "manifest.json").write_text(json.dumps(
          {k: v for k, v in manifest(p).items() if k != "modules"})), "lacks \\['modules'\\]"),
      "module gone": (lambda p: (p / manifest(p)["modules"][0]["file"]).unlink(),
                      r"exported\.\S+\.bin, which the manifest lists"),
      "params gone": (lambda p: (p / "params.npz").unlink(), "params.npz, which the manifest"),
      "params junk": (lambda p: (p / "params.npz").write_bytes(b"junk"), "params.npz does not "
                      "match the manifest's sha256"),
  }
  for name, (damage, message) in cases.items():
    with pytest.raises(error, match=message):
      jgg.export.load(damaged(name.replace(" ", "_"), damage), platform="cpu")
  # Params of other shapes, re-hashed (a hand-edited artifact): caught at load, not at a call.
  def resized(p):
    np.savez(p / "params.npz", np.zeros((2, 24, 16), np.float32), np.asarray(sizes))
    info = manifest(p)
    info["params"]["sha256"] = hashlib.sha256((p / "params.npz").read_bytes()).hexdigest()
    (p / "manifest.json").write_text(json.dumps(info))
  with pytest.raises(error, match="does not hold the params the manifest describes"):
    jgg.export.load(damaged("resized", resized), platform="cpu")
  with pytest.raises(error, match="no manifest.json"):
    jgg.export.load(pathlib.Path(damaged("file", lambda p: None)) / "manifest.json")
  with pytest.raises(ValueError, match="platforms: jax_grouped_gemm's targets exist for"):
    jgg.export.export(jgg.ragged_dot, lhs, rhs, sizes, platforms=("cpu", "tpu"))
