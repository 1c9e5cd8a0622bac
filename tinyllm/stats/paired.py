"""Is B better than A? The one paired entry point, :func:`paired_difference`
(docs/definitions.md, "Paired tests").

Two sides scored on the same items are paired: the items' difficulty is shared, so the test is
on differences, and the differences are taken per unit, because units (not items) are what was
sampled. Everything a comparison row reports comes from here: the delta, its interval, the
sign-flip (or swap) permutation p, the standard error and the minimum detectable difference.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from tinyllm.stats.cluster import cluster_bootstrap
from tinyllm.stats.core import (
    CONFIDENCE,
    Interval,
    Method,
    check_1d,
    check_count,
    check_rng,
    t_quantile,
)
from tinyllm.stats.permutation import exact_sign_flips, sign_flip_p
from tinyllm.stats.planning import mde
from tinyllm.stats.spearman import (
    _check_three,
    spearman_along,
    spearman_difference,
    spearman_difference_test,
)
from tinyllm.stats.units import as_units

KINDS = ("mean", "ratio", "spearman")
"""What :func:`paired_difference` compares: unit means, ratios over positions, correlations."""


@dataclass(frozen=True)
class PairedDifference:
    """``value(a) - value(b)`` over the same items, with its test (all in the value's units).

    * ``delta``, ``lo``, ``hi``: the difference and its interval;
    * ``p``: two-sided permutation p over units (sign flips; swaps for ``spearman``);
    * ``se``: the standard error of ``delta``; ``df``: ``G - 1``;
    * ``mde``: ``(t_{.975, G-1} + t_{.80, G-1}) * se``, the minimum detectable difference at
      80% power and two-sided alpha 0.05 (:func:`tinyllm.stats.planning.mde`);
    * ``n_units`` (G), ``n_items``; ``value_a``, ``value_b``: each side's own value;
    * ``kind``: ``"mean"``, ``"ratio"`` or ``"spearman"``; ``method``: ``paired_t`` or
      ``paired_bootstrap`` (:class:`~tinyllm.stats.core.Method`);
    * ``exact``: whether p enumerates every pattern (else ``n_perm`` draws from the rng);
    * ``warning``: the units' line (fewer than 10 units, blocks for units), ``""`` if none.
    """

    delta: float
    lo: float
    hi: float
    p: float
    se: float
    df: int
    mde: float
    n_units: int
    n_items: int
    value_a: float
    value_b: float
    kind: str
    method: str
    exact: bool
    n_perm: int
    warning: str = ""

    @property
    def interval(self) -> Interval:
        """The delta's interval as an :class:`~tinyllm.stats.core.Interval`."""
        return Interval(
            self.delta, self.lo, self.hi, self.method, self.n_units, self.df, self.se, self.warning
        )

    def scaled(self, factor: float) -> PairedDifference:
        """The same comparison in other units: delta, ends, se, mde and both values times
        ``factor`` (bits per byte from nats per byte: ``1 / ln 2``); a negative factor swaps
        the ends. p is unchanged.

        Example: delta 0.0693 nats per byte, scaled by ``1 / ln 2`` -> 0.1 bits per byte.
        """
        if not (math.isfinite(factor) and factor != 0):
            raise ValueError(f"factor: expected a finite nonzero number, got {factor!r}")
        lo, hi = sorted((self.lo * factor, self.hi * factor))
        return dataclasses.replace(
            self,
            delta=self.delta * factor,
            lo=lo,
            hi=hi,
            se=self.se * abs(factor),
            mde=self.mde * abs(factor),
            value_a=self.value_a * factor,
            value_b=self.value_b * factor,
        )


def _paired_arrays(a, b) -> tuple[np.ndarray, np.ndarray]:
    x, y = check_1d(a, "a"), check_1d(b, "b")
    if x.size != y.size:
        raise ValueError(
            f"paired difference: expected a and b scored on the same items (equal length), "
            f"got {x.size} and {y.size}"
        )
    return x, y


def _t_result(delta, se, g, confidence, **fields) -> PairedDifference:
    half = t_quantile(g, confidence) * se
    return PairedDifference(
        delta=delta,
        lo=delta - half,
        hi=delta + half,
        se=se,
        df=g - 1,
        mde=mde(se, g - 1),
        n_units=g,
        method=Method.PAIRED_T,
        **fields,
    )


def paired_difference(
    a,
    b,
    units,
    rng: np.random.Generator,
    *,
    kind: str = "mean",
    weights=None,
    reference=None,
    n_perm: int = 10_000,
    n_boot: int = 2_000,
    confidence: float = CONFIDENCE,
) -> PairedDifference:
    """``value(a) - value(b)``: two sides' per-item scores of the same items, over units.

    ``a``, ``b``: per-item scores, item i the same item in both; ``units``: each item's unit
    (:class:`~tinyllm.stats.units.Units` or ids); ``rng``: the caller's generator (Monte Carlo
    signs, bootstrap draws). With G units and ``t = t_{(1+c)/2, G-1}``:

    * ``kind="mean"`` -- each unit weighs the same: ``d_g = mean_g(a) - mean_g(b)``,
      ``delta = mean(d_g)``, ``se = sd(d_g) / sqrt(G)`` (``ddof=1``), ``delta ± t se``; p is
      the sign-flip test on the ``d_g`` (:func:`~tinyllm.stats.permutation.sign_flip_p`). This
      is the paired t test on unit means (``scipy.stats.ttest_rel``).
    * ``kind="ratio"`` -- a ratio over positions, ``r = sum_i x_i / sum_i w_i`` (mean NLL,
      nats per byte with ``weights`` the bytes of each token, accuracy over positions);
      ``S_g``, ``N_g`` the unit's sums of the scores and of ``weights`` (1 per item by
      default), ``delta = r_A - r_B``. The interval uses the linearised residuals
      ``e_g = (S^A_g - r_A N_g) - (S^B_g - r_B N_g)``:
      ``se = sqrt(G/(G-1) sum e_g^2) / sum N_g``. Under "no difference" (``r_A = r_B``) the
      residual is ``D_g = S^A_g - S^B_g`` (``e_g = D_g - delta N_g``), so p is the sign-flip
      test on the ``D_g``, whose sum is ``delta * sum N_g``.
    * ``kind="spearman"`` -- ``rho(a, h) - rho(b, h)`` with ``h = reference`` (human scores);
      the interval is the percentile bootstrap resampling units (the same units from a, b and
      h; :func:`~tinyllm.stats.cluster.cluster_bootstrap`, ``n_boot`` draws), ``se`` the
      bootstrap standard deviation; p is the swap test with whole units swapped
      (:func:`~tinyllm.stats.spearman.spearman_difference_test`).

    With one item per unit, ``mean`` and ``ratio`` are the item-level paired t interval and the
    item-level sign-flip test, draw for draw (:func:`~tinyllm.stats.intervals.mean_ci`,
    :func:`~tinyllm.stats.permutation.paired_permutation_test`).

    p is exact (every one of the ``2**G`` patterns) when ``G <= 20`` and ``2**G <= n_perm``,
    else ``(1 + #{T_s >= T}) / (n_perm + 1)`` over ``n_perm`` patterns from ``rng``.
    ``mde = (t_{.975, G-1} + t_{.80, G-1}) * se`` (:func:`~tinyllm.stats.planning.mde`).

    Example: ``a = [1, 2, 3, 4]``, ``b = [0, 1, 3, 3]`` in units ``[0, 0, 1, 1]`` (mean) ->
    ``d = [1, 0.5]``, delta 0.75, se 0.25, interval ``0.75 ± 12.706 * 0.25`` =
    (-2.4266, 3.9266), exact p = 2/4 = 0.5 (the sign patterns ++ and -- reach ``|1.5|``), mde
    ``(12.706 + 1.376) * 0.25 = 3.5206``, with a warning (2 units).

    Raises ValueError for items or units that do not pair (lengths differ), an unknown kind,
    and ``reference`` missing for (or given to) a kind that needs (or ignores) it.
    """
    rng = check_rng(rng)
    n_perm = check_count(n_perm, "n_perm", 1)
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {list(KINDS)}, got {kind!r}")
    if (reference is None) == (kind == "spearman"):
        given = "missing" if reference is None else "given"
        raise ValueError(
            f"reference: expected reference scores for kind 'spearman' only, got kind {kind!r} "
            f"with the reference {given}"
        )
    if weights is not None and kind != "ratio":
        raise ValueError(f"weights: expected only for kind 'ratio', got kind {kind!r}")
    x, y = _paired_arrays(a, b)
    u = as_units(units, x.size)
    g = u.n_units
    common = {"n_items": x.size, "kind": kind, "n_perm": n_perm, "warning": u.warning}
    common["exact"] = exact_sign_flips(g, n_perm)
    if kind == "mean":
        ma, mb = u.means(x, "a"), u.means(y, "b")
        d = ma - mb
        delta = math.fsum(d) / g
        se = 0.0 if np.all(d == d[0]) else float(np.std(d, ddof=1)) / math.sqrt(g)
        p = sign_flip_p(d, n_perm, rng)
        va, vb = math.fsum(ma) / g, math.fsum(mb) / g
        return _t_result(delta, se, g, confidence, p=p, value_a=va, value_b=vb, **common)
    if kind == "ratio":
        w = np.ones_like(x) if weights is None else check_1d(weights, "weights")
        if w.size != x.size:
            raise ValueError(f"weights: expected one per item ({x.size}), got {w.size}")
        N = u.sums(w, "weights")
        total = math.fsum(N)
        if np.any(N < 0) or not total > 0:
            raise ValueError(f"weights: expected weights >= 0 with a positive total, got {total}")
        SA, SB = u.sums(x, "a"), u.sums(y, "b")
        D = SA - SB
        delta = math.fsum(D) / total
        e = D - delta * N
        tiny = np.all(np.abs(e) <= 1e-12 * max(float(np.abs(SA).max()), float(np.abs(SB).max())))
        se = 0.0 if tiny else math.sqrt(g / (g - 1) * math.fsum(e * e)) / total
        p = sign_flip_p(D, n_perm, rng)
        va, vb = math.fsum(SA) / total, math.fsum(SB) / total
        return _t_result(delta, se, g, confidence, p=p, value_a=va, value_b=vb, **common)
    h = np.asarray(reference, dtype=np.float64)
    x, y, h = _check_three(x, y, h, 4)
    rows = np.column_stack([x, y, h])
    boot = cluster_bootstrap(
        rows,
        u,
        rng,
        statistic=lambda r: float(spearman_difference(r[:, 0], r[:, 1], r[:, 2])),
        n_boot=n_boot,
        confidence=confidence,
    )
    p = spearman_difference_test(x, y, h, n_perm, rng, units=u)
    se = float(boot.se)
    return PairedDifference(
        delta=boot.value,
        lo=boot.lo,
        hi=boot.hi,
        p=p,
        se=se,
        df=g - 1,
        mde=mde(se, g - 1),
        n_units=g,
        value_a=float(spearman_along(x, h)),
        value_b=float(spearman_along(y, h)),
        method=Method.PAIRED_BOOTSTRAP,
        **common,
    )
