"""The ``mlm`` kind: masked-byte accuracy of a BERT on the val rows of a rows file.

The val rows' sentences (formats/rows.md; other splits are not read) are encoded ``[CLS] bytes``
and masked by :func:`tinyllm.models.encoder.mlm_mask` with ``p = 0.15`` and the 80/10/10 rule, every
draw from the entry's rng (row by row: the same seed gives the same masks and the same row; another
seed other masks). An item is one selected byte position: 1 when the model's argmax byte equals
the original, else 0. The unit is the row (docs/definitions.md, "Units"): the positions of one
sentence share its difficulty, so the interval is the cluster-robust ratio estimator over rows
(:func:`tinyllm.eval.kinds.common.proportion_scored`), the item-level Wilson interval kept as the
row's ``iid_interval``. Its baseline is the most frequent byte of the same positions, scored 0/1 on
each of them (a paired test over the same rows).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from tinyllm import metrics
from tinyllm.baselines import proportion_baseline
from tinyllm.eval.kinds.common import (
    CLUSTERED_PROPORTION_INTERVAL,
    PROPORTION_INTERVAL,
    SPLIT,
    Kind,
    Scored,
    check_row_units,
    options_model,
    proportion_scored,
    val_sentences,
)
from tinyllm.models import bert
from tinyllm.report import Entry

KIND = "mlm"
METRIC = metrics.ACC.name
INTERVAL = CLUSTERED_PROPORTION_INTERVAL
MASK_PROB = 0.15

Options = options_model(KIND)
"""The mlm kind reads no entry option."""


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


def selected_rows(
    sentences: list[str], max_len: int, rng: np.random.Generator, targets
) -> np.ndarray:
    """The val row (0-based) of each position :func:`tinyllm.models.bert.mlm_accuracy` selects
    with ``rng``, in its order (row, then position): the masks of a copy of ``rng`` taken before
    that call (:func:`tinyllm.models.bert.mask_rows`, the same draws), checked against the
    returned ``targets`` (the same positions hold the same bytes).

    Example: rows whose masks select 2, 0 and 3 positions -> ``[0, 0, 2, 2, 2]``.
    """
    rows = bert.encode_rows(sentences, max_len)
    _, sel = bert.mask_rows(rows, rng, MASK_PROB)
    units = np.repeat(np.arange(len(rows), dtype=np.int64), sel.sum(axis=1))
    if units.size != len(targets) or not np.array_equal(rows[sel], targets):
        raise ValueError(
            f"mlm units: expected the masks of the entry's rng to select the {len(targets)} "
            f"scored positions, got {units.size} other positions"
        )
    return units


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator, opts: Options) -> Scored:
    """Masked-byte accuracy on the val rows of ``data_path``:
    ``acc = (1/N) sum_k [argmax_b logits_k(b) == x_k]`` over the ``N`` positions selected by
    :func:`tinyllm.models.bert.mlm_accuracy` (draws from ``rng``); items: 0/1 per selected
    position, row then position order; units: the row of each position
    (:func:`selected_rows`). Interval: the cluster-robust ratio estimator over the rows,
    ``S_g`` the row's right positions, ``N_g`` its selected positions, t with G - 1 df
    (``iid_interval``: Wilson over the positions). Details: ``split``, ``n_rows``,
    ``mask_prob``, ``baseline_most_frequent_byte`` (:func:`most_frequent_baseline` on the same
    positions). Baseline: "most frequent byte", 1 on a position whose original byte is that
    byte, else 0 (the same positions, so the verdict is the paired test over the same rows).

    Raises ValueError naming the file when no byte is masked, or when the masked bytes lie in
    one row only (an interval over rows needs two).
    """
    sentences = val_sentences(data_path)
    probe = copy.deepcopy(rng)  # the same draws mlm_accuracy takes: which row each position is in
    correct, targets = bert.mlm_accuracy(model, sentences, rng, p=MASK_PROB)
    if correct.size == 0:
        raise ValueError(
            f"{data_path}: expected at least one masked byte in the val rows, got none"
        )
    units = selected_rows(sentences, model.cfg.max_len, probe, targets)
    check_row_units(units, len(sentences), "masked bytes", data_path)
    frequent = most_frequent_baseline(targets)
    details = {
        "split": SPLIT,
        "n_rows": len(sentences),
        "mask_prob": MASK_PROB,
        "baseline_most_frequent_byte": frequent,
    }
    base_items = np.asarray(targets, dtype=np.int64) == frequent["byte"]
    baseline = proportion_baseline("most frequent byte", base_items, {"byte": frequent["byte"]})
    return proportion_scored(METRIC, correct, details, baseline, units=units)


DEFINITION = Kind(
    KIND, METRIC, INTERVAL, score, options=Options, also=((METRIC, PROPORTION_INTERVAL),)
)
"""The mlm kind (:class:`tinyllm.eval.kinds.common.Kind`): Wilson's interval when every row
holds one masked byte."""
