"""How many units does a row need? (docs/definitions.md, "The detectable difference").

:func:`plan_row` answers "how many units (documents, rows, pairs) would a comparison of this row
need to detect a change of D?" from what a stored release says about the row's spread over its
units, by :func:`tinyllm.stats.units_needed`:

* the release's stored comparison, when it tested the row: the standard error of the paired
  difference over G units gives the standard deviation of one unit's difference,
  ``sd = se sqrt(G)`` (:func:`tinyllm.stats.unit_sd`), which already holds how much the two
  releases' scores of a unit move together;
* otherwise (the first release, a row not comparable) the row's own scores over its units: the
  standard error of its value ``se_1`` (the cluster-robust ratio estimator over its units,
  :func:`tinyllm.stats.cluster_ratio`, in the metric's units), and ``sd = sqrt(2) se_1 sqrt(G)``,
  the difference of two releases whose scores of a unit were independent. Paired releases
  usually move together, so this bound asks for more units than a comparison will need.

Then ``units_needed(sd, D)`` is the smallest G whose ``mde = (t_{.975, G-1} + t_{.80, G-1}) sd /
sqrt(G)`` is at most ``|D|``: a change of D is called with probability 0.80 at two-sided alpha
0.05. It assumes new units are like the old ones (about as large, as varied).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinyllm import metrics
from tinyllm.comparison import ComparisonRow
from tinyllm.report import StoredRow
from tinyllm.stats import ALPHA, POWER, cluster_ratio, mde, unit_sd, units_needed
from tinyllm.store import Store, StoreError, StoreKeyError


@dataclass(frozen=True)
class Plan:
    """The answer of :func:`plan_row`, every number in the metric's units.

    * ``release``, ``entry``, ``metric``, ``delta`` (D, the change to detect);
    * ``source``: where the spread comes from (``"comparison with r1"`` or ``"the row's own
      units"``), ``paired``: whether it is a paired difference's (the first source);
    * ``n_units``: G of that source; ``se``: its standard error (of the paired difference, or of
      the row's value); ``sd_unit``: the standard deviation of one unit's difference;
    * ``mde_now``: the change G units can see (80% power, alpha 0.05);
    * ``units``: how many units a change of ``delta`` needs.
    """

    release: str
    entry: str
    metric: str
    delta: float
    source: str
    paired: bool
    n_units: int
    se: float
    sd_unit: float
    mde_now: float
    units: int


def _compared(store: Store, release: str, entry: str) -> tuple[ComparisonRow, str] | None:
    """The release's stored comparison row of ``entry`` when it was tested and carries its
    standard error (comparisons stored before units have none), with the release it compares
    against."""
    try:
        cmp = store.read_compare(release)
    except StoreKeyError:
        return None
    for r in cmp.rows:
        if r.name == entry and r.se is not None and r.n_units:
            return r, cmp.previous
    return None


def _own_spread(store: Store, release: str, row: StoredRow) -> tuple[int, float]:
    """``(G, se)`` of the row's value over its units, in the metric's units."""
    name = row.name
    if row.metric not in metrics.MEAN_METRICS:
        raise StoreError(
            f"plan: row {name!r} of {release}: expected a comparison that tested it (a "
            f"{row.metric} row's spread comes from its paired test), got none"
        )
    if not row.items:
        raise StoreError(f"plan: row {name!r} of {release}: expected per-item scores, got none")
    items = store.items_loader(release, None)(name)
    units = store.units_loader(release, None)(name)
    covered = ~np.isnan(items)
    ids = np.arange(items.size) if units is None else units
    if units is None and row.n_units != row.n:
        raise StoreError(
            f"plan: row {name!r} of {release}: expected its unit ids (n_units "
            f"{row.n_units} for {row.n} items), got none: a release stored before "
            "units; compare two releases or rescore it"
        )
    iv = cluster_ratio(items[covered], ids[covered])
    return int(iv.n_units), float(iv.se) * metrics.item_scale(row.metric, row.n, row.details)


def plan_row(store: Store, release: str, entry: str, delta: float, *, power: float = POWER) -> Plan:
    """How many units a comparison of row ``entry`` needs to detect a change of ``delta`` (in the
    metric's units: bits per byte, a proportion), from the stored ``release`` (module docstring).

    Example: a comparison over G = 20 documents with se 0.01 bpb -> sd of one document's
    difference 0.0447; a change of 0.01 bpb needs 159 documents (20 could see 0.0295).

    Raises StoreError for a release or row the store does not have, a row that is not ok, and a
    row whose spread cannot be known (no comparison, no per-item scores or unit ids);
    ValueError for ``delta`` 0 or not finite.
    """
    if not (isinstance(delta, int | float) and math.isfinite(delta) and delta != 0):
        raise ValueError(f"delta: expected a finite nonzero change to detect, got {delta!r}")
    rows = store.read_stored_report(release).rows
    row = next((r for r in rows if r.name == entry), None)
    if row is None:
        names = ", ".join(r.name for r in rows) or "none"
        raise StoreError(f"plan: expected a row of {release} (rows: {names}), got {entry!r}")
    if row.status != "ok":
        raise StoreError(f"plan: row {entry!r} of {release}: expected status ok, got {row.status}")
    found = _compared(store, release, entry)
    if found is not None:
        c, previous = found
        g, se, paired, source = (
            int(c.n_units),
            float(c.se),
            True,
            f"comparison with {previous}",
        )
        sd = unit_sd(se, g)
    else:
        g, se = _own_spread(store, release, row)
        paired, source = False, "the row's own units"
        sd = math.sqrt(2.0) * unit_sd(se, g)
    now = mde(sd / math.sqrt(g), g - 1, ALPHA, power)
    need = units_needed(sd, float(delta), power=power, alpha=ALPHA)
    return Plan(release, entry, row.metric, float(delta), source, paired, g, se, sd, now, need)
