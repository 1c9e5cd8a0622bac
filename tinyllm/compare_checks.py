"""Does a row agree with its per-item scores, and over which units are two releases' rows
paired? The checks :mod:`tinyllm.compare` (whose names these are too) and :mod:`tinyllm.publish`
run on a typed row (:class:`tinyllm.report.StoredRow`) before its scores are trusted: ``n`` is
their count, the value their mean (mean metrics) or their Spearman correlation with the human
scores (word pairs); the unit ids of both releases (:func:`paired_units`). :func:`parse_row` reads
a row document into a typed row, refusing one whose fields do not have the schema's types."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import ValidationError
from scipy import stats as sps

from tinyllm import metrics, schemas
from tinyllm.errors import StorageError
from tinyllm.report import REPORT_SCHEMA_PATH, ReportSchemaError, StoredRow, stored_report_schema

#: how far a row's value may be from the mean of its per-item scores (relative), float rounding
VALUE_RTOL = 1e-9
COVERAGE_KINDS = frozenset({"embeddings"})
"""The kinds whose per-item scores follow the task file's items, NaN where the model does not
cover one (an out-of-vocabulary word): ``n`` counts the items that are not NaN (the embeddings
kind's ``NAN_ITEMS``; a test keeps the two in step, since this module imports no kind)."""
HUMAN_KEY = "human_scores"
"""The details key of a Spearman row: the human score of every pair of its file, in file order."""


def finite_number(x: Any) -> float | None:
    """A finite JSON number or None."""
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


class RowItemsMismatchError(ValueError):
    """A row's ``n`` or ``value`` disagrees with the per-item scores it comes with."""


_ROW_VALIDATOR = None


def parse_row(doc: Any) -> StoredRow:
    """A row document as a typed row: every field of the schema's row with the schema's type
    (``tinyllm/schemas/eval-results.schema.json``, as a store reads it:
    :func:`tinyllm.report.stored_report_schema`), no unknown field, no status rules.

    Raises :class:`tinyllm.report.ReportSchemaError` naming the field: ``n`` ``"4"`` ->
    ``expected a row of eval-results.schema.json, got at n: '4' is not of type 'integer'``
    (a bool is not an integer; no string is read as a number).
    """
    global _ROW_VALIDATOR
    if _ROW_VALIDATOR is None:
        schema = stored_report_schema()
        row_schema = {"$schema": schema["$schema"], "$defs": schema["$defs"]}
        _ROW_VALIDATOR = schemas.build_validator(row_schema | {"$ref": "#/$defs/row"})
    errors = list(_ROW_VALIDATOR.iter_errors(doc))
    expected = f"expected a row of {REPORT_SCHEMA_PATH.name}"
    if errors:
        raise ReportSchemaError(f"{expected}, got {schemas.problems_text(errors)}")
    try:
        return StoredRow.model_validate(doc)
    except ValidationError as e:  # a rule of the typed row beyond the schema's
        first = e.errors()[0]
        where = "/".join(map(str, first["loc"])) or "(top level)"
        raise ReportSchemaError(f"{expected}, got at {where}: {first['msg']}") from None


def row_items_problem(row: StoredRow, items: Any) -> str | None:
    """Why an ok row disagrees with its per-item scores, or None when it agrees (or has no
    result to check: a row that is not ``status: "ok"``).

    Checked: the scores are a 1-d array of finite numbers -- for the kinds of
    :data:`COVERAGE_KINDS` NaN too, an item the model does not cover -- ``n`` equals the number
    of scores that are not NaN (every kind counts its scored items as ``n``); for the metrics of
    :data:`MEAN_METRICS` the value equals their mean times ``ITEM_SCALE``, and for a Spearman
    row with ``details.human_scores`` there is one human score per item and the value equals
    ``scipy.stats.spearmanr`` of the covered items' scores and human scores (relative tolerance
    :data:`VALUE_RTOL`).

    ``row``: a typed row (:class:`tinyllm.report.StoredRow`; a row document is read with
    :func:`parse_row`, which refuses one without the schema's types).

    Example: an ``acc`` row with n 4 and value 0.75 agrees with items [1, 0, 1, 1]; with value
    0.5 it does not ("... expected value 0.75 (the mean of its 4 per-item scores), got 0.5").
    """
    if row.status != "ok":
        return None
    name = row.name
    a = np.asarray(items)
    if a.ndim != 1 or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        return (
            f"row {name!r}: expected 1-d numeric per-item scores, got dtype {a.dtype} "
            f"shape {a.shape}"
        )
    a = a.astype(np.float64)
    covered = ~np.isnan(a) if row.kind in COVERAGE_KINDS else np.ones(a.size, bool)
    bad = int(np.sum(~np.isfinite(a[covered])))
    if bad:
        return f"row {name!r}: expected finite per-item scores, got {bad} that are not"
    k = int(covered.sum())
    n = row.n
    if n != k:
        what = "the number of its per-item scores"
        if k != a.size:
            what = f"its per-item scores that are not NaN, of {a.size}"
        return f"row {name!r}: expected n = {k} ({what}), got {n!r}"
    metric = row.metric
    facts = metrics.METRICS.get(metric) if metric is not None else None
    if facts is not None and facts.mean_of_items:
        scale = metrics.item_scale(row.metric, row.n, row.details)
        expected = float(np.mean(a[covered])) * scale
        value = finite_number(row.value)
        if value is None or not math.isclose(value, expected, rel_tol=VALUE_RTOL, abs_tol=1e-12):
            how = facts.item_scale_text
            if scale != facts.item_scale:
                assert row.details is not None  # a scale of its own comes from details.n_bytes
                how = f" * n / (n_bytes ln 2), n_bytes {row.details['n_bytes']}"
            return (
                f"row {name!r}: expected {metric} value {expected!r} (the mean of its {k} "
                f"per-item scores{how}), got {row.value!r}"
            )
    details = row.details
    if metric == metrics.SPEARMAN.name and details is not None and HUMAN_KEY in details:
        human, problem = human_scores(details, a.size)
        if problem:
            return f"row {name!r}: {problem}"
        expected = float(sps.spearmanr(a[covered], human[covered]).statistic)
        value = finite_number(row.value)
        if value is None or not math.isclose(value, expected, rel_tol=VALUE_RTOL, abs_tol=1e-12):
            return (
                f"row {name!r}: expected spearman value {expected!r} (of its {k} covered "
                f"per-item scores and details.{HUMAN_KEY}), got {row.value!r}"
            )
    return None


def human_scores(details: dict[str, Any] | None, size: int) -> tuple[np.ndarray, str | None]:
    """A Spearman row's ``details.human_scores`` (``details``: the row's details) as float64,
    or why it cannot be used."""
    raw = details.get(HUMAN_KEY) if isinstance(details, dict) else None
    if not isinstance(raw, list) or not all(finite_number(v) is not None for v in raw):
        return np.zeros(
            0
        ), f"expected details.{HUMAN_KEY}, a list of finite numbers, got {raw!r:.60}"
    human = np.array(raw, dtype=np.float64)
    if human.size != size:
        return human, (
            f"expected one human score per item in details.{HUMAN_KEY} ({size}), got {human.size}"
        )
    return human, None


def side_units(
    row: StoredRow, load: Any, size: int, side: str
) -> tuple[np.ndarray | None, str | None]:
    """``(unit ids, problem)`` of one side's row of ``size`` items: its units file, ``arange``
    when every item is its own unit (``n_units`` and no file), None when unknown."""
    if row.units:
        if load is None:
            return None, None
        try:
            u = load(row.name)
        except (StorageError, OSError, ValueError, KeyError) as e:
            return None, f"{side} unit ids unreadable: {e}"
        if u is None:
            return None, None
        u = np.asarray(u)
        if u.shape != (size,):
            return None, f"{side} unit ids: expected one per item ({size}), got shape {u.shape}"
        return u, None
    if row.n_units is not None and row.n_units == row.n:
        return np.arange(size), None
    return None, None


def paired_units(
    prev: StoredRow, cur: StoredRow, size: int, loaders: tuple
) -> tuple[np.ndarray | None, str | None, str | None]:
    """``(unit ids for both sides, note, reason it is not comparable)``: the releases' units
    when both are known and the same grouping; item by item, with a note, when either is
    unknown (a report written before units)."""
    known = []
    for row, load, side in ((prev, loaders[0], "previous"), (cur, loaders[1], "current")):
        u, problem = side_units(row, load, size, side)
        if problem:
            return None, None, problem
        known.append(u)
    up, uc = known
    if up is None or uc is None:
        where = (
            "either release"
            if up is None and uc is None
            else ("the previous release" if up is None else "the current release")
        )
        return np.arange(size), f"units unknown in {where}: compared at the item level", None
    gp, gc = _grouping(up), _grouping(uc)
    if not np.array_equal(gp, gc):
        why = (
            f"different units in the two releases ({gp.max() + 1} vs {gc.max() + 1} units over "
            "the same items): the unit-level differences do not pair"
        )
        return None, None, why
    return uc, None, None


def _grouping(ids: np.ndarray) -> np.ndarray:
    """Unit ids renumbered 0, 1, ... in the order the units first appear: two releases group
    their items alike exactly when these are equal (whatever ids each used)."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse]
