"""compare's checks written out case by case (tinyllm/compare.py): what row_items_problem refuses
and its exact messages, the coverage rules of compare_row (one side a coverage kind, disjoint
coverage, Spearman rows of other kinds), the n_perm bound, and a Spearman row's test: its seed,
n_perm and confidence reach p and the interval, its smallest pair count, and its reasons."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from store_helpers import acc_row

from tinyllm import compare as cm
from tinyllm import stats
from tinyllm.compare_checks import parse_row, row_items_problem
from tinyllm.report import ReportSchemaError


def row(name: str, metric: str, value: float, n: int, kind: str = "classifier", **kw) -> dict:
    """A row of ``metric`` at ``value`` over ``n`` items, no interval (store_helpers.acc_row's
    fields otherwise)."""
    base = dict(metric=metric, value=value, kind=kind, family="x", lo=None, hi=None, interval=None)
    return acc_row(name, np.zeros(n)) | base | kw


def check(doc: dict, items) -> str | None:
    """row_items_problem of a row document, read as the typed row publish reads."""
    return row_items_problem(parse_row(doc), items)


def rho_row(name: str, cos: np.ndarray, human: np.ndarray, **kw) -> dict:
    cov = ~np.isnan(cos)
    value = float(sps.spearmanr(cos[cov], human[cov]).statistic)
    fields = {"kind": "embeddings", "details": {"human_scores": human.tolist()}, **kw}
    return row(name, "spearman", value, int(cov.sum()), **fields)


def compare_one(prev_row, cur_row, prev_items, cur_items, **kw) -> dict:
    return cm.compare_row(prev_row, cur_row, lambda n: prev_items, lambda n: cur_items, **kw)


# --- row_items_problem ----------------------------------------------------------------------


def test_rows_that_are_not_ok_or_not_rows_have_nothing_to_check():
    assert check(row("e", "acc", 0.5, 3, status="error"), [1, 0]) is None
    with pytest.raises(ReportSchemaError, match="expected a row of eval-results.schema.json"):
        parse_row(["not", "a", "row"])  # not a row at all: refused before any check


def test_items_must_be_one_dimensional_numbers_and_integers_or_booleans_count():
    r = row("c", "acc", 0.5, 4)
    assert check(r, np.array([[1.0, 0.0], [1.0, 0.0]])) == (
        "row 'c': expected 1-d numeric per-item scores, got dtype float64 shape (2, 2)"
    )
    assert check(r, np.array(["1", "0", "1", "0"])) == (
        "row 'c': expected 1-d numeric per-item scores, got dtype <U1 shape (4,)"
    )
    assert check(r, np.array([1, 0, 1, 0], dtype=np.int64)) is None
    assert check(r, np.array([True, False, True, False])) is None


def test_nan_is_a_bad_score_outside_the_coverage_kinds():
    items = np.array([1.0, np.nan, 0.0, 1.0])
    assert check(row("c", "acc", 2 / 3, 3), items) == (
        "row 'c': expected finite per-item scores, got 1 that are not"
    )
    assert check(row("c", "acc", 2 / 3, 3, kind="embeddings"), items) is None


def test_the_messages_of_a_wrong_n_and_a_wrong_mean_word_for_word():
    items = [1, 0, 1, 1]
    assert check(row("c", "acc", 0.75, 3), items) == (
        "row 'c': expected n = 4 (the number of its per-item scores), got 3"
    )
    # the docstring's example: 0.5 is 0.25 away from the mean 0.75
    assert check(row("c", "acc", 0.5, 4), items) == (
        "row 'c': expected acc value 0.75 (the mean of its 4 per-item scores), got 0.5"
    )
    assert check(row("c", "acc", 0.75, 4), items) is None


def test_a_value_agrees_within_1e_12_absolute_near_zero():
    items = [2e-13, 0.0]  # mean 1e-13: relative tolerance alone would refuse 0.0
    assert check(row("c", "acc", 0.0, 2), items) is None
    assert check(row("c", "acc", 3e-12, 2), items) is not None


def test_a_metric_that_is_not_a_string_is_refused_before_any_check():
    with pytest.raises(ReportSchemaError, match=r"got at metric: \['acc'\]"):
        parse_row(row("c", ["acc"], 0.1, 2))


def test_only_spearman_rows_are_checked_against_their_human_scores():
    cos = np.array([0.1, 0.4, 0.2, 0.9, 0.5])
    human = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    r = rho_row("w", cos, human)
    assert check(dict(r, details={}), cos) is None  # no human scores: no check
    # an acc row whose details happen to hold human scores is checked as a mean only
    acc = row("a", "acc", 1.0, 5, kind="embeddings", details={"human_scores": [0, 0, 0]})
    assert check(acc, np.ones(5)) is None
    wrong = dict(r, value=r["value"] + 0.01)
    assert check(wrong, cos) == (
        f"row 'w': expected spearman value {r['value']!r} (of its 5 covered per-item scores "
        f"and details.human_scores), got {r['value'] + 0.01!r}"
    )


def test_a_rho_of_zero_agrees_within_1e_12_absolute():
    cos = np.array([1.0, 2.0, 3.0, 4.0])
    human = np.array([2.0, 4.0, 1.0, 3.0])  # sum of squared rank differences 10: rho 0
    assert float(sps.spearmanr(cos, human).statistic) == 0.0
    r = rho_row("w", cos, human)
    assert check(dict(r, value=1e-13), cos) is None
    assert check(dict(r, value=2e-12), cos) is not None


# --- compare_row: coverage, n_perm ------------------------------------------------------------


def test_rows_compare_by_coverage_only_when_both_are_a_coverage_kind():
    items = np.array([1.0, 0.0, 1.0, 1.0])
    prev = row("a", "acc", 0.75, 4)
    cur = row("a", "acc", 2 / 3, 3, kind="embeddings")
    r = compare_one(prev, cur, items, np.array([1.0, 0.0, 1.0, np.nan]))
    assert r.reason == "different n (4 vs 3)"


def test_acc_rows_with_disjoint_coverage_say_how_much_each_covers():
    prev_items = np.array([1.0, np.nan, np.nan, np.nan])
    cur_items = np.array([np.nan, 1.0, 0.0, 1.0])
    prev = row("a", "acc", 1.0, 1, kind="embeddings")
    cur = row("a", "acc", 2 / 3, 3, kind="embeddings")
    r = compare_one(prev, cur, prev_items, cur_items)
    assert (r.verdict, r.reason) == (
        "not comparable",
        "no item covered by both releases (the previous covers 1 of 4, the current 3 of 4, "
        "none in common)",
    )


def test_spearman_rows_of_other_kinds_are_not_comparable():
    cos = np.array([0.1, 0.4, 0.2, 0.9, 0.5])
    r0 = rho_row("w", cos, np.arange(5.0), kind="classifier")
    r = compare_one(r0, r0, cos, cos)
    assert r.reason == "spearman rows are compared pair by pair only for the kinds ['embeddings']"


def test_n_perm_may_be_the_bound_and_not_one_more():
    items = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    r0 = row("a", "acc", 0.6, 5)
    r = compare_one(r0, r0, items, items, n_perm=cm.MAX_N_PERM)
    assert (r.verdict, r.p) == ("unchanged", 1.0)
    with pytest.raises(ValueError) as e:
        compare_one(r0, r0, items, items, n_perm=cm.MAX_N_PERM + 1)
    assert str(e.value) == "n_perm: expected at most 1000000 permutations per row, got 1000001"


# --- compare_row: Spearman rows ---------------------------------------------------------------


@pytest.fixture(scope="module")
def close_pairs():
    """30 pairs and two models of about the same quality: p well inside (0, 1)."""
    rng = np.random.default_rng(3)
    human = np.round(rng.uniform(0, 10, 30), 2)
    a = human / 10 + 0.3 * rng.normal(size=30)
    b = human / 10 + 0.3 * rng.normal(size=30)
    return human, a, b


def test_the_spearman_test_uses_the_seed_n_perm_and_confidence_given(close_pairs):
    human, a, b = close_pairs
    prev, cur = rho_row("w", a, human), rho_row("w", b, human)
    r = compare_one(prev, cur, a, b, n_perm=999, seed=7, alpha=0.1)
    # one paired entry point: the bootstrap over units, then the swap test, from default_rng(7)
    pd = stats.paired_difference(
        b,
        a,
        np.arange(30),  # word pairs: each pair its own unit
        np.random.default_rng(7),
        kind="spearman",
        reference=human,
        n_perm=999,
        n_boot=cm.N_BOOT,
        confidence=0.9,
    )
    assert 0.05 < pd.p < 0.95 and r.p == pd.p and r.method == "paired_bootstrap"
    other = compare_one(prev, cur, a, b, n_perm=999, seed=8, alpha=0.1)
    assert other.p != pd.p  # the seed moves p, so the equality above pins it
    assert (r.lo, r.hi, r.se, r.mde) == (pd.lo, pd.hi, pd.se, pd.mde)
    assert r.n_units == 30
    assert (r.n, r.metric) == (30, "spearman")


@pytest.mark.filterwarnings("ignore::scipy.stats.DegenerateDataWarning")
def test_four_common_pairs_reach_the_test(close_pairs):
    human, a, b = close_pairs
    a, b, h = a[:6].copy(), b[:6].copy(), human[:6]
    a[4:] = np.nan
    r = compare_one(rho_row("w", a, h), rho_row("w", b, h), a, b)
    # MIN_PAIRS pairs pass the count; this bootstrap then has resamples with constant scores
    assert r.reason.startswith(
        "no paired test on the 4 pairs both releases cover: cluster bootstrap: expected a finite "
        "statistic on every resample of the 4 units"
    )


def test_spearman_reasons_keep_the_row_metric_and_values(close_pairs):
    human, a, b = close_pairs
    prev, cur = rho_row("w", a, human), rho_row("w", b, human)
    r = compare_one(dict(prev, details=None), cur, a, b)
    assert r.reason == (
        "previous row: expected details.human_scores, a list of finite numbers, got None"
    )
    assert (r.metric, r.previous_value, r.current_value) == (
        "spearman",
        prev["value"],
        cur["value"],
    )
    r = compare_one(prev, dict(cur, details=None), a, b)
    assert r.reason == (
        "current row: expected details.human_scores, a list of finite numbers, got None"
    )


def test_disjoint_pairs_count_each_side_and_infinite_scores_are_named(close_pairs):
    human, a, b = close_pairs
    a, b = a.copy(), b.copy()
    a[10:] = np.nan  # the previous covers 10 pairs
    b[:10] = np.nan  # the current the other 20
    r = compare_one(rho_row("w", a, human), rho_row("w", b, human), a, b)
    assert r.reason == (
        "no pair covered by both releases (the previous covers 10 of 30, the current 20 of 30, "
        "none in common)"
    )
    _, a, b = close_pairs
    inf = a.copy()
    inf[3] = np.inf
    prev = rho_row("w", a, human)
    r = compare_one(prev, rho_row("w", b, human), inf, b)
    assert r.reason == "non-finite per-item scores"
    r = compare_one(prev, rho_row("w", b, human), b, inf)
    assert r.reason == "non-finite per-item scores"


def test_constant_cosines_on_the_common_pairs_are_not_comparable(close_pairs):
    human, a, _ = close_pairs
    flat = np.full(30, 0.5)
    cur = dict(rho_row("w", a, human), value=0.0)
    r = compare_one(rho_row("w", a, human), cur, a, flat)
    assert r.reason == (
        "no paired test on the 30 pairs both releases cover: x: expected scores that vary, "
        "got a constant input"
    )
    assert not math.isnan(r.previous_value)
