"""Prints, as JSON, where the build venv keeps what the native module compiles against.

Run by the jgg_local_deps repository rule (local_deps.bzl) with the venv's python. It uses
find_spec instead of importing jax/cutlass: an import costs seconds, and this runs on every
Bazel server start.
"""

import importlib.metadata
import importlib.util
import json
import os
import sys
import sysconfig


def package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"jgg_local_deps: package '{name}' is not installed for {sys.executable}; "
                 "run tools/setup")
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def must_exist(path, what):
    if not os.path.exists(path):
        sys.exit(f"jgg_local_deps: {what} not found at {path}")
    return path


jaxlib = package_dir("jaxlib")
nanobind = package_dir("nanobind")
cutlass_source = os.path.join(package_dir("cutlass_library"), "source")
cutlass_util = os.path.join(cutlass_source, "tools", "util", "include")
python_include = sysconfig.get_paths()["include"]

# Same value as jax.ffi.include_dir(), without importing jax.
ffi_include = os.path.join(jaxlib, "include")
must_exist(os.path.join(ffi_include, "xla", "ffi", "api", "ffi.h"), "XLA FFI header")
must_exist(os.path.join(nanobind, "src", "nb_internals.cpp"), "nanobind sources")
must_exist(os.path.join(nanobind, "ext", "robin_map", "include"), "robin_map headers")
must_exist(os.path.join(cutlass_source, "include", "cutlass", "cutlass.h"), "CUTLASS headers")
must_exist(os.path.join(python_include, "Python.h"), "Python.h")

print(json.dumps({
    "ffi_include": ffi_include,
    "jaxlib_version": importlib.metadata.version("jaxlib"),
    "nanobind_dir": nanobind,
    "cutlass_include": os.path.join(cutlass_source, "include"),
    "cutlass_util_include": cutlass_util if os.path.isdir(cutlass_util) else "",
    "python_include": os.path.realpath(python_include),
    "python_version": "%d.%d" % sys.version_info[:2],
    "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
}))
