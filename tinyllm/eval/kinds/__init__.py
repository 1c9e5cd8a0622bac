"""One scorer per kind (SPEC.md section 6), one module per kind, the same names in each:

* ``KIND``: the kind it scores (a family's ``KIND``; ``"classifier"`` for configs with ``tl_head``);
* ``METRIC``: the metric it reports (the row's ``metric``);
* ``score(entry, model, data_path, rng) -> Scored``: the metric with its 95% interval and the
  per-item scores (:class:`tinyllm.eval.kinds.common.Scored`). ``rng`` is the entry's own
  generator (:func:`tinyllm.eval.zoo.entry_rng`): every random draw comes from it.

``KIND_MODULES`` is the only list of them; :data:`SCORERS` and :data:`METRIC_OF_KIND` are built
from it. Adding a kind: write the module, add it to that list.
"""

from __future__ import annotations

from tinyllm.eval.kinds import classifier, embeddings, lm, mlm, rtd
from tinyllm.eval.kinds import seq2seq as seq2seq_kind
from tinyllm.eval.kinds.common import Scored, proportion_scored

KIND_MODULES = (lm, seq2seq_kind, classifier, mlm, rtd, embeddings)

SCORERS = {m.KIND: m.score for m in KIND_MODULES}
"""kind -> scoring function. A kind without one is reported as a skipped row."""

__all__ = ["KIND_MODULES", "SCORERS", "Scored", "proportion_scored"]
