"""ELECTRA: replaced-token detection with a small generator and a discriminator (Clark et al. 2020).

One checkpoint holds both networks, trained jointly:

* the **generator** is a small BERT (:class:`tinyllm.models.encoder.MaskedLM`, ``gen_*`` fields):
  it sees the input with ~``mask_prob`` of its byte positions replaced by MASK (all of them MASK,
  as in the paper) and is trained by MLM on those positions;
* each masked position is then filled with a byte SAMPLED from the generator's softmax, and the
  **discriminator** (a :class:`tinyllm.models.encoder.Encoder` of its own size + a
  ``dense -> GELU -> dense(1)`` head) labels every byte position of the corrupted input original
  (0) or replaced (1). A sampled byte equal to the original counts as original, as in the paper.

``loss = generator MLM loss + disc_weight * discriminator BCE`` (the paper's lambda = 50); the
sampling step is not differentiated (the generator is trained by its MLM loss only). The
generator may learn at its own rate (``train(..., gen_lr=...)``; the zoo's is 1/10 of the
discriminator's), and the discriminator's attention may start local (``disc_local_bias``). By default
the two networks share nothing (the paper shares the embeddings; ours differ in width);
``share_encoder=True`` ties all weights, the paper's other variant (section 3.2): one encoder
with an MLM head and a discriminator head.

Which tokens count: every position holding a byte (ids 0..255) of a ``[CLS] bytes [PAD]...`` row;
CLS and PAD are never masked, never labelled, never scored.

Shapes: ``B`` batch, ``T`` tokens (``<= max_len``), ``D`` = ``n_embd`` (discriminator),
``G`` = ``gen_n_embd`` (generator).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinyllm.models.encoder import (
    INIT_STD,
    TOKENIZER,
    Encoder,
    MaskedLM,
    adamw,
    check_byte_corpus,
    check_encoder_shape,
    check_mask_prob,
    cls_windows,
    encode_rows,
    mlm_mask,
)
from tinyllm.models.layers import init_gpt_weights
from tinyllm.models.training import (
    check_adamw_settings,
    load_model,
    run_steps,
    save_model,
    scoring,
    settings_of,
)
from tinyllm.tokens import MASK, N_BYTES, PAD

ARCH = "electra"
KIND = "rtd"


@dataclass(frozen=True)
class EncoderShape:
    """One encoder's shape (the generator's, from an electra :class:`Config`)."""

    max_len: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float


@dataclass(frozen=True)
class Config:
    """An ELECTRA's shape: the discriminator's (``n_*``) and the generator's (``gen_*``);
    both read ``max_len`` positions, the CLS included. ``mask_prob`` is the share of byte
    positions the generator fills, in training and in scoring (:func:`rtd_accuracy`)."""

    max_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    gen_n_layer: int = 1
    gen_n_head: int = 2
    gen_n_embd: int = 32
    dropout: float = 0.0
    mask_prob: float = 0.15
    # one encoder for both networks (the paper's "tying all weights", section 3.2): the
    # generator is then the discriminator's size and the gen_* fields are not used
    share_encoder: bool = False
    # initial slope of the discriminator's relative-position attention bias: head h starts at
    # -disc_local_bias / 2**h * |j - i| (ALiBi-like: head 0 looks at its neighbours, the last
    # one almost uniformly); 0 = the encoder's uniform start. Learned from there on. Whether a
    # byte was replaced is mostly a question about its neighbours.
    disc_local_bias: float = 0.0

    def __post_init__(self) -> None:
        check_encoder_shape(self, "electra.Config")
        check_encoder_shape(self.generator_shape(), "electra.Config generator")
        if not isinstance(self.disc_local_bias, int | float) or not self.disc_local_bias >= 0:
            raise ValueError(
                "electra.Config.disc_local_bias: expected a number >= 0, "
                f"got {self.disc_local_bias!r}"
            )
        check_mask_prob(self.mask_prob, "electra.Config")

    def generator_shape(self) -> EncoderShape:
        """The generator's shape: the discriminator's with ``share_encoder``, else the gen_*
        fields."""
        share = self.share_encoder
        return EncoderShape(
            max_len=self.max_len,
            n_layer=self.n_layer if share else self.gen_n_layer,
            n_head=self.n_head if share else self.gen_n_head,
            n_embd=self.n_embd if share else self.gen_n_embd,
            dropout=self.dropout,
        )


@dataclass(frozen=True)
class TrainConfig:
    """Joint training: one AdamW (:func:`tinyllm.models.encoder.adamw`) on ``batch_size``
    windows a step, warmup (None: ``steps // 20``) then cosine decay to ``lr / 10``,
    gradient-norm clipping at ``grad_clip`` (0 = off). ``lr`` is the discriminator's peak
    learning rate, ``gen_lr`` the generator's (None: ``lr``); ``disc_weight`` is the paper's
    lambda."""

    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup: int | None = None
    grad_clip: float = 1.0
    gen_lr: float | None = None
    disc_weight: float = 50.0

    def __post_init__(self) -> None:
        check_adamw_settings(self, "electra.TrainConfig")
        if not isinstance(self.disc_weight, int | float) or self.disc_weight <= 0:
            raise ValueError(
                "electra.TrainConfig.disc_weight: expected a positive number, "
                f"got {self.disc_weight!r}"
            )


class Model(nn.Module):
    """``generator`` (an encoder.MaskedLM) + ``discriminator`` (an encoder.Encoder) +
    ``disc_head``; ``model(ids)`` -> the discriminator's "replaced" logits ``[B, T]``;
    ``model.train_cfg``: the settings it was trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        g = cfg.generator_shape()
        self.generator = MaskedLM(g.max_len, g.n_layer, g.n_head, g.n_embd, g.dropout)
        if not cfg.share_encoder:
            self.discriminator = Encoder(
                cfg.max_len, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.dropout
            )
            init_gpt_weights(self.discriminator, cfg.n_layer, std=INIT_STD)
        self.disc_head = nn.Sequential(
            nn.Linear(cfg.n_embd, cfg.n_embd), nn.GELU(), nn.Linear(cfg.n_embd, 1)
        )
        init_gpt_weights(self.disc_head, cfg.n_layer, std=INIT_STD)
        if cfg.disc_local_bias > 0:
            with torch.no_grad():
                self.disc_encoder().rel_bias.copy_(
                    local_bias(cfg.n_head, cfg.max_len, cfg.disc_local_bias)
                )

    def disc_encoder(self) -> Encoder:
        """The discriminator's encoder: its own, or the generator's when ``share_encoder``."""
        return self.generator.encoder if self.cfg.share_encoder else self.discriminator

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.disc_encoder()(ids)  # [B, T, D]
        return self.disc_head(h).squeeze(-1)  # [B, T]: > 0 means "replaced"


def local_bias(n_head: int, max_len: int, slope: float) -> torch.Tensor:
    """``[n_head, 2 * max_len - 1]`` attention logits ``-slope / 2**h * |offset|`` for head
    ``h`` and offset ``j - i`` in ``[-(max_len - 1), max_len - 1]`` (index ``offset + max_len -
    1``, as :class:`tinyllm.models.encoder.Encoder`'s ``rel_bias``)."""
    off = torch.arange(-(max_len - 1), max_len, dtype=torch.float32).abs()  # [2*max_len - 1]
    slopes = slope / 2.0 ** torch.arange(n_head, dtype=torch.float32)  # [H]
    return -slopes[:, None] * off[None, :]


def _sample_torch(logits: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    # one byte per row of [N, 256] logits, from softmax(logits)
    return torch.multinomial(F.softmax(logits.float(), dim=-1), 1, generator=gen).squeeze(-1)


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None = None,
    **settings,
) -> Model:
    """Train generator and discriminator jointly on ``data`` (1-d byte ids) with one AdamW;
    ``settings`` are :class:`TrainConfig`'s fields.

    ``lr`` is the discriminator's (and its head's) peak learning rate, ``gen_lr`` the generator's
    (default: ``lr``); both follow the same warmup + cosine schedule. A generator that learns
    more slowly than the discriminator keeps its replacements easier to detect while the
    discriminator learns (the paper's generator is smaller than the discriminator for the same
    reason). With ``share_encoder`` there is one encoder, so ``gen_lr`` must be None.

    Each step: ``batch_size`` random windows ``[CLS] + (max_len - 1) bytes``;
    :func:`tinyllm.models.encoder.mlm_mask` with ``p = mask_prob`` and every selected position
    MASK; the generator's MLM loss (cross entropy, nats) on those positions; one byte sampled per
    masked position from the generator's softmax (detached); the discriminator's binary cross
    entropy of "replaced" (sample != original) over every byte position.
    ``loss = mlm + disc_weight * bce``. Windows and masks come from
    ``numpy.random.default_rng(seed)``, weights and samples from torch seeded with ``seed``.
    ``progress(step, total, loss)`` after each step. Returns the model in eval mode.
    """
    tc = settings_of(TrainConfig, settings, "electra.train")
    if steps < 1:
        raise ValueError(f"electra.train: expected steps >= 1, got {steps}")
    gen_lr = tc.gen_lr
    if gen_lr is not None and (
        cfg.share_encoder or not isinstance(gen_lr, int | float) or not gen_lr > 0
    ):
        raise ValueError(
            "electra.train: expected gen_lr None, or a positive number without share_encoder, "
            f"got gen_lr={gen_lr!r} with share_encoder={cfg.share_encoder}"
        )
    a = check_byte_corpus(data, cfg.max_len, "electra.train")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Model(cfg)
    model.train_cfg = tc
    gen_scale = 1.0 if gen_lr is None else gen_lr / tc.lr
    opt = adamw(
        model,
        tc.lr,
        tc.weight_decay,
        lr_scale=lambda name: gen_scale if name.startswith("generator.") else 1.0,
    )

    def batch_loss(step: int) -> torch.Tensor:
        win = cls_windows(a, rng, tc.batch_size, cfg.max_len)  # [B, T]
        inputs, sel = mlm_mask(win, rng, cfg.mask_prob, mask_frac=1.0, random_frac=0.0)
        if not sel.any():
            sel[0, 1] = True
            inputs[0, 1] = MASK
        orig = torch.from_numpy(win)
        sel_t = torch.from_numpy(sel)
        gen_logits = model.generator.logits_at(torch.from_numpy(inputs), sel_t)  # [N, 256]
        mlm_loss = F.cross_entropy(gen_logits, orig[sel_t])
        with torch.no_grad():
            corrupted = orig.clone()
            corrupted[sel_t] = _sample_torch(gen_logits.detach(), gen)  # [B, T]
        replaced = (corrupted != orig).float()  # [B, T]; a sample equal to the original: 0
        counted = orig < N_BYTES  # [B, T]: byte positions (not CLS)
        disc_logits = model(corrupted)  # [B, T]
        bce = F.binary_cross_entropy_with_logits(disc_logits[counted], replaced[counted])
        return mlm_loss + tc.disc_weight * bce

    warmup = max(1, steps // 20) if tc.warmup is None else tc.warmup
    run_steps(
        model, opt, steps, batch_loss, lr=tc.lr, warmup=warmup, clip=tc.grad_clip, progress=progress
    )
    return model


# ------------------------------------------------------------------------------ save / load


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json with the config and the training
    settings, model.safetensors): ONE checkpoint holding ``generator.*``, ``discriminator.*``
    and ``disc_head.*``."""
    return save_model(model, path, ARCH, tokenizer=TOKENIZER)


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (names, shapes, dtypes and finiteness
    checked against a freshly built model; CheckpointError naming the file)."""
    return load_model(path, ARCH, Config, TrainConfig, Model)


# ---------------------------------------------------------------------------------- scoring


def inverse_cdf_sample(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One index per row of ``probs`` ``[N, K]`` (rows sum to ~1): the smallest ``k`` with
    ``cumsum(probs)[k] > u * total`` for uniforms ``u`` ``[N]`` in [0, 1), so index ``k`` is
    drawn with probability ``probs[k] / total`` and a zero-probability index never.

    >>> inverse_cdf_sample(np.array([[0.2, 0.5, 0.3]] * 3), np.array([0.1, 0.2, 0.95])).tolist()
    [0, 1, 2]
    """
    cdf = np.cumsum(probs, axis=1)  # [N, K]
    k = (cdf <= (u * cdf[:, -1])[:, None]).sum(axis=1)  # how many cdf values the draw passed
    return np.minimum(k, probs.shape[1] - 1)


def rtd_accuracy(
    model: Model,
    texts: Sequence[str],
    rng: np.random.Generator,
    *,
    batch_size: int = 256,
) -> dict[str, np.ndarray]:
    """Replaced-token detection on ``texts``, every random draw from ``rng``.

    Each text becomes ``[CLS] bytes`` (cut to ``max_len``). Row by row, in order: its byte
    positions are selected with probability ``cfg.mask_prob`` and all selected ones set to MASK
    (:func:`tinyllm.models.encoder.mask_rows`), then one uniform per selected position is drawn;
    the generator's softmax at that position is sampled by inverse CDF with it. The discriminator
    then reads the corrupted rows and calls a byte "replaced" when its logit is > 0.

    Counted tokens: every byte position (not CLS, not PAD). A position is *replaced* when its
    sampled byte differs from the original (a sample equal to the original is original).
    Returns, one entry per counted token in row then position order:
    ``correct`` (float64 0/1: prediction == truth), ``replaced`` (bool truth), ``masked``
    (bool: the position was masked, replaced or not); and ``gen_correct`` (float64 0/1, one per
    masked position: the generator's argmax equals the original byte).
    """
    cfg = model.cfg
    rows = encode_rows(texts, cfg.max_len)
    # per row: its masks, then the uniforms of its masked positions (prefix-stable draws)
    inputs, sel = np.empty_like(rows), np.zeros(rows.shape, dtype=bool)
    uniforms = []
    for i, row in enumerate(rows):
        n = int(np.count_nonzero(row != PAD))
        inputs[i, :n], sel[i, :n] = mlm_mask(
            row[:n], rng, cfg.mask_prob, mask_frac=1.0, random_frac=0.0
        )
        inputs[i, n:] = PAD
        uniforms.append(rng.random(int(sel[i].sum())))
    u = np.concatenate(uniforms) if uniforms else np.zeros(0)  # [N_masked], row-major
    corrupted = rows.copy()
    gen_argmax = []
    with scoring(model):
        probs = []
        for s in range(0, len(rows), batch_size):
            b_sel = torch.from_numpy(sel[s : s + batch_size])
            if not bool(b_sel.any()):
                continue
            lg = model.generator.logits_at(torch.from_numpy(inputs[s : s + batch_size]), b_sel)
            probs.append(F.softmax(lg.double(), dim=-1).numpy())  # [N_b, 256]
            gen_argmax.append(lg.argmax(-1).numpy())
        if probs:
            corrupted[sel] = inverse_cdf_sample(np.concatenate(probs), u)
        disc = []
        for s in range(0, len(rows), batch_size):
            disc.append(model(torch.from_numpy(corrupted[s : s + batch_size])).numpy())
    counted = rows < N_BYTES  # [B, T]: bytes only
    disc_logits = np.concatenate(disc, axis=0) if disc else np.zeros(rows.shape)
    pred = disc_logits[counted] > 0
    replaced = (corrupted != rows)[counted]
    gen_pred = np.concatenate(gen_argmax) if gen_argmax else np.zeros(0, dtype=np.int64)
    return {
        "correct": (pred == replaced).astype(np.float64),
        "replaced": replaced,
        "masked": sel[counted],
        "gen_correct": (gen_pred == rows[sel]).astype(np.float64),
    }
