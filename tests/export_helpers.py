"""A store of two releases for the export and tracker tests: an lm row over document units, an
accuracy row with a per-item baseline (each item its own unit), and an error row."""

from __future__ import annotations

import math

import numpy as np
from store_helpers import acc_row, make_report

from tinyllm import baselines
from tinyllm.publish import publish_run
from tinyllm.store import open_store

LN2 = math.log(2.0)
DOCS, PER_DOC = 5, 8
DOC_OF = np.repeat(np.arange(DOCS), PER_DOC)
CORRECT = np.array([1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
MAJORITY = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0])


def lm_row(nll: np.ndarray) -> dict:
    """An lm row whose value is its per-token NLLs' bpb, over DOCS documents."""
    value = float(np.mean(nll)) / LN2
    row = acc_row("gpt", np.ones(2), kind="lm", family="gpt", metric="bpb")
    row.update(value=value, lo=value - 0.1, hi=value + 0.1, n=int(nll.size))
    row.update(interval="cluster_ratio", n_units=DOCS, units=None, details={"tokenizer": "byte"})
    return row


def acc_with_baseline(correct: np.ndarray) -> dict:
    b = baselines.proportion_baseline("majority class", MAJORITY)
    row = acc_row("cls", correct, n_units=int(correct.size))
    row["baseline"] = baselines.baseline_field(b, baselines.items_ref("cls"))
    row["beats_baseline"] = baselines.paired_verdict(correct, MAJORITY, direction="higher")
    return row


def two_releases(root) -> tuple[object, dict]:
    """A local store at ``root`` with releases r1 and r2 (r2 compared with r1); returns the store
    and r2's arrays by entry: ``{"gpt": nll, "cls": correct}``."""
    store = open_store(root)
    rng = np.random.default_rng(0)
    nll1 = rng.gamma(4.0, 0.5, DOCS * PER_DOC)
    nll2 = nll1 - 0.25 + rng.normal(0.0, 0.01, nll1.size)
    for release, day, nll in (("r1", "01", nll1), ("r2", "02", nll2)):
        bad = acc_row("broken", CORRECT, value=0.5)  # not its items' mean: an error row
        rows = [lm_row(nll), acc_with_baseline(CORRECT), bad]
        publish_run(
            store,
            release,
            make_report(release, f"2026-12-{day}T00:00:00Z", rows),
            {"gpt": nll, "cls": CORRECT, "broken": CORRECT},
            baseline_items={"cls": MAJORITY},
            units={"gpt": DOC_OF},
            seed=0,
        )
    return store, {"gpt": nll2, "cls": CORRECT}
