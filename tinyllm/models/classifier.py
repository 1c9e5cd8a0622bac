"""Sentence classifiers: a backbone encoder plus a classification head, fine-tuned end to end.

A checkpoint is a classifier when its ``config.json`` has a top-level ``tl_head`` (SPEC.md
section 6, :func:`tinyllm.eval.zoo.kind_of`): ``tl_arch`` is ``"classifier"`` whatever the
backbone, so :func:`tinyllm.eval.zoo.load_model` dispatches here, and the backbone is named by the
config's ``backbone`` field (``"bert"``: a :class:`tinyllm.models.encoder.Encoder`, the only
one). ``config.json`` also holds the label names, in class-index order, under ``labels``, and
the training settings under ``train_config``::

    {"tl_arch": "classifier", "tl_head": "cls", "labels": ["de", "en", "es", "fr", "it"],
     "config": {"tl_head": "cls", "backbone": "bert", "max_len": 64, ...},
     "train_config": {"batch_size": 32, "lr": 0.001, ...}, ...}

Heads (``tl_head``): ``"cls"`` reads the final state of the CLS token (position 0), ``"mean"``
the mean of the final states of the non-PAD positions; then dropout and one linear layer to the
label logits. ``train(..., init=<bert checkpoint folder>)`` starts the backbone from a
pretrained BERT (the zoo fine-tunes its own), whose shape must equal the config's.

Shapes: ``B`` batch, ``T`` tokens (``<= max_len``), ``D`` = ``n_embd``, ``L`` labels.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinyllm.checkpoint import (
    CONFIG_NAME,
    CheckpointError,
    expected_from,
    load_tensors,
    read_config,
    save_checkpoint,
)
from tinyllm.models import bert
from tinyllm.models.encoder import INIT_STD, Encoder, adamw, check_encoder_shape, encode_rows
from tinyllm.models.layers import init_gpt_weights
from tinyllm.models.training import (
    check_adamw_settings,
    lr_at,
    optimizer_step,
    read_configs,
    settings_of,
    train_record,
)
from tinyllm.tokens import N_BYTES, PAD

ARCH = "classifier"
KIND = "classifier"
HEADS = ("cls", "mean")
BACKBONES = ("bert",)


@dataclass(frozen=True)
class Config:
    """A classifier: its head, its backbone and the backbone's shape (a BERT's fields)."""

    tl_head: str = "cls"
    backbone: str = "bert"
    max_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.tl_head not in HEADS:
            raise ValueError(
                f"classifier.Config.tl_head: expected one of {list(HEADS)}, got {self.tl_head!r}"
            )
        if self.backbone not in BACKBONES:
            raise ValueError(
                f"classifier.Config.backbone: expected one of {list(BACKBONES)}, "
                f"got {self.backbone!r}"
            )
        check_encoder_shape(self, "classifier.Config")


@dataclass(frozen=True)
class TrainConfig:
    """Fine-tuning: AdamW (:func:`tinyllm.models.encoder.adamw`) on ``batch_size`` rows a step,
    warmup (None: ``steps // 10``) then cosine decay to ``lr / 10``, gradient-norm clipping at
    ``grad_clip`` (0 = off)."""

    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int | None = None
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        check_adamw_settings(self, "classifier.TrainConfig")


def _check_labels(labels, who: str) -> tuple[str, ...]:
    if (
        not isinstance(labels, list | tuple)
        or len(labels) < 2
        or not all(isinstance(x, str) and x for x in labels)
        or len(set(labels)) != len(labels)
    ):
        raise ValueError(
            f"{who}: expected at least 2 distinct non-empty label names, got {labels!r}"
        )
    return tuple(labels)


class Model(nn.Module):
    """``backbone`` (encoder.Encoder) + ``head`` (dropout, Linear D -> L); ``model(ids)`` ->
    label logits ``[B, L]``; ``model.labels[k]`` names class ``k``; ``model.train_cfg``: the
    settings it was trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config, labels: Sequence[str]) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        self.labels = _check_labels(list(labels), "classifier.Model labels")
        self.backbone = Encoder(cfg.max_len, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.dropout)
        self.drop = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(cfg.n_embd, len(self.labels))
        init_gpt_weights(self, cfg.n_layer, std=INIT_STD)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.backbone(ids)  # [B, T, D]
        if self.cfg.tl_head == "cls":
            pooled = h[:, 0]  # [B, D]: the CLS position
        else:
            keep = (ids != PAD).unsqueeze(-1).to(h.dtype)  # [B, T, 1]
            pooled = (h * keep).sum(1) / keep.sum(1).clamp_min(1.0)  # [B, D]
        return self.head(self.drop(pooled))  # [B, L]


def _check_rows(data, who: str) -> tuple[list[str], list[str]]:
    """``data``: (sentence, label) pairs, or objects with ``.sentence`` and ``.label``."""
    texts, labels = [], []
    for i, r in enumerate(data):
        s, y = (r.sentence, r.label) if hasattr(r, "sentence") else tuple(r)
        if not isinstance(s, str) or not isinstance(y, str) or not y:
            raise ValueError(
                f"{who}: expected (sentence: str, label: non-empty str) at row {i}, got {r!r}"
            )
        texts.append(s)
        labels.append(y)
    if len(set(labels)) < 2:
        raise ValueError(f"{who}: expected rows of at least 2 labels, got {sorted(set(labels))}")
    return texts, labels


def init_backbone_from_bert(model: Model, path: str | os.PathLike) -> None:
    """Copy a BERT checkpoint's encoder into ``model.backbone`` (its MLM head is dropped); the
    BERT's ``max_len``, ``n_layer``, ``n_head`` and ``n_embd`` must equal the classifier's."""
    src = bert.load(path)
    for name in ("max_len", "n_layer", "n_head", "n_embd"):
        want, got = getattr(model.cfg, name), getattr(src.cfg, name)
        if want != got:
            raise ValueError(
                f"classifier init from {path}: expected a bert with {name}={want} (the "
                f"classifier's), got {name}={got}"
            )
    model.backbone.load_state_dict(src.encoder.state_dict(), strict=True)


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None = None,
    init: str | os.PathLike | None = None,
    **settings,
) -> Model:
    """Fine-tune a classifier on ``data``: the TRAIN rows, as (sentence, label) pairs (or rows
    with ``.sentence``/``.label``, e.g. ``tinyllm.data.read_rows``' filtered to split "train");
    ``settings`` are :class:`TrainConfig`'s fields.

    Labels: the sorted distinct labels of ``data``, stored in the checkpoint. ``init``: a bert
    checkpoint folder the backbone starts from (:func:`init_backbone_from_bert`); without it the
    backbone is random. Each step draws ``batch_size`` rows uniformly with replacement
    (``numpy.random.default_rng(seed)``), encodes them ``[CLS] bytes`` cut to ``max_len``, and
    minimises the mean cross entropy (nats) of their labels with AdamW (warmup ``steps // 10``,
    cosine decay). ``progress(step, total, loss)`` after each step. Returns the model in eval mode.
    """
    tc = settings_of(TrainConfig, settings, "classifier.train")
    if steps < 1:
        raise ValueError(f"classifier.train: expected steps >= 1, got {steps}")
    texts, labels = _check_rows(data, "classifier.train")
    names = sorted(set(labels))
    index = {y: k for k, y in enumerate(names)}
    y_all = np.array([index[y] for y in labels], dtype=np.int64)  # [R]
    ids_all = encode_rows(texts, cfg.max_len)  # [R, T_max]
    lengths = (ids_all != PAD).sum(1)  # [R]
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Model(cfg, names)
    model.train_cfg = tc
    if init is not None:
        init_backbone_from_bert(model, init)
    model.train()
    opt = adamw(model, tc.lr, tc.weight_decay)
    warmup = max(1, steps // 10) if tc.warmup is None else tc.warmup
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, tc.lr, warmup)
        pick = rng.integers(0, len(texts), size=tc.batch_size)  # [B]
        T = int(lengths[pick].max())
        ids = torch.from_numpy(ids_all[pick, :T])  # [B, T]: cut the batch's common padding
        loss = F.cross_entropy(model(ids), torch.from_numpy(y_all[pick]))
        optimizer_step(model, opt, loss, tc.grad_clip)
        if progress is not None:
            progress(step + 1, steps, loss.item())
    model.eval()
    return model


# ------------------------------------------------------------------------------ save / load


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path``: config.json (with top-level ``tl_head``, ``labels``
    and the training settings) + model.safetensors."""
    return save_checkpoint(
        path,
        ARCH,
        dataclasses.asdict(model.cfg),
        model.state_dict(),
        tokenizer={"type": "byte", "vocab_size": N_BYTES, "specials": "tinyllm.tokens"},
        extra={"tl_head": model.cfg.tl_head, "labels": list(model.labels)}
        | train_record(model.train_cfg),
    )


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save`: the config, the label names (top-level
    ``labels``) and the weights, each checked (CheckpointError naming config.json or the
    weights file)."""
    cfg, train_cfg = read_configs(path, ARCH, Config, TrainConfig)
    doc = read_config(path, known_archs=[ARCH])
    where = Path(path) / CONFIG_NAME
    if doc.get("tl_head") != cfg.tl_head:
        raise CheckpointError(
            f"{where}: expected top-level tl_head {cfg.tl_head!r} (the config's), "
            f"got {doc.get('tl_head')!r}"
        )
    try:
        labels = _check_labels(doc.get("labels"), f"{where}: labels")
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    model = Model(cfg, labels)
    model.load_state_dict(load_tensors(path, expected_from(model.state_dict())), strict=True)
    model.train_cfg = train_cfg
    model.eval()
    return model


# ---------------------------------------------------------------------------------- scoring


def predict_ids(model: Model, texts: Sequence[str], *, batch_size: int = 256) -> np.ndarray:
    """Predicted class indices ``int64 [len(texts)]``: argmax of the label logits (ties: the
    lowest index)."""
    if isinstance(texts, str):
        raise TypeError("classifier.predict: expected a list of strings, got one str")
    texts = list(texts)
    out = []
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for s in range(0, len(texts), batch_size):
                ids = encode_rows(texts[s : s + batch_size], model.cfg.max_len)
                out.append(model(torch.from_numpy(ids)).argmax(-1).numpy())
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def predict(model: Model, texts: Sequence[str], *, batch_size: int = 256) -> list[str]:
    """The predicted label name of each text (``model.labels[argmax logits]``)."""
    return [model.labels[k] for k in predict_ids(model, texts, batch_size=batch_size)]
