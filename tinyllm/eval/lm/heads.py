"""Per-token NLLs from a model: its logits, and the output head only where tokens are scored.

A *model* is anything callable as ``model(ids[None])`` returning logits ``[1, T, V]``, a tuple
whose first item is those logits, or an object with ``.logits`` (Hugging Face outputs)
(:func:`call_logits`). :class:`Head` computes the head and the log-softmax only at the scored
positions when the model lets it (our GPT's ``hidden`` + ``lm_head``; a Hugging Face causal LM's
``base_model`` + ``get_output_embeddings()``; a ``GPT2LMHeadModel`` through
:func:`hf_gpt2_twin`), each hook checked once against the model's own logits. Head output goes
in row blocks of at most ``max_logits`` elements (:func:`nll_blocks`).

The Hugging Face pieces (:func:`hf_hidden`, :func:`hf_gpt2_twin`) sit together at the end and
use nothing else of this module.
"""

from __future__ import annotations

import inspect
import math
import sys
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

MAX_LOGITS = 1 << 26
"""Default bound on the elements of one ``[rows, V]`` block of head output (256 MB in float32);
a block holds one row at least. The ``max_logits`` argument of the scoring functions."""

VERIFY_LEN = 16
"""Tokens (of one row) on which a head-only hook is checked against the model's full logits."""

VERIFY_TOL = 1e-4
"""Tolerance of every check of a faster path against the plain one: a hook's logits within
``VERIFY_TOL * max(1, max |logit|)``, a cached log-likelihood within
``VERIFY_TOL * max(1, |LL|)``."""

_VERIFIED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {hook: agrees?}


@dataclass(frozen=True)
class FamilyLM:
    """An lm family's model seen through the family's own ``token_nlls(model, ids)``.

    Count-based families (bigram, n-gram) have no logits to call; wrapping them lets
    :func:`~tinyllm.eval.lm.score_choices` and :func:`~tinyllm.eval.lm.run_task` read a
    choice's log-likelihood from the family's per-token NLLs instead:
    ``LL(c) = -sum(token_nlls(context + c)[len(context) - 1:])``.
    """

    model: Any
    token_nlls: Callable[[Any, np.ndarray], np.ndarray]


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


class Head:
    """Per-token NLLs from a model, computing the head only at scored positions when it can.

    ``nlls(x, rows, cols, targets)`` returns ``-ln p(targets[i] | x[rows[i], :cols[i]+1])`` for
    every i, float64. Four ways to get there, the first that agrees with the model's logits
    (``kind``):

    * ``hook`` -- our GPT: ``model.lm_head(model.hidden(x))`` on the selected rows only (with
      ``keep``, the last block runs only at the span of columns the caller scores);
    * ``twin`` -- a Hugging Face ``GPT2LMHeadModel`` through :func:`hf_gpt2_twin`, as ``hook``;
    * ``hf`` -- a Hugging Face causal LM: ``model.get_output_embeddings()`` applied to the
      selected rows of ``model.base_model(x).last_hidden_state``;
    * ``full`` -- anything else: the full logits of ``model(x)``, rows selected afterwards.

    A hook is used only after it reproduced the model's own logits on the first
    :data:`VERIFY_LEN` tokens of ``probe``'s first row (within :data:`VERIFY_TOL` of
    ``max(1, max |logit|)``; checked once per model, remembered while the model lives); the
    last hook to fail says so in a warning.

    Example: ``Head(gpt.Model(gpt.Config()), ids[None]).kind`` -> ``"hook"``.
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
                hooks.append(("hf", lambda ids: hf_hidden(base, ids), head))
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
        x = probe[:1, :VERIFY_LEN]
        with torch.inference_mode():
            full = call_logits(self.model, x).float()
            mine = self.head(self.hidden(x)).float()
        ok = mine.shape == full.shape
        diff = float((mine - full).abs().max()) if ok else math.inf
        if ok and self.keep and x.shape[1] >= 3:  # the kept span alone, as nlls() asks for it
            lo, hi = x.shape[1] // 2, x.shape[1] - 1
            with torch.inference_mode():
                kept = self.head(self.hidden(x, keep=slice(lo, hi))).float()
            ok = kept.shape == full[:, lo:hi].shape
            diff = max(diff, float((kept - full[:, lo:hi]).abs().max()) if ok else math.inf)
        ok = ok and diff <= VERIFY_TOL * max(1.0, float(full.abs().max()))
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
        out[lo:hi] = -lp.gather(1, tgt[:, None])[:, 0].double().numpy()
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
    """Dropout off while scoring; the caller's training flag is restored afterwards (the
    wrapped module of a :class:`FamilyLM`)."""
    m = model.model if isinstance(model, FamilyLM) else model
    was_training = isinstance(m, nn.Module) and m.training
    if was_training:
        m.eval()
    try:
        yield
    finally:
        if was_training:
            m.train()


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


def log_probs(model: Callable, ids: Any) -> torch.Tensor:
    """Log-probabilities ``log_softmax(model(ids[None]))[0]`` of one sequence, ``[T, V]`` float32.

    Row j is ``ln p(. | x_0 .. x_j)``: the distribution of token ``j + 1``. Computed from the full
    logits under ``torch.inference_mode()``.

    Example: for a model whose logits are all zero, every entry is ``-ln V``.
    """
    a = as_ids(ids)
    if a.size < 1:
        raise ValueError("ids: expected at least 1 token, got 0")
    x = torch.from_numpy(np.asarray(a, dtype=np.int64))[None]  # [1, T]
    with eval_mode(model), torch.inference_mode():
        return torch.log_softmax(call_logits(model, x)[0].float(), dim=-1)


# ---------------------------------------------------------------------------------------------
# Hugging Face models


_TWINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # HF model -> (weights, twin)


def hf_hidden(base: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Last hidden state ``[B, T, D]`` (after the final norm) of a Hugging Face base model, run
    without a KV cache; a base model whose forward takes no ``use_cache`` is called without it.
    """
    try:
        out = base(input_ids=ids, use_cache=False)
    except TypeError:  # a base model without a cache argument
        out = base(input_ids=ids)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


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
    the model's own logits (:class:`Head`, :func:`tinyllm.eval.lm.kvcache.cache_engine`), else
    they fall back to the model itself.

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
    # imported at first use: tinyllm.models.gpt imports this package for its token_nlls
    from tinyllm.models import gpt

    try:
        twin = gpt.load_hf_gpt2(model, share=True)
    except (ValueError, TypeError, KeyError, RuntimeError):  # a variant we do not implement
        twin = None
    with suppress(TypeError):
        _TWINS[model] = (key, twin)
    return twin
