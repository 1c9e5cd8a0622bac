"""The instrument: strided perplexity, multiple choice, intervals and paired comparison.

This package implements docs/definitions.md, symbols-5 on top of :mod:`tinyllm.stats`:

* :func:`windows` / :func:`iter_windows` -- the strided window arithmetic (docs/definitions.md, strided perplexity);
* :func:`token_nlls` -- the NLL of every token ``1 .. n-1``, each scored exactly once;
* :func:`summarize_nlls` / :func:`eval_ppl` -- mean NLL, perplexity and bits per byte, each with
  its Student t interval (docs/definitions.md, intervals);
* :func:`choice_lls` / :func:`score_choices` / :func:`run_task` -- multiple choice by
  log-likelihood, ``acc`` and ``acc_norm`` with an interval over units (docs/definitions.md, multiple choice, 4);
* :func:`compare` -- the paired comparison of two runs on the same items, over units
  (delta, interval, sign-flip p, mde; docs/definitions.md, "Paired tests").

A *model* is anything callable as ``model(ids[None])`` returning logits ``[1, T, V]``, a tuple
whose first item is those logits, or an object with ``.logits`` (Hugging Face outputs). The
instrument reads a model through duck-typed hooks, and where the model offers them the output
head and the log-softmax are computed only at the positions that are scored
(:class:`tinyllm.logits.Head`): our GPT offers ``model.hidden(idx) -> [B, T, D]`` (with
``keep=slice``: its last block only at the scored span of each window), ``model.lm_head`` and
``model.hidden_cached`` (a KV cache). A Hugging Face causal LM is read through the views of
:func:`tinyllm.models.hf.views`: a ``GPT2LMHeadModel`` run by our GPT on views of its own
weights (both hooks and a KV cache), then its base model's hidden states and its own cache.
Every hook is checked once against the model's own logits on a few tokens; if they disagree (a
model that rescales or caps its logits after the head) the next one or the full logits are
used, with a warning. Multiple choice is scored from a KV cache only after the cache
reproduced the plain forward pass on a probe (:func:`cache_verdicts`; ``cache="off"`` skips
it).

All NLLs are in nats, float64; bits per byte divide by ``ln 2`` and by the byte count.

Layers: the window arithmetic and the strided runner (:mod:`tinyllm.windows`) and the scoring
head (:mod:`tinyllm.logits`) sit below the model families, which score their own strided
windows with them; this package sits above the families, and no family imports it.

One concept per module, each importing only those above it in this list:

* :mod:`~tinyllm.eval.lm.heads` -- the views of a model the head may use, a family's own NLLs
  (:class:`FamilyLM`), the log-probabilities of one sequence;
* :mod:`~tinyllm.eval.lm.ppl` -- per-token NLLs and their summary (docs/definitions.md, strided perplexity, 4);
* :mod:`~tinyllm.eval.lm.scoring` -- multiple-choice requests, the plain and the cached passes;
* :mod:`~tinyllm.eval.lm.kvcache` -- the cache engines and their check;
* :mod:`~tinyllm.eval.lm.choices` -- ``LL(c)`` of every choice (docs/definitions.md, multiple choice);
* :mod:`~tinyllm.eval.lm.tasks` -- task files, predictions, accuracy with its interval;
* :mod:`~tinyllm.eval.lm.paired` -- the paired comparison (docs/definitions.md, paired tests).
"""

from tinyllm.eval.lm.choices import (
    CACHE_MODES,
    DEFAULT_MC_TOKEN_BUDGET,
    choice_lls,
    model_ctx_len,
    score_choices,
)
from tinyllm.eval.lm.heads import FamilyLM, log_probs
from tinyllm.eval.lm.kvcache import cache_verdicts
from tinyllm.eval.lm.paired import compare
from tinyllm.eval.lm.ppl import eval_ppl, summarize_nlls, token_nlls
from tinyllm.eval.lm.tasks import METRICS, Result, item_predictions, read_task, run_task
from tinyllm.logits import MAX_LOGITS
from tinyllm.windows import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_TOKEN_BUDGET,
    default_batch_size,
    iter_windows,
    windows,
)

__all__ = [
    "CACHE_MODES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MC_TOKEN_BUDGET",
    "DEFAULT_TOKEN_BUDGET",
    "MAX_LOGITS",
    "METRICS",
    "FamilyLM",
    "Result",
    "cache_verdicts",
    "choice_lls",
    "compare",
    "default_batch_size",
    "eval_ppl",
    "item_predictions",
    "iter_windows",
    "log_probs",
    "model_ctx_len",
    "read_task",
    "run_task",
    "score_choices",
    "summarize_nlls",
    "token_nlls",
    "windows",
]
