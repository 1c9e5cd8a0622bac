"""Per-token NLLs from a model: its logits, and its output head only where tokens are scored.

A *model* is anything callable as ``model(ids[None])`` returning logits ``[1, T, V]``, a tuple
whose first item is those logits, or an object with ``.logits`` (Hugging Face outputs)
(:func:`call_logits`). :class:`Head` computes the head and the log-softmax only at the scored
positions when a *view* of the model offers the hooks for it -- ``hidden(x) -> [B, T, D]`` and
an ``lm_head`` module (our GPT offers both itself) -- each view checked once against the
model's own logits. Head output goes in row blocks of at most ``max_logits`` elements
(:func:`nll_blocks`).

Layers: this module sits at the library's root, below :mod:`tinyllm.models` and
:mod:`tinyllm.eval`, and imports neither: a family's ``token_nlls`` (:mod:`tinyllm.windows`)
and the instrument (:mod:`tinyllm.eval.lm`) both score through it. Which views a model has is
the caller's to say: the model itself by default; the instrument adds a Hugging Face model's
(:func:`tinyllm.models.hf.views`).
"""

from __future__ import annotations

import inspect
import math
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from tinyllm.device import model_dtype

MAX_LOGITS = 1 << 26
"""Default bound on the elements of one ``[rows, V]`` block of head output (256 MB in float32);
a block holds one row at least. The ``max_logits`` argument of the scoring functions."""

VERIFY_LEN = 16
"""Tokens (of one row) on which a head-only hook is checked against the model's full logits."""

VERIFY_TOL = 1e-4
"""Tolerance of every check of a faster path against the plain one in float32 (and wider): a
hook's logits within ``VERIFY_TOL * max(1, max |logit|)``, a cached log-likelihood within
``VERIFY_TOL * max(1, |LL|)``; half precision widens it (:func:`tolerance`)."""

EPS_FACTOR = 8
""":func:`tolerance` in half precision: ``EPS_FACTOR`` machine epsilons of the weights' dtype
(bfloat16: 8 * 2**-7 = 0.0625, float16: 8 * 2**-10 = 0.0078). Two orders of the same sums
differ by a few epsilons in these dtypes, while a wrong cache (an unmasked pad, a window not
applied, a position off by one) changes a log-likelihood by far more."""


def tolerance(dtype: torch.dtype) -> float:
    """The relative tolerance of a check in ``dtype`` (the model's weights):
    ``max(VERIFY_TOL, EPS_FACTOR * eps(dtype))`` -- :data:`VERIFY_TOL` (1e-4) for float32 and
    float64, 0.0625 for bfloat16, 0.0078 for float16. So a cached path in half precision is
    used or refused by what it computes, not by the rounding of the order it sums in.

    Example: ``tolerance(torch.float32)`` -> 1e-4; ``tolerance(torch.bfloat16)`` -> 0.0625.
    """
    if not dtype.is_floating_point:
        return VERIFY_TOL
    return max(VERIFY_TOL, EPS_FACTOR * float(torch.finfo(dtype).eps))


_VERIFIED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {hook: agrees?}


def call_logits(model: Callable, ids: torch.Tensor) -> torch.Tensor:
    """Full logits ``[B, T, V]`` of ``model(ids)`` (a tensor, a tuple, or an object with .logits).

    Example: for ``model = lambda ids: (torch.zeros(*ids.shape, 5), None)`` and ids ``[1, 3]``
    -> a ``[1, 3, 5]`` tensor of zeros. Raises TypeError for any other output and ValueError for
    logits whose first two dimensions are not those of ``ids``.
    """
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


def has_keep_logits(view: Any) -> bool:
    """Whether ``view`` offers ``keep_logits(x, keep: slice) -> [B, len(keep), V]``: the model's
    own logits at a span of positions only (:class:`tinyllm.models.hf.KeepLogitsView`)."""
    return callable(getattr(view, "keep_logits", None))


def has_head_hooks(view: Any) -> bool:
    """Whether ``view`` offers the head-only hooks: a callable ``hidden`` and an ``lm_head``
    module (our GPT does; so do the views of :func:`tinyllm.models.hf.views`)."""
    return callable(getattr(view, "hidden", None)) and isinstance(
        getattr(view, "lm_head", None), nn.Module
    )


class Head:
    """Per-token NLLs from a model, computing the head only at scored positions when it can.

    ``nlls(x, rows, cols, targets)`` returns ``-ln p(targets[i] | x[rows[i], :cols[i]+1])`` for
    every i, float64. ``views`` are ``(kind, view)`` pairs tried in order (default: the model
    itself as ``"hook"``); a view that offers the hooks (:func:`has_head_hooks`) scores as
    ``view.lm_head(view.hidden(x))`` on the selected rows only, and with a ``hidden`` that
    takes ``keep=`` (our GPT's) the last block runs only at the span of columns the caller
    scores. ``kind`` is the first view whose hooks agree with the model's logits, else
    ``"full"``: the full logits of ``model(x)``, rows selected afterwards. The Hugging Face
    family's views are ``"twin"`` (a ``GPT2LMHeadModel`` run by our GPT on its weights) and
    ``"hf"`` (the base model's last hidden state + the output embeddings); a view that offers
    ``keep_logits`` (:func:`has_keep_logits`: the model's own ``logits_to_keep``) is tried
    after its hidden-state hook as ``"keep"``, reproducing a model that transforms its logits
    after the head (Gemma 2's soft-capping). The tolerance follows the weights' dtype
    (:func:`tolerance`).

    A hook is used only after it reproduced the model's own logits on the first
    :data:`VERIFY_LEN` tokens of ``probe``'s first row (within :data:`VERIFY_TOL` of
    ``max(1, max |logit|)``; checked once per model and kind, remembered while the model
    lives); the last hook to fail says so in a warning.

    Example: ``Head(gpt.Model(gpt.Config()), ids[None]).kind`` -> ``"hook"``.
    """

    def __init__(
        self, model: Any, probe: torch.Tensor, views: Sequence[tuple[str, Any]] | None = None
    ) -> None:
        self.model = model
        self.kind = "full"
        self.hidden: Callable[..., torch.Tensor] | None = None
        self.head: nn.Module | None = None
        self.keep = False  # hidden(x, keep=slice) returns only the kept span of positions
        self.keep_logits: Callable[..., torch.Tensor] | None = None  # the model's own, kept
        tried = [("hook", model)] if views is None else views
        # each view's hidden-state hook, then its own kept logits (kind "keep")
        hooks: list[tuple[str, Any, bool]] = []
        for kind, v in tried:
            if has_head_hooks(v):
                hooks.append((kind, v, False))
            if has_keep_logits(v):
                hooks.append(("keep", v, True))
        for i, (kind, v, kept) in enumerate(hooks):
            self.kind = kind
            if kept:
                self.keep_logits, self.hidden, self.head, self.keep = (
                    v.keep_logits,
                    None,
                    None,
                    False,
                )
            else:
                self.keep_logits, self.hidden, self.head = None, v.hidden, v.lm_head
                # our GPT's hidden(idx, keep=slice) runs the last block at the kept positions
                self.keep = _takes_keep(v.hidden)
            if self._verified(probe, warn=i == len(hooks) - 1):
                return
        self.kind, self.hidden, self.head, self.keep = "full", None, None, False
        self.keep_logits = None

    def _verified(self, probe: torch.Tensor, warn: bool = True) -> bool:
        try:
            cached = _VERIFIED.setdefault(self.model, {})
        except TypeError:  # not weak-referenceable: check every time
            cached = {}
        if self.kind in cached:
            return cached[self.kind]
        x = probe[:1, :VERIFY_LEN]
        T = x.shape[1]
        try:
            with torch.inference_mode():
                full = call_logits(self.model, x).float()
                if self.keep_logits is not None:
                    mine = self.keep_logits(x, slice(0, T)).float()
                else:
                    mine = self.head(self.hidden(x)).float()
            ok = mine.shape == full.shape
            diff = float((mine - full).abs().max()) if ok else math.inf
            if ok and (self.keep or self.keep_logits is not None) and T >= 3:
                lo, hi = T // 2, T - 1  # the kept span alone, as nlls() asks for it
                with torch.inference_mode():
                    if self.keep_logits is not None:
                        kept = self.keep_logits(x, slice(lo, hi)).float()
                    else:
                        kept = self.head(self.hidden(x, keep=slice(lo, hi))).float()
                ok = kept.shape == full[:, lo:hi].shape
                diff = max(diff, float((kept - full[:, lo:hi]).abs().max()) if ok else math.inf)
        except (TypeError, ValueError, RuntimeError, IndexError) as e:  # a hook we cannot call
            ok, diff = False, math.inf
            if warn:
                warnings.warn(
                    f"{type(self.model).__name__}: {self.kind} view failed ({e!r})", stacklevel=4
                )
        tol = tolerance(model_dtype(self.model))
        ok = ok and diff <= tol * max(1.0, float(full.abs().max()))
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
        max_logits: int = MAX_LOGITS,
    ) -> np.ndarray:
        """NLLs (nats, float64 ``[M]``) of ``targets`` read at positions ``(rows, cols)`` of x;
        ``span = (lo, hi)``, when the caller knows it, bounds the columns: ``lo <= cols < hi``.
        Head output goes in blocks of at most ``max_logits`` elements (:func:`nll_blocks`)."""
        if self.kind == "full":
            logits = call_logits(self.model, x)  # [B, T, V]
            sel = logits[rows, cols]  # [M, V]: only the scored positions go on
            return nll_blocks(
                lambda lo, hi: sel[lo:hi], sel.shape[0], sel.shape[1], targets, max_logits
            )
        if self.keep_logits is not None:
            return self._kept_nlls(x, rows, cols, targets, span, max_logits)
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
        v = out_features(self.head)
        return nll_blocks(lambda lo, hi: self.head(h[lo:hi]), h.shape[0], v, targets, max_logits)

    def _kept_nlls(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        cols: torch.Tensor,
        targets: torch.Tensor,
        span: tuple[int, int] | None,
        max_logits: int,
    ) -> np.ndarray:
        """:meth:`nlls` through the model's own ``logits_to_keep``: the logits of the span
        ``[lo, hi)`` of columns, for as many rows of x per forward pass as keep one block of
        ``[rows, hi - lo, V]`` logits within ``max_logits`` elements (one row at least)."""
        lo, hi = (int(cols.min()), int(cols.max()) + 1) if span is None else span
        assert self.keep_logits is not None
        out = np.empty(rows.shape[0], dtype=np.float64)
        v = getattr(getattr(self.model, "config", None), "vocab_size", None)
        v = v if isinstance(v, int) and v > 0 else 1 << 16  # unknown: a bound that still holds
        step = max(1, max_logits // ((hi - lo) * v))
        B, at = x.shape[0], 0
        while at < B:
            z = self.keep_logits(x[at : at + step], slice(lo, hi))  # [b, hi - lo, V]
            sel = ((rows >= at) & (rows < at + step)).nonzero()[:, 0]
            zz = z[rows[sel] - at, cols[sel] - lo]  # [m, V]: the scored positions only
            got = nll_blocks(
                lambda a, b, zz=zz: zz[a:b], zz.shape[0], zz.shape[1], targets[sel], max_logits
            )
            out[sel.cpu().numpy()] = got
            at += step
        return out


def _takes_keep(hidden: Callable) -> bool:
    """Whether ``hidden`` accepts ``keep=`` (our GPT's: return only a span of positions)."""
    try:
        return "keep" in inspect.signature(hidden).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def out_features(head: nn.Module) -> int:
    """The vocabulary size V of an output head: ``nn.Linear.out_features``, else the first
    dimension of its ``weight`` (a head tied to an embedding), else 65536 (unknown: a block
    bound computed from it still holds at least one row).

    Example: ``out_features(nn.Linear(8, 50))`` -> 50.
    """
    if isinstance(head, nn.Linear):
        return head.out_features
    w = getattr(head, "weight", None)
    return int(w.shape[0]) if isinstance(w, torch.Tensor) else 1 << 16


def nll_blocks(
    logits_of: Callable[[int, int], torch.Tensor],
    m: int,
    v: int,
    targets: torch.Tensor,
    max_logits: int = MAX_LOGITS,
) -> np.ndarray:
    """``-log_softmax(z)[target]`` per row (nats, float64 ``[m]``), where ``logits_of(lo, hi)``
    gives the ``[hi - lo, V]`` logits of rows ``lo .. hi-1``: asked once per row, in blocks of
    ``max(1, max_logits // v)`` rows (``v``: the vocabulary size, the elements of one row).

    (On CPU torch's fused log_softmax is faster than ``logsumexp(z) - z[target]``.) Half
    precision logits are scored in float32. Raises ValueError for a target id ``>= V``.

    Example: zero logits over V = 4 give ``ln 4`` for every row.
    """
    out = np.empty(m, dtype=np.float64)
    step = max(1, max_logits // max(v, 1))
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
        out[lo:hi] = -lp.gather(1, tgt[:, None])[:, 0].double().cpu().numpy()
    return out


def check_max_logits(max_logits: Any) -> None:
    """Raise ValueError unless ``max_logits`` is an int >= 1."""
    if isinstance(max_logits, bool) or not isinstance(max_logits, int) or max_logits < 1:
        raise ValueError(
            f"max_logits: expected an int >= 1 (elements of one block of head output), "
            f"got {max_logits!r}"
        )


@contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Dropout off while scoring an ``nn.Module``; its training flag is restored afterwards.
    Anything else is scored as it is."""
    was_training = isinstance(model, nn.Module) and model.training
    if was_training:
        model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()


def as_ids(ids: Any, name: str = "ids") -> np.ndarray:
    """A 1-d integer numpy view of ``ids`` (a memmap stays a memmap: nothing is loaded).

    Accepts a numpy array, a torch tensor or a list; raises ValueError naming ``name`` for
    another number of dimensions or a non-integer dtype.
    """
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    a = ids if isinstance(ids, np.ndarray) else np.asarray(ids)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d sequence of token ids, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}: expected integer token ids, got dtype {a.dtype}")
    return a
