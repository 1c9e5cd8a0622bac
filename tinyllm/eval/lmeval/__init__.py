"""tinyllm as an lm-evaluation-harness backend.

* :mod:`~tinyllm.eval.lmeval.backend` -- :class:`~tinyllm.eval.lmeval.backend.TinyLLM`, an
  ``lm_eval.api.model.LM`` registered as ``tinyllm``: lm-eval's requests scored by our engine
  (``loglikelihood`` from the KV-cached multiple-choice path, ``loglikelihood_rolling`` on
  lm-eval's own windows or our strided ones, ``generate_until`` greedy from a KV cache);
* :mod:`~tinyllm.eval.lmeval.generate` -- batched greedy generation with stop strings;
* :mod:`~tinyllm.eval.lmeval.run` -- :func:`~tinyllm.eval.lmeval.run.evaluate`: tasks from lm-eval's
  TaskManager (each built once, handed to ``simple_evaluate`` built), every metric with its 95%
  interval and n, per-document scores kept, group aggregates;
* :mod:`~tinyllm.eval.lmeval.intervals` -- each metric's interval in its own units by its
  aggregation, over the task's units (each document, or the clusters of a ``cluster_key``
  field), group aggregates weighted as lm-eval weights them, one rng stream per task;
* :mod:`~tinyllm.eval.lmeval.guards` -- data never fetched (offline unless the user says),
  task YAMLs and data files checked before lm-eval opens them, ``num_fewshot`` bounded;
* :mod:`~tinyllm.eval.lmeval.task_files` -- a task YAML's includes and data files resolved
  as lm-eval resolves them, inside the places it may read (the zoo's kind and the CLI);
* :mod:`~tinyllm.eval.lmeval.demo_task` -- the demo zoo's cloze task (HellaSwag's schema, the
  lee text), its paths relative to its folder and to ``lm_eval/tasks``.

lm-eval is an optional dependency (the ``lmeval`` extra): importing this package does not import
it; the submodules that need it raise :class:`MissingLmEvalError` naming the extra.
"""

from __future__ import annotations

import importlib

from tinyllm.models.hf_checks import LOADING

EXTRA_HINT = "pip install 'tinyllm[lmeval]' (lm_eval[hf]==0.4.13)"


class MissingLmEvalError(ImportError):
    """lm-evaluation-harness is not installed: the message names the extra that brings it."""


def require_lm_eval() -> None:
    """Raise :class:`MissingLmEvalError` unless ``lm_eval`` can be imported.

    The import holds the lock of every transformers load (:data:`tinyllm.models.hf_checks.LOADING`):
    lm-eval imports transformers, whose lazy imports are not thread-safe, so an lmeval entry and
    a Hugging Face entry starting together in the flow's threads must not import it at once."""
    try:
        with LOADING:
            importlib.import_module("lm_eval")
    except ImportError as e:
        raise MissingLmEvalError(
            f"lm_eval: expected lm-evaluation-harness to be installed ({EXTRA_HINT}), got {e}"
        ) from None
