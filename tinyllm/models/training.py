"""The training pieces every gradient-trained family shares: the learning-rate schedule and one
optimizer step. (Functions, not a base class: each family keeps its own ``train``.)"""

from __future__ import annotations

import math

import torch
from torch import nn


def lr_at(step: int, steps: int, lr: float, warmup: int, min_ratio: float = 0.1) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay from ``lr`` to ``min_ratio * lr``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)  # 0 -> 1
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def optimizer_step(
    model: nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor, grad_clip: float
) -> None:
    """One step on ``loss``: clear the gradients, backpropagate, clip the global gradient norm
    to ``grad_clip`` (when > 0: one bad batch cannot throw the weights far), update."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
