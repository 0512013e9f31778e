"""The main job: train a small MoE language model whose experts run on jax_grouped_gemm.

  ./tools/demo [--steps=300] [--experts=8] [--recipe=bf16|mxfp8] [--backend=auto|cpu|gpu]
               [--plot=build/demo_loss.png]

The data is generated here and learnable: token sequences over a small
vocabulary follow a fixed random second-order rule, next = RULE[previous,
current], except that with probability `noise` a token is uniform instead.
The model sees each (previous, current) pair through two embeddings, then a
stack of pre-norm residual MoE blocks (jax_grouped_gemm.flax.nnx.MoE: router,
top-k, permutation, gated expert MLP on grouped GEMMs) and a linear head. The
rule is a vocab x vocab table the experts have to memorise, so the loss falls
from ln(vocab) towards the entropy the noise leaves (printed and plotted).

What it checks and reports:
  * the first step (loss, logits and every gradient, same parameters and batch)
    against the same model built on jax.lax.ragged_dot (with --recipe=mxfp8, on
    jax.lax.ragged_dot with the recipe's quantization): asserted to tolerance;
  * the loss curve (a PNG), which must fall;
  * tokens/s, and the custom-call kernels found in the compiled train step.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import os
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import jax_grouped_gemm as jgg
from jax_grouped_gemm import _native
from jax_grouped_gemm.grouped_dense import DGRAD_DIMENSION_NUMBERS, WGRAD_DIMENSION_NUMBERS
from jax_grouped_gemm.flax import nnx as jgg_nnx

RECIPES = ("bf16", "mxfp8")
# Norm-wise relative error allowed between our first step and the reference's.
# bf16: both accumulate in f32 and round once per GEMM (measured: gradients
# ~2e-3). mxfp8: the reference has the same quantization (mxfp8_reference_ragged_dot),
# but dy is quantized to e4m3 (3 mantissa bits): an element the two backends
# round one ulp apart before quantization can land a whole step (up to 12.5%)
# apart after it. Measured gradients: 3e-4 on the CPU, 3e-2 on an H200.
TOLERANCE = {"bf16": 2e-2, "mxfp8": 6e-2, "float32": 1e-4}


@dataclasses.dataclass(frozen=True)
class Config:
  steps: int = 300
  batch: int = 16
  seq_len: int = 64
  vocab: int = 64
  noise: float = 0.1  # probability that a next token ignores the rule
  d_model: int = 64
  d_ff: int = 128
  experts: int = 8
  top_k: int = 2
  layers: int = 2
  learning_rate: float = 5e-3
  aux_loss_weight: float = 1e-2
  recipe: str = "bf16"  # "float32" too, for tight checks in tests
  seed: int = 0

  @property
  def tokens_per_step(self) -> int:
    return self.batch * self.seq_len


# --- data -----------------------------------------------------------------------------

def make_rule(vocab: int, seed: int) -> np.ndarray:
  """The task: RULE[previous, current] is the next token."""
  return np.random.default_rng(seed).integers(0, vocab, (vocab, vocab), dtype=np.int32)


@functools.partial(jax.jit, static_argnames=("batch", "seq_len"))
def sample_batch(rule, key, noise, *, batch: int, seq_len: int):
  """(previous, current, target) [batch, seq_len] int32: a noisy walk of the rule.

  Each next token follows the rule with probability 1 - noise, else is uniform:
  the noise keeps the walk from settling into the rule's short cycles, so all
  vocab^2 pairs keep coming up, and sets the floor of the loss (noise_floor).
  """
  vocab = rule.shape[0]
  start_key, random_key, coin_key = jax.random.split(key, 3)
  starts = jax.random.randint(start_key, (2, batch), 0, vocab, jnp.int32)
  random_tokens = jax.random.randint(random_key, (seq_len, batch), 0, vocab, jnp.int32)
  follows_rule = jax.random.uniform(coin_key, (seq_len, batch)) >= noise

  def next_token(pair, draws):
    previous, current = pair
    random_token, use_rule = draws
    following = jnp.where(use_rule, rule[previous, current], random_token)
    return (current, following), following

  _, tokens = jax.lax.scan(next_token, (starts[0], starts[1]), (random_tokens, follows_rule))
  tokens = jnp.concatenate([starts, tokens]).T  # [batch, seq_len + 2]
  return {"previous": tokens[:, :seq_len], "current": tokens[:, 1:seq_len + 1],
          "target": tokens[:, 2:]}


def noise_floor(vocab: int, noise: float) -> float:
  """The lowest expected cross-entropy: the entropy of a next token given its pair."""
  hit = 1 - noise + noise / vocab
  miss = noise / vocab
  return float(-hit * math.log(hit) - (vocab - 1) * miss * math.log(miss)) if noise else 0.0


# --- model ------------------------------------------------------------------------------

class MoELanguageModel(nnx.Module):
  """Two embeddings -> `layers` residual pre-norm MoE blocks -> RMSNorm -> linear head."""

  def __init__(self, config: Config, *, ragged_dot, recipe, dtype, rngs: nnx.Rngs):
    d = config.d_model
    self.embed_current = nnx.Embed(config.vocab, d, rngs=rngs)
    self.embed_previous = nnx.Embed(config.vocab, d, rngs=rngs)
    self.norms = nnx.List([nnx.RMSNorm(d, rngs=rngs) for _ in range(config.layers)])
    self.blocks = nnx.List([
        jgg_nnx.MoE(config.experts, d, config.d_ff, top_k=config.top_k, dtype=dtype,
                    recipe=recipe, ragged_dot=ragged_dot, rngs=rngs)
        for _ in range(config.layers)])
    self.final_norm = nnx.RMSNorm(d, rngs=rngs)
    self.head = nnx.Linear(d, config.vocab, use_bias=False, rngs=rngs)

  def __call__(self, previous, current):
    h = self.embed_current(current) + self.embed_previous(previous)
    aux_loss = 0.0
    for norm, block in zip(self.norms, self.blocks):
      y, block_aux = block(norm(h))
      h = h + y.astype(h.dtype)
      aux_loss = aux_loss + block_aux
    return self.head(self.final_norm(h)), aux_loss / len(self.blocks)


def make_recipe(name: str):
  """(computation dtype, recipe object) of a --recipe name."""
  if name == "float32":
    return jnp.float32, None
  if name == "bf16":
    return jnp.bfloat16, None
  if name == "mxfp8":  # bf16 activations, MXFP8 (e4m3, per-32 scales) in every expert GEMM
    return jnp.bfloat16, jgg.MXFP8Recipe()
  raise ValueError(f"recipe: expected one of {RECIPES + ('float32',)}, got {name!r}")


def mxfp8_reference_ragged_dot(recipe):
  """jax.lax.ragged_dot with the MXFP8 recipe's numerics: the reference GEMM of --recipe=mxfp8.

  As jgg.grouped_dense(recipe=...) does, each operand is quantized with
  32-element blocks along the axis its GEMM contracts (x rowwise, W colwise
  forward; dy rowwise, W rowwise for dx; x and dy colwise along the tokens,
  blocks restarting at group boundaries, for dW), and the exact dequantized
  values are multiplied in f32 (SPEC section 4), here by jax.lax's GEMMs.
  Quantization is our op (tested bit-exact elsewhere); the GEMMs and the
  gradient wiring are what this checks.
  """
  def exact(a, group_sizes, colwise, dtype):
    q = jgg.mxfp8.quantize(a, group_sizes, rowwise=not colwise, colwise=colwise, dtype=dtype)
    return jgg.mxfp8.dequantize(q, jnp.float32)

  @jax.custom_vjp
  def product(x, w, group_sizes):
    x_rows = exact(x, None, False, recipe.forward_dtype)
    w_cols = exact(w, None, True, recipe.forward_dtype)
    return jax.lax.ragged_dot(x_rows, w_cols, group_sizes).astype(x.dtype)

  def forward(x, w, group_sizes):
    return product(x, w, group_sizes), (x, w, group_sizes)

  def backward(residuals, dy):
    x, w, group_sizes = residuals
    dy_rows = exact(dy, group_sizes, False, recipe.gradient_dtype)
    dy_cols = exact(dy, group_sizes, True, recipe.gradient_dtype)
    dx = jax.lax.ragged_dot_general(dy_rows, exact(w, None, False, recipe.forward_dtype),
                                    group_sizes, DGRAD_DIMENSION_NUMBERS)
    dw = jax.lax.ragged_dot_general(exact(x, group_sizes, True, recipe.forward_dtype), dy_cols,
                                    group_sizes, WGRAD_DIMENSION_NUMBERS)
    return dx.astype(x.dtype), dw.astype(w.dtype), None

  product.defvjp(forward, backward)

  def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None):
    del precision, preferred_element_type  # the recipe fixes both, as grouped_dense does
    return product(lhs, rhs, group_sizes)
  return ragged_dot


def loss_fn(model, batch, aux_loss_weight):
  logits, aux_loss = model(batch["previous"], batch["current"])
  cross_entropy = optax.softmax_cross_entropy_with_integer_labels(
      logits.astype(jnp.float32), batch["target"]).mean()
  return cross_entropy + aux_loss_weight * aux_loss, (cross_entropy, aux_loss, logits)


def make_train_step(graphdef, optimizer, aux_loss_weight):
  def train_step(params, opt_state, batch):
    def loss_of(params):
      return loss_fn(nnx.merge(graphdef, params), batch, aux_loss_weight)
    (loss, (cross_entropy, aux_loss, _)), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    metrics = {"loss": loss, "cross_entropy": cross_entropy, "aux_loss": aux_loss}
    return optax.apply_updates(params, updates), opt_state, metrics
  return jax.jit(train_step, donate_argnums=(0, 1))


# --- checks and reports ----------------------------------------------------------------

def relative_error(actual, expected) -> float:
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  if not np.all(np.isfinite(actual)):
    return math.inf
  return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def first_step_errors(model, reference, batch, aux_loss_weight) -> dict[str, float]:
  """Relative errors of loss, logits and gradients (worst parameter) vs the reference model."""
  def outputs(model):
    graphdef, params = nnx.split(model, nnx.Param)
    def loss_of(params):
      return loss_fn(nnx.merge(graphdef, params), batch, aux_loss_weight)
    (loss, (_, _, logits)), grads = jax.jit(jax.value_and_grad(loss_of, has_aux=True))(params)
    return loss, logits, grads

  loss, logits, grads = outputs(model)
  ref_loss, ref_logits, ref_grads = outputs(reference)
  grad_errors = jax.tree.map(relative_error, grads, ref_grads)
  return {"loss": relative_error(loss, ref_loss), "logits": relative_error(logits, ref_logits),
          "gradients": max(jax.tree.leaves(grad_errors))}


def kernels_in(compiled_hlo: str) -> dict[str, int]:
  """Custom-call targets of a compiled HLO module, with how many calls each."""
  return dict(collections.Counter(re.findall(r'custom_call_target="([^"]+)"', compiled_hlo)))


@dataclasses.dataclass
class Result:
  device: str
  first_step: dict[str, float]
  tolerance: float
  cross_entropy: np.ndarray  # per step
  aux_loss: np.ndarray
  tokens_per_second: float
  kernels: dict[str, int]
  plot: str | None

  @property
  def first_step_ok(self) -> bool:
    return all(err <= self.tolerance for err in self.first_step.values())


def train(config: Config, *, device=None, plot: str | None = None, progress: bool = True,
          log=print) -> Result:
  device = device or jax.devices()[0]
  with jax.default_device(device):
    return _train(config, device, plot, progress, log)


def _train(config, device, plot, progress, log):
  dtype, recipe = make_recipe(config.recipe)
  build = lambda ragged_dot, recipe: MoELanguageModel(
      config, ragged_dot=ragged_dot, recipe=recipe, dtype=dtype, rngs=nnx.Rngs(config.seed))
  model = build(jgg.ragged_dot, recipe)
  reference = build(jax.lax.ragged_dot if recipe is None else mxfp8_reference_ragged_dot(recipe),
                    None)
  nnx.update(reference, nnx.state(model, nnx.Param))  # same parameters, whatever the init

  rule = jnp.asarray(make_rule(config.vocab, config.seed))
  keys = jax.random.split(jax.random.key(config.seed + 1), config.steps)
  sample = functools.partial(sample_batch, rule, batch=config.batch, seq_len=config.seq_len,
                             noise=config.noise)
  first_batch = sample(key=keys[0])

  errors = first_step_errors(model, reference, first_batch, config.aux_loss_weight)
  tolerance = TOLERANCE[config.recipe]
  log("first step vs the same model on jax.lax.ragged_dot (relative error): " +
      ", ".join(f"{k} {v:.1e}" for k, v in errors.items()) + f" (tolerance {tolerance:g})")
  del reference

  optimizer = optax.adam(config.learning_rate)
  graphdef, params = nnx.split(model, nnx.Param)
  opt_state = optimizer.init(params)
  train_step = make_train_step(graphdef, optimizer, config.aux_loss_weight)
  compiled = train_step.lower(params, opt_state, first_batch).compile()
  kernels = kernels_in(compiled.as_text())
  log("kernels in the compiled train step: " +
      (", ".join(f"{name} x{n}" for name, n in sorted(kernels.items())) or "none"))

  metrics, bar = [], _progress_bar(config.steps, progress)
  start = None
  for step in range(config.steps):
    batch = first_batch if step == 0 else sample(key=keys[step])
    params, opt_state, step_metrics = compiled(params, opt_state, batch)
    metrics.append(step_metrics)
    if step == 0:  # time from the end of the first step: no compile or warm-up inside
      jax.block_until_ready(step_metrics)
      start = time.perf_counter()
    if bar is not None:
      bar.update(1)
      if step % 10 == 0 or step == config.steps - 1:
        bar.set_postfix(loss=f"{float(step_metrics['cross_entropy']):.3f}")
  jax.block_until_ready(metrics[-1])
  seconds = time.perf_counter() - start
  if bar is not None:
    bar.close()
  timed_steps = config.steps - 1
  tokens_per_second = timed_steps * config.tokens_per_step / seconds if timed_steps else math.nan
  cross_entropy = np.asarray([m["cross_entropy"] for m in metrics], np.float64)
  aux_loss = np.asarray([m["aux_loss"] for m in metrics], np.float64)
  result = Result(device=f"{device.platform} ({device.device_kind})", first_step=errors,
                  tolerance=tolerance, cross_entropy=cross_entropy, aux_loss=aux_loss,
                  tokens_per_second=tokens_per_second, kernels=kernels, plot=None)
  if plot:
    result.plot = write_plot(plot, config, result)
  return result


def _progress_bar(steps, enabled):
  if not enabled:
    return None
  from tqdm import tqdm
  return tqdm(total=steps, desc="train", unit="step", file=sys.stdout)


def write_plot(path: str, config: Config, result: Result) -> str:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig, ax = plt.subplots(figsize=(7, 4))
  ax.plot(np.arange(len(result.cross_entropy)), result.cross_entropy, label="cross-entropy")
  ax.axhline(math.log(config.vocab), color="gray", linestyle="--",
             label=f"uniform guess, ln {config.vocab}")
  ax.axhline(noise_floor(config.vocab, config.noise), color="green", linestyle=":",
             label=f"best possible (noise {config.noise:g})")
  ax.set_xlabel("step")
  ax.set_ylabel("loss (nats/token)")
  ax.set_title(f"{config.layers} MoE blocks x {config.experts} experts (top-{config.top_k}), "
               f"{config.recipe}, {result.device}", fontsize=9)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


# --- command line --------------------------------------------------------------------------

def _define_flags():
  from absl import flags
  defaults = Config()
  flags.DEFINE_integer("steps", defaults.steps, "training steps (the check compares the "
                       "first and last ones: at least 2)", lower_bound=2)
  flags.DEFINE_integer("experts", defaults.experts, "experts per MoE block", lower_bound=1)
  flags.DEFINE_integer("top_k", defaults.top_k, "experts per token", lower_bound=1)
  flags.DEFINE_integer("layers", defaults.layers, "MoE blocks", lower_bound=1)
  flags.DEFINE_integer("d_model", defaults.d_model, "model width", lower_bound=1)
  flags.DEFINE_integer("d_ff", defaults.d_ff, "expert hidden width", lower_bound=1)
  flags.DEFINE_integer("batch", defaults.batch, "sequences per step", lower_bound=1)
  flags.DEFINE_integer("seq_len", defaults.seq_len, "tokens per sequence (pairs: at least 2)",
                       lower_bound=2)
  flags.DEFINE_integer("vocab", defaults.vocab, "vocabulary size", lower_bound=2)
  flags.DEFINE_float("noise", defaults.noise, "probability that a token ignores the rule",
                     lower_bound=0.0, upper_bound=1.0)
  flags.DEFINE_float("learning_rate", defaults.learning_rate, "Adam learning rate",
                     lower_bound=0.0)
  flags.DEFINE_float("aux_loss_weight", defaults.aux_loss_weight,
                     "weight of the routers' load-balancing loss", lower_bound=0.0)
  flags.DEFINE_enum("recipe", defaults.recipe, list(RECIPES), "expert GEMM numerics")
  flags.DEFINE_enum("backend", "auto", ["auto", "cpu", "gpu"],
                    "device to train on (auto: the GPU when there is one)")
  flags.DEFINE_string("plot", "build/demo_loss.png", "where to write the loss curve (PNG)")
  flags.DEFINE_integer("seed", defaults.seed, "seed of the rule, the data and the init")
  flags.register_multi_flags_validator(
      ["top_k", "experts"], lambda f: f["top_k"] <= f["experts"],
      message="--top_k: a token's experts are distinct, so at most --experts")
  return flags.FLAGS


def main(argv):
  del argv
  flags = FLAGS
  config = Config(**{f.name: getattr(flags, f.name) for f in dataclasses.fields(Config)})
  try:
    device = jax.devices()[0] if flags.backend == "auto" else jax.devices(flags.backend)[0]
  except RuntimeError as e:
    raise SystemExit(f"demo: --backend={flags.backend}: {e}") from None
  try:  # before training, not after it
    os.makedirs(os.path.dirname(os.path.abspath(flags.plot)), exist_ok=True)
  except OSError as e:
    raise SystemExit(f"demo: --plot={flags.plot}: {e}") from None
  registered = _native.register_targets()
  print(f"device: {device.platform} ({device.device_kind}); native handlers: "
        f"{', '.join(f'{p}: {len(t)}' for p, t in registered.items())}; "
        f"CUDA kernels built: {_native.CUDA_BUILT}")
  print(f"model: {config.layers} MoE blocks, {config.experts} experts, top-{config.top_k}, "
        f"d_model {config.d_model}, d_ff {config.d_ff}, vocab {config.vocab}; "
        f"{config.batch}x{config.seq_len} tokens/step, {config.steps} steps, {config.recipe}")
  result = train(config, device=device, plot=flags.plot)
  ce = result.cross_entropy
  window = max(1, min(10, len(ce) // 4))
  first, last = float(ce[:window].mean()), float(ce[-window:].mean())
  print(f"loss: {first:.3f} -> {last:.3f} (mean of the first and last {window} steps; "
        f"uniform guess {math.log(config.vocab):.3f}, best possible "
        f"{noise_floor(config.vocab, config.noise):.3f})")
  print(f"throughput: {result.tokens_per_second:,.0f} tokens/s (train step, after the first)")
  if result.plot:
    print(f"loss curve: {result.plot}")
  ok = result.first_step_ok and last < first
  print("check: " + ("PASSED" if ok else "FAILED") +
        f" (first step within {result.tolerance:g} of jax.lax: {result.first_step_ok}; "
        f"loss fell: {last < first})")
  if not ok:
    raise SystemExit(1)


if __name__ == "__main__":
  from absl import app
  FLAGS = _define_flags()
  app.run(main)
