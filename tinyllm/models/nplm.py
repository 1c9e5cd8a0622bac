"""Neural probabilistic language model over bytes (Bengio, Ducharme, Vincent & Jauvin, 2003).

The next byte after position t is predicted from the ``k = context`` bytes ``x_{t-k+1} .. x_t``::

    e      = [C(x_{t-k+1}); ...; C(x_t)]                [k * emb_dim]  (concatenated embeddings)
    h      = tanh(H e + d)                             [hidden]
    logits = U h + b (+ W e when ``direct``)           [256]           (direct connections)
    p(x_{t+1} | context) = softmax(logits)

Short prefix: positions before the start of the sequence are filled with the padding id 256, a
257th row of the embedding table (learned). So token 1 is predicted from ``[PAD]*(k-1) + x_0``,
token 2 from ``[PAD]*(k-2) + x_0 x_1``, and from token k on the context is all real bytes.
Training samples segments at random offsets and trains on every position, including the first
k-1 of each segment, whose padded contexts teach the model exactly this "shorter prefix" case.
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

from tinyllm.models.training import check_ints, check_numbers, load_model, save_model, settings_of
from tinyllm.tokens import check_byte_ids, check_byte_range

ARCH = "nplm"
KIND = "lm"
VOCAB = 256
PAD = 256  # padding id for positions before the start; embedding table has 257 rows
CHUNK = 8192  # tokens scored per chunk by token_nlls


@dataclass(frozen=True)
class Config:
    """Model size."""

    context: int = 6  # k, bytes of context
    emb_dim: int = 32
    hidden: int = 384
    direct: bool = True  # direct (linear) connections from the embeddings to the logits

    def __post_init__(self) -> None:
        check_ints(self, ("context", "emb_dim", "hidden"), "nplm Config")
        if not isinstance(self.direct, bool):
            raise ValueError(f"nplm Config.direct: expected a bool, got {self.direct!r}")


@dataclass(frozen=True)
class TrainConfig:
    """The training recipe: AdamW, cosine decay of the lr to 10%, ``batch_size`` random segments
    of ``seq_len`` bytes a step (every position is a training example)."""

    seq_len: int = 64
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        check_ints(self, ("seq_len", "batch_size"), "nplm TrainConfig")
        check_numbers(self, ("lr", "weight_decay"), "nplm TrainConfig")


class Model(nn.Module):
    """Bengio et al. (2003) MLP LM; ``forward(idx)`` -> logits of the byte after each position;
    ``train_cfg``: the settings it was trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        self.emb = nn.Embedding(VOCAB + 1, cfg.emb_dim)  # row 256 = PAD
        self.hidden = nn.Linear(cfg.context * cfg.emb_dim, cfg.hidden)
        self.out = nn.Linear(cfg.hidden, VOCAB)
        self.direct = (
            nn.Linear(cfg.context * cfg.emb_dim, VOCAB, bias=False) if cfg.direct else None
        )

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """``idx`` [B, T] -> (logits [B, T, 256], loss or None); position t predicts t+1.

        Positions before ``idx[:, 0]`` are PAD: the model treats the segment as a sequence start.
        """
        B, T = idx.shape
        k = self.cfg.context
        padded = F.pad(idx, (k - 1, 0), value=PAD)  # [B, T + k - 1]
        windows = padded.unfold(1, k, 1)  # [B, T, k]: oldest .. current byte
        e = self.emb(windows).reshape(B, T, k * self.cfg.emb_dim)  # concatenated embeddings
        logits = self.out(torch.tanh(self.hidden(e)))  # [B, T, 256]
        if self.direct is not None:
            logits = logits + self.direct(e)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, VOCAB), targets.reshape(B * T))
        return logits, loss


def train(cfg: Config, data, *, seed: int, steps: int, progress=None, **settings) -> Model:
    """AdamW on random segments of ``data``: each step a batch [batch_size, seq_len] of inputs and
    the next bytes as targets (``settings``: :class:`TrainConfig`'s fields). ``steps = 0``
    returns the seeded initial model. ``progress(step, steps, loss)`` gets the batch's mean
    cross-entropy (nats)."""
    tc = settings_of(TrainConfig, settings, "nplm.train")
    a = check_byte_range(np.asarray(check_byte_ids(data, "nplm.train"), np.int64), "nplm.train")
    if a.size < 2:
        raise ValueError(f"nplm.train: expected at least 2 bytes of data, got {a.size}")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Model(cfg)
    model.train_cfg = tc
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    T = min(tc.seq_len, a.size - 1)
    data_t = torch.from_numpy(a)
    offs = torch.arange(T + 1)
    model.train()
    for step in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = tc.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * (step - 1) / steps)))
        starts = torch.from_numpy(rng.integers(0, a.size - T, size=tc.batch_size))
        seg = data_t[starts[:, None] + offs]  # [B, T+1]
        _, loss = model(seg[:, :-1], seg[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if progress is not None:
            progress(step, steps, loss.item())
    model.eval()
    return model


@torch.inference_mode()
def token_nlls(model: Model, ids, chunk: int = CHUNK) -> np.ndarray:
    """NLL (nats, float64) of tokens 1..n-1; token t sees ``x_{t-k} .. x_{t-1}``, PAD before 0.

    ``ids`` is read in chunks of ``chunk`` targets, each with the k bytes before it, so the
    result does not depend on ``chunk``.
    """
    a = check_byte_ids(ids, "nplm.token_nlls")
    n = a.size
    if n < 2:
        raise ValueError(f"nplm.token_nlls: expected at least 2 ids, got {n}")
    model.eval()
    k = model.cfg.context
    out = np.empty(n - 1, dtype=np.float64)
    for s in range(1, n, chunk):
        e = min(n, s + chunk)
        lo = max(0, s - k)  # inputs from lo: the first target s has its k previous bytes
        seg = check_byte_range(np.asarray(a[lo:e], np.int64), "nplm.token_nlls")
        x = torch.from_numpy(seg)
        logits, _ = model(x[None, :-1])  # [1, e-1-lo, 256]; position j predicts lo+j+1
        logp = F.log_softmax(logits[0].double(), dim=-1)
        j = torch.arange(s - 1 - lo, e - 1 - lo)  # positions predicting targets s .. e-1
        out[s - 1 : e - 1] = -logp[j, x[j + 1]].numpy()
    return out


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json with the config and the training
    settings, model.safetensors)."""
    return save_model(model, path, ARCH)


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (eval mode)."""
    return load_model(path, ARCH, Config, TrainConfig, Model)
