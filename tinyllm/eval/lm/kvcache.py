"""The KV-cache engines of multiple choice and the check that guards them.

An engine drives one model's cache for :func:`tinyllm.eval.lm.scoring.cached_lls`: ``head``
(the output head), ``prefill(x, lens)`` (run right-padded contexts, keep their keys and values)
and ``extend(state, rows, lens, y, pos, new_mask)`` (feed packed choices after them).
:class:`GPTCache` drives any model that offers ``hidden_cached`` + ``lm_head`` (our GPT); a view
may also offer its own engine through ``cache_engine()`` (a Hugging Face model's base model:
:class:`tinyllm.models.hf.CacheEngine`). :func:`cache_engine` picks the first engine of a model
-- its own, else those of its views (:func:`tinyllm.models.hf.views`) -- whose log-likelihoods
reproduce the plain path on a probe of the first requests (:func:`probe`), checked once per
model and engine; :func:`cache_verdicts` says what that check found.

A model with sliding-window (or chunked) attention by its config
(:func:`tinyllm.models.hf.attention_window`) is scored from the cache only on inputs that fit
in its window (:func:`fits_window`, a rule on the config and the lengths, never on the probe);
longer inputs take the plain path, where the model applies its own window. The probe always
holds the longest context too, so a window the config does not declare is caught by the check.
"""

from __future__ import annotations

import itertools
import math
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from tinyllm.device import model_dtype
from tinyllm.eval.lm.scoring import Req, cached_lls, plain_lls
from tinyllm.logits import MAX_LOGITS, tolerance
from tinyllm.models import hf

_VERDICTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {engine: agrees?}


class GPTCache:
    """Our GPT through :meth:`tinyllm.models.gpt.Model.hidden_cached`."""

    def __init__(self, model: Any) -> None:
        self.model, self.head = model, model.lm_head

    def prefill(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``(h [Bc, D] at each context's last token, cache)``: right padding is never read by
        valid positions; the last block runs its attention output and MLP at those rows only."""
        h, cache = self.model.hidden_cached(x, last=lens - 1)  # h [Bc, 1, D]
        return h[:, 0], cache

    def extend(
        self,
        cache: Any,
        rows: torch.Tensor,
        lens: torch.Tensor,
        y: torch.Tensor,
        pos: torch.Tensor,
        new_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Hidden states ``[Bq, Tq, D]`` of ``y`` fed at positions ``pos`` after the cached
        contexts ``rows`` (``lens`` tokens each, their padding masked), ``new_mask`` among the
        new tokens."""
        dev = rows.device
        everyone = rows.numel() == cache.batch and bool(
            (rows == torch.arange(cache.batch, device=dev)).all()
        )
        past = cache if everyone else cache.select(rows)
        valid = torch.arange(past.length, device=dev)[None, :] < lens[:, None]  # [Bq, S]
        h, _ = self.model.hidden_cached(y, past, positions=pos, past_valid=valid, new_mask=new_mask)
        return h


def cache_verdicts(model: Any) -> dict[str, bool]:
    """What the cache check found for ``model``: ``{engine: reproduced the plain path?}`` for
    each engine checked, in the order tried -- ``"gpt"`` (our GPT's own cache), ``"twin"`` (a
    Hugging Face GPT-2 run by our GPT, :func:`~tinyllm.models.hf.gpt2_twin`), ``"hf"``
    (a Hugging Face model's own cache). Multiple choice is scored from the first engine whose
    verdict is True; with none, every context + choice in full. Empty when nothing was checked:
    a model without a cache, one scored only with ``cache="off"`` or not scored yet, or a model
    that cannot be weakly referenced (checked anew on every call). A copy: changing it changes
    nothing.

    Example: after ``choice_lls(gpt_model, tok, items)`` -> ``{"gpt": True}``.
    """
    try:
        return dict(_VERDICTS.get(model, {}))
    except TypeError:  # not weak-referenceable: no verdict is kept
        return {}


def fits_window(model: Any, reqs: list[Req]) -> list[bool]:
    """Which requests the cached path may score, by rule: all of them for a model without a
    local-attention window (:func:`tinyllm.models.hf.attention_window` is None), else those
    whose input ``ctx + cont[:-1]`` plus the scored token fits in the window
    (``len(ctx) + len(cont) <= window``): every layer then attends to the whole input, as the
    cache engine's mask does, and a sliding-window cache keeps every key (transformers keeps
    the last ``window - 1``).

    Example: a Mistral with ``sliding_window=16``, requests of 10 + 6 and 12 + 6 tokens ->
    ``[True, False]``.
    """
    w = hf.attention_window(model)
    if w is None:
        return [True] * len(reqs)
    return [r.ctx.size + r.cont.size <= w for r in reqs]


def cache_engine(model: Any, reqs: list[Req], max_logits: int = MAX_LOGITS) -> Any:
    """The cached path for ``model`` if it has one and it reproduces the plain path on a probe
    of the first requests (checked once per model and path), else None. A model that offers
    ``hidden_cached`` + ``lm_head`` is driven by :class:`GPTCache` (``"gpt"``); any other is
    tried through its views (:func:`tinyllm.models.hf.views`): a Hugging Face GPT-2 through our
    GPT on its own weights (``"twin"``), then through its own cache (``"hf"``).
    ``max_logits`` bounds the head blocks of the check's passes."""
    if _offers_cache(model):
        makers = [("gpt", lambda: GPTCache(model))]
    else:
        makers = [(tag, _engine_maker(view)) for tag, view in hf.views(model)]
    try:
        verdicts = _VERDICTS.setdefault(model, {})
    except TypeError:
        verdicts = {}
    for i, (tag, make) in enumerate(makers):
        try:
            engine = make()
        except Exception:  # noqa: BLE001 - no usable cache: the next path
            continue
        if tag not in verdicts:
            verdicts[tag] = _cache_agrees(
                model, engine, reqs, warn=i == len(makers) - 1, max_logits=max_logits
            )
        if verdicts[tag]:
            return engine
    return None


def _offers_cache(view: Any) -> bool:
    """Whether ``view`` offers the cache :class:`GPTCache` drives: ``hidden_cached`` and an
    ``lm_head`` module."""
    return callable(getattr(view, "hidden_cached", None)) and isinstance(
        getattr(view, "lm_head", None), nn.Module
    )


def _engine_maker(view: Any) -> Callable[[], Any]:
    """A factory of ``view``'s engine: :class:`GPTCache` over its ``hidden_cached``, else its
    own ``cache_engine()``."""
    if _offers_cache(view):
        return lambda: GPTCache(view)
    return lambda: view.cache_engine()


def _cache_agrees(
    model: Any, engine: Any, reqs: list[Req], warn: bool, max_logits: int = MAX_LOGITS
) -> bool:
    """Whether ``engine`` gives the plain path's log-likelihoods on a probe of ``reqs`` (the
    requests of :func:`probe` and those of the longest context), within
    :func:`tinyllm.logits.tolerance` of the model's dtype times ``max(1, |LL|)``."""
    picked = sorted(set(probe(reqs)) | set(longest(reqs)))
    want = [math.nan] * len(reqs)
    diff = math.inf
    try:
        plain_lls(model, reqs, picked, 1 << 30, want, None, max_logits)
        sub = [reqs[k] for k in picked]
        got = [math.nan] * len(sub)
        # one pass whatever the lengths: a cache that mishandles padding is caught here
        cached_lls(engine, sub, 1 << 30, got, None, max_pad=1.0, max_logits=max_logits)
        diff = max(abs(got[i] - want[k]) / max(1.0, abs(want[k])) for i, k in enumerate(picked))
        ok = diff <= tolerance(model_dtype(model))
    except Exception as e:  # noqa: BLE001 - a cache we cannot drive: the plain path
        diff, ok = math.inf, False
        if warn:
            warnings.warn(f"{type(model).__name__}: cached scoring failed ({e!r})", stacklevel=5)
    if not ok and warn:
        warnings.warn(
            f"{type(model).__name__}: scoring choices from cached keys/values does not "
            f"reproduce the plain forward pass (max relative difference {diff:.3g}); "
            "scoring every context + choice in full",
            stacklevel=5,
        )
    return ok


def probe(reqs: list[Req]) -> list[int]:
    """The requests the cache check scores (indices into ``reqs``, sorted): the shortest and the
    longest of the first three contexts (when those have one length, the first later context of
    another length), with their choices, so padding, repeats and multi-token choices are
    exercised; the check scores them in one padded pass.

    Example: contexts of 5, 2, 9, 1, 12 tokens with two choices each -> ``[2, 3, 4, 5]`` (the
    2- and the 9-token context).
    """
    by_ctx: dict[bytes, list[int]] = {}
    for k, r in enumerate(reqs):
        key = r.ctx.tobytes()
        if key not in by_ctx and len(by_ctx) == 3:
            break  # a fourth context: the first three have every one of their choices
        by_ctx.setdefault(key, []).append(k)
    groups = sorted(by_ctx.values(), key=lambda g: reqs[g[0]].ctx.size)
    if groups and reqs[groups[0][0]].ctx.size == reqs[groups[-1][0]].ctx.size:
        n0 = reqs[groups[0][0]].ctx.size
        other = next((k for k in range(len(reqs)) if reqs[k].ctx.size != n0), None)
        if other is not None:  # its choices: the requests of that context that follow it
            key = reqs[other].ctx.tobytes()
            run = itertools.takewhile(
                lambda k: reqs[k].ctx.tobytes() == key, range(other, len(reqs))
            )
            groups.append(list(run))
    pick = groups[:1] + groups[-1:] if len(groups) > 1 else groups
    return sorted({k for g in pick for k in g})


def longest(reqs: list[Req]) -> list[int]:
    """The requests of the longest context of ``reqs`` (the first one of that length), which
    the cache check scores beside :func:`probe`'s, so that a cache that fails only on long
    inputs (a window the config does not declare, a truncated cache) is caught.

    Example: contexts of 5, 2, 9, 1, 12 tokens with two choices each -> ``[8, 9]``.
    """
    if not reqs:
        return []
    top = max(range(len(reqs)), key=lambda k: (reqs[k].ctx.size, -k))
    key = reqs[top].ctx.tobytes()
    return [k for k in range(len(reqs)) if reqs[k].ctx.tobytes() == key]
