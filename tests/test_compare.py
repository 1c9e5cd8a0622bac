"""Release comparison: verdicts, the paired test, the interval, the schema, the CLI (the
rendering a user reads is tests/test_compare_render.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from tinyllm.compare import (
    SCHEMA_PATH,
    compare_reports,
    compare_row,
    parse_compare,
    validate_compare,
)
from tinyllm.compare_render import compare_markdown, compare_table
from tinyllm.stats import paired_permutation_test
from tinyllm.store import StoreUnreadableError, open_store

SHA_A = "aa" * 32
SHA_B = "bb" * 32
LN2 = math.log(2.0)


def lm_row(name: str, nll: np.ndarray, **kw) -> dict:
    """An LM row in the report format: bpb of byte-level per-token NLLs (one token = one byte)."""
    value = float(np.mean(nll)) / LN2
    row = {
        "name": name,
        "family": "gpt",
        "kind": "lm",
        "metric": "bpb",
        "value": value,
        "lo": value - 0.01,
        "hi": value + 0.01,
        "interval": "student_t",
        "n": int(nll.size),
        "status": "ok",
        "error": None,
        "reason": None,
        "checkpoint_sha256": SHA_A,
        "data_sha256": SHA_A,
        "seconds": 1.0,
        "items": f"items/{name}.npy",
    }
    row.update(kw)
    return row


def acc_row(name: str, hits: np.ndarray, **kw) -> dict:
    row = lm_row(name, np.ones(2), kind="classifier", family="classifier", metric="acc")
    value = float(np.mean(hits))
    row.update(value=value, lo=value - 0.05, hi=value + 0.05, n=int(hits.size), interval="wilson")
    row.update(kw)
    return row


def report(release: str, rows: list[dict], day: int = 1) -> dict:
    return {
        "schema_version": 1,
        "suite": "zoo",
        "release": release,
        "created_at": f"2026-11-{day:02d}T18:00:00Z",
        "seed": 0,
        "tinyllm_version": "0.1.0",
        "manifest_sha256": SHA_A,
        "rows": rows,
    }


def loader(items: dict[str, np.ndarray]):
    return lambda name: items[name]


def run(prev_rows, cur_rows, prev_items, cur_items, **kw) -> dict:
    cmp = compare_reports(
        report("r1", prev_rows),
        report("r2", cur_rows, 2),
        loader(prev_items),
        loader(cur_items),
        **kw,
    )
    validate_compare(cmp.to_json())  # every result the tests see is a valid compare.json
    return cmp


def by_name(cmp: dict) -> dict[str, dict]:
    return {r.name: r for r in cmp.rows}


@pytest.fixture(scope="module")
def nll():
    # 2000 per-token NLLs of a plausible byte-level LM (nats)
    return np.random.default_rng(7).gamma(2.0, 0.8, 2000)


def test_planted_regression_is_flagged(nll):
    cur = nll + 0.05  # every token 0.05 nats worse
    cmp = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur})
    r = cmp.rows[0]
    assert r.verdict == "regressed" and r.direction == "lower"
    assert r.delta == pytest.approx(0.05 / LN2, rel=1e-9)  # 0.0721 bits per byte
    # every difference equal: no sign pattern reaches |sum d| except +-1 -> p = 1/(n_perm+1)
    assert r.p == pytest.approx(1 / 10_001)
    assert r.lo == pytest.approx(r.delta) and r.hi == pytest.approx(r.delta)
    assert r.n == 2000 and r.reason is None
    assert cmp.regressions() == [r]
    assert cmp.summary["regressed"] == 1 and sum(cmp.summary.values()) == 1


def test_noisy_regression_interval_is_the_t_interval_in_bits_per_byte(nll):
    noise = np.random.default_rng(1).normal(0.0, 0.4, nll.size)
    cur = nll + 0.05 + noise
    cmp = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur})
    r = cmp.rows[0]
    d = cur - nll
    # oracle by hand: delta ± t_{0.975, n-1} * sd(d) / sqrt(n), nats -> bits by 1/ln 2
    half = sps.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size) / LN2
    assert r.delta == pytest.approx(d.mean() / LN2, rel=1e-9)
    assert r.lo == pytest.approx(r.delta - half, rel=1e-9)
    assert r.hi == pytest.approx(r.delta + half, rel=1e-9)
    assert 0 < r.lo < 0.05 / LN2 < r.hi
    assert r.verdict == "regressed" and r.p < 0.05


def test_improvement_in_bpb_is_improved(nll):
    cur = nll - 0.05
    r = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur}).rows[0]
    assert r.verdict == "improved" and r.delta < 0


def test_identical_report_is_unchanged_with_p_one(nll):
    rows = [lm_row("gpt", nll)]
    r = run(rows, rows, {"gpt": nll}, {"gpt": nll.copy()}).rows[0]
    assert r.verdict == "unchanged"
    assert r.p == 1.0 and r.delta == 0.0 and r.lo == 0.0 and r.hi == 0.0


def test_differences_that_cancel_are_unchanged(nll):
    # half the tokens 0.3 nats better, half 0.3 worse: same total, p = 1
    cur = nll + np.where(np.arange(nll.size) % 2 == 0, 0.3, -0.3)
    r = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur}).rows[0]
    assert r.verdict == "unchanged" and r.p == pytest.approx(1.0)
    assert r.lo < 0 < r.hi


def test_verdict_follows_p_at_alpha(nll):
    cur = nll + np.random.default_rng(3).normal(0.004, 0.3, nll.size)  # p = 0.068 (n_perm 3000)
    args = ([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur})
    at_05 = run(*args, n_perm=3000, seed=5).rows[0]
    at_10 = run(*args, n_perm=3000, seed=5, alpha=0.10).rows[0]
    assert 0.05 < at_05.p == at_10.p < 0.10
    assert at_05.verdict == "unchanged" and at_05.delta > 0
    assert at_10.verdict == "regressed"
    # the interval follows alpha too: 1 - alpha confidence, narrower at alpha = 0.10
    assert at_10.hi - at_10.lo < at_05.hi - at_05.lo


def test_accuracy_direction():
    prev = np.zeros(400)
    prev[:200] = 1.0  # 50%
    cur = prev.copy()
    cur[200:260] = 1.0  # 60 more items right: 65%
    cmp = run([acc_row("clf", prev)], [acc_row("clf", cur)], {"clf": prev}, {"clf": cur})
    r = cmp.rows[0]
    assert r.verdict == "improved" and r.direction == "higher"
    assert r.delta == pytest.approx(0.15)
    # the same change the other way round is a regression
    back = run([acc_row("clf", cur)], [acc_row("clf", prev)], {"clf": cur}, {"clf": prev})
    assert back.rows[0].verdict == "regressed"
    assert back.rows[0].p == r.p


def test_p_value_is_the_paired_permutation_test(nll):
    cur = nll + np.random.default_rng(3).normal(0.004, 0.3, nll.size)
    cmp = run(
        [lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur}, n_perm=3000, seed=5
    )
    expected = paired_permutation_test(cur, nll, n_perm=3000, rng=np.random.default_rng(5))
    assert cmp.rows[0].p == expected
    assert 0.01 < expected < 1.0  # a p strictly inside: sampled, not a corner case
    # a row's p does not depend on the other rows the reports hold
    other = np.random.default_rng(4).gamma(2.0, 0.8, 50)
    cmp2 = run(
        [lm_row("a", other), lm_row("gpt", nll)],
        [lm_row("a", other + 0.1), lm_row("gpt", cur)],
        {"a": other, "gpt": nll},
        {"a": other + 0.1, "gpt": cur},
        n_perm=3000,
        seed=5,
    )
    assert by_name(cmp2)["gpt"].p == expected


def test_not_comparable_rows_say_why(nll):
    short = nll[:1999]
    prev_rows = [
        lm_row("data", nll),
        lm_row("n", nll),
        lm_row("broken", nll),
        lm_row("w2v", nll, metric="spearman", items=None, kind="embeddings"),
        lm_row("len", nll),
        lm_row("metric", nll),
        lm_row("gone", nll),
    ]
    cur_rows = [
        lm_row("data", nll, data_sha256=SHA_B),
        lm_row("n", short),
        lm_row(
            "broken",
            nll,
            status="error",
            value=None,
            lo=None,
            hi=None,
            error={"type": "FileNotFoundError", "message": "models/gpt/config.json"},
        ),
        lm_row("w2v", nll, metric="spearman", items=None, kind="embeddings"),
        lm_row("len", nll),
        lm_row("metric", nll, metric="acc"),
        lm_row("new", nll),
    ]
    items_prev = {r["name"]: nll for r in prev_rows}
    items_cur = {r["name"]: nll for r in cur_rows} | {"n": short, "len": short}
    cmp = run(prev_rows, cur_rows, items_prev, items_cur)
    rows = by_name(cmp)
    reasons = {name: (r.verdict, r.reason) for name, r in rows.items()}
    assert reasons["data"] == (
        "not comparable",
        f"different data (data_sha256 {SHA_A[:12]}... vs {SHA_B[:12]}...)",
    )
    assert reasons["n"] == ("not comparable", "different n (2000 vs 1999)")
    assert reasons["broken"][0] == "not comparable"
    assert (
        reasons["broken"][1]
        == "current status is error (FileNotFoundError: models/gpt/config.json)"
    )
    assert reasons["w2v"] == (
        "not comparable",
        "no per-item scores in either release (items is null)",
    )
    assert reasons["len"] == (
        "not comparable",
        "per-item scores of different lengths (2000 vs 1999)",
    )
    assert reasons["metric"] == ("not comparable", "different metric (bpb vs acc)")
    assert reasons["new"] == ("added", "only in the current release r2")
    assert reasons["gone"] == ("removed", "only in the previous release r1")
    for name in ("data", "n", "broken", "w2v", "len", "metric", "new", "gone"):
        assert rows[name].p is None and rows[name].delta is None
    assert rows["new"].current_value == pytest.approx(np.mean(nll) / LN2)
    assert rows["gone"].previous_value == pytest.approx(np.mean(nll) / LN2)
    # order: current rows in their order, then the removed ones
    assert [r.name for r in cmp.rows] == [r["name"] for r in cur_rows] + ["gone"]
    assert cmp.summary == {
        "improved": 0,
        "regressed": 0,
        "unchanged": 0,
        "not comparable": 6,
        "added": 1,
        "removed": 1,
    }


def test_unreadable_items_are_not_comparable(nll):
    def missing(name):
        raise KeyError(name)

    cmp = compare_reports(
        report("r1", [lm_row("gpt", nll)]),
        report("r2", [lm_row("gpt", nll)]),
        missing,
        loader({"gpt": nll}),
    )
    r = cmp.rows[0]
    assert r.verdict == "not comparable"
    assert r.reason.startswith("previous per-item scores unreadable")


def test_schema_is_valid_and_strict(nll):
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    cur = nll + 0.05
    cmp = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur})
    broken = cmp.to_json()
    broken["rows"][0]["p"] = None  # a tested verdict without its p
    with pytest.raises(ValueError, match="rows/0/p"):
        validate_compare(broken)
    broken = cmp.to_json()
    broken["rows"][0]["verdict"] = "worse"
    with pytest.raises(ValueError, match="rows/0/verdict"):
        validate_compare(broken)
    broken = cmp.to_json()
    broken["extra"] = 1
    with pytest.raises(ValueError, match="Additional properties"):
        validate_compare(broken)


def test_bad_inputs_are_refused(nll):
    good = report("r1", [lm_row("gpt", nll)])
    with pytest.raises(ValueError, match="alpha: expected a level in"):
        compare_reports(good, good, loader({}), loader({}), alpha=1.5)
    with pytest.raises(ValueError, match="current report: expected a 'release'"):
        compare_reports(good, {"rows": []}, loader({}), loader({}))
    with pytest.raises(ValueError, match="unique row names"):
        compare_reports(good, report("r2", [lm_row("gpt", nll)] * 2), loader({}), loader({}))


def test_markdown_and_table(nll):
    from rich.console import Console

    cur = nll + 0.05
    rows_prev = [lm_row("gpt", nll), lm_row("w2v", nll, items=None, metric="spearman")]
    rows_cur = [lm_row("gpt", cur), lm_row("w2v", nll, items=None, metric="spearman")]
    cmp = run(rows_prev, rows_cur, {"gpt": nll}, {"gpt": cur})
    md = compare_markdown(cmp)
    assert md.startswith("### r2 vs r1: 1 regressed, 1 not comparable\n")
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| entry"))
    gpt = next(line for line in lines if line.startswith("| `gpt`"))
    assert header.count("|") == gpt.count("|") == 11  # ten columns: p and p (Holm), mde
    assert "**regressed**" in gpt and "+0.0721 [+0.0721, +0.0721]" in gpt and "1.0e-04" in gpt
    assert "not comparable: no per-item scores" in md
    console = Console(width=200, record=True)
    console.print(compare_table(cmp))
    text = console.export_text()
    assert "regressed" in text and "gpt" in text and "+0.0721 ± 0.0000" in text
    assert "w2v: not comparable: no per-item scores" in text


def test_store_compare_and_cli(tmp_path, nll):
    from typer.testing import CliRunner

    from tinyllm.cli import app

    store = open_store(tmp_path / "evalstore")
    degraded = nll + 0.05
    for release, items, day in (("r1", nll, 1), ("r2", nll, 2), ("r3", degraded, 3)):
        store.write_report(release, report(release, [lm_row("gpt", items)], day))
        store.write_items(release, "gpt", items)
    prev = store.previous_release("r3")
    assert prev == "r2"
    cmp = compare_reports(
        store.read_report(prev),
        store.read_report("r3"),
        store.items_loader(prev),
        store.items_loader("r3"),
    )
    store.write_compare("r3", cmp)
    assert store.read_compare("r3") == cmp
    assert cmp.rows[0].verdict == "regressed"

    runner = CliRunner()
    s = str(tmp_path / "evalstore")
    res = runner.invoke(app, ["compare", "--store", s, "r1", "r2", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["rows"][0]["verdict"] == "unchanged"
    res = runner.invoke(app, ["compare", "--store", s, "r2", "r3", "--fail-on-regression"])
    assert res.exit_code == 1 and "regressed" in res.output
    res = runner.invoke(app, ["compare", "--store", s, "r2", "nope"])
    assert res.exit_code == 2 and "releases/nope/report.json" in res.output
    res = runner.invoke(app, ["history", "--store", s, "--n-perm", "500"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.index("r1") < out.index("r2") < out.index("r3")
    assert "(first release)" in out and "r2 vs r1: 1 unchanged" in out
    assert "regressed r3 gpt: bpb" in out and "vs r2" in out


# ---- edges: the acc interval, the fewest pairs, one-sided defects, the guards' bounds ------------


def test_accuracy_interval_is_the_t_interval_of_0_1_differences():
    # acc rows are in item units already (no 1/ln 2): delta ± t_{0.975, n-1} * sd(d) / sqrt(n)
    rng = np.random.default_rng(3)
    prev = (rng.random(400) < 0.6).astype(float)
    cur = np.where(rng.random(400) < 0.2, 1.0 - prev, prev)
    r = run([acc_row("clf", prev)], [acc_row("clf", cur)], {"clf": prev}, {"clf": cur}).rows[0]
    d = cur - prev
    half = sps.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    assert r.delta == pytest.approx(d.mean(), abs=1e-12)
    assert r.lo == pytest.approx(r.delta - half, rel=1e-9)
    assert r.hi == pytest.approx(r.delta + half, rel=1e-9)


def test_one_sided_defects_make_a_row_not_comparable(nll):
    cur = nll + 0.05
    items = ({"gpt": nll}, {"gpt": cur})
    only_cur_value = run([lm_row("gpt", nll)], [lm_row("gpt", cur, value=None)], *items)
    assert only_cur_value.rows[0].verdict == "not comparable"
    assert only_cur_value.rows[0].reason == "a value is missing or not finite"
    only_cur_sha = run([lm_row("gpt", nll)], [lm_row("gpt", cur, data_sha256=None)], *items)
    assert only_cur_sha.rows[0].reason.startswith("no data_sha256")
    bad = cur.copy()
    bad[5] = np.nan
    only_cur_nan = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": bad})
    assert only_cur_nan.rows[0].reason == "non-finite per-item scores"
    no_cur_items = run([lm_row("gpt", nll)], [lm_row("gpt", cur, items=None)], *items)
    assert (
        no_cur_items.rows[0].reason == "no per-item scores in the current release (items is null)"
    )


def test_two_paired_items_are_enough_and_a_delta_of_exactly_one_is_tested():
    prev, cur = np.array([1.0, 2.0]), np.array([1.5, 2.5])  # d = [0.5, 0.5]: exact p = 2/4
    r = run([lm_row("m", prev)], [lm_row("m", cur)], {"m": prev}, {"m": cur}).rows[0]
    assert r.verdict == "unchanged" and r.p == 0.5 and r.n == 2
    # values 1.5 -> 2.5 bpb: delta = 1.0 exactly, items clearly worse: regressed
    nll = np.random.default_rng(5).gamma(2.0, 0.8, 300)
    worse = nll + 0.3
    r = run(
        [lm_row("m", nll, value=1.5)],
        [lm_row("m", worse, value=2.5)],
        {"m": nll},
        {"m": worse},
    ).rows[0]
    assert r.delta == 1.0 and r.verdict == "regressed"


def test_rows_without_a_verdict_keep_their_metric_and_values(nll):
    prev_rows = [lm_row("gpt", nll), lm_row("old", nll)]
    cur_rows = [lm_row("gpt", nll + 0.05, data_sha256=SHA_B), acc_row("new", np.ones(4))]
    rows = by_name(run(prev_rows, cur_rows, {"gpt": nll}, {"gpt": nll + 0.05}))
    v_prev, v_cur = float(np.mean(nll)) / LN2, float(np.mean(nll + 0.05)) / LN2
    nc = rows["gpt"]  # different data: no test, but both values and the metric are reported
    assert nc.verdict == "not comparable" and nc.metric == "bpb"
    assert nc.direction == "lower"
    assert nc.previous_value == v_prev and nc.current_value == v_cur
    assert nc.delta is None and nc.p is None
    added, removed = rows["new"], rows["old"]
    assert (added.verdict, added.metric, added.direction) == ("added", "acc", "higher")
    assert added.current_value == 1.0 and added.previous_value is None
    assert (removed.verdict, removed.metric, removed.direction) == (
        "removed",
        "bpb",
        "lower",
    )
    assert removed.previous_value == v_prev and removed.current_value is None
    assert added.reason == "only in the current release r2"
    assert removed.reason == "only in the previous release r1"


def test_alpha_and_n_perm_guards_at_their_boundaries(nll):
    rows = [lm_row("gpt", nll)]
    items = {"gpt": nll}
    for alpha in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"^alpha: expected a level in \(0, 1\)"):
            run(rows, rows, items, items, alpha=alpha)
    for n_perm in (0, True, 2.0):
        with pytest.raises(ValueError, match=r"^n_perm: expected an integer >= 1"):
            run(rows, rows, items, items, n_perm=n_perm)
    assert run(rows, rows, items, items, n_perm=1).rows[0].verdict == "unchanged"


# ---- the reasons and errors a user reads, word for word ---------------------------------------


def test_status_reasons_name_the_side_and_the_cause(nll):
    items = {"gpt": nll}

    def reason(prev_kw, cur_kw):
        cmp = run([lm_row("gpt", nll, **prev_kw)], [lm_row("gpt", nll, **cur_kw)], items, items)
        return cmp.rows[0].reason

    skipped = {"status": "skipped", "value": None, "reason": "unknown family 'mystery'"}
    assert reason(skipped, {}) == "previous status is skipped (unknown family 'mystery')"
    assert reason({}, {"status": "skipped", "value": None}) == "current status is skipped"

    def error(message=None, **kw):
        err = (
            {"type": "RuntimeError"}
            if message is None
            else {"type": "RuntimeError", "message": message}
        )
        return {"status": "error", "value": None, "error": err, **kw}

    # a long message is cut after 160 characters; 160 are kept whole
    assert reason({}, error("x" * 161)) == f"current status is error (RuntimeError: {'x' * 160}...)"
    assert reason({}, error("y" * 160)) == f"current status is error (RuntimeError: {'y' * 160})"
    # an error without its message is no stored row: refused where the report enters
    with pytest.raises(ValueError) as ei:
        reason({}, error())
    assert str(ei.value) == (
        "current report rows[0]: expected a row of eval-results.schema.json, got "
        "error.message: required field missing"
    )
    # an error without a type: the row's own reason, if any, is what there is to say
    no_type = {
        "status": "error",
        "value": None,
        "error": {"type": "", "message": "x"},
        "reason": "killed",
    }
    assert reason({}, no_type) == "current status is error (killed)"


def test_not_comparable_reasons_word_for_word(nll):
    items = {"gpt": nll}

    def reason(prev_row, cur_row, prev_items=items, cur_items=items):
        return run([prev_row], [cur_row], prev_items, cur_items).rows[0].reason

    # an ok row without a metric (a store leaves the status rules to the writer)
    no_metric = lm_row("gpt", nll, metric=None)
    assert reason(no_metric, no_metric) == (
        "unknown metric None (known: bpb, acc, acc_norm, exact_match, spearman)"
    )
    # hashes are cut to 12 hex digits
    other = "f" * 64
    assert reason(lm_row("gpt", nll, data_sha256=other), lm_row("gpt", nll)) == (
        f"different data (data_sha256 ffffffffffff... vs {SHA_A[:12]}...)"
    )
    row = lm_row("gpt", nll)
    assert reason(lm_row("gpt", nll, items=None), row) == (
        "no per-item scores in the previous release (items is null)"
    )
    assert reason(row, row, items, {}) == "current per-item scores unreadable: 'gpt'"
    flat = {"gpt": np.zeros((2, 2))}
    assert reason(row, row, flat, items) == (
        "previous per-item scores: expected a 1-d array, got shape (2, 2)"
    )
    one = np.array([0.5])
    one_row = lm_row("gpt", one)
    assert reason(one_row, one_row, {"gpt": one}, {"gpt": one}) == "fewer than 2 paired items (1)"


def test_malformed_reports_are_refused_with_the_place(nll):
    good = report("r1", [lm_row("gpt", nll)])
    cases = [
        (([], good), "previous report: expected an object with a 'rows' list, got []"),
        (
            ({"release": "r0"}, good),
            "previous report: expected an object with a 'rows' list, got {'release': 'r0'}",
        ),
        ((good, report("", [])), "current report: expected a 'release' name, got ''"),
        (
            (report("r0", [{"name": "a"}, 5]), good),
            "previous report rows[1]: expected an object with a 'name', got 5",
        ),
        (
            (report("r0", [{"name": 7}]), good),
            "previous report rows[0]: expected an object with a 'name', got {'name': 7}",
        ),
    ]
    for (prev, cur), message in cases:
        with pytest.raises(ValueError) as ei:
            compare_reports(prev, cur, loader({}), loader({}))
        assert str(ei.value) == message


def test_a_row_that_is_no_stored_row_is_refused_with_the_place(nll):
    # a metric that is not one of the metrics, a hash that is not 64 hex digits: refused where
    # the report enters the comparison, never passed on into a compare.json
    cases = [
        (
            ([lm_row("gpt", nll)], [lm_row("gpt", nll), lm_row("x", nll, metric=[1])]),
            "current report rows[1]: expected a row of eval-results.schema.json, got metric: "
            "Input should be 'bpb', 'acc', 'acc_norm', 'exact_match' or 'spearman' (got [1])",
        ),
        (
            ([lm_row("gpt", nll, data_sha256="abc")], [lm_row("gpt", nll)]),
            "previous report rows[0]: expected a row of eval-results.schema.json, got "
            "data_sha256: String should match pattern '^[0-9a-f]{64}$' (got 'abc')",
        ),
    ]
    for (prev, cur), message in cases:
        with pytest.raises(ValueError) as ei:
            run(prev, cur, {}, {})
        assert str(ei.value) == message
    with pytest.raises(ValueError, match=r"^current row: expected a stored report row"):
        compare_row(lm_row("gpt", nll), lm_row("gpt", nll, metric="ppl"), loader({}), loader({}))


def test_a_stored_comparison_that_does_not_fit_is_refused_where_it_is_read(nll, tmp_path):
    cur = nll + 0.05
    cmp = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur})
    assert parse_compare(cmp.to_json()) == cmp  # one that fits reads back as the same type
    bad = cmp.to_json()
    bad["rows"][0]["p_adjusted"] = 1.5
    with pytest.raises(ValueError) as ei:
        parse_compare(bad, "releases/r2/compare.json")
    assert str(ei.value) == (
        "releases/r2/compare.json: expected an object matching compare.schema.json, got at "
        "rows/0/p_adjusted: 1.5 is greater than the maximum of 1"
    )
    # through the store: unreadable, naming the key; no reader gets the document
    store = open_store(tmp_path)
    store.write_report("r2", report("r2", [lm_row("gpt", cur)], 2))
    store.put_json("releases/r2/compare.json", bad)
    with pytest.raises(StoreUnreadableError) as ei:
        store.read_compare("r2")
    assert str(ei.value).startswith(
        f"{tmp_path}/releases/r2/compare.json: expected an object matching compare.schema.json, "
        "got at rows/0/p_adjusted: "
    )


def test_validation_errors_say_where_and_how_many(nll):
    cmp = run([lm_row("gpt", nll)], [lm_row("gpt", nll)], {"gpt": nll}, {"gpt": nll})
    one = cmp.to_json()
    del one["seed"]
    with pytest.raises(ValueError) as ei:
        validate_compare(one)
    assert str(ei.value) == (
        "compare.json: expected an object matching compare.schema.json, got at (top level): "
        "'seed' is a required property"
    )
    two = cmp.to_json()
    del two["seed"], two["alpha"]
    with pytest.raises(ValueError) as ei:
        validate_compare(two)
    assert str(ei.value).endswith(" is a required property (and 1 more errors)")


def test_defaults_are_recorded_and_reproducible(nll):
    # the documented defaults: 10000 sign patterns from default_rng(0), alpha 0.05
    cur = nll + np.random.default_rng(3).normal(0.004, 0.3, nll.size)
    prev_r, cur_r = report("r1", [lm_row("gpt", nll)]), report("r2", [lm_row("gpt", cur)], 2)
    cmp = compare_reports(prev_r, cur_r, loader({"gpt": nll}), loader({"gpt": cur}))
    assert (cmp.n_perm, cmp.seed, cmp.alpha, cmp.confidence) == (10_000, 0, 0.05, 0.95)
    assert cmp.previous_created_at == "2026-11-01T18:00:00Z"
    assert cmp.current_created_at == "2026-11-02T18:00:00Z"
    p = paired_permutation_test(cur, nll, n_perm=10_000, rng=np.random.default_rng(0))
    assert cmp.rows[0].p == p
    # compare_row, public too, has the same defaults
    row = compare_row(
        prev_r["rows"][0], cur_r["rows"][0], loader({"gpt": nll}), loader({"gpt": cur})
    )
    assert row == cmp.rows[0]


def test_boolean_per_item_scores_compare_like_0_1(nll):
    # a loader may hand back booleans (hit / miss); they count as 0/1
    prev = np.arange(200) % 2 == 0
    cur = prev | (np.arange(200) % 5 == 1)
    f = run(
        [acc_row("clf", prev)],
        [acc_row("clf", cur)],
        {"clf": prev.astype(float)},
        {"clf": cur.astype(float)},
    )
    b = run([acc_row("clf", prev)], [acc_row("clf", cur)], {"clf": prev}, {"clf": cur})
    assert b.rows == f.rows and b.rows[0].verdict == "improved"


def test_verdict_needs_p_strictly_below_alpha():
    # exact test, 4 items all 0.5 worse: p = 2/16 = 0.125 exactly; at alpha = 0.125 not enough
    prev = np.array([1.0, 2.0, 3.0, 4.0])
    cur = prev + 0.5
    args = ([lm_row("m", prev)], [lm_row("m", cur)], {"m": prev}, {"m": cur})
    at = run(*args, alpha=0.125).rows[0]
    assert at.p == 0.125 and at.verdict == "unchanged"
    assert run(*args, alpha=0.126).rows[0].verdict == "regressed"
    # Monte Carlo, 19 draws: p = (1 + 0) / (19 + 1) = 0.05 = alpha exactly -> unchanged
    nll = np.random.default_rng(7).gamma(2.0, 0.8, 2000)
    r = run([lm_row("m", nll)], [lm_row("m", nll + 0.05)], {"m": nll}, {"m": nll + 0.05}, n_perm=19)
    assert r.rows[0].p == 0.05 and r.rows[0].verdict == "unchanged"


def test_the_rows_of_a_release_are_decided_together_by_holm(nll):
    # three rows, each a regression when judged alone: "a" over 2000 tokens (p = 1/10001), "b"
    # and "c" over 6 items all 0.5 worse (exact p = 2/64 = 0.03125). Tested together (m = 3),
    # Holm multiplies the sorted p by 3, 2, 1 and keeps them monotone: 0.0003, 0.0625, 0.0625
    six = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    prev = {"a": nll, "b": six, "c": six + 1}
    cur = {"a": nll + 0.05, "b": six + 0.5, "c": six + 1.5}
    names = list(prev)
    cmp = run([lm_row(n, prev[n]) for n in names], [lm_row(n, cur[n]) for n in names], prev, cur)
    r = by_name(cmp)
    assert [r[n].p for n in names] == pytest.approx([1 / 10_001, 0.03125, 0.03125])
    assert [r[n].p_adjusted for n in names] == pytest.approx([3 / 10_001, 0.0625, 0.0625])
    assert [r[n].verdict for n in names] == ["regressed", "unchanged", "unchanged"]
    assert cmp.summary["regressed"] == 1 and cmp.summary["unchanged"] == 2
    assert cmp.adjustment == "holm" and cmp.schema_version == 2 and "interval" not in cmp.to_json()
    assert cmp.regressions() == [r["a"]]  # --fail-on-regression reads these verdicts
    # a row compared alone is a family of one: its own p decides
    alone = compare_row(lm_row("b", six), lm_row("b", six + 0.5), loader(prev), loader(cur))
    assert alone.p_adjusted == alone.p == 0.03125 and alone.verdict == "regressed"
    # rows without a test are not counted in m
    only_two = run(
        [lm_row("b", six), lm_row("c", six + 1), lm_row("x", six)],
        [lm_row("b", six + 0.5), lm_row("c", six + 1.5), lm_row("x", six, n=3)],
        prev | {"x": six},
        cur | {"x": six},
    )
    assert [x.p_adjusted for x in only_two.rows] == [0.0625, 0.0625, None]


def test_every_tested_row_states_what_it_could_have_seen(nll):
    cur = nll + np.random.default_rng(3).normal(0.0, 0.3, nll.size)
    r = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur}).rows[0]
    d = (cur - nll) / LN2  # each token its own unit (the rows state no units: a note says so)
    se = d.std(ddof=1) / math.sqrt(d.size)
    t = sps.t.ppf(0.975, d.size - 1) + sps.t.ppf(0.80, d.size - 1)
    assert r.verdict == "unchanged"
    assert r.se == pytest.approx(se, rel=1e-9) and r.mde == pytest.approx(t * se, rel=1e-9)
    assert (r.n_units, r.method) == (2000, "paired_t")
    assert r.note == "units unknown in either release: compared at the item level"
    assert 0.005 < r.mde < 0.05  # about 0.019 bits per byte: it could not rule out less
    # rows that state their units as the items (n_units = n, no units file): no note
    pr, cr = lm_row("gpt", nll, n_units=2000), lm_row("gpt", cur, n_units=2000)
    s = run([pr], [cr], {"gpt": nll}, {"gpt": cur}).rows[0]
    assert s.note is None and s.mde == r.mde
    # not comparable rows have none of it
    nc = run([lm_row("gpt", nll)], [lm_row("gpt", cur, n=5)], {"gpt": nll}, {"gpt": cur})
    assert {
        k: getattr(nc.rows[0], k) for k in ("p_adjusted", "se", "mde", "n_units", "method")
    } == {
        "p_adjusted": None,
        "se": None,
        "mde": None,
        "n_units": None,
        "method": None,
    }


def test_a_comparison_stored_before_units_still_validates(nll):
    cur = nll + 0.05
    cmp = run([lm_row("gpt", nll)], [lm_row("gpt", cur)], {"gpt": nll}, {"gpt": cur})
    old = cmp.to_json()
    old.update(schema_version=1, interval="student_t_paired")
    del old["adjustment"]
    for r in old["rows"]:
        for k in ("p_adjusted", "n_units", "method", "se", "mde", "note"):
            del r[k]
    back = parse_compare(old)
    assert back.schema_version == 1 and back.adjustment is None
    assert back.rows[0].p_adjusted is None and back.rows[0].mde is None
    assert [r.name for r in back.regressions()] == ["gpt"]
    # written again, it is the document it was: only the fields it had, in the schema's order
    again = back.to_json()
    assert again == old and list(again["rows"][0]) == list(old["rows"][0])
    assert list(again)[5:8] == ["test", "interval", "confidence"]


def test_fail_on_regression_reads_the_holm_adjusted_p(tmp_path):
    from typer.testing import CliRunner

    from tinyllm.cli import app

    # two rows each 0.5 nats worse on all 6 items: p = 2/64 = 0.03125 alone, 0.0625 with Holm
    six = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    store = open_store(tmp_path / "evalstore")
    for release, shift, day in (("r1", 0.0, 1), ("r2", 0.5, 2)):
        rows = [lm_row(n, six + shift) for n in ("b", "c")]
        store.write_report(release, report(release, rows, day))
        for n in ("b", "c"):
            store.write_items(release, n, six + shift)
    s = str(tmp_path / "evalstore")
    runner = CliRunner()
    res = runner.invoke(
        app, ["compare", "--store", s, "r1", "r2", "--json", "--fail-on-regression"]
    )
    assert res.exit_code == 0, res.output  # neither survives Holm: no regression
    rows = json.loads(res.output)["rows"]
    assert [(r["p"], r["p_adjusted"], r["verdict"]) for r in rows] == [
        (0.03125, 0.0625, "unchanged"),
        (0.03125, 0.0625, "unchanged"),
    ]
    # one of them alone is a family of one: a regression, and the history says both p's
    store.write_report("r3", report("r3", [lm_row("b", six + 1.0)], 3))
    store.write_items("r3", "b", six + 1.0)
    res = runner.invoke(app, ["compare", "--store", s, "r1", "r3", "--fail-on-regression"])
    assert res.exit_code == 1 and "regressed" in res.output
    res = runner.invoke(app, ["history", "--store", s])
    assert "regressed r3 b: bpb" in res.output and "p 0.031, Holm 0.031) vs r2" in res.output
