"""compare on word-vector rows (tinyllm/compare.py, "Coverage" and "Correlation rows"): Spearman
rows tested pair by pair on the pairs both releases cover, analogy (acc) rows on the questions
both cover, and the reasons when they cannot be."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps
from store_helpers import acc_row

from tinyllm import compare as cm
from tinyllm import compare_render
from tinyllm.compare_checks import parse_row, row_items_problem
from tinyllm.stats import paired_permutation_test, spearman_difference_ci


def rho_row(name: str, cos: np.ndarray, human: np.ndarray, **kw) -> dict:
    """A Spearman row as the embeddings kind writes it: value = rho of the covered pairs, n their
    count (store_helpers.acc_row's fields otherwise)."""
    cov = ~np.isnan(cos)
    value = float(sps.spearmanr(cos[cov], human[cov]).statistic)
    base = dict(family="word2vec", kind="embeddings", metric="spearman", value=value)
    base |= dict(lo=max(-1.0, value - 0.1), hi=min(1.0, value + 0.1), interval="fisher_z")
    base["details"] = {"human_scores": human.tolist()}
    return acc_row(name, np.zeros(int(cov.sum()))) | base | kw


def report(release: str, rows: list[dict]) -> dict:
    return {"release": release, "created_at": None, "rows": rows}


def compare_one(prev_row, cur_row, prev_items, cur_items, **kw) -> dict:
    cmp = cm.compare_reports(
        report("r1", [prev_row]),
        report("r2", [cur_row]),
        lambda name: prev_items,
        lambda name: cur_items,
        **kw,
    )
    cm.validate_compare(cmp.to_json())
    return cmp.rows[0]


@pytest.fixture(scope="module")
def pairs():
    """80 pairs: human scores, a good model's cosines (little noise), a poor model's (much)."""
    rng = np.random.default_rng(11)
    human = np.round(rng.uniform(0, 10, 80), 2)
    good = human / 10 + 0.05 * rng.normal(size=80)
    poor = human / 10 + 0.6 * rng.normal(size=80)
    return human, good, poor


def test_a_clearly_better_release_is_improved_with_its_interval_above_zero(pairs):
    human, good, poor = pairs
    r = compare_one(rho_row("w", poor, human), rho_row("w", good, human), poor, good)
    rho_good = sps.spearmanr(good, human).statistic
    rho_poor = sps.spearmanr(poor, human).statistic
    assert r.verdict == "improved" and r.reason is None
    assert r.delta == pytest.approx(rho_good - rho_poor, abs=1e-12)
    assert r.delta == r.current_value - r.previous_value  # the same pairs covered
    assert 0 < r.lo < r.delta < r.hi
    assert r.p == 1 / 10_001 and r.n == 80
    # the interval is the paired bootstrap over units (each pair one) drawn from
    # default_rng(seed) with N_BOOT resamples: the pairs' bootstrap, to the last bits
    ci = spearman_difference_ci(good, poor, human, np.random.default_rng(0), n_boot=cm.N_BOOT)
    assert (r.lo, r.hi) == pytest.approx((ci.lo, ci.hi), rel=1e-12)
    assert (r.method, r.n_units) == ("paired_bootstrap", 80)
    back = compare_one(rho_row("w", good, human), rho_row("w", poor, human), good, poor)
    assert back.verdict == "regressed" and back.hi < 0


def test_identical_releases_are_unchanged_with_p_one_and_delta_zero(pairs):
    human, good, _ = pairs
    row = rho_row("w", good, human)
    r = compare_one(row, row, good, good)
    assert r.verdict == "unchanged"
    assert (r.p, r.delta, r.lo, r.hi, r.n) == (1.0, 0.0, 0.0, 0.0, 80)


def test_only_the_pairs_both_releases_cover_are_compared(pairs):
    human, good, poor = pairs
    prev, cur = poor.copy(), good.copy()
    prev[:10] = np.nan  # the previous vocabulary misses 10 pairs
    cur[70:] = np.nan  # the current one 10 others
    r = compare_one(rho_row("w", prev, human), rho_row("w", cur, human), prev, cur)
    both = slice(10, 70)
    want = (
        sps.spearmanr(good[both], human[both]).statistic
        - sps.spearmanr(poor[both], human[both]).statistic
    )
    assert r.n == 60 and r.delta == pytest.approx(want, abs=1e-12)
    assert r.delta != pytest.approx(r.current_value - r.previous_value, abs=1e-6)
    assert r.verdict == "improved"


def test_disjoint_or_too_small_coverage_is_not_comparable_and_says_why(pairs):
    human, good, poor = pairs
    prev, cur = poor.copy(), good.copy()
    prev[40:] = np.nan
    cur[:40] = np.nan
    r = compare_one(rho_row("w", prev, human), rho_row("w", cur, human), prev, cur)
    assert (r.verdict, r.reason) == (
        "not comparable",
        "no pair covered by both releases (the previous covers 40 of 80, the current 40 of 80, "
        "none in common)",
    )
    assert r.p is None and r.delta is None
    cur[37:40] = good[37:40]  # three pairs in common
    r = compare_one(rho_row("w", prev, human), rho_row("w", cur, human), prev, cur)
    assert r.reason == "fewer than 4 pairs covered by both releases (3 of 80)"


def test_human_scores_must_be_there_and_agree(pairs):
    human, good, poor = pairs
    prev, cur = rho_row("w", poor, human), rho_row("w", good, human)
    r = compare_one(prev, dict(cur, details={}), poor, good)
    assert (
        r.reason == "current row: expected details.human_scores, a list of finite numbers, got None"
    )
    other = dict(prev, details={"human_scores": (human + 1).tolist()})
    r = compare_one(other, cur, poor, good)
    assert r.reason == "different details.human_scores in the two releases"
    short = dict(cur, details={"human_scores": human[:-1].tolist()})
    r = compare_one(prev, short, poor, good)
    assert r.reason == (
        "current row: expected one human score per item in details.human_scores (80), got 79"
    )


def test_a_release_stored_without_items_is_still_not_comparable(pairs):
    human, good, poor = pairs
    old = rho_row("w", poor, human, items=None, details=None)
    r = compare_one(old, rho_row("w", good, human), poor, good)
    assert r.reason == "no per-item scores in the previous release (items is null)"


def test_analogy_rows_are_tested_on_the_questions_both_answer():
    rng = np.random.default_rng(2)
    prev = (rng.random(400) < 0.3).astype(float)
    cur = (rng.random(400) < 0.5).astype(float)
    prev[:50] = np.nan  # out of the previous vocabulary
    cur[350:] = np.nan

    def acc_row(items):
        cov = ~np.isnan(items)
        row = rho_row("a", np.arange(4.0), np.arange(4.0), details=None)
        value = float(items[cov].mean())
        row.update(metric="acc", interval="wilson", value=value, lo=0.0, hi=1.0, n=int(cov.sum()))
        return row

    r = compare_one(acc_row(prev), acc_row(cur), prev, cur)
    both = slice(50, 350)
    d = cur[both] - prev[both]
    assert r.n == 300 and r.delta == pytest.approx(d.mean(), abs=1e-12)
    p = paired_permutation_test(cur[both], prev[both], rng=np.random.default_rng(0))
    assert r.p == p and r.verdict == "improved"
    assert row_items_problem(parse_row(acc_row(cur)), cur) is None
    # an acc row of another kind with NaN items stays "non-finite"
    r = compare_one(
        dict(acc_row(prev), kind="classifier", n=400),
        dict(acc_row(cur), kind="classifier", n=400),
        prev,
        cur,
    )
    assert r.reason == "non-finite per-item scores"


def test_row_items_problem_counts_covered_items_and_checks_rho(pairs):
    human, good, _ = pairs
    cos = good.copy()
    cos[:5] = np.nan
    row = rho_row("w", cos, human)
    assert row["n"] == 75 and row_items_problem(parse_row(row), cos) is None
    assert row_items_problem(parse_row(dict(row, n=80)), cos) == (
        "row 'w': expected n = 75 (its per-item scores that are not NaN, of 80), got 80"
    )
    wrong = dict(row, value=row["value"] + 0.01)
    assert row_items_problem(parse_row(wrong), cos).startswith(
        f"row 'w': expected spearman value {row['value']!r} (of its 75 covered per-item scores "
        "and details.human_scores), got "
    )
    inf = cos.copy()
    inf[7] = np.inf
    assert row_items_problem(parse_row(row), inf) == (
        "row 'w': expected finite per-item scores, got 1 that are not"
    )


def test_the_terminal_and_markdown_show_the_bootstrap_interval(pairs):
    from rich.console import Console

    human, good, poor = pairs
    cmp = cm.compare_reports(
        report("r1", [rho_row("w", poor, human)]),
        report("r2", [rho_row("w", good, human)]),
        lambda name: poor,
        lambda name: good,
    )
    r = cmp.rows[0]
    md = compare_render.compare_markdown(cmp)
    assert "spearman rows: the PERM-BOTH permutation test" in md
    assert (
        f"{compare_render.format_number(r.delta, True)} [{compare_render.format_number(r.lo, True)}, "
        f"{compare_render.format_number(r.hi, True)}]" in md
    )
    console = Console(width=120, record=True)
    console.print(compare_render.compare_table(cmp))
    text = " ".join(console.export_text().split())  # the caption wraps at the table's width
    assert f"[{r.lo:+.3f}, {r.hi:+.3f}]" in text and "improved" in text
    assert (
        f"w: delta {r.delta:+.4f}, 95% paired bootstrap interval [{r.lo:+.4f}, "
        f"{r.hi:+.4f}] on the 80 pairs both releases cover" in text
    )
