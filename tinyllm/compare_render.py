"""How a comparison reads: :func:`compare_markdown` for a Prefect artifact or a PR comment,
:func:`compare_table` for the terminal, :func:`summary_line`, and the number formats every table
uses (:func:`format_number`, :func:`format_p`, :func:`mde_text`).

A module of its own because it is a concept of its own and sits below the comparison: it reads
a finished comparison (the :class:`tinyllm.comparison.Comparison` that
:func:`tinyllm.compare.compare_reports` returns, or one read from the store) and imports nothing
but :mod:`tinyllm.metrics` and that type, so the console, the dashboard and the CLI format
numbers and comparisons without loading numpy, scipy or the schemas."""

from __future__ import annotations

from typing import Any

from tinyllm import metrics
from tinyllm.comparison import Comparison, ComparisonRow


def format_number(x: float | None, signed: bool = False) -> str:
    """``0.1234`` (4 decimals; ``+0.1234`` signed), ``-`` for None: every number in the tables."""
    if x is None:
        return "-"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def format_p(p: float | None) -> str:
    """A p-value: ``0.012`` (3 decimals), ``1.0e-04`` below 0.001, ``-`` for None."""
    if p is None:
        return "-"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def mde_text(mde: float | None) -> str:
    """The smallest change a tested row could see (its ``mde``), ``±0.0123`` (4 decimals), ``-``
    without one (a row not tested, a comparison stored before units)."""
    return "-" if mde is None else f"±{mde:.4f}"


def verdict_text(r: ComparisonRow) -> str:
    """A row's verdict with what an "unchanged" could have seen: ``unchanged (could see
    ±0.0123)``; the other verdicts as they are."""
    if r.verdict == "unchanged" and r.mde is not None:
        return f"unchanged (could see {mde_text(r.mde)})"
    return r.verdict


def _holm_m(cmp: Comparison) -> int:
    return sum(1 for r in cmp.rows if r.p_adjusted is not None)


def _delta_text(r: ComparisonRow) -> str:
    if r.delta is None:
        return "-"
    return (
        f"{format_number(r.delta, True)} [{format_number(r.lo, True)}, {format_number(r.hi, True)}]"
    )


def _metric_text(r: ComparisonRow) -> str:
    return (r.metric or "-") + metrics.ARROW.get(r.direction, "")


def summary_line(cmp: Comparison) -> str:
    """``r2 vs r1: 1 regressed, 2 unchanged, ...`` (zero counts left out)."""
    parts = [f"{n} {v}" for v, n in cmp.summary.items() if n]
    return f"{cmp.current} vs {cmp.previous}: " + (", ".join(parts) or "no rows")


def compare_markdown(cmp: Comparison) -> str:
    """A markdown summary of a comparison (for a Prefect artifact or a PR comment)."""
    conf = round(cmp.confidence * 100)
    spearman = ""
    if any(_asymmetric(r) for r in cmp.rows):
        spearman = (
            " (spearman rows: the PERM-BOTH permutation test, and a paired bootstrap interval, "
            "on the pairs both releases cover)"
        )
    holm = ""
    if cmp.adjustment == "holm":
        holm = (
            f"; p over each row's sampling units, Holm-adjusted over the {_holm_m(cmp)} rows "
            "tested (the verdict reads the adjusted p); mde: the smallest change each row could "
            "see (80% power)"
        )
    lines = [
        f"### {summary_line(cmp)}",
        "",
        f"Paired sign-flip permutation test ({cmp.n_perm} permutations, seed {cmp.seed}) "
        f"at alpha = {cmp.alpha}; delta = {cmp.current} - {cmp.previous} with its "
        f"{conf}% t interval{spearman}{holm}. ↓ lower is better, ↑ higher is better.",
        "",
        f"| entry | metric | {cmp.previous} | {cmp.current} | delta [{conf}% CI] | p "
        "| p (Holm) | mde | n | verdict |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in cmp.rows:
        verdict = r.verdict
        if verdict in ("regressed", "improved"):
            verdict = f"**{verdict}**"
        elif r.reason:
            verdict = f"{verdict}: {r.reason}"
        if r.note:
            verdict = f"{verdict} ({r.note})"
        cells = [
            f"`{r.name}`",
            _metric_text(r),
            format_number(r.previous_value),
            format_number(r.current_value),
            _delta_text(r),
            format_p(r.p),
            format_p(r.p_adjusted),
            mde_text(r.mde),
            "-" if r.n is None else str(r.n),
            verdict,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _asymmetric(r: ComparisonRow) -> bool:
    """Whether a tested row's interval is the (asymmetric) bootstrap one: Spearman rows."""
    return r.delta is not None and r.metric == metrics.SPEARMAN.name


_STYLE = {"improved": "green", "regressed": "bold red", "not comparable": "yellow"}


def compare_table(cmp: Comparison) -> Any:
    """A rich Table of a comparison, for the terminal (fits 80 columns).

    The t interval is symmetric, so it is shown as ``delta ± half-width``; a Spearman row's
    bootstrap interval is not, so its cell is ``[lo, hi]`` (3 decimals, the same width) and its
    delta goes in the caption below the table, with the reasons. The ``p`` column is the
    Holm-adjusted p the verdict reads (``p (Holm)``; a comparison stored before Holm: each row's
    own p); the caption gives each tested row's own p and what it could see
    (:func:`mde_text`); ``n`` is in the JSON and the markdown.
    """
    # imported here: only the terminal table needs rich, and it costs start-up time
    from rich import box
    from rich.table import Table
    from rich.text import Text

    conf = round(cmp.confidence * 100)
    holm = cmp.adjustment == "holm"
    notes = []
    for r in cmp.rows:
        if r.reason:
            notes.append(f"{r.name}: {r.verdict}: {r.reason}")
            continue
        if _asymmetric(r):
            notes.append(
                f"{r.name}: delta {r.delta:+.4f}, {conf}% paired bootstrap interval "
                f"[{r.lo:+.4f}, {r.hi:+.4f}] on the {r.n} pairs both releases cover"
            )
        if holm and r.p_adjusted is not None:
            notes.append(
                f"{r.name}: {verdict_text(r)}; p {format_p(r.p)} alone, "
                f"{format_p(r.p_adjusted)} with Holm over {_holm_m(cmp)} rows"
                + (f"; {r.note}" if r.note else "")
            )
    table = Table(
        title=summary_line(cmp),
        title_justify="left",
        caption="\n".join(notes) or None,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    # a long entry name folds onto more lines; the other columns never wrap, so the numbers are
    # never shrunk to "…" (entry names may have 64 characters; the table is for 80 columns)
    table.add_column("entry", justify="left", overflow="fold")
    for col, justify in (
        ("verdict", "left"),
        ("metric", "left"),
        (cmp.previous, "right"),
        (cmp.current, "right"),
        (f"delta ± {conf}% CI", "right"),
        ("p (Holm)" if holm else "p", "right"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)
    for r in cmp.rows:
        delta = "-"
        if r.delta is not None and _asymmetric(r):
            delta = f"[{r.lo:+.3f}, {r.hi:+.3f}]"
        elif r.delta is not None:
            delta = f"{r.delta:+.4f} ± {(r.hi - r.lo) / 2:.4f}"
        table.add_row(
            r.name,
            Text(r.verdict, style=_STYLE.get(r.verdict, "")),
            _metric_text(r),
            format_number(r.previous_value),
            format_number(r.current_value),
            delta,
            format_p(r.p_adjusted if holm else r.p),
        )
    return table
