"""The ``classifier`` kind: accuracy of a sentence classifier on the val rows of a rows file.

Any checkpoint whose config has ``tl_head`` (SPEC.md section 6). The data is a rows file
(formats/rows.md); ONLY its ``val`` rows are scored (rows of every other split, "train" among them,
are never read by the scorer), each 1 when the model's label (:func:`tinyllm.models.classifier.
predict`) equals the row's label, else 0. The row is the proportion with its Wilson interval
(:func:`tinyllm.eval.kinds.common.proportion_scored`); its details carry the majority-class
baseline on the same val rows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from tinyllm import metrics
from tinyllm.data import read_rows, rows_of_split
from tinyllm.eval.kinds.common import PROPORTION_INTERVAL, Scored, proportion_scored
from tinyllm.report import Entry

KIND = "classifier"
METRIC = metrics.ACC.name
DIRECTION = metrics.ACC.direction
ITEM_SCALE = metrics.ACC.item_scale
MEAN_OF_ITEMS = metrics.ACC.mean_of_items
INTERVAL = PROPORTION_INTERVAL
SPLIT = "val"


def majority_baseline(labels: list[str]) -> dict:
    """The accuracy of always predicting the most frequent label of ``labels`` (ties: the label
    that sorts first): ``{"label", "acc", "n"}`` with ``acc = count(label) / n``.

    Example: ``majority_baseline(["a", "b", "b"])`` -> ``{"label": "b", "acc": 0.6667, "n": 3}``
    (acc unrounded: 2/3).
    """
    counts = Counter(labels)
    label = min(counts, key=lambda y: (-counts[y], y))
    return {"label": label, "acc": counts[label] / len(labels), "n": len(labels)}


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator) -> Scored:
    """Accuracy on the val rows of ``data_path``: ``acc = (1/n) sum_i [predict(s_i) == y_i]``
    over the ``n`` val rows, Wilson 95% interval, per-row 0/1 items in file order. Deterministic:
    ``rng`` is not used. Details: ``split``, ``n_rows_other_splits`` (read, not scored),
    ``baseline_majority`` (:func:`majority_baseline` of the val labels), ``labels`` (the model's),
    ``unknown_labels`` (val labels the model cannot predict, each scored 0).
    """
    from tinyllm.models.classifier import predict

    if entry.options.split not in (None, SPLIT):
        raise ValueError(
            f"entry {entry.name!r}: expected options.split {SPLIT!r} (classifier rows are scored "
            f"on val only), got {entry.options.split!r}"
        )
    rows = read_rows(data_path)
    val = rows_of_split(rows, SPLIT, data_path)
    truth = [r.label for r in val]
    pred = predict(model, [r.sentence for r in val])
    correct = np.array([p == y for p, y in zip(pred, truth, strict=True)], dtype=np.float64)
    details = {
        "split": SPLIT,
        "n_rows_other_splits": len(rows) - len(val),
        "baseline_majority": majority_baseline(truth),
        "labels": list(model.labels),
        "unknown_labels": sorted(set(truth) - set(model.labels)),
    }
    return proportion_scored(METRIC, correct, details)
