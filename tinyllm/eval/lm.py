"""The instrument: strided perplexity, multiple choice, intervals and paired comparison.

This module implements SPEC.md sections 1-5 on top of :mod:`tinyllm.stats`:

* :func:`windows` / :func:`iter_windows` -- the strided window arithmetic (SPEC 2);
* :func:`token_nlls` -- the NLL of every token ``1 .. n-1``, each scored exactly once;
* :func:`summarize_nlls` / :func:`eval_ppl` -- mean NLL, perplexity and bits per byte, each with
  its Student t interval (SPEC 4);
* :func:`score_choices` / :func:`run_task` -- multiple choice by log-likelihood, ``acc`` and
  ``acc_norm`` with a bootstrap interval (SPEC 3, 4);
* :func:`compare` -- the paired permutation test between two runs on the same items (SPEC 5).

A *model* is anything callable as ``model(ids[None])`` returning logits ``[1, T, V]``, a tuple
whose first item is those logits, or an object with ``.logits`` (Hugging Face outputs). Where the
model lets us, the output head and the log-softmax are computed only at the positions that are
scored (see :class:`_Head`): our GPT exposes ``model.hidden(idx) -> [B, T, D]`` and
``model.lm_head``; a Hugging Face causal LM exposes ``model.base_model`` and
``model.get_output_embeddings()``. Our GPT's ``hidden(idx, keep=slice)`` also runs its last
block only at the scored span of each window. A Hugging Face ``GPT2LMHeadModel`` is run by our
GPT on views of its own weights (:func:`hf_gpt2_twin`), which has both hooks and a KV cache.
Every hook is checked once against the model's own logits on a few tokens; if they disagree (a
model that rescales or caps its logits after the head) the next one or the full logits are
used, with a warning.

All NLLs are in nats, float64; bits per byte divide by ``ln 2`` and by the byte count.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tinyllm import stats

DEFAULT_TOKEN_BUDGET = 2048
"""Tokens per forward pass (windows x ctx_len) in :func:`token_nlls` when no ``batch_size`` is
given: ``batch_size = max(1, DEFAULT_TOKEN_BUDGET // ctx_len)``. Measured on this machine
(``python bench/bench_ppl.py --budget --threads 1``, docs/benchmarks.md "Token budget"), tokens
per CPU second at ctx 32, 128, 256, 1024 on the zoo GPT's width, the tiny HF shape and
GPT-2-small: 2048 kept every row within 0.98 of its best batch (1024: 0.93, 4096: 0.96).
Short windows gain most (zoo GPT at ctx 32: 3.0x over one window per pass, against a floor of
the kernels' own times at 3.65x); at ctx 1024 it is 2 windows, as fast as 1 on GPT-2-small."""

DEFAULT_BATCH_SIZE = None
"""Kept for callers of the old constant: ``None`` means "from :data:`DEFAULT_TOKEN_BUDGET`"."""


def default_batch_size(ctx_len: int, token_budget: int = DEFAULT_TOKEN_BUDGET) -> int:
    """Windows per forward pass for windows of ``ctx_len`` tokens: ``max(1, budget // ctx_len)``.

    Example: ``default_batch_size(32)`` -> 64 with the default budget of 2048 tokens;
    ``default_batch_size(1024)`` -> 2.
    """
    return max(1, int(token_budget) // max(1, int(ctx_len)))


METRICS = ("acc", "acc_norm")

_MAX_LOGITS = 1 << 26  # elements in one [rows, V] block of head output (256 MB in float32)
_VERIFY_LEN = 16  # tokens on which a head-only hook is checked against the full logits
_VERIFY_TOL = 1e-4  # relative to max(1, max |logit|)
_VERIFIED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {hook: agrees?}
_TWINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # HF model -> (weights, twin)


# ---------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True, eq=False)
class Result:
    """A metric with its 95% interval and the per-item scores it was computed from.

    ``value`` and the interval ``[lo, hi]`` are in the metric's units (accuracy: a fraction in
    [0, 1]); ``n`` is the number of items; ``per_item`` (float64, length ``n``) keeps the item
    scores so that two runs on the same items can be compared pairwise (:func:`compare`).
    """

    value: float
    lo: float
    hi: float
    n: int
    per_item: np.ndarray

    def to_dict(self) -> dict:
        """``{"value", "lo", "hi", "n"}`` as JSON-native numbers (``per_item`` left out)."""
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "n": self.n}


# ---------------------------------------------------------------------------------------------
# window arithmetic (SPEC.md section 2)


def _check_window_args(n: int, ctx_len: int, stride: int) -> None:
    for name, v in (("ctx_len", ctx_len), ("stride", stride)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
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
    if n < 2:
        raise ValueError(
            f"expected at least 2 tokens (token 0 has no context and is never scored), got {n}"
        )


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
    _check_window_args(n, ctx_len, stride)
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


# ---------------------------------------------------------------------------------------------
# models: logits, and logits only where they are needed


def _call_logits(model: Callable, ids: torch.Tensor) -> torch.Tensor:
    """Full logits ``[B, T, V]`` of ``model(ids)`` (a tensor, a tuple, or an object with .logits)."""
    out = model(ids)
    if isinstance(out, torch.Tensor):
        logits = out
    elif hasattr(out, "logits") and isinstance(out.logits, torch.Tensor):
        logits = out.logits
    elif isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
        logits = out[0]
    else:
        raise TypeError(
            f"{type(model).__name__}: expected model(ids) to return logits [B, T, V], a tuple "
            f"whose first item is the logits, or an object with .logits; got {type(out).__name__}"
        )
    if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(ids.shape):
        raise ValueError(
            f"{type(model).__name__}: expected logits of shape [{ids.shape[0]}, {ids.shape[1]}, V] "
            f"for ids of shape {list(ids.shape)}, got {list(logits.shape)}"
        )
    return logits


def _hf_hidden(base: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Last hidden state (after the final norm) of a Hugging Face base model, no KV cache."""
    try:
        out = base(input_ids=ids, use_cache=False)
    except TypeError:  # a base model without a cache argument
        out = base(input_ids=ids)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


class _Head:
    """Per-token NLLs from a model, computing the head only at scored positions when it can.

    ``nlls(x, rows, cols, targets)`` returns ``-ln p(targets[i] | x[rows[i], :cols[i]+1])`` for
    every i, float64. Four ways to get there, the first that agrees with the model's logits:

    * ``hook`` -- our GPT: ``model.lm_head(model.hidden(x))`` on the selected rows only (with
      ``keep``, the last block runs only at the span of columns the caller scores);
    * ``twin`` -- a Hugging Face ``GPT2LMHeadModel`` through :func:`hf_gpt2_twin`, as ``hook``;
    * ``hf`` -- a Hugging Face causal LM: ``model.get_output_embeddings()`` applied to the
      selected rows of ``model.base_model(x).last_hidden_state``;
    * ``full`` -- anything else: the full logits of ``model(x)``, rows selected afterwards.

    A hook is used only after it reproduced the model's own logits on the first few tokens.
    """

    def __init__(self, model: Any, probe: torch.Tensor) -> None:
        self.model = model
        self.kind = "full"
        self.hidden: Callable[..., torch.Tensor] | None = None
        self.head: nn.Module | None = None
        self.keep = False  # hidden(x, keep=slice) returns only the kept span of positions
        hooks: list[tuple[str, Callable[..., torch.Tensor], nn.Module]] = []
        lm_head = getattr(model, "lm_head", None)
        if callable(getattr(model, "hidden", None)) and isinstance(lm_head, nn.Module):
            hooks.append(("hook", model.hidden, lm_head))
        elif callable(getattr(model, "get_output_embeddings", None)):
            twin = hf_gpt2_twin(model)
            if twin is not None:  # a GPT2LMHeadModel run by our GPT, on its own weights
                hooks.append(("twin", twin.hidden, twin.lm_head))
            base = getattr(model, "base_model", None)
            head = model.get_output_embeddings()
            if isinstance(base, nn.Module) and base is not model and isinstance(head, nn.Module):
                hooks.append(("hf", lambda ids: _hf_hidden(base, ids), head))
        for i, (kind, hidden, head) in enumerate(hooks):
            self.kind, self.hidden, self.head = kind, hidden, head
            # our GPT's hidden(idx, keep=slice) runs the last block at the kept positions only
            self.keep = _takes_keep(hidden)
            if self._verified(probe, warn=i == len(hooks) - 1):
                return
        self.kind, self.hidden, self.head, self.keep = "full", None, None, False

    def _verified(self, probe: torch.Tensor, warn: bool = True) -> bool:
        try:
            cached = _VERIFIED.setdefault(self.model, {})
        except TypeError:  # not weak-referenceable: check every time
            cached = {}
        if self.kind in cached:
            return cached[self.kind]
        x = probe[:1, :_VERIFY_LEN]
        with torch.inference_mode():
            full = _call_logits(self.model, x).float()
            mine = self.head(self.hidden(x)).float()
        ok = mine.shape == full.shape
        diff = float((mine - full).abs().max()) if ok else math.inf
        if ok and self.keep and x.shape[1] >= 3:  # the kept span alone, as nlls() asks for it
            lo, hi = x.shape[1] // 2, x.shape[1] - 1
            with torch.inference_mode():
                kept = self.head(self.hidden(x, keep=slice(lo, hi))).float()
            ok = kept.shape == full[:, lo:hi].shape
            diff = max(diff, float((kept - full[:, lo:hi]).abs().max()) if ok else math.inf)
        ok = ok and diff <= _VERIFY_TOL * max(1.0, float(full.abs().max()))
        if not ok and warn:
            warnings.warn(
                f"{type(self.model).__name__}: hidden states + output head do not reproduce the "
                f"model's logits (max difference {diff:.3g}); scoring from the full logits",
                stacklevel=4,
            )
        cached[self.kind] = ok
        return ok

    def nlls(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        cols: torch.Tensor,
        targets: torch.Tensor,
        span: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """NLLs (nats, float64 ``[M]``) of ``targets`` read at positions ``(rows, cols)`` of x;
        ``span = (lo, hi)``, when the caller knows it, bounds the columns: ``lo <= cols < hi``."""
        if self.kind == "full":
            logits = _call_logits(self.model, x)  # [B, T, V]
            sel = logits[rows, cols]  # [M, V]: only the scored positions go on
            return _nll_blocks(lambda lo, hi: sel[lo:hi], sel.shape[0], sel.shape[1], targets)
        if self.keep:
            # only the span of scored positions leaves the last block (our GPT's ``keep``)
            lo, hi = (int(cols.min()), int(cols.max()) + 1) if span is None else span
            h = self.hidden(x, keep=slice(lo, hi))  # [B, hi - lo, D]
            if span is not None and rows.numel() == h.shape[0] * h.shape[1]:
                h = h.reshape(-1, h.shape[2])  # every row scores the whole span, in order
            else:
                h = h[rows, cols - lo]  # [M, D]
        else:
            h = self.hidden(x)[rows, cols]  # [M, D] hidden states at the scored positions only
        v = _out_features(self.head)
        return _nll_blocks(lambda lo, hi: self.head(h[lo:hi]), h.shape[0], v, targets)


def _weights_key(model: nn.Module) -> tuple:
    """What a twin built from ``model`` depends on: each parameter's storage, dtype and shape."""
    return tuple((p.data_ptr(), p.dtype, tuple(p.shape)) for p in model.parameters())


def hf_gpt2_twin(model: Any) -> nn.Module | None:
    """Our GPT (:class:`tinyllm.models.gpt.Model`) computing a Hugging Face ``GPT2LMHeadModel``'s
    function on the very same weight tensors (:func:`tinyllm.models.gpt.load_hf_gpt2` with
    ``share=True``: views, nothing copied), or None for any other model or a GPT-2 variant we
    do not implement.

    Why: on CPU our GPT runs GPT-2's tanh GELU as one fused kernel where HF runs five
    element-wise ops, it has a KV cache that scores several choices per row and it runs the last
    block only where strided perplexity scores. The twin is rebuilt when the model's parameters
    change (another tensor, dtype or shape); the scoring paths use it only after it reproduced
    the model's own logits (:class:`_Head`, :func:`_cache_engine`), else they fall back to the
    model itself.

    Example: ``hf_gpt2_twin(GPT2LMHeadModel(GPT2Config(n_layer=2)))`` -> a ``gpt.Model`` whose
    ``lm_head(hidden(x))`` equals the HF model's logits to float32 rounding.
    """
    tf = sys.modules.get("transformers")  # an HF model means transformers is imported
    cls = getattr(tf, "GPT2LMHeadModel", None) if tf is not None else None
    if cls is None or not isinstance(model, cls):
        return None
    key = _weights_key(model)
    with suppress(TypeError):
        got = _TWINS.get(model)
        if got is not None and got[0] == key:
            return got[1]
    from tinyllm.models import gpt

    try:
        twin = gpt.load_hf_gpt2(model, share=True)
    except (ValueError, TypeError, KeyError, RuntimeError):  # a variant we do not implement
        twin = None
    with suppress(TypeError):
        _TWINS[model] = (key, twin)
    return twin


def _takes_keep(hidden: Callable) -> bool:
    """Whether ``hidden`` accepts ``keep=`` (our GPT's: return only a span of positions)."""
    import inspect

    try:
        return "keep" in inspect.signature(hidden).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def _out_features(head: nn.Module) -> int:
    if isinstance(head, nn.Linear):
        return head.out_features
    w = getattr(head, "weight", None)
    return int(w.shape[0]) if isinstance(w, torch.Tensor) else 1 << 16


def _nll_blocks(
    logits_of: Callable[[int, int], torch.Tensor], m: int, v: int, targets: torch.Tensor
) -> np.ndarray:
    """``-log_softmax(z)[target]`` per row, over row blocks of at most _MAX_LOGITS elements.

    (On CPU torch's fused log_softmax is faster than ``logsumexp(z) - z[target]``.)
    """
    out = np.empty(m, dtype=np.float64)
    step = max(1, _MAX_LOGITS // max(v, 1))
    for lo in range(0, m, step):
        hi = min(m, lo + step)
        z = logits_of(lo, hi)  # [rows, V]
        if z.dtype not in (torch.float32, torch.float64):
            z = z.float()  # half-precision models are scored in fp32
        tgt = targets[lo:hi]
        if int(tgt.max()) >= z.shape[1]:
            raise ValueError(
                f"expected token ids < the model's vocabulary size {z.shape[1]}, "
                f"got id {int(tgt.max())}"
            )
        lp = torch.log_softmax(z, dim=-1)  # [rows, V]
        out[lo:hi] = -lp.gather(1, tgt[:, None])[:, 0].double().numpy()
    return out


@contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """Dropout off while scoring; the caller's training flag is restored afterwards."""
    m = model.model if isinstance(model, FamilyLM) else model
    was_training = isinstance(m, nn.Module) and m.training
    if was_training:
        m.eval()
    try:
        yield
    finally:
        if was_training:
            m.train()


def _as_ids(ids: Any, name: str = "ids") -> np.ndarray:
    """A 1-d integer numpy view of ``ids`` (a memmap stays a memmap: nothing is loaded)."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    a = ids if isinstance(ids, np.ndarray) else np.asarray(ids)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d sequence of token ids, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}: expected integer token ids, got dtype {a.dtype}")
    return a


def log_probs(model: Callable, ids: Any) -> torch.Tensor:
    """Log-probabilities ``log_softmax(model(ids[None]))[0]`` of one sequence, ``[T, V]`` float32.

    Row j is ``ln p(. | x_0 .. x_j)``: the distribution of token ``j + 1``. Computed from the full
    logits under ``torch.inference_mode()``.

    Example: for a model whose logits are all zero, every entry is ``-ln V``.
    """
    a = _as_ids(ids)
    if a.size < 1:
        raise ValueError("ids: expected at least 1 token, got 0")
    x = torch.from_numpy(np.asarray(a, dtype=np.int64))[None]  # [1, T]
    with _eval_mode(model), torch.inference_mode():
        return torch.log_softmax(_call_logits(model, x)[0].float(), dim=-1)


# ---------------------------------------------------------------------------------------------
# strided perplexity


def _check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")


def _window_groups(
    n: int, ctx_len: int, stride: int, batch_size: int
) -> Iterator[list[tuple[int, int, int]]]:
    """Consecutive windows of equal length that score equally many tokens (so the same span of
    positions in each: the first window, which scores all but its first token, goes alone), at
    most ``batch_size`` of them per group."""
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


def _iter_nll_chunks(
    model: Any,
    a: np.ndarray,
    ctx_len: int,
    stride: int,
    batch_size: int,
    progress: Callable[[int, int], Any] | None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(t0, nlls)``: the NLLs of tokens ``t0, t0+1, ...``, in order, a batch at a time."""
    n = a.shape[0]
    head: _Head | None = None
    done = 0
    for group in _window_groups(n, ctx_len, stride, batch_size):
        # [B, L] int64: only this batch of the (possibly memmapped) file is read
        xs = np.stack([np.asarray(a[w0:w1], dtype=np.int64) for w0, w1, _ in group])
        if xs.min() < 0:
            raise ValueError(f"ids: expected non-negative token ids, got {int(xs.min())}")
        # scored tokens t in [first, e) are read at window position j = t - 1 - a
        cols = np.concatenate([np.arange(f - 1 - w0, w1 - 1 - w0) for w0, w1, f in group])
        rows = np.concatenate(
            [np.full(w1 - f, b, dtype=np.int64) for b, (_, w1, f) in enumerate(group)]
        )
        x = torch.from_numpy(xs)
        r, c = torch.from_numpy(rows), torch.from_numpy(cols)
        w0, w1, f = group[0]  # every window of the group reads positions [f-1-w0, w1-1-w0)
        with torch.inference_mode():
            if head is None:
                head = _Head(model, x)
            nll = head.nlls(x, r, c, x[r, c + 1], span=(f - 1 - w0, w1 - 1 - w0))
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
    batch_size: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> np.ndarray:
    """Per-token NLLs ``l_t = -ln p(x_t | x_{a_k} .. x_{t-1})`` of tokens ``1 .. n-1`` (nats).

    Uses the strided windows of :func:`iter_windows`: each token is scored once, by the first
    window that contains it, so in every window after the first it has at least
    ``ctx_len - stride`` tokens of context. Returns ``float64[n - 1]``, entry ``t - 1`` for token t.

    ``ids`` may be a numpy memmap of any length (a token file from
    :func:`tinyllm.tokens.read_tokens`): only ``batch_size`` windows are read and held at a time.
    Windows of equal length are batched ``batch_size`` per forward pass (default
    :func:`default_batch_size`: a measured token budget divided by ``ctx_len``); the result does
    not depend on the batch size. Runs under ``torch.inference_mode()`` with dropout off.
    ``progress(done, total)`` is called after each batch with counts of scored tokens.

    Example (SPEC.md section 2): ``n = 6, ctx_len = 4, stride = 2`` calls the model on windows
    ``[0, 4)`` and ``[2, 6)``; a model that gives the true next token probability ``1/(j+2)`` at
    window position j yields ``[ln 2, ln 3, ln 4, ln 3, ln 4]``.

    Raises ValueError for ``stride >= ctx_len``, ``stride < 1``, fewer than 2 tokens, or token
    ids outside the model's vocabulary.
    """
    a = _as_ids(ids)
    n = a.shape[0]
    _check_window_args(n, ctx_len, stride)
    batch_size = default_batch_size(ctx_len) if batch_size is None else batch_size
    _check_batch_size(batch_size)
    out = np.empty(n - 1, dtype=np.float64)
    with _eval_mode(model):
        for t0, nll in _iter_nll_chunks(model, a, int(ctx_len), int(stride), batch_size, progress):
            out[t0 - 1 : t0 - 1 + nll.shape[0]] = nll
    return out


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
    batch_size: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> dict:
    """Strided perplexity of ``ids``: :func:`token_nlls` streamed into :func:`summarize_nlls`.

    Same windows, same NLLs as :func:`token_nlls` (nats), but the per-token NLLs are never held
    all at once: memory is bounded by the batch, whatever the length of ``ids``. The returned
    dict is :func:`summarize_nlls`'s: ``n_tokens`` (= n - 1), ``n_bytes``, ``sum_nll`` and
    ``nll`` / ``ppl`` / ``bpb`` each as ``{"value", "lo", "hi"}`` (95% Student t interval on the
    per-token NLLs; perplexity ends are exp of the NLL ends, bits-per-byte ends are the NLL ends
    times ``N / (n_bytes ln 2)``). ``n_bytes = 0`` means one token per byte.

    Example: the SPEC.md stride-2 example (n = 6, ctx_len = 4) gives ``n_tokens = 5`` and
    ``ppl["value"] = 288 ** (1/5) = 3.1037``.
    """
    a = _as_ids(ids)
    _check_window_args(a.shape[0], ctx_len, stride)
    batch_size = default_batch_size(ctx_len) if batch_size is None else batch_size
    _check_batch_size(batch_size)
    with _eval_mode(model):
        chunks = (
            nll
            for _, nll in _iter_nll_chunks(
                model, a, int(ctx_len), int(stride), batch_size, progress
            )
        )
        return summarize_nlls(chunks, n_bytes)


# ---------------------------------------------------------------------------------------------
# multiple choice (SPEC.md section 3)

DEFAULT_MC_TOKEN_BUDGET = 2048
"""Tokens per forward pass (rows x padded length) when scoring choices: contexts are batched
across items, sorted by length, up to this many tokens at a time; the choices' continuation
passes likewise count their cached context (bench/bench_mc.py)."""


@dataclass(frozen=True)
class FamilyLM:
    """An lm family's model seen through the family's own ``token_nlls(model, ids)``.

    Count-based families (bigram, n-gram) have no logits to call; wrapping them lets
    :func:`score_choices` and :func:`run_task` read a choice's log-likelihood from the family's
    per-token NLLs instead: ``LL(c) = -sum(token_nlls(context + c)[len(context) - 1:])``.
    """

    model: Any
    token_nlls: Callable[[Any, np.ndarray], np.ndarray]


def _encode(tok: Any, text: str) -> np.ndarray:
    if hasattr(tok, "all_special_ids"):
        # a Hugging Face tokenizer: no BOS/EOS around the pieces we concatenate
        ids = tok.encode(text, add_special_tokens=False)
    else:
        ids = tok.encode(text)
    return np.asarray(ids, dtype=np.int64).reshape(-1)


def _check_choices(context: Any, choices: Any) -> list[str]:
    if not isinstance(context, str):
        raise TypeError(f"context: expected a str, got {type(context).__name__}")
    if isinstance(choices, str) or not isinstance(choices, Sequence) or len(choices) < 1:
        raise ValueError(f"choices: expected a non-empty list of strings, got {choices!r}")
    for i, c in enumerate(choices):
        if not isinstance(c, str) or not c:
            raise ValueError(f"choices[{i}]: expected a non-empty string, got {c!r}")
    return list(choices)


def _check_delimiter(d: Any, where: str = "target_delimiter") -> str | None:
    if d is not None and not isinstance(d, str):
        raise ValueError(f"{where}: expected a string (or absent), got {d!r}")
    return d


def model_ctx_len(model: Any) -> int | None:
    """The longest input a model reads, in tokens, or None when it has no limit we can find.

    Our GPT (and any model with ``cfg.block_size``): ``cfg.block_size``; a Hugging Face model: the first of ``n_positions``, ``max_position_embeddings``, ``n_ctx`` in its
    config (lm-eval's order). A :class:`FamilyLM` has none: the family's own ``token_nlls``
    reads sequences of any length (an NPLM's ``ctx_len`` is its n-gram window, not a limit).

    Example: a GPT built with ``Config(block_size=32)`` -> 32.
    """
    if isinstance(model, FamilyLM):
        return None  # a family's own token_nlls reads sequences of any length
    m = model
    cfg = getattr(m, "cfg", None)
    v = getattr(cfg, "block_size", None)
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    hc = getattr(m, "config", None)
    for key in ("n_positions", "max_position_embeddings", "n_ctx"):
        v = getattr(hc, key, None)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            return v
    return None


@dataclass(frozen=True)
class _Req:
    """One choice of one item, tokenized and truncated: the model reads ``ctx + cont[:-1]``."""

    item: int
    ctx: np.ndarray  # the context tokens fed (after left truncation), >= 1
    cont: np.ndarray  # the scored tokens (delimiter + choice), >= 1


def _encode_pair(tok: Any, context: str, continuation: str) -> tuple[np.ndarray, np.ndarray]:
    """lm-eval's ``_encode_pair`` for causal models: trailing whitespace of the context moves
    to the continuation, the whole is encoded, and the context's own tokens are split off."""
    n = len(context) - len(context.rstrip())
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = _encode(tok, context + continuation)
    ctx = _encode(tok, context)
    return ctx, whole[ctx.size :]


def _requests(
    tok: Any, items: Sequence[dict], delimiter: str | None, max_len: int | None
) -> tuple[list[_Req], int, int]:
    """Tokenize every (item, choice) and truncate; returns (requests, tokens cut, requests cut).

    With ``max_len`` L the model reads ``(ctx + cont)[-(L+1):][:-1]`` (lm-eval's rule): the
    context is cut from the left only when ``len(ctx) + len(cont) > L + 1``.
    """
    reqs: list[_Req] = []
    cut_tokens = cut_reqs = 0
    for i, it in enumerate(items):
        context, choices = it["context"], _check_choices(it["context"], it["choices"])
        d = delimiter if delimiter is not None else it.get("target_delimiter")
        where = it.get("_where") or f"item {i}"
        ctx0 = None if d is not None else _encode(tok, context)
        for j, text in enumerate(choices):
            if d is None:
                ctx, cont = ctx0, _encode(tok, text)
            else:
                ctx, cont = _encode_pair(tok, context, d + text)
            if ctx.size < 1:
                raise ValueError(
                    f"{where}: context {context!r}: expected at least one token (the first "
                    "choice token is read at the position before it), got none"
                )
            if cont.size < 1:
                raise ValueError(
                    f"{where}: choices[{j}] {text!r}: expected at least one token, got none"
                )
            if max_len is not None:
                if cont.size > max_len:
                    raise ValueError(
                        f"{where}: choices[{j}] is {cont.size} tokens; expected at most the "
                        f"model's context of {max_len} tokens (left truncation keeps the whole "
                        "choice and at least one context token, or nothing can be scored)"
                    )
                extra = ctx.size + cont.size - (max_len + 1)
                if extra > 0:  # (ctx + cont)[-(L+1):][:-1]: cut the context's first tokens
                    ctx = ctx[extra:]
                    cut_tokens += extra
                    cut_reqs += 1
            reqs.append(_Req(i, ctx, cont))
    return reqs, cut_tokens, cut_reqs


def _resolve_max_len(model: Any, max_len: int | None) -> int | None:
    own = model_ctx_len(model)
    if max_len is None:
        return own
    if isinstance(max_len, bool) or not isinstance(max_len, int | np.integer) or max_len < 1:
        raise ValueError(f"max_len: expected an int >= 1 (tokens the model reads), got {max_len!r}")
    if own is not None and max_len > own:
        raise ValueError(
            f"max_len: expected at most the model's own context of {own} tokens, got {max_len}"
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
) -> list[np.ndarray]:
    """``LL(c)`` in nats for every choice of every item: ``float64[k_i]`` per item (SPEC 3).

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
    inputs shared, sorted and batched the same way). ``progress(done, total)`` counts items.

    Example (SPEC.md section 3): context "a", choices "bb", "c" with p(b|a) = 0.4,
    p(b|b) = 0.9, p(c|a) = 0.45 -> ``[array([-1.0217, -0.7985])]``.
    """
    items = list(items)
    if target_delimiter is not None:
        _check_delimiter(target_delimiter)
    budget = DEFAULT_MC_TOKEN_BUDGET if token_budget is None else int(token_budget)
    if budget < 1:
        raise ValueError(f"token_budget: expected an int >= 1, got {token_budget!r}")
    L = _resolve_max_len(model, max_len)
    reqs, cut_tokens, cut_reqs = _requests(tok, items, target_delimiter, L)
    if cut_tokens:
        warnings.warn(
            f"cut {cut_tokens} context tokens from the left of {cut_reqs} of {len(reqs)} "
            f"context + choice pairs to fit the model's context of {L} tokens "
            "(lm-eval's rule: the model reads (context + choice)[-(L+1):][:-1])",
            stacklevel=2,
        )
    with _eval_mode(model), torch.inference_mode():
        ll = _score_requests(model, reqs, budget, len(items), progress)
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
    lm-eval does: the model reads ``(ctx + cont)[-(max_len+1):][:-1]``. ``model`` may also be a
    :class:`FamilyLM`.

    Example (SPEC.md section 3): context "a", choices "bb", "c" with p(b|a) = 0.4,
    p(b|b) = 0.9, p(c|a) = 0.45 -> ``normalize=False``: ``[-1.0217, -0.7985]`` (acc picks "c");
    ``normalize=True``: ``[-0.5108, -0.7985]`` (acc_norm picks "bb").
    """
    choices = _check_choices(context, choices)
    item = {"context": context, "choices": choices}
    scores = choice_lls(model, tok, [item], max_len, _check_delimiter(target_delimiter))[0]
    if normalize:
        scores = scores / _choice_bytes(choices)
    return scores


def _choice_bytes(choices: Sequence[str]) -> np.ndarray:
    """acc_norm's divisor: UTF-8 bytes of each choice text, the delimiter left out."""
    return np.asarray([len(t.encode("utf-8")) for t in choices], dtype=np.float64)


def _score_requests(
    model: Any,
    reqs: list[_Req],
    budget: int,
    n_items: int,
    progress: Callable[[int, int], Any] | None,
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
    engine = _cache_engine(model, reqs)
    if engine is None:
        _plain_lls(model, reqs, range(len(reqs)), budget, ll, finished)
    else:
        _cached_lls(engine, reqs, budget, ll, finished)
    return ll


def _pad(seqs: Sequence[np.ndarray]) -> torch.Tensor:
    """Right-pad 1-d id arrays with 0 into ``[B, max len]`` int64 (causal: padding after a
    sequence cannot change what is read inside it)."""
    xs = np.zeros((len(seqs), max(s.size for s in seqs)), dtype=np.int64)
    for b, s in enumerate(seqs):
        xs[b, : s.size] = s
    return torch.from_numpy(xs)


_MAX_PAD = 0.25  # a row joins a batch only if it is at least 75% of the batch's longest row


def _budget_batches(
    lengths: Sequence[int], budget: int, extra: int = 0, max_pad: float = _MAX_PAD
) -> Iterator[slice]:
    """Consecutive slices of a length-sorted (longest first) list: rows x (longest + extra)
    stays within ``budget`` tokens, and no row is padded by more than ``max_pad`` of the
    longest (padding is computed and thrown away); at least one row each."""
    lo = 0
    while lo < len(lengths):
        hi = lo + 1
        width = lengths[lo] + extra
        while (
            hi < len(lengths)
            and (hi - lo + 1) * width <= budget
            and lengths[hi] >= (1.0 - max_pad) * lengths[lo]
        ):
            hi += 1
        yield slice(lo, hi)
        lo = hi


def _plain_lls(
    model: Any,
    reqs: list[_Req],
    which: Iterable[int],
    budget: int,
    ll: list[float],
    finished: Callable[[Iterable[int]], None] | None,
) -> None:
    """No cache: each distinct input ``ctx + cont[:-1]`` runs once (choices of one token share
    their context's pass), longest first, batched by the token budget."""
    inputs: dict[bytes, int] = {}
    seqs: list[np.ndarray] = []
    users: list[list[int]] = []
    for k in which:
        r = reqs[k]
        s = np.concatenate([r.ctx, r.cont[:-1]])
        key = s.tobytes()
        if key not in inputs:
            inputs[key] = len(seqs)
            seqs.append(s)
            users.append([])
        users[inputs[key]].append(k)
    order = sorted(range(len(seqs)), key=lambda u: -seqs[u].size)
    head: _Head | None = None
    for sl in _budget_batches([seqs[u].size for u in order], budget):
        batch = order[sl]
        x = _pad([seqs[u] for u in batch])
        rows, cols, tgts, ks = [], [], [], []
        for b, u in enumerate(batch):
            for k in users[u]:
                r = reqs[k]
                # choice token t (at input index len(ctx) + t) is read at index len(ctx) + t - 1
                cols.append(np.arange(r.ctx.size - 1, r.ctx.size - 1 + r.cont.size))
                rows.append(np.full(r.cont.size, b))
                tgts.append(r.cont)
                ks.append(k)
        r_t = torch.from_numpy(np.concatenate(rows).astype(np.int64))
        c_t = torch.from_numpy(np.concatenate(cols).astype(np.int64))
        t_t = torch.from_numpy(np.concatenate(tgts).astype(np.int64))
        if head is None:
            head = _Head(model, x)
        nll = head.nlls(x, r_t, c_t, t_t)
        bounds = np.cumsum([0] + [t.size for t in tgts])
        for i, k in enumerate(ks):
            ll[k] = -math.fsum(nll[bounds[i] : bounds[i + 1]])
        if finished is not None:
            finished(ks)


def _cached_lls(
    engine: Any,
    reqs: list[_Req],
    budget: int,
    ll: list[float],
    finished: Callable[[Iterable[int]], None] | None,
    max_pad: float = _MAX_PAD,
) -> None:
    """Each distinct context runs once (batched across items, longest first); the first choice
    token is read from the context's last position, the others from ``cont[:-1]`` fed after the
    context's cached keys and values, the choices of one context packed in one row. ``max_pad``
    as in :func:`_budget_batches` (the cache check passes 1.0: every row of its probe in one
    padded pass)."""
    ctx_id: dict[bytes, int] = {}
    ctxs: list[np.ndarray] = []
    of_ctx: list[list[int]] = []
    for k, r in enumerate(reqs):
        key = r.ctx.tobytes()
        if key not in ctx_id:
            ctx_id[key] = len(ctxs)
            ctxs.append(r.ctx)
            of_ctx.append([])
        of_ctx[ctx_id[key]].append(k)
    order = sorted(range(len(ctxs)), key=lambda u: -ctxs[u].size)
    v = _out_features(engine.head)
    for sl in _budget_batches([ctxs[u].size for u in order], budget, max_pad=max_pad):
        batch = order[sl]
        x = _pad([ctxs[u] for u in batch])  # [Bc, Lc]
        lens = torch.tensor([ctxs[u].size for u in batch])  # [Bc]
        h_last, state = engine.prefill(x, lens)  # [Bc, D] at each context's last token
        ks = [k for u in batch for k in of_ctx[u]]
        row_of = {u: b for b, u in enumerate(batch)}
        # the first choice token of every request, read at its context's last position: the
        # head and log-softmax run once per context, shared by all of its choices
        rows = torch.tensor([row_of[ctx_id[reqs[k].ctx.tobytes()]] for k in ks])  # [R]
        tgt = torch.tensor([int(reqs[k].cont[0]) for k in ks])  # [R]
        step = max(1, _MAX_LOGITS // max(v, 1))
        for lo in range(0, len(batch), step):
            z = engine.head(h_last[lo : lo + step])  # [rows, V]
            if int(tgt.max()) >= z.shape[1]:
                raise ValueError(
                    f"expected token ids < the model's vocabulary size {z.shape[1]}, "
                    f"got id {int(tgt.max())}"
                )
            lp = torch.log_softmax(z.float(), dim=-1)
            sel = ((rows >= lo) & (rows < lo + step)).nonzero()[:, 0]
            got = lp[rows[sel] - lo, tgt[sel]].double()
            for i, val in zip(sel.tolist(), got.tolist(), strict=True):
                ll[ks[i]] = val
        # the rest of each choice, fed after its cached context: the choices of one context
        # share a row (packed one after another, each attending to the context and causally to
        # itself only), so the context's keys and values are copied once per context, not per
        # choice. (One row per choice would attend over fewer masked pairs when the choices are
        # long, but measured slower on the tiny "sentence" task: bench/bench_mc.py.)
        groups = [(u, [k for k in of_ctx[u] if reqs[k].cont.size > 1]) for u in batch]
        groups = [g for g in groups if g[1]]
        groups.sort(key=lambda g: -sum(reqs[k].cont.size - 1 for k in g[1]))
        widths = [sum(reqs[k].cont.size - 1 for k in g[1]) for g in groups]
        for sl2 in _budget_batches(widths, budget, max_pad=max_pad):
            part = [g[0] for g in groups[sl2]]  # the context of each row
            row_reqs = [g[1] for g in groups[sl2]]
            tq = widths[sl2.start]
            y = torch.zeros(len(part), tq, dtype=torch.int64)  # [Bq, Tq] packed choices
            pos = torch.zeros(len(part), tq, dtype=torch.int64)
            seg = torch.full((len(part), tq), -1, dtype=torch.int64)  # request id, -1: pad
            r_i, c_i, tg, spans = [], [], [], []
            for b, u in enumerate(part):
                at, n_ctx = 0, ctxs[u].size
                for k in row_reqs[b]:
                    q = reqs[k].cont.size - 1  # never the last token
                    y[b, at : at + q] = torch.from_numpy(reqs[k].cont[:-1])
                    pos[b, at : at + q] = n_ctx + torch.arange(q)
                    seg[b, at : at + q] = k
                    r_i.append(torch.full((q,), b))
                    c_i.append(torch.arange(at, at + q))
                    tg.append(torch.from_numpy(reqs[k].cont[1:]))
                    spans.append((k, q))
                    at += q
                pos[b, at:] = n_ctx  # padding: any valid position, never read
            j = torch.arange(tq)
            # a token attends to the earlier tokens of its own segment; padding to itself only
            causal = j[None, None, :] <= j[None, :, None]  # [1, Tq, Tq]
            new_mask = ((seg[:, :, None] == seg[:, None, :]) & causal) | torch.eye(
                tq, dtype=torch.bool
            )
            crow = torch.tensor([row_of[u] for u in part])
            h2 = engine.extend(state, crow, lens[crow], y, pos, new_mask)  # [Bq, Tq, D]
            hs = h2[torch.cat(r_i), torch.cat(c_i)]  # [M, D]: only scored positions
            tgt2 = torch.cat(tg)
            nll = _nll_blocks(lambda lo, hi, hs=hs: engine.head(hs[lo:hi]), hs.shape[0], v, tgt2)
            at = 0
            for k, q in spans:
                ll[k] -= math.fsum(nll[at : at + q])
                at += q
        if finished is not None:
            finished(ks)


class _GPTCache:
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
        everyone = rows.numel() == cache.batch and bool((rows == torch.arange(cache.batch)).all())
        past = cache if everyone else cache.select(rows)
        valid = torch.arange(past.length)[None, :] < lens[:, None]  # [Bq, S]: not the padding
        h, _ = self.model.hidden_cached(y, past, positions=pos, past_valid=valid, new_mask=new_mask)
        return h


def _hf_kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer (keys, values) ``[B, H, S, Dh]`` of a Hugging Face cache, any recent version."""
    if hasattr(cache, "layers"):
        return [(lay.keys, lay.values) for lay in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    return [(kv[0], kv[1]) for kv in cache]


class _HFCache:
    """A Hugging Face causal LM through its base model's cache (``past_key_values``)."""

    def __init__(self, model: Any) -> None:
        import inspect

        from transformers import DynamicCache

        self.base, self.head, self._dyn = (
            model.base_model,
            model.get_output_embeddings(),
            DynamicCache,
        )
        params = inspect.signature(self.base.forward).parameters
        self.kw = "cache" if "cache" in params else "past_key_values"

    def prefill(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        am = (torch.arange(x.shape[1])[None, :] < lens[:, None]).long()  # [Bc, Lc]
        out = self.base(input_ids=x, attention_mask=am, use_cache=True)
        cache = getattr(out, self.kw, None) or getattr(out, "past_key_values", None)
        h = out.last_hidden_state  # [Bc, Lc, D]
        return h[torch.arange(h.shape[0]), lens - 1], (_hf_kv(cache), am)  # [Bc, D]

    def extend(
        self,
        state: Any,
        rows: torch.Tensor,
        lens: torch.Tensor,
        y: torch.Tensor,
        pos: torch.Tensor,
        new_mask: torch.Tensor,
    ) -> torch.Tensor:
        kv, am = state
        cache = self._dyn()
        for i, (k, v) in enumerate(kv):
            cache.update(k.index_select(0, rows), v.index_select(0, rows), i)
        old = am.index_select(0, rows).bool()  # [Bq, S]: the context, not its padding
        Tq = y.shape[1]
        # a 4-d boolean mask [Bq, 1, Tq, S + Tq] is used by the model as given
        mask = torch.cat([old[:, None, :].expand(-1, Tq, -1), new_mask], dim=2)[:, None]
        out = self.base(
            input_ids=y, attention_mask=mask, position_ids=pos, use_cache=True, **{self.kw: cache}
        )
        return out.last_hidden_state


_CACHE_OK: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {path: agrees?}


def _cache_engine(model: Any, reqs: list[_Req]) -> Any:
    """The cached path for ``model`` if it has one and it reproduces the plain path on a probe
    of the first requests (checked once per model and path), else None. A Hugging Face
    GPT-2 is tried first through our GPT on its own weights (:func:`hf_gpt2_twin`), then
    through its own cache."""
    makers: list[tuple[str, Callable[[], Any]]] = []
    if callable(getattr(model, "hidden_cached", None)) and isinstance(
        getattr(model, "lm_head", None), nn.Module
    ):
        makers.append(("gpt", lambda: _GPTCache(model)))
    elif (
        callable(getattr(model, "get_output_embeddings", None))
        and isinstance(getattr(model, "base_model", None), nn.Module)
        and getattr(model, "base_model", None) is not model
    ):
        twin = hf_gpt2_twin(model)
        if twin is not None:
            makers.append(("twin", lambda: _GPTCache(twin)))
        makers.append(("hf", lambda: _HFCache(model)))
    try:
        verdicts = _CACHE_OK.setdefault(model, {})
    except TypeError:
        verdicts = {}
    for i, (tag, make) in enumerate(makers):
        try:
            engine = make()
        except Exception:  # noqa: BLE001 - no usable cache: the next path
            continue
        if tag not in verdicts:
            verdicts[tag] = _cache_agrees(model, engine, reqs, warn=i == len(makers) - 1)
        if verdicts[tag]:
            return engine
    return None


def _cache_agrees(model: Any, engine: Any, reqs: list[_Req], warn: bool) -> bool:
    """Whether ``engine`` gives the plain path's log-likelihoods on a probe of ``reqs``."""
    probe = _probe(reqs)
    want = [math.nan] * len(reqs)
    diff = math.inf
    try:
        _plain_lls(model, reqs, probe, 1 << 30, want, None)
        sub = [reqs[k] for k in probe]
        got = [math.nan] * len(sub)
        # one pass whatever the lengths: a cache that mishandles padding is caught here
        _cached_lls(engine, sub, 1 << 30, got, None, max_pad=1.0)
        diff = max(abs(got[i] - want[k]) / max(1.0, abs(want[k])) for i, k in enumerate(probe))
        ok = diff <= _VERIFY_TOL
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


def _probe(reqs: list[_Req]) -> list[int]:
    """A few requests for the cache check: the shortest and the longest of the first three
    contexts (when those have one length, the first later context of another length), with
    their choices (so padding, repeats and multi-token choices are exercised; the check scores
    them in one padded pass)."""
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


# ---------------------------------------------------------------------------------------------
# task files (formats/task-jsonl.md) and task accuracy


def _check_item(item: Any, where: str) -> dict:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(item).__name__}")
    missing = [k for k in ("context", "choices", "gold") if k not in item]
    if missing:
        raise ValueError(f"{where}: expected keys context, choices, gold; missing {missing}")
    ctx, choices, gold = item["context"], item["choices"], item["gold"]
    if not isinstance(ctx, str) or not ctx:
        raise ValueError(
            f"{where}: expected 'context' to be a non-empty string (the first choice token is "
            f"read at the position before it), got {ctx!r}"
        )
    if (
        not isinstance(choices, list)
        or len(choices) < 2
        or not all(isinstance(c, str) and c for c in choices)
    ):
        raise ValueError(
            f"{where}: expected 'choices' to be a list of at least 2 non-empty strings, "
            f"got {choices!r}"
        )
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        raise ValueError(
            f"{where}: expected 'gold' to be an int index in [0, {len(choices) - 1}], got {gold!r}"
        )
    _check_delimiter(item.get("target_delimiter"), f"{where}: 'target_delimiter'")
    return item


def read_task(path: str | os.PathLike) -> list[dict]:
    """Read and validate a task file (formats/task-jsonl.md): one JSON object per line.

    Each line is ``{"context": str (non-empty), "choices": [str, ...] (>= 2, non-empty),
    "gold": int}``, optionally ``"target_delimiter": str``; other keys are kept and ignored;
    blank lines are skipped. Every error names the file and line (``path:line: expected ...``),
    invalid UTF-8 included.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: task file not found")
    items = []
    with open(p, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{p}:{lineno}: expected UTF-8 text, got byte 0x{raw[e.start]:02x} at "
                    f"column {e.start + 1} ({e.reason})"
                ) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"{p}:{lineno}: expected a JSON object, got a parse error: {e}"
                ) from None
            items.append(_check_item(obj, f"{p}:{lineno}"))
            items[-1]["_where"] = f"{p}:{lineno}"
    if not items:
        raise ValueError(f"{p}: expected at least one task item, got an empty file")
    return items


def item_predictions(lls: Sequence[np.ndarray], items: Sequence[dict], metric: str) -> np.ndarray:
    """Predicted choice per item: ``argmax LL(c)`` (acc) or ``argmax LL(c) / bytes(c)``
    (acc_norm, ``bytes(c)`` the UTF-8 bytes of the choice text, delimiter left out); ties go to
    the FIRST choice. Returns ``int64[n]``.

    Example: LLs ``[-1.0217, -0.7985]`` for choices "bb", "c" -> acc: 1, acc_norm: 0.
    """
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {list(METRICS)}, got {metric!r}")
    out = np.empty(len(items), dtype=np.int64)
    for i, (s, it) in enumerate(zip(lls, items, strict=True)):
        if metric == "acc_norm":
            s = s / _choice_bytes(it["choices"])
        out[i] = int(np.argmax(s))  # argmax: the first maximum
    return out


def run_task(
    model: Any,
    tok: Any,
    task_jsonl: str | os.PathLike | Iterable[dict],
    metric: str,
    rng: np.random.Generator,
    n_boot: int = 1000,
    max_len: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
    target_delimiter: str | None = None,
) -> Result:
    """Accuracy of ``model`` on a multiple-choice task, with a percentile bootstrap interval.

    For each item the prediction is :func:`item_predictions` over :func:`choice_lls`: ``acc``
    compares ``LL(c)``, ``acc_norm`` compares ``LL(c) / bytes(c)`` (UTF-8 bytes of the choice,
    the delimiter left out). Ties go to the FIRST choice. ``per_item[i]`` is 1.0 when item i's
    prediction is its gold index, else 0.0; ``value = mean(per_item)`` (a fraction) and
    ``[lo, hi]`` is :func:`tinyllm.stats.bootstrap_ci` of ``per_item`` with ``n_boot`` resamples
    drawn from ``rng`` (the same rng state gives the same interval).

    ``task_jsonl`` is a task file path or an iterable of already parsed items. ``max_len`` and
    ``target_delimiter`` are :func:`choice_lls`'s (default: the model's own context, and each
    item's delimiter). ``progress(done, total)`` counts scored items.

    Example: 3 items, 2 predicted right -> ``value = 0.6667``, ``per_item = [1, 0, 1]``
    (in item order).
    """
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {list(METRICS)}, got {metric!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(task_jsonl, str | os.PathLike):
        items = read_task(task_jsonl)
    else:
        items = [_check_item(it, f"task item {i}") for i, it in enumerate(task_jsonl)]
        if not items:
            raise ValueError("task: expected at least one item, got none")
    lls = choice_lls(model, tok, items, max_len, target_delimiter, progress=progress)
    pred = item_predictions(lls, items, metric)
    gold = np.asarray([it["gold"] for it in items])
    per_item = (pred == gold).astype(np.float64)
    ci = stats.bootstrap_ci(per_item, rng, n_boot=n_boot)
    return Result(ci.value, ci.lo, ci.hi, len(items), per_item)


# ---------------------------------------------------------------------------------------------
# paired comparison (SPEC.md section 5)


def compare(
    a: Result, b: Result, n_perm: int = 10_000, rng: np.random.Generator | None = None
) -> float:
    """p-value of "A and B differ" on the same items: a paired sign-flip permutation test.

    With ``d_i = a.per_item[i] - b.per_item[i]``, the statistic is ``|sum d_i|`` and its null
    distribution comes from random sign flips of the ``d_i``
    (:func:`tinyllm.stats.paired_permutation_test`, exact when ``2**n <= n_perm``). Item i of
    ``a`` and item i of ``b`` must be the same item.

    Example: four items all right for A and all wrong for B -> exact p = 2/16 = 0.125.

    Raises ValueError (from the stats test) when the two results have different numbers of
    items: unpaired results cannot be compared this way.
    """
    for name, r in (("a", a), ("b", b)):
        if not isinstance(r, Result):
            raise TypeError(f"{name}: expected a Result, got {type(r).__name__}")
    return stats.paired_permutation_test(a.per_item, b.per_item, n_perm=n_perm, rng=rng)
