"""Multiple choice by log-likelihood (docs/definitions.md, multiple choice): ``LL(c)`` for every choice of every item.

:func:`choice_lls` tokenizes and truncates the items (:mod:`tinyllm.eval.lm.scoring`), then
scores them from a KV cache when the model has one that passes its check
(:mod:`tinyllm.eval.lm.kvcache`), else with plain forward passes; ``cache="off"`` asks for the
plain path. :func:`score_choices` is one item, optionally normalized per UTF-8 byte (acc_norm).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from tinyllm.eval.lm.heads import FamilyLM
from tinyllm.eval.lm.kvcache import cache_engine, fits_window
from tinyllm.eval.lm.scoring import (
    Req,
    cached_lls,
    check_choices,
    check_delimiter,
    make_requests,
    plain_lls,
)
from tinyllm.logits import MAX_LOGITS, check_max_logits, eval_mode
from tinyllm.windows import context_limit, model_context, model_name

DEFAULT_MC_TOKEN_BUDGET = 2048
"""Tokens per forward pass (rows x padded length) when scoring choices: contexts are batched
across items, sorted by length, up to this many tokens at a time; the choices' continuation
passes likewise count their cached context (bench/bench_mc.py)."""

CACHE_MODES = ("auto", "off")
"""The values of the ``cache`` argument: ``"auto"`` scores from the model's KV cache when it
has one that reproduces the plain path (the default), ``"off"`` always runs every
``context + choice`` in full."""


def _check_cache(cache: Any) -> str:
    if not isinstance(cache, str) or cache not in CACHE_MODES:
        raise ValueError(f"cache: expected one of {list(CACHE_MODES)}, got {cache!r}")
    return cache


def model_ctx_len(model: Any) -> int | None:
    """The longest input a model reads, in tokens, or None when it has no limit we can find:
    :func:`tinyllm.windows.model_context`, the one lookup of the CLI, the zoo and the families
    (our GPT's ``cfg.block_size``; a Hugging Face model's first of ``n_positions``,
    ``max_position_embeddings``, ``n_ctx`` that is an int ``>= 2``, lm-eval's order). A
    :class:`~tinyllm.eval.lm.heads.FamilyLM` has none: the family's own ``token_nlls`` reads
    sequences of any length (an NPLM's ``ctx_len`` is its n-gram window, not a limit).

    Example: a GPT built with ``Config(block_size=32)`` -> 32; a config with
    ``n_positions=1, n_ctx=12`` -> 12.
    """
    if isinstance(model, FamilyLM):
        return None  # a family's own token_nlls reads sequences of any length
    return model_context(model)


def _resolve_max_len(model: Any, max_len: int | None) -> int | None:
    own = model_ctx_len(model)
    if max_len is None:
        return own
    if isinstance(max_len, bool) or not isinstance(max_len, int | np.integer) or max_len < 1:
        raise ValueError(f"max_len: expected an int >= 1 (tokens the model reads), got {max_len!r}")
    if own is not None and max_len > own:
        lim = context_limit(model)
        field = f"{lim[0]}={lim[1]}" if lim is not None else f"{own} tokens"
        raise ValueError(
            f"{model_name(model)} ({field}): max_len: expected at most the model's own "
            f"context of {own} tokens, got {max_len}"
        )
    return int(max_len)


def choice_lls(
    model: Any,
    tok: Any,
    items: Sequence[dict],
    max_len: int | None = None,
    target_delimiter: str | None = None,
    token_budget: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
    cache: str = "auto",
    max_logits: int = MAX_LOGITS,
) -> list[np.ndarray]:
    """``LL(c)`` in nats for every choice of every item: ``float64[k_i]`` per item (docs/definitions.md, multiple choice).

    ``LL(c) = sum_j ln p(c_j | context, c_<j)``. Items are dicts with ``context``, ``choices``
    and optionally ``target_delimiter`` (formats/task-jsonl.md); ``target_delimiter`` here
    overrides every item's. Without a delimiter, context and choice are encoded separately and
    concatenated (the choice carries its own separating space). With a delimiter d, the pair is
    encoded as lm-evaluation-harness does: the continuation is ``d + c``, trailing whitespace of
    the context moves to the continuation, ``enc(context + continuation)`` is split after
    ``enc(context)``'s tokens; ``LL`` then includes the delimiter's tokens.

    Truncation (lm-eval's rule): with L = ``max_len`` (default: the model's own context,
    :func:`model_ctx_len`; no limit when it has none) the model reads
    ``(ctx + cont)[-(L+1):][:-1]``. A warning says how many tokens were cut; a choice longer than
    L tokens is a ValueError naming the item.

    How: each distinct context runs ONCE; every choice is scored from its cached keys and values
    (our GPT's :meth:`~tinyllm.models.gpt.Model.hidden_cached`, a Hugging Face model's cache),
    feeding ``cont[:-1]`` only (the last choice token is never fed). Contexts are sorted by
    length across items and batched up to ``token_budget`` tokens (rows x padded length) per
    forward pass. The cached path is used for a model only after it reproduced the plain path on
    a probe (two of the first contexts of different lengths with their choices, scored in one
    padded pass; else a warning and the plain path: every ``ctx + cont[:-1]`` once, identical
    inputs shared, sorted and batched the same way). The verdict is kept per model
    (:func:`~tinyllm.eval.lm.kvcache.cache_verdicts`). ``cache="off"`` takes the plain path
    without a check (:data:`CACHE_MODES`). ``progress(done, total)`` counts items.
    ``max_logits`` bounds the elements of one ``[rows, V]`` block of head output (default
    :data:`~tinyllm.logits.MAX_LOGITS`; one row at least); the LLs do not depend on it.

    Example (docs/definitions.md, multiple choice): context "a", choices "bb", "c" with p(b|a) = 0.4,
    p(b|b) = 0.9, p(c|a) = 0.45 -> ``[array([-1.0217, -0.7985])]``.
    """
    items = list(items)
    if target_delimiter is not None:
        check_delimiter(target_delimiter)
    budget = DEFAULT_MC_TOKEN_BUDGET if token_budget is None else int(token_budget)
    if budget < 1:
        raise ValueError(f"token_budget: expected an int >= 1, got {token_budget!r}")
    _check_cache(cache)
    check_max_logits(max_logits)
    L = _resolve_max_len(model, max_len)
    reqs, cut_tokens, cut_reqs = make_requests(tok, items, target_delimiter, L)
    if cut_tokens:
        warnings.warn(
            f"cut {cut_tokens} context tokens from the left of {cut_reqs} of {len(reqs)} "
            f"context + choice pairs to fit the model's context of {L} tokens "
            "(lm-eval's rule: the model reads (context + choice)[-(L+1):][:-1])",
            stacklevel=2,
        )
    module = model.model if isinstance(model, FamilyLM) else model  # its dropout goes off
    with eval_mode(module), torch.inference_mode():
        ll = _score_requests(model, reqs, budget, len(items), progress, cache, max_logits)
    out: list[list[float]] = [[] for _ in items]
    for r, v in zip(reqs, ll, strict=True):
        out[r.item].append(v)
    return [np.asarray(v, dtype=np.float64) for v in out]


def score_choices(
    model: Any,
    tok: Any,
    context: str,
    choices: Sequence[str],
    normalize: bool = True,
    max_len: int | None = None,
    target_delimiter: str | None = None,
    cache: str = "auto",
) -> np.ndarray:
    """Log-likelihood of each choice after ``context``, optionally per UTF-8 byte.

    ``LL(c) = sum_j ln p(c_j | context, c_<j)`` (nats): the log-probability of each choice token
    is read at the position *before* it (:func:`choice_lls` on one item). With ``normalize``
    the score is ``LL(c) / bytes(c)``, ``bytes(c)`` the UTF-8 byte count of the choice text
    WITHOUT the delimiter (nats per byte; ``acc_norm``), else ``LL(c)`` (``acc``). Returns
    ``float64[k]``.

    Without ``target_delimiter`` context and choice are encoded separately and concatenated
    (exact for a byte-level tokenizer; with BPE, start each choice with its separating space);
    with it, ``target_delimiter + c`` is scored as lm-eval does. The context must encode to at
    least one token. ``max_len`` (default: the model's own context) truncates from the left as
    lm-eval does: the model reads ``(ctx + cont)[-(max_len+1):][:-1]``. ``cache`` is
    :func:`choice_lls`'s. ``model`` may also be a :class:`~tinyllm.eval.lm.heads.FamilyLM`.

    Example (docs/definitions.md, multiple choice): context "a", choices "bb", "c" with p(b|a) = 0.4,
    p(b|b) = 0.9, p(c|a) = 0.45 -> ``normalize=False``: ``[-1.0217, -0.7985]`` (acc picks "c");
    ``normalize=True``: ``[-0.5108, -0.7985]`` (acc_norm picks "bb").
    """
    choices = check_choices(context, choices)
    item = {"context": context, "choices": choices}
    delimiter = check_delimiter(target_delimiter)
    scores = choice_lls(model, tok, [item], max_len, delimiter, cache=cache)[0]
    if normalize:
        scores = scores / choice_bytes(choices)
    return scores


def choice_bytes(choices: Sequence[str]) -> np.ndarray:
    """acc_norm's divisor: UTF-8 bytes of each choice text, the delimiter left out (float64).

    Example: ``choice_bytes(["é", "c"])`` -> ``[2.0, 1.0]``.
    """
    return np.asarray([len(t.encode("utf-8")) for t in choices], dtype=np.float64)


def _score_requests(
    model: Any,
    reqs: list[Req],
    budget: int,
    n_items: int,
    progress: Callable[[int, int], Any] | None,
    cache: str,
    max_logits: int,
) -> list[float]:
    left = np.bincount([r.item for r in reqs], minlength=n_items)
    done = [0]

    def finished(idx: Iterable[int]) -> None:
        for k in idx:
            left[reqs[k].item] -= 1
            if left[reqs[k].item] == 0:
                done[0] += 1
        if progress is not None:
            progress(done[0], n_items)

    ll = [math.nan] * len(reqs)
    if isinstance(model, FamilyLM):
        for k, r in enumerate(reqs):
            s = np.concatenate([r.ctx, r.cont])
            nll = np.asarray(model.token_nlls(model.model, s), dtype=np.float64)
            ll[k] = -math.fsum(nll[r.ctx.size - 1 :])
            finished([k])
        return ll
    if not reqs:
        return ll
    lo = min(min(int(r.ctx.min()), int(r.cont.min())) for r in reqs)
    hi = max(max(int(r.ctx.max()), int(r.cont.max())) for r in reqs)
    vocab = getattr(getattr(model, "cfg", None), "vocab_size", None) or getattr(
        getattr(model, "config", None), "vocab_size", None
    )
    if lo < 0 or (isinstance(vocab, int) and hi >= vocab):
        raise ValueError(
            f"expected token ids in [0, {vocab if isinstance(vocab, int) else 'V'}) "
            f"(the model's vocabulary), got ids in [{lo}, {hi}]"
        )
    # a sliding-window model: only the inputs within its window may use the cache (by rule)
    fits = fits_window(model, reqs) if cache == "auto" else [False] * len(reqs)
    inside = [k for k in range(len(reqs)) if fits[k]]
    engine = cache_engine(model, [reqs[k] for k in inside], max_logits) if inside else None
    if engine is None:
        plain_lls(model, reqs, range(len(reqs)), budget, ll, finished, max_logits)
        return ll
    outside = [k for k in range(len(reqs)) if not fits[k]]
    if outside:
        plain_lls(model, reqs, outside, budget, ll, finished, max_logits)
    sub = [reqs[k] for k in inside]
    got = [math.nan] * len(sub)
    cached_lls(
        engine,
        sub,
        budget,
        got,
        None if finished is None else lambda ks: finished([inside[k] for k in ks]),
        max_logits=max_logits,
    )
    for i, k in enumerate(inside):
        ll[k] = got[i]
    return ll
