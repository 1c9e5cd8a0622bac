"""The baseline of a release already in the history whose comparison cannot be read
(tinyllm/store/base.py, Store.baseline_release, rule 3): the release before it in the
history, None for the first."""

from __future__ import annotations

import shutil

import numpy as np
from store_helpers import acc_row, make_report

from tinyllm.publish import publish_run
from tinyllm.store import open_store


def report(release: str, day: int, rows: list[dict]) -> dict:
    return make_report(release, f"2026-11-{day:02d}T18:00:00Z", rows)


def test_without_its_comparison_a_release_falls_back_to_the_one_before_it(tmp_path):
    store = open_store(tmp_path)
    for day, release in enumerate(("v1", "v2", "v3"), start=1):
        items = {"a": (np.random.default_rng(day).random(30) < 0.5).astype(np.float64)}
        publish_run(store, release, report(release, day, [acc_row("a", items["a"])]), items)
    folder = tmp_path / "releases" / "v2"
    (folder / "compare.json").unlink(missing_ok=True)
    shutil.rmtree(folder / "compares", ignore_errors=True)
    assert store.baseline_release("v2") == "v1"  # rule 3: the one before it
    assert store.baseline_release("v3") == "v2"  # rule 2: what its comparison names
    assert store.baseline_release("v1") is None  # the first has none before it
