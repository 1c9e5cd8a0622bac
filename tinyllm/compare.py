"""Release comparison: "did this release get better or worse than the last?" (docs/definitions.md,
"Paired tests", "Holm", "The detectable difference").

:func:`compare_reports` pairs the rows of two reports by name. A row scored on the same items in
both releases -- both ``status: "ok"``, the same ``metric``, the same ``data_sha256`` and ``n``,
and per-item scores of equal length in both -- is tested by the one paired entry point,
:func:`tinyllm.stats.paired_difference`, over the row's sampling units, ``a`` the current
release's per-item scores and ``b`` the previous one's:

* a mean metric (bpb, acc, acc_norm, exact_match: the value is ``scale * sum(items) / n``) is a
  ratio over items (``kind="ratio"``): per unit g, ``D_g = S^cur_g - S^prev_g`` and the
  linearised residuals ``e_g = D_g - delta N_g``; ``p`` is the sign-flip test on the ``D_g``
  (``n_perm`` patterns from a fresh ``numpy.random.default_rng(seed)`` for every row, exact for
  ``2**G <= n_perm``), ``[lo, hi]`` is ``delta ± t_{1-alpha/2, G-1} se`` with
  ``se = sqrt(G/(G-1) sum e_g^2) / sum N_g``, method ``paired_t``; everything is rescaled to the
  metric's units (``scale``: 1 for proportions, ``1 / ln 2`` for byte-level bpb, ``n / (n_bytes
  ln 2)`` for a tokenizer whose tokens cover ``n_bytes`` bytes, :func:`tinyllm.metrics.item_scale`);
  LM rows in different tokenizers (``details.tokenizer``) are not comparable;
* a Spearman row (word pairs: items are each pair's cosine, ``details.human_scores``
  (:data:`tinyllm.compare_checks.HUMAN_KEY`) the human scores, equal in both releases):
  ``delta = rho(cur, h) - rho(prev, h)`` on the pairs both cover, ``[lo, hi]`` the percentile
  bootstrap resampling units (:data:`N_BOOT` draws), ``p`` the swap test with whole units
  swapped (PERM-BOTH of Deutsch et al. 2021), method ``paired_bootstrap``, both from one ``default_rng(seed)``;
* ``se``, ``n_units`` (G) and ``mde = (t_{.975, G-1} + t_{.80, G-1}) se``, the smallest true
  change the row could see at 80% power and two-sided alpha 0.05, in the metric's units.

**Units.** A row's ``units`` names its unit ids (one per item, :meth:`Store.units_loader`); a row
with ``n_units`` but no file has each item as its own unit. Units that differ between the
releases make the row "not comparable". A row of a report written before units (no
``n_units``, or no units file where they hold several items) is compared item by item, with
the ``note`` "units unknown ...".

**Many rows, one decision.** ``p`` is each row's own; the rows tested together are adjusted by
Holm (:func:`tinyllm.stats.holm_adjust`): ``p_adjusted``, and the verdict is read from it at
``alpha`` (:func:`tinyllm.stats.verdict`): "improved" or "regressed" by the sign of ``delta``
and the metric's direction (bpb lower is better, the rest higher), else "unchanged". A row
compared alone (:func:`compare_row`) is a family of one: ``p_adjusted = p``.

**Coverage** (the kinds of :data:`tinyllm.compare_checks.COVERAGE_KINDS`, i.e. word vectors):
per-item scores line up with the task file's items and are NaN where the model does not cover
one; such rows are compared on the items both releases cover (the row's ``n``), ``delta``
measured there (equal to current value - previous value when both cover the same items). Fewer
than :data:`MIN_PAIRS` common pairs, missing or different human scores or constant scores: "not
comparable".

Every other pair is "not comparable" with the reason (a status that is not ok, different data,
different n, no per-item scores). Rows in only one release are "added" or "removed". The result
is a :class:`tinyllm.comparison.Comparison`, whose :meth:`~tinyllm.comparison.Comparison.to_json`
validates against ``compare.schema.json`` (tinyllm/schemas/); :func:`parse_compare` reads a
stored one back, validated. Per-item scores and unit ids come
through loaders (:data:`ItemLoader`), so this module knows no store: a loader's
:class:`tinyllm.errors.StorageError`, ``OSError``, ``ValueError`` or ``KeyError`` makes the row
"not comparable" with the message as the reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from tinyllm import metrics, schemas
from tinyllm.compare_checks import (
    COVERAGE_KINDS,
    HUMAN_KEY,
    finite_number,
    human_scores,
    paired_units,
)
from tinyllm.comparison import VERDICTS, Comparison, ComparisonRow
from tinyllm.errors import StorageError
from tinyllm.report import StoredReport, StoredRow, stored_rows
from tinyllm.stats import (
    COMPARE_WORDS,
    PairedDifference,
    holm_adjust,
    paired_difference,
    verdict,
)

SCHEMA_VERSION = 2
"""2: rows carry ``p_adjusted`` (Holm), ``se``, ``mde``, ``n_units``, ``method`` and ``note``
(comparisons stored with version 1 lack them and still read)."""
SCHEMA_PATH = schemas.schema_file(schemas.COMPARE)

N_BOOT = 2_000
"""Bootstrap resamples of pairs behind a Spearman row's interval (a 95% percentile interval is
stable to about 0.01 of its width at 2,000)."""
MIN_PAIRS = 4
"""The fewest pairs covered by both releases that a Spearman row is tested on."""

MAX_N_PERM = 1_000_000
"""The most permutations per row :func:`compare_reports` and :func:`compare_row` take. The
p-value's resolution is ``1 / (n_perm + 1)``, so a million permutations resolve p to 1e-6,
far below any alpha. The time grows with ``n_perm`` times the row's items: one row of 2,000
items takes about 6 s at this bound (0.06 s at the default 10,000). A larger ``n_perm`` is
refused: "n_perm: expected at most 1000000 permutations per row, got ..."."""

ItemLoader = Callable[[str], np.ndarray]
UnitLoader = Callable[[str], "np.ndarray | None"]
"""``name -> unit ids`` of a release's row (one per item), None when it names no units file."""

__all__ = [
    "MAX_N_PERM",
    "MIN_PAIRS",
    "N_BOOT",
    "SCHEMA_PATH",
    "ItemLoader",
    "UnitLoader",
    "adjust",
    "compare_reports",
    "compare_row",
    "parse_compare",
    "validate_compare",
]


def _check_n_perm(n_perm: Any) -> int:
    if isinstance(n_perm, bool) or not isinstance(n_perm, int) or n_perm < 1:
        raise ValueError(f"n_perm: expected an integer >= 1, got {n_perm!r}")
    if n_perm > MAX_N_PERM:
        raise ValueError(
            f"n_perm: expected at most {MAX_N_PERM} permutations per row, got {n_perm}"
        )
    return n_perm


def _row(
    name: str, verdict: str, reason: str | None, metric: str | None, **kw: Any
) -> ComparisonRow:
    out = {
        "name": name,
        "verdict": verdict,
        "reason": reason,
        "metric": metric,
        "direction": metrics.DIRECTION[metric] if metric is not None else None,
        "previous_value": None,
        "current_value": None,
        "delta": None,
        "lo": None,
        "hi": None,
        "p": None,
        "n": None,
        "p_adjusted": None,
        "n_units": None,
        "method": None,
        "se": None,
        "mde": None,
        "note": None,
    }
    out.update(kw)
    return ComparisonRow(**out)  # every field given: each is written to compare.json


def _status_reason(row: StoredRow, side: str) -> str | None:
    if row.status == "ok":
        return None
    reason = f"{side} status is {row.status}"
    err = row.error
    if err is not None and err.type:
        msg = err.message
        reason += f" ({err.type}: {msg[:160] + '...' if len(msg) > 160 else msg})"
    elif row.reason:
        reason += f" ({row.reason})"
    return reason


def _short(sha: str) -> str:
    return f"{sha[:12]}..." if len(sha) > 12 else repr(sha)


def _load(load: ItemLoader, name: str, side: str) -> tuple[np.ndarray | None, str | None]:
    try:
        a = np.asarray(load(name), dtype=np.float64)
    except (StorageError, OSError, ValueError, KeyError) as e:
        return None, f"{side} per-item scores unreadable: {e}"
    if a.ndim != 1:
        return None, f"{side} per-item scores: expected a 1-d array, got shape {a.shape}"
    return a, None


def compare_row(
    prev: StoredRow | dict,
    cur: StoredRow | dict,
    load_items_prev: ItemLoader,
    load_items_cur: ItemLoader,
    *,
    n_perm: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    load_units_prev: UnitLoader | None = None,
    load_units_cur: UnitLoader | None = None,
) -> ComparisonRow:
    """Compare one entry's rows from two releases (see the module docstring for the rules); a
    row compared alone has ``p_adjusted = p``.

    ``prev`` / ``cur``: stored rows, or row documents read as :class:`tinyllm.report.StoredRow`
    (ValueError when one is not a row). ``n_perm``: 1 to :data:`MAX_N_PERM` permutations
    (ValueError otherwise)."""
    _check_n_perm(n_perm)
    prev, cur = _stored(prev, "previous"), _stored(cur, "current")
    name = cur.name
    metric = cur.metric
    values = {
        "previous_value": finite_number(prev.value),
        "current_value": finite_number(cur.value),
    }

    def nc(reason: str) -> ComparisonRow:
        return _row(name, "not comparable", reason, metric, **values)

    for row, side in ((prev, "previous"), (cur, "current")):
        reason = _status_reason(row, side)
        if reason:
            return nc(reason)
    if prev.metric != metric:
        return nc(f"different metric ({prev.metric} vs {metric})")
    if metric not in metrics.DIRECTION:
        return nc(f"unknown metric {metric!r} (known: {', '.join(metrics.DIRECTION)})")
    if values["previous_value"] is None or values["current_value"] is None:
        return nc("a value is missing or not finite")
    sha_p, sha_c = prev.data_sha256, cur.data_sha256
    if not sha_p or not sha_c:
        return nc("no data_sha256: cannot tell whether the same items were scored")
    if sha_p != sha_c:
        return nc(f"different data (data_sha256 {_short(sha_p)} vs {_short(sha_c)})")
    tok_p, tok_c = metrics.tokenizer(prev.details), metrics.tokenizer(cur.details)
    if tok_p != tok_c:
        return nc(f"different tokenizers ({tok_p} vs {tok_c}): the per-token scores do not pair")
    coverage = prev.kind in COVERAGE_KINDS and cur.kind in COVERAGE_KINDS
    if not coverage and prev.n != cur.n:
        return nc(f"different n ({prev.n} vs {cur.n})")
    missing = [side for row, side in ((prev, "previous"), (cur, "current")) if not row.items]
    if missing:
        where = "either release" if len(missing) == 2 else f"the {missing[0]} release"
        return nc(f"no per-item scores in {where} (items is null)")
    a_prev, err = _load(load_items_prev, name, "previous")
    if err:
        return nc(err)
    a_cur, err = _load(load_items_cur, name, "current")
    if err:
        return nc(err)
    assert a_prev is not None and a_cur is not None
    if a_prev.size != a_cur.size:
        return nc(f"per-item scores of different lengths ({a_prev.size} vs {a_cur.size})")
    units, note, err = paired_units(prev, cur, a_cur.size, (load_units_prev, load_units_cur))
    if err:
        return nc(err)
    assert units is not None
    same_coverage = True
    if coverage:  # NaN: an item that release does not cover; compare the items both cover
        cov_prev, cov_cur = ~np.isnan(a_prev), ~np.isnan(a_cur)
        same_coverage = bool(np.array_equal(cov_prev, cov_cur))
        both = cov_prev & cov_cur
        if metric == metrics.SPEARMAN.name:
            test = (a_prev, a_cur, units, both, same_coverage, n_perm, seed, alpha)
            return _correlation_row(prev, cur, values, note, *test)
        if not both.any():
            return nc(_disjoint(cov_prev, cov_cur, "item"))
        a_prev, a_cur, units = a_prev[both], a_cur[both], units[both]
    elif metric == metrics.SPEARMAN.name:
        return nc(
            f"spearman rows are compared pair by pair only for the kinds {sorted(COVERAGE_KINDS)}"
        )
    if a_cur.size < 2:
        return nc(f"fewer than 2 paired items ({a_cur.size})")
    if not (np.all(np.isfinite(a_prev)) and np.all(np.isfinite(a_cur))):
        return nc("non-finite per-item scores")
    rng = np.random.default_rng(seed)
    try:
        pd = paired_difference(
            a_cur, a_prev, units, rng, kind="ratio", n_perm=n_perm, confidence=1.0 - alpha
        )
    except ValueError as e:
        return nc(f"no paired test on the {a_cur.size} paired items: {e}")
    pd = pd.scaled(metrics.item_scale(cur.metric, cur.n, cur.details))
    delta = pd.delta
    if same_coverage:  # the values' own difference; the interval keeps its half-widths
        delta = values["current_value"] - values["previous_value"]
    lo, hi = delta - (pd.delta - pd.lo), delta + (pd.hi - pd.delta)
    return _tested(name, metric, values, pd, delta, lo, hi, alpha, note)


def _tested(
    name: str,
    metric: str,
    values: dict,
    pd: PairedDifference,
    delta: float,
    lo: float,
    hi: float,
    alpha: float,
    note: str | None,
) -> ComparisonRow:
    """A tested row: delta and its interval, ``pd``'s p, se, mde, units and method, and the
    verdict from ``p`` at ``alpha`` (:func:`compare_reports` reads it again from Holm's
    adjusted p)."""
    notes = "; ".join(x for x in (note, pd.warning) if x) or None
    return _row(
        name,
        verdict(pd.p, delta, metrics.DIRECTION[metric], alpha=alpha, words=COMPARE_WORDS),
        None,
        metric,
        **values,
        delta=float(delta),
        lo=float(lo),
        hi=float(hi),
        p=float(pd.p),
        n=int(pd.n_items),
        p_adjusted=float(pd.p),
        n_units=int(pd.n_units),
        method=str(pd.method),
        se=float(pd.se),
        mde=float(pd.mde),
        note=notes,
    )


def _disjoint(cov_prev: np.ndarray, cov_cur: np.ndarray, what: str) -> str:
    total = cov_prev.size
    return (
        f"no {what} covered by both releases (the previous covers {int(cov_prev.sum())} of "
        f"{total}, the current {int(cov_cur.sum())} of {total}, none in common)"
    )


def _correlation_row(
    prev: StoredRow,
    cur: StoredRow,
    values: dict,
    note: str | None,
    a_prev: np.ndarray,
    a_cur: np.ndarray,
    units: np.ndarray,
    both: np.ndarray,
    same_coverage: bool,
    n_perm: int,
    seed: int,
    alpha: float,
) -> ComparisonRow:
    """A Spearman row (module docstring): the difference of the two rhos on the pairs both
    releases cover, its bootstrap interval over units and the swap p
    (:func:`tinyllm.stats.paired_difference`, ``kind="spearman"``)."""
    name, metric = cur.name, cur.metric

    def nc(reason: str) -> ComparisonRow:
        return _row(name, "not comparable", reason, metric, **values)

    human, problem = human_scores(cur.details, a_cur.size)
    if problem:
        return nc(f"current row: {problem}")
    human_prev, problem = human_scores(prev.details, a_prev.size)
    if problem:
        return nc(f"previous row: {problem}")
    if not np.array_equal(human, human_prev):
        return nc(f"different details.{HUMAN_KEY} in the two releases")
    k = int(both.sum())
    if k == 0:
        return nc(_disjoint(~np.isnan(a_prev), ~np.isnan(a_cur), "pair"))
    if k < MIN_PAIRS:
        return nc(f"fewer than {MIN_PAIRS} pairs covered by both releases ({k} of {a_cur.size})")
    x, y, h = a_cur[both], a_prev[both], human[both]
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return nc("non-finite per-item scores")
    try:
        pd = paired_difference(
            x,
            y,
            units[both],
            np.random.default_rng(seed),
            kind="spearman",
            reference=h,
            n_perm=n_perm,
            n_boot=N_BOOT,
            confidence=1.0 - alpha,
        )
    except ValueError as e:
        return nc(f"no paired test on the {k} pairs both releases cover: {e}")
    delta = values["current_value"] - values["previous_value"] if same_coverage else pd.delta
    return _tested(name, metric, values, pd, delta, pd.lo, pd.hi, alpha, note)


def _stored(row: StoredRow | dict, side: str) -> StoredRow:
    """``row`` as a :class:`tinyllm.report.StoredRow` (a row document is read as one)."""
    if isinstance(row, StoredRow):
        return row
    try:
        return StoredRow.model_validate(row)
    except ValueError as e:
        raise ValueError(f"{side} row: expected a stored report row, got: {e}") from None


class _Side(NamedTuple):
    """What the comparison reads of one release's report."""

    release: str
    created_at: str | None
    rows: dict[str, StoredRow]


def _check_report(report: Any, side: str) -> _Side:
    """The release name, creation time and rows by name of ``report``: a
    :class:`tinyllm.report.StoredReport`, or a report document with at least ``release`` and
    ``rows`` (its rows read as :class:`tinyllm.report.StoredRow`); ValueError naming the side
    when there is no release name or a row name repeats."""
    if isinstance(report, StoredReport):
        release, created_at, typed = report.release, report.created_at, report.rows
    else:
        if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
            raise ValueError(
                f"{side} report: expected an object with a 'rows' list, got {report!r:.80}"
            )
        for i, row in enumerate(report["rows"]):
            if not isinstance(row, dict) or not isinstance(row.get("name"), str):
                raise ValueError(
                    f"{side} report rows[{i}]: expected an object with a 'name', got {row!r}"
                )
        release, created_at = report.get("release"), report.get("created_at")
        try:
            typed = stored_rows(report)
        except ValueError as e:
            raise ValueError(f"{side} report {e}") from None
    if not isinstance(release, str) or not release:
        raise ValueError(f"{side} report: expected a 'release' name, got {release!r}")
    rows: dict[str, StoredRow] = {}
    for row in typed:
        if row.name in rows:
            raise ValueError(f"{side} report: expected unique row names, got {row.name!r} twice")
        rows[row.name] = row
    return _Side(release, created_at, rows)


def compare_reports(
    prev: StoredReport | dict,
    cur: StoredReport | dict,
    load_items_prev: ItemLoader,
    load_items_cur: ItemLoader,
    *,
    n_perm: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    load_units_prev: UnitLoader | None = None,
    load_units_cur: UnitLoader | None = None,
) -> Comparison:
    """Compare release ``cur`` with the earlier release ``prev``: the comparison
    (:meth:`~tinyllm.comparison.Comparison.to_json` is its compare.json).

    ``prev`` / ``cur``: :class:`tinyllm.report.StoredReport` (as history and publish read them
    from a store), or report documents with at least ``release`` and ``rows``.

    ``load_items_prev`` / ``load_items_cur``: ``name -> np.ndarray`` of that entry's per-item
    scores in each release (e.g. ``store.items_loader(release)``), so any store works;
    ``load_units_prev`` / ``load_units_cur``: ``name -> unit ids or None`` (e.g.
    ``store.units_loader(release)``); without them rows whose units hold several items are
    compared item by item, with the note "units unknown".

    Rows: the current report's rows in its order (tested, "not comparable" or "added"), then the
    rows only the previous report has ("removed"), in its order. ``summary`` counts verdicts.
    Units: ``delta``, ``lo``, ``hi``, ``se``, ``mde`` in the metric's units (bits per byte for
    bpb, a proportion for accuracies); ``p`` is the permutation p-value over units,
    ``(1 + #{|T_s| >= |T|}) / (n_perm + 1)`` (exact enumeration for ``2**G <= n_perm``);
    ``p_adjusted`` is Holm's over the tested rows, and the verdict is read from it at ``alpha``.
    ``n_perm`` is 1 to :data:`MAX_N_PERM`, checked before any row is compared (ValueError
    "n_perm: expected at most ..., got ...").

    Example: 2000 tokens, each its own unit, whose NLLs all rise by 0.05 nats -> delta = 0.05 /
    ln 2 = 0.0721 bpb, p = 1 / 10001, verdict "regressed".
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha: expected a level in (0, 1), got {alpha}")
    _check_n_perm(n_perm)  # before any row: 1 .. MAX_N_PERM
    prev, cur = _check_report(prev, "previous"), _check_report(cur, "current")
    prev_rows, cur_rows = prev.rows, cur.rows
    rows = []
    for name, row in cur_rows.items():
        if name in prev_rows:
            rows.append(
                compare_row(
                    prev_rows[name],
                    row,
                    load_items_prev,
                    load_items_cur,
                    n_perm=n_perm,
                    seed=seed,
                    alpha=alpha,
                    load_units_prev=load_units_prev,
                    load_units_cur=load_units_cur,
                )
            )
        else:
            reason = f"only in the current release {cur.release}"
            rows.append(
                _row(
                    name,
                    "added",
                    reason,
                    row.metric,
                    current_value=finite_number(row.value),
                )
            )
    for name, row in prev_rows.items():
        if name not in cur_rows:
            reason = f"only in the previous release {prev.release}"
            rows.append(
                _row(
                    name,
                    "removed",
                    reason,
                    row.metric,
                    previous_value=finite_number(row.value),
                )
            )
    rows = adjust(rows, alpha)
    summary = {v: 0 for v in VERDICTS}
    for r in rows:
        summary[r.verdict] += 1
    return Comparison(
        schema_version=SCHEMA_VERSION,
        previous=prev.release,
        current=cur.release,
        previous_created_at=prev.created_at,
        current_created_at=cur.created_at,
        test="paired_sign_flip_permutation",
        adjustment="holm",
        confidence=1.0 - alpha,
        alpha=alpha,
        n_perm=n_perm,
        seed=seed,
        rows=rows,
        summary=summary,
    )


def adjust(rows: list[ComparisonRow], alpha: float = 0.05) -> list[ComparisonRow]:
    """The rows of one comparison decided together: Holm's adjusted p
    (:func:`tinyllm.stats.holm_adjust`) over the rows that were tested (a ``p``), each row's
    ``p_adjusted`` and its verdict read from it at ``alpha``; other rows as they are.

    Example: tested rows with p 0.01, 0.04 and 0.03 -> p_adjusted 0.03, 0.06 and 0.06; only the
    first keeps its call.
    """
    tested = [i for i, r in enumerate(rows) if r.tested]
    out = list(rows)
    for i, p_adj in zip(tested, holm_adjust([rows[i].p for i in tested]), strict=True):
        r = rows[i]
        call = verdict(
            p_adj, r.delta, metrics.DIRECTION[r.metric], alpha=alpha, words=COMPARE_WORDS
        )
        out[i] = r.model_copy(update={"p_adjusted": p_adj, "verdict": call})
    return out


@functools.cache
def _validator() -> Any:
    return schemas.build_validator(schemas.load_schema(SCHEMA_PATH, "compare"))


def validate_compare(doc: Any, source: str = "compare.json") -> None:
    """Validate a compare.json document against compare.schema.json; the ValueError starts with
    ``source`` (the file or key it came from) and names the place in the document."""
    errors = list(_validator().iter_errors(doc))
    if errors:
        where, message = schemas.best_problem(errors)
        raise ValueError(
            f"{source}: expected an object matching compare.schema.json, got at {where}: "
            f"{message}" + (f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else "")
        )


def parse_compare(doc: Any, source: str = "compare.json") -> Comparison:
    """A compare.json document read back (from a store, a file) as a
    :class:`tinyllm.comparison.Comparison`: validated against compare.schema.json first
    (ValueError as :func:`validate_compare` raises it, starting with ``source``), so a document
    that does not fit is refused at the boundary and never reaches a reader."""
    validate_compare(doc, source)
    return Comparison.model_validate(doc)
