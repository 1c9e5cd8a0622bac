"""The training pieces every family shares: its training settings (how they are passed, recorded
and read back), a model's checkpoint folder (:func:`save_model`, :func:`load_model`), the
learning-rate schedule, the training loop (:func:`run_steps`), one optimizer step and the eval
mode of a model while it is scored (:func:`scoring`). (Functions, not a base class: each family
keeps its own ``train``, ``save`` and ``load``.)

Each family splits what it knows into two frozen dataclasses: ``Config``, what builds and scores
the model (its shape), and ``TrainConfig``, what only ``train`` reads (optimizer, schedule,
batches, loss weights). ``train(cfg, data, *, seed, steps, progress=None, **settings)`` takes the
TrainConfig's fields as keywords (:func:`settings_of`); the model keeps them as ``model.train_cfg``
and ``save`` writes them to config.json under ``train_config`` (:func:`train_record`), beside
``config``. :func:`read_configs` reads both back; a config.json without ``train_config`` (the
layout of format-1 checkpoints that kept their settings, if any, under ``config``) gives the
TrainConfig's defaults, with any of its fields found under ``config`` taken from there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch
from torch import nn

from tinyllm.checkpoint import (
    CONFIG_NAME,
    CheckpointError,
    expected_from,
    load_tensors,
    read_config,
    save_checkpoint,
)

TRAIN_CONFIG_KEY = "train_config"


def settings_of(train_cls, given: Mapping, who: str):
    """``train_cls(**given)``: a family's TrainConfig from ``train``'s keywords; a name that is not
    one of its fields is a TypeError listing the valid ones."""
    names = [f.name for f in dataclasses.fields(train_cls)]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise TypeError(f"{who}: expected training settings among {names}, got {unknown}")
    return train_cls(**given)


def train_record(train_cfg) -> dict:
    """The config.json entry of a model's training settings: ``{"train_config": {...}}``."""
    return {TRAIN_CONFIG_KEY: dataclasses.asdict(train_cfg)}


def read_configs(directory: str | os.PathLike, arch: str, config_cls, train_cls) -> tuple:
    """``(Config, TrainConfig)`` of a checkpoint folder: :func:`tinyllm.checkpoint.read_config`,
    then ``config_cls(**config)`` and ``train_cls(**train_config)``; without ``train_config`` the
    TrainConfig's fields are taken from ``config`` where they are, the defaults elsewhere (module
    docstring). An unknown or invalid key is a CheckpointError naming config.json."""
    doc = read_config(directory, known_archs=[arch])
    where = Path(directory) / CONFIG_NAME
    conf = dict(doc["config"])
    if TRAIN_CONFIG_KEY in doc:
        given = doc[TRAIN_CONFIG_KEY]
        if not isinstance(given, dict):
            raise CheckpointError(
                f"{where}: expected '{TRAIN_CONFIG_KEY}' to be an object, got {given!r}"
            )
    else:
        names = {f.name for f in dataclasses.fields(train_cls)}
        given = {k: conf.pop(k) for k in list(conf) if k in names}
    try:
        cfg = config_cls(**conf)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: invalid {arch} config: {e}") from None
    try:
        train_cfg = train_cls(**given)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: invalid {arch} {TRAIN_CONFIG_KEY}: {e}") from None
    return cfg, train_cfg


def save_model(
    model,
    path: str | os.PathLike,
    arch: str,
    *,
    tensors: Mapping[str, torch.Tensor] | None = None,
    tokenizer: Mapping | None = None,
    extra: Mapping | None = None,
) -> Path:
    """A family model's checkpoint folder (:func:`tinyllm.checkpoint.save_checkpoint`):
    ``config`` is ``model.cfg`` as a dict, the tensors ``tensors`` (default: the state dict),
    config.json's top level holds ``extra`` and the training settings (:func:`train_record`)."""
    return save_checkpoint(
        path,
        arch,
        dataclasses.asdict(model.cfg),
        model.state_dict() if tensors is None else tensors,
        tokenizer=tokenizer,
        extra={**(extra or {}), **train_record(model.train_cfg)},
    )


def load_weights(model: nn.Module, path: str | os.PathLike, train_cfg) -> nn.Module:
    """Fill a freshly built ``model`` from the folder's model.safetensors (every tensor's name,
    shape, dtype and finiteness checked against the model's own; CheckpointError naming the
    file), set ``model.train_cfg``; the model in eval mode."""
    model.load_state_dict(load_tensors(path, expected_from(model.state_dict())), strict=True)
    model.train_cfg = train_cfg
    return model.eval()


def load_model(path: str | os.PathLike, arch: str, config_cls, train_cls, model_cls) -> nn.Module:
    """A checkpoint folder written by :func:`save_model`: :func:`read_configs`, then
    ``model_cls(cfg)`` filled by :func:`load_weights` (eval mode)."""
    cfg, train_cfg = read_configs(path, arch, config_cls, train_cls)
    return load_weights(model_cls(cfg), path, train_cfg)


def check_ints(cfg, names, who: str) -> None:
    """Each field ``names`` of the dataclass ``cfg`` is an int >= 1 (a bool is refused); the
    error starts with ``who``, e.g. ``nplm TrainConfig.seq_len: expected an int >= 1``."""
    for name in names:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{who}.{name}: expected an int >= 1, got {v!r}")


def check_numbers(cfg, names, who: str) -> None:
    """Each field ``names`` of the dataclass ``cfg`` is a finite number >= 0 (a bool is
    refused); the error starts with ``who``, as :func:`check_ints`'s."""
    for name in names:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{who}.{name}: expected a finite number >= 0, got {v!r}")


def check_adamw_settings(tc, who: str) -> None:
    """The AdamW settings of the encoder families' TrainConfigs: ``batch_size`` an int >= 1,
    ``lr``, ``weight_decay`` and ``grad_clip`` finite numbers >= 0, ``warmup`` None (the
    family's default share of the steps) or an int >= 0."""
    check_ints(tc, ("batch_size",), who)
    check_numbers(tc, ("lr", "weight_decay", "grad_clip"), who)
    w = tc.warmup
    if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
        raise ValueError(f"{who}.warmup: expected None or an int >= 0, got {w!r}")


def lr_at(step: int, steps: int, lr: float, warmup: int, min_ratio: float = 0.1) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay from ``lr`` to ``min_ratio * lr``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)  # 0 -> 1
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def run_steps(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int,
    batch_loss: Callable[[int], torch.Tensor],
    *,
    lr: float,
    warmup: int,
    clip: float,
    progress: Callable[[int, int, float], object] | None = None,
) -> None:
    """The training loop of the families trained on the :func:`lr_at` schedule: for each
    ``step`` in ``0 .. steps-1``, every parameter group's lr is ``lr_at(step, steps, lr,
    warmup)`` times the group's ``lr_scale`` (1 when it has none), ``batch_loss(step)`` draws a
    batch and returns its loss, :func:`optimizer_step` updates (gradient-norm clipping at
    ``clip``), ``progress(step + 1, steps, loss)``. The model is in training mode during the loop and in eval mode after."""
    model.train()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup) * g.get("lr_scale", 1.0)
        loss = batch_loss(step)
        optimizer_step(model, opt, loss, clip)
        if progress is not None:
            progress(step + 1, steps, loss.item())
    model.eval()


@contextlib.contextmanager
def scoring(model) -> Iterator[None]:
    """Inside: ``model`` in eval mode (no dropout) under ``torch.inference_mode()``; after, even
    on an error: the mode it had (a model that is not an ``nn.Module`` is left as it is)."""
    module = isinstance(model, nn.Module)
    was_training = module and model.training
    if module:
        model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        if module:
            model.train(was_training)


def optimizer_step(
    model: nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor, grad_clip: float
) -> None:
    """One step on ``loss``: clear the gradients, backpropagate, clip the global gradient norm
    to ``grad_clip`` (when > 0: one bad batch cannot throw the weights far), update."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
