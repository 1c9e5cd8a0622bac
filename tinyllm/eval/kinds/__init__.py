"""One scorer per kind (docs/definitions.md, the zoo), one module per kind, the same names in each:

* ``KIND``: the kind it scores (a family's ``KIND``; ``"classifier"`` for configs with ``tl_head``;
  ``"lmeval"`` for a manifest entry that names it as its ``kind``, an lm checkpoint);
* ``METRIC``: the metric it reports (the row's ``metric``), with that metric's facts from
  :mod:`tinyllm.metrics`: ``DIRECTION`` (``"lower"`` or ``"higher"`` is better), ``ITEM_SCALE``
  (what the mean of the per-item scores is multiplied by to give the value's unit) and
  ``MEAN_OF_ITEMS`` (whether the value is that mean);
* ``INTERVAL``: how its rows' ``lo``/``hi`` are computed (the row's ``interval``);
* ``score(entry, model, data_path, rng) -> Scored``: the metric with its 95% interval and the
  per-item scores (:class:`tinyllm.eval.kinds.common.Scored`). ``rng`` is the entry's own
  generator (:func:`tinyllm.eval.zoo.entry_rng`): every random draw comes from it.

``KIND_MODULES`` is the only list of them; :data:`SCORERS` and :data:`METRIC_OF_KIND` are built
from it. Adding a kind: write the module, add it to that list.
"""

from __future__ import annotations

from tinyllm.eval.kinds import classifier, embeddings, lm, mlm, rtd
from tinyllm.eval.kinds import lmeval as lmeval_kind
from tinyllm.eval.kinds import seq2seq as seq2seq_kind
from tinyllm.eval.kinds.common import Scored, proportion_scored

KIND_MODULES = (lm, seq2seq_kind, classifier, mlm, rtd, embeddings, lmeval_kind)

SCORERS = {m.KIND: m.score for m in KIND_MODULES}
"""kind -> scoring function. A kind without one is reported as a skipped row."""

METRIC_OF_KIND = {m.KIND: m.METRIC for m in KIND_MODULES}
"""kind -> the metric it reports (docs/definitions.md, the zoo); bpb lower is better, the rest higher."""

__all__ = ["KIND_MODULES", "METRIC_OF_KIND", "SCORERS", "Scored", "proportion_scored"]
