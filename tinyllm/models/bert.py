"""BERT: a byte-level Transformer encoder with a masked-language-model head (Devlin et al. 2019).

The network is :class:`tinyllm.models.encoder.MaskedLM`: input ``[CLS] b_1 ... b_n [PAD]...``,
``n_layer`` pre-LayerNorm blocks of bidirectional self-attention with a key-padding mask, and
BERT's MLM head tied to the embeddings of the 256 bytes (:mod:`tinyllm.models.encoder` has the
details).

Masking (:func:`tinyllm.models.encoder.mlm_mask`): each byte position (id 0..255) is selected
independently with probability ``p``; of the selected ones 80% become MASK, 10% a uniformly
random byte, 10% stay as they are (the 80/10/10 rule). Special ids (PAD, BOS, EOS, MASK, CLS:
every id >= 256) are NEVER selected. The loss is the cross entropy of the original byte at the
selected positions only.

Pretraining reads random windows of ``max_len - 1`` bytes of a byte corpus, each behind a CLS.

Shapes: ``B`` batch, ``T`` tokens (``<= max_len``), ``D`` = ``n_embd``, 256 output classes (bytes).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tinyllm.models.encoder import (
    TOKENIZER,
    MaskedLM,
    adamw,
    check_byte_corpus,
    check_encoder_shape,
    check_mask_prob,
    cls_windows,
    encode_rows,
    mask_rows,
    mlm_mask,
)
from tinyllm.models.training import (
    check_adamw_settings,
    load_model,
    run_steps,
    save_model,
    scoring,
    settings_of,
)

ARCH = "bert"
KIND = "mlm"


@dataclass(frozen=True)
class Config:
    """A BERT's shape. ``max_len`` counts every input position, the CLS included."""

    max_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check_encoder_shape(self, "bert.Config")


@dataclass(frozen=True)
class TrainConfig:
    """Pretraining: AdamW (:func:`tinyllm.models.encoder.adamw`) on ``batch_size`` windows a
    step, warmup (None: ``steps // 20``) then cosine decay to ``lr / 10``, gradient-norm
    clipping at ``grad_clip`` (0 = off); ``mask_prob`` is ``p`` of the masking."""

    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup: int | None = None
    grad_clip: float = 1.0
    mask_prob: float = 0.15

    def __post_init__(self) -> None:
        check_adamw_settings(self, "bert.TrainConfig")
        check_mask_prob(self.mask_prob, "bert.TrainConfig")


class Model(MaskedLM):
    """Encoder + MLM head: ``model(ids)`` -> byte logits ``[B, T, 256]`` at every position;
    ``model.train_cfg``: the settings it was trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg.max_len, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.dropout)
        self.cfg = cfg
        self.train_cfg = TrainConfig()


# ---------------------------------------------------------------------------------------- train


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None = None,
    **settings,
) -> Model:
    """Pretrain a BERT by masked-language modelling on ``data`` (1-d byte ids, e.g. the lee
    train bytes) with AdamW; ``settings`` are :class:`TrainConfig`'s fields.

    Each step draws ``batch_size`` windows of ``max_len - 1`` bytes at uniform random offsets,
    puts a CLS in front, masks them with :func:`mlm_mask` (``p = mask_prob``) and minimises
    the mean cross entropy (nats) of the original bytes at the selected positions. Windows and
    masks come from ``numpy.random.default_rng(seed)``, the weights from
    ``torch.manual_seed(seed)``. Learning rate: linear warmup (default ``steps // 20``), cosine
    decay to ``lr / 10``. ``progress(step, total, loss)`` after each step (1-based). Returns the
    model in eval mode.
    """
    tc = settings_of(TrainConfig, settings, "bert.train")
    if steps < 1:
        raise ValueError(f"bert.train: expected steps >= 1, got {steps}")
    a = check_byte_corpus(data, cfg.max_len, "bert.train")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Model(cfg)
    model.train_cfg = tc
    opt = adamw(model, tc.lr, tc.weight_decay)

    def batch_loss(step: int) -> torch.Tensor:
        win = cls_windows(a, rng, tc.batch_size, cfg.max_len)  # [B, T]
        inputs, sel = mlm_mask(win, rng, tc.mask_prob)
        if not sel.any():  # a batch with nothing selected has no loss; skip it (tiny p only)
            sel[0, 1] = True
        logits = model.logits_at(torch.from_numpy(inputs), torch.from_numpy(sel))  # [N, 256]
        return F.cross_entropy(logits, torch.from_numpy(win[sel]))

    warmup = max(1, steps // 20) if tc.warmup is None else tc.warmup
    run_steps(
        model, opt, steps, batch_loss, lr=tc.lr, warmup=warmup, clip=tc.grad_clip, progress=progress
    )
    return model


# ------------------------------------------------------------------------------ save / load


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json with the config and the training
    settings, model.safetensors)."""
    return save_model(model, path, ARCH, tokenizer=TOKENIZER)


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save`; every tensor's name, shape, dtype and
    finiteness is checked against a freshly built model (CheckpointError naming the file)."""
    return load_model(path, ARCH, Config, TrainConfig, Model)


# ---------------------------------------------------------------------------------- scoring


def mlm_accuracy(
    model: Model,
    texts: Sequence[str],
    rng: np.random.Generator,
    *,
    p: float = 0.15,
    batch_size: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """Masked-byte predictions on ``texts``: ``(correct, targets)``, one entry per selected
    position, in row order then position order.

    Each text becomes ``[CLS] bytes`` (cut to ``max_len``); :func:`mask_rows` masks it with the
    80/10/10 rule drawn from ``rng`` (the same masking as in training, so the 10% of selected
    positions left unchanged and the 10% replaced by a random byte are scored too); the
    prediction at a selected position is ``argmax`` of the 256 byte logits.
    ``correct[k] = 1.0`` when it equals the original byte ``targets[k]``, else 0.0 (float64).
    The accuracy is ``correct.mean()``; a row in which nothing was selected adds nothing.
    """
    rows = encode_rows(texts, model.cfg.max_len)
    inputs, sel = mask_rows(rows, rng, p)
    preds = []
    with scoring(model):
        for s in range(0, len(rows), batch_size):
            b_sel = torch.from_numpy(sel[s : s + batch_size])
            if not bool(b_sel.any()):
                continue
            logits = model.logits_at(torch.from_numpy(inputs[s : s + batch_size]), b_sel)
            preds.append(logits.argmax(-1).numpy())  # [N_b]
    targets = rows[sel]  # [N], row-major = the order of the batches above
    pred = np.concatenate(preds) if preds else np.zeros(0, dtype=np.int64)
    return (pred == targets).astype(np.float64), targets
