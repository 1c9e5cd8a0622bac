"""The copy baseline (``tl_arch`` "copy"): answers every source unchanged, ``tgt = src``.

It is the trivial seq2seq model the zoo's table measures the others against: on cldr-names it
already gets the names that English and French spell alike. It has the seq2seq contract
(``encode`` / ``decode_step`` / ``translate``) and goes through the same beam search: its
``decode_step`` puts all the probability (log-prob 0) on the next source byte, then on EOS, and
-inf everywhere else, so every beam size returns the source bytes followed by EOS. Sources are
cut to ``max_len`` bytes like every seq2seq family's.

Nothing is learned: ``train`` ignores its data (checked, though) and the checkpoint holds only
the config (``model.safetensors`` is empty).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tinyllm.checkpoint import load_tensors
from tinyllm.models.training import check_ints, read_configs, save_model, settings_of
from tinyllm.models.translation import VOCAB, check_pairs, hypothesis_text, translate_ids_with
from tinyllm.tokens import EOS, PAD

ARCH = "copy"
KIND = "seq2seq"


@dataclass(frozen=True)
class Config:
    """``max_len``: the longest source, in bytes (longer ones are cut, as every family does)."""

    max_len: int = 64

    def __post_init__(self) -> None:
        check_ints(self, ("max_len",), "copy Config")


@dataclass(frozen=True)
class TrainConfig:
    """No settings: nothing is learned (the family contract's TrainConfig, empty)."""


class Model(nn.Module):
    """No parameters: the answer is the source."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()


def encode(model: Model, src_ids: torch.Tensor) -> dict:
    """The state: the source ids [B, S] (``<bytes> EOS``, PAD after) and the position of the
    next byte to copy, ``pos`` [B] (0)."""
    return {"src": src_ids, "pos": torch.zeros(src_ids.shape[0], dtype=torch.int64)}


def decode_step(model: Model, state: dict, prev_ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """log-prob 0 on ``src[pos]`` (a byte, or the source's EOS), -inf elsewhere; past the
    source's end (only after EOS was emitted) EOS again."""
    src, pos = state["src"], state["pos"]
    B, S = src.shape
    nxt = src.gather(1, pos.clamp(max=S - 1)[:, None])[:, 0]  # [B] the next source token
    nxt = torch.where((pos >= S) | (nxt == PAD), EOS, nxt)
    logp = torch.full((B, VOCAB), float("-inf"))
    logp[torch.arange(B), nxt] = 0.0
    return logp, {"src": src, "pos": pos + 1}


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int = 0,
    progress: Callable[[int, int, float], None] | None = None,
    **settings,
) -> Model:
    """Nothing to learn: checks ``data`` (a list of (src, tgt) pairs) and returns the model
    (``seed`` and ``steps`` are unused; ``settings``: :class:`TrainConfig`'s fields, none).
    ``progress(1, 1, err)`` is called once with its training error: the fraction of pairs whose
    target is not the source (1 - exact match)."""
    settings_of(TrainConfig, settings, "copy.train")
    pairs = check_pairs(data, "copy.train")
    if progress is not None:
        err = sum(src != tgt for src, tgt in pairs) / len(pairs) if pairs else 0.0
        progress(1, 1, float(err))
    return Model(cfg)


def translate_ids(
    model: Model, srcs: list[str], beam: int = 4, max_len: int | None = None, *, batch_size=64
) -> list[list[int]]:
    """The source bytes followed by EOS, through the beam search like every seq2seq family."""
    return translate_ids_with(
        sys.modules[__name__],
        model,
        srcs,
        beam=beam,
        max_len=max_len,
        batch_size=batch_size,
    )


def translate(
    model: Model, srcs: list[str], beam: int = 4, max_len: int | None = None, **kw
) -> list[str]:
    """Each source unchanged (cut to ``max_len`` bytes)."""
    return [hypothesis_text(h) for h in translate_ids(model, srcs, beam, max_len, **kw)]


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path``: config.json and an empty model.safetensors."""
    return save_model(model, path, ARCH, tensors={})


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (its tensor file must be empty)."""
    cfg, train_cfg = read_configs(path, ARCH, Config, TrainConfig)
    load_tensors(path, {})
    model = Model(cfg)
    model.train_cfg = train_cfg
    return model
