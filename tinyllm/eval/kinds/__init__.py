"""One scorer per kind (docs/definitions.md, the zoo), one module per kind, each defining its kind
once as ``DEFINITION``, a :class:`~tinyllm.eval.kinds.common.Kind`: its name, its metric (whose
direction and scale :mod:`tinyllm.metrics` holds), its interval estimator by registry name with
its options, the model of the entry options it reads (built by
:func:`~tinyllm.eval.kinds.common.options_model`), and its scorer
``score(entry, model, data_path, rng, opts) -> Scored``. The module's ``KIND``, ``METRIC``,
``INTERVAL`` and ``Options`` are the names its own code uses for those fields.

``KIND_MODULES`` is the only list of them and :data:`KINDS` their one table; :data:`SCORERS`
and :data:`METRIC_OF_KIND` are views of it, and the report schema's ``kind`` enum (which
:data:`tinyllm.report.KINDS` reads) is written from it by :func:`write_report_schema`. Adding a
kind: write the module with its ``DEFINITION``, add it to that list, run
``python -c "from tinyllm.eval.kinds import write_report_schema; write_report_schema()"``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from tinyllm import report
from tinyllm.eval.kinds import classifier, embeddings, lm, mlm, rtd
from tinyllm.eval.kinds import lmeval as lmeval_kind
from tinyllm.eval.kinds import seq2seq as seq2seq_kind
from tinyllm.eval.kinds.common import Kind, Scored, proportion_scored

KIND_MODULES = (lm, seq2seq_kind, classifier, mlm, rtd, embeddings, lmeval_kind)

KINDS: Mapping[str, Kind] = MappingProxyType(
    {m.DEFINITION.name: m.DEFINITION for m in KIND_MODULES}
)
"""kind name -> its :class:`~tinyllm.eval.kinds.common.Kind`, in the order of the report
schema's kinds (read-only)."""

SCORERS = {name: k.score for name, k in KINDS.items()}
"""kind -> scoring function. A kind without one is reported as a skipped row."""

METRIC_OF_KIND = {name: k.metric for name, k in KINDS.items()}
"""kind -> the metric it reports (docs/definitions.md, the zoo); bpb lower is better, the rest higher."""


def write_report_schema(path: str | os.PathLike = report.REPORT_SCHEMA_PATH) -> Path:
    """(Re)write ``tinyllm/schemas/eval-results.schema.json`` with the names of :data:`KINDS`
    (:func:`tinyllm.report.write_report_schema`); a test checks the committed file is current."""
    return report.write_report_schema(tuple(KINDS), path)


__all__ = [
    "KINDS",
    "KIND_MODULES",
    "METRIC_OF_KIND",
    "SCORERS",
    "Kind",
    "Scored",
    "proportion_scored",
    "write_report_schema",
]
