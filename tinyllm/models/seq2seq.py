"""Attention seq2seq: a bidirectional GRU encoder and a GRU decoder with Luong attention
(Luong et al. 2015, "general" score, no input feeding), byte-level.

Source and target are UTF-8 bytes with the special ids of :mod:`tinyllm.tokens` (vocabulary
``V = 261``): a source is ``<bytes> EOS``, the decoder reads ``BOS <bytes>`` and predicts
``<bytes> EOS``; batches are right-padded with ``PAD`` (:func:`tinyllm.tokens.encode_batch`),
padding is never attended to and never a target. ::

    e_1..e_S     = BiGRU(E x_1..E x_S)                       (packed: padding is not read)
    h_0          = tanh(W_b [->h_S ; <-h_1])
    h_t          = GRU(E y_{t-1}, h_{t-1})
    a_t(s)       = softmax_s(h_t^T W_a e_s)                  (Luong "general"; padding masked)
    c_t          = sum_s a_t(s) e_s
    p(y_t | ...) = softmax(W_o tanh(W_c [c_t ; h_t]))        (PAD, BOS, MASK, CLS never emitted)

Without input feeding the decoder GRU runs over the whole target in one call under teacher
forcing, which is several times faster on a CPU than a Python loop of GRU cells. The one token
embedding ``E`` is shared by encoder and decoder (both read bytes).

Training and translation are the seq2seq families' shared ones
(:func:`tinyllm.models.translation.fit`, :func:`~tinyllm.models.translation.translate_ids_with`).

Shapes: ``B`` batch, ``S`` source tokens, ``T`` target tokens, ``E`` emb_dim, ``H`` hidden.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from tinyllm.models.training import load_model, save_model
from tinyllm.models.translation import (
    VOCAB,
    check_positive_ints,
    check_settings,
    hypothesis_text,
    output_mask,
    train_model,
    translate_ids_with,
)
from tinyllm.tokens import PAD

ARCH = "seq2seq"
KIND = "seq2seq"


@dataclass(frozen=True)
class Config:
    """Widths and the longest sequence (bytes, source or target, specials excluded)."""

    emb_dim: int = 64
    hidden: int = 128  # decoder width; each encoder direction has hidden // 2
    max_len: int = 64

    def __post_init__(self) -> None:
        check_positive_ints(self, ("emb_dim", "hidden"))
        if self.hidden % 2:
            raise ValueError(f"Config.hidden: expected an even int, got {self.hidden}")
        check_positive_ints(self, ("max_len",))


@dataclass(frozen=True)
class TrainConfig:
    """The Adam recipe: ``batch_size`` pairs a step, linear warmup over ``warmup`` steps, then
    cosine decay to ``lr / 10``, gradient-norm clipping at ``clip`` (0 = off)."""

    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 50
    clip: float = 1.0

    def __post_init__(self) -> None:
        check_settings(self)


class Model(nn.Module):
    """Bidirectional GRU encoder, GRU decoder, Luong "general" attention (module docstring);
    ``train_cfg``: the settings it was trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        E, H = cfg.emb_dim, cfg.hidden
        self.emb = nn.Embedding(VOCAB, E, padding_idx=PAD)  # shared by encoder and decoder
        self.enc = nn.GRU(E, H // 2, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(H, H)  # final encoder states -> decoder h_0
        self.dec = nn.GRU(E, H, batch_first=True)
        self.attn = nn.Linear(H, H, bias=False)  # W_a: keys = W_a e_s, computed once per source
        self.combine = nn.Linear(2 * H, H)  # W_c [c_t; h_t]
        self.out = nn.Linear(H, VOCAB)
        self.register_buffer("mask_out", output_mask(), persistent=False)  # [V]

    def encode(self, src: torch.Tensor) -> dict:
        """``src`` [B, S] (PAD on the right, each row at least one token) -> the decoder state:
        ``enc`` [B, S, H] encoder outputs, ``keys`` [B, S, H] = W_a enc, ``src_mask`` [B, S]
        (True = a real token), ``h`` [B, H] the decoder's initial hidden state."""
        src_mask = src != PAD  # [B, S]
        lengths = src_mask.sum(1)  # [B]
        if bool((lengths == 0).any()):
            raise ValueError("seq2seq.encode: expected every source row to hold >= 1 token")
        packed = pack_padded_sequence(
            self.emb(src), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        out, h_n = self.enc(packed)  # h_n [2, B, H/2]: last forward state, first backward state
        enc, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # [B,S,H]
        h0 = torch.tanh(self.bridge(torch.cat([h_n[0], h_n[1]], dim=-1)))  # [B, H]
        return {"enc": enc, "keys": self.attn(enc), "src_mask": src_mask, "h": h0}

    def _readout(self, dec_out: torch.Tensor, state: dict) -> torch.Tensor:
        """Decoder outputs [B, T, H] -> logits [B, T, V] by attention over the source."""
        scores = dec_out @ state["keys"].transpose(1, 2)  # [B, T, S]
        scores = scores.masked_fill(~state["src_mask"][:, None, :], float("-inf"))
        ctx = torch.softmax(scores, dim=-1) @ state["enc"]  # [B, T, H]
        att = torch.tanh(self.combine(torch.cat([ctx, dec_out], dim=-1)))  # [B, T, H]
        return self.out(att) + self.mask_out  # [B, T, V]

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: logits [B, T, V] of ``tgt_in`` [B, T] (BOS first) given ``src``;
        position t predicts target token t+1."""
        state = self.encode(src)
        dec_out, _ = self.dec(self.emb(tgt_in), state["h"][None])  # [B, T, H]
        return self._readout(dec_out, state)

    def step(self, state: dict, prev: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """One decoder step: ``prev`` [B] -> (log_probs [B, V], new state)."""
        dec_out, h = self.dec(self.emb(prev)[:, None], state["h"][None])  # [B, 1, H], [1, B, H]
        logits = self._readout(dec_out, state)[:, 0]  # [B, V]
        return F.log_softmax(logits, dim=-1), {**state, "h": h[0]}


# ------------------------------------------------------------------------------------ the hooks


def encode(model: Model, src_ids: torch.Tensor) -> dict:
    """Encode a right-padded batch of source ids [B, S] (``<bytes> EOS``, PAD after)."""
    return model.encode(src_ids)


def decode_step(model: Model, state: dict, prev_ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """``(log_probs [B, V], state)`` of the next token after ``prev_ids`` [B]."""
    return model.step(state, prev_ids)


# ----------------------------------------------------------------------------- train / translate


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None = None,
    **settings,
) -> Model:
    """Train on ``data``, a list of (src, tgt) string pairs (or {"src", "tgt"} dicts), by
    teacher forcing (:func:`tinyllm.models.translation.train_model`; ``settings``:
    :class:`TrainConfig`'s fields); weights from ``torch.manual_seed(seed)``. Returns the model
    in eval mode."""
    return train_model(
        sys.modules[__name__], cfg, data, seed=seed, steps=steps, progress=progress, **settings
    )


def translate_ids(
    model: Model,
    srcs: list[str],
    beam: int = 4,
    max_len: int | None = None,
    *,
    batch_size: int = 64,
    length_penalty: float = 0.0,
) -> list[list[int]]:
    """Best beam hypothesis per source as ids (eos kept; see :mod:`tinyllm.models.beam`);
    ``max_len`` tokens at most (default ``cfg.max_len + 1``: the longest target plus eos)."""
    return translate_ids_with(
        sys.modules[__name__],
        model,
        srcs,
        beam=beam,
        max_len=max_len,
        batch_size=batch_size,
        length_penalty=length_penalty,
    )


def translate(
    model: Model, srcs: list[str], beam: int = 4, max_len: int | None = None, **kw
) -> list[str]:
    """The best beam hypothesis of each source as text (eos and padding stripped)."""
    return [hypothesis_text(h) for h in translate_ids(model, srcs, beam, max_len, **kw)]


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json with the config and the training
    settings, model.safetensors)."""
    return save_model(model, path, ARCH)


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (every tensor checked against a freshly
    built model); the model is in eval mode."""
    return load_model(path, ARCH, Config, TrainConfig, Model)
