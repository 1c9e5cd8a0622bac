"""publish_run stores each row's baseline scores beside its own (content-addressed), names them in
``baseline.items``, checks them like the row's own, and a rerun of one entry keeps the others'."""

from __future__ import annotations

import re

import numpy as np
import pytest
from store_helpers import acc_row, make_report

from tinyllm import baselines, metrics
from tinyllm.compare_checks import parse_row
from tinyllm.eval import zoo
from tinyllm.models import bigram
from tinyllm.publish import baseline_items_problem, publish_run
from tinyllm.store import open_store
from tinyllm.tokens import write_tokens

OWN = np.array([1.0, 0.0, 1.0, 1.0])  # mean 0.75
MAJORITY = np.array([1.0, 1.0, 0.0, 1.0])  # mean 0.75: majority label right on 3 of 4


def with_baseline(row: dict, base_items: np.ndarray, name: str = "majority class") -> dict:
    """``row`` with a per-item baseline of ``base_items`` (0/1) and its paired verdict."""
    b = baselines.proportion_baseline(name, base_items)
    row = dict(row, baseline=baselines.baseline_field(b, baselines.items_ref(row["name"])))
    verdict = baselines.paired_verdict(OWN[: base_items.size], base_items, direction="higher")
    return dict(row, beats_baseline=verdict)


def test_baseline_items_are_stored_content_addressed_and_named_by_the_row(tmp_path):
    store = open_store(tmp_path)
    a = with_baseline(acc_row("a", OWN), MAJORITY)
    b = acc_row("b", OWN)  # no baseline: nothing to name
    out = publish_run(
        store,
        "r1",
        make_report("r1", "2026-12-01T18:00:00Z", [a, b]),
        {"a": OWN, "b": OWN},
        baseline_items={"a": MAJORITY},
        run_id="run-1",
    )
    ra, rb = store.read_report("r1")["rows"]
    assert ra["status"] == "ok" and rb["status"] == "ok"
    ref = ra["baseline"]["items"]
    assert re.fullmatch(r"items/a\.baseline-[0-9a-f]{16}\.npy", ref)
    np.testing.assert_array_equal(store.read_items("r1", "a", ref), MAJORITY)
    np.testing.assert_array_equal(store.items_loader("r1")("a"), OWN)
    assert ref != ra["items"]  # a different file than the row's own scores
    assert rb.get("baseline") is None
    assert store.read_run("r1", "run-1")["rows"] == out["report"]["rows"]
    # the same scores again: the same name (content-addressed), the same report
    again = publish_run(
        store,
        "r2",
        make_report("r2", "2026-12-02T18:00:00Z", [a]),
        {"a": OWN},
        baseline_items={"a": MAJORITY},
    )
    assert again["report"]["rows"][0]["baseline"]["items"] == ref
    # a row whose baseline names a file but no scores came with it: null, like its own items
    alone = publish_run(store, "r3", make_report("r3", "2026-12-03T18:00:00Z", [a]), {"a": OWN})
    assert alone["report"]["rows"][0]["baseline"]["items"] is None


@pytest.mark.parametrize(
    ("base_items", "message"),
    [
        (
            np.array([1.0, 1.0, 0.0]),
            "row 'a': baseline 'majority class': expected one per-item score per item of the "
            "row's own (shape (4,)), got shape (3,)",
        ),
        (
            np.array([1.0, 1.0, 1.0, 1.0]),
            "row 'a': baseline 'majority class': expected acc value 1.0 (the mean of its 4 "
            "per-item scores), got 0.75",
        ),
        (
            np.array([1.0, np.inf, 0.0, 1.0]),
            "row 'a': baseline 'majority class': expected finite per-item scores, got 1 that "
            "are not",
        ),
    ],
)
def test_a_row_whose_baseline_disagrees_with_its_scores_is_an_error_row(
    tmp_path, base_items, message
):
    store = open_store(tmp_path)
    a = with_baseline(acc_row("a", OWN), MAJORITY)  # says 0.75: the scores given say otherwise
    run = make_report("r1", "2026-12-01T18:00:00Z", [a, acc_row("b", OWN)])
    publish_run(store, "r1", run, {"a": OWN, "b": OWN}, baseline_items={"a": base_items})
    ra, rb = store.read_report("r1")["rows"]
    assert ra["status"] == "error"
    assert ra["error"] == {"type": "RowItemsMismatchError", "message": message}
    assert ra["items"] is None and ra["baseline"]["items"] is None
    assert rb["status"] == "ok"
    stored = sorted(p.name for p in (tmp_path / "releases/r1/items").iterdir())
    assert [s.split("-")[0] for s in stored] == ["b"]  # nothing of row a is kept


def test_baseline_items_problem_checks_n_without_the_rows_own_and_names_a_missing_field():
    a = parse_row(with_baseline(acc_row("a", OWN), MAJORITY))
    assert baseline_items_problem(a, MAJORITY) is None
    assert baseline_items_problem(a, MAJORITY, OWN) is None
    assert baseline_items_problem(a, MAJORITY[:3]) == (
        "row 'a': baseline 'majority class': expected n = 3 (the number of its per-item "
        "scores), got 4"
    )
    assert baseline_items_problem(parse_row(acc_row("b", OWN)), MAJORITY) == (
        "row 'b': expected a baseline field to name its baseline's scores, got None"
    )
    assert baseline_items_problem(a.model_copy(update={"status": "error"}), MAJORITY[:1]) is None


def test_a_rerun_of_one_entry_keeps_the_other_rows_baseline_items(tmp_path):
    store = open_store(tmp_path)
    a = with_baseline(acc_row("a", OWN), MAJORITY)
    c = with_baseline(acc_row("c", OWN), OWN, name="copy")
    run = make_report("r1", "2026-12-01T18:00:00Z", [a, c])
    first = publish_run(
        store, "r1", run, {"a": OWN, "c": OWN}, baseline_items={"a": MAJORITY, "c": OWN}
    )
    ref_a = first["report"]["rows"][0]["baseline"]["items"]
    other = np.array([0.0, 0.0, 1.0, 1.0])
    c2 = with_baseline(acc_row("c", OWN), other, name="copy")
    rerun = make_report("r1", "2026-12-02T18:00:00Z", [c2])
    out = publish_run(store, "r1", rerun, {"c": OWN}, baseline_items={"c": other})
    ra, rc = out["report"]["rows"]
    assert ra == first["report"]["rows"][0] and ra["baseline"]["items"] == ref_a
    np.testing.assert_array_equal(store.read_items("r1", "a", ref_a), MAJORITY)
    np.testing.assert_array_equal(store.read_items("r1", "c", rc["baseline"]["items"]), other)
    assert rc["baseline"]["items"] != first["report"]["rows"][1]["baseline"]["items"]


def test_a_real_lm_rows_unigram_items_read_back_equal_score_entry_arrays(tmp_path):
    text = np.frombuffer(b"the cat sat on the mat. a dog sat on a log. " * 6, dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", text[:200])
    bigram.save(bigram.train(bigram.Config(k=0.5), text, seed=0), tmp_path / "bigram")
    e = {"name": "bigram", "family": "bigram", "checkpoint": "bigram", "data": "val.tok"}
    manifest = {"suite": "zoo", "entries": [e]}
    row, items, base, units = zoo.score_entry_result(e, seed=1, base_dir=tmp_path)
    assert row["status"] == "ok" and base is not None and base.size == row["n"] == 199
    run = zoo.build_run_report(manifest, [row], seed=1, release="r1")
    store = open_store(tmp_path / "store")
    out = publish_run(
        store,
        "r1",
        run,
        {"bigram": items},
        baseline_items={"bigram": base},
        units={"bigram": units},
    )
    stored = out["report"]["rows"][0]
    assert stored["status"] == "ok"
    back = store.read_items("r1", "bigram", stored["baseline"]["items"])
    assert back.dtype == np.float64
    np.testing.assert_array_equal(back, base)
    # the paired delta and its interval recomputed from the stored arrays (over the stored
    # units: 199 tokens, no boundaries, blocks of 19) are the row's
    stored_units = store.units_loader("r1")("bigram")
    np.testing.assert_array_equal(stored_units, np.arange(199) // 19)
    again = baselines.paired_verdict(
        store.items_loader("r1")("bigram"),
        back,
        direction="lower",
        item_scale=metrics.item_scale(stored["metric"], stored["n"], stored["details"]),
        units=stored_units,
    )
    verdict = stored["beats_baseline"]
    assert again["delta"] == pytest.approx(verdict["delta"], rel=1e-12)
    assert again["interval"] == pytest.approx(verdict["interval"], rel=1e-12)
    assert again["n"] == verdict["n"] == 199


def test_a_row_whose_own_scores_disagree_keeps_no_baseline_scores_either(tmp_path):
    store = open_store(tmp_path)
    bad = with_baseline(acc_row("a", OWN, value=0.5), MAJORITY)  # 0.5 is not the mean of OWN
    err = dict(acc_row("e", OWN), status="error", error={"type": "E", "message": "m"})
    err.update(value=None, lo=None, hi=None, interval=None, n=None, items=None)
    run = make_report("r1", "2026-12-01T18:00:00Z", [bad, err])
    publish_run(store, "r1", run, {"a": OWN}, baseline_items={"a": MAJORITY, "e": MAJORITY})
    ra, re_ = store.read_report("r1")["rows"]
    assert ra["status"] == "error" and ra["error"]["message"].startswith("row 'a': expected acc")
    assert ra["baseline"]["items"] is None
    assert re_["status"] == "error" and re_.get("baseline") is None
    # neither a's baseline scores nor those of a row with no baseline field to name them
    assert not (tmp_path / "releases/r1/items").exists()
