"""The ``rtd`` kind: replaced-token detection accuracy of an ELECTRA on the val rows of a rows file.

The val rows' sentences (formats/rows.md; other splits are not read) are encoded ``[CLS] bytes``;
:func:`tinyllm.models.electra.rtd_accuracy` masks ~15% of the byte positions, lets the generator
fill them by sampling (every draw from the entry's rng) and asks the discriminator which bytes were
replaced. Counted tokens: every byte of every val row (CLS and PAD never); a sampled byte equal to
the original counts as original. An item is one counted token: 1 when the discriminator's call
(logit > 0 = replaced) is right. The row is the proportion with its Wilson interval; its details
carry the "always original" baseline on the same tokens and the paired permutation test of the
model against it (is the discriminator better than calling every byte original?); the row's
baseline is that one, its per-token items ``1 - r_t`` stored beside the row's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinyllm import metrics, stats
from tinyllm.baselines import proportion_baseline
from tinyllm.data import read_rows, rows_of_split
from tinyllm.eval.kinds.common import PROPORTION_INTERVAL, Scored, proportion_scored
from tinyllm.report import Entry

KIND = "rtd"
METRIC = metrics.ACC.name
DIRECTION = metrics.ACC.direction
ITEM_SCALE = metrics.ACC.item_scale
MEAN_OF_ITEMS = metrics.ACC.mean_of_items
INTERVAL = PROPORTION_INTERVAL
SPLIT = "val"


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator) -> Scored:
    """RTD accuracy on the val rows of ``data_path``: ``acc = (1/N) sum_t [pred_t == r_t]`` over
    the ``N`` counted tokens, ``r_t`` = 1 when token t was replaced by a different byte; Wilson
    95% interval; items 0/1 per token, row then position order. Details: ``split``, ``n_rows``,
    ``n_masked``, ``n_replaced``, ``baseline_always_original`` (``1 - n_replaced / N``, the
    accuracy of calling every token original), ``p_vs_always_original`` (two-sided paired
    sign-flip permutation test, :func:`tinyllm.stats.paired_permutation_test` with 10,000 signs
    from the entry's rng, of the items against the baseline's items ``1 - r_t`` on the same
    tokens), ``generator_acc`` (the generator's argmax at the masked positions equals the
    original byte, a fraction of ``n_masked``). Baseline: "always original", its items
    ``1 - r_t`` (the row's verdict is the paired test on them).
    """
    from tinyllm.models.electra import rtd_accuracy

    val = rows_of_split(read_rows(data_path), SPLIT, data_path)
    r = rtd_accuracy(model, [x.sentence for x in val], rng)
    n = int(r["correct"].size)
    if n == 0:
        raise ValueError(f"{data_path}: expected at least one byte in the val rows, got none")
    n_replaced = int(r["replaced"].sum())
    # the baseline's item on token t: 1 when t was not replaced ("original" is then right)
    always_original = 1.0 - np.asarray(r["replaced"], dtype=np.float64)
    p = stats.paired_permutation_test(r["correct"], always_original, rng=rng)
    details = {
        "split": SPLIT,
        "n_rows": len(val),
        "n_masked": int(r["masked"].sum()),
        "n_replaced": n_replaced,
        "baseline_always_original": 1.0 - n_replaced / n,
        "p_vs_always_original": p,
        "generator_acc": float(r["gen_correct"].mean()) if r["gen_correct"].size else None,
    }
    baseline = proportion_baseline("always original", always_original)
    return proportion_scored(METRIC, r["correct"], details, baseline)
