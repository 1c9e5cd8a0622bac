"""How a comparison reads: compare_markdown, compare_table and summary_line, each checked
against a rendering written out by hand (tinyllm/compare.py's rendering half)."""

from __future__ import annotations

from tinyllm.compare import parse_compare
from tinyllm.compare_render import compare_markdown, compare_table, summary_line
from tinyllm.comparison import Comparison

# One hand-built compare.json with every kind of row, and its expected rendering written out by
# hand (column by column: 4 decimals, signed deltas, p as 3 decimals or 1.0e-04 below 0.001, the
# verdict word, the reason, '-' for a missing number, '|' escaped in Markdown).


def hand_doc() -> dict:
    """The hand-built compare.json document."""

    def row(name, verdict, metric, direction, prev, cur, **kw):
        r = {
            "name": name,
            "verdict": verdict,
            "reason": None,
            "metric": metric,
            "direction": direction,
            "previous_value": prev,
            "current_value": cur,
            "delta": None,
            "lo": None,
            "hi": None,
            "p": None,
            "n": None,
        }
        r.update(kw)
        return r

    rows = [
        row(
            "gpt",
            "regressed",
            "bpb",
            "lower",
            1.23456,
            1.3067,
            delta=0.07214,
            lo=0.0651,
            hi=0.07918,
            p=0.0004998,
            n=2000,
        ),
        row(
            "clf",
            "improved",
            "acc",
            "higher",
            0.5,
            0.65,
            delta=0.15,
            lo=0.1,
            hi=0.2,
            p=0.001,
            n=400,
        ),
        row(
            "mlm",
            "unchanged",
            "acc",
            "higher",
            0.81234,
            0.80001,
            delta=-0.01233,
            lo=-0.04,
            hi=0.01534,
            p=0.5,
            n=100,
        ),
        row(
            "w2v",
            "not comparable",
            "spearman",
            "higher",
            0.7,
            0.71,
            reason="no per-item scores in either release (items is null)",
        ),
        row(
            "pipe",
            "not comparable",
            None,
            None,
            None,
            None,
            reason="current status is error (ValueError: a|b)",
        ),
        row("new", "added", "acc", "higher", None, 0.9, reason="only in the current release r2"),
        row("old", "removed", "bpb", "lower", 2.0, None, reason="only in the previous release r1"),
    ]
    summary = {"improved": 1, "regressed": 1, "unchanged": 1, "not comparable": 2, "added": 1}
    summary["removed"] = 1
    cmp = {
        "schema_version": 1,
        "previous": "r1",
        "current": "r2",
        "previous_created_at": "2026-11-01T18:00:00Z",
        "current_created_at": "2026-11-02T18:00:00Z",
        "test": "paired_sign_flip_permutation",
        "interval": "student_t_paired",
        "confidence": 0.9,
        "alpha": 0.1,
        "n_perm": 2000,
        "seed": 3,
        "rows": rows,
        "summary": summary,
    }
    return cmp


def hand_cmp() -> Comparison:
    """The hand-built comparison, read as the store reads one (validated)."""
    return parse_compare(hand_doc())


SUMMARY = "r2 vs r1: 1 improved, 1 regressed, 1 unchanged, 2 not comparable, 1 added, 1 removed"

MARKDOWN = f"""\
### {SUMMARY}

Paired sign-flip permutation test (2000 permutations, seed 3) at alpha = 0.1; delta = r2 - r1 \
with its 90% t interval. ↓ lower is better, ↑ higher is better.

| entry | metric | r1 | r2 | delta [90% CI] | p | p (Holm) | mde | n | verdict |
|---|---|---:|---:|---|---:|---:|---:|---:|---|
| `gpt` | bpb ↓ | 1.2346 | 1.3067 | +0.0721 [+0.0651, +0.0792] | 5.0e-04 | - | - | 2000 | **regressed** |
| `clf` | acc ↑ | 0.5000 | 0.6500 | +0.1500 [+0.1000, +0.2000] | 0.001 | - | - | 400 | **improved** |
| `mlm` | acc ↑ | 0.8123 | 0.8000 | -0.0123 [-0.0400, +0.0153] | 0.500 | - | - | 100 | unchanged |
| `w2v` | spearman ↑ | 0.7000 | 0.7100 | - | - | - | - | - | \
not comparable: no per-item scores in either release (items is null) |
| `pipe` | - | - | - | - | - | - | - | - | not comparable: current status is error (ValueError: a\\|b) |
| `new` | acc ↑ | - | 0.9000 | - | - | - | - | - | added: only in the current release r2 |
| `old` | bpb ↓ | 2.0000 | - | - | - | - | - | - | removed: only in the previous release r1 |
"""


def test_summary_line_counts_every_verdict_and_leaves_zeros_out():
    cmp = hand_cmp()
    assert summary_line(cmp) == SUMMARY
    two = cmp.model_copy(update={"summary": dict.fromkeys(cmp.summary, 0) | {"regressed": 2}})
    assert summary_line(two) == "r2 vs r1: 2 regressed"
    none = cmp.model_copy(update={"summary": dict.fromkeys(cmp.summary, 0)})
    assert summary_line(none) == "r2 vs r1: no rows"


def test_markdown_rendering_is_exactly_the_hand_written_one():
    # a comparison stored before units (schema_version 1): no adjusted p, no mde
    assert compare_markdown(hand_cmp()) == MARKDOWN


# the terminal table at 80 columns: delta +- the half-width of the symmetric interval, numbers
# right-aligned, reasons in the caption below (trailing blanks of each line are not compared)
TABLE = """\
r2 vs r1: 1 improved, 1 regressed, 1 unchanged, 2 not comparable, 1 added, 1
removed

 entry  verdict         metric          r1      r2    delta ± 90% CI        p
 ────────────────────────────────────────────────────────────────────────────
 gpt    regressed       bpb ↓       1.2346  1.3067  +0.0721 ± 0.0070  5.0e-04
 clf    improved        acc ↑       0.5000  0.6500  +0.1500 ± 0.0500    0.001
 mlm    unchanged       acc ↑       0.8123  0.8000  -0.0123 ± 0.0277    0.500
 w2v    not comparable  spearman ↑  0.7000  0.7100                 -        -
 pipe   not comparable  -                -       -                 -        -
 new    added           acc ↑            -  0.9000                 -        -
 old    removed         bpb ↓       2.0000       -                 -        -

w2v: not comparable: no per-item scores in either release (items is null)
pipe: not comparable: current status is error (ValueError: a|b)
new: added: only in the current release r2
old: removed: only in the previous release r1
"""


def render_table(cmp: Comparison, *, styles: bool = False) -> str:
    import io

    from rich.console import Console

    kw = {"force_terminal": True, "color_system": "standard"} if styles else {}
    console = Console(width=80, record=True, file=io.StringIO(), **kw)
    console.print(compare_table(cmp))
    text = console.export_text(styles=styles)
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def test_table_rendering_is_exactly_the_hand_written_one():
    assert render_table(hand_cmp()) == TABLE


def test_table_colours_the_verdicts_a_reader_must_notice():
    import re

    text = render_table(hand_cmp(), styles=True)
    # the verdict cell (padded to the column) in its colour; ESC[0m ends the style
    assert re.search(r" gpt    \x1b\[1;31mregressed +\x1b\[0m  bpb", text)  # bold red
    assert re.search(r" clf    \x1b\[32mimproved +\x1b\[0m  acc", text)  # green
    assert len(re.findall(r"\x1b\[33mnot comparable\x1b\[0m", text)) == 2  # yellow
    # unchanged / added / removed are plain text
    for name, word in (("mlm", "unchanged"), ("new", "added"), ("old", "removed")):
        assert re.search(rf"\n {name} +{word} +[a-z]", text)


# entry names may have 64 characters: at 80 columns the entry column folds (7 = 80 - the other
# columns' 73), every other column keeps its width (no number is cut to "…")
LONG_NAMES_TABLE = (
    """\
r2 vs r1: 1 improved, 1 regressed, 1 unchanged, 2 not comparable, 1 added, 1
removed

 entry    verdict         metric          r1      r2    delta ± 90% CI        p
 ──────────────────────────────────────────────────────────────────────────────
 gpt-xxx  regressed       bpb ↓       1.2346  1.3067  +0.0721 ± 0.0070  5.0e-04
"""
    + " xxxxxxx\n" * 8
    + """\
 x
 a-class  improved        acc ↑       0.5000  0.6500  +0.1500 ± 0.0500    0.001
 ifier-w
 ith-a-l
 ong-nam
 e
 mlm      unchanged       acc ↑       0.8123  0.8000  -0.0123 ± 0.0277    0.500
 w2v      not comparable  spearman ↑  0.7000  0.7100                 -        -
 pipe     not comparable  -                -       -                 -        -
 new      added           acc ↑            -  0.9000                 -        -
 old      removed         bpb ↓       2.0000       -                 -        -

w2v: not comparable: no per-item scores in either release (items is null)
pipe: not comparable: current status is error (ValueError: a|b)
new: added: only in the current release r2
old: removed: only in the previous release r1
"""
)


def test_table_keeps_every_number_whole_when_a_name_is_long():
    doc = hand_doc()
    doc["rows"][0]["name"] = "gpt-" + "x" * 60
    doc["rows"][1]["name"] = "a-classifier-with-a-long-name"
    assert render_table(parse_compare(doc)) == LONG_NAMES_TABLE


def holm_cmp() -> Comparison:
    """hand_cmp as compare_reports writes it now (schema_version 2): the three tested rows with
    their Holm-adjusted p over m = 3 (sorted 5.0e-04, 0.001, 0.5 times 3, 2, 1), se, mde, units,
    method, and a note on the row whose previous release was stored before units."""
    cmp = hand_doc()
    cmp.update(schema_version=2, adjustment="holm")
    del cmp["interval"]
    extra = {
        "gpt": (0.0014994, 0.0101, 0.0036, None),
        "clf": (0.002, 0.0721, 0.0257, None),
        "mlm": (
            0.5,
            0.04,
            0.0143,
            "units unknown in the previous release: compared at the item level",
        ),
    }
    for r in cmp["rows"]:
        p_adj, mde, se, note = extra.get(r["name"], (None, None, None, None))
        tested = p_adj is not None
        r.update(p_adjusted=p_adj, mde=mde, se=se, note=note)
        r.update(n_units=r["n"] if tested else None, method="paired_t" if tested else None)
    return parse_compare(cmp)


def test_markdown_shows_both_p_values_the_mde_and_the_notes():
    md = compare_markdown(holm_cmp())
    assert (
        "Paired sign-flip permutation test (2000 permutations, seed 3) at alpha = 0.1; delta = "
        "r2 - r1 with its 90% t interval; p over each row's sampling units, Holm-adjusted over "
        "the 3 rows tested (the verdict reads the adjusted p); mde: the smallest change each row "
        "could see (80% power). ↓ lower is better, ↑ higher is better."
    ) in md
    table = md.split("\n\n")[2].splitlines()
    assert table[:5] == [
        "| entry | metric | r1 | r2 | delta [90% CI] | p | p (Holm) | mde | n | verdict |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|",
        "| `gpt` | bpb ↓ | 1.2346 | 1.3067 | +0.0721 [+0.0651, +0.0792] | 5.0e-04 | 0.001 "
        "| ±0.0101 | 2000 | **regressed** |",
        "| `clf` | acc ↑ | 0.5000 | 0.6500 | +0.1500 [+0.1000, +0.2000] | 0.001 | 0.002 "
        "| ±0.0721 | 400 | **improved** |",
        "| `mlm` | acc ↑ | 0.8123 | 0.8000 | -0.0123 [-0.0400, +0.0153] | 0.500 | 0.500 "
        "| ±0.0400 | 100 | unchanged (units unknown in the previous release: compared at the "
        "item level) |",
    ]
    assert table[5] == (
        "| `w2v` | spearman ↑ | 0.7000 | 0.7100 | - | - | - | - | - | not comparable: no "
        "per-item scores in either release (items is null) |"
    )


HOLM_TABLE = """\
r2 vs r1: 1 improved, 1 regressed, 1 unchanged, 2 not comparable, 1 added, 1
removed

 entry  verdict         metric          r1      r2    delta ± 90% CI  p (Holm)
 ─────────────────────────────────────────────────────────────────────────────
 gpt    regressed       bpb ↓       1.2346  1.3067  +0.0721 ± 0.0070     0.001
 clf    improved        acc ↑       0.5000  0.6500  +0.1500 ± 0.0500     0.002
 mlm    unchanged       acc ↑       0.8123  0.8000  -0.0123 ± 0.0277     0.500
 w2v    not comparable  spearman ↑  0.7000  0.7100                 -         -
 pipe   not comparable  -                -       -                 -         -
 new    added           acc ↑            -  0.9000                 -         -
 old    removed         bpb ↓       2.0000       -                 -         -

gpt: regressed; p 5.0e-04 alone, 0.001 with Holm over 3 rows
clf: improved; p 0.001 alone, 0.002 with Holm over 3 rows
mlm: unchanged (could see ±0.0400); p 0.500 alone, 0.500 with Holm over 3 rows;
units unknown in the previous release: compared at the item level
w2v: not comparable: no per-item scores in either release (items is null)
pipe: not comparable: current status is error (ValueError: a|b)
new: added: only in the current release r2
old: removed: only in the previous release r1
"""


def test_the_table_reads_the_holm_p_and_the_caption_each_rows_own():
    assert render_table(holm_cmp()) == HOLM_TABLE


def test_a_compare_json_document_reads_as_its_comparison():
    # the EvalSuite flow returns its comparison as JSON, which the console reads back as this
    cmp = Comparison.model_validate(hand_doc())
    assert summary_line(cmp) == SUMMARY
    assert compare_markdown(cmp) == MARKDOWN
    assert render_table(cmp) == TABLE
