"""Strided perplexity (docs/definitions.md, strided perplexity, intervals): per-token NLLs and their summary.

:func:`token_nlls` runs any model over the strided windows of :mod:`tinyllm.windows`, scored
through :class:`tinyllm.logits.Head` with the views the instrument finds for the model
(:func:`tinyllm.eval.lm.heads.views`: a Hugging Face model's included); :func:`summarize_nlls`
turns NLLs into mean NLL, perplexity and bits per byte with their Student t intervals;
:func:`eval_ppl` streams one into the other. All NLLs are in nats, float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tinyllm import stats, windows
from tinyllm.eval.lm.heads import views
from tinyllm.logits import MAX_LOGITS, eval_mode
from tinyllm.windows import DEFAULT_BATCH_SIZE


def token_nlls(
    model: Any,
    ids: Any,
    ctx_len: int,
    stride: int,
    batch_size: int | None = DEFAULT_BATCH_SIZE,
    progress: Callable[[int, int], Any] | None = None,
    max_logits: int = MAX_LOGITS,
) -> np.ndarray:
    """Per-token NLLs ``l_t = -ln p(x_t | x_{a_k} .. x_{t-1})`` of tokens ``1 .. n-1`` (nats).

    Uses the strided windows of :func:`~tinyllm.windows.iter_windows`: each token is
    scored once, by the first window that contains it, so in every window after the first it has
    at least ``ctx_len - stride`` tokens of context. Returns ``float64[n - 1]``, entry ``t - 1``
    for token t.

    ``ids`` may be a numpy memmap of any length (a token file from
    :func:`tinyllm.tokens.read_tokens`): only ``batch_size`` windows are read and held at a time.
    Windows of equal length are batched ``batch_size`` per forward pass (default
    :func:`~tinyllm.windows.default_batch_size`: a measured token budget divided by
    ``ctx_len``); the result does not depend on the batch size. Runs under
    ``torch.inference_mode()`` with dropout off. ``progress(done, total)`` is called after each
    batch with counts of scored tokens.
    ``max_logits`` bounds the elements of one ``[rows, V]`` block of head output (default
    :data:`~tinyllm.logits.MAX_LOGITS`, 256 MB in float32; one row at least); the NLLs do
    not depend on it.

    Example (docs/definitions.md, strided perplexity): ``n = 6, ctx_len = 4, stride = 2`` calls the model on windows
    ``[0, 4)`` and ``[2, 6)``; a model that gives the true next token probability ``1/(j+2)`` at
    window position j yields ``[ln 2, ln 3, ln 4, ln 3, ln 4]``.

    Raises ValueError for ``stride >= ctx_len``, ``stride < 1``, fewer than 2 tokens, or token
    ids outside the model's vocabulary.
    """
    return windows.token_nlls(
        model, ids, ctx_len, stride, batch_size, progress, max_logits, views=views(model)
    )


def _interval_dict(value: float, lo: float, hi: float) -> dict:
    return {"value": float(value), "lo": float(lo), "hi": float(hi)}


def summarize_nlls(nlls: Any, n_bytes: int = 0) -> dict:
    """Mean NLL, perplexity and bits per byte of per-token NLLs, each with its 95% interval.

    ``nlls`` are NLLs in nats: a 1-d array (or list), or an iterable of 1-d chunks (streamed
    through :class:`tinyllm.stats.NLLAccumulator`, so memory stays bounded). With N the number
    of NLLs and ``l_t`` each NLL:

    * ``nll`` -- ``sum(l_t) / N`` nats per token, interval ``mean ± t_{0.975, N-1} * s / sqrt(N)``
      (:meth:`NLLAccumulator.mean_ci`, identical to :func:`tinyllm.stats.mean_ci`);
    * ``ppl`` -- ``exp(nll)``; its interval ends are ``exp`` of the NLL ends (perplexity units);
    * ``bpb`` -- ``sum(l_t) / (n_bytes * ln 2)`` bits per byte; its interval ends are the NLL ends
      rescaled by ``N / (n_bytes * ln 2)``.

    ``n_bytes`` is the UTF-8 byte count of the text whose tokens were scored. ``n_bytes = 0``
    (the default) means one token is one byte, ``n_bytes = N``: right for byte-level models
    (our families), where the N scored tokens are the N bytes 1 .. n-1 (byte 0 has no context and
    is not scored, so it is not counted either). For a subword model pass the byte count of the
    scored text, or bpb is bits per token.

    When all NLLs are equal the interval has zero width exactly (and a byte model that gives
    every byte ``1/256`` has bpb = 8 exactly).

    Returns ``{"n_tokens": N, "n_bytes": n_bytes, "sum_nll": sum (nats),
    "nll": {"value", "lo", "hi"}, "ppl": {...}, "bpb": {...}}`` (plain floats and ints).

    Example: NLLs ``[ln 2, ln 3, ln 4, ln 3, ln 4]`` -> ``ppl["value"] = 288 ** (1/5) = 3.1037``.

    Raises ValueError for fewer than 2 NLLs (no interval can be estimated), non-finite NLLs or
    a negative ``n_bytes``.
    """
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, int | np.integer) or n_bytes < 0:
        raise ValueError(f"n_bytes: expected an int >= 0 (0: one token per byte), got {n_bytes!r}")
    if isinstance(nlls, torch.Tensor):
        nlls = nlls.detach().cpu().numpy()
    chunks = [nlls] if isinstance(nlls, np.ndarray | list | tuple) else nlls
    acc = stats.NLLAccumulator()
    lo_x, hi_x = math.inf, -math.inf
    for chunk in chunks:
        c = np.asarray(chunk, dtype=np.float64)
        if c.ndim != 1:
            raise ValueError(f"nlls: expected a 1-d array of NLLs, got shape {c.shape}")
        if c.size == 0:
            continue
        acc.add(c)  # raises on inf / nan
        lo_x, hi_x = min(lo_x, float(c.min())), max(hi_x, float(c.max()))
    n = acc.n
    if n < 2:
        raise ValueError(f"nlls: expected at least 2 NLLs for an interval, got {n}")
    nb = int(n_bytes) or n
    if lo_x == hi_x:
        # all NLLs equal: the mean is that value exactly and the interval has zero width
        ci = stats.Interval(lo_x, lo_x, lo_x)
        total = lo_x * n
    else:
        ci = acc.mean_ci()
        total = acc.total
    scale = n / nb  # bpb = (sum / N) / ln 2 * (N / n_bytes), applied alike to value and ends
    return {
        "n_tokens": n,
        "n_bytes": nb,
        "sum_nll": float(total),
        "nll": _interval_dict(ci.value, ci.lo, ci.hi),
        "ppl": _interval_dict(math.exp(ci.value), math.exp(ci.lo), math.exp(ci.hi)),
        "bpb": _interval_dict(
            ci.value / stats.LN2 * scale, ci.lo / stats.LN2 * scale, ci.hi / stats.LN2 * scale
        ),
    }


def eval_ppl(
    model: Any,
    ids: Any,
    ctx_len: int,
    stride: int,
    n_bytes: int = 0,
    batch_size: int | None = DEFAULT_BATCH_SIZE,
    progress: Callable[[int, int], Any] | None = None,
    max_logits: int = MAX_LOGITS,
) -> dict:
    """Strided perplexity of ``ids``: :func:`token_nlls` streamed into :func:`summarize_nlls`.

    Same windows, same NLLs as :func:`token_nlls` (nats), but the per-token NLLs are never held
    all at once: memory is bounded by the batch, whatever the length of ``ids``. The returned
    dict is :func:`summarize_nlls`'s: ``n_tokens`` (= n - 1), ``n_bytes``, ``sum_nll`` and
    ``nll`` / ``ppl`` / ``bpb`` each as ``{"value", "lo", "hi"}`` (95% Student t interval on the
    per-token NLLs; perplexity ends are exp of the NLL ends, bits-per-byte ends are the NLL ends
    times ``N / (n_bytes ln 2)``). ``n_bytes = 0`` means one token per byte. ``batch_size``,
    ``progress`` and ``max_logits`` are :func:`token_nlls`'s.

    Example: the docs/definitions.md stride-2 example (n = 6, ctx_len = 4) gives ``n_tokens = 5`` and
    ``ppl["value"] = 288 ** (1/5) = 3.1037``.
    """
    chunks = windows.nll_chunks(
        model, ids, ctx_len, stride, batch_size, progress, max_logits, views=views(model)
    )
    with eval_mode(model):
        return summarize_nlls((nll for _, nll in chunks), n_bytes)
