"""A dense float64 NumPy MoE block: every expert on every token, then the top-k mix.

Independent of the library's sort/permute path, so it checks routing,
permutation and the weighted combine together.
"""

from __future__ import annotations

import numpy as np


def softmax(logits):
  z = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return z / z.sum(axis=-1, keepdims=True)


def silu(z):
  return z / (1.0 + np.exp(-z))


def route(logits, top_k, normalize_weights=True):
  """(weights [T, k], experts [T, k], aux_loss): top-k of the softmax, Switch-style loss."""
  probs = softmax(np.asarray(logits, np.float64))
  experts = np.argsort(-probs, axis=-1, kind="stable")[:, :top_k]
  weights = np.take_along_axis(probs, experts, axis=-1)
  if normalize_weights:
    weights = weights / weights.sum(axis=-1, keepdims=True)
  num_experts = probs.shape[-1]
  fraction = np.bincount(experts.ravel(), minlength=num_experts) / experts.size
  aux_loss = num_experts * np.sum(fraction * probs.mean(axis=0))
  return weights, experts, aux_loss


def moe_block(x, router, gate, up, down, top_k, normalize_weights=True):
  """(y [T, D], aux_loss, experts [T, k]) of the gated-MLP MoE block, in float64."""
  x, router, gate, up, down = (np.asarray(a, np.float64) for a in (x, router, gate, up, down))
  weights, experts, aux_loss = route(x @ router, top_k, normalize_weights)
  every_expert = np.einsum("etf,efd->etd", silu(np.einsum("td,edf->etf", x, gate))
                           * np.einsum("td,edf->etf", x, up), down)  # [E, T, D]
  tokens = np.arange(x.shape[0])[:, None]
  y = np.einsum("tk,tkd->td", weights, every_expert[experts, tokens])
  return y, aux_loss, experts
