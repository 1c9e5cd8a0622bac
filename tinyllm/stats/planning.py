"""What a comparison can see (docs/definitions.md, "The detectable difference"): the minimum
detectable difference of a paired test over G units.
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

    Example: ``mde_factor(28)`` = ``t_{.975, 28} + t_{.80, 28}`` = 2.0484 + 0.8546 = 2.9030;
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

    Example: ``se_diff = 0.01`` bpb over 29 documents -> ``2.9030 * 0.01 = 0.0290`` bpb.
    """
    if not (math.isfinite(se_diff) and se_diff >= 0):
        raise ValueError(f"se_diff: expected a finite standard error >= 0, got {se_diff!r}")
    return mde_factor(df, alpha, power) * se_diff
