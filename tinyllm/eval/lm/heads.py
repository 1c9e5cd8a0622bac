"""How the instrument reads a model: the views it offers the scoring head, a family's own NLLs,
and the log-probabilities of one sequence.

A *model* is anything callable as ``model(ids[None])`` returning logits ``[1, T, V]``, a tuple
whose first item is those logits, or an object with ``.logits`` (Hugging Face outputs). The
head and the log-softmax are computed only at the scored positions when a view of the model
offers ``hidden`` + ``lm_head`` (:class:`tinyllm.logits.Head`, which checks each view against
the model's own logits once): :func:`views` gives the model itself when it offers them (our
GPT), else a Hugging Face causal LM's views (:func:`tinyllm.models.hf.views`: a
``GPT2LMHeadModel`` run by our GPT on its own weights, then its base model's hidden states).
The instrument asks the model for these hooks; no family imports the instrument.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tinyllm.device import model_device
from tinyllm.logits import as_ids, call_logits, eval_mode, has_head_hooks
from tinyllm.models import hf


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


def views(model: Any) -> list[tuple[str, Any]]:
    """The ``(kind, view)`` pairs :class:`tinyllm.logits.Head` tries for ``model``, in order:
    ``[("hook", model)]`` when the model offers ``hidden`` + ``lm_head`` itself (our GPT),
    else a Hugging Face causal LM's (:func:`tinyllm.models.hf.views`: ``"twin"``, ``"hf"``);
    ``[]`` for any other model (scored from its full logits).

    Example: ``views(gpt.Model(gpt.Config()))[0][0]`` -> ``"hook"``.
    """
    if has_head_hooks(model):
        return [("hook", model)]
    return hf.views(model)


def log_probs(model: Callable, ids: Any) -> torch.Tensor:
    """Log-probabilities ``log_softmax(model(ids[None]))[0]`` of one sequence, ``[T, V]`` float32.

    Row j is ``ln p(. | x_0 .. x_j)``: the distribution of token ``j + 1``. Computed from the full
    logits under ``torch.inference_mode()``, on the model's device, returned on the CPU.

    Example: for a model whose logits are all zero, every entry is ``-ln V``.
    """
    a = as_ids(ids)
    if a.size < 1:
        raise ValueError("ids: expected at least 1 token, got 0")
    x = torch.from_numpy(np.asarray(a, dtype=np.int64))[None].to(model_device(model))  # [1, T]
    with eval_mode(model), torch.inference_mode():
        return torch.log_softmax(call_logits(model, x)[0].float(), dim=-1).cpu()
