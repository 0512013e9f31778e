"""Timing a JAX function as jitted loops of calls, and checking XLA kept the loop honest.

A loop of identical calls invites XLA to hoist the call out of the loop (the
operands do not change) or to copy buffers every iteration (to reuse them in
place). Either would make the time per call wrong without a trace. So the
compiled HLO is read before timing: copies inside the loop body and heavy work
left outside it are measured, and the first of these loops that has neither
is timed:
  barrier:  each call's operands pass through an optimization_barrier with the
            previous output. Costs nothing; XLA's GPU pipeline keeps it (an H200
            run timed jnp.dot in it as fast as torch.mm), its CPU pipeline drops
            it and hoists a dense dot out of the loop.
  a chain:  see below; costs one tiny fusion a call (a few microseconds).
If none is clean, the calls are timed unlooped (enqueued back to back, which
hides the host's dispatch as long as a call outlasts it).

Chains: the smallest operand (the group sizes, where there are any) is carried
through the loop and one element gets a 0/1 flag added, "a value that never
occurs occurs": always 0, but XLA cannot know it. The flag reads
  operand-chain: the same operand (no wait on the previous call; XLA copies
                 the operand if the next update could race the call reading it:
                 free for group sizes, costly for a dense GEMM's operands);
  output-chain:  the previous call's first output element (orders the update
                 after the call; XLA may copy the output instead).
"""

from __future__ import annotations

import functools
import math
import re
import time

from tools.bench import worker_protocol as wp

BARRIER, OPERAND_CHAIN, OUTPUT_CHAIN, UNLOOPED = ("barrier", "operand-chain", "output-chain",
                                                   "unlooped")
LOOP_COPY_TOLERANCE = 0.01  # body copies allowed, as a fraction of a call's operand+output bytes
HOISTED_BYTES = 1 << 20  # work outside the loop counts from this size up
SMALL_OPERAND_BYTES = 1 << 20  # an operand this small is chained first (operand-chain)


class LoopTimer:
  """Times fn(*operands): the median per call over runs of jitted loops of plan.calls calls.

  A timed run enqueues `repeat` loops back to back (asynchronous dispatch) and
  waits once, `repeat` chosen so a run lasts wp.MIN_RUN_SECONDS.
  """

  def __init__(self, plan: wp.Plan, on_progress=lambda: None):
    self.plan = plan
    self.on_progress = on_progress  # called after each compile and run (the hang watchdog)
    self._compiled = {}  # (fn, strategy, operand types) -> (runner, loop report)

  def __call__(self, fn, operands) -> dict:
    import jax

    start = time.perf_counter()
    strategy, run, calls, rejected = self._choose(fn, operands)
    carry = run(self._zeros_like_output(fn, operands))  # warm up
    jax.block_until_ready(carry)
    compile_seconds = time.perf_counter() - start
    self.on_progress()
    start = time.perf_counter()
    carry = jax.block_until_ready(run(carry))
    one_loop = time.perf_counter() - start
    repeat = max(1, math.ceil(wp.MIN_RUN_SECONDS / max(one_loop, 1e-9)))
    wanted = wp.runs_within_budget(self.plan, one_loop * repeat)

    def run_and_wait():
      nonlocal carry
      for _ in range(repeat):
        carry = run(carry)
      jax.block_until_ready(carry)

    wp.sustain(self.plan, run_and_wait)
    per_call = []
    while len(per_call) < wanted:
      start = time.perf_counter()
      for _ in range(repeat):
        carry = run(carry)
      jax.block_until_ready(carry)
      per_call.append((time.perf_counter() - start) / (repeat * calls))
      self.on_progress()
    del carry
    fields = {**wp.timing_fields(per_call, repeat * calls), "compile_seconds": compile_seconds,
              "method": strategy}
    if rejected:
      fields["loops_rejected"] = rejected
    return fields

  def _zeros_like_output(self, fn, operands):
    import jax
    import jax.numpy as jnp

    out = jax.eval_shape(fn, *operands)
    return jnp.zeros(out.shape, out.dtype)

  def _choose(self, fn, operands):
    """The first chain whose compiled loop is honest, else unlooped calls."""
    import jax

    calls = self.plan.calls
    smallest = min(_nbytes(o) for o in operands)
    chains = ((OPERAND_CHAIN, OUTPUT_CHAIN) if smallest <= SMALL_OPERAND_BYTES else
              (OUTPUT_CHAIN, OPERAND_CHAIN))
    order = (BARRIER,) + chains
    carry = jax.eval_shape(fn, *operands)  # lowering needs only its type
    call_bytes = sum(_nbytes(o) for o in operands) + _nbytes(carry)
    rejected = {}
    for strategy in order:
      key = (fn, strategy, tuple((o.shape, str(o.dtype)) for o in operands))
      if key not in self._compiled:
        loop = jax.jit(functools.partial(call_loop, fn, calls, strategy), donate_argnums=(1,))
        compiled = loop.lower(operands, carry).compile()
        self._compiled[key] = (compiled, loop_report(compiled.as_text()))
        self.on_progress()
      compiled, report = self._compiled[key]
      problem = _loop_problem(report, call_bytes)
      if problem is None:
        return strategy, functools.partial(_run_compiled, compiled, operands), calls, rejected
      rejected[strategy] = problem
    single = jax.jit(fn)
    return UNLOOPED, functools.partial(_run_unlooped, single, operands, calls), calls, rejected


def _run_compiled(compiled, operands, carry):
  return compiled(operands, carry)


def _run_unlooped(single, operands, calls, _):
  out = None
  for _ in range(calls):
    out = single(*operands)
  return out


def call_loop(fn, calls, strategy, operands, carry):
  """`calls` calls of fn in one fori_loop, kept apart by `strategy` (see the module doc)."""
  from jax import lax

  if strategy == BARRIER:
    def barrier_body(_, previous_out):
      args, _ = lax.optimization_barrier((tuple(operands), previous_out))
      return fn(*args)

    return lax.fori_loop(0, calls, barrier_body, carry)

  target = min(range(len(operands)), key=lambda i: _nbytes(operands[i]))

  def body(_, state):
    args, previous_out = state
    varied = args[target]
    witness = (varied if strategy == OPERAND_CHAIN else previous_out).reshape(-1)[0]
    flag = (witness == never_held(witness.dtype)).astype(varied.dtype)
    args = args[:target] + (varied.at[(0,) * varied.ndim].add(flag),) + args[target + 1:]
    return args, fn(*args)

  return lax.fori_loop(0, calls, body, (tuple(operands), carry))[1]


def never_held(dtype):
  """A value no operand or output element of the benchmark takes: the dtype's largest."""
  import jax.numpy as jnp

  info = jnp.finfo(dtype) if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype)
  return jnp.asarray(info.max, dtype)


def _nbytes(array) -> int:
  return math.prod(array.shape) * array.dtype.itemsize


def _loop_problem(report, call_bytes):
  if not report["loops"]:
    return "no loop in the compiled program"
  if report["body_copy_bytes"] > LOOP_COPY_TOLERANCE * call_bytes:
    return f"copies {report['body_copy_bytes']} bytes per call inside the loop"
  if report["hoisted"]:
    return "work hoisted out of the loop: " + ", ".join(report["hoisted"][:3])
  return None


# --- reading the compiled HLO ------------------------------------------------------------

_ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
                  "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_COMPUTATION_START = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\((?:[^()]|\([^()]*\))*\)|\S+)\s+([\w\-]+)\((.*)$")
_ARRAY = re.compile(r"([a-z]+\d*)\[([\d,]*)\]")
_CALLED = re.compile(r"(?:body|to_apply|calls)=%?([\w.\-]+)")
_TRIVIAL = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "copy-done",
            "call"}


def loop_report(hlo_text: str) -> dict:
  """Copies inside the program's while loops, and heavy work outside them, in bytes.

  The program is ENTRY and what it calls (a command buffer, say); a loop body
  is followed into what it calls too, but not into fusions, whose internal
  copies move no memory.
  """
  computations, entry = _computations(hlo_text)
  loops, body_copy_bytes, hoisted = 0, 0, []
  for scope in _called_closure(computations, [entry], follow_loops=False):
    instructions = computations[scope]
    for name, shape, opcode, rest in instructions:
      if opcode == "while":
        loops += 1
        bodies = re.findall(r"body=%?([\w.\-]+)", rest)
        body_copy_bytes += sum(_copy_bytes(computations[c])
                               for c in _called_closure(computations, bodies, follow_loops=True))
      elif (opcode not in _TRIVIAL and not _is_parameter_copy(opcode, rest, instructions)
            and _shape_bytes(shape) >= HOISTED_BYTES):
        hoisted.append(f"{opcode} {shape}")
  return {"loops": loops, "body_copy_bytes": body_copy_bytes, "hoisted": hoisted}


def _called_closure(computations, roots, follow_loops):
  """`roots` and what they call (a command buffer, a call), not fusions; loop bodies if asked."""
  seen, stack = [], [r for r in roots if r in computations]
  while stack:
    name = stack.pop()
    if name in seen:
      continue
    seen.append(name)
    for _, _, opcode, rest in computations[name]:
      if opcode == "fusion" or (opcode == "while" and not follow_loops):
        continue
      stack += [c for c in _CALLED.findall(rest) if c in computations]
  return seen


def _computations(text):
  computations, current, entry = {}, None, None
  for line in text.splitlines():
    if current is None:
      start = _COMPUTATION_START.match(line)
      if start and not line.startswith(" "):
        current = start.group(2)
        computations[current] = []
        entry = current if start.group(1) else entry
      continue
    if line.strip() == "}":
      current = None
      continue
    instruction = _INSTRUCTION.match(line)
    if instruction:
      computations[current].append(instruction.groups())
  return computations, entry


def _copy_bytes(instructions) -> int:
  total = 0
  for _, shape, opcode, _ in instructions:
    if opcode == "copy":
      total += _shape_bytes(shape)
    elif opcode == "copy-start":  # (destination, source, context): count one array
      arrays = _ARRAY.findall(shape)
      total += _shape_bytes("{}[{}]".format(*arrays[0])) if arrays else 0
  return total


def _is_parameter_copy(opcode, rest, entry_instructions) -> bool:
  """A copy of an ENTRY parameter: the loop's own buffer for a chained operand (once a loop)."""
  if opcode not in ("copy", "copy-start"):
    return False
  operand = rest.split(")")[0].strip().lstrip("%")
  return any(name == operand and op == "parameter" for name, _, op, _ in entry_instructions)


def _shape_bytes(shape: str) -> int:
  total = 0
  for element, dims in _ARRAY.findall(shape):
    count = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
    total += count * _ELEMENT_BYTES.get(element, 4)
  return total
