"""The ``classifier`` kind: accuracy of a sentence classifier on rows it was not trained on.

Any checkpoint whose config has ``tl_head`` (docs/definitions.md, the zoo). The data is a rows file
(formats/rows.md). A plain checkpoint scores ONLY the file's ``val`` rows (rows of every other
split, "train" among them, are never scored); a cross-fitted checkpoint (k classifiers, one per
fold, :mod:`tinyllm.models.classifier`) scores every row, each by the classifier trained without
that row's fold. Each scored row is 1 when the predicted label equals the row's label, else 0.
The row is the proportion with its Wilson interval
(:func:`tinyllm.eval.kinds.common.proportion_scored`); its details carry the majority class of
the scored labels, and its baseline is the majority class of the training labels (each scored row
against the majority of the rows its classifier was trained on), 0/1 on the same rows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from tinyllm import metrics
from tinyllm.baselines import Baseline, proportion_baseline
from tinyllm.data import Row, read_rows, rows_of_split
from tinyllm.eval.kinds.common import (
    PROPORTION_INTERVAL,
    Kind,
    Scored,
    options_model,
    proportion_scored,
)
from tinyllm.models import classifier as classifier_model
from tinyllm.report import Entry

KIND = "classifier"
METRIC = metrics.ACC.name
INTERVAL = PROPORTION_INTERVAL
SPLIT = "val"

Options = options_model(KIND, "split")
"""The entry options the classifier kind reads: ``split``, which may only name :data:`SPLIT`
(the split a plain checkpoint scores)."""


def majority_baseline(labels: list[str]) -> dict:
    """The accuracy of always predicting the most frequent label of ``labels`` (ties: the label
    that sorts first): ``{"label", "acc", "n"}`` with ``acc = count(label) / n``.

    Example: ``majority_baseline(["a", "b", "b"])`` -> ``{"label": "b", "acc": 0.6667, "n": 3}``
    (acc unrounded: 2/3).
    """
    counts = Counter(labels)
    label = min(counts, key=lambda y: (-counts[y], y))
    return {"label": label, "acc": counts[label] / len(labels), "n": len(labels)}


TRAIN_SPLIT = "train"


def training_majority_baseline(rows: list[Row], scored: list[Row], by: list[int]) -> Baseline:
    """The "majority class" baseline: each scored row ``i`` is predicted the majority label
    (:func:`majority_baseline`) of the training rows of its classifier ``by[i]``, 1 when that is
    its label, else 0.

    Training rows: a plain checkpoint (every ``by[i] == 0`` and no row has a fold) the file's
    ``train`` rows; a cross-fitted one the file's rows outside fold ``j`` for classifier ``j``.
    A plain file without train rows falls back to the scored labels' majority (an optimistic
    baseline, said in ``details.fit_on``).

    Example: train labels a, a, b and val labels a, b -> majority "a", items [1, 0], value 0.5.
    """
    cross_fit = len(set(by)) > 1
    majority: dict[int, str] = {}
    fallback = False
    for j in sorted(set(by)):
        if cross_fit:
            train = [r.label for r in rows if r.fold != j]
        else:
            train = [r.label for r in rows if r.split == TRAIN_SPLIT]
        fallback = fallback or not train
        majority[j] = majority_baseline(train or [r.label for r in scored])["label"]
    items = [majority[c] == r.label for r, c in zip(scored, by, strict=True)]
    details = {
        "label": majority[by[0]] if not cross_fit else {str(j): y for j, y in majority.items()},
        "fit_on": "scored rows (no training rows in the file)" if fallback else "training rows",
    }
    return proportion_baseline("majority class", np.array(items, dtype=np.float64), details)


def _scored_rows(model, rows: list[Row], data_path: Path) -> tuple[str, list[Row], list[int]]:
    """(scoring, rows scored, classifier of each): "val" (the val rows, classifier 0) for a
    plain checkpoint; "cross-fit" (every row, each by the classifier of its fold) for one of k
    folds, whose rows file must give every row a fold 0..k-1."""
    k = model.n_folds
    if k == 1:
        val = rows_of_split(rows, SPLIT, data_path)
        return SPLIT, val, [0] * len(val)
    for i, r in enumerate(rows, 1):
        if r.fold is None or r.fold >= k:
            raise ValueError(
                f"{data_path}: expected a fold 0..{k - 1} on every row (the checkpoint is "
                f"cross-fitted on {k} folds), got {r.fold!r} on row {i}"
            )
    return "cross-fit", rows, [r.fold for r in rows]


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator, opts: Options) -> Scored:
    """Accuracy ``acc = (1/n) sum_i [predict_{c(i)}(s_i) == y_i]`` over the ``n`` scored rows of
    ``data_path``, Wilson 95% interval, per-row 0/1 items in file order. Deterministic: ``rng``
    is not used.

    Which rows, by which classifier ``c(i)``: a plain checkpoint scores the val rows only
    (:func:`tinyllm.models.classifier.predict`); a cross-fitted one (k classifiers, classifier
    ``j`` trained on the rows outside fold ``j``) scores every row of the file, each by the
    classifier of its ``fold``, so that each row is predicted by a model trained without it.

    Details: ``scoring`` ("val" or "cross-fit"), ``split`` (val scoring) or ``folds`` (per fold:
    n and acc), ``val_acc`` (cross-fit: classifier 0 on the val rows, what a val-only row would
    be), ``n_rows_other_splits`` (read, not scored), ``n_seen_in_training`` (scored rows whose
    sentence is among their classifier's training rows; None when the checkpoint records no
    ``trained_on``), ``baseline_majority`` (:func:`majority_baseline` of the scored labels),
    ``labels`` (the model's), ``unknown_labels`` (scored labels the model cannot predict, each
    scored 0), ``checkpoint`` (what the checkpoint holds and which classifier ``predict`` uses).
    Baseline: :func:`training_majority_baseline` on the same rows.
    """
    if opts.split not in (None, SPLIT):
        raise ValueError(
            f"entry {entry.name!r}: expected options.split {SPLIT!r} (classifier rows are scored "
            f"on val only), got {opts.split!r}"
        )
    rows = read_rows(data_path)
    scoring, scored, by = _scored_rows(model, rows, data_path)
    pred: list[str | None] = [None] * len(scored)
    for j in sorted(set(by)):
        at = [i for i, c in enumerate(by) if c == j]
        got = classifier_model.predict(model.fold_model(j), [scored[i].sentence for i in at])
        for i, p in zip(at, got, strict=True):
            pred[i] = p
    truth = [r.label for r in scored]
    correct = np.array([p == y for p, y in zip(pred, truth, strict=True)], dtype=np.float64)
    seen = None
    if model.trained_on is not None:
        digests = [classifier_model.sentence_digest(r.sentence) for r in scored]
        seen = sum(d in model.trained_on[c] for d, c in zip(digests, by, strict=True))
    details: dict = {"scoring": scoring}
    if scoring == SPLIT:
        details["split"] = SPLIT
        details["checkpoint"] = "one classifier; it scores the val rows"
    else:
        k = model.n_folds
        details["folds"] = [
            {"fold": j, "n": by.count(j), "acc": float(correct[np.array(by) == j].mean())}
            for j in range(k)
        ]
        val = np.array([r.split == SPLIT and c == 0 for r, c in zip(scored, by, strict=True)])
        details["val_acc"] = float(correct[val].mean()) if val.any() else None
        details["checkpoint"] = (
            f"{k} classifiers: classifier j is trained on the rows outside fold j and scores "
            "fold j; classifier 0 (trained outside fold 0, the val rows) is the one predict uses"
        )
    details |= {
        "n_rows_other_splits": len(rows) - len(scored),
        "n_seen_in_training": seen,
        "baseline_majority": majority_baseline(truth),
        "labels": list(model.labels),
        "unknown_labels": sorted(set(truth) - set(model.labels)),
    }
    baseline = training_majority_baseline(rows, scored, by)
    return proportion_scored(METRIC, correct, details, baseline)


DEFINITION = Kind(KIND, METRIC, INTERVAL, score, options=Options)
"""The classifier kind (:class:`tinyllm.eval.kinds.common.Kind`)."""
