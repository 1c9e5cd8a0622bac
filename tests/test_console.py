"""tinyllm.console: the one progress helper (counted work, zoo rows, training) as it prints when
piped, and the zoo table's cells."""

from __future__ import annotations

from types import SimpleNamespace

from tinyllm.console import Progress, print_report, short, stdout_console, zoo_table
from tinyllm.report import BaselineInfo, BeatsBaseline, Row


def test_rows_prints_one_line_per_scored_entry_and_nothing_when_quiet(capsys):
    row = Progress.rows()  # run_zoo's progress: each entry's typed row
    row(1, 2, _row("gpt", "ok", value=1.0, lo=0.9, hi=1.1, n=10, seconds=1.25))
    row(2, 2, _row("ghost", "error", error={"type": "E", "message": "m"}, seconds=0.04))
    row(2, 2, SimpleNamespace(name="[b]ghost[/b]", status="error", seconds=0.04))  # no markup
    want = [
        "[1/2] gpt: ok (1.2 s)",
        "[2/2] ghost: error (0.0 s)",
        "[2/2] [b]ghost[/b]: error (0.0 s)",
    ]
    assert capsys.readouterr().err.splitlines() == want
    Progress.rows(quiet=True)(1, 1, _row("ghost", "error", error={"type": "E", "message": "m"}))
    assert capsys.readouterr().err == ""


def test_training_lines_are_throttled_per_model(capsys):
    now = [0.0]
    line = Progress.training(clock=lambda: now[0])
    for t, name, step in ((0, "a", 1), (1, "b", 1), (5, "a", 2), (10, "a", 3), (11, "b", 4)):
        now[0] = float(t)
        line(name, step, 4, 1.0 / step)
    # each model's first line, then one per Progress.every (10 s) seconds, and its last step
    assert capsys.readouterr().err.splitlines() == [
        "training a: step 1/4, loss 1.0000",
        "training b: step 1/4, loss 1.0000",
        "training a: step 3/4, loss 0.3333",
        "training b: step 4/4, loss 0.2500",
    ]
    assert Progress.training(quiet=True) is False


def test_counted_work_without_a_total_is_done(capsys):
    with Progress("nothing", 0) as bar:
        bar.update(0)
    assert capsys.readouterr().err.splitlines()[-1].startswith("nothing: 0/0 (100%, ")


def _row(name, status, **kw) -> Row:
    """A zoo row (report.Row) of ``status`` with ``kw`` for its fields."""
    base = {"family": "gpt", "kind": "lm", "metric": "bpb", "value": None, "lo": None, "hi": None}
    base |= {"interval": "wilson" if status == "ok" else None, "n": None, "error": None}
    base |= dict.fromkeys(("reason", "checkpoint_sha256", "data_sha256", "items"))
    base |= {"seconds": 0.0, "checkpoint": "c", "data": "d", "options": {}}
    return Row.model_validate({"name": name, "status": status, **base, **kw})


def _baseline(value: float) -> BaselineInfo:
    return BaselineInfo(name="unigram", value=value, interval=None, items=None)


def _beats(verdict: str, p: float = 0.01, p_adjusted: float | None = None) -> BeatsBaseline:
    return BeatsBaseline(
        verdict=verdict,
        test="paired permutation",
        p=p,
        delta=0.1,
        interval=(0.05, 0.15),
        n=10,
        p_adjusted=p_adjusted,
    )


def test_zoo_table_has_a_why_column_only_when_a_row_is_not_ok(capsys):
    ok = _row("gpt", "ok", value=1.23456, lo=1.2, hi=1.3, n=10)
    bad = _row("ghost", "error", error={"type": "CheckpointError", "message": "x " * 40})
    report = SimpleNamespace(release="r1", seed=0, rows=[ok])
    assert [c.header for c in zoo_table(report).columns][-1] == "status"
    report.rows.append(bad)
    cols = [c.header for c in zoo_table(report).columns]
    want = ["name", "family", "metric", "value", "95% interval", "baseline", "p (Holm)", "n"]
    want.append("status")
    assert cols == [*want, "why"]
    assert short("CheckpointError: " + "x " * 40) == ("CheckpointError: " + "x " * 40)[:59] + "…"
    console = stdout_console()
    print_report(console, report, "report written to r.json")
    out = capsys.readouterr().out
    assert "1.2346" in out and "[1.2000, 1.3000]" in out
    assert out.splitlines()[-1] == "1 ok, 1 error, 0 skipped; report written to r.json"
    assert f"ghost: CheckpointError: {'x ' * 40}".strip() in " ".join(out.split())


def test_zoo_table_shows_each_rows_baseline_and_verdict():
    from tinyllm.console import baseline_cell

    ok = _row("el", "ok", value=0.9, lo=0.89, hi=0.91, n=10, baseline=_baseline(0.86384))
    ok.beats_baseline = _beats("better")
    assert baseline_cell(ok) == "0.8638 better"
    ok.beats_baseline.verdict = "not distinguishable"  # in words, as the report names it
    assert baseline_cell(ok) == "0.8638 not distinguishable"
    ok.beats_baseline.verdict = "worse"
    assert baseline_cell(ok) == "0.8638 worse"
    ok.beats_baseline = None
    assert baseline_cell(ok) == "0.8638"
    assert baseline_cell(_row("old", "ok", value=1.0, lo=1.0, hi=1.0, n=1)) == "-"


def test_zoo_table_shows_the_verdicts_p_and_holm_p_and_interval_warnings_as_footnotes(capsys):
    from tinyllm.console import baseline_p_cell

    blocks = "no unit boundaries: 11 contiguous blocks of 19 items stand in for the units"
    rows = []
    for name, p, warning in (("gpt", 0.03, blocks), ("ngram", 0.0004, blocks), ("el", 0.2, None)):
        r = _row(name, "ok", value=0.9, lo=0.89, hi=0.91, n=10, interval_warning=warning)
        r.baseline = _baseline(0.5)
        r.beats_baseline = _beats("better", p, min(1.0, 3 * p))
        rows.append(r)
    rows.append(_row("seq", "ok", value=0.4, lo=0.1, hi=0.7, n=8, interval_warning="8 units"))
    assert [baseline_p_cell(r) for r in rows] == [
        "0.030 (0.090)",
        "4.0e-04 (0.001)",
        "0.200 (0.600)",
        "-",
    ]
    rows[2].beats_baseline.p_adjusted = None  # a report written before units: the raw p alone
    assert baseline_p_cell(rows[2]) == "0.200"
    print_report(stdout_console(), SimpleNamespace(release="r1", seed=0, rows=rows), "done")
    lines = capsys.readouterr().out.splitlines()
    cells = {
        ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:-1]]
        for ln in lines
        if "│" in ln
    }
    assert cells["gpt"][3:6] == ["[0.8900, 0.9100] (1)", "0.5000 better", "0.030 (0.090)"]
    assert cells["ngram"][3:6] == ["[0.8900, 0.9100] (1)", "0.5000 better", "4.0e-04 (0.001)"]
    assert cells["el"][3:6] == ["[0.8900, 0.9100]", "0.5000 better", "0.200"]
    assert cells["seq"][3:6] == ["[0.1000, 0.7000] (2)", "-", "-"]
    # one footnote per distinct warning, under the table, one line each; no column for them
    assert [ln.rstrip() for ln in lines[-3:]] == [
        f"(1) {blocks}",
        "(2) 8 units",
        "4 ok, 0 error, 0 skipped; done",
    ]
    assert max(len(ln) for ln in lines) <= 140


def test_the_widest_demo_zoo_table_fits_the_piped_width_one_line_per_row(capsys):
    """The demo zoo's longest names, its widest metric and family, a footnoted interval and the
    longest verdict in words: every row stays on one line of at most PIPED_WIDTH columns."""
    from tinyllm import train
    from tinyllm.console import PIPED_WIDTH

    names = [n for name, r in train.default_recipes().items() for n in r.entries_of(name)]
    rows = []
    for name in sorted(names, key=len)[-3:]:
        wide = {"family": "transformer", "metric": "exact_match", "n": 123456}
        r = _row(name, "ok", **wide, value=0.88012, lo=0.86201, hi=0.89512)
        r.interval_warning = "8 units"
        r.baseline = _baseline(0.86384)
        r.beats_baseline = _beats("not distinguishable", 4e-4, 1e-3)
        rows.append(r)
    print_report(stdout_console(), SimpleNamespace(release="r1", seed=0, rows=rows), "done")
    lines = capsys.readouterr().out.splitlines()
    body = [ln for ln in lines if ln.startswith("│")]
    assert len(body) == 3  # no cell wrapped onto a second line
    assert all("0.8638 not distinguishable" in ln for ln in body)
    assert max(len(ln) for ln in lines) <= PIPED_WIDTH
