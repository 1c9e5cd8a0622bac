"""The ``mlm`` kind: masked-byte accuracy of a BERT on the val rows of a rows file.

The val rows' sentences (formats/rows.md; other splits are not read) are encoded ``[CLS] bytes``
and masked by :func:`tinyllm.models.encoder.mlm_mask` with ``p = 0.15`` and the 80/10/10 rule, every
draw from the entry's rng (row by row: the same seed gives the same masks and the same row; another
seed other masks). An item is one selected byte position: 1 when the model's argmax byte equals
the original, else 0. The row is the proportion with its Wilson interval; its baseline is the most
frequent byte of the same positions, scored 0/1 on each of them (a paired test).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinyllm import metrics
from tinyllm.baselines import proportion_baseline
from tinyllm.data import read_rows, rows_of_split
from tinyllm.eval.kinds.common import PROPORTION_INTERVAL, Scored, proportion_scored
from tinyllm.report import Entry

KIND = "mlm"
METRIC = metrics.ACC.name
DIRECTION = metrics.ACC.direction
ITEM_SCALE = metrics.ACC.item_scale
MEAN_OF_ITEMS = metrics.ACC.mean_of_items
INTERVAL = PROPORTION_INTERVAL
SPLIT = "val"
MASK_PROB = 0.15


def most_frequent_baseline(targets: np.ndarray) -> dict:
    """The accuracy of always predicting the most frequent value of ``targets`` (ties: the
    smallest): ``{"byte", "acc"}`` with ``acc = count(byte) / len(targets)``.

    This is the best any constant prediction can do on these very positions (it is chosen with
    the answers in view), so it is a strict baseline. Example: targets ``[101, 32, 101]`` ->
    ``{"byte": 101, "acc": 0.6667}`` (unrounded 2/3).
    """
    counts = np.bincount(np.asarray(targets, dtype=np.int64), minlength=256)
    b = int(np.argmax(counts))
    return {"byte": b, "acc": float(counts[b] / max(1, len(targets)))}


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator) -> Scored:
    """Masked-byte accuracy on the val rows of ``data_path``:
    ``acc = (1/N) sum_k [argmax_b logits_k(b) == x_k]`` over the ``N`` positions selected by
    :func:`tinyllm.models.bert.mlm_accuracy` (draws from ``rng``); Wilson 95% interval; items:
    0/1 per selected position, row then position order. Details: ``split``, ``n_rows``,
    ``mask_prob``, ``baseline_most_frequent_byte`` (:func:`most_frequent_baseline` on the same
    positions). Baseline: "most frequent byte", 1 on a position whose original byte is that
    byte, else 0 (the same positions, so the verdict is the paired test).
    """
    from tinyllm.models.bert import mlm_accuracy

    val = rows_of_split(read_rows(data_path), SPLIT, data_path)
    correct, targets = mlm_accuracy(model, [r.sentence for r in val], rng, p=MASK_PROB)
    if correct.size == 0:
        raise ValueError(
            f"{data_path}: expected at least one masked byte in the val rows, got none"
        )
    frequent = most_frequent_baseline(targets)
    details = {
        "split": SPLIT,
        "n_rows": len(val),
        "mask_prob": MASK_PROB,
        "baseline_most_frequent_byte": frequent,
    }
    base_items = np.asarray(targets, dtype=np.int64) == frequent["byte"]
    baseline = proportion_baseline("most frequent byte", base_items, {"byte": frequent["byte"]})
    return proportion_scored(METRIC, correct, details, baseline)
