"""Byte bigram language model: a ``[256, 256]`` table of logits, row = previous byte.

``p(x_t = b | x_{t-1} = a) = softmax(table[a])[b]``: row ``a`` (the previous byte) holds the
logits of the next byte. Training counts byte pairs and applies add-k smoothing::

    p(b | a) = (c(a, b) + k) / (c(a) + 256 k),   table[a, b] = ln p(b | a)

An all-zero table is uniform: every byte has probability 1/256, i.e. exactly 8 bits per byte (the
zoo's unit, docs/definitions.md, the zoo). The table is stored in nats and read through ``log_softmax`` over
each row, so a hand-made (unnormalized) table is valid too.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tinyllm.models.training import load_model, save_model, settings_of
from tinyllm.tokens import check_byte_ids, check_byte_range

ARCH = "bigram"
KIND = "lm"
VOCAB = 256
CHUNK = 1 << 16  # tokens scored per chunk by token_nlls (bounded memory on long files)


@dataclass(frozen=True)
class Config:
    """``k``: add-k smoothing pseudo-count added to every (previous, next) pair; must be > 0."""

    k: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.k, int | float) and math.isfinite(self.k) and self.k > 0):
            raise ValueError(f"bigram Config.k: expected a finite number > 0, got {self.k!r}")


@dataclass(frozen=True)
class TrainConfig:
    """No settings: counting is exact (the family contract's TrainConfig, empty)."""


class Model(nn.Module):
    """The table ``logits[prev, next]`` (nats); ``forward(idx)`` -> logits of the next byte."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        # [256 prev, 256 next]; zeros = uniform
        self.logits = nn.Parameter(torch.zeros(VOCAB, VOCAB))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """``idx`` [B, T] byte ids -> logits [B, T, 256]; position t predicts token t+1."""
        return self.logits[idx]  # row lookup: [B, T] -> [B, T, 256]


def train(cfg: Config, data, *, seed: int, steps: int = 0, progress=None, **settings) -> Model:
    """Fit the table from pair counts with add-k smoothing (``seed`` and ``steps`` are unused:
    counting is exact and deterministic; ``settings``: :class:`TrainConfig`'s fields, none;
    ``progress(1, 1, nll)`` is called once with the mean training NLL in nats)."""
    settings_of(TrainConfig, settings, "bigram.train")
    a = check_byte_range(
        np.asarray(check_byte_ids(data, "bigram.train"), dtype=np.int64), "bigram.train"
    )
    model = Model(cfg)
    # counts[prev, next]: flat index prev*256 + next
    counts = np.bincount(a[:-1] * VOCAB + a[1:], minlength=VOCAB * VOCAB).astype(np.float64)
    counts = counts.reshape(VOCAB, VOCAB)
    probs = (counts + cfg.k) / (counts.sum(axis=1, keepdims=True) + VOCAB * cfg.k)
    with torch.no_grad():
        model.logits.copy_(torch.from_numpy(np.log(probs)))
    if progress is not None:
        nll = float(token_nlls(model, a).mean()) if a.size >= 2 else math.log(VOCAB)
        progress(1, 1, nll)
    return model


@torch.inference_mode()
def token_nlls(model: Model, ids, chunk: int = CHUNK) -> np.ndarray:
    """NLL (nats, float64) of tokens 1..n-1: ``l_t = -log_softmax(table[x_{t-1}])[x_t]``.

    ``ids`` may be a memmap of any length; it is read ``chunk`` tokens at a time.
    """
    a = check_byte_ids(ids, "bigram.token_nlls")
    n = a.size
    if n < 2:
        raise ValueError(f"bigram.token_nlls: expected at least 2 ids, got {n}")
    # [256 prev, 256 next] normalized per row, in float64
    logp = F.log_softmax(model.logits.detach().double(), dim=1).numpy()
    out = np.empty(n - 1, dtype=np.float64)
    for s in range(1, n, chunk):
        e = min(n, s + chunk)
        # previous byte of each target in [s, e), then the targets
        seg = check_byte_range(np.asarray(a[s - 1 : e], dtype=np.int64), "bigram.token_nlls")
        out[s - 1 : e - 1] = -logp[seg[:-1], seg[1:]]  # row = previous, column = next
    return out


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json + model.safetensors)."""
    return save_model(model, path, ARCH)


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (eval mode)."""
    return load_model(path, ARCH, Config, TrainConfig, Model)
