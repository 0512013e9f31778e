"""Registers and spills of the CUDA kernels of one .cu file as ptxas reports them, and how a
change moves them: a check on this machine before device time goes into a kernel change.

A few instructions anywhere in a kernel can move ptxas's register allocation of all of it: a
500 ns sleep ahead of the wide MXFP8 kernels' L2 prefetch, in a branch the weights never take,
made the colwise and "both" kernels spill and cost them 8-14 points of copy on every shape
(docs/PERFORMANCE.md, 2026-11-29, thirty-fifth session).

  python3 tools/kernel_resources.py xla_plugin/kernels/cuda/mxfp8_cuda.cu --filter Wide
  python3 tools/kernel_resources.py xla_plugin/kernels/cuda/mxfp8_cuda.cu --worktree --changed
  python3 tools/kernel_resources.py xla_plugin/kernels/cuda/mxfp8_cuda.cu --patch x.patch

Compiles the file as committed (HEAD's xla_plugin/, from `git archive`) and, with --worktree
or --patch, the working tree's or HEAD's with the patch applied, side by side, with the
build's nvcc flags (read from tools/bazel/cuda.bzl) for sm_90a only, and prints a row per
kernel: registers, spill stores and loads, stack. Files that include CUTLASS need its headers
(--include, e.g. the venv's nvidia-cutlass include directory). mxfp8_cuda.cu takes 5-8
minutes per compile here (2 cores; the two compiles run at once).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import pathlib
import re
import shutil
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
CUDA_BZL = ROOT / "tools" / "bazel" / "cuda.bzl"


@dataclasses.dataclass(frozen=True)
class KernelResources:
  registers: int
  spill_stores: int
  spill_loads: int
  stack: int


def build_flags(bzl_text: str) -> list[str]:
  """The build's nvcc flags and its sm_* gencode (not the PTX one) from cuda.bzl's lists."""

  def string_list(name):
    body = re.search(rf"^{name} = \[(.*?)\]", bzl_text, re.S | re.M)
    if body is None:
      raise ValueError(f"{CUDA_BZL}: no list {name}")
    return re.findall(r'"([^"]*)"', body.group(1))

  flags = [f for f in string_list("_NVCC_FLAGS") if f != "--objdir-as-tempdir"]
  return flags + [g for g in string_list("CUDA_GENCODE") if "code=sm_" in g]


_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_PROPERTIES = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")


def parse_ptxas(log: str) -> dict[str, KernelResources]:
  """Mangled kernel name -> its resources, from `nvcc --resource-usage` output."""
  kernels, name, spills = {}, None, (0, 0, 0)
  for line in log.splitlines():
    if m := _ENTRY.search(line):
      name, spills = m.group(1), (0, 0, 0)
    elif m := _PROPERTIES.search(line):
      spills = tuple(int(g) for g in m.groups())
    elif (m := _REGISTERS.search(line)) and name is not None:
      stack, stores, loads = spills
      kernels[name] = KernelResources(int(m.group(1)), stores, loads, stack)
      name = None
  return kernels


def demangle(names: list[str]) -> dict[str, str]:
  """Mangled name -> the kernel's name and template arguments (no return type or parameters)."""
  if not names or shutil.which("c++filt") is None:
    return {n: n for n in names}
  out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                       check=True).stdout.splitlines()
  return {n: _without_signature(d) for n, d in zip(names, out)}


def _without_signature(demangled: str) -> str:
  name = demangled.removeprefix("void ").replace("(anonymous namespace)::", "")
  depth = 0
  for i, c in enumerate(name):  # the parameter list: the first "(" outside template brackets
    depth += {"<": 1, ">": -1}.get(c, 0)
    if c == "(" and depth == 0:
      return name[:i]
  return name


def _tree(dest: pathlib.Path, worktree: bool, patch: pathlib.Path | None) -> pathlib.Path:
  if worktree:
    shutil.copytree(ROOT / "xla_plugin", dest / "xla_plugin")
  else:
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", "xla_plugin"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "x", "-C", str(dest)], input=archive, check=True)
  if patch is not None:
    subprocess.run(["git", "apply", str(patch.resolve())], cwd=dest, check=True)
  return dest


# nvcc names a file's anonymous namespace after the file's path and a hash
# (_GLOBAL__N__89b8bf71_4_t_cu_58a74e26), so the same kernel of two trees has two names.
_ANONYMOUS_NAMESPACE = re.compile(r"\d+_GLOBAL__N__\w*?_[0-9a-f]{8}(?=\d)")


def _same_in_every_tree(mangled: str) -> str:
  return _ANONYMOUS_NAMESPACE.sub("12_GLOBAL__N_1", mangled)


def compile_resources(tree: pathlib.Path, source: str, includes: list[str]) -> dict:
  command = (["nvcc"] + build_flags(CUDA_BZL.read_text()) + ["--resource-usage", "-I", str(tree)] +
             [f"-I{d}" for d in includes] + ["-c", str(tree / source), "-o", str(tree / "k.o")])
  done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
  if done.returncode != 0:
    raise RuntimeError(f"nvcc failed in {tree}:\n{done.stderr[-4000:]}")
  return {_same_in_every_tree(name): r for name, r in parse_ptxas(done.stdout + done.stderr).items()}


def _cell(r: KernelResources | None) -> str:
  if r is None:
    return "-"
  return f"{r.registers} regs, spills {r.spill_stores}/{r.spill_loads} B, stack {r.stack} B"


def table(before: dict, after: dict | None, pattern: str, changed_only: bool) -> str:
  names = sorted(set(before) | set(after or {}))
  readable = demangle(names)
  header = "| kernel | HEAD |" + (" changed |" if after is not None else "")
  lines = [header, "|---|---|" + ("---|" if after is not None else "")]
  for name in names:
    kernel = readable[name]
    if not re.search(pattern, kernel):
      continue
    a = before.get(name)
    if after is None:
      lines.append(f"| {kernel} | {_cell(a)} |")
      continue
    b = after.get(name)
    if changed_only and a == b:
      continue
    lines.append(f"| {kernel} | {_cell(a)} | {_cell(b)} |")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("source", help="the .cu file, relative to the repository root")
  change = parser.add_mutually_exclusive_group()
  change.add_argument("--worktree", action="store_true", help="compare with the working tree")
  change.add_argument("--patch", type=pathlib.Path, help="compare with HEAD plus this patch")
  parser.add_argument("--filter", default="", help="regex on the demangled kernel names")
  parser.add_argument("--changed", action="store_true", help="only kernels whose resources move")
  parser.add_argument("--include", action="append", default=[], help="extra include directory")
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as tmp:
    trees = [_tree(pathlib.Path(tmp) / "head", False, None)]
    if args.worktree or args.patch:
      trees.append(_tree(pathlib.Path(tmp) / "changed", args.worktree, args.patch))
    with concurrent.futures.ThreadPoolExecutor(len(trees)) as pool:
      results = list(pool.map(lambda t: compile_resources(t, args.source, args.include), trees))
  print(table(results[0], results[1] if len(results) > 1 else None, args.filter, args.changed))


if __name__ == "__main__":
  main()
