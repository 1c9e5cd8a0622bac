"""Interpolated Kneser-Ney byte n-gram language model (order configurable, default 5).

Levels ``n = 1 .. N`` (N = ``order``) each hold counts of n-grams ``(h, w)``: ``h`` the ``n-1``
previous bytes, ``w`` the next byte. The top level holds raw counts ``c(h, w)``; every lower level
holds *continuation* counts ``N1+(. h w)`` = the number of distinct bytes ``v`` seen before
``h w``. With ``c(h) = sum_w c(h, w)`` and ``T(h) = #{w : c(h, w) > 0}`` at that level::

    P_0(w)     = 1 / 256
    P_n(w | h) = (max(c(h, w) - D_n, 0) + D_n * T(h) * P_{n-1}(w | h')) / c(h)   if c(h) > 0
               = P_{n-1}(w | h')                                                 otherwise

where ``h'`` drops the oldest byte of ``h``. Each ``P_n(. | h)`` sums to 1 over the 256 bytes
whenever ``P_{n-1}`` does (the mass taken by discounting is exactly ``D_n T(h) / c(h)``), and
``P_0`` does, so every distribution is normalized, for seen and unseen contexts alike.
``D_n = n1 / (n1 + 2 n2)`` (Ney et al. 1994), with ``n1``, ``n2`` the numbers of n-grams at level
n whose count is 1 and 2, clipped to ``[0.05, 1]`` so that ``D_n > 0`` and no byte gets
probability 0.

Short contexts: token ``t`` is scored with the ``min(t, N-1)`` bytes before it, i.e. by the
chain ``P_{t+1}`` (the levels below ``t+1`` use continuation counts, as in the interpolation
itself). The model never looks across the start of the array it is given.

Storage: n-grams are keyed exactly (no hashing) as base-256 numbers, oldest byte most significant:
``key(x_1 .. x_n) = sum_i x_i 256^(n-i)``, so the context key is ``key // 256`` and the next byte
is ``key % 256``. ``order <= 7`` keeps keys below ``2^56`` in int64. The checkpoint is ONE
``.safetensors`` file: for each level ``n`` the sorted keys ``keys.<n>`` and their ``counts.<n>``
(int64); the metadata names ``tl_arch``, ``order``, ``discounts`` (JSON list) and ``config``.
Per-context totals ``c(h)`` and types ``T(h)`` are derived from these on load.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tinyllm.checkpoint import CheckpointError, load_single, save_single
from tinyllm.models.training import settings_of
from tinyllm.tokens import check_byte_ids, check_byte_range

ARCH = "ngram"
KIND = "lm"
VOCAB = 256
MAX_ORDER = 7  # keys of up to 7 bytes fit in int64
D_MIN, D_MAX = 0.05, 1.0
CHUNK = 1 << 16  # tokens scored per chunk by token_nlls


@dataclass(frozen=True)
class Config:
    """``order``: N, the longest n-gram (N-1 bytes of context), 1..7."""

    order: int = 5

    def __post_init__(self) -> None:
        if isinstance(self.order, bool) or not isinstance(self.order, int):
            raise ValueError(f"ngram Config.order: expected an int, got {self.order!r}")
        if not 1 <= self.order <= MAX_ORDER:
            raise ValueError(f"ngram Config.order: expected 1..{MAX_ORDER}, got {self.order}")


@dataclass(frozen=True)
class TrainConfig:
    """No settings: counting is exact (the family contract's TrainConfig, empty; the checkpoint
    file records none)."""


@dataclass
class _Level:
    """One level's n-grams and the per-context sums derived from them."""

    keys: np.ndarray  # [K] int64, sorted, unique n-gram keys
    counts: np.ndarray  # [K] int64 > 0
    ctx_keys: np.ndarray  # [H] int64, sorted unique context keys (= keys // 256)
    ctx_total: np.ndarray  # [H] float64, c(h) = sum of counts in the context
    ctx_types: np.ndarray  # [H] float64, T(h) = distinct next bytes in the context

    @staticmethod
    def build(keys: np.ndarray, counts: np.ndarray) -> _Level:
        ctx = keys // VOCAB  # sorted because keys are
        starts = np.flatnonzero(np.r_[True, ctx[1:] != ctx[:-1]]) if keys.size else np.zeros(0, int)
        total = np.add.reduceat(counts, starts).astype(np.float64) if keys.size else np.zeros(0)
        types = np.diff(np.r_[starts, keys.size]).astype(np.float64)
        return _Level(keys, counts, ctx[starts], total, types)


def _empty_level() -> _Level:
    return _Level.build(np.zeros(0, np.int64), np.zeros(0, np.int64))


class Model:
    """Kneser-Ney tables (a plain class: nothing to optimize, ``state_dict`` for checkpoints).

    ``Model(cfg)`` with no counts is the uniform model (every context unseen: ``P = 1/256``).
    ``model(idx)`` with ``idx`` [B, T] returns log-probabilities [B, T, 256] of the byte after
    each position (docs/definitions.md's model callable).
    """

    def __init__(self, cfg: Config, discounts: list[float] | None = None) -> None:
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        self.discounts = list(discounts) if discounts is not None else [0.5] * cfg.order
        _check_discounts(self.discounts, cfg.order, "ngram.Model")
        self.levels = [_empty_level() for _ in range(cfg.order)]

    # --- the plain-class checkpoint protocol ---
    def state_dict(self) -> dict[str, torch.Tensor]:
        sd = {}
        for n, lvl in enumerate(self.levels, start=1):
            sd[f"keys.{n}"] = torch.from_numpy(lvl.keys.copy())
            sd[f"counts.{n}"] = torch.from_numpy(lvl.counts.copy())
        return sd

    def load_state_dict(self, sd: dict[str, torch.Tensor], where: str = "ngram state") -> None:
        names = {f"{k}.{n}" for n in range(1, self.cfg.order + 1) for k in ("keys", "counts")}
        if set(sd) != names:
            raise CheckpointError(
                f"{where}: expected tensors {sorted(names)}, got {sorted(sd)} "
                f"(order {self.cfg.order})"
            )
        levels = []
        for n in range(1, self.cfg.order + 1):
            k, c = sd[f"keys.{n}"], sd[f"counts.{n}"]
            if (
                k.dtype != torch.int64
                or c.dtype != torch.int64
                or k.ndim != 1
                or k.shape != c.shape
            ):
                raise CheckpointError(
                    f"{where}: level {n}: expected 1-d int64 keys and counts of equal length, "
                    f"got {k.dtype} {list(k.shape)} and {c.dtype} {list(c.shape)}"
                )
            keys, counts = k.numpy().copy(), c.numpy().copy()
            if keys.size and (
                keys[0] < 0
                or keys[-1] >= VOCAB**n
                or np.any(np.diff(keys) <= 0)
                or counts.min() < 1
            ):
                raise CheckpointError(
                    f"{where}: level {n}: expected strictly increasing keys in [0, 256^{n}) and "
                    "counts >= 1, got something else"
                )
            levels.append(_Level.build(keys, counts))
        self.levels = levels

    def __call__(self, idx) -> torch.Tensor:
        """``idx`` [B, T] byte ids -> log-probabilities [B, T, 256] (float64) of the next byte."""
        a = np.asarray(idx.detach().cpu() if isinstance(idx, torch.Tensor) else idx, np.int64)
        if a.ndim != 2:
            raise ValueError(f"ngram model: expected idx of shape [B, T], got {a.shape}")
        B, T = a.shape
        N = self.cfg.order
        # hist[b, t, j] = idx[b, t - j] (j = 0 is the current byte), -1 before the start
        padded = np.concatenate([np.full((B, N - 1), -1, np.int64), a], axis=1)
        cols = [padded[:, N - 1 - j : N - 1 - j + T] for j in range(N - 1)]
        hist = np.stack(cols, axis=-1) if cols else np.zeros((B, T, 0), np.int64)
        hist = hist.reshape(B * T, N - 1)
        p = _probs(self, np.repeat(hist, VOCAB, axis=0), np.tile(np.arange(VOCAB), B * T))
        return torch.from_numpy(np.log(p).reshape(B, T, VOCAB))


def _check_discounts(d, order: int, where: str) -> None:
    ok = isinstance(d, list) and len(d) == order
    ok = ok and all(isinstance(x, int | float) and D_MIN <= x <= D_MAX for x in d)
    if not ok:
        raise CheckpointError(
            f"{where}: expected {order} discounts in [{D_MIN}, {D_MAX}], got {d!r}"
        )


def _probs(model: Model, hist: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``P_N(w | h)`` for R rows: ``hist`` [R, N-1] int64 (column j = byte j+1 steps back,
    -1 where the context is shorter), ``w`` [R] next bytes -> float64 [R]."""
    R = w.shape[0]
    p = np.full(R, 1.0 / VOCAB)  # P_0
    ctx = np.zeros(R, np.int64)  # key of the last m bytes (oldest most significant)
    avail = np.ones(R, bool)  # the row has m bytes of context
    for n, lvl in enumerate(model.levels, start=1):
        m = n - 1
        if m > 0:
            b = hist[:, m - 1]
            avail &= b >= 0
            ctx = ctx + np.where(b >= 0, b, 0) * (VOCAB ** (m - 1))
        if lvl.ctx_keys.size == 0:
            continue  # nothing counted at this level: every context unseen, P_n = P_{n-1}
        ci = np.minimum(np.searchsorted(lvl.ctx_keys, ctx), lvl.ctx_keys.size - 1)
        seen = avail & (lvl.ctx_keys[ci] == ctx)
        key = ctx * VOCAB + w
        ki = np.minimum(np.searchsorted(lvl.keys, key), lvl.keys.size - 1)
        c = np.where(seen & (lvl.keys[ki] == key), lvl.counts[ki], 0).astype(np.float64)
        D = model.discounts[n - 1]
        total = np.where(seen, lvl.ctx_total[ci], 1.0)
        interp = (np.maximum(c - D, 0.0) + D * lvl.ctx_types[ci] * p) / total
        p = np.where(seen, interp, p)
    return p


def next_byte_probs(model: Model, context) -> np.ndarray:
    """The distribution (float64 [256]) of the byte after ``context`` (bytes or ids; only its last
    ``order - 1`` bytes matter)."""
    c = np.frombuffer(context, np.uint8) if isinstance(context, bytes) else np.asarray(context)
    c = c.astype(np.int64).reshape(-1)
    N = model.cfg.order
    hist = np.full(N - 1, -1, np.int64)
    last = c[::-1][: N - 1]  # most recent first
    hist[: last.size] = last
    return _probs(model, np.tile(hist, (VOCAB, 1)), np.arange(VOCAB, dtype=np.int64))


def _ngram_keys(a: np.ndarray, n: int) -> np.ndarray:
    """Keys of every n-gram in ``a`` (int64), in order of position."""
    k = np.zeros(max(a.size - n + 1, 0), np.int64)
    if k.size == 0:
        return k
    for i in range(n):
        k = k * VOCAB + a[i : a.size - n + 1 + i]
    return k


def _discount(counts: np.ndarray) -> float:
    n1 = int(np.count_nonzero(counts == 1))
    n2 = int(np.count_nonzero(counts == 2))
    d = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5
    return float(min(max(d, D_MIN), D_MAX))


def train(cfg: Config, data, *, seed: int, steps: int = 0, progress=None, **settings) -> Model:
    """Count the n-grams of ``data`` (1-d byte ids) and estimate one discount per level.

    ``seed`` and ``steps`` are unused (counting is exact; ``settings``: :class:`TrainConfig`'s
    fields, none); ``progress(1, 1, nll)`` is called once with the mean NLL (nats) of the
    training bytes.
    """
    settings_of(TrainConfig, settings, "ngram.train")
    a = check_byte_range(np.asarray(check_byte_ids(data, "ngram.train"), np.int64), "ngram.train")
    N = cfg.order
    keys: list[np.ndarray] = [np.zeros(0, np.int64)] * N
    counts: list[np.ndarray] = [np.zeros(0, np.int64)] * N
    keys[N - 1], counts[N - 1] = np.unique(_ngram_keys(a, N), return_counts=True)
    for n in range(N - 1, 0, -1):
        # continuation counts: distinct (n+1)-grams v.g, grouped by their last n bytes g
        longer = np.unique(_ngram_keys(a, n + 1))
        keys[n - 1], counts[n - 1] = np.unique(longer % (VOCAB**n), return_counts=True)
    model = Model(cfg, [_discount(c) for c in counts])
    model.load_state_dict(
        {f"keys.{n + 1}": torch.from_numpy(keys[n].astype(np.int64)) for n in range(N)}
        | {f"counts.{n + 1}": torch.from_numpy(counts[n].astype(np.int64)) for n in range(N)}
    )
    if progress is not None:
        nll = float(token_nlls(model, a).mean()) if a.size >= 2 else math.log(VOCAB)
        progress(1, 1, nll)
    return model


def token_nlls(model: Model, ids, chunk: int = CHUNK) -> np.ndarray:
    """NLL (nats, float64) of tokens 1..n-1, token t given its ``min(t, order-1)`` previous bytes:
    ``l_t = -ln P_N(x_t | x_{t-N+1} .. x_{t-1})``. ``ids`` is read ``chunk`` tokens at a time."""
    a = check_byte_ids(ids, "ngram.token_nlls")
    n = a.size
    if n < 2:
        raise ValueError(f"ngram.token_nlls: expected at least 2 ids, got {n}")
    H = model.cfg.order - 1
    out = np.empty(n - 1, dtype=np.float64)
    for s in range(1, n, chunk):
        e = min(n, s + chunk)
        lo = s - H  # position of padded[0]; negative positions are -1 (no context)
        seg = check_byte_range(np.asarray(a[max(lo, 0) : e], np.int64), "ngram.token_nlls")
        padded = np.concatenate([np.full(max(-lo, 0), -1, np.int64), seg])
        # target t sits at padded[t - lo]; its j+1-th previous byte at padded[t - lo - 1 - j]
        cols = [padded[H - 1 - j : e - lo - 1 - j] for j in range(H)]
        hist = np.stack(cols, axis=-1) if cols else np.zeros((e - s, 0), np.int64)
        out[s - 1 : e - 1] = -np.log(_probs(model, hist, padded[H : e - lo]))
    return out


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write ONE ``.safetensors`` file: keys/counts per level, metadata tl_arch/order/discounts."""
    meta = {
        "order": str(model.cfg.order),
        "discounts": json.dumps(model.discounts),
        "config": json.dumps(dataclasses.asdict(model.cfg), sort_keys=True),
    }
    return save_single(path, ARCH, model.state_dict(), meta)


def load(path: str | os.PathLike) -> Model:
    """Read a file written by :func:`save`, validating its metadata and tensors."""
    meta, tensors = load_single(path)
    if meta["tl_arch"] != ARCH:
        raise CheckpointError(f"{path}: expected tl_arch {ARCH!r}, got {meta['tl_arch']!r}")
    try:
        cfg = Config(**json.loads(meta.get("config", "{}")))
        discounts = json.loads(meta["discounts"])
        order = int(meta["order"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(
            f"{path}: expected metadata 'config', 'order' and 'discounts', got {sorted(meta)} ({e})"
        ) from None
    if order != cfg.order:
        raise CheckpointError(f"{path}: metadata order {order} != config order {cfg.order}")
    _check_discounts(discounts, cfg.order, str(path))
    model = Model(cfg, [float(d) for d in discounts])
    model.load_state_dict(tensors, where=str(path))
    return model
