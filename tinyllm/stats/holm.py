"""Many rows, one decision (docs/definitions.md, "Holm"): Holm's step-down adjustment of the
p-values of the rows one comparison tests, and the verdict read from an adjusted p.

A release comparison tests m rows at once; at ``p < 0.05`` each, a release where nothing changed
still flags about ``0.05 m`` rows. Holm's adjustment holds the chance of any false call across
the m rows at 0.05 (the family-wise error rate), with no assumption about how the rows depend on
each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tinyllm.stats.core import ALPHA

COMPARE_WORDS = ("improved", "regressed", "unchanged")
"""A release against the previous one: (better, worse, no call)."""
BASELINE_WORDS = ("better", "worse", "not distinguishable")
"""A row against its trivial baseline: (better, worse, no call)."""


def _present(p, i: int) -> bool:
    if p is None:
        return False
    if isinstance(p, bool) or not isinstance(p, int | float):
        raise ValueError(f"pvalues: expected a p-value or None, got {p!r} at index {i}")
    if math.isnan(p):
        return False
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pvalues: expected p-values in [0, 1] or None, got {p!r} at index {i}")
    return True


def holm_adjust(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, in the order given.

    The m p-values present are sorted, ``p_(1) <= ... <= p_(m)``, and
    ``adj_(i) = min(1, max_{j <= i} (m - j + 1) p_(j))``: the smallest is multiplied by m, the
    next by m - 1, ..., each made at least the one before it (monotone) and capped at 1. A row
    is called at level alpha when its adjusted p is below alpha, which is Holm's step-down
    procedure. Equal p-values get equal adjusted values.

    ``None`` or NaN marks a row without a p (not comparable, no test): it stays ``None`` and is
    not counted in m.

    Example: ``[0.01, 0.04, None, 0.03]`` -> m = 3, sorted 0.01, 0.03, 0.04 times 3, 2, 1 ->
    0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06: ``[0.03, 0.06, None, 0.06]``.

    Raises ValueError for a value that is not a p-value (outside [0, 1], a string, a bool).
    """
    ps = list(pvalues)
    present = [i for i, p in enumerate(ps) if _present(p, i)]
    m = len(present)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for rank, i in enumerate(sorted(present, key=lambda i: float(ps[i]))):
        running = max(running, min(1.0, (m - rank) * float(ps[i])))
        out[i] = running
    return out


def verdict(
    p: float | None,
    delta: float,
    direction: str,
    *,
    alpha: float = ALPHA,
    words: tuple[str, str, str] = COMPARE_WORDS,
) -> str:
    """The call on one row from its (adjusted) p: ``words[0]`` (better) or ``words[1]`` (worse)
    when ``p < alpha`` and ``delta != 0``, by the sign of ``delta`` and the metric's
    ``direction`` (``"lower"`` or ``"higher"`` is better); ``words[2]`` otherwise, and when
    ``p`` is ``None``.

    Pass the Holm-adjusted p (:func:`holm_adjust`) of the rows decided together.

    Example: ``verdict(0.03, -0.02, "lower")`` -> "improved";
    ``verdict(0.06, -0.02, "lower", words=BASELINE_WORDS)`` -> "not distinguishable".
    """
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction: expected 'lower' or 'higher', got {direction!r}")
    if p is None or not p < alpha or delta == 0:
        return words[2]
    better = delta < 0 if direction == "lower" else delta > 0
    return words[0] if better else words[1]
