"""What a comparison can see (docs/definitions.md, "The detectable difference"): the minimum
detectable difference of a paired test over G units, and how many units a difference needs.
"""

from __future__ import annotations

import math

from scipy import stats as sps

from tinyllm.stats.core import ALPHA, POWER


def _check_level(alpha: float, power: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha: expected a level in (0, 1), got {alpha!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power: expected a power in (0, 1), got {power!r}")


def mde_factor(df: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """``t_{1 - alpha/2, df} + t_{power, df}``: the standard errors between 0 and the smallest
    true difference a two-sided level-``alpha`` t test detects with probability ``power``
    (Student t quantiles with ``df`` degrees of freedom; the second is the ``power`` quantile,
    0.80, not ``1 - power``).

    Example: ``mde_factor(28)`` = ``t_{.975, 28} + t_{.80, 28}`` = 2.04841 + 0.85465 = 2.90305;
    a large df tends to ``z_{.975} + z_{.80}`` = 1.9600 + 0.8416 = 2.8016.
    """
    _check_level(alpha, power)
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df: expected an integer >= 1, got {df!r}")
    return float(sps.t.ppf(1.0 - alpha / 2.0, df) + sps.t.ppf(power, df))


def mde(se_diff: float, df: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable difference: ``mde = (t_{1-alpha/2, df} + t_{power, df}) * se_diff``.

    ``se_diff``: the standard error of the paired difference, in the metric's units (so is the
    result); ``df``: ``G - 1`` for G units. A true difference of this size is called by the
    two-sided paired test at level ``alpha`` (0.05) with probability about ``power`` (0.80);
    a row reading "unchanged" has not ruled out anything smaller.

    Example: ``se_diff = 0.01`` bpb over 29 documents -> ``2.90305 * 0.01 = 0.0290`` bpb.
    """
    if not (math.isfinite(se_diff) and se_diff >= 0):
        raise ValueError(f"se_diff: expected a finite standard error >= 0, got {se_diff!r}")
    return mde_factor(df, alpha, power) * se_diff


def unit_sd(se_diff: float, n_units: int) -> float:
    """The standard deviation of one unit's difference, ``se_diff * sqrt(G)``: what a stored
    comparison of G units says about a new one of any size (``se = sd / sqrt(G)``).

    For a ratio metric (:func:`tinyllm.stats.paired_difference`, ``kind="ratio"``) this is
    ``sqrt(sum e_g^2 / (G - 1)) / mean(N_g)``: it assumes the new units are about as large as
    the old ones. Example: se 0.01 over 25 units -> 0.05.
    """
    if isinstance(n_units, bool) or not isinstance(n_units, int) or n_units < 2:
        raise ValueError(f"n_units: expected an integer >= 2, got {n_units!r}")
    if not (math.isfinite(se_diff) and se_diff >= 0):
        raise ValueError(f"se_diff: expected a finite standard error >= 0, got {se_diff!r}")
    return se_diff * math.sqrt(n_units)


def units_needed(sd_unit: float, D: float, power: float = POWER, alpha: float = ALPHA) -> int:
    """How many units a paired comparison needs to detect a true difference ``D`` (metric
    units) with probability ``power`` at two-sided level ``alpha``.

    The smallest ``G >= 2`` with ``mde = (t_{1-alpha/2, G-1} + t_{power, G-1}) * sd_unit /
    sqrt(G) <= |D|``, ``sd_unit`` the standard deviation of one unit's difference
    (:func:`unit_sd`). Found without iterating on the df by hand: the normal answer
    ``G_z = ((z_{1-alpha/2} + z_{power}) sd_unit / D)^2`` is a lower bound (each t quantile
    exceeds its z), doubling from it finds a G that is enough, and bisection between the two
    finds the smallest (``mde * sqrt(G)`` falls as G grows, so the first G that is enough is
    the answer). ``sd_unit = 0``: 2.

    Example: ``sd_unit = 1``, ``D = 0.5`` -> ``G_z = (2.8016 / 0.5)^2 = 31.4``, and with t:
    34 units (``2.8872 / sqrt(34) = 0.4951 <= 0.5``, while 33 give ``2.8899 / sqrt(33) =
    0.5031``).
    """
    _check_level(alpha, power)
    if not (math.isfinite(sd_unit) and sd_unit >= 0):
        raise ValueError(f"sd_unit: expected a finite standard deviation >= 0, got {sd_unit!r}")
    if not (math.isfinite(D) and D != 0):
        raise ValueError(f"D: expected a finite nonzero difference to detect, got {D!r}")
    if sd_unit == 0:
        return 2

    def enough(g: int) -> bool:
        return mde_factor(g - 1, alpha, power) * sd_unit / math.sqrt(g) <= abs(D)

    z = float(sps.norm.ppf(1.0 - alpha / 2.0) + sps.norm.ppf(power))
    lo = max(2, math.floor((z * sd_unit / abs(D)) ** 2))  # never enough below the normal answer
    if enough(lo):
        return lo
    hi = lo * 2
    while not enough(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # enough(hi), not enough(lo)
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid
    return hi
