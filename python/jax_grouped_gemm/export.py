"""Exporting functions that call this package's kernels: `jax.export` plus a manifest.

  exported = jgg.export.export(fn, *arg_specs, platforms=("cuda", "cpu"))
  jgg.export.save(exported, "artifacts/moe", params=weights)  # a directory
  artifact = jgg.export.load("artifacts/moe")  # checks the manifest before deserializing
  y = artifact.call(x, weights)  # or artifact.call_flat(x, *artifact.params)

`export` is `jax.export.export` with the safety check disabled for every
custom-call target this build registers (jax refuses custom calls it gives no
compatibility guarantee for; ours carry their own ABI version, below) and for
the XLA collective `ragged_all_to_all` that the expert-parallel shard_map path
emits on GPU. One-device functions and fully manual `shard_map` programs
export; a jit over several devices with sharded operands does not (the ops'
`custom_partitioning` keeps a Python callback, see partitioning.py).

One module per platform for shard_map programs that branch on the platform
(`export_per_platform`). A multi-platform module selects each
`lax.platform_dependent` branch with a platform index; inside a shard_map body
that index reaches XLA as an ordinary value, so XLA compiles every branch:
the expert-parallel all-to-all's GPU branch (ragged-all-to-all) then fails to
compile on XLA:CPU (jax 0.11.2). Exported once per platform there is nothing
to select; `save` takes the list and `load` picks the running platform's.

Versioned targets. Every target is named `jgg_<op>_v<N>`; N is the ABI of the
call (operands, attributes and their types, semantics) and is bumped on any
incompatible change. An artifact runs on a build iff that build registers every
`jgg_<op>_v<N>` the artifact names, for the platform it runs on; a build may
keep registering old versions, it never changes what an existing version
computes. `load` checks this from the manifest before deserializing and names
the missing target, or the versions this build has instead.

The directory `save` writes:
  exported.<platforms>.bin  `Exported.serialize()` of each module, e.g.
                  exported.cuda+cpu.bin (needs the flatbuffers package)
  manifest.json   format, library and jax versions; per module its file,
                  sha256, platforms and our targets with their versions (read
                  from its StableHLO) and other custom calls; the union of
                  platforms and targets; device count, mesh axis names and
                  sizes, input/output shapes, dtypes and partition specs; the
                  params file if any
  params.npz      optional: arrays bound to the trailing inputs (weights), so a
                  server can run the artifact without the model code
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import re
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from jax_grouped_gemm import _native, batch_partitionable
from jax_grouped_gemm.mxfp8 import quantize as _mxfp8_quantize  # noqa: F401  (registers aliases)
from jax_grouped_gemm.moe import MoEWeights
from jax_grouped_gemm.mxfp8.tensor import MXFP8Tensor

FORMAT = "jax_grouped_gemm.export/1"
DEFAULT_PLATFORMS = ("cuda", "cpu")
MANIFEST_FILE = "manifest.json"
PARAMS_FILE = "params.npz"

# XLA's own custom calls that our code paths emit and jax's export allowlist
# lacks: jax.lax.ragged_all_to_all lowers to one on GPU (expert_parallel.py).
# It belongs to XLA, so its compatibility follows the XLA version, not ours.
XLA_CUSTOM_CALLS = ("ragged_all_to_all",)

# jax.ffi platform names -> jax.export platform names.
_EXPORT_PLATFORM = {"cpu": "cpu", "CUDA": "cuda"}
_CUSTOM_CALL = re.compile(r"stablehlo\.custom_call @([A-Za-z0-9_.$-]+)")
# jgg_<op>_v<N>, and its batch-partitionable alias jgg_<op>_v<N>_group_batched (op
# "jgg_<op>_group_batched": the alias of another version is as incompatible as the target).
_OUR_TARGET = re.compile(r"^(jgg_\w+?)_v(\d+)(" + batch_partitionable.BATCHED_SUFFIX + ")?$")


class IncompatibleArtifactError(RuntimeError):
  """An artifact this build or this process cannot run (raised by `load`)."""


# --- pytrees of this package that exported signatures may contain -------------------

def _register_pytree_serialization(nodetype, name):
  # Aux data of a register_dataclass node: the tuple of its static fields (strings here).
  try:
    jax.export.register_pytree_node_serialization(
        nodetype, serialized_name=name,
        serialize_auxdata=lambda aux: json.dumps(list(aux)).encode(),
        deserialize_auxdata=lambda data: tuple(json.loads(data)))
  except ValueError:  # registered already: this module was re-imported
    pass


_register_pytree_serialization(MoEWeights, "jax_grouped_gemm.MoEWeights")
_register_pytree_serialization(MXFP8Tensor, "jax_grouped_gemm.MXFP8Tensor")


# --- export ----------------------------------------------------------------------

def registered_targets() -> dict[str, tuple[str, ...]]:
  """{export platform ("cpu", "cuda"): target names this build registers for it, the
  batch-partitionable aliases included}."""
  aliases = batch_partitionable.registered_targets()
  return {_EXPORT_PLATFORM.get(p, p.lower()): tuple(names) + aliases.get(p, ())
          for p, names in _native.register_targets().items()}


def custom_call_checks() -> list[jax.export.DisabledSafetyCheck]:
  """The `disabled_checks` that let jax.export serialize calls of our targets."""
  names = sorted({n for names in registered_targets().values() for n in names})
  return [jax.export.DisabledSafetyCheck.custom_call(n) for n in names + list(XLA_CUSTOM_CALLS)]


def export(fn, *args_specs, platforms: Sequence[str] | None = DEFAULT_PLATFORMS,
           disabled_checks: Sequence[jax.export.DisabledSafetyCheck] = (),
           **kwargs_specs) -> jax.export.Exported:
  """`jax.export.export(jax.jit(fn), platforms, disabled_checks)(*args_specs, **kwargs_specs)`.

  fn: a function (jitted here if it is not) calling jgg ops, on one device or
    as a fully manual `jax.shard_map` (give args_specs shardings on the mesh).
  args_specs, kwargs_specs: jax.ShapeDtypeStruct (or arrays) pytrees.
  platforms: the platforms the artifact serves; the default runs on CUDA and
    CPU (every branch is lowered for each). None: the default backend's only.
  disabled_checks: more checks to disable, besides ours (custom_call_checks()).
  """
  jitted = fn if hasattr(fn, "trace") else jax.jit(fn)  # jax.export takes jitted functions only
  platforms = None if platforms is None else tuple(platforms)
  known = set(DEFAULT_PLATFORMS) | set(registered_targets())
  unknown = sorted(set(platforms or ()) - known)
  if unknown:
    raise ValueError(f"platforms: jax_grouped_gemm's targets exist for {sorted(known)}, not "
                     f"{unknown}")
  checks = custom_call_checks() + list(disabled_checks)
  try:
    return jax.export.export(jitted, platforms=platforms, disabled_checks=checks)(
        *args_specs, **kwargs_specs)
  except NotImplementedError as e:
    if "host_callbacks" not in str(e):
      raise
    raise NotImplementedError(
        "fn: a jit partitioned over several devices does not export: the jgg ops' "
        "custom_partitioning keeps a Python callback in the program. Export a fully manual "
        "jax.shard_map of it instead (the ops then lower to plain custom calls).") from e


def export_per_platform(fn, *args_specs, platforms: Sequence[str] = DEFAULT_PLATFORMS,
                        disabled_checks: Sequence[jax.export.DisabledSafetyCheck] = (),
                        **kwargs_specs) -> tuple[jax.export.Exported, ...]:
  """`export` once for each platform: for shard_map programs that branch on the
  platform (see the module docstring). `save` takes the tuple."""
  return tuple(export(fn, *args_specs, platforms=(platform,), disabled_checks=disabled_checks,
                      **kwargs_specs) for platform in platforms)


# --- the manifest ------------------------------------------------------------------

def _parse_target(name: str) -> tuple[str, int] | None:
  """(op, version) of one of our custom-call targets; None for anyone else's."""
  match = _OUR_TARGET.match(name)
  return (match.group(1) + (match.group(3) or ""), int(match.group(2))) if match else None


def custom_calls(module_text: str) -> tuple[list[dict], list[str]]:
  """(our targets [{name, op, version}], other custom-call targets) named in StableHLO text."""
  names = sorted(set(_CUSTOM_CALL.findall(module_text)))
  ours, others = [], []
  for name in names:
    parsed = _parse_target(name)
    if parsed:
      ours.append({"name": name, "op": parsed[0], "version": parsed[1]})
    else:
      others.append(name)
  return ours, others


def _spec_json(sharding):
  if not isinstance(sharding, NamedSharding):
    return None
  return [list(entry) if isinstance(entry, tuple) else entry for entry in sharding.spec]


def _mesh_json(shardings):
  for sharding in shardings:
    if isinstance(sharding, NamedSharding) and sharding.mesh.axis_names:
      mesh = sharding.mesh
      return {"axis_names": list(mesh.axis_names), "axis_sizes": [int(s) for s in mesh.axis_sizes]}
  return None


def _avals_json(avals, shardings):
  return [{"shape": [d if isinstance(d, int) else str(d) for d in aval.shape],
           "dtype": str(aval.dtype), "spec": _spec_json(sharding)}
          for aval, sharding in zip(avals, shardings)]


def _module_json(exported: jax.export.Exported) -> dict[str, Any]:
  ours, others = custom_calls(exported.mlir_module())
  return {"file": f"exported.{'+'.join(exported.platforms)}.bin",
          "platforms": list(exported.platforms), "targets": ours, "other_custom_calls": others,
          "calling_convention_version": exported.calling_convention_version}


def manifest(modules: Sequence[jax.export.Exported]) -> dict[str, Any]:
  """The manifest of one function's modules (without the sha256s and params `save` adds)."""
  from jax_grouped_gemm import __version__  # the package imports this module
  first = modules[0]
  in_shardings = first.in_shardings_jax()
  out_shardings = first.out_shardings_jax(None)
  info = {
      "format": FORMAT,
      "library": {"name": "jax_grouped_gemm", "version": __version__},
      "jax_version": jax.__version__,
      "function": first.fun_name,
      "modules": [_module_json(m) for m in modules],
      "devices": first.nr_devices,
      "mesh": _mesh_json(tuple(in_shardings) + tuple(out_shardings)),
      "inputs": _avals_json(first.in_avals, in_shardings),
      "outputs": _avals_json(first.out_avals, out_shardings),
      "params": None,
  }
  info["platforms"] = [p for m in info["modules"] for p in m["platforms"]]
  by_name = {t["name"]: t for m in info["modules"] for t in m["targets"]}
  info["targets"] = [by_name[name] for name in sorted(by_name)]
  info["other_custom_calls"] = sorted({c for m in info["modules"] for c in m["other_custom_calls"]})
  return info


def _check_modules(modules: Sequence[jax.export.Exported]):
  if not modules:
    raise ValueError("exported: no module to save")
  platforms = [p for m in modules for p in m.platforms]
  if len(set(platforms)) != len(platforms):
    raise ValueError(f"exported: modules for overlapping platforms {platforms}")
  first = modules[0]
  for m in modules[1:]:
    if (m.in_avals, m.out_avals, m.in_tree, m.out_tree, m.nr_devices) != (
        first.in_avals, first.out_avals, first.in_tree, first.out_tree, first.nr_devices):
      raise ValueError(f"exported: the {m.platforms} module's signature differs from the "
                       f"{first.platforms} one's: export the same function with the same specs")


# --- params: arrays bound to the trailing inputs -------------------------------------

def _storable(a: np.ndarray) -> np.ndarray:
  # npz cannot hold bfloat16 / float8 faithfully: store the bits, the manifest has the dtype.
  return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.itemsize in (1, 2, 4, 8) else a


def _check_params(leaves, inputs):
  if len(leaves) > len(inputs):
    raise ValueError(f"params: {len(leaves)} arrays for a function of {len(inputs)} inputs")
  first = len(inputs) - len(leaves)
  for i, (leaf, spec) in enumerate(zip(leaves, inputs[first:])):
    if list(leaf.shape) != spec["shape"] or str(leaf.dtype) != spec["dtype"]:
      raise ValueError(f"params: leaf {i} is {leaf.dtype}{list(leaf.shape)}, input {first + i} "
                       f"of the exported function is {spec['dtype']}{spec['shape']}")
  return first


def save(exported: jax.export.Exported | Sequence[jax.export.Exported],
         path: str | os.PathLike, *, params=None) -> str:
  """Writes `exported` and its manifest into the directory `path` (created); returns it.

  exported: one module, or one per platform (export_per_platform) of the same
    function and specs.
  params: optional pytree of arrays bound to the trailing inputs (flattened
    order), e.g. a model's weights, stored in params.npz.
  """
  modules = (exported,) if isinstance(exported, jax.export.Exported) else tuple(exported)
  _check_modules(modules)
  _require_flatbuffers()
  path = os.fspath(path)
  os.makedirs(path, exist_ok=True)
  info = manifest(modules)
  if params is not None:
    leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(params)]
    first = _check_params(leaves, info["inputs"])
    stored = io.BytesIO()
    np.savez(stored, *[_storable(leaf) for leaf in leaves])
    with open(os.path.join(path, PARAMS_FILE), "wb") as f:
      f.write(stored.getvalue())
    info["params"] = {"file": PARAMS_FILE, "first_input": first, "count": len(leaves),
                      "sha256": hashlib.sha256(stored.getvalue()).hexdigest()}
  for module, entry in zip(modules, info["modules"]):
    serialized = bytes(module.serialize())
    with open(os.path.join(path, entry["file"]), "wb") as f:
      f.write(serialized)
    entry["sha256"] = hashlib.sha256(serialized).hexdigest()
  with open(os.path.join(path, MANIFEST_FILE), "w") as f:
    json.dump(info, f, indent=1)
    f.write("\n")
  return path


def _require_flatbuffers():
  try:
    import flatbuffers  # noqa: F401
  except ImportError as e:
    raise ImportError("jax.export (de)serialization needs the flatbuffers package (pinned in "
                      "requirements.txt): pip install flatbuffers") from e


# --- load ---------------------------------------------------------------------------

def target_problems(targets: Sequence[dict], platform: str) -> list[str]:
  """What this build lacks of `targets` (manifest entries) on `platform`; empty if nothing."""
  available = registered_targets().get(platform, ())
  versions: dict[str, list[int]] = {}
  for name in available:
    parsed = _parse_target(name)
    if parsed:
      versions.setdefault(parsed[0], []).append(parsed[1])
  problems = []
  for target in targets:
    if target["name"] in available:
      continue
    have = sorted(versions.get(target["op"], []))
    if have:
      problems.append(
          f"custom-call target {target['name']} has an incompatible version: the artifact needs "
          f"{target['op']} version {target['version']}, this build provides version "
          f"{', '.join(map(str, have))} on {platform}")
    else:
      problems.append(f"custom-call target {target['name']} is missing: this build registers no "
                      f"{target['op']} on {platform}" +
                      ("" if available else f" (no {platform} handlers built)"))
  return problems


@dataclasses.dataclass(frozen=True)
class Artifact:
  """A loaded artifact: the running platform's deserialized module, the manifest, the params."""
  path: str
  manifest: dict
  exported: jax.export.Exported
  params: tuple[np.ndarray, ...]
  platform: str  # the one it was loaded for: "cuda", "cpu"

  def mesh(self, devices=None) -> Mesh | None:
    """A mesh of the artifact's axis names and sizes over `devices` (default: the first
    devices of its platform)."""
    if self.manifest["mesh"] is None:
      return None
    names, sizes = self.manifest["mesh"]["axis_names"], self.manifest["mesh"]["axis_sizes"]
    devices = list(_devices(self.platform) if devices is None else devices)[:math.prod(sizes)]
    if len(devices) < math.prod(sizes):
      raise IncompatibleArtifactError(
          f"{self.path}: the mesh {dict(zip(names, sizes))} needs {math.prod(sizes)} devices, got "
          f"{len(devices)}")
    abstract = next(s.mesh for s in self.exported.in_shardings_jax() + tuple(
        self.exported.out_shardings_jax(None)) if isinstance(s, NamedSharding))
    return Mesh(np.asarray(devices).reshape(sizes), tuple(names),
                axis_types=abstract.axis_types)

  def call(self, *args, mesh: Mesh | None = None, **kwargs):
    """Calls the exported function; a multi-device artifact's arguments are first
    placed by its input shardings on `mesh` (default: self.mesh())."""
    if self.exported.nr_devices > 1:
      mesh = self.mesh() if mesh is None else mesh
      expected = self.manifest["mesh"]
      if expected and (list(mesh.axis_names) != expected["axis_names"]
                       or [int(s) for s in mesh.axis_sizes] != expected["axis_sizes"]):
        raise IncompatibleArtifactError(
            f"mesh: the artifact was exported for axes {expected['axis_names']} of sizes "
            f"{expected['axis_sizes']}, got {list(mesh.axis_names)} of {list(mesh.axis_sizes)}")
      leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
      shardings = self.exported.in_shardings_jax(mesh)
      leaves = [leaf if sharding is None else jax.device_put(leaf, sharding)
                for leaf, sharding in zip(leaves, shardings)]
      args, kwargs = jax.tree_util.tree_unflatten(tree, leaves)
    return self.exported.call(*args, **kwargs)

  def call_flat(self, *leaves, mesh: Mesh | None = None) -> list:
    """Calls with the flat input leaves (in_avals order); returns the flat output leaves."""
    if len(leaves) != len(self.exported.in_avals):
      raise TypeError(f"leaves: expected {len(self.exported.in_avals)} inputs, got {len(leaves)}")
    args, kwargs = jax.tree_util.tree_unflatten(self.exported.in_tree, leaves)
    return jax.tree_util.tree_leaves(self.call(*args, mesh=mesh, **kwargs))


def _devices(platform: str):
  return jax.devices("gpu" if platform in ("cuda", "rocm") else platform)


_MANIFEST_KEYS = ("platforms", "devices", "inputs", "modules", "params", "library")


def _read_manifest(path: str) -> dict:
  try:
    with open(os.path.join(path, MANIFEST_FILE)) as f:
      info = json.load(f)
  except (FileNotFoundError, NotADirectoryError) as e:
    raise IncompatibleArtifactError(f"{path}: no {MANIFEST_FILE} (not saved by "
                                    "jax_grouped_gemm.export.save)") from e
  except (OSError, ValueError) as e:  # unreadable, or not JSON
    raise IncompatibleArtifactError(f"{path}: {MANIFEST_FILE} is unreadable: {e}") from e
  if not isinstance(info, dict) or info.get("format") != FORMAT:
    found = info.get("format") if isinstance(info, dict) else None
    raise IncompatibleArtifactError(f"{path}: manifest format {found!r}, this build "
                                    f"reads {FORMAT!r}")
  missing = [key for key in _MANIFEST_KEYS if key not in info]
  if missing:
    raise IncompatibleArtifactError(f"{path}: the manifest lacks {missing}")
  return info


def _read_file(path: str, name: str) -> bytes:
  try:
    with open(os.path.join(path, name), "rb") as f:
      return f.read()
  except OSError as e:
    raise IncompatibleArtifactError(f"{path}: {name}, which the manifest lists, is unreadable: "
                                    f"{e}") from e


def _read_params(path: str, info: dict) -> tuple[np.ndarray, ...]:
  """The stored params, checked against their sha256 (where the manifest has one: artifacts
  of older builds do not) and against the inputs they are bound to."""
  if not info["params"]:
    return ()
  entry = info["params"]
  data = _read_file(path, entry["file"])
  if "sha256" in entry and hashlib.sha256(data).hexdigest() != entry["sha256"]:
    raise IncompatibleArtifactError(f"{path}: {entry['file']} does not match the manifest's "
                                    "sha256")
  first = entry["first_input"]
  try:
    with np.load(io.BytesIO(data)) as stored:
      leaves = tuple(stored[f"arr_{i}"].view(jnp.dtype(spec["dtype"]))
                     for i, spec in enumerate(info["inputs"][first:]))
    _check_params(leaves, info["inputs"])
  except (OSError, ValueError, KeyError) as e:
    raise IncompatibleArtifactError(f"{path}: {entry['file']} does not hold the params the "
                                    f"manifest describes: {e}") from e
  return leaves


def load(path: str | os.PathLike, *, platform: str | None = None) -> Artifact:
  """Loads an artifact written by `save`, checking first that it can run here.

  platform: where it will run (default: jax's default backend, "cuda" or
    "cpu"). Raises IncompatibleArtifactError naming what does not match: the
    platform, a missing target or an incompatible target version, the device
    count, a module that is not the one the manifest describes.
  """
  path = os.fspath(path)
  info = _read_manifest(path)
  platform = platform or jax.export.default_export_platform()
  module = next((m for m in info["modules"] if platform in m["platforms"]), None)
  if module is None:
    raise IncompatibleArtifactError(f"{path}: exported for platforms {info['platforms']}, cannot "
                                    f"run on {platform}")
  problems = target_problems(module["targets"], platform)
  if problems:
    from jax_grouped_gemm import __version__
    raise IncompatibleArtifactError(
        f"{path} (made by jax_grouped_gemm {info['library']['version']}) cannot run on "
        f"jax_grouped_gemm {__version__}: " + "; ".join(problems) + ". An artifact runs on builds "
        "that register every target version it names: re-export it with this build.")
  try:
    available = len(_devices(platform))
  except RuntimeError:  # jax has no backend for it in this process
    available = 0
  if info["devices"] > available:
    raise IncompatibleArtifactError(f"{path}: needs {info['devices']} devices, this process has "
                                    f"{available} {platform} devices")
  serialized = _read_file(path, module["file"])
  if hashlib.sha256(serialized).hexdigest() != module["sha256"]:
    raise IncompatibleArtifactError(f"{path}: {module['file']} does not match the manifest's "
                                    "sha256")
  _require_flatbuffers()
  exported = jax.export.deserialize(bytearray(serialized))
  ours, _ = custom_calls(exported.mlir_module())
  if sorted(t["name"] for t in ours) != sorted(t["name"] for t in module["targets"]):
    raise IncompatibleArtifactError(f"{path}: {module['file']} calls "
                                    f"{[t['name'] for t in ours]}, the manifest lists "
                                    f"{[t['name'] for t in module['targets']]}")
  return Artifact(path=path, manifest=info, exported=exported, params=_read_params(path, info),
                  platform=platform)
