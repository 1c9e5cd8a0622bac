"""Encoder-decoder Transformer (Vaswani et al. 2017), pre-LayerNorm, byte-level.

The encoder is ``n_enc_layer`` non-causal :class:`tinyllm.models.layers.Block` s over the source
``<bytes> EOS`` (padding masked out of every attention); the decoder is ``n_dec_layer``
:class:`tinyllm.models.layers.DecoderBlock` s (causal self-attention, cross-attention over the
encoder's output, MLP) over ``BOS <bytes>``, predicting ``<bytes> EOS``. One token embedding
(vocabulary ``V = 261``, :mod:`tinyllm.tokens`) is shared by encoder, decoder and, tied, the
output head; positions are learned, one table each for encoder and decoder. PAD, BOS, MASK and
CLS are never emitted (their logits are -inf). ::

    m   = ln_enc(Enc(E x + P_enc))                      [B, S, D]
    h_t = ln_dec(Dec(E y_<=t + P_dec, m))               [B, T, D]
    p(y_{t+1} | y_<=t, x) = softmax(E h_t + mask)

``decode_step`` decodes one position at a time from a cache in its state: each decoder layer's
self-attention keys/values of the positions decoded so far and the memory's cross-attention
keys/values (computed once per source), so a step costs O(t), not O(t^2); the tests check it
against the teacher-forced computation.

Training, translation and the data check are the seq2seq families' shared ones
(:func:`tinyllm.models.translation.fit`, :func:`~tinyllm.models.translation.translate_ids_with`).

Shapes: ``B`` batch, ``S`` source tokens, ``T`` target tokens, ``D`` = ``n_embd``.
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

from tinyllm.models.layers import Block, DecoderBlock, init_gpt_weights
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

ARCH = "transformer"
KIND = "seq2seq"


@dataclass(frozen=True)
class Config:
    """Shape and the longest sequence (bytes, source or target, specials excluded)."""

    n_embd: int = 64
    n_head: int = 4
    n_enc_layer: int = 2
    n_dec_layer: int = 2
    dropout: float = 0.0
    max_len: int = 64

    def __post_init__(self) -> None:
        check_positive_ints(self, ("n_embd", "n_head", "n_enc_layer", "n_dec_layer"))
        if self.n_embd % self.n_head:
            raise ValueError(
                f"Config.n_embd: expected a multiple of n_head={self.n_head}, got {self.n_embd}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"Config.dropout: expected a float in [0, 1), got {self.dropout!r}")
        check_positive_ints(self, ("max_len",))


@dataclass(frozen=True)
class TrainConfig:
    """The Adam recipe: ``batch_size`` pairs a step, linear warmup over ``warmup`` steps, then
    cosine decay to ``lr / 10``, gradient-norm clipping at ``clip`` (0 = off)."""

    batch_size: int = 64
    lr: float = 2e-3
    warmup: int = 100
    clip: float = 1.0

    def __post_init__(self) -> None:
        check_settings(self)


class Model(nn.Module):
    """Pre-LN encoder-decoder Transformer (module docstring); ``train_cfg``: the settings it was
    trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        D, n_pos = cfg.n_embd, cfg.max_len + 2  # + EOS (source) / + BOS and one spare (target)
        self.wte = nn.Embedding(VOCAB, D)  # shared: source, target and the tied output head
        self.wpe_enc = nn.Embedding(n_pos, D)
        self.wpe_dec = nn.Embedding(n_pos, D)
        self.drop = nn.Dropout(cfg.dropout)
        self.enc = nn.ModuleList(
            Block(D, cfg.n_head, causal=False, dropout=cfg.dropout) for _ in range(cfg.n_enc_layer)
        )
        self.ln_enc = nn.LayerNorm(D)
        self.dec = nn.ModuleList(
            DecoderBlock(D, cfg.n_head, dropout=cfg.dropout) for _ in range(cfg.n_dec_layer)
        )
        self.ln_dec = nn.LayerNorm(D)
        init_gpt_weights(self, cfg.n_enc_layer + cfg.n_dec_layer)
        self.register_buffer("mask_out", output_mask(), persistent=False)  # [V]

    def _check_len(self, n: int, what: str) -> None:
        if n > self.cfg.max_len + 2:
            raise ValueError(
                f"transformer: expected a {what} of at most max_len + 2 = {self.cfg.max_len + 2} "
                f"tokens, got {n}"
            )

    def encode(self, src: torch.Tensor) -> dict:
        """``src`` [B, S] (PAD on the right) -> ``{"mem": [B, S, D], "src_mask": [B, S]}``."""
        self._check_len(src.shape[1], "source")
        src_mask = src != PAD  # [B, S] True = a real token
        if bool((~src_mask.any(1)).any()):
            raise ValueError("transformer.encode: expected every source row to hold >= 1 token")
        pos = torch.arange(src.shape[1], device=src.device)
        x = self.drop(self.wte(src) + self.wpe_enc(pos))  # [B, S, D]
        attn_mask = src_mask[:, None, None, :]  # [B, 1, 1, S]: keys that are padding are hidden
        for block in self.enc:
            x = block(x, attn_mask)
        return {"mem": self.ln_enc(x), "src_mask": src_mask}

    def decode(self, state: dict, tgt_in: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] of the decoder input ``tgt_in`` [B, T] (BOS first) given the
        encoded source; position t predicts target token t+1."""
        self._check_len(tgt_in.shape[1], "target prefix")
        pos = torch.arange(tgt_in.shape[1], device=tgt_in.device)
        y = self.drop(self.wte(tgt_in) + self.wpe_dec(pos))  # [B, T, D]
        mem_mask = state["src_mask"][:, None, None, :]  # [B, 1, 1, S]
        for block in self.dec:
            y = block(y, state["mem"], mem_mask)
        return self.ln_dec(y) @ self.wte.weight.T + self.mask_out  # [B, T, V], tied head

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: logits [B, T, V]."""
        return self.decode(self.encode(src), tgt_in)


# ------------------------------------------------------------------------------------ the hooks


def encode(model: Model, src_ids: torch.Tensor) -> dict:
    """Encode a right-padded batch of source ids [B, S] (``<bytes> EOS``, PAD after). The
    state: ``mem`` [B, S, D], ``src_mask`` [B, S], each decoder layer's memory keys/values
    ``mem_kv`` and self-attention cache ``past`` (keys/values of the positions decoded so far,
    [B, H, t, Dh], empty at first), and the next position ``t`` (an int)."""
    state = model.encode(src_ids)
    B, H, D = src_ids.shape[0], model.cfg.n_head, model.cfg.n_embd
    empty = torch.empty(B, H, 0, D // H)
    state["mem_kv"] = [blk.cross.memory_kv(state["mem"]) for blk in model.dec]
    state["past"] = [(empty, empty) for _ in model.dec]
    state["t"] = 0
    return state


def decode_step(model: Model, state: dict, prev_ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """``(log_probs [B, V], state)`` of the next token after ``prev_ids`` [B] (BOS first): one
    new decoder position, reading the cached keys/values of the earlier ones (the same numbers
    as :meth:`Model.decode` over the whole prefix, to float rounding)."""
    t = state["t"]
    model._check_len(t + 1, "target prefix")
    pos = torch.tensor([t])
    y = model.wte(prev_ids)[:, None] + model.wpe_dec(pos)  # [B, 1, D]
    mem_mask = state["src_mask"][:, None, None, :]  # [B, 1, 1, S]
    past = []
    for blk, (pk, pv), (mk, mv) in zip(model.dec, state["past"], state["mem_kv"], strict=True):
        y, k, v = blk.step(y, pk, pv, mk, mv, mem_mask)
        past.append((k, v))
    logits = (model.ln_dec(y) @ model.wte.weight.T + model.mask_out)[:, 0]  # [B, V]
    return F.log_softmax(logits, dim=-1), {**state, "past": past, "t": t + 1}


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
    teacher forcing (:func:`tinyllm.models.translation.train_model`: Adam, warmup + cosine,
    clipping; ``settings``: :class:`TrainConfig`'s fields); weights from
    ``torch.manual_seed(seed)``, GPT-2 initialization. Returns the model in eval mode."""
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
    ``max_len`` tokens at most (default and upper bound ``cfg.max_len + 1``: the longest target
    plus eos, what the decoder's positions hold)."""
    limit = model.cfg.max_len + 1
    n = limit if max_len is None else max_len
    if n > limit:
        raise ValueError(f"transformer.translate: expected max_len <= {limit}, got {n}")
    return translate_ids_with(
        sys.modules[__name__],
        model,
        srcs,
        beam=beam,
        max_len=n,
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
    settings, model.safetensors); the tied head is the token embedding and is not stored
    twice."""
    return save_model(model, path, ARCH)


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (every tensor checked against a freshly
    built model); the model is in eval mode."""
    return load_model(path, ARCH, Config, TrainConfig, Model)
