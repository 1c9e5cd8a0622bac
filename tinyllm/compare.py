"""Release comparison: "did this release get better or worse than the last?" (SPEC.md section 5).

:func:`compare_reports` pairs the rows of two reports by name. A row scored on the same items in
both releases -- both ``status: "ok"``, the same ``metric``, the same ``data_sha256`` and ``n``,
and per-item scores of equal length in both -- is tested:

* ``p``: two-sided paired sign-flip permutation test (:func:`tinyllm.stats.paired_permutation_test`)
  on the per-item scores, ``d_i = cur_i - prev_i``, with ``n_perm`` sign patterns drawn from a
  fresh ``numpy.random.default_rng(seed)`` for every row (so a row's p does not depend on which
  other rows the reports hold, and the same inputs always give the same p);
* ``delta = current value - previous value`` in the metric's units;
* ``[lo, hi]``: ``delta ± t_{1-alpha/2, n-1} * sd(d) / sqrt(n) * scale``, the Student t interval
  of the mean per-item difference, rescaled to the metric's units. ``scale`` is ``1 / ln 2`` for
  ``bpb`` -- LM items are per-token NLLs in nats and a byte-level token is one byte, so nats per
  token / ln 2 = bits per byte; a row in a tokenizer whose tokens cover ``n_bytes`` bytes in all
  has ``n / (n_bytes ln 2)`` (:func:`tinyllm.metrics.row_item_scale`) -- and 1 for the others (0/1 items average to
  the accuracy); LM rows in different tokenizers (``details.tokenizer``) are not comparable;
* ``verdict``: when ``p < alpha``, "improved" or "regressed" by the sign of ``delta`` and the
  metric's direction (``bpb`` lower is better; ``acc``, ``acc_norm``, ``exact_match``,
  ``spearman`` higher is better); otherwise "unchanged".

The verdict comes from the permutation test; the t interval is the size of the change. Near the
boundary the two can disagree slightly (an interval that just excludes 0 with ``p`` just above
alpha); the verdict follows ``p``.

**Coverage (the kinds of :data:`COVERAGE_KINDS`, i.e. word vectors).** Their per-item scores
line up with the task file's items (pair or question i of the file is item i) and are NaN where
the model does not cover the item (an out-of-vocabulary word); ``n`` counts the covered items,
so it may differ between releases. Such rows are compared on the items both releases cover
(the row's ``n``), and ``delta`` is measured on those items (it equals current value - previous
value when both cover the same items). A mean metric (the analogies' ``acc``) is then tested as
above on the common items.

**Correlation rows (``spearman``).** rho is not a mean of per-item scores. The items are each
pair's cosine, and the row's ``details.human_scores`` (:data:`HUMAN_KEY`) holds the human score of
every pair of the file, equal in both releases. On the k pairs both cover, with ``x`` the current
cosines, ``y`` the previous ones and ``h`` the human scores:

* ``delta = rho(x, h) - rho(y, h)`` (Spearman; = current value - previous value when both cover
  the same pairs);
* ``[lo, hi]``: the paired percentile bootstrap of that difference over pairs
  (:func:`tinyllm.stats.spearman_difference_ci`: each of :data:`N_BOOT` resamples takes the same
  pairs for both releases), drawn from ``numpy.random.default_rng(seed)``; not symmetric about
  ``delta``;
* ``p``: the paired permutation test PERM-BOTH of Deutsch et al. 2021
  (:func:`tinyllm.stats.spearman_difference_test`): under "no difference" the two releases'
  within-release ranks of a pair are exchangeable, so they are swapped pair by pair at random,
  ``n_perm`` patterns from ``default_rng(seed)``, two-sided on ``|delta|``;
* the verdict as above. Fewer than :data:`MIN_PAIRS` common pairs (none at all: disjoint
  coverage), missing or different human scores, or constant scores: "not comparable" with the
  reason.

Every other pair is "not comparable" with the reason (a status that is not ok, different data,
different n, no per-item scores -- releases stored before Spearman rows kept them have none).
Rows in only one release are "added" or "removed". The result validates against
``compare.schema.json`` (tinyllm/schemas/).

Per-item scores come through loaders (:data:`ItemLoader`), so this module knows no store: a
loader's :class:`tinyllm.errors.StorageError` (the store's errors derive from it), ``OSError``,
``ValueError`` or ``KeyError`` makes the row "not comparable" with the message as the reason.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats as sps

from tinyllm import metrics, schemas
from tinyllm.compare_render import (  # the rendering half, public names of this module too
    compare_markdown,
    compare_table,
    format_number,
    format_p,
    summary_line,
)
from tinyllm.errors import StorageError
from tinyllm.stats import (
    mean_ci,
    paired_permutation_test,
    spearman_difference_ci,
    spearman_difference_test,
)

SCHEMA_VERSION = 1
SCHEMA_PATH = schemas.schema_file(schemas.COMPARE)

#: which way is better, per metric; per-item units -> metric units (bpb: LM items are NLLs in
#: nats per byte-level token); the metrics whose value is the mean of the row's per-item scores
#: times ITEM_SCALE (not Spearman: rho is no mean of its per-pair cosines): views of tinyllm.metrics.METRICS
DIRECTION = metrics.DIRECTION
ITEM_SCALE = metrics.ITEM_SCALE
MEAN_METRICS = metrics.MEAN_METRICS
TESTED = ("improved", "regressed", "unchanged")
VERDICTS = (*TESTED, "not comparable", "added", "removed")
#: how far a row's value may be from the mean of its per-item scores (relative), float rounding
VALUE_RTOL = 1e-9
COVERAGE_KINDS = frozenset({"embeddings"})
"""The kinds whose per-item scores follow the task file's items, NaN where the model does not
cover one (an out-of-vocabulary word): ``n`` counts the items that are not NaN (the embeddings
kind's ``NAN_ITEMS``; a test keeps the two in step, since this module imports no kind)."""
HUMAN_KEY = "human_scores"
"""The details key of a Spearman row: the human score of every pair of its file, in file order."""
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

__all__ = [
    "COVERAGE_KINDS",
    "HUMAN_KEY",
    "MAX_N_PERM",
    "MIN_PAIRS",
    "N_BOOT",
    "SCHEMA_PATH",
    "ItemLoader",
    "RowItemsMismatchError",
    "compare_markdown",
    "compare_reports",
    "compare_row",
    "compare_table",
    "format_number",
    "format_p",
    "regressions",
    "row_items_problem",
    "summary_line",
    "validate_compare",
]


class RowItemsMismatchError(ValueError):
    """A row's ``n`` or ``value`` disagrees with the per-item scores it comes with."""


def row_items_problem(row: dict, items: Any) -> str | None:
    """Why an ok row disagrees with its per-item scores, or None when it agrees (or has no
    result to check: a row that is not ``status: "ok"``).

    Checked: the scores are a 1-d array of finite numbers -- for the kinds of
    :data:`COVERAGE_KINDS` NaN too, an item the model does not cover -- ``n`` equals the number
    of scores that are not NaN (every kind counts its scored items as ``n``); for the metrics of
    :data:`MEAN_METRICS` the value equals their mean times ``ITEM_SCALE``, and for a Spearman
    row with ``details.human_scores`` there is one human score per item and the value equals
    ``scipy.stats.spearmanr`` of the covered items' scores and human scores (relative tolerance
    :data:`VALUE_RTOL`).

    Example: an ``acc`` row with n 4 and value 0.75 agrees with items [1, 0, 1, 1]; with value
    0.5 it does not ("... expected value 0.75 (the mean of its 4 per-item scores), got 0.5").
    """
    if not isinstance(row, dict) or row.get("status") != "ok":
        return None
    name = row.get("name")
    a = np.asarray(items)
    if a.ndim != 1 or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        return (
            f"row {name!r}: expected 1-d numeric per-item scores, got dtype {a.dtype} "
            f"shape {a.shape}"
        )
    a = a.astype(np.float64)
    covered = ~np.isnan(a) if row.get("kind") in COVERAGE_KINDS else np.ones(a.size, bool)
    bad = int(np.sum(~np.isfinite(a[covered])))
    if bad:
        return f"row {name!r}: expected finite per-item scores, got {bad} that are not"
    k = int(covered.sum())
    n = row.get("n")
    if isinstance(n, bool) or n != k:
        what = "the number of its per-item scores"
        if k != a.size:
            what = f"its per-item scores that are not NaN, of {a.size}"
        return f"row {name!r}: expected n = {k} ({what}), got {n!r}"
    metric = row.get("metric")
    facts = metrics.METRICS.get(metric) if isinstance(metric, str) else None
    if facts is not None and facts.mean_of_items:
        scale = metrics.row_item_scale(row)
        expected = float(np.mean(a[covered])) * scale
        value = _num(row.get("value"))
        if value is None or not math.isclose(value, expected, rel_tol=VALUE_RTOL, abs_tol=1e-12):
            how = facts.item_scale_text
            if scale != facts.item_scale:
                how = f" * n / (n_bytes ln 2), n_bytes {row['details']['n_bytes']}"
            return (
                f"row {name!r}: expected {metric} value {expected!r} (the mean of its {k} "
                f"per-item scores{how}), got {row.get('value')!r}"
            )
    details = row.get("details")
    if metric == metrics.SPEARMAN.name and isinstance(details, dict) and HUMAN_KEY in details:
        human, problem = _human_scores(row, a.size)
        if problem:
            return f"row {name!r}: {problem}"
        expected = float(sps.spearmanr(a[covered], human[covered]).statistic)
        value = _num(row.get("value"))
        if value is None or not math.isclose(value, expected, rel_tol=VALUE_RTOL, abs_tol=1e-12):
            return (
                f"row {name!r}: expected spearman value {expected!r} (of its {k} covered "
                f"per-item scores and details.{HUMAN_KEY}), got {row.get('value')!r}"
            )
    return None


def _human_scores(row: dict, size: int) -> tuple[np.ndarray, str | None]:
    """A Spearman row's ``details.human_scores`` as float64, or why it cannot be used."""
    details = row.get("details")
    raw = details.get(HUMAN_KEY) if isinstance(details, dict) else None
    if not isinstance(raw, list) or not all(_num(v) is not None for v in raw):
        return np.zeros(
            0
        ), f"expected details.{HUMAN_KEY}, a list of finite numbers, got {raw!r:.60}"
    human = np.array(raw, dtype=np.float64)
    if human.size != size:
        return human, (
            f"expected one human score per item in details.{HUMAN_KEY} ({size}), got {human.size}"
        )
    return human, None


def _check_n_perm(n_perm: Any) -> int:
    if isinstance(n_perm, bool) or not isinstance(n_perm, int) or n_perm < 1:
        raise ValueError(f"n_perm: expected an integer >= 1, got {n_perm!r}")
    if n_perm > MAX_N_PERM:
        raise ValueError(
            f"n_perm: expected at most {MAX_N_PERM} permutations per row, got {n_perm}"
        )
    return n_perm


def _row(name: str, verdict: str, reason: str | None, metric: Any, **kw: Any) -> dict:
    out = {
        "name": name,
        "verdict": verdict,
        "reason": reason,
        "metric": metric if isinstance(metric, str) else None,
        "direction": DIRECTION.get(metric) if isinstance(metric, str) else None,
        "previous_value": None,
        "current_value": None,
        "delta": None,
        "lo": None,
        "hi": None,
        "p": None,
        "n": None,
    }
    out.update(kw)
    return out


def _num(x: Any) -> float | None:
    """A finite JSON number or None."""
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def _status_reason(row: dict, side: str) -> str | None:
    status = row.get("status")
    if status == "ok":
        return None
    reason = f"{side} status is {status}"
    err = row.get("error")
    if isinstance(err, dict) and err.get("type"):
        msg = str(err.get("message", ""))
        reason += f" ({err['type']}: {msg[:160] + '...' if len(msg) > 160 else msg})"
    elif row.get("reason"):
        reason += f" ({row['reason']})"
    return reason


def _short(sha: Any) -> str:
    return f"{sha[:12]}..." if isinstance(sha, str) and len(sha) > 12 else repr(sha)


def _load(load: ItemLoader, name: str, side: str) -> tuple[np.ndarray | None, str | None]:
    try:
        a = np.asarray(load(name), dtype=np.float64)
    except (StorageError, OSError, ValueError, KeyError) as e:
        return None, f"{side} per-item scores unreadable: {e}"
    if a.ndim != 1:
        return None, f"{side} per-item scores: expected a 1-d array, got shape {a.shape}"
    return a, None


def compare_row(
    prev: dict,
    cur: dict,
    load_items_prev: ItemLoader,
    load_items_cur: ItemLoader,
    *,
    n_perm: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict:
    """Compare one entry's rows from two releases (see the module docstring for the rules).

    ``n_perm``: 1 to :data:`MAX_N_PERM` permutations (ValueError otherwise)."""
    _check_n_perm(n_perm)
    name = cur["name"]
    metric = cur.get("metric")
    values = {"previous_value": _num(prev.get("value")), "current_value": _num(cur.get("value"))}

    def nc(reason: str) -> dict:
        return _row(name, "not comparable", reason, metric, **values)

    for row, side in ((prev, "previous"), (cur, "current")):
        reason = _status_reason(row, side)
        if reason:
            return nc(reason)
    if prev.get("metric") != metric:
        return nc(f"different metric ({prev.get('metric')} vs {metric})")
    if metric not in DIRECTION:
        return nc(f"unknown metric {metric!r} (known: {', '.join(DIRECTION)})")
    if values["previous_value"] is None or values["current_value"] is None:
        return nc("a value is missing or not finite")
    sha_p, sha_c = prev.get("data_sha256"), cur.get("data_sha256")
    if not sha_p or not sha_c:
        return nc("no data_sha256: cannot tell whether the same items were scored")
    if sha_p != sha_c:
        return nc(f"different data (data_sha256 {_short(sha_p)} vs {_short(sha_c)})")
    tok_p, tok_c = metrics.row_tokenizer(prev), metrics.row_tokenizer(cur)
    if tok_p != tok_c:
        return nc(f"different tokenizers ({tok_p} vs {tok_c}): the per-token scores do not pair")
    coverage = prev.get("kind") in COVERAGE_KINDS and cur.get("kind") in COVERAGE_KINDS
    if not coverage and prev.get("n") != cur.get("n"):
        return nc(f"different n ({prev.get('n')} vs {cur.get('n')})")
    missing = [side for row, side in ((prev, "previous"), (cur, "current")) if not row.get("items")]
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
    same_coverage = True
    if coverage:  # NaN: an item that release does not cover; compare the items both cover
        cov_prev, cov_cur = ~np.isnan(a_prev), ~np.isnan(a_cur)
        same_coverage = bool(np.array_equal(cov_prev, cov_cur))
        both = cov_prev & cov_cur
        if metric == metrics.SPEARMAN.name:
            return _correlation_row(
                prev, cur, a_prev, a_cur, both, same_coverage, values, n_perm, seed, alpha
            )
        if not both.any():
            return nc(_disjoint(cov_prev, cov_cur, "item"))
        a_prev, a_cur = a_prev[both], a_cur[both]
    elif metric == metrics.SPEARMAN.name:
        return nc(
            f"spearman rows are compared pair by pair only for the kinds {sorted(COVERAGE_KINDS)}"
        )
    if a_cur.size < 2:
        return nc(f"fewer than 2 paired items ({a_cur.size})")
    if not (np.all(np.isfinite(a_prev)) and np.all(np.isfinite(a_cur))):
        return nc("non-finite per-item scores")

    p = paired_permutation_test(a_cur, a_prev, n_perm=n_perm, rng=np.random.default_rng(seed))
    d = a_cur - a_prev  # paired differences, item units (nats per token, or 0/1 differences)
    ci = mean_ci(d, confidence=1.0 - alpha)
    scale = metrics.row_item_scale(cur)
    half = (ci.hi - ci.value) * scale
    if same_coverage:
        delta = values["current_value"] - values["previous_value"]
    else:  # on the items both cover
        delta = ci.value * scale
    return _tested(name, metric, values, delta, delta - half, delta + half, p, a_cur.size, alpha)


def _tested(
    name: str,
    metric: str,
    values: dict,
    delta: float,
    lo: float,
    hi: float,
    p: float,
    n: int,
    alpha: float,
) -> dict:
    """A tested row: the verdict from ``p`` at ``alpha`` and the sign of ``delta``."""
    if p < alpha and delta != 0.0:
        better = delta < 0 if DIRECTION[metric] == "lower" else delta > 0
        verdict = "improved" if better else "regressed"
    else:
        verdict = "unchanged"
    return _row(
        name,
        verdict,
        None,
        metric,
        **values,
        delta=float(delta),
        lo=float(lo),
        hi=float(hi),
        p=float(p),
        n=int(n),
    )


def _disjoint(cov_prev: np.ndarray, cov_cur: np.ndarray, what: str) -> str:
    total = cov_prev.size
    return (
        f"no {what} covered by both releases (the previous covers {int(cov_prev.sum())} of "
        f"{total}, the current {int(cov_cur.sum())} of {total}, none in common)"
    )


def _correlation_row(
    prev: dict,
    cur: dict,
    a_prev: np.ndarray,
    a_cur: np.ndarray,
    both: np.ndarray,
    same_coverage: bool,
    values: dict,
    n_perm: int,
    seed: int,
    alpha: float,
) -> dict:
    """A Spearman row (module docstring): the difference of the two rhos on the pairs both
    releases cover, its paired bootstrap interval and the PERM-BOTH p."""
    name, metric = cur["name"], cur["metric"]

    def nc(reason: str) -> dict:
        return _row(name, "not comparable", reason, metric, **values)

    human, problem = _human_scores(cur, a_cur.size)
    if problem:
        return nc(f"current row: {problem}")
    human_prev, problem = _human_scores(prev, a_prev.size)
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
        p = spearman_difference_test(x, y, h, n_perm=n_perm, rng=np.random.default_rng(seed))
        ci = spearman_difference_ci(
            x, y, h, np.random.default_rng(seed), n_boot=N_BOOT, confidence=1.0 - alpha
        )
    except ValueError as e:
        return nc(f"no paired test on the {k} pairs both releases cover: {e}")
    delta = values["current_value"] - values["previous_value"] if same_coverage else ci.value
    return _tested(name, metric, values, delta, ci.lo, ci.hi, p, k, alpha)


def _check_report(report: Any, side: str) -> dict[str, dict]:
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise ValueError(
            f"{side} report: expected an object with a 'rows' list, got {report!r:.80}"
        )
    if not isinstance(report.get("release"), str) or not report["release"]:
        raise ValueError(f"{side} report: expected a 'release' name, got {report.get('release')!r}")
    rows: dict[str, dict] = {}
    for i, row in enumerate(report["rows"]):
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            raise ValueError(
                f"{side} report rows[{i}]: expected an object with a 'name', got {row!r}"
            )
        if row["name"] in rows:
            raise ValueError(f"{side} report: expected unique row names, got {row['name']!r} twice")
        rows[row["name"]] = row
    return rows


def compare_reports(
    prev: dict,
    cur: dict,
    load_items_prev: ItemLoader,
    load_items_cur: ItemLoader,
    *,
    n_perm: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict:
    """Compare release ``cur`` with the earlier release ``prev``; the compare.json object.

    ``load_items_prev`` / ``load_items_cur``: ``name -> np.ndarray`` of that entry's per-item
    scores in each release (e.g. ``store.items_loader(release)``), so any store works.

    Rows: the current report's rows in its order (tested, "not comparable" or "added"), then the
    rows only the previous report has ("removed"), in its order. ``summary`` counts verdicts.
    Units: ``delta``, ``lo``, ``hi`` in the metric's units (bits per byte for bpb, a proportion
    for accuracies); ``p`` is the permutation p-value, ``(1 + #{|T_s| >= |T|}) / (n_perm + 1)``
    (exact enumeration for ``2**n <= n_perm``); ``n_perm`` is 1 to :data:`MAX_N_PERM`, checked
    before any row is compared (ValueError "n_perm: expected at most ..., got ...").

    Example: 2000 tokens whose NLLs all rise by 0.05 nats -> delta = 0.05 / ln 2 = 0.0721 bpb,
    p = 1 / 10001, verdict "regressed".
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha: expected a level in (0, 1), got {alpha}")
    _check_n_perm(n_perm)  # before any row: 1 .. MAX_N_PERM
    prev_rows = _check_report(prev, "previous")
    cur_rows = _check_report(cur, "current")
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
                )
            )
        else:
            reason = f"only in the current release {cur['release']}"
            rows.append(
                _row(name, "added", reason, row.get("metric"), current_value=_num(row.get("value")))
            )
    for name, row in prev_rows.items():
        if name not in cur_rows:
            reason = f"only in the previous release {prev['release']}"
            rows.append(
                _row(
                    name,
                    "removed",
                    reason,
                    row.get("metric"),
                    previous_value=_num(row.get("value")),
                )
            )
    summary = {v: 0 for v in VERDICTS}
    for r in rows:
        summary[r["verdict"]] += 1
    return {
        "schema_version": SCHEMA_VERSION,
        "previous": prev["release"],
        "current": cur["release"],
        "previous_created_at": prev.get("created_at"),
        "current_created_at": cur.get("created_at"),
        "test": "paired_sign_flip_permutation",
        "interval": "student_t_paired",
        "confidence": 1.0 - alpha,
        "alpha": alpha,
        "n_perm": n_perm,
        "seed": seed,
        "rows": rows,
        "summary": summary,
    }


@functools.cache
def _validator() -> Any:
    return schemas.build_validator(schemas.load_schema(SCHEMA_PATH, "compare"))


def validate_compare(cmp: Any, source: str = "compare.json") -> None:
    """Validate a comparison against compare.schema.json; the ValueError starts with ``source``
    (the file or key it came from) and names the place in the document."""
    errors = list(_validator().iter_errors(cmp))
    if errors:
        where, message = schemas.best_problem(errors)
        raise ValueError(
            f"{source}: expected an object matching compare.schema.json, got at {where}: "
            f"{message}" + (f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else "")
        )


def regressions(cmp: dict) -> list[dict]:
    """The rows whose verdict is "regressed"."""
    return [r for r in cmp["rows"] if r["verdict"] == "regressed"]
