"""What the ``tinyllm`` command and the demo runner print: progress, tables, one-line errors.

* :class:`Progress` -- the one progress helper: counted work (tokens, items, rows of a comparison)
  as a live bar on a terminal or a throttled plain line elsewhere, the zoo's one line per scored
  entry (:meth:`Progress.rows`) and the training of the demo zoo (:meth:`Progress.training`);
* :func:`stdout_console` -- the console tables go to (:data:`PIPED_WIDTH` columns when piped);
* :func:`interval_table`, :func:`zoo_table`, :func:`print_report`, :func:`print_suite_run` --
  a value with its 95% interval, a zoo report, the EvalSuite flow's report and comparison;
* :func:`error_line` -- any exception as one ``error: ...`` line; :func:`warning_line` -- any
  Python warning as one ``warning: ...`` line.

Everything is printed with rich; progress and errors go to stderr, results to stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tinyllm.compare_render import compare_table, format_p
from tinyllm.comparison import Comparison

STATUS_STYLE = {"ok": "green", "error": "red", "skipped": "yellow"}
"""The colour of a row's status in the zoo table."""


PIPED_WIDTH = 150
"""Columns of the console when stdout is not a terminal: the zoo table of the demo zoo (names up
to 20 characters, the interval with its footnote mark, the baseline's verdict in words with its
p and Holm p) is at most 148 wide."""


def stdout_console() -> Console:
    """The console results are printed on: rich's own width on a terminal,
    :data:`PIPED_WIDTH` columns when piped (``make demo | tee``, CI logs), where rich's default
    of 80 would cut the tables."""
    return Console() if sys.stdout.isatty() else Console(width=PIPED_WIDTH)


class Progress:
    """Progress of long work on stderr; ``quiet`` turns it off.

    Counted work (``with Progress("scoring tokens", n) as bar: ... bar.update(done)``): a
    terminal gets a live rich bar; anything else (a pipe, a CI log, ``make``) gets a plain line
    ``<description>: <done>/<total> (<pct>%, <seconds> s)`` when work starts, then at most one
    every :attr:`every` seconds, then when it ends: a live bar is invisible there, and a silent
    9-minute run looks hung. ``clock`` is the time source in seconds (monotonic by default).
    """

    every = 10.0
    """Seconds between two plain progress lines of one piece of work."""

    def __init__(
        self,
        description: str,
        total: int = 0,
        quiet: bool = False,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.description, self.total, self.quiet = description, max(int(total), 0), quiet
        self._clock = clock
        self._t0 = self._last = clock()
        self._done = 0
        self._err = Console(stderr=True)
        self._bar: Any = None

    def __enter__(self) -> Progress:
        if self.quiet:
            return self
        if self._err.is_terminal:
            from rich.progress import (  # only a terminal draws a bar
                BarColumn,
                MofNCompleteColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar  # only a terminal draws a bar

            self._bar = Bar(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self._err,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total)
        else:
            self._line()
        return self

    def _line(self) -> None:
        pct = 100.0 * self._done / self.total if self.total else 100.0
        took = self._clock() - self._t0
        self._err.print(
            f"{self.description}: {self._done}/{self.total} ({pct:.0f}%, {took:.0f} s)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )

    def update(self, done: int, total: int | None = None) -> None:
        """Record ``done`` units of ``total``: the callback the instrument calls."""
        self._done = int(done)
        if total is not None:
            self.total = int(total)
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self._done, total=self.total)
        elif self._clock() - self._last >= self.every:
            self._last = self._clock()
            self._line()

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif not self.quiet and exc[0] is None:
            self._line()

    @staticmethod
    def rows(quiet: bool = False) -> Callable[[int, int, Any], None]:
        """:func:`tinyllm.eval.zoo.run_zoo`'s ``progress``: ``[i/total] <name>: <status> (<s> s)``
        on stderr as each entry is scored, ``r`` its :class:`tinyllm.report.Row`; nothing with
        ``quiet``."""
        err = Console(stderr=True)

        def row(i: int, total: int, r: Any) -> None:
            if not quiet:
                err.print(
                    f"[{i}/{total}] {r.name}: {r.status} ({r.seconds:.1f} s)",
                    markup=False,
                    highlight=False,
                )

        return row

    @classmethod
    def training(
        cls, quiet: bool = False, *, clock: Callable[[], float] = time.monotonic
    ) -> bool | Callable[[str, int, int, float], None]:
        """:func:`tinyllm.train.build_zoo`'s ``progress``: False with ``quiet``, True (its own
        live bars) on a terminal, else a plain ``training <name>: step <i>/<n>, loss <l>`` line
        per model when it starts and ends, and at most every :attr:`every` seconds between."""
        if quiet:
            return False
        err = Console(stderr=True)
        if err.is_terminal:
            return True
        last: dict[str, float] = {}

        def line(name: str, step: int, total: int, loss: float) -> None:
            now = clock()
            if name not in last or step >= total or now - last[name] >= cls.every:
                last[name] = now
                err.print(
                    f"training {name}: step {step}/{total}, loss {loss:.4f}",
                    markup=False,
                    highlight=False,
                )

        return line


def interval_table(title: str, rows: list[tuple[str, dict, str]], caption: str) -> Table:
    """A table of ``(metric, {"value", "lo", "hi"}, unit)`` rows, 4 decimals each."""
    table = Table(title=title, caption=caption)
    for col in ("metric", "value", "95% lo", "95% hi", "unit"):
        table.add_column(col, justify="left" if col in ("metric", "unit") else "right")
    for name, iv, unit in rows:
        table.add_row(name, f"{iv['value']:.4f}", f"{iv['lo']:.4f}", f"{iv['hi']:.4f}", unit)
    return table


def short(text: str, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    one = " ".join(str(text).split())
    return one if len(one) <= width else one[: width - 1] + "…"


def row_note(r: Any) -> str:
    """Why a report row (a :class:`tinyllm.report.Row`) has no value: the error's type and
    message, or the skip reason."""
    if r.status == "error" and r.error is not None:
        return f"{r.error.type}: {r.error.message}"
    if r.status == "skipped":
        return f"skipped: {r.reason}"
    return ""


def baseline_cell(r: Any) -> str:
    """A row's baseline in the zoo table: its value (4 decimals) and the verdict of the model
    against it in words, as the report names it (``"0.8638 better"``, ``"0.8638 worse"``,
    ``"0.8638 not distinguishable"``: the Holm-adjusted p over the report's rows >= 0.05); ``-``
    without a baseline. ``r``: a :class:`tinyllm.report.Row`."""
    b, v = r.baseline, r.beats_baseline
    if b is None:
        return "-"
    return f"{b.value:.4f}" + ("" if v is None else f" {v.verdict}")


def baseline_p_cell(r: Any) -> str:
    """The p of a row's verdict against its baseline and, in parentheses, its Holm-adjusted p
    over the report's rows, the one the verdict reads (docs/definitions.md, Holm):
    ``"0.030 (0.060)"``; the raw p alone for a report written before units (no adjusted p);
    ``-`` without a verdict. p-values as :func:`tinyllm.compare_render.format_p` writes them.
    ``r``: a :class:`tinyllm.report.Row`."""
    v = r.beats_baseline
    if v is None:
        return "-"
    return format_p(v.p) + ("" if v.p_adjusted is None else f" ({format_p(v.p_adjusted)})")


def interval_notes(rows: list[Any]) -> dict[str, int]:
    """The distinct ``interval_warning`` texts of ``rows`` (:class:`tinyllm.report.Row`, in row
    order), each numbered from 1: the zoo table's footnotes. Rows written before units have
    none."""
    notes: dict[str, int] = {}
    for r in rows:
        if r.interval_warning:
            notes.setdefault(" ".join(r.interval_warning.split()), len(notes) + 1)
    return notes


def interval_cell(r: Any, notes: dict[str, int]) -> str:
    """A row's 95% interval, ``[1.2000, 1.3000]``, marked ``(1)`` with the number of its
    footnote when the interval has a warning (:func:`interval_notes`); ``-`` without one."""
    if r.lo is None:
        return "-"
    w = r.interval_warning
    mark = f" ({notes[' '.join(w.split())]})" if w else ""
    return f"[{r.lo:.4f}, {r.hi:.4f}]{mark}"


def zoo_table(report: Any) -> Table:
    """A zoo report (:class:`tinyllm.report.Report`) as a table: one line per row, its trivial
    baseline with the verdict (:func:`baseline_cell`), the verdict's p and Holm-adjusted p
    (:func:`baseline_p_cell`), and a ``why`` column (the reason, cut to 60 characters) when any
    row is not ok. An interval with a warning (no unit boundaries, few units) is marked with a
    number, and the warning is printed under the table as that footnote."""
    title = f"zoo report (release {report.release or '-'}, seed {report.seed})"
    notes = interval_notes(report.rows)
    caption = "\n".join(f"({i}) {escape(w)}" for w, i in notes.items()) or None
    table = Table(title=title, caption=caption, caption_justify="left")
    why = any(row_note(r) for r in report.rows)
    cols = ("name", "family", "metric", "value", "95% interval", "baseline", "p (Holm)", "n")
    for col in (*cols, "status", "why") if why else (*cols, "status"):
        table.add_column(col, justify="right" if col in ("value", "n") else "left")
    for r in report.rows:
        cells = [
            r.name,
            r.family,
            r.metric or "-",
            "-" if r.value is None else f"{r.value:.4f}",
            interval_cell(r, notes),
            baseline_cell(r),
            baseline_p_cell(r),
            "-" if r.n is None else str(r.n),
            f"[{STATUS_STYLE[r.status]}]{r.status}[/]",
        ]
        if why:
            cells.append(escape(short(row_note(r))))
        table.add_row(*cells)
    return table


def print_report(console: Console, report: Any, path_note: str) -> None:
    """The zoo table, then each error / skipped row's full reason, then the counts and
    ``path_note`` (where the report went)."""
    console.print(zoo_table(report))
    for r in report.rows:
        if r.status != "ok":
            colour = "red" if r.status == "error" else "yellow"
            console.print(f"[{colour}]{r.name}[/]: {escape(row_note(r))}", highlight=False)
    counts = {s: sum(r.status == s for r in report.rows) for s in ("ok", "error", "skipped")}
    console.print(
        f"{counts['ok']} ok, {counts['error']} error, {counts['skipped']} skipped; {path_note}"
    )


def print_suite_run(console: Console, out: dict, release: str) -> None:
    """The result of one EvalSuite run (``{"run_id", "report", "compare", "store"}``, as the
    flow and :func:`tinyllm.publish.publish_run` return it): the release's report, where the
    run was written, and its comparison with the previous release (or that there is none)."""
    from tinyllm.report import Report  # numpy and scipy: the CLI starts without them

    where = f"{out['store'].rstrip('/')}/releases/{release}/"
    report = Report.model_validate(out["report"])
    print_report(console, report, f"run {out['run_id']} written to {where}")
    if out["compare"] is not None:  # the flow's result: the compare.json document
        console.print(compare_table(Comparison.model_validate(out["compare"])))
    else:
        console.print(f"release {release}: no earlier release in {out['store']} to compare with")


OWN_ERRORS = ("ManifestError", "CheckpointError", "TokenFileError", "ReportSchemaError")
"""Our own error types besides StoreError: their messages already name the file or key and say
"expected X, got Y", so :func:`error_line` leaves the type out."""


def error_line(exc: BaseException) -> str:
    """One line for any exception: ``error: <where>: <Type>: <message>``.

    ``<where>`` are the exception's notes (the store adds the store and key it was working
    on, see tinyllm/store/); our own errors (StoreError, :data:`OWN_ERRORS`) already name their
    file or key and say "expected X, got Y", so their type is left out. Newlines are folded, so
    the whole error is one line.

    Example: ``error_line(ValueError("a\\nb"))`` -> ``"error: ValueError: a b"``.
    """
    from tinyllm.store import StoreError  # on an error only: the store's import is not free

    notes = [n for n in getattr(exc, "__notes__", ()) if isinstance(n, str)]
    msg = str(exc) or repr(exc)
    own = isinstance(exc, StoreError) or type(exc).__name__ in OWN_ERRORS
    parts = [*notes, msg if own else f"{type(exc).__name__}: {msg}"]
    return "error: " + " ".join(": ".join(parts).split())


def warning_line(message: Warning | str) -> str:
    """One line for a Python warning: ``warning: <message>``, newlines folded, no category,
    file, line or source.

    Example: ``warning_line(UserWarning("cut 3 tokens\\nfrom the left"))`` ->
    ``"warning: cut 3 tokens from the left"``.
    """
    return "warning: " + " ".join(str(message).split())
