"""The ``rtd`` kind: replaced-token detection accuracy of an ELECTRA on the val rows of a rows file.

The val rows' sentences (formats/rows.md; other splits are not read) are encoded ``[CLS] bytes``;
:func:`tinyllm.models.electra.rtd_accuracy` masks ~15% of the byte positions, lets the generator
fill them by sampling (every draw from the entry's rng) and asks the discriminator which bytes were
replaced. Counted tokens: every byte of every val row (CLS and PAD never); a sampled byte equal to
the original counts as original. An item is one counted token: 1 when the discriminator's call
(logit > 0 = replaced) is right. The unit is the row (docs/definitions.md, "Units"): the row is
the proportion with the cluster-robust ratio interval over rows, the item-level Wilson interval
kept as its ``iid_interval``; its details carry the "always original" baseline on the same tokens
and the paired test of the model against it over the rows (is the discriminator better than
calling every byte original?); the row's baseline is that one, its per-token items ``1 - r_t``
stored beside the row's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinyllm import metrics, stats
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
from tinyllm.models import electra
from tinyllm.report import Entry
from tinyllm.tokens import N_BYTES

KIND = "rtd"
METRIC = metrics.ACC.name
INTERVAL = CLUSTERED_PROPORTION_INTERVAL

Options = options_model(KIND)
"""The rtd kind reads no entry option."""


def counted_rows(sentences: list[str], max_len: int) -> np.ndarray:
    """The val row (0-based) of each counted token, in row then position order: every byte of
    each ``[CLS] bytes`` row cut to ``max_len`` (:func:`tinyllm.models.electra.encode_rows`).

    Example: rows of 3, 1 and 2 bytes -> ``[0, 0, 0, 1, 2, 2]``.
    """
    rows = electra.encode_rows(sentences, max_len)
    counts = (rows < N_BYTES).sum(axis=1)
    return np.repeat(np.arange(len(rows), dtype=np.int64), counts)


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator, opts: Options) -> Scored:
    """RTD accuracy on the val rows of ``data_path``: ``acc = (1/N) sum_t [pred_t == r_t]`` over
    the ``N`` counted tokens, ``r_t`` = 1 when token t was replaced by a different byte; items 0/1
    per token, row then position order; units: the row of each token (:func:`counted_rows`).
    Interval: the cluster-robust ratio estimator over rows, t with G - 1 df (``iid_interval``:
    Wilson over the tokens). Details: ``split``, ``n_rows``, ``n_masked``, ``n_replaced``,
    ``baseline_always_original`` (``1 - n_replaced / N``, the accuracy of calling every token
    original), ``p_vs_always_original`` (two-sided sign-flip test over the rows of the paired
    difference with the baseline's items ``1 - r_t`` on the same tokens,
    :func:`tinyllm.stats.paired_difference` of kind ``ratio`` with 10,000 signs from the
    entry's rng), ``generator_acc`` (the generator's argmax at the masked positions equals the
    original byte, a fraction of ``n_masked``). Baseline: "always original", its items
    ``1 - r_t`` (the row's verdict is the paired test on them).

    Raises ValueError naming the file for val rows without a byte, or with one row only (an
    interval over rows needs two).
    """
    sentences = val_sentences(data_path)
    r = electra.rtd_accuracy(model, sentences, rng)
    n = int(r["correct"].size)
    if n == 0:
        raise ValueError(f"{data_path}: expected at least one byte in the val rows, got none")
    units = counted_rows(sentences, model.cfg.max_len)
    if units.size != n:
        raise ValueError(f"rtd units: expected one row per counted token ({n}), got {units.size}")
    check_row_units(units, len(sentences), "bytes", data_path)
    n_replaced = int(r["replaced"].sum())
    # the baseline's item on token t: 1 when t was not replaced ("original" is then right)
    always_original = 1.0 - np.asarray(r["replaced"], dtype=np.float64)
    p = stats.paired_difference(r["correct"], always_original, units, rng, kind="ratio").p
    details = {
        "split": SPLIT,
        "n_rows": len(sentences),
        "n_masked": int(r["masked"].sum()),
        "n_replaced": n_replaced,
        "baseline_always_original": 1.0 - n_replaced / n,
        "p_vs_always_original": p,
        "generator_acc": float(r["gen_correct"].mean()) if r["gen_correct"].size else None,
    }
    baseline = proportion_baseline("always original", always_original)
    return proportion_scored(METRIC, r["correct"], details, baseline, units=units)


DEFINITION = Kind(
    KIND, METRIC, INTERVAL, score, options=Options, also=((METRIC, PROPORTION_INTERVAL),)
)
"""The rtd kind (:class:`tinyllm.eval.kinds.common.Kind`): Wilson's interval when every row
holds one byte."""
