"""What every estimator shares: the confidence level, ``ln 2``, the method names
(:class:`Method`), :class:`Interval` and the input checks (docs/definitions.md, "Intervals").

Imports nothing of the project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import stats as sps

LN2 = math.log(2.0)
CONFIDENCE = 0.95
ALPHA = 0.05
"""The two-sided level of every test: a difference is called at ``p < 0.05``."""
POWER = 0.80
"""The power at which a row's minimum detectable difference is stated."""


class Method(StrEnum):
    """The name of each interval method, written once: reports, schemas, the CLI and the
    dashboard read these strings (a member equals its string: ``Method.IID == "iid"``).

    One-sample intervals (the registry, :data:`tinyllm.stats.ESTIMATORS`):

    * ``cluster_ratio`` -- cluster-robust ratio estimator over units, t with G - 1 df (mean
      NLL, bpb, ppl, accuracy over positions);
    * ``wilson`` -- Wilson score interval, when every unit is one 0/1 item;
    * ``cluster_bootstrap`` -- percentile bootstrap resampling units, from the caller's rng;
    * ``fisher_z`` -- Fisher z interval of a Spearman correlation over pairs;
    * ``iid`` -- Student t over items as if each were a unit: the token-level reference
      (``iid_interval``).

    Paired differences (:func:`tinyllm.stats.paired_difference`):

    * ``paired_t`` -- t over unit-level differences (G - 1 df), sign-flip p over units;
    * ``paired_bootstrap`` -- percentile bootstrap of a paired statistic over units (the
      difference of two Spearman correlations), swap permutation p over units.
    """

    CLUSTER_RATIO = "cluster_ratio"
    WILSON = "wilson"
    CLUSTER_BOOTSTRAP = "cluster_bootstrap"
    FISHER_Z = "fisher_z"
    IID = "iid"
    PAIRED_T = "paired_t"
    PAIRED_BOOTSTRAP = "paired_bootstrap"


LEGACY_METHODS: dict[str, Method] = {
    "student_t": Method.IID,
    "student_t_paired": Method.PAIRED_T,
    "bootstrap_percentile": Method.CLUSTER_BOOTSTRAP,
    "bootstrap": Method.CLUSTER_BOOTSTRAP,
    "wilson": Method.WILSON,
    "fisher_z": Method.FISHER_Z,
}
"""The names reports written before units used, and what each one computed in today's names
(their intervals were over items: each item its own unit)."""


def read_method(name: str) -> Method:
    """The :class:`Method` a stored name stands for: today's names, or a legacy one
    (:data:`LEGACY_METHODS`: ``"student_t"`` -> ``Method.IID``). ValueError for anything else.
    """
    if name in LEGACY_METHODS:
        return LEGACY_METHODS[name]
    try:
        return Method(name)
    except ValueError:
        known = [m.value for m in Method] + sorted(set(LEGACY_METHODS) - set(Method))
        raise ValueError(f"interval method: expected one of {known}, got {name!r}") from None


@dataclass(frozen=True)
class Interval:
    """A point estimate with the ends of its interval, in the value's units.

    ``Interval(value, lo, hi)`` is all the plain estimators (:func:`~tinyllm.stats.mean_ci`,
    :func:`~tinyllm.stats.wilson_interval`, ...) fill in. The registry's estimators
    (:data:`tinyllm.stats.ESTIMATORS`) also say how it was computed:

    * ``method``: the estimator's name (:class:`tinyllm.stats.Method`), ``""`` when not stated;
    * ``n_units``: G, the sampling units the interval is over (``None``: not stated);
    * ``df``: the t distribution's degrees of freedom (``G - 1``; ``None`` when no t is used);
    * ``se``: the standard error of ``value`` in its units (``None`` when the method has none);
    * ``warning``: one line the caller shows with the row (fewer than 10 units, blocks instead
      of documents), ``""`` when there is nothing to say.

    Example: ``Interval(2.0, 1.5, 2.5) == Interval(2.0, 1.5, 2.5, method="")``.
    """

    value: float
    lo: float
    hi: float
    method: str = ""
    n_units: int | None = None
    df: int | None = None
    se: float | None = None
    warning: str = ""


def check_1d(x, name: str = "x", min_len: int = 1) -> np.ndarray:
    """Return ``x`` as a 1-d float64 array of finite values, or raise a clear error."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d array, got shape {a.shape}")
    if a.size < min_len:
        raise ValueError(f"{name}: expected at least {min_len} values, got {a.size}")
    if not np.all(np.isfinite(a)):
        bad = int(np.flatnonzero(~np.isfinite(a))[0])
        raise ValueError(f"{name}: expected finite values, got {a[bad]} at index {bad}")
    return a


def check_rng(rng) -> np.random.Generator:
    """``rng`` itself when it is a :class:`numpy.random.Generator`; a TypeError otherwise."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def check_count(value, name: str, minimum: int = 1) -> int:
    """``value`` as an int when it is an integer ``>= minimum`` (not a bool); else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def t_quantile(n: int, confidence: float) -> float:
    """The ``(1 + confidence) / 2`` quantile of Student's t with ``n - 1`` degrees of freedom
    (``t_quantile(3, 0.95)`` = 4.3027)."""
    return float(sps.t.ppf(0.5 + confidence / 2.0, n - 1))
