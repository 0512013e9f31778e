"""Runs a script in a fresh process with XLA's thunk dump on, and reads where
our custom calls landed: inside a command-buffer thunk (graph-captured) or not.

A fresh process because XLA_FLAGS are read once, when the backend starts.
"""

import glob
import os
import subprocess
import sys


def custom_calls_after_capture(script: str, dump_dir, function_name: str) -> list[str]:
  """Runs `script` (which must print 'replays ok'), returns the kCustomCall thunk lines of
  `function_name`'s executable; asserts the executable has a command buffer."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = (f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_text "
                      "--xla_gpu_graph_min_graph_size=1")
  # The pytest process may already hold XLA's preallocated pool (75% of the GPU): the child
  # takes only what it uses, or it runs out of memory after earlier GPU tests.
  env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
  env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
  result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-4000:]
  assert "replays ok" in result.stdout
  dumps = glob.glob(os.path.join(str(dump_dir),
                                 f"*{function_name}*thunk_sequence_after_thunk_passes.txt"))
  assert dumps, os.listdir(dump_dir)
  text = open(dumps[0]).read()
  assert "kCommandBuffer" in text, text[:3000]
  return [line for line in text.splitlines() if "kCustomCall" in line]


def nested_in_a_command_buffer(thunk_line: str) -> bool:
  """Thunks inside a command buffer are printed indented under it."""
  return thunk_line.startswith((" ", "\t"))
