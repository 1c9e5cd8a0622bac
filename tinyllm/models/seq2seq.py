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

The module also holds what the seq2seq families share: the pair data check
(:func:`check_pairs`), the teacher-forced training loop (:func:`fit`) and batched beam decoding
through the ``encode`` / ``decode_step`` hooks (:func:`translate_ids_with`); the transformer
family uses them too.

Shapes: ``B`` batch, ``S`` source tokens, ``T`` target tokens, ``E`` emb_dim, ``H`` hidden.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from tinyllm.checkpoint import expected_from, load_tensors, read_family_config, save_checkpoint
from tinyllm.models.beam import beam_search, strip_hypothesis
from tinyllm.models.training import lr_at, optimizer_step
from tinyllm.tokens import (
    BOS,
    CLS,
    MASK,
    PAD,
    VOCAB_WITH_SPECIALS,
    ByteTokenizer,
    encode_batch,
)

ARCH = "seq2seq"
KIND = "seq2seq"
VOCAB = VOCAB_WITH_SPECIALS  # 256 bytes + PAD, BOS, EOS, MASK, CLS
NEVER_EMITTED = (PAD, BOS, MASK, CLS)  # output ids masked to -inf: only bytes and EOS are emitted


def _check_int(cfg, names) -> None:
    for name in names:
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{type(cfg).__qualname__}.{name}: expected an int >= 1, got {v!r}")


def check_training_fields(cfg) -> None:
    """The training fields every seq2seq family's Config has (lr, warmup, clip, batch_size)."""
    _check_int(cfg, ("batch_size", "max_len"))
    if not (isinstance(cfg.lr, int | float) and math.isfinite(cfg.lr) and cfg.lr > 0):
        raise ValueError(f"Config.lr: expected a finite number > 0, got {cfg.lr!r}")
    if not (isinstance(cfg.warmup, int) and cfg.warmup >= 0):
        raise ValueError(f"Config.warmup: expected an int >= 0, got {cfg.warmup!r}")
    if not (isinstance(cfg.clip, int | float) and cfg.clip >= 0):
        raise ValueError(f"Config.clip: expected a number >= 0 (0 = off), got {cfg.clip!r}")


@dataclass(frozen=True)
class Config:
    """Widths, the longest sequence (bytes, source or target, specials excluded) and the Adam
    recipe: linear warmup over ``warmup`` steps, then cosine decay to ``lr / 10``."""

    emb_dim: int = 64
    hidden: int = 128  # decoder width; each encoder direction has hidden // 2
    max_len: int = 64
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 50
    clip: float = 1.0  # gradient-norm clipping, 0 = off

    def __post_init__(self) -> None:
        _check_int(self, ("emb_dim", "hidden"))
        if self.hidden % 2:
            raise ValueError(f"Config.hidden: expected an even int, got {self.hidden}")
        check_training_fields(self)


# The demo zoo's seq2seq (tinyllm/train.py reads these), trained on both cldr tasks together
# (tinyllm.data.cldr_files: 4,027 train pairs), seed 0, 1 torch thread, on a busy 2-core machine
# (train s = CPU seconds of the process); EM on val with beam 4, Wilson 95%; p = paired
# permutation test against the copy baseline on the same names (copy: 21/291 = 0.072):
#   config          steps  train s  cldr-names EM            p       cldr-dates EM
#   Config()        1500   94       0.172 [0.133, 0.219]     0.0004  1.000 [0.995, 1.000]
#   Config()        2000   ~125     0.165 [0.127, 0.212]     0.0013  1.000 [0.995, 1.000]
# Dates are learned early (train loss < 0.1 by step 1000); names are mostly memorization and do
# not improve with more steps, so the zoo takes the cheaper run.
ZOO_CONFIG = Config()
ZOO_STEPS = 1500
ZOO_COST_S = 95.0  # measured single-thread training seconds (train.Recipe.cost_s)


def output_mask() -> torch.Tensor:
    """``[V]`` additive mask: 0 for the bytes and EOS, -inf for the ids never emitted."""
    m = torch.zeros(VOCAB)
    m[list(NEVER_EMITTED)] = float("-inf")
    return m


class Model(nn.Module):
    """Bidirectional GRU encoder, GRU decoder, Luong "general" attention (module docstring)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
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


# ----------------------------------------------------------------- shared by the seq2seq families


def check_pairs(data, who: str) -> list[tuple[str, str]]:
    """``data`` as a list of (src, tgt) string pairs: pairs, or dicts with "src" and "tgt"."""
    if isinstance(data, str | bytes) or not isinstance(data, Sequence | np.ndarray):
        raise ValueError(f"{who}: expected a list of (src, tgt) string pairs, got {type(data)}")
    out = []
    for i, p in enumerate(data):
        if isinstance(p, dict):
            p = (p.get("src"), p.get("tgt"))
        if not (
            isinstance(p, tuple | list)
            and len(p) == 2
            and isinstance(p[0], str)
            and isinstance(p[1], str)
        ):
            raise ValueError(f"{who}: expected pair {i} to be two strings (src, tgt), got {p!r}")
        out.append((p[0], p[1]))
    if not out:
        raise ValueError(f"{who}: expected at least one (src, tgt) pair, got none")
    return out


def encode_sources(srcs: list[str], max_len: int) -> torch.Tensor:
    """Sources -> [B, S] ids ``<bytes> EOS`` (bytes cut to ``max_len``), PAD on the right."""
    ids, _ = encode_batch(srcs, eos=True, max_len=max_len + 1)
    return torch.from_numpy(ids)


def encode_targets(tgts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets -> (decoder input ``BOS <bytes>`` [B, T], targets ``<bytes> EOS`` [B, T]), PAD
    on the right (a PAD target is ignored by the loss)."""
    ids, _ = encode_batch(tgts, bos=True, eos=True, max_len=max_len + 2)
    t = torch.from_numpy(ids)
    return t[:, :-1], t[:, 1:]


def fit(
    model: nn.Module,
    pairs: list[tuple[str, str]],
    cfg,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None,
) -> None:
    """Teacher-forced training of ``model(src, tgt_in) -> logits [B, T, V]``, in place: Adam,
    ``cfg.batch_size`` pairs per step drawn uniformly with ``numpy.random.default_rng(seed)``,
    mean cross entropy (nats) over the non-PAD targets, lr by :func:`tinyllm.models.training.lr_at`
    (warmup ``cfg.warmup``, cosine to ``cfg.lr / 10``), gradient-norm clipping at ``cfg.clip``.
    ``progress(step, steps, loss)`` after each step (1-based)."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    srcs = [s for s, _ in pairs]
    tgts = [t for _, t in pairs]
    model.train()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, cfg.lr, cfg.warmup)
        pick = rng.integers(0, len(pairs), size=cfg.batch_size)
        src = encode_sources([srcs[i] for i in pick], cfg.max_len)
        tgt_in, tgt_out = encode_targets([tgts[i] for i in pick], cfg.max_len)
        logits = model(src, tgt_in)  # [B, T, V]
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD)
        optimizer_step(model, opt, loss, cfg.clip)
        if progress is not None:
            progress(step + 1, steps, loss.item())
    model.eval()


def translate_ids_with(
    family,
    model,
    srcs: list[str],
    *,
    beam: int,
    max_len: int,
    batch_size: int,
    length_penalty: float = 0.0,
) -> list[list[int]]:
    """Best beam hypothesis per source (ids with eos, no BOS), decoded ``batch_size`` sources at
    a time through ``family.encode`` / ``family.decode_step``; ``max_len`` tokens at most."""
    if isinstance(srcs, str):
        raise TypeError("translate: expected a list of strings, got one str")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"translate: expected batch_size >= 1, got {batch_size!r}")
    was_training = getattr(model, "training", False)
    if isinstance(model, nn.Module):
        model.eval()
    out: list[list[int]] = []
    try:
        with torch.inference_mode():
            for s in range(0, len(srcs), batch_size):
                chunk = list(srcs[s : s + batch_size])
                src = encode_sources(chunk, model.cfg.max_len)
                state = family.encode(model, src)
                res = beam_search(
                    lambda st, prev: family.decode_step(model, st, prev),
                    state,
                    len(chunk),
                    beam=beam,
                    max_len=max_len,
                    length_penalty=length_penalty,
                )
                out.extend(res.ids)
    finally:
        if isinstance(model, nn.Module):
            model.train(was_training)
    return out


def hypothesis_text(ids: list[int]) -> str:
    """A hypothesis' text: eos and padding stripped, the bytes decoded as UTF-8 (invalid bytes
    become U+FFFD; exact match compares bytes, not this text)."""
    return ByteTokenizer().decode(strip_hypothesis(ids))


# ----------------------------------------------------------------------------- train / translate


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None = None,
) -> Model:
    """Train on ``data``, a list of (src, tgt) string pairs (or {"src", "tgt"} dicts), by
    teacher forcing (:func:`fit`); weights from ``torch.manual_seed(seed)``. Returns the model in
    eval mode."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"seq2seq.train: expected steps >= 1, got {steps!r}")
    pairs = check_pairs(data, "seq2seq.train")
    torch.manual_seed(seed)
    model = Model(cfg)
    fit(model, pairs, cfg, seed=seed, steps=steps, progress=progress)
    return model


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
        max_len=model.cfg.max_len + 1 if max_len is None else max_len,
        batch_size=batch_size,
        length_penalty=length_penalty,
    )


def translate(
    model: Model, srcs: list[str], beam: int = 4, max_len: int | None = None, **kw
) -> list[str]:
    """The best beam hypothesis of each source as text (eos and padding stripped)."""
    return [hypothesis_text(h) for h in translate_ids(model, srcs, beam, max_len, **kw)]


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json + model.safetensors)."""
    return save_checkpoint(path, ARCH, dataclasses.asdict(model.cfg), model.state_dict())


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (every tensor checked against a freshly
    built model); the model is in eval mode."""
    cfg = read_family_config(path, ARCH, Config)
    model = Model(cfg)
    model.load_state_dict(load_tensors(path, expected_from(model.state_dict())), strict=True)
    model.eval()
    return model
