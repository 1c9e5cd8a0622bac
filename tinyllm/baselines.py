"""Every row's trivial baseline and the verdict "does the model beat it?" (docs/definitions.md, the zoo).

A kind's scorer returns its baseline as a :class:`Baseline`: a name ("copy", "majority class",
"always original", "most frequent byte", "unigram", "zero correlation", "zero accuracy"), its
value in the row's metric, and, where the baseline is scored item by item, its per-item scores on
the very items the model was scored on. :func:`judge` then says which is better:

* per-item baseline scores: the paired comparison over the row's units,
  :func:`tinyllm.stats.paired_difference` (a ratio over items: the linearised per-unit
  residuals, t with G - 1 df, the sign-flip test over units), rescaled to the metric's units
  (:func:`paired_verdict`);
* a constant baseline of a proportion row: the Wilson score test of ``k / n`` against the
  baseline's value ``p0`` (the Wilson interval is this test inverted: the interval excludes
  ``p0`` exactly when ``p < 0.05``) (:func:`wilson_verdict`);
* a constant baseline of a correlation row: the Fisher z test of ``rho`` against ``r0``
  (:func:`fisher_verdict`).

Each row's own test gives ``p``; the verdicts of one report are decided together
(:func:`adjust_verdicts`: Holm over the rows that were tested, docs/definitions.md "Holm"), so
the verdict is "better" or "worse" when the Holm-adjusted ``p_adjusted < ALPHA`` (on the side the
delta says, with the metric's direction: lower bpb is better), else "not distinguishable".
Nothing here knows about models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from tinyllm.metrics import DIRECTION
from tinyllm.report import BaselineInfo, BeatsBaseline, Row
from tinyllm.stats import (
    ALPHA,
    BASELINE_WORDS,
    CONFIDENCE,
    Method,
    holm_adjust,
    paired_difference,
    verdict,
    wilson_interval,
)

N_PERM = 10_000
"""Random sign patterns of the paired test (all ``2**n`` patterns when that is fewer)."""
VERDICTS = ("better", "worse", "not distinguishable")
TESTS = ("paired permutation", "wilson", "fisher z")
DIRECTIONS = ("lower", "higher")


@dataclass(frozen=True)
class Baseline:
    """A row's trivial baseline.

    * ``name``: what it is ("copy", "majority class", ...);
    * ``value``: its score in the row's metric and units;
    * ``lo``, ``hi``: its 95% interval where it is scored per item (else None);
    * ``items``: its per-item scores on the row's items, in the row's item order and units (lm:
      per-token NLLs in nats; proportions: 0/1), or None for a constant baseline;
    * ``item_scale``: what ``mean(items)`` is multiplied by to give ``value`` (and what a mean
      difference of items is multiplied by to give a difference of values);
    * ``details``: how it was built (the majority label, the byte, the training text ...).
    """

    name: str
    value: float
    lo: float | None = None
    hi: float | None = None
    items: np.ndarray | None = None
    item_scale: float = 1.0
    details: dict = field(default_factory=dict)


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: expected one of {list(DIRECTIONS)}, got {direction!r}")


def _verdict(p: float, delta: float, direction: str) -> str:
    return verdict(p, delta, direction, alpha=ALPHA, words=BASELINE_WORDS)


def paired_verdict(
    items,
    baseline_items,
    *,
    direction: str,
    item_scale: float = 1.0,
    rng: np.random.Generator | None = None,
    n_perm: int = N_PERM,
    units=None,
) -> dict:
    """The model's per-item scores ``a`` against the baseline's ``b`` on the same items, over
    the items' units (:func:`tinyllm.stats.paired_difference`, ``kind="ratio"``: the value is
    ``item_scale * sum(items) / n``).

    ``units``: the unit id of each item (None: each item its own unit). With G units, ``S^A_g``
    and ``S^B_g`` the unit's summed scores and ``N_g`` its items: ``delta = item_scale (r_A -
    r_B)`` in the metric's units, its interval ``delta ± t_{.975, G-1} se`` from the linearised
    residuals ``e_g = (S^A_g - r_A N_g) - (S^B_g - r_B N_g)``, ``p`` the two-sided sign-flip
    test on ``D_g = S^A_g - S^B_g`` (exact for ``2**G <= n_perm``, else ``n_perm`` signs from
    ``rng``; None: ``default_rng(0)``), ``mde = (t_{.975} + t_{.80}) se``. With one item per
    unit this is the item-level paired t interval and sign-flip test. Items that are NaN in
    either array (out of vocabulary) are left out of both, with their units. Returns
    ``{"verdict", "test": "paired permutation", "p", "p_adjusted", "delta", "interval":
    [lo, hi], "n", "n_units", "method": "paired_t", "se", "mde"}``; ``p_adjusted`` is ``p``
    until the report's rows are adjusted together (:func:`adjust_verdicts`).

    Example: ``a = [1, 1, 1, 1]``, ``b = [0, 0, 0, 0]``, higher is better -> delta 1.0,
    interval [1, 1], p = 2/16 = 0.125 (exact), "not distinguishable" (four items cannot show it).
    """
    _check_direction(direction)
    a = np.asarray(items, dtype=np.float64)
    b = np.asarray(baseline_items, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(
            f"baseline items: expected one per row item ({a.shape}), got shape {b.shape}"
        )
    ids = np.arange(a.size) if units is None else np.asarray(units)
    if ids.shape != a.shape:
        raise ValueError(f"units: expected one unit id per row item ({a.shape}), got {ids.shape}")
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b, ids = a[keep], b[keep], ids[keep]
    if a.size < 2:
        raise ValueError(f"baseline items: expected at least 2 paired items, got {a.size}")
    rng = np.random.default_rng(0) if rng is None else rng
    pd = paired_difference(a, b, ids, rng, kind="ratio", n_perm=n_perm)
    if item_scale != 1.0:
        pd = pd.scaled(item_scale)
    return {
        "verdict": _verdict(pd.p, pd.delta, direction),
        "test": "paired permutation",
        "p": float(pd.p),
        "delta": float(pd.delta),
        "interval": [float(pd.lo), float(pd.hi)],
        "n": int(a.size),
        "p_adjusted": float(pd.p),
        "n_units": int(pd.n_units),
        "method": str(pd.method),
        "se": float(pd.se),
        "mde": float(pd.mde),
    }


def wilson_verdict(k: int, n: int, p0: float) -> dict:
    """A proportion ``k / n`` against a constant baseline proportion ``p0`` (no per-item
    baseline scores): the Wilson score test.

    ``z = (k/n - p0) / sqrt(p0 (1 - p0) / n)``, ``p = 2 (1 - Phi(|z|))``; the Wilson 95% interval
    of ``k / n`` excludes ``p0`` exactly when ``p < 0.05``. For ``p0`` of 0 or 1 any other
    observed proportion is impossible under the baseline (``p = 0``) and ``k / n = p0`` gives
    ``p = 1``. ``delta = k/n - p0``, its interval the Wilson interval minus ``p0``. Higher is
    better. Returns ``{"verdict", "test": "wilson", "p", "delta", "interval", "n"}``.

    Example: ``wilson_verdict(30, 100, 0.0)`` -> delta 0.3, p 0, "better";
    ``wilson_verdict(8, 10, 0.5)`` -> z = 1.897, p = 0.0578, "not distinguishable" (the
    interval (0.4902, 0.9433) holds 0.5).
    """
    if not 0.0 <= p0 <= 1.0:
        raise ValueError(f"baseline value: expected a proportion in [0, 1], got {p0}")
    ci = wilson_interval(k, n)
    phat = ci.value
    if p0 in (0.0, 1.0):
        p = 1.0 if phat == p0 else 0.0
    else:
        z = (phat - p0) / math.sqrt(p0 * (1.0 - p0) / n)
        p = float(2.0 * sps.norm.sf(abs(z)))
    delta = phat - p0
    return {
        "verdict": _verdict(p, delta, "higher"),
        "test": "wilson",
        "p": float(p),
        "delta": float(delta),
        "interval": [float(ci.lo - p0), float(ci.hi - p0)],
        "n": int(n),
        "p_adjusted": float(p),
        "n_units": int(n),
        "method": str(Method.WILSON),
        "se": None,
        "mde": None,
    }


def fisher_verdict(rho: float, n: int, r0: float = 0.0) -> dict:
    """A correlation ``rho`` on ``n`` pairs against a constant correlation ``r0`` (0: no
    relation): the Fisher z test, the one the row's Fisher z interval inverts.

    ``z = (atanh(rho) - atanh(r0)) sqrt(n - 3)``, ``p = 2 (1 - Phi(|z|))``; ``delta = rho - r0``,
    its interval the Fisher interval ``tanh(atanh(rho) ± 1.95996 / sqrt(n - 3))`` minus ``r0``.
    Higher is better. Returns ``{"verdict", "test": "fisher z", "p", "delta", "interval", "n"}``.

    Example: ``fisher_verdict(0.5, 28)`` -> z = 0.5493 * 5 = 2.747, p = 0.0060, "better",
    interval [0.1560, 0.7358].
    """
    if int(n) != n or n < 4:
        raise ValueError(f"n: expected an integer >= 4 (Fisher z divides by sqrt(n-3)), got {n}")
    if not -1.0 < r0 < 1.0:
        raise ValueError(f"baseline value: expected a correlation in (-1, 1), got {r0}")
    if not -1.0 <= rho <= 1.0:
        raise ValueError(f"rho: expected a correlation in [-1, 1], got {rho}")
    zq = float(sps.norm.ppf(0.5 + CONFIDENCE / 2.0))
    if abs(rho) == 1.0:
        p, lo, hi = 0.0, rho, rho
    else:
        z = (math.atanh(rho) - math.atanh(r0)) * math.sqrt(n - 3)
        p = float(2.0 * sps.norm.sf(abs(z)))
        half = zq / math.sqrt(n - 3)
        lo, hi = math.tanh(math.atanh(rho) - half), math.tanh(math.atanh(rho) + half)
    delta = rho - r0
    return {
        "verdict": _verdict(p, delta, "higher"),
        "test": "fisher z",
        "p": float(p),
        "delta": float(delta),
        "interval": [float(lo - r0), float(hi - r0)],
        "n": int(n),
        "p_adjusted": float(p),
        "n_units": int(n),
        "method": str(Method.FISHER_Z),
        "se": None,
        "mde": None,
    }


def judge(
    baseline: Baseline,
    *,
    value: float,
    n: int,
    items,
    metric: str,
    direction: str,
    rng: np.random.Generator | None = None,
    units=None,
) -> dict:
    """The row's ``beats_baseline``: :func:`paired_verdict` over the row's ``units`` when the
    baseline has per-item scores (and the row has its own), else :func:`fisher_verdict` for a
    Spearman row and :func:`wilson_verdict` for a proportion row (``k = round(value * n)``)."""
    if baseline.items is not None and items is not None:
        return paired_verdict(
            items,
            baseline.items,
            direction=direction,
            item_scale=baseline.item_scale,
            rng=rng,
            units=units,
        )
    if metric == "spearman":
        return fisher_verdict(value, n, baseline.value)
    if metric in ("acc", "acc_norm", "exact_match"):
        return wilson_verdict(round(value * n), n, baseline.value)
    raise ValueError(
        f"baseline {baseline.name!r}: expected per-item baseline scores for a {metric} row, got none"
    )


def baseline_field(baseline: Baseline, items_ref: str | None) -> dict:
    """The row's ``baseline`` field: ``{"name", "value", "interval": [lo, hi] | None, "items":
    items_ref | None, "details"}`` (JSON-native)."""
    interval = None if baseline.lo is None else [float(baseline.lo), float(baseline.hi)]
    return {
        "name": baseline.name,
        "value": float(baseline.value),
        "interval": interval,
        "items": items_ref if baseline.items is not None else None,
        "details": dict(baseline.details),
    }


def items_ref(name: str) -> str:
    """Where row ``name``'s baseline items go beside the report: ``items/<name>.baseline.npy``
    (the row's own are ``items/<name>.npy``)."""
    return f"items/{name}.baseline.npy"


def row_items_ref(row) -> str | None:
    """The ``baseline.items`` reference of a row document (None when it has none)."""
    return (row.get("baseline") or {}).get("items")


def row_fields(
    scored, name: str, rng: np.random.Generator | None = None
) -> tuple[BaselineInfo | None, BeatsBaseline | None, np.ndarray | None]:
    """An ok row's ``(baseline, beats_baseline, baseline items)`` from what its kind's scorer
    returned (``scored``: ``baseline``, ``interval.value``, ``n``, ``items``, ``metric``): the
    row's typed fields :func:`baseline_field` (items at :func:`items_ref`) and :func:`judge`
    with the metric's direction, and the baseline's per-item scores as float64 (None for a
    constant baseline); ``(None, None, None)`` without a baseline."""
    b = scored.baseline
    if b is None:
        return None, None, None
    verdict = judge(
        b,
        value=scored.interval.value,
        n=scored.n,
        items=scored.items,
        metric=scored.metric,
        direction=DIRECTION[scored.metric],
        rng=rng,
        units=getattr(scored, "units", None),
    )
    items = None if b.items is None else np.asarray(b.items, dtype=np.float64)
    field = BaselineInfo(**baseline_field(b, items_ref(name)))
    return field, BeatsBaseline(**verdict), items


def holm_verdicts(tests: list[tuple[float, float, str]]) -> list[tuple[float, str]]:
    """``(p_adjusted, verdict)`` of each ``(p, delta, metric)`` test of one report decided
    together: Holm's adjustment (:func:`tinyllm.stats.holm_adjust`) over the m tests, each
    verdict read from its ``p_adjusted`` at ``ALPHA`` (:func:`tinyllm.stats.verdict`, the
    metric's direction)."""
    adjusted = holm_adjust([p for p, _, _ in tests])
    return [
        (p_adj, _verdict(p_adj, delta, DIRECTION[metric]))
        for p_adj, (_, delta, metric) in zip(adjusted, tests, strict=True)
    ]


def adjust_row_verdicts(rows: list[Row]) -> list[Row]:
    """The rows of one report with their ``beats_baseline`` verdicts decided together
    (:func:`holm_verdicts` over the rows that have one, each given ``p_adjusted``). Rows
    without a verdict are returned as they are; nothing is changed in place."""
    tested = [i for i, r in enumerate(rows) if r.beats_baseline is not None]
    tests = [
        (rows[i].beats_baseline.p, rows[i].beats_baseline.delta, rows[i].metric) for i in tested
    ]
    out = list(rows)
    for i, (p_adj, word) in zip(tested, holm_verdicts(tests), strict=True):
        bb = rows[i].beats_baseline.model_copy(update={"p_adjusted": p_adj, "verdict": word})
        out[i] = rows[i].model_copy(update={"beats_baseline": bb})
    return out


def adjust_verdicts(rows: list[dict]) -> list[dict]:
    """:func:`adjust_row_verdicts` for the row documents of a stored report (JSON dicts, which
    a store may hold without the provenance a :class:`tinyllm.report.Row` requires): Holm over
    the m rows whose ``beats_baseline`` has a ``p`` (:func:`holm_verdicts`), each given
    ``p_adjusted`` and the verdict read from it. Rows without a verdict are returned as they
    are; nothing is changed in place.

    Example: three rows with p 0.01, 0.04 and 0.03 -> p_adjusted 0.03, 0.06, 0.06: only the
    first stays "better".
    """
    tested = [
        i
        for i, r in enumerate(rows)
        if isinstance(r.get("beats_baseline"), dict) and r["metric"] in DIRECTION
    ]
    tests = [(rows[i]["beats_baseline"]["p"], rows[i]["beats_baseline"]["delta"],
              rows[i]["metric"]) for i in tested]  # fmt: skip
    out = list(rows)
    for i, (p_adj, word) in zip(tested, holm_verdicts(tests), strict=True):
        bb = dict(rows[i]["beats_baseline"], p_adjusted=p_adj)
        bb["verdict"] = word
        out[i] = dict(rows[i], beats_baseline=bb)
    return out


def proportion_baseline(name: str, correct, details: dict | None = None) -> Baseline:
    """A baseline scored 0/1 per item: value ``k / n``, its Wilson interval, the 0/1 items.

    Example: ``proportion_baseline("copy", [1, 0, 0, 0])`` -> value 0.25, interval
    (0.0456, 0.6994).
    """
    a = np.asarray(correct, dtype=np.float64)
    if a.ndim != 1 or a.size == 0 or not np.all((a == 0) | (a == 1)):
        raise ValueError(f"baseline {name!r}: expected a non-empty 1-d array of 0/1, got {a!r}")
    ci = wilson_interval(int(a.sum()), int(a.size))
    return Baseline(name, ci.value, ci.lo, ci.hi, a, 1.0, dict(details or {}))
