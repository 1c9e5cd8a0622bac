"""Sentence classifiers: a backbone encoder plus a classification head, fine-tuned end to end.

A checkpoint is a classifier when its ``config.json`` has a top-level ``tl_head`` (docs/definitions.md
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

Cross-fitting (``TrainConfig.cross_fit = k >= 2``): every training row carries a fold 0..k-1
(formats/rows.md) and ``train`` fits k classifiers, classifier ``i`` on the rows outside fold
``i``, each exactly as a plain ``train`` on those rows would (same seed, same init). Classifier 0
is the model (``predict``, ``model(ids)``); classifiers 1..k-1 are saved beside it
(``fold_models``, weights ``fold_models.<i-1>.*``) only so that the classifier kind can score
each fold by the classifier that held it out. ``config.json``'s ``trained_on`` lists, per
classifier, the :func:`sentence_digest` of every row it was trained on, so that a scorer can
count scored rows a classifier has seen.

Shapes: ``B`` batch, ``T`` tokens (``<= max_len``), ``D`` = ``n_embd``, ``L`` labels.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinyllm.checkpoint import CONFIG_NAME, CheckpointError, read_config
from tinyllm.models import bert
from tinyllm.models.encoder import (
    INIT_STD,
    TOKENIZER,
    Encoder,
    adamw,
    check_encoder_shape,
    encode_rows,
)
from tinyllm.models.layers import init_gpt_weights
from tinyllm.models.training import (
    check_adamw_settings,
    load_weights,
    read_configs,
    run_steps,
    save_model,
    scoring,
    settings_of,
)
from tinyllm.tokens import PAD

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
    cross_fit: int = 0  # 0: one classifier on all rows; k >= 2: k folds (module docstring)

    def __post_init__(self) -> None:
        check_adamw_settings(self, "classifier.TrainConfig")
        k = self.cross_fit
        if type(k) is not int or k == 1 or k < 0:
            raise ValueError(
                f"classifier.TrainConfig.cross_fit: expected 0 (off) or an int >= 2 (folds), "
                f"got {k!r}"
            )


def sentence_digest(sentence: str) -> str:
    """The first 16 hex digits of ``sha256(sentence as UTF-8)``: how ``trained_on`` names a row."""
    return hashlib.sha256(sentence.encode("utf-8")).hexdigest()[:16]


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
    settings it was trained with (the defaults for a fresh model). ``cross_fit = k >= 2`` adds
    ``fold_models``, the k - 1 classifiers of folds 1..k-1 (:meth:`fold_model`);
    ``trained_on``: per classifier (0 = this one), the digests of its training rows, or None
    when unknown (a fresh model)."""

    def __init__(self, cfg: Config, labels: Sequence[str], cross_fit: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        self.labels = _check_labels(list(labels), "classifier.Model labels")
        self.backbone = Encoder(cfg.max_len, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.dropout)
        self.drop = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(cfg.n_embd, len(self.labels))
        init_gpt_weights(self, cfg.n_layer, std=INIT_STD)
        self.fold_models = nn.ModuleList([Model(cfg, labels) for _ in range(max(cross_fit - 1, 0))])
        self.trained_on: tuple[frozenset[str], ...] | None = None

    @property
    def n_folds(self) -> int:
        """How many classifiers the checkpoint holds: 1, or k when cross-fitted."""
        return 1 + len(self.fold_models)

    def fold_model(self, i: int) -> Model:
        """Classifier ``i``: this model for 0, else ``fold_models[i - 1]``."""
        if not 0 <= i < self.n_folds:
            raise IndexError(f"classifier fold: expected 0..{self.n_folds - 1}, got {i}")
        return self if i == 0 else self.fold_models[i - 1]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.backbone(ids)  # [B, T, D]
        if self.cfg.tl_head == "cls":
            pooled = h[:, 0]  # [B, D]: the CLS position
        else:
            keep = (ids != PAD).unsqueeze(-1).to(h.dtype)  # [B, T, 1]
            pooled = (h * keep).sum(1) / keep.sum(1).clamp_min(1.0)  # [B, D]
        return self.head(self.drop(pooled))  # [B, L]


def _check_rows(data, who: str, k: int) -> tuple[list[str], list[str], list[int]]:
    """``data``: (sentence, label) pairs, or objects with ``.sentence`` and ``.label`` (and
    ``.fold``, an int 0..k-1 on every row, when cross-fitting k folds); folds are [] for k = 0."""
    texts, labels, folds = [], [], []
    for i, r in enumerate(data):
        s, y = (r.sentence, r.label) if hasattr(r, "sentence") else tuple(r)
        if not isinstance(s, str) or not isinstance(y, str) or not y:
            raise ValueError(
                f"{who}: expected (sentence: str, label: non-empty str) at row {i}, got {r!r}"
            )
        if k:
            fold = getattr(r, "fold", None)
            if type(fold) is not int or not 0 <= fold < k:
                raise ValueError(
                    f"{who}: expected a fold 0..{k - 1} on every row (cross_fit={k}), "
                    f"got {fold!r} at row {i}"
                )
            folds.append(fold)
        texts.append(s)
        labels.append(y)
    if len(set(labels)) < 2:
        raise ValueError(f"{who}: expected rows of at least 2 labels, got {sorted(set(labels))}")
    for i in range(k):
        if sum(f != i for f in folds) == 0 or i not in folds:
            raise ValueError(
                f"{who}: expected rows in fold {i} and outside it (cross_fit={k}), got "
                f"{sum(f == i for f in folds)} of {len(folds)} rows in it"
            )
    return texts, labels, folds


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
    """Fine-tune a classifier on ``data``: (sentence, label) pairs (or rows with
    ``.sentence``/``.label``, e.g. ``tinyllm.data.read_train_rows``); ``settings`` are
    :class:`TrainConfig`'s fields.

    Labels: the sorted distinct labels of ``data``, stored in the checkpoint. ``init``: a bert
    checkpoint folder the backbone starts from (:func:`init_backbone_from_bert`); without it the
    backbone is random. Each step draws ``batch_size`` rows uniformly with replacement
    (``numpy.random.default_rng(seed)``), encodes them ``[CLS] bytes`` cut to ``max_len``, and
    minimises the mean cross entropy (nats) of their labels with AdamW (warmup ``steps // 10``,
    cosine decay). With ``cross_fit = k``: every row has a ``.fold``, and classifier ``i`` is
    trained so on the rows outside fold ``i`` (``steps`` each, the same ``seed``; module
    docstring). ``progress(step, total, loss)`` after each step (total = steps x classifiers).
    Returns the model in eval mode.
    """
    tc = settings_of(TrainConfig, settings, "classifier.train")
    if steps < 1:
        raise ValueError(f"classifier.train: expected steps >= 1, got {steps}")
    texts, labels, folds = _check_rows(data, "classifier.train", tc.cross_fit)
    names = sorted(set(labels))
    index = {y: k for k, y in enumerate(names)}
    y_all = np.array([index[y] for y in labels], dtype=np.int64)  # [R]
    ids_all = encode_rows(texts, cfg.max_len)  # [R, T_max]
    if tc.cross_fit:
        picks = [np.array([j for j, f in enumerate(folds) if f != i]) for i in range(tc.cross_fit)]
    else:
        picks = [np.arange(len(texts))]
    nets = []
    for i, rows in enumerate(picks):

        def step_cb(step, total, loss, _done=i * steps):
            if progress is not None:
                progress(_done + step, steps * len(picks), loss)

        net = _fit(cfg, names, ids_all[rows], y_all[rows], tc, seed, steps, init, step_cb)
        nets.append(net)
    model = nets[0]
    model.fold_models = nn.ModuleList(nets[1:])
    model.trained_on = tuple(frozenset(sentence_digest(texts[j]) for j in r) for r in picks)
    model.eval()
    return model


def _fit(cfg, names, ids_all, y_all, tc, seed, steps, init, progress) -> Model:
    """One classifier on the rows ``ids_all [R, T_max]`` with labels ``y_all [R]`` (train's loop)."""
    lengths = (ids_all != PAD).sum(1)  # [R]
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Model(cfg, names)
    model.train_cfg = tc
    if init is not None:
        init_backbone_from_bert(model, init)
    opt = adamw(model, tc.lr, tc.weight_decay)

    def batch_loss(step: int) -> torch.Tensor:
        pick = rng.integers(0, len(y_all), size=tc.batch_size)  # [B]
        T = int(lengths[pick].max())
        ids = torch.from_numpy(ids_all[pick, :T])  # [B, T]: cut the batch's common padding
        return F.cross_entropy(model(ids), torch.from_numpy(y_all[pick]))

    warmup = max(1, steps // 10) if tc.warmup is None else tc.warmup
    run_steps(
        model, opt, steps, batch_loss, lr=tc.lr, warmup=warmup, clip=tc.grad_clip, progress=progress
    )
    return model


# ------------------------------------------------------------------------------ save / load


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path``: config.json (with top-level ``tl_head``, ``labels``,
    the training settings and ``trained_on``: per classifier, the sorted digests of its training
    rows, when known) + model.safetensors (every classifier's weights)."""
    trained = {}
    if model.trained_on is not None:
        trained = {"trained_on": [sorted(t) for t in model.trained_on]}
    return save_model(
        model,
        path,
        ARCH,
        tokenizer=TOKENIZER,
        extra={"tl_head": model.cfg.tl_head, "labels": list(model.labels)} | trained,
    )


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save`: the config, the label names (top-level
    ``labels``), ``trained_on`` (optional: one list of digests per classifier) and the weights,
    each checked (CheckpointError naming config.json or the weights file)."""
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
    model = load_weights(Model(cfg, labels, train_cfg.cross_fit), path, train_cfg)
    model.trained_on = _check_trained_on(doc.get("trained_on"), model.n_folds, where)
    return model


def _check_trained_on(value, n: int, where: Path) -> tuple[frozenset[str], ...] | None:
    """config.json's ``trained_on``: absent (None), or ``n`` lists of digest strings."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != n
        or not all(isinstance(t, list) and all(isinstance(d, str) for d in t) for t in value)
    ):
        got = f"{len(value)} lists" if isinstance(value, list) else type(value).__name__
        raise CheckpointError(
            f"{where}: trained_on: expected {n} lists of row digests (one per classifier), "
            f"got {got}"
        )
    return tuple(frozenset(t) for t in value)


# ---------------------------------------------------------------------------------- scoring


def predict_ids(model: Model, texts: Sequence[str], *, batch_size: int = 256) -> np.ndarray:
    """Predicted class indices ``int64 [len(texts)]``: argmax of the label logits (ties: the
    lowest index)."""
    if isinstance(texts, str):
        raise TypeError("classifier.predict: expected a list of strings, got one str")
    texts = list(texts)
    out = []
    with scoring(model):
        for s in range(0, len(texts), batch_size):
            ids = encode_rows(texts[s : s + batch_size], model.cfg.max_len)
            out.append(model(torch.from_numpy(ids)).argmax(-1).numpy())
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def predict(model: Model, texts: Sequence[str], *, batch_size: int = 256) -> list[str]:
    """The predicted label name of each text (``model.labels[argmax logits]``)."""
    return [model.labels[k] for k in predict_ids(model, texts, batch_size=batch_size)]
