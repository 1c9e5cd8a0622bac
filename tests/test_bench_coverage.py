"""bench/bench_coverage.py on few draws (docs/definitions.md, "Calibration"): its table has a row
for every interval kind, its coverages and error rates sit in a loose band around what the full
run reports (docs/benchmarks.md), and its fast path (per-unit sums passed as one item per unit,
the item-level t interval from sums of squares, the null made by shifting sums) computes what
the item-level calls of ``tinyllm.stats`` compute, draw for draw.

The GPT and the 2.3 MB head500 corpus are left out to keep this to seconds.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_coverage as bc  # noqa: E402

from tinyllm import stats  # noqa: E402

SAMPLES = 100


@pytest.fixture(scope="module")
def pops():
    return bc.populations(0, 0, ("lee", "polarity", "mc", "cldr"))


@pytest.fixture(scope="module")
def res(pops):
    return bc.simulate(pops, SAMPLES, seed=0, log=lambda *a: None)


def test_every_interval_kind_has_rows(res):
    kinds = {(r["kind"], r["method"]) for r in res["values"]}
    assert kinds == {
        ("bpb", "cluster_ratio"),
        ("byte accuracy", "cluster_ratio"),
        ("acc", "wilson"),
        ("acc", "cluster_bootstrap"),
        ("acc", "cluster_ratio"),
        ("exact match", "wilson"),
    }
    assert {r["kind"] for r in res["paired"]} == {"bpb", "byte accuracy", "acc", "exact match"}
    lee = [r for r in res["values"] if r["corpus"].startswith("lee (293")]
    assert [(r["model"], r["n"], r["unit"]) for r in lee] == [
        ("bigram", 29, "document"),
        ("ngram", 29, "document"),
    ]


def test_the_table_holds_every_row_between_its_markers(res):
    text = bc.markdown(res, "python bench/bench_coverage.py", 0, SAMPLES, "test")
    assert text.startswith(bc.SECTION + "\n\n" + bc.BEGIN)
    assert text.rstrip().endswith(bc.END)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 2 + len(res["values"]) + len(res["paired"])  # two headers
    assert all(line.count("|") == 9 for line in rows[: 1 + len(res["values"])])
    assert all(line.count("|") == 11 for line in rows[1 + len(res["values"]) :])
    r = res["values"][0]
    assert f"| {r['value']:.4f} | cluster_ratio | {bc._bar(r['cover'], bc.COVER_BAR)} |" in text
    missed = bc.misses(res)
    assert ("Bars: all met" in text) == (not missed)
    assert all(m in text for m in missed)


def test_a_figure_outside_its_bar_is_marked_and_listed():
    assert bc._bar(0.95, bc.COVER_BAR) == "0.950"
    assert bc._bar(0.98, bc.COVER_BAR) == "**0.980** (missed)"
    assert bc._bar(0.02, bc.FPR_BAR) == "**0.020** (missed)"
    row = {"kind": "bpb", "corpus": "c", "model": "m", "method": "cluster_ratio", "cover": 0.92}
    pair = {"kind": "bpb", "corpus": "c", "pair": "a - b", "cover": 0.95, "fpr": 0.08}
    assert bc.misses({"values": [row], "paired": [pair]}) == [
        "bpb, c, m, cluster_ratio: 0.920",
        "bpb, c, a - b: false-positive rate 0.080",
    ]


def test_coverage_and_error_rates_sit_in_a_loose_band(res):
    for r in res["values"]:
        assert 0.85 <= r["cover"] <= 1.0, r
    for r in res["paired"]:
        assert 0.85 <= r["cover"] <= 1.0, r
        assert r["fpr"] <= 0.12, r
    by = {(r["corpus"][:3], r["kind"], r["model"]): r for r in res["values"]}
    # the token-level interval of the lee n-gram covers well under half the time (0.41 at 2,000)
    assert by[("lee", "bpb", "ngram")]["cover_items"] < 0.7
    lee = next(r for r in res["paired"] if r["corpus"].startswith("lee (293"))
    assert lee["fpr_items"] > 0.3  # the t test over tokens calls the null (0.61 at 2,000)
    assert all(r["cover_items"] is None for r in res["values"] if r["method"] == "wilson")


def test_population_values_are_what_the_rows_say(pops, res):
    cldr = next(p for p in pops if p.metric == "exact match")
    from tinyllm import data

    pairs = data.cldr_names_pairs()
    copy = next(r for r in res["values"] if r["model"] == "copy")
    assert copy["value"] == sum(s == t for s, t in pairs) / len(pairs)
    assert cldr.N.size == len(pairs)
    lee = pops[0]
    assert lee.N.size == 293 and int(lee.N.sum()) == lee.items["bigram"].size
    bpb = next(r for r in res["values"] if r["model"] == "bigram")["value"]
    assert bpb == pytest.approx(math.fsum(lee.items["bigram"]) / lee.N.sum() / math.log(2))


def test_the_fast_path_equals_the_item_level_calls(pops):
    """value_row and paired_row over 15 draws of the lee documents, against loops that gather
    each draw's per-token NLLs and call tinyllm.stats on them (the null: every token of A minus
    the population difference)."""
    pop = pops[0]
    idx = bc.draws(pop.N.size, 29, 15, np.random.default_rng(5))
    a, b = pop.items["ngram"], pop.items["bigram"]
    truth_a = math.fsum(a) / a.size
    delta = (math.fsum(a) - math.fsum(b)) / a.size
    cover = cover_iid = hits = flips = t_calls = iid_calls = 0
    rng = np.random.default_rng(7)
    for row in idx:
        units = stats.units_from_lengths(pop.N[row].astype(np.int64).tolist())
        xa, xb = bc._gather(pop, "ngram", row), bc._gather(pop, "bigram", row)
        iv = stats.cluster_ratio(xa, units)
        cover += iv.lo <= truth_a <= iv.hi
        iid = stats.iid(xa)
        cover_iid += iid.lo <= truth_a <= iid.hi
        kw = {"kind": "ratio", "n_perm": bc.N_PERM}
        r = stats.paired_difference(xa, xb, units, rng, **kw)
        hits += r.lo <= delta <= r.hi
        r0 = stats.paired_difference(xa - delta, xb, units, rng, **kw)
        flips += r0.p < 0.05
        t_calls += not r0.lo <= 0 <= r0.hi
        null = stats.mean_ci(xa - delta - xb)
        iid_calls += not null.lo <= 0 <= null.hi
    row = bc.value_row(pop, "ngram", stats.Method.CLUSTER_RATIO, idx, None)
    assert (row["cover"], row["cover_items"]) == (cover / 15, cover_iid / 15)
    got = bc.paired_row(pop, "ngram", "bigram", idx, np.random.default_rng(7))
    assert got["cover"] == hits / 15
    assert got["fpr"] == flips / 15 and got["fpr_t"] == t_calls / 15
    assert got["fpr_items"] == iid_calls / 15
    assert got["delta"] == pytest.approx(delta / math.log(2))
    assert cover_iid < cover  # tokens of one document are not independent draws
