"""What the seq2seq families (seq2seq, transformer, copy) share: the byte vocabulary and the ids
never emitted, the (src, tgt) pair data and its encoding, the training settings' check, the
teacher-forced training (:func:`train_model`, its loop :func:`fit`) and batched beam translation
through a family's ``encode`` / ``decode_step`` hooks (:func:`translate_ids_with`).

Source and target are UTF-8 bytes with the special ids of :mod:`tinyllm.tokens` (vocabulary
``V = 261``): a source is ``<bytes> EOS``, the decoder reads ``BOS <bytes>`` and predicts
``<bytes> EOS``; batches are right-padded with ``PAD`` (:func:`tinyllm.tokens.encode_batch`),
and a PAD target is never scored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinyllm.models.beam import beam_search, strip_hypothesis
from tinyllm.models.training import check_ints, run_steps, scoring, settings_of
from tinyllm.tokens import BOS, CLS, MASK, PAD, VOCAB_WITH_SPECIALS, ByteTokenizer, encode_batch

VOCAB = VOCAB_WITH_SPECIALS  # 256 bytes + PAD, BOS, EOS, MASK, CLS
NEVER_EMITTED = (PAD, BOS, MASK, CLS)  # output ids masked to -inf: only bytes and EOS are emitted


def output_mask() -> torch.Tensor:
    """``[V]`` additive mask: 0 for the bytes and EOS, -inf for the ids never emitted."""
    m = torch.zeros(VOCAB)
    m[list(NEVER_EMITTED)] = float("-inf")
    return m


def check_positive_ints(cfg, names) -> None:
    """Each field of ``names`` of the dataclass ``cfg`` is an int >= 1 (the error names the
    field as ``Config.max_len``)."""
    check_ints(cfg, names, type(cfg).__qualname__)


def check_settings(tc) -> None:
    """The training settings every seq2seq family's TrainConfig has: ``batch_size`` (an int
    >= 1), ``lr`` (> 0), ``warmup`` (steps, >= 0), ``clip`` (gradient norm, 0 = off)."""
    check_positive_ints(tc, ("batch_size",))
    if not (isinstance(tc.lr, int | float) and math.isfinite(tc.lr) and tc.lr > 0):
        raise ValueError(f"TrainConfig.lr: expected a finite number > 0, got {tc.lr!r}")
    if not (isinstance(tc.warmup, int) and tc.warmup >= 0):
        raise ValueError(f"TrainConfig.warmup: expected an int >= 0, got {tc.warmup!r}")
    if not (isinstance(tc.clip, int | float) and tc.clip >= 0):
        raise ValueError(f"TrainConfig.clip: expected a number >= 0 (0 = off), got {tc.clip!r}")


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
    max_len: int,
    tc,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None,
) -> None:
    """Teacher-forced training of ``model(src, tgt_in) -> logits [B, T, V]``, in place, with the
    settings ``tc`` (a TrainConfig with the :func:`check_settings` fields): Adam,
    ``tc.batch_size`` pairs per step drawn uniformly with ``numpy.random.default_rng(seed)``
    (sources and targets cut to ``max_len`` bytes), mean cross entropy (nats) over the non-PAD
    targets, lr by :func:`tinyllm.models.training.lr_at` (warmup ``tc.warmup``, cosine to
    ``tc.lr / 10``), gradient-norm clipping at ``tc.clip``. ``progress(step, steps, loss)``
    after each step (1-based)."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=tc.lr)
    srcs = [s for s, _ in pairs]
    tgts = [t for _, t in pairs]

    def batch_loss(step: int) -> torch.Tensor:
        pick = rng.integers(0, len(pairs), size=tc.batch_size)
        src = encode_sources([srcs[i] for i in pick], max_len)
        tgt_in, tgt_out = encode_targets([tgts[i] for i in pick], max_len)
        logits = model(src, tgt_in)  # [B, T, V]
        return F.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD)

    run_steps(
        model, opt, steps, batch_loss, lr=tc.lr, warmup=tc.warmup, clip=tc.clip, progress=progress
    )


def train_model(
    family,
    cfg,
    data,
    /,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None,
    **settings,
) -> nn.Module:
    """A trained seq2seq family's ``train`` (``family``: its module): ``family.TrainConfig``
    from ``settings`` (:func:`tinyllm.models.training.settings_of`), ``steps`` an int >= 1,
    ``data`` checked as (src, tgt) pairs (:func:`check_pairs`), ``family.Model(cfg)`` with
    weights from ``torch.manual_seed(seed)``, trained by :func:`fit`; the model in eval mode,
    its ``train_cfg`` set. Errors name ``<ARCH>.train``."""
    who = f"{family.ARCH}.train"
    tc = settings_of(family.TrainConfig, settings, who)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"{who}: expected steps >= 1, got {steps!r}")
    pairs = check_pairs(data, who)
    torch.manual_seed(seed)
    model = family.Model(cfg)
    model.train_cfg = tc
    fit(model, pairs, cfg.max_len, tc, seed=seed, steps=steps, progress=progress)
    return model


def translate_ids_with(
    family,
    model,
    srcs: list[str],
    *,
    beam: int,
    max_len: int | None,
    batch_size: int,
    length_penalty: float = 0.0,
) -> list[list[int]]:
    """Best beam hypothesis per source (ids with eos, no BOS), decoded ``batch_size`` sources at
    a time through ``family.encode`` / ``family.decode_step``; ``max_len`` tokens at most (None:
    ``model.cfg.max_len + 1``, the longest target plus eos)."""
    if isinstance(srcs, str):
        raise TypeError("translate: expected a list of strings, got one str")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"translate: expected batch_size >= 1, got {batch_size!r}")
    n = model.cfg.max_len + 1 if max_len is None else max_len
    out: list[list[int]] = []
    with scoring(model):
        for s in range(0, len(srcs), batch_size):
            chunk = list(srcs[s : s + batch_size])
            src = encode_sources(chunk, model.cfg.max_len)
            state = family.encode(model, src)
            res = beam_search(
                lambda st, prev: family.decode_step(model, st, prev),
                state,
                len(chunk),
                beam=beam,
                max_len=n,
                length_penalty=length_penalty,
            )
            out.extend(res.ids)
    return out


def hypothesis_text(ids: list[int]) -> str:
    """A hypothesis' text: eos and padding stripped, the bytes decoded as UTF-8 (invalid bytes
    become U+FFFD; exact match compares bytes, not this text)."""
    return ByteTokenizer().decode(strip_hypothesis(ids))
