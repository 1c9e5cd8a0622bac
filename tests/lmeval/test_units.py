"""Sampling units on the lm-eval path (docs/definitions.md, "Units", "Intervals"): a document
field as each document's cluster (``cluster_key``), every metric's interval over the units
(Wilson for 0/1 scores of single documents, else the cluster bootstrap; a corpus metric's ratio
resampled by units), groups resampling units within each task, and the one-line errors naming
the task and the field.

Oracles: the worked example of docs/definitions.md's cluster_bootstrap (0.75 in (0.5, 1.0)),
tinyllm.stats.cluster_bootstrap on the task's own stream (the registry's estimator, with a
ratio statistic for the corpus metrics), the Wilson interval, and the exact messages.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tinyllm import stats
from tinyllm.eval.lmeval import intervals
from tinyllm.eval.lmeval.intervals import (
    as_interval,
    document_units,
    group_summary,
    summarize,
    task_rng,
)


def _samples(metric: str, values, passages=None, **extra) -> list[dict]:
    out = []
    for i, v in enumerate(values):
        doc = {"question": f"q{i}", **({} if passages is None else {"passage": passages[i]})}
        out.append({"doc_id": i, "filter": "none", "doc": doc, metric: v, **extra})
    return out


def test_the_definitions_worked_example_over_two_passages():
    """Documents [0, 1] on passage p1 and [1, 1] on p2: every resample is two of the passage
    means 0.5 and 1.0, so the interval is (0.5, 1.0) whatever the stream; without the cluster
    key it is the Wilson interval of 3 of 4."""
    samples = _samples("acc", [0.0, 1.0, 1.0, 1.0], ["p1", "p1", "p2", "p2"])
    for seed in (0, 1, 2):
        got = summarize(samples, {"acc,none": 0.75}, task_rng(seed, "t"), 500,
                        cluster_key="passage", task="t")  # fmt: skip
        m = got["metrics"]["acc,none"]
        assert (m["value"], m["lo"], m["hi"], m["interval"]) == (
            0.75,
            0.5,
            1.0,
            "cluster_bootstrap",
        )
        assert (m["n"], m["n_units"]) == (4, 2) and m["warning"].startswith("only 2 units")
        w = stats.wilson_interval(3, 4)
        assert m["iid_interval"] == {"lo": w.lo, "hi": w.hi, "method": "wilson"}
        assert (got["cluster_key"], got["units"], got["n_units"]) == (
            "passage", ["p1", "p1", "p2", "p2"], 2,
        )  # fmt: skip
    plain = summarize(samples, {"acc,none": 0.75}, task_rng(0, "t"), 500)
    m = plain["metrics"]["acc,none"]
    w = stats.wilson_interval(3, 4)
    assert (m["lo"], m["hi"], m["interval"], m["n_units"], m["iid_interval"]) == (
        w.lo, w.hi, "wilson", 4, None,
    )  # fmt: skip
    assert (plain["cluster_key"], plain["units"], plain["n_units"]) == (None, None, 4)


def test_clustered_means_are_the_registry_bootstrap_on_the_tasks_stream():
    """40 documents in 10 passages of 4, acc and acc_norm: each interval is
    tinyllm.stats.cluster_bootstrap of the scores over the passages, the two metrics drawn one
    after the other from the stream of (seed, task); a passage whose documents all score alike
    makes the clustered interval wider than Wilson over documents."""
    acc = np.repeat([1, 0, 1, 1, 0, 1, 0, 0, 1, 1], 4).astype(float)
    acc[[3, 4, 21]] = 1 - acc[[3, 4, 21]]
    norm = np.roll(acc, 3)
    passages = [f"p{i // 4}" for i in range(40)]
    samples = _samples("acc", acc, passages)
    for s, v in zip(samples, norm, strict=True):
        s["acc_norm"] = v
    results = {"acc,none": acc.mean(), "acc_norm,none": norm.mean()}
    got = summarize(samples, results, task_rng(5, "arc"), 300, cluster_key="passage", task="arc")
    rng = task_rng(5, "arc")
    units = np.arange(40) // 4
    for key, x in (("acc,none", acc), ("acc_norm,none", norm)):
        want = stats.cluster_bootstrap(x, units, rng, n_boot=300)
        m = got["metrics"][key]
        assert (m["lo"], m["hi"], m["se"], m["n_units"]) == (want.lo, want.hi, want.se, 10)
    m = got["metrics"]["acc,none"]
    assert (m["hi"] - m["lo"]) > (m["iid_interval"]["hi"] - m["iid_interval"]["lo"])


def _ratio(rows):
    return rows[:, 0].sum() / rows[:, 1].sum()


@pytest.mark.parametrize("batch", [intervals.BATCH_INDICES, 7])
def test_corpus_metrics_resample_units_as_the_registry_bootstrap_does(monkeypatch, batch):
    """bits_per_byte ([LL, bytes] per document) and perplexity (one LL per document) over 12
    documents in 4 clusters: the resampled ratio sum LL / sum weight is
    tinyllm.stats.cluster_bootstrap of the (LL, weight) rows with that statistic, draw for draw
    (also when the draws come in batches of rows), its ends mapped to the metric; over
    documents it is another, narrower interval."""
    monkeypatch.setattr(intervals, "BATCH_INDICES", batch)
    ll = np.array([-10, -12, -11, -30, -33, -29, -5, -6, -4, -20, -18, -22], dtype=float)
    w = np.array([4, 5, 4, 8, 9, 8, 3, 3, 2, 6, 6, 7], dtype=float)
    clusters = [c for c in "aaabbbcccddd"]
    units = np.repeat(np.arange(4), 3)
    cases = {
        "bits_per_byte": (
            [list(p) for p in zip(ll, w, strict=True)],
            w,
            lambda r: -r / math.log(2),
        ),
        "perplexity": (ll.tolist(), np.ones(12), lambda r: math.exp(-r)),
    }
    for metric, (items, weights, to_metric) in cases.items():
        samples = _samples(metric, items, clusters)
        key = f"{metric},none"
        value = to_metric(ll.sum() / weights.sum())
        m = summarize(samples, {key: value}, np.random.default_rng(9), 400,
                      cluster_key="passage", task="t")["metrics"][key]  # fmt: skip
        rows = np.column_stack([ll, weights])
        iv = stats.cluster_bootstrap(rows, units, np.random.default_rng(9), statistic=_ratio,
                                     n_boot=400)  # fmt: skip
        lo, hi = sorted((to_metric(iv.lo), to_metric(iv.hi)))
        assert (m["interval"], m["n"], m["n_units"]) == ("cluster_bootstrap", 12, 4), metric
        assert (m["lo"], m["hi"]) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
        assert m["se"] is None and m["lo"] < value < m["hi"]
        docs = summarize(samples, {key: value}, np.random.default_rng(9), 400)["metrics"][key]
        assert (docs["interval"], docs["n_units"]) == ("cluster_bootstrap", 12)
        assert docs["hi"] - docs["lo"] < m["hi"] - m["lo"], metric


def test_a_group_resamples_each_tasks_units_within_the_task():
    """Two tasks of 0/1 scores weighted by size: Wilson on the pooled documents when every
    unit is one document, the bootstrap of the weighted mean over each task's clusters when
    they hold several (the first task's draws, then the second's, from the group's stream)."""
    a = np.array([1, 1, 0, 0, 1, 1, 0, 0], dtype=float)
    b = np.array([1, 0, 1, 1, 1, 1], dtype=float)
    ua, ub = np.arange(8) // 2, np.arange(6) // 3
    plain = group_summary(0.5, [{"items": a, "aggregation": "mean"},
                                {"items": b, "aggregation": "mean"}], True,
                          np.random.default_rng(0), 100)  # fmt: skip
    w = stats.wilson_interval(9, 14)
    assert (plain["lo"], plain["hi"], plain["interval"], plain["n_units"]) == (w.lo, w.hi,
                                                                                "wilson", 14)  # fmt: skip
    leaves = [{"items": a, "aggregation": "mean", "units": ua},
              {"items": b, "aggregation": "mean", "units": ub}]  # fmt: skip
    got = group_summary(9 / 14, leaves, True, np.random.default_rng(4), 300)
    rng = np.random.default_rng(4)
    da = rng.integers(0, 4, size=(300, 4))
    db = rng.integers(0, 2, size=(300, 2))
    ra = np.bincount(ua, a)[da].sum(1) / np.bincount(ua)[da].sum(1)
    rb = np.bincount(ub, b)[db].sum(1) / np.bincount(ub)[db].sum(1)
    lo, hi = np.quantile((8 * ra + 6 * rb) / 14, [0.025, 0.975])
    assert (got["interval"], got["n"], got["n_units"]) == ("cluster_bootstrap", 14, 6)
    assert (got["lo"], got["hi"]) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    assert got["warning"].startswith("only 6 units")


def test_an_old_entrys_bootstrap_reads_as_the_cluster_bootstrap():
    old = {"value": 0.5, "lo": 0.3, "hi": 0.7, "interval": "bootstrap", "n": 20}
    iv = as_interval(old)
    assert (iv.method, iv.n_units, iv.df, iv.se, iv.warning) == ("cluster_bootstrap", 20, 19,
                                                                  None, "")  # fmt: skip
    new = {"value": 0.5, "lo": 0.3, "hi": 0.7, "interval": "wilson", "n": 20, "n_units": 20,
           "se": 0.11, "warning": None}  # fmt: skip
    assert as_interval(new) == stats.Interval(0.5, 0.3, 0.7, "wilson", 20, None, 0.11, "")


def test_a_document_without_the_field_names_the_task_and_the_field():
    samples = _samples("acc", [1.0, 0.0, 1.0], ["p1", "p1", "p2"])
    del samples[1]["doc"]["passage"]
    with pytest.raises(ValueError) as e:
        document_units(samples, [0, 1, 2], "passage", "arc_easy")
    assert str(e.value) == (
        "task 'arc_easy': cluster key 'passage': expected the field in every document, got none "
        "in doc_id 1 (its fields: ['question'])"
    )
    samples[1]["doc"]["passage"] = None  # a JSON dataset's document without the column
    with pytest.raises(ValueError, match="expected the field in every document, got none in doc_"):
        document_units(samples, [0, 1, 2], "passage", "arc_easy")


@pytest.mark.parametrize("bad", [1.5, True, ["p"], {"id": 1}])
def test_a_field_of_another_type_names_the_task_and_the_field(bad):
    samples = _samples("acc", [1.0, 0.0, 1.0], ["p1", bad, "p2"])
    with pytest.raises(ValueError) as e:
        summarize(samples, {"acc,none": 2 / 3}, task_rng(0, "t"), 10, cluster_key="passage",
                  task="copa")  # fmt: skip
    assert str(e.value) == (
        f"task 'copa': cluster key 'passage': expected a string or an integer in every "
        f"document, got {bad!r} in doc_id 1"
    )


def test_one_cluster_for_every_document_names_the_task_and_the_field():
    samples = _samples("acc", [1.0, 0.0, 1.0], [7, 7, 7])
    with pytest.raises(ValueError) as e:
        document_units(samples, [0, 1, 2], "passage", "copa")
    assert str(e.value) == (
        "task 'copa': cluster key 'passage': expected at least 2 units (an interval over units "
        "needs their spread), got 1 (7) holding all 3 documents"
    )


def test_integer_and_string_clusters_in_any_order():
    samples = _samples("acc", [1.0, 0.0, 1.0, 0.0], [3, "3", 3, 8])
    labels, units = document_units(samples, [0, 1, 2, 3], "passage", "t")
    assert labels == [3, "3", 3, 8] and units.tolist() == [0, 1, 0, 2]
