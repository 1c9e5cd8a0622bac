"""Publishing a run of a release: items, the run file, the comparison, the merged report.

:func:`publish_run` is the one writer of a release (the EvalSuite flow and the docs' library
path call it); it sits above the store (:mod:`tinyllm.store`, where the documents go) and
:mod:`tinyllm.compare` (what the comparison says). :func:`merge_rows` / :func:`merge_report` are
how a rerun of some entries replaces their rows and keeps the others; :func:`check_publish_args`
checks everything about a publish before any scoring.

Order of the writes (formats/store.md): a publish makes a release visible last. The comparison
of the new report is stored under the hash of the report's bytes before the report itself, so a
reader sees the old report with its comparison or the new one with its comparison, never a
report without the comparison it was published with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tinyllm.baselines import adjust_row_verdicts
from tinyllm.compare_checks import RowItemsMismatchError, parse_row, row_items_problem
from tinyllm.comparison import Comparison
from tinyllm.history import compare_stored
from tinyllm.report import (
    ErrorInfo,
    ReportSchemaError,
    StoredRow,
    stored_report,
    stored_rows,
    validate_report,
)
from tinyllm.store import (
    CAS_ATTEMPTS,
    MAX_JSON_BYTES,
    Store,
    StoreError,
    StoreExistsError,
    StoreKeyError,
    check_report,
    new_run_id,
    open_store,
)
from tinyllm.store.documents import json_bytes
from tinyllm.store.keys import check_name, digest


def merge_rows(
    old_rows: Sequence[StoredRow], new_rows: Sequence[StoredRow], order: Sequence[str] | None = None
) -> list[StoredRow]:
    """Rows of a rerun merged into a release's rows: replace by name, keep the others.

    Each row of ``new_rows`` replaces the old row with the same ``name`` in place; old rows
    without a new row are kept as they were; new names are appended in ``new_rows`` order.
    With ``order`` (the manifest's entry names), the result is sorted into that order (names
    not in it go last, in their merged order). This is how ``only=["gpt"]`` works: the gpt row is
    replaced, every other row stays, and the earlier run's file under ``runs/`` is untouched.

    Example: old rows a=1, b=2, c=3 and new rows b=20, d=4 -> a=1, b=20, c=3, d=4.
    """
    new_by_name: dict[str, StoredRow] = {}
    for row in new_rows:
        if row.name in new_by_name:
            raise StoreError(
                f"merge_rows: expected unique names in the new rows, got {row.name!r} twice"
            )
        new_by_name[row.name] = row
    merged = [new_by_name.pop(row.name, row) for row in old_rows]
    merged.extend(new_by_name.values())  # dicts keep insertion order: new_rows order
    if order is not None:
        rank = {name: i for i, name in enumerate(order)}
        # stable sort: unknown names keep their merged order after the known ones
        merged.sort(key=lambda r: rank.get(r.name, len(rank)))
    return merged


def merge_report(
    old_report: dict | None, new_report: dict, order: Sequence[str] | None = None
) -> dict:
    """The release's merged report document after a run: ``new_report`` (the run's document)
    with its rows merged into those of ``old_report`` (the stored report's, or None).

    Everything comes from ``new_report`` except ``rows`` (:func:`merge_rows` of the typed rows:
    :func:`run_rows` of the run, :func:`tinyllm.report.stored_rows` of the stored report) and
    ``created_at``, which keeps the old report's value when there is one: ``created_at`` is when
    the release was first evaluated and orders the history, so rerunning one entry of an old
    release does not move it after newer releases. The run's own time stays in its
    ``runs/<run-id>.json``. The merged rows' "beats baseline" verdicts are decided together
    again (:func:`tinyllm.baselines.adjust_row_verdicts`: Holm over every row of the release).
    Each row's document keeps the fields it was read with (:meth:`tinyllm.report.StoredRow.to_json`).
    """
    old_rows = stored_rows(old_report) if old_report is not None else []
    rows = adjust_row_verdicts(merge_rows(old_rows, run_rows(new_report), order))
    merged = dict(new_report)
    merged["rows"] = [r.to_json() for r in rows]
    if old_report is not None and "created_at" in old_report:
        merged["created_at"] = old_report["created_at"]
    return merged


def check_publish_args(uri: str, release: str, previous: str | None = None) -> Store:
    """Everything about a publish that can be checked before any scoring; returns the store.

    The release name (a key segment), ``previous`` (when given: not the release itself, a
    release cannot be its own baseline), the store (opened, reachable and writable: a probe is
    written and deleted), and ``previous`` again (a release the store has). A bad argument is
    refused here instead of after every entry was scored and the release written.
    """
    check_name(release, "release")
    if previous is not None:
        _check_previous(release, previous)
    st = open_store(uri)
    st.check_writable()
    if previous is not None:
        check_name(previous, "previous")
        if not st.has_report(previous):
            known = ", ".join(st.release_names()) or "none"
            raise StoreKeyError(
                f"{st.where(st.report_key(previous))}: previous: expected a release in the "
                f"store, got {previous!r} (releases: {known})"
            )
    return st


def _check_previous(release: str, previous: str) -> str:
    """``previous`` names another release: comparing a release with itself says nothing."""
    check_name(previous, "previous")
    if previous == release:
        raise StoreError(
            f"previous: expected a release other than the one being published, got {previous!r} "
            f"(the release itself: a release cannot be compared with itself)"
        )
    return previous


# The first failure of each publish that failed, by (store, release, run id): a retried publish
# (same run id) that fails too raises the first failure again, with the retry's error as a
# note, so the error a user reads is the cause and not a later symptom. Bounded: the oldest go.
_FIRST_FAILURES: dict[tuple[str, str, str], BaseException] = {}
_FIRST_FAILURES_KEPT = 64


def publish_run(
    store: Store,
    release: str,
    run_report: dict,
    items: dict[str, Any],
    *,
    baseline_items: dict[str, Any] | None = None,
    order: Sequence[str] | None = None,
    previous: str | None = None,
    seed: int = 0,
    run_id: str | None = None,
    units: dict[str, Any] | None = None,
) -> dict:
    """Publish one run of a release: items, the run file, the comparison, the merged report.

    0. every row of ``run_report`` is read as a typed row (:func:`run_rows`: the schema's
       types, no unknown field; else :class:`tinyllm.report.ReportSchemaError` naming the row
       and the field, and nothing is written); every ``status: "ok"`` row with per-item scores
       is checked against them
       (:func:`tinyllm.compare_checks.row_items_problem`: ``n`` is their count, and ``value`` their
       mean in the metric's units for the mean metrics), and against its baseline's per-item
       scores in ``baseline_items`` (:func:`baseline_items_problem`); a row that disagrees with
       either becomes an error row saying why, and neither of its arrays is stored;
    1. each entry's per-item scores under a content-addressed name (:meth:`Store.write_items_ref`),
       and each row's ``items`` set to that name (a row without scores gets ``null``); its
       baseline's scores likewise, as entry ``<name>.baseline`` (``items/<name>.baseline-<h>.npy``,
       a name no entry can have: entry names have no dot), in ``baseline.items`` (``null``
       without them); its unit ids in ``units`` (:func:`tinyllm.eval.zoo.score_entry_result`;
       one integer per item, :meth:`Store.write_units_ref`: ``items/<name>.units-<h>.npy``)
       in the row's ``units`` (``null`` without them: every item its own unit when
       ``n_units == n``, else the units are unknown and the row is compared item by item);
    2. the run's raw report at ``runs/<run-id>.json`` (never overwritten);
    3. the baseline: ``previous``, or :meth:`Store.baseline_release` (decided before this
       release is visible, so the release never counts as its own predecessor);
    4. the release's ``report.json`` merged with the run's rows as one compare-and-swap
       (:meth:`Store.update_report`): concurrent runs of other entries keep their rows. Inside
       the swap, before the new report is put, its comparison with the baseline is written at
       :meth:`Store.compare_version_key` of the new report's bytes: the release (or its new
       report) becomes visible only once its comparison is stored, and a publish that fails or
       is killed anywhere leaves the old report with its old comparison;
    5. ``compare.json``, a copy of the comparison of the report as it now is (recomputed if
       another run changed the report meanwhile), for tools that read the file itself.

    Every report is validated against eval-results.schema.json before it is written, the
    run's before any of its arrays is.
    A retried publish (same ``run_id``) that fails again raises the first attempt's error.
    Returns ``{"run_id", "report", "compare", "store"}`` (``report``: the merged report the
    comparison was made on; ``compare``: that :class:`tinyllm.comparison.Comparison`, None
    for the first release).
    """
    check_name(release, "release")
    if previous is not None:
        _check_previous(release, previous)
    attempt = (store.uri, release, run_id) if run_id else None
    run_id = run_id or new_run_id()
    try:
        arrays = (items, baseline_items or {}, units or {})
        out = _publish(store, release, run_report, arrays, order, previous, seed, run_id)
    except Exception as e:
        first = _FIRST_FAILURES.get(attempt) if attempt else None
        if attempt is None or first is None or first is e:
            if attempt is not None:
                _FIRST_FAILURES[attempt] = e
                while len(_FIRST_FAILURES) > _FIRST_FAILURES_KEPT:
                    del _FIRST_FAILURES[next(iter(_FIRST_FAILURES))]
            raise
        first.add_note(f"a retry of this publish failed too: {type(e).__name__}: {e}")
        raise first  # noqa: B904 (the retry's error is its context and its note)
    if attempt is not None:
        _FIRST_FAILURES.pop(attempt, None)
    return out


def run_rows(run_report: dict) -> list[StoredRow]:
    """The rows of a run's report document as typed rows (:func:`tinyllm.compare_checks.parse_row`:
    the schema's types, no unknown field, no status rules), read before anything is written.

    Raises :class:`tinyllm.report.ReportSchemaError` naming the row and the field: ``run report
    rows[0] ('a'): expected a row of eval-results.schema.json, got at n: '4' is not of type
    'integer'``.
    """
    rows = run_report.get("rows") if isinstance(run_report, dict) else None
    if not isinstance(rows, list):
        raise ReportSchemaError(
            f"run report: expected a report document with a list of rows, got rows {rows!r:.60}"
        )
    typed = []
    for i, doc in enumerate(rows):
        try:
            typed.append(parse_row(doc))
        except ReportSchemaError as e:
            name = doc.get("name") if isinstance(doc, dict) else None
            raise ReportSchemaError(f"run report rows[{i}] ({name!r}): {e}") from None
    return typed


def _mismatch_row(row: StoredRow, problem: str) -> StoredRow:
    """``row`` as an error row: its result disagrees with its per-item scores."""
    update: dict[str, Any] = dict(
        status="error",
        error=ErrorInfo(type=RowItemsMismatchError.__name__, message=problem),
        value=None,
        lo=None,
        hi=None,
        interval=None,
        n=None,
        items=None,
    )
    if "units" in row.model_fields_set:  # a row that knows its units: none describes a result
        update.update(units=None, n_units=None, iid_interval=None, interval_warning=None)
    return row.model_copy(update=update)


def baseline_items_problem(row: StoredRow, items: Any, own: Any = None) -> str | None:
    """Why an ok row disagrees with its baseline's per-item scores ``items``, or None when it
    agrees (or has no result to check: a row that is not ``status: "ok"``).

    The baseline is scored on the row's very items, in the row's units, so its scores are
    checked as :func:`tinyllm.compare_checks.row_items_problem` checks the row's own, with the
    baseline's value in place of the row's: a ``baseline`` field to hold them; one score per
    item of the row's own scores ``own`` (when given); ``n`` equal to their count (that are not
    NaN, for the embeddings kinds); for the mean metrics ``baseline.value`` equal to their mean
    times the row's item scale (bpb: ``sum(items) / (n_bytes ln 2)``).

    Example: an ``exact_match`` row with n 4 and baseline "copy" of value 0.25 agrees with
    items [0, 1, 0, 0]; with [0, 1, 1, 0] it does not ("row 'c': baseline 'copy': expected
    exact_match value 0.5 (the mean of its 4 per-item scores), got 0.25").

    ``row``: a typed row (:class:`tinyllm.report.StoredRow`, as :func:`run_rows` reads it).
    """
    if row.status != "ok":
        return None
    name, base = row.name, row.baseline
    if base is None:
        return f"row {name!r}: expected a baseline field to name its baseline's scores, got None"
    a = np.asarray(items)
    if own is not None and a.shape != np.shape(own):
        return (
            f"row {name!r}: baseline {base.name!r}: expected one per-item score per item "
            f"of the row's own (shape {np.shape(own)}), got shape {a.shape}"
        )
    problem = row_items_problem(row.model_copy(update={"value": base.value}), a)
    if problem is None:
        return None
    return f"row {name!r}: baseline {base.name!r}: " + problem.removeprefix(f"row {name!r}: ")


def baseline_items_name(name: str) -> str:
    """The store entry name of row ``name``'s baseline scores: ``<name>.baseline``
    (:meth:`Store.write_items_ref` makes it ``items/<name>.baseline-<h>.npy``)."""
    return f"{name}.baseline"


def units_problem(row: StoredRow, units: Any, items: Any) -> str | None:
    """Why a row's unit ids cannot go with its per-item scores ``items``, or None: one integer
    id per item (``row``: a typed row, :func:`run_rows`). Example: 3 ids for 4 items ->
    "row 'm': expected one unit id per item (4), got shape (3,)"."""
    name = row.name
    u = np.asarray(units)
    if items is None:
        return f"row {name!r}: expected per-item scores with the unit ids, got none"
    if u.ndim != 1 or u.shape != np.shape(items):
        return (
            f"row {name!r}: expected one unit id per item ({np.size(items)}), got shape {u.shape}"
        )
    if u.size and not np.issubdtype(u.dtype, np.integer):
        return f"row {name!r}: expected integer unit ids, got dtype {u.dtype}"
    return None


def _with_refs(row: StoredRow, refs: dict[str, str], base_refs: dict[str, str], unit_refs) -> dict:
    """``row``'s document naming its stored arrays: ``items``, ``baseline.items`` and ``units``
    (null without them; a row read without a ``units`` field keeps none)."""
    update: dict[str, Any] = {"items": refs.get(row.name)}
    if row.baseline is not None:
        update["baseline"] = row.baseline.model_copy(update={"items": base_refs.get(row.name)})
    if "units" in row.model_fields_set or row.name in unit_refs:
        update["units"] = unit_refs.get(row.name)
    return row.model_copy(update=update).to_json()


def _publish(
    store: Store,
    release: str,
    run_report: dict,
    given: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    order: Sequence[str] | None,
    previous: str | None,
    seed: int,
    run_id: str,
) -> dict:
    items, baseline_items, units = given
    rows, arrays, base_arrays, unit_arrays = [], dict(items), dict(baseline_items), dict(units)
    for row in run_rows(run_report):  # every row typed before anything is written
        name = row.name
        arr, base_arr, unit_arr = items.get(name), baseline_items.get(name), units.get(name)
        problem = row_items_problem(row, arr) if arr is not None else None
        if problem is None and base_arr is not None:
            problem = baseline_items_problem(row, base_arr, arr)
            if problem is None and row.baseline is None:
                base_arrays.pop(name)  # a row that is not ok and has no baseline to name them
        if problem is None and unit_arr is not None:
            problem = units_problem(row, unit_arr, arr)
        if problem is not None:
            row = _mismatch_row(row, problem)
            for kept in (arrays, base_arrays, unit_arrays):
                kept.pop(name, None)
        rows.append(row)
    # the run's document with its arrays not yet named (null) is checked before any write
    validate_report(dict(run_report, rows=[_with_refs(r, {}, {}, {}) for r in rows]))
    refs = {name: store.write_items_ref(release, name, arr) for name, arr in arrays.items()}
    base_refs = {
        name: store.write_items_ref(release, baseline_items_name(name), arr)
        for name, arr in base_arrays.items()
    }
    unit_refs = {name: store.write_units_ref(release, name, u) for name, u in unit_arrays.items()}
    run = dict(run_report)
    run["rows"] = [_with_refs(r, refs, base_refs, unit_refs) for r in rows]
    validate_report(run)
    try:
        store.write_run(release, run_id, run)
    except StoreExistsError:
        # a retried publish (same run id) whose first attempt wrote the run file, then failed
        if store.read_run(release, run_id) != run:
            raise

    prev = previous if previous is not None else store.baseline_release(release)
    prev_report = store.read_stored_report(prev) if prev is not None else None
    made: dict[str, Comparison] = {}  # digest of a report's bytes -> the comparison made for it

    def compare_with(report: dict, data: bytes) -> Comparison:
        assert prev is not None and prev_report is not None
        cur = (release, stored_report(report))
        cmp = compare_stored(store, (prev, prev_report), cur, seed=seed)
        store.write_compare_version(release, data, cmp)
        made[digest(data)] = cmp
        return cmp

    def merge(old: dict | None) -> dict:
        merged = merge_report(old, run, order)
        validate_report(merged)
        if prev_report is not None:  # the comparison is stored before the report is visible
            compare_with(merged, json_bytes(merged))
        return merged

    merged = store.update_report(release, merge)
    cmp: Comparison | None = None
    if prev_report is not None:
        key = store.report_key(release)
        for _ in range(CAS_ATTEMPTS):
            seen = store.get_bytes(key, max_bytes=MAX_JSON_BYTES)
            merged = check_report(store.parse_json(key, seen, "report"), store.where(key), release)
            cmp = made.get(digest(seen))
            if cmp is None:  # another run's report, put by a writer that stored no comparison
                try:
                    cmp = store.read_compare_version(release, seen)
                except StoreKeyError:
                    cmp = compare_with(merged, seen)
            store.write_compare(release, cmp)
            if store.get_bytes(key, max_bytes=MAX_JSON_BYTES) == seen:  # still the last report
                break
    return {"run_id": run_id, "report": merged, "compare": cmp, "store": store.uri}
