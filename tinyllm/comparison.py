"""The comparison of two releases as a type: :class:`Comparison` and its :class:`ComparisonRow`,
field for field the document ``compare.schema.json`` describes (tinyllm/schemas/).

:func:`tinyllm.compare.compare_reports` builds one; :func:`tinyllm.compare.parse_compare` reads one
back from its JSON (validated against the schema first); :meth:`Comparison.to_json` is the
compare.json document. Everything between those two boundaries -- the renderings, history,
the dashboard, exports, trackers, the sweep summary -- reads attributes.

A field the schema makes optional (the ones comparisons stored with schema_version 1 lack:
``adjustment``, the rows' ``p_adjusted``, ``n_units``, ``method``, ``se``, ``mde``, ``note``;
``interval``, which only they have) is None when absent and is written back only when it was
given, so a document read and written again keeps its bytes. Numbers keep their JSON type (an
integer stays an integer).

A module of its own below the comparison and its rendering: it imports only pydantic, so
:mod:`tinyllm.compare_render` and the console read the type without numpy or the schemas.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

Verdict = Literal["improved", "regressed", "unchanged", "not comparable", "added", "removed"]
VERDICTS: tuple[str, ...] = get_args(Verdict)
TESTED = ("improved", "regressed", "unchanged")
"""The verdicts of a row that was tested (a ``p``); the others carry a ``reason``."""

Number = float | int
"""A JSON number: an integer read back stays one (its bytes written again are the same)."""


class ComparisonRow(BaseModel):
    """One entry's row of a comparison (compare.schema.json's ``row``): its verdict, the two
    values, ``delta = current - previous`` with its interval ``[lo, hi]``, the raw and the
    Holm-adjusted p, ``n`` paired items over ``n_units`` units, ``se`` and ``mde`` in the
    metric's units; ``reason`` says why a row was not tested."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    verdict: Verdict
    reason: str | None
    metric: str | None
    direction: Literal["lower", "higher"] | None
    previous_value: Number | None
    current_value: Number | None
    delta: Number | None
    lo: Number | None
    hi: Number | None
    p: Number | None
    n: int | None
    p_adjusted: Number | None = None
    n_units: int | None = None
    method: Literal["paired_t", "paired_bootstrap"] | None = None
    se: Number | None = None
    mde: Number | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as compare.json holds it: the fields that were given, in the schema's order."""
        return self.model_dump(exclude_unset=True)

    @property
    def tested(self) -> bool:
        """Whether the row was tested: a tested verdict with its p."""
        return self.verdict in TESTED and self.p is not None


class Comparison(BaseModel):
    """Release ``current`` compared with the earlier release ``previous``: the test's settings,
    one :class:`ComparisonRow` per entry (the current release's order, then the removed ones)
    and ``summary``, the number of rows with each verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1, 2]
    previous: str
    current: str
    previous_created_at: str | None
    current_created_at: str | None
    test: Literal["paired_sign_flip_permutation"]
    adjustment: Literal["holm"] | None = None
    interval: Literal["student_t_paired"] | None = None
    confidence: Number
    alpha: Number
    n_perm: int
    seed: int
    rows: list[ComparisonRow]
    summary: dict[Verdict, int]

    def to_json(self) -> dict[str, Any]:
        """The compare.json document: the fields that were given, in the schema's order."""
        return self.model_dump(exclude_unset=True)

    def by_name(self) -> dict[str, ComparisonRow]:
        """Entry name -> its row."""
        return {r.name: r for r in self.rows}

    def regressions(self) -> list[ComparisonRow]:
        """The rows whose verdict is "regressed": read from the Holm-adjusted p (comparisons
        stored before Holm: from each row's own p)."""
        return [r for r in self.rows if r.verdict == "regressed"]
