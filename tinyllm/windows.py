"""Strided windows (docs/definitions.md, strided perplexity): which windows a model is scored
in, which tokens each scores, and the NLLs a model gives them.

:func:`resolve_windows` is the one rule for which windows: the model's context
(:func:`model_context`), the default stride (:func:`default_stride`) and the answer for a
family scored with its own context (None; a window option given to it is an error). The CLI
(:mod:`tinyllm.eval.single`), the zoo (:mod:`tinyllm.eval.kinds.lm`) and the families scored in
windows (their ``WINDOWED``, :func:`scored_in_windows`) all resolve through it.

Window k over ``n`` tokens is ``[a_k, e_k)`` with ``a_k = k * stride`` and
``e_k = min(a_k + ctx_len, n)``; it scores the tokens ``[first_k, e_k)`` it adds. The window
arithmetic is pure integers; :func:`token_nlls` runs a model over the windows, batched, scored
through :class:`tinyllm.logits.Head`.

Layers: this module sits at the library's root, below :mod:`tinyllm.models` and
:mod:`tinyllm.eval`, and imports neither. The families scored in strided windows (gpt, hf) call
:func:`token_nlls` for their own ``token_nlls``; the instrument's
:func:`tinyllm.eval.lm.token_nlls` is the same function with the views the instrument finds for
any model (a Hugging Face model's included), so a family never needs the instrument.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tinyllm.device import model_device
from tinyllm.logits import MAX_LOGITS, Head, as_ids, check_max_logits, eval_mode

CTX_KEYS = ("n_positions", "max_position_embeddings", "n_ctx")
"""The Hugging Face config fields that give a context length, in the order lm-eval reads them."""

DEFAULT_TOKEN_BUDGET = 2048
"""Tokens per forward pass (windows x ctx_len) in :func:`token_nlls` when no ``batch_size`` is
given: ``batch_size = max(1, DEFAULT_TOKEN_BUDGET // ctx_len)``. Measured on this machine
(``python bench/bench_ppl.py --budget --threads 1``, docs/benchmarks.md "Token budget"), tokens
per CPU second at ctx 32, 128, 256, 1024 on the zoo GPT's width, the tiny HF shape and
GPT-2-small: 2048 kept every row within 0.98 of its best batch (1024: 0.93, 4096: 0.96).
Short windows gain most (zoo GPT at ctx 32: 3.0x over one window per pass, against a floor of
the kernels' own times at 3.65x); at ctx 1024 it is 2 windows, as fast as 1 on GPT-2-small."""

DEFAULT_BATCH_SIZE = None
"""The ``batch_size`` default of :func:`token_nlls` and :func:`tinyllm.eval.lm.eval_ppl`:
``None`` means "from :data:`DEFAULT_TOKEN_BUDGET`" (:func:`default_batch_size`), or, for a torch
model scoring at least :data:`MEASURE_AFTER` times that many windows, the faster of one window
per pass and the budget's, measured once per model and window shape (:func:`measured_batch`)."""

MEASURE_AFTER = 6
"""A text of at least ``MEASURE_AFTER * default_batch_size(ctx_len)`` windows has its batch size
measured (:func:`measured_batch`): the trial scores ``2 * default`` windows once per model and
window shape, a third of such a text's own work at most, and nothing on later calls."""

_PICKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {shape: batch}


def check_window_args(n: int, ctx_len: int, stride: int) -> None:
    """Raise TypeError / ValueError unless ``n`` tokens can be cut into windows of ``ctx_len``
    tokens every ``stride`` tokens (``2 <= ctx_len``, ``1 <= stride < ctx_len``, ``n >= 2``)."""
    check_window_shape(ctx_len, stride)
    if n < 2:
        raise ValueError(
            f"expected at least 2 tokens (token 0 has no context and is never scored), got {n}"
        )


def check_window_shape(ctx_len: int, stride: int) -> None:
    """Raise TypeError / ValueError unless windows of ``ctx_len`` tokens every ``stride``
    tokens are valid on any text: ints with ``2 <= ctx_len`` and ``1 <= stride < ctx_len``."""
    for name, v in (("ctx_len", ctx_len), ("stride", stride)):
        if not _is_int(v):
            raise TypeError(f"{name}: expected an int, got {type(v).__name__} {v!r}")
    if ctx_len < 2:
        raise ValueError(
            f"ctx_len: expected >= 2 (a window must hold a token and its context), got {ctx_len}"
        )
    if stride < 1 or stride >= ctx_len:
        raise ValueError(
            f"stride: expected 1 <= stride < ctx_len = {ctx_len}, got {stride}. "
            "With stride >= ctx_len the first token of each window is predicted from nothing "
            "inside its own window (disjoint windows); stride = ctx_len - 1 is the cheapest "
            "valid stride, stride = 1 the fairest"
        )


def context_limit(model: Any) -> tuple[str, int] | None:
    """The longest input ``model`` reads, as ``(config field, tokens)``, or None when it
    declares none: ``model.cfg.block_size`` (our GPT), else the first of :data:`CTX_KEYS` in
    ``model.config`` (a Hugging Face model) that is an int ``>= 2``
    (:func:`config_context`: a window holds two tokens at least, so a smaller field is
    skipped).

    Example: a ``LlamaConfig(max_position_embeddings=128)`` model ->
    ``("max_position_embeddings", 128)``.
    """
    v = getattr(getattr(model, "cfg", None), "block_size", None)
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return "block_size", v
    return config_context(getattr(model, "config", None))


def config_context(config: Any, at_least: int = 2) -> tuple[str, int] | None:
    """The context length a Hugging Face ``config`` gives, as ``(field, tokens)``: the first of
    :data:`CTX_KEYS` that is an int ``>= at_least`` (a bool is no length), or None.

    Example: ``n_positions=None, max_position_embeddings=1, n_ctx=12`` -> ``("n_ctx", 12)``;
    with ``at_least=1`` -> ``("max_position_embeddings", 1)``.
    """
    for key in CTX_KEYS:
        v = getattr(config, key, None)
        if isinstance(v, int) and not isinstance(v, bool) and v >= at_least:
            return key, v
    return None


def model_name(model: Any) -> str:
    """The name an error gives ``model``: its class, with the family for one of ours
    (``gpt.Model``), e.g. ``LlamaForCausalLM``."""
    cls = type(model)
    mod = getattr(cls, "__module__", "") or ""
    if mod.startswith("tinyllm.models."):
        return f"{mod.rsplit('.', 1)[1]}.{cls.__name__}"
    return cls.__name__


def check_context(model: Any, ctx_len: int, n: int | None = None) -> None:
    """Raise ValueError when windows of ``min(ctx_len, n)`` tokens are longer than the model
    reads (:func:`context_limit`), naming the model's class and its limit, e.g.
    ``LlamaForCausalLM: expected windows of at most max_position_embeddings=128 tokens, got
    ctx_len=200``. A model without a declared limit passes."""
    lim = context_limit(model)
    longest = int(ctx_len) if n is None else min(int(ctx_len), int(n))
    if lim is not None and longest > lim[1]:
        raise ValueError(
            f"{model_name(model)}: expected windows of at most {lim[0]}={lim[1]} tokens, "
            f"got ctx_len={int(ctx_len)}"
        )


# ---------------------------------------------------------------------------------------------
# Which windows: the one rule for every caller (the CLI, the zoo, the families)

WINDOW_OPTIONS = ("ctx_len", "stride")
"""The names :func:`resolve_windows` gives the two window options in its errors by default; a
caller passes its own (the CLI's ``--ctx-len`` / ``--stride``, a manifest's
``options.ctx_len`` / ``options.stride``)."""


@dataclass(frozen=True)
class WindowPlan:
    """Strided windows of ``ctx_len`` tokens every ``stride`` tokens (:func:`iter_windows`),
    as :func:`resolve_windows` settles them for one model: ``2 <= ctx_len`` (at most the
    model's context) and ``1 <= stride < ctx_len``."""

    ctx_len: int
    stride: int


def default_stride(ctx_len: int) -> int:
    """The stride when none is given: ``max(1, ctx_len // 2)``, so every scored token after the
    first window has at least ``ctx_len - stride >= ctx_len / 2`` tokens of context.

    Example: ``default_stride(128)`` -> 64; ``default_stride(3)`` -> 1.
    """
    return max(1, int(ctx_len) // 2)


def model_context(model: Any) -> int | None:
    """The context length of ``model`` in tokens (:func:`context_limit`), or None when it
    declares none. Example: our GPT built with ``Config(block_size=32)`` -> 32."""
    lim = context_limit(model)
    return None if lim is None else lim[1]


def scored_in_windows(family: Any) -> bool:
    """Whether ``family`` scores in strided windows: a family module whose ``WINDOWED`` is
    True (gpt, hf), or None, a model outside the families (a plain callable, scored by the
    instrument's windows). Every other family scores each token with its own context and takes
    no window options."""
    return family is None or getattr(family, "WINDOWED", False) is True


def resolve_windows(
    family: Any,
    model: Any,
    ctx_len: int | None = None,
    stride: int | None = None,
    *,
    options: tuple[str, str] = WINDOW_OPTIONS,
) -> WindowPlan | None:
    """The windows ``model`` of ``family`` (a family module of :data:`tinyllm.models.FAMILIES`,
    or None for a model outside them) is scored in, or None for a family scored with its own
    context (:func:`scored_in_windows`): that family takes no window options, and a given
    ``ctx_len`` or ``stride`` is a ValueError naming the family. A family scored in windows
    gets :func:`window_plan`.

    The CLI, the zoo and the families (``gpt.token_nlls``, ``hf.token_nlls``) all resolve here,
    so one model gets the same windows (or the same refusal) from each; ``options``: the two
    options' names in the errors.

    Example: the bigram with ``ctx_len=16`` -> ValueError "family 'bigram' is not scored in
    windows (it scores every token with its own context): expected no ctx_len or stride, got
    ctx_len=16"; without options -> None.
    """
    name = getattr(family, "ARCH", None)
    if scored_in_windows(family):
        return window_plan(model, ctx_len, stride, name=name, options=options)
    pairs = zip(options, (ctx_len, stride), strict=True)
    given = [f"{o}={v}" for o, v in pairs if v is not None]
    if given:
        raise ValueError(
            f"family {name!r} is not scored in windows (it scores every token with its own "
            f"context): expected no {options[0]} or {options[1]}, got {', '.join(given)}"
        )
    return None


def window_plan(
    model: Any,
    ctx_len: int | None = None,
    stride: int | None = None,
    *,
    name: str | None = None,
    options: tuple[str, str] = WINDOW_OPTIONS,
) -> WindowPlan:
    """The windows of a model scored in windows: ``C = ctx_len``, default the model's context
    (:func:`model_context`) and at most that; ``s = stride``, default :func:`default_stride`
    ``(C)``; the pair checked by :func:`check_window_shape`. ``name``: the model's family in
    the error for a model without a context length (default: its class).

    Example: our GPT with ``block_size=32`` -> ``WindowPlan(32, 16)``; with ``ctx_len=20`` ->
    ``WindowPlan(20, 10)``; with ``ctx_len=64`` -> ValueError "ctx_len: expected at most the
    model's context 32, got 64 (gpt.Model: block_size=32)".
    """
    own = model_context(model)
    c = own if ctx_len is None else ctx_len
    if c is None:
        who = f"{name} model" if name is not None else model_name(model)
        raise ValueError(
            f"{who}: expected a context length in its config (n_positions or "
            f"max_position_embeddings), got none; set {options[0]}"
        )
    if own is not None and _is_int(c) and c > own:
        field = context_limit(model)[0]
        raise ValueError(
            f"{options[0]}: expected at most the model's context {own}, got {c} "
            f"({model_name(model)}: {field}={own})"
        )
    s = stride if stride is not None else default_stride(c) if _is_int(c) else 1
    check_window_shape(c, s)
    return WindowPlan(int(c), int(s))


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def iter_windows(n: int, ctx_len: int, stride: int) -> Iterator[tuple[int, int, int]]:
    """Yield the strided windows over ``n`` tokens as ``(a, e, first)``, lazily.

    Window k is ``[a_k, e_k)`` with ``a_k = k * stride`` and ``e_k = min(a_k + ctx_len, n)``; it
    scores the tokens it adds, ``t in [first_k, e_k)`` with ``first_k = max(e_{k-1}, 1)``
    (``e_{-1} = 0``), each read from the window's position ``t - 1 - a_k``. The last window is
    the first whose end reaches ``n``. Every token ``1 .. n-1`` is scored exactly once, and in
    every window after the first a scored token has at least ``ctx_len - stride`` tokens of
    context (``t - a_k >= ctx_len - stride``).

    Example: ``list(iter_windows(6, 4, 2))`` -> ``[(0, 4, 1), (2, 6, 4)]``.

    Raises ValueError for ``stride >= ctx_len``, ``stride < 1``, ``ctx_len < 2`` or ``n < 2``.
    """
    check_window_args(n, ctx_len, stride)
    return _iter_windows(int(n), int(ctx_len), int(stride))


def _iter_windows(n: int, ctx_len: int, stride: int) -> Iterator[tuple[int, int, int]]:
    a, prev_end = 0, 0
    while True:
        e = min(a + ctx_len, n)
        yield a, e, max(prev_end, 1)
        if e == n:
            return
        prev_end = e
        a += stride


def windows(n: int, ctx_len: int, stride: int) -> list[tuple[int, int, int]]:
    """All strided windows as a list of ``(a, e, first)``; see :func:`iter_windows`.

    Example: ``windows(6, 4, 3)`` -> ``[(0, 4, 1), (3, 6, 4)]``: the second window scores
    tokens 4 and 5 at window positions 0 and 1.
    """
    return list(iter_windows(n, ctx_len, stride))


def window_groups(
    n: int, ctx_len: int, stride: int, batch_size: int
) -> Iterator[list[tuple[int, int, int]]]:
    """Consecutive windows of equal length that score equally many tokens (so the same span of
    positions in each: the first window, which scores all but its first token, goes alone), at
    most ``batch_size`` of them per group. The arguments are taken as checked
    (:func:`check_window_args`).

    Example: ``list(window_groups(6, 4, 2, 8))`` -> ``[[(0, 4, 1)], [(2, 6, 4)]]``.
    """
    group: list[tuple[int, int, int]] = []
    for w in _iter_windows(n, ctx_len, stride):
        if group and (
            len(group) == batch_size
            or w[1] - w[0] != group[0][1] - group[0][0]
            or w[1] - w[2] != group[0][1] - group[0][2]
        ):
            yield group
            group = []
        group.append(w)
    if group:
        yield group


# ---------------------------------------------------------------------------------------------
# A model over the windows


def default_batch_size(ctx_len: int, token_budget: int = DEFAULT_TOKEN_BUDGET) -> int:
    """Windows per forward pass for windows of ``ctx_len`` tokens: ``max(1, budget // ctx_len)``.

    Example: ``default_batch_size(32)`` -> 64 with the default budget of 2048 tokens;
    ``default_batch_size(1024)`` -> 2.
    """
    return max(1, int(token_budget) // max(1, int(ctx_len)))


def check_batch_size(batch_size: int) -> None:
    """Raise ValueError unless ``batch_size`` is an int >= 1 (windows per forward pass)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")


def nll_chunks(
    model: Any,
    ids: Any,
    ctx_len: int,
    stride: int,
    batch_size: int | None = DEFAULT_BATCH_SIZE,
    progress: Callable[[int, int], Any] | None = None,
    max_logits: int = MAX_LOGITS,
    views: Sequence[tuple[str, Any]] | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """The NLLs of :func:`token_nlls` a batch of windows at a time, as ``(t0, nlls)``: the NLLs
    of tokens ``t0, t0+1, ...``, in order. The arguments are checked at once (before the first
    batch); the model runs as the chunks are read, so the caller puts it in eval mode."""
    a = as_ids(ids)
    check_window_args(a.shape[0], ctx_len, stride)
    check_context(model, ctx_len, a.shape[0])
    measure = False
    if batch_size is None:
        batch_size = default_batch_size(ctx_len)
        n_windows = 1 + max(0, -(-(a.shape[0] - ctx_len) // stride))
        measure = (
            isinstance(model, torch.nn.Module)
            and batch_size > 1
            and n_windows >= MEASURE_AFTER * batch_size
        )
    check_batch_size(batch_size)
    check_max_logits(max_logits)
    return _iter_nll_chunks(
        model, a, int(ctx_len), int(stride), batch_size, progress, max_logits, views, measure
    )


def measured_batch(
    model: Any,
    head: Head,
    a: np.ndarray,
    ctx_len: int,
    stride: int,
    default: int,
    max_logits: int = MAX_LOGITS,
) -> int:
    """Windows per pass for ``model`` on windows of ``ctx_len`` tokens every ``stride``: the
    faster of 1 and ``default`` (the token budget's), timed on the ``default`` full windows that
    follow the first (each candidate scores them once, wall time, the device synchronized), and
    remembered per model and ``(ctx_len, stride)`` while the model lives (so every later call
    batches alike). Why: a pass of several windows is faster where per-call overhead dominates
    (short windows, small models) and slower where a large ``[rows, V]`` head output leaves the
    caches (a 32k vocabulary); which one wins depends on the model and the machine.

    Example: on a model where one window per pass is faster, ``measured_batch(...)`` -> 1.
    """
    key = (int(ctx_len), int(stride))
    try:
        picked = _PICKED.setdefault(model, {})
    except TypeError:  # not weak-referenceable: measured on every call
        picked = {}
    if key in picked:
        return picked[key]
    dev = model_device(model)
    wins = [(k * stride, k * stride + ctx_len) for k in range(1, default + 1)]
    xs = torch.from_numpy(np.stack([np.asarray(a[w0:w1], dtype=np.int64) for w0, w1 in wins]))
    xs = xs.to(dev)
    lo, hi = ctx_len - stride - 1, ctx_len - 1  # the positions a full window scores
    cost = {}
    for cand in (default, 1):
        sync(dev)
        t0 = time.perf_counter()
        for b0 in range(0, default, cand):
            x = xs[b0 : b0 + cand]
            r = torch.arange(x.shape[0], device=dev).repeat_interleave(hi - lo)
            c = torch.arange(lo, hi, device=dev).repeat(x.shape[0])
            with torch.inference_mode():
                head.nlls(x, r, c, x[r, c + 1], span=(lo, hi), max_logits=max_logits)
        sync(dev)
        cost[cand] = time.perf_counter() - t0
    best = 1 if cost[1] < cost[default] else default
    picked[key] = best
    return best


def measured_batches(model: Any) -> dict[tuple[int, int], int]:
    """What :func:`measured_batch` picked for ``model``: ``{(ctx_len, stride): windows per
    pass}`` (a copy; empty when nothing was measured or the model cannot be weakly referenced).

    Example: after a long ``token_nlls(model, ids, 256, 128)`` -> ``{(256, 128): 8}``.
    """
    try:
        return dict(_PICKED.get(model, {}))
    except TypeError:
        return {}


def sync(dev: torch.device) -> None:
    """Wait for the device's queued work (CUDA), so a wall-clock reading times it."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _iter_nll_chunks(
    model: Any,
    a: np.ndarray,
    ctx_len: int,
    stride: int,
    batch_size: int,
    progress: Callable[[int, int], Any] | None,
    max_logits: int,
    views: Sequence[tuple[str, Any]] | None,
    measure: bool = False,
) -> Iterator[tuple[int, np.ndarray]]:
    n = a.shape[0]
    done = 0
    dev = model_device(model)  # inputs go where the model is; NLLs come back to the CPU
    first = np.asarray(a[: min(ctx_len, n)], dtype=np.int64)  # the first window, alone
    if first.min() < 0:
        raise ValueError(f"ids: expected non-negative token ids, got {int(first.min())}")
    x0 = torch.from_numpy(first)[None].to(dev)
    with torch.inference_mode():
        head = Head(model, x0, views)
    if measure:
        batch_size = measured_batch(model, head, a, ctx_len, stride, batch_size, max_logits)
    for group in window_groups(n, ctx_len, stride, batch_size):
        # [B, L] int64: only this batch of the (possibly memmapped) file is read
        xs = np.stack([np.asarray(a[w0:w1], dtype=np.int64) for w0, w1, _ in group])
        if xs.min() < 0:
            raise ValueError(f"ids: expected non-negative token ids, got {int(xs.min())}")
        # scored tokens t in [first, e) are read at window position j = t - 1 - a
        cols = np.concatenate([np.arange(f - 1 - w0, w1 - 1 - w0) for w0, w1, f in group])
        rows = np.concatenate(
            [np.full(w1 - f, b, dtype=np.int64) for b, (_, w1, f) in enumerate(group)]
        )
        x = torch.from_numpy(xs).to(dev)
        r, c = torch.from_numpy(rows).to(dev), torch.from_numpy(cols).to(dev)
        w0, w1, f = group[0]  # every window of the group reads positions [f-1-w0, w1-1-w0)
        with torch.inference_mode():
            nll = head.nlls(
                x, r, c, x[r, c + 1], span=(f - 1 - w0, w1 - 1 - w0), max_logits=max_logits
            )
        t0 = group[0][2]
        assert nll.shape[0] == group[-1][1] - t0  # the batch covers [first_0, e_last) exactly
        done += nll.shape[0]
        if progress is not None:
            progress(done, n - 1)
        yield t0, nll


def token_nlls(
    model: Any,
    ids: Any,
    ctx_len: int,
    stride: int,
    batch_size: int | None = DEFAULT_BATCH_SIZE,
    progress: Callable[[int, int], Any] | None = None,
    max_logits: int = MAX_LOGITS,
    views: Sequence[tuple[str, Any]] | None = None,
) -> np.ndarray:
    """Per-token NLLs ``l_t = -ln p(x_t | x_{a_k} .. x_{t-1})`` of tokens ``1 .. n-1`` (nats).

    Each token is scored once, by the first window of :func:`iter_windows` that contains it, so
    in every window after the first it has at least ``ctx_len - stride`` tokens of context.
    Returns ``float64[n - 1]``, entry ``t - 1`` for token t. ``ids`` may be a memmap of any
    length: only ``batch_size`` windows (default :func:`default_batch_size`) are read and held
    at a time; the result does not depend on the batch size. Runs under
    ``torch.inference_mode()`` with dropout off. ``progress(done, total)`` is called after each
    batch with counts of scored tokens; ``max_logits`` bounds one block of head output
    (:func:`tinyllm.logits.nll_blocks`). ``views`` are :class:`tinyllm.logits.Head`'s: the
    ``(kind, view)`` pairs whose ``hidden`` + ``lm_head`` may score the head only at the scored
    positions (default: the model itself).

    Example (docs/definitions.md, strided perplexity): ``n = 6, ctx_len = 4, stride = 2`` calls the model on windows
    ``[0, 4)`` and ``[2, 6)``; a model that gives the true next token probability ``1/(j+2)`` at
    window position j yields ``[ln 2, ln 3, ln 4, ln 3, ln 4]``.

    Raises ValueError for ``stride >= ctx_len``, ``stride < 1``, fewer than 2 tokens, or token
    ids outside the model's vocabulary.
    """
    a = as_ids(ids)
    chunks = nll_chunks(model, a, ctx_len, stride, batch_size, progress, max_logits, views)
    out = np.empty(a.shape[0] - 1, dtype=np.float64)
    with eval_mode(model):
        for t0, nll in chunks:
            out[t0 - 1 : t0 - 1 + nll.shape[0]] = nll
    return out
