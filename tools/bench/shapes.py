"""The named benchmark shapes of SPEC section 8: one list for benchmarks and tests.

A shape is one MoE expert GEMM: M = tokens x top-k rows routed to G experts,
hidden size K, expert width N. Its three passes:
  fwd    out[M, N]     = x[M, K]  . w[g]      (w stored [G, K, N])
  dgrad  dx[M, K]      = dy[M, N] . w[g]^T    (w read transposed in place)
  wgrad  dw[G, K, N]   = x^T . dy, summed over each group's rows
each 2 * sum(group_sizes) * K * N FLOPs.

Group sizes are a pure function of the shape (routing kind and seed), so every
process and every run sees the same ones:
  uniform  multinomial routing with equal expert probabilities (a balanced
           router: sizes jitter around M / G, not multiples of any tile);
  zipf     expert probabilities proportional to 1 / rank**ZIPF_EXPONENT, experts
           in random order (a few hot experts, a long tail of small ones).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import numpy as np

PASSES = ("fwd", "dgrad", "wgrad")
ROUTINGS = ("uniform", "zipf")
# Exponent 1.2 gives the hottest of 8 experts ~43% of the rows and of 128 ~26%;
# the smallest of 128 still gets ~0.1% (about 50 of 65536 rows).
ZIPF_EXPONENT = 1.2
BYTES_PER_ELEMENT = 2  # bf16 operands and outputs


@dataclasses.dataclass(frozen=True)
class GroupedGemmShape:
  """One grouped GEMM of an MoE layer; `bound` says which ceiling it is judged by."""
  name: str
  tokens: int  # M: tokens x top-k, rows of x, dy and out
  hidden: int  # K
  ffn: int  # N
  experts: int  # G
  routing: str = "uniform"
  seed: int = 0
  bound: str = "compute"  # "compute" (TFLOP/s vs dense) or "weight_bandwidth" (vs copy)

  def __post_init__(self):
    if self.routing not in ROUTINGS:
      raise ValueError(f"routing: expected one of {ROUTINGS}, got {self.routing!r}")
    if self.bound not in ("compute", "weight_bandwidth"):
      raise ValueError(f"bound: expected 'compute' or 'weight_bandwidth', got {self.bound!r}")
    for field in ("tokens", "hidden", "ffn", "experts"):
      if getattr(self, field) < 1:
        raise ValueError(f"{field}: expected a positive size, got {getattr(self, field)}")

  @property
  def dims(self) -> tuple[int, int, int, int]:
    """(M, K, N, G): shapes with equal dims share operands and compiled programs."""
    return (self.tokens, self.hidden, self.ffn, self.experts)

  def group_sizes(self) -> np.ndarray:
    """int32 [G], summing to M; deterministic in (routing, seed)."""
    rng = np.random.default_rng(self.seed)
    if self.routing == "uniform":
      probabilities = np.full(self.experts, 1.0 / self.experts)
    else:
      weights = 1.0 / np.arange(1, self.experts + 1) ** ZIPF_EXPONENT
      probabilities = rng.permutation(weights / weights.sum())
    return rng.multinomial(self.tokens, probabilities).astype(np.int32)

  def rows_used(self) -> int:
    return int(self.group_sizes().sum())

  def flops(self) -> int:
    """FLOPs of any one pass: 2 * sum(group_sizes) * K * N."""
    return 2 * self.rows_used() * self.hidden * self.ffn

  def weight_bytes(self, pass_name: str) -> int:
    """Bytes of w that a pass must move: fwd and dgrad read the weights of the experts that
    have rows (an expert without rows needs none), wgrad writes all of dw (zeros for those)."""
    if pass_name not in PASSES:
      raise ValueError(f"pass: expected one of {PASSES}, got {pass_name!r}")
    experts = self.experts if pass_name == "wgrad" else int((self.group_sizes() > 0).sum())
    return experts * self.hidden * self.ffn * BYTES_PER_ELEMENT


def operand_shapes(shape: GroupedGemmShape, pass_name: str):
  """(lhs, rhs, out) shapes of one pass, in the layouts the passes read in place."""
  m, k, n, g = shape.dims
  shapes = {
      "fwd": ((m, k), (g, k, n), (m, n)),
      "dgrad": ((m, n), (g, k, n), (m, k)),
      "wgrad": ((m, k), (m, n), (g, k, n)),
  }
  if pass_name not in shapes:
    raise ValueError(f"pass: expected one of {PASSES}, got {pass_name!r}")
  return shapes[pass_name]


def _anchor(name, tokens, hidden, ffn, experts, **kw):
  return GroupedGemmShape(name, tokens, hidden, ffn, experts, **kw)


_BASE = (
    _anchor("mixtral", 16384, 4096, 14336, 8),
    _anchor("deepseek-ep8", 32768, 7168, 2048, 32),
    _anchor("qwen3-30b", 65536, 2048, 768, 128),
)
ANCHOR_SHAPES: tuple[GroupedGemmShape, ...] = _BASE + tuple(
    dataclasses.replace(s, name=f"{s.name}-zipf", routing="zipf", seed=1) for s in _BASE
) + (
    # 4 rows per expert on average: each expert's weights are read for a handful
    # of rows, so the time is the weight bytes over memory bandwidth.
    _anchor("decode", 256, 4096, 1536, 64, bound="weight_bandwidth"),
    # The same with Zipf routing: a few experts get tens of rows, many get 0-2.
    _anchor("decode-zipf", 256, 4096, 1536, 64, bound="weight_bandwidth", routing="zipf",
            seed=1),
)


def by_name(names: Iterable[str] | None = None,
            shapes: Sequence[GroupedGemmShape] = ANCHOR_SHAPES) -> list[GroupedGemmShape]:
  """The shapes named (all when None), in the order given; unknown names raise."""
  if names is None:
    return list(shapes)
  table = {s.name: s for s in shapes}
  unknown = [n for n in names if n not in table]
  if unknown:
    raise ValueError(f"shapes: unknown {unknown}; known: {', '.join(table)}")
  return [table[n] for n in names]
