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
  token / ln 2 = bits per byte -- and 1 for the others (0/1 items average to the accuracy);
* ``verdict``: when ``p < alpha``, "improved" or "regressed" by the sign of ``delta`` and the
  metric's direction (``bpb`` lower is better; ``acc``, ``acc_norm``, ``exact_match``,
  ``spearman`` higher is better); otherwise "unchanged".

The verdict comes from the permutation test; the t interval is the size of the change. Near the
boundary the two can disagree slightly (an interval that just excludes 0 with ``p`` just above
alpha); the verdict follows ``p``.

Every other pair is "not comparable" with the reason (a status that is not ok, different data,
different n, no per-item scores -- Spearman rows have none). Rows in only one release are
"added" or "removed". The result validates against ``compare.schema.json`` (tinyllm/schemas/).

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

from tinyllm import metrics, schemas
from tinyllm.errors import StorageError
from tinyllm.stats import mean_ci, paired_permutation_test

SCHEMA_VERSION = 1
SCHEMA_PATH = schemas.schema_file(schemas.COMPARE)

#: which way is better, per metric; per-item units -> metric units (bpb: LM items are NLLs in
#: nats per byte-level token); the metrics whose value is the mean of the row's per-item scores
#: times ITEM_SCALE (Spearman rows have no per-item scores): views of tinyllm.metrics.METRICS
DIRECTION = metrics.DIRECTION
ITEM_SCALE = metrics.ITEM_SCALE
MEAN_METRICS = metrics.MEAN_METRICS
TESTED = ("improved", "regressed", "unchanged")
VERDICTS = (*TESTED, "not comparable", "added", "removed")
#: how far a row's value may be from the mean of its per-item scores (relative), float rounding
VALUE_RTOL = 1e-9

MAX_N_PERM = 1_000_000
"""The most permutations per row :func:`compare_reports` and :func:`compare_row` take. The
p-value's resolution is ``1 / (n_perm + 1)``, so a million permutations resolve p to 1e-6,
far below any alpha. The time grows with ``n_perm`` times the row's items: one row of 2,000
items takes about 6 s at this bound (0.06 s at the default 10,000). A larger ``n_perm`` is
refused: "n_perm: expected at most 1000000 permutations per row, got ..."."""

ItemLoader = Callable[[str], np.ndarray]


class RowItemsMismatchError(ValueError):
    """A row's ``n`` or ``value`` disagrees with the per-item scores it comes with."""


def row_items_problem(row: dict, items: Any) -> str | None:
    """Why an ok row disagrees with its per-item scores, or None when it agrees (or has no
    result to check: a row that is not ``status: "ok"``).

    Checked: ``n`` equals the number of per-item scores (every kind that has them counts its
    items as ``n``), the scores are a 1-d array of finite numbers, and for the metrics of
    :data:`MEAN_METRICS` the value equals their mean times ``ITEM_SCALE`` (relative tolerance
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
    n = row.get("n")
    if isinstance(n, bool) or n != a.size:
        return f"row {name!r}: expected n = {a.size} (the number of its per-item scores), got {n!r}"
    bad = int(np.sum(~np.isfinite(a)))
    if bad:
        return f"row {name!r}: expected finite per-item scores, got {bad} that are not"
    metric = row.get("metric")
    facts = metrics.METRICS.get(metric) if isinstance(metric, str) else None
    if facts is not None and facts.mean_of_items:
        expected = float(np.mean(a)) * facts.item_scale
        value = _num(row.get("value"))
        if value is None or not math.isclose(value, expected, rel_tol=VALUE_RTOL, abs_tol=1e-12):
            return (
                f"row {name!r}: expected {metric} value {expected!r} (the mean of its {a.size} "
                f"per-item scores{facts.item_scale_text}), got {row.get('value')!r}"
            )
    return None


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
    if prev.get("n") != cur.get("n"):
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
    if a_cur.size < 2:
        return nc(f"fewer than 2 paired items ({a_cur.size})")
    if not (np.all(np.isfinite(a_prev)) and np.all(np.isfinite(a_cur))):
        return nc("non-finite per-item scores")

    p = paired_permutation_test(a_cur, a_prev, n_perm=n_perm, rng=np.random.default_rng(seed))
    d = a_cur - a_prev  # paired differences, item units (nats per token, or 0/1 differences)
    ci = mean_ci(d, confidence=1.0 - alpha)
    half = (ci.hi - ci.value) * metrics.METRICS[metric].item_scale
    delta = values["current_value"] - values["previous_value"]
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
        delta=delta,
        lo=delta - half,
        hi=delta + half,
        p=float(p),
        n=int(a_cur.size),
    )


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


# --- rendering ----------------------------------------------------------------------------------


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


def _delta_text(r: dict) -> str:
    if r["delta"] is None:
        return "-"
    return f"{format_number(r['delta'], True)} [{format_number(r['lo'], True)}, {format_number(r['hi'], True)}]"


def _metric_text(r: dict) -> str:
    return (r["metric"] or "-") + metrics.ARROW.get(r["direction"], "")


def summary_line(cmp: dict) -> str:
    """``r2 vs r1: 1 regressed, 2 unchanged, ...`` (zero counts left out)."""
    parts = [f"{n} {v}" for v, n in cmp["summary"].items() if n]
    return f"{cmp['current']} vs {cmp['previous']}: " + (", ".join(parts) or "no rows")


def compare_markdown(cmp: dict) -> str:
    """A markdown summary of a comparison (for a Prefect artifact or a PR comment)."""
    conf = round(cmp["confidence"] * 100)
    lines = [
        f"### {summary_line(cmp)}",
        "",
        f"Paired sign-flip permutation test ({cmp['n_perm']} permutations, seed {cmp['seed']}) "
        f"at alpha = {cmp['alpha']}; delta = {cmp['current']} - {cmp['previous']} with its "
        f"{conf}% t interval. ↓ lower is better, ↑ higher is better.",
        "",
        f"| entry | metric | {cmp['previous']} | {cmp['current']} | delta [{conf}% CI] | p "
        "| n | verdict |",
        "|---|---|---:|---:|---|---:|---:|---|",
    ]
    for r in cmp["rows"]:
        verdict = r["verdict"]
        if verdict in ("regressed", "improved"):
            verdict = f"**{verdict}**"
        elif r["reason"]:
            verdict = f"{verdict}: {r['reason']}"
        cells = [
            f"`{r['name']}`",
            _metric_text(r),
            format_number(r["previous_value"]),
            format_number(r["current_value"]),
            _delta_text(r),
            format_p(r["p"]),
            "-" if r["n"] is None else str(r["n"]),
            verdict,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


_STYLE = {"improved": "green", "regressed": "bold red", "not comparable": "yellow"}


def compare_table(cmp: dict) -> Any:
    """A rich Table of a comparison, for the terminal (fits 80 columns).

    The t interval is symmetric, so it is shown as ``delta ± half-width``; reasons go in the
    caption below the table; ``n`` is in the JSON and the markdown.
    """
    # imported here: only the terminal table needs rich, and it costs start-up time
    from rich import box
    from rich.table import Table
    from rich.text import Text

    conf = round(cmp["confidence"] * 100)
    notes = [f"{r['name']}: {r['verdict']}: {r['reason']}" for r in cmp["rows"] if r["reason"]]
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
        (cmp["previous"], "right"),
        (cmp["current"], "right"),
        (f"delta ± {conf}% CI", "right"),
        ("p", "right"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)
    for r in cmp["rows"]:
        delta = "-"
        if r["delta"] is not None:
            delta = f"{r['delta']:+.4f} ± {(r['hi'] - r['lo']) / 2:.4f}"
        table.add_row(
            r["name"],
            Text(r["verdict"], style=_STYLE.get(r["verdict"], "")),
            _metric_text(r),
            format_number(r["previous_value"]),
            format_number(r["current_value"]),
            delta,
            format_p(r["p"]),
        )
    return table
