"""Recurrent byte language model: embedding -> GRU or LSTM -> linear head.

    h_t    = cell(C(x_t), h_{t-1})       h_{-1} = 0 at the start of the sequence
    p(x_{t+1} | x_0 .. x_t) = softmax(W h_t + b)

Every token is conditioned on the whole prefix through the hidden state. ``token_nlls`` reads a
long array in chunks and carries the hidden state from one chunk to the next, so no token loses
context at a chunk boundary: the result equals one pass over the whole array.

Training is truncated back-propagation through time (BPTT): the data is cut into ``batch_size``
contiguous streams read side by side, ``bptt`` steps at a time; the hidden state is carried from
one window to the next (detached: gradients stop at the window's start) and reset to zero when
the streams wrap around to their beginning.
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

from tinyllm.models.training import (
    check_ints,
    check_numbers,
    load_model,
    optimizer_step,
    save_model,
    settings_of,
)
from tinyllm.tokens import check_byte_ids, check_byte_range

ARCH = "rnnlm"
KIND = "lm"
VOCAB = 256
CELLS = ("gru", "lstm")
CHUNK = 4096  # tokens per chunk in token_nlls


@dataclass(frozen=True)
class Config:
    """Model size."""

    cell: str = "gru"  # "gru" or "lstm"
    emb_dim: int = 64
    hidden: int = 512
    layers: int = 1
    dropout: float = 0.0  # between layers (only with layers > 1) and before the head

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise ValueError(f"rnnlm Config.cell: expected one of {list(CELLS)}, got {self.cell!r}")
        check_ints(self, ("emb_dim", "hidden", "layers"), "rnnlm Config")
        v = self.dropout
        if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ValueError(f"rnnlm Config.dropout: expected a finite number >= 0, got {v!r}")
        if self.dropout >= 1:
            raise ValueError(
                f"rnnlm Config.dropout: expected a value in [0, 1), got {self.dropout}"
            )


@dataclass(frozen=True)
class TrainConfig:
    """The truncated-BPTT recipe: ``batch_size`` streams read ``bptt`` bytes a step, AdamW,
    cosine decay of the lr to 10%, gradient-norm clipping at ``clip`` (0 = off)."""

    bptt: int = 64
    batch_size: int = 32
    lr: float = 3e-3
    clip: float = 1.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        check_ints(self, ("bptt", "batch_size"), "rnnlm TrainConfig")
        check_numbers(self, ("lr", "clip", "weight_decay"), "rnnlm TrainConfig")


class Model(nn.Module):
    """``forward(idx, state=None, targets=None)`` -> (logits [B, T, 256], state, loss);
    ``train_cfg``: the settings it was trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        self.emb = nn.Embedding(VOCAB, cfg.emb_dim)
        rnn = nn.GRU if cfg.cell == "gru" else nn.LSTM
        inner = cfg.dropout if cfg.layers > 1 else 0.0
        self.rnn = rnn(cfg.emb_dim, cfg.hidden, cfg.layers, batch_first=True, dropout=inner)
        self.drop = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(cfg.hidden, VOCAB)

    def forward(self, idx: torch.Tensor, state=None, targets: torch.Tensor | None = None):
        """``idx`` [B, T] -> (logits [B, T, 256], new state, loss or None).

        ``state`` is the hidden state after the previous tokens (GRU: h [layers, B, hidden];
        LSTM: (h, c)); None = zeros, the start of a sequence. Position t predicts token t+1.
        """
        x = self.emb(idx)  # [B, T, emb_dim]
        y, state = self.rnn(x, state)  # y: [B, T, hidden]
        logits = self.head(self.drop(y))  # [B, T, 256]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        return logits, state, loss


def _detach(state):
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


def train(cfg: Config, data, *, seed: int, steps: int, progress=None, **settings) -> Model:
    """Truncated BPTT over ``batch_size`` parallel streams of ``data`` (1-d byte ids);
    ``settings`` are :class:`TrainConfig`'s fields.

    Each step reads the next ``bptt`` bytes of every stream; the state is carried across steps
    (detached) and reset when the streams wrap. ``steps = 0`` returns the seeded initial model.
    ``progress(step, steps, loss)`` gets the window's mean cross-entropy (nats).
    """
    tc = settings_of(TrainConfig, settings, "rnnlm.train")
    a = check_byte_range(np.asarray(check_byte_ids(data, "rnnlm.train"), np.int64), "rnnlm.train")
    if a.size < 3:
        raise ValueError(f"rnnlm.train: expected at least 3 bytes of data, got {a.size}")
    torch.manual_seed(seed)
    model = Model(cfg)
    model.train_cfg = tc
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    B = max(1, min(tc.batch_size, (a.size - 1) // 2))  # tiny data: fewer streams
    L = (a.size - 1) // B  # stream length (inputs); targets are one byte ahead
    inputs = torch.from_numpy(a[: B * L].reshape(B, L))  # [B, L]
    targets = torch.from_numpy(a[1 : B * L + 1].reshape(B, L))  # [B, L]
    T = min(tc.bptt, L)
    pos, state = 0, None
    model.train()
    for step in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = tc.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * (step - 1) / steps)))
        if pos + T > L:  # wrap: back to the streams' start, with a fresh state
            pos, state = 0, None
        _, state, loss = model(inputs[:, pos : pos + T], _detach(state), targets[:, pos : pos + T])
        pos += T
        optimizer_step(model, opt, loss, tc.clip)
        if progress is not None:
            progress(step, steps, loss.item())
    model.eval()
    return model


@torch.inference_mode()
def token_nlls(model: Model, ids, chunk: int = CHUNK) -> np.ndarray:
    """NLL (nats, float64) of tokens 1..n-1, each given the whole prefix ``x_0 .. x_{t-1}``.

    ``ids`` is read ``chunk`` inputs at a time; the hidden state after one chunk is the initial
    state of the next, so the result equals one pass over the whole array.
    """
    a = check_byte_ids(ids, "rnnlm.token_nlls")
    n = a.size
    if n < 2:
        raise ValueError(f"rnnlm.token_nlls: expected at least 2 ids, got {n}")
    if chunk < 1:
        raise ValueError(f"rnnlm.token_nlls: expected chunk >= 1, got {chunk}")
    model.eval()
    out = np.empty(n - 1, dtype=np.float64)
    state = None
    for s in range(0, n - 1, chunk):
        e = min(n - 1, s + chunk)  # inputs s .. e-1 predict targets s+1 .. e
        seg = torch.from_numpy(
            check_byte_range(np.asarray(a[s : e + 1], np.int64), "rnnlm.token_nlls")
        )
        logits, state, _ = model(seg[None, :-1], state)  # [1, e-s, 256]
        logp = F.log_softmax(logits[0].double(), dim=-1)
        out[s:e] = -logp.gather(1, seg[1:, None])[:, 0].numpy()
    return out


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json with the config and the training
    settings, model.safetensors)."""
    return save_model(model, path, ARCH)


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (eval mode)."""
    return load_model(path, ARCH, Config, TrainConfig, Model)
