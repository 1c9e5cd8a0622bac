"""Statistics behind every number tinyllm reports (SPEC.md sections 4 and 5).

Everything here is plain numpy/scipy on float64 arrays; nothing knows about models.

* :class:`NLLAccumulator` -- streams per-token NLLs (nats) in chunks and gives N, the sum,
  mean NLL, perplexity and bits per byte, with a Student t interval, in bounded memory.
* :func:`mean_ci` -- Student t 95% interval of a mean.
* :func:`bootstrap_ci` -- percentile bootstrap interval drawn from the caller's rng.
* :func:`wilson_interval` -- Wilson score interval of a proportion.
* :func:`fisher_z_interval` / :func:`spearman_ci` -- interval of a rank correlation.
* :func:`paired_permutation_test` -- sign-flip test of "do paired scores a and b differ?".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

LN2 = math.log(2.0)
CONFIDENCE = 0.95


def _check_1d(x, name: str = "x", min_len: int = 1) -> np.ndarray:
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


def _t_quantile(n: int, confidence: float) -> float:
    return float(sps.t.ppf(0.5 + confidence / 2.0, n - 1))


@dataclass(frozen=True)
class Interval:
    """A point estimate with the ends of its interval (same units as the value)."""

    value: float
    lo: float
    hi: float


def mean_ci(x, confidence: float = CONFIDENCE) -> Interval:
    """Student t interval of the mean of ``x``.

    Formula: ``mean ± t_{(1+c)/2, n-1} * s / sqrt(n)`` with ``s`` the sample standard deviation
    (``ddof=1``) and ``c`` the confidence (0.95). The interval is in the units of ``x``; when all
    values are equal ``s = 0`` and the interval has zero width.

    Example: ``mean_ci([1.0, 2.0, 3.0])`` -> value 2.0, ends ``2 ± 4.3027 * 1 / sqrt(3)``
    = (-0.4841, 4.4841).

    Raises ValueError for fewer than 2 values (no spread can be estimated) or non-finite values.
    """
    a = _check_1d(x, "x", min_len=2)
    n = a.size
    m = float(np.mean(a))
    s = float(np.std(a, ddof=1))
    half = _t_quantile(n, confidence) * s / math.sqrt(n)
    return Interval(m, m - half, m + half)


def bootstrap_ci(
    x,
    rng: np.random.Generator,
    n_boot: int = 1000,
    statistic: Callable[..., np.ndarray] = np.mean,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Percentile bootstrap interval of ``statistic(x)``, drawn from the caller's ``rng``.

    Formula: draw ``n_boot`` resamples of ``x`` with replacement (each of size n), compute the
    statistic on each, and take the ``(1-c)/2`` and ``(1+c)/2`` quantiles of those values as the
    ends. ``value`` is the statistic on ``x`` itself. This is exactly
    ``scipy.stats.bootstrap(method="percentile")``, which does the work; the same rng state
    always gives the same interval.

    ``statistic`` must accept ``axis=`` (numpy reductions do). Units are those of the statistic.

    Example: ``bootstrap_ci([0, 1, 1, 1], np.random.default_rng(0))`` -> value 0.75 and an
    interval inside [0, 1].
    """
    a = _check_1d(x, "x", min_len=1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if n_boot < 1:
        raise ValueError(f"n_boot: expected >= 1, got {n_boot}")
    value = float(statistic(a, axis=-1))
    if np.all(a == a[0]):
        # every resample is the same sample: a zero-width interval (scipy warns and returns nan)
        return Interval(value, value, value)
    res = sps.bootstrap(
        (a,),
        statistic,
        n_resamples=n_boot,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        batch=max(1, min(n_boot, 4_000_000 // a.size)),  # bounds memory at ~32 MB a batch
        rng=rng,
    )
    return Interval(value, float(res.confidence_interval.low), float(res.confidence_interval.high))


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval of the proportion ``k / n``.

    Formula, with ``p = k/n`` and ``z`` the standard normal ``(1+c)/2`` quantile (1.95996):
    ``(p + z²/2n ± z * sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``. Stays inside [0, 1] and has the
    right coverage for small n and for p near 0 or 1, unlike ``p ± z*sqrt(p(1-p)/n)``.

    Example: ``wilson_interval(8, 10)`` -> value 0.8, interval (0.4902, 0.9433).
    """
    if isinstance(k, bool) or isinstance(n, bool) or int(k) != k or int(n) != n:
        raise ValueError(f"expected integer counts k and n, got k={k!r}, n={n!r}")
    k, n = int(k), int(n)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"expected 0 <= k <= n and n >= 1, got k={k}, n={n}")
    z = float(sps.norm.ppf(0.5 + confidence / 2.0))
    p = k / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, center - half), min(1.0, center + half))


def fisher_z_interval(rho: float, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Fisher z interval of a correlation ``rho`` measured on ``n`` pairs.

    Formula: ``tanh(atanh(rho) ± z / sqrt(n - 3))`` with ``z`` the standard normal
    ``(1+c)/2`` quantile (1.95996 for 95%). Needs n >= 4. ``rho = ±1`` gives a zero-width
    interval at ±1.

    Example: ``fisher_z_interval(0.5, 28)`` -> (0.1560, 0.7358).
    """
    if int(n) != n or n < 4:
        raise ValueError(
            f"n: expected an integer >= 4 (the interval divides by sqrt(n-3)), got {n}"
        )
    if not -1.0 <= rho <= 1.0 or math.isnan(rho):
        raise ValueError(f"rho: expected a correlation in [-1, 1], got {rho}")
    if abs(rho) == 1.0:
        return Interval(float(rho), float(rho), float(rho))
    z = float(sps.norm.ppf(0.5 + confidence / 2.0))
    c = math.atanh(rho)
    half = z / math.sqrt(n - 3)
    return Interval(float(rho), math.tanh(c - half), math.tanh(c + half))


def spearman_ci(x, y, confidence: float = CONFIDENCE) -> Interval:
    """Spearman rank correlation of paired ``x``, ``y`` with its Fisher z interval.

    ``rho`` is ``scipy.stats.spearmanr(x, y)`` (Pearson correlation of the average ranks); the
    interval is :func:`fisher_z_interval` ``(rho, n)``.
    """
    a = _check_1d(x, "x", min_len=4)
    b = _check_1d(y, "y", min_len=4)
    if a.size != b.size:
        raise ValueError(f"expected x and y of equal length, got {a.size} and {b.size}")
    rho = float(sps.spearmanr(a, b).statistic)
    if math.isnan(rho):
        raise ValueError("spearman: expected x and y that both vary, got a constant input")
    return fisher_z_interval(rho, a.size, confidence)


def paired_permutation_test(
    a, b, n_perm: int = 10_000, rng: np.random.Generator | None = None
) -> float:
    """Two-sided paired sign-flip permutation test; returns the p-value.

    With ``d_i = a_i - b_i`` and observed statistic ``T = |sum_i d_i|``: under "no difference"
    each ``d_i`` is equally likely to carry either sign, so the null distribution of ``T`` is that
    of ``|sum_i s_i d_i|`` over random signs ``s_i in {-1, +1}``.

    p-value convention:

    * when ``2**n <= n_perm`` all ``2**n`` sign patterns are enumerated and
      ``p = #{patterns with T_s >= T} / 2**n`` (exact; the identity pattern is one of them);
    * otherwise ``n_perm`` random sign patterns are drawn from ``rng`` and
      ``p = (1 + #{T_s >= T}) / (n_perm + 1)`` -- the +1 counts the observed data as one of the
      permutations, so p is never 0 and the test is valid at every level.

    ``T_s >= T`` is taken with a relative tolerance of 1e-9 so that floating-point noise in the
    sums does not decide ties. All differences zero gives p = 1.

    Example: ``a = [1, 1, 1, 1]``, ``b = [0, 0, 0, 0]`` -> exact, 2 of 16 patterns reach
    ``|sum| = 4``, p = 0.125.

    Raises ValueError for arrays of different lengths (the items must be paired).
    """
    x = _check_1d(a, "a")
    y = _check_1d(b, "b")
    if x.size != y.size:
        raise ValueError(
            f"paired test: expected a and b scored on the same items (equal length), "
            f"got {x.size} and {y.size}"
        )
    if n_perm < 1:
        raise ValueError(f"n_perm: expected >= 1, got {n_perm}")
    d = x - y
    n = d.size
    observed = abs(math.fsum(d))
    tol = 1e-9 * max(1.0, float(np.abs(d).sum()))
    if observed <= tol:
        return 1.0
    if n <= 20 and 2**n <= n_perm:
        # exact: every sign pattern, rows of a {-1,+1} matrix [2**n, n]
        codes = np.arange(2**n, dtype=np.int64)[:, None]
        signs = 1.0 - 2.0 * ((codes >> np.arange(n)) & 1)
        null = np.abs(signs @ d)
        return float(np.count_nonzero(null >= observed - tol)) / 2**n
    if rng is None:
        rng = np.random.default_rng()
    # Random signs, 8 items at a time: pad d to a multiple of 8, and for each group g of 8 items
    # tabulate the 256 signed partial sums table[g, byte] = sum_j s_j(byte) d_{8g+j}, where bit j
    # of the byte flips item j. One random byte per group then gives the group's signed sum by a
    # lookup: 1/8 of the random draws and no [n_perm, n] sign matrix.
    groups = -(-n // 8)
    dp = np.zeros(groups * 8)
    dp[:n] = d
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1  # [256, 8]
    table = dp.reshape(groups, 8) @ (1.0 - 2.0 * bits).T  # [groups, 256]
    flat = table.reshape(-1)
    offsets = np.arange(groups) * 256  # row starts in the flattened table
    count = 0
    batch = max(1, min(n_perm, 4_000_000 // groups))  # bounds memory at ~36 MB a batch
    done = 0
    while done < n_perm:
        m = min(batch, n_perm - done)
        draws = rng.integers(0, 256, size=(m, groups), dtype=np.uint8)
        null = np.abs(flat[draws + offsets].sum(axis=1))  # [m]
        count += int(np.count_nonzero(null >= observed - tol))
        done += m
    return (1.0 + count) / (n_perm + 1.0)


class NLLAccumulator:
    """Streams per-token NLLs (nats) and summarises them in bounded memory.

    Add chunks with :meth:`add`. Within a chunk numpy's pairwise summation is used; across chunks
    the running sums are Neumaier-compensated, and the variance is merged with Chan's parallel
    formula, so the totals do not drift however many chunks come in.

    * ``n`` -- tokens seen, ``total`` -- ``sum(l_t)`` in nats
    * ``mean`` -- ``total / n`` (nats per token), ``ppl`` -- ``exp(mean)``
    * ``bpb(n_bytes)`` -- ``total / (n_bytes * ln 2)`` (bits per byte)
    * ``mean_ci()`` -- Student t interval of the mean NLL, identical to :func:`mean_ci` on the
      concatenated chunks (to rounding).

    Example: adding ``[ln 2, ln 3]`` then ``[ln 4, ln 3, ln 4]`` gives n = 5 and
    ``ppl = 288 ** (1/5) = 3.1037``.
    """

    def __init__(self) -> None:
        self.n = 0
        self._sum = 0.0
        self._comp = 0.0  # Neumaier compensation term for _sum
        self._mean = 0.0
        self._m2 = 0.0  # sum of squared deviations from the mean (Chan et al.)

    def add(self, nlls) -> None:
        """Add a chunk of per-token NLLs (any 1-d array of finite non-negative-ish floats)."""
        x = np.asarray(nlls, dtype=np.float64).reshape(-1)
        if x.size == 0:
            return
        if not np.all(np.isfinite(x)):
            raise ValueError("NLLAccumulator.add: expected finite NLLs, got inf or nan")
        s = float(np.sum(x))
        t = self._sum + s
        if abs(self._sum) >= abs(s):
            self._comp += (self._sum - t) + s
        else:
            self._comp += (s - t) + self._sum
        self._sum = t
        nb = x.size
        mb = s / nb
        m2b = float(np.sum((x - mb) ** 2))
        na = self.n
        delta = mb - self._mean
        n = na + nb
        self._mean += delta * nb / n
        self._m2 += m2b + delta * delta * na * nb / n
        self.n = n

    @property
    def total(self) -> float:
        """Sum of the NLLs in nats."""
        return self._sum + self._comp

    @property
    def mean(self) -> float:
        """Mean NLL in nats per token."""
        self._require(1)
        return self.total / self.n

    @property
    def ppl(self) -> float:
        """Perplexity ``exp(mean NLL)``."""
        return math.exp(self.mean)

    def bpb(self, n_bytes: int) -> float:
        """Bits per byte ``total / (n_bytes * ln 2)``."""
        if n_bytes <= 0:
            raise ValueError(f"n_bytes: expected a positive byte count, got {n_bytes}")
        return self.total / (n_bytes * LN2)

    def std(self) -> float:
        """Sample standard deviation (ddof=1) of the NLLs."""
        self._require(2)
        return math.sqrt(max(self._m2, 0.0) / (self.n - 1))

    def mean_ci(self, confidence: float = CONFIDENCE) -> Interval:
        """Student t interval of the mean NLL (nats): ``mean ± t * s / sqrt(n)``."""
        self._require(2)
        m = self.mean
        half = _t_quantile(self.n, confidence) * self.std() / math.sqrt(self.n)
        return Interval(m, m - half, m + half)

    def _require(self, k: int) -> None:
        if self.n < k:
            raise ValueError(f"expected at least {k} NLLs, got {self.n}")


# --- two rank correlations on the same items (compare's Spearman rows) ---------------------------


def spearman_along(x, y) -> np.ndarray:
    """Spearman's rho of ``x`` and ``y`` along their last axis (batched; broadcasting).

    Formula: the Pearson correlation of the average ranks (``scipy.stats.rankdata``, ties share
    their mean rank) of each row, ``sum(rx' ry') / sqrt(sum(rx'^2) sum(ry'^2))`` with ``r'`` the
    centred ranks: what ``scipy.stats.spearmanr`` gives for one row (to rounding). A row where
    either input is constant has no correlation: NaN. Unitless, in [-1, 1].

    Example: ``spearman_along([[1, 2, 3], [3, 2, 1]], [1, 2, 3])`` -> ``[1.0, -1.0]``.
    """
    rx = sps.rankdata(np.asarray(x, dtype=np.float64), axis=-1)
    ry = sps.rankdata(np.asarray(y, dtype=np.float64), axis=-1)
    rx, ry = np.broadcast_arrays(rx, ry)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (rx * ry).sum(axis=-1) / den
    return np.where(den > 0, np.clip(out, -1.0, 1.0), np.nan)


def spearman_difference(x, y, h, axis: int = -1) -> np.ndarray:
    """``rho(x, h) - rho(y, h)`` along ``axis`` (:func:`spearman_along`): how much better the
    scores ``x`` rank the items by the reference ``h`` than the scores ``y`` do. Batched, so it
    is a vectorized statistic for ``scipy.stats.bootstrap``.

    Example: ``spearman_difference([1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4])`` -> 2.0.
    """
    x, y, h = (np.moveaxis(np.asarray(a, dtype=np.float64), axis, -1) for a in (x, y, h))
    return spearman_along(x, h) - spearman_along(y, h)


def _check_three(x, y, h, min_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b, c = _check_1d(x, "x", min_len), _check_1d(y, "y", min_len), _check_1d(h, "h", min_len)
    if not a.size == b.size == c.size:
        raise ValueError(
            f"paired correlations: expected x, y and h scored on the same items (equal "
            f"length), got {a.size}, {b.size} and {c.size}"
        )
    for arr, name in ((a, "x"), (b, "y"), (c, "h")):
        if np.all(arr == arr[0]):
            raise ValueError(f"{name}: expected scores that vary, got a constant input")
    return a, b, c


def spearman_difference_ci(
    x, y, h, rng: np.random.Generator, n_boot: int = 10_000, confidence: float = CONFIDENCE
) -> Interval:
    """Paired percentile bootstrap interval of ``rho(x, h) - rho(y, h)`` over items.

    ``x`` and ``y``: two models' scores of the same n items (item i in both), ``h``: the
    reference scores (human judgements). Formula: draw ``n_boot`` resamples of the n item
    indices with replacement from ``rng``; each resample takes the SAME items from x, y and h
    and gives ``rho(x*, h*) - rho(y*, h*)`` (:func:`spearman_difference`); the ends are the
    ``(1-c)/2`` and ``(1+c)/2`` quantiles of those differences, ``value`` the difference on the
    items themselves. This is ``scipy.stats.bootstrap((x, y, h), paired=True,
    method="percentile")``, which does the work. Unitless (a difference of correlations, in
    [-2, 2]). When ``x`` and ``y`` are equal every resample gives 0: a zero-width interval at 0.

    Needs n >= 4 and inputs that vary (ValueError otherwise); a resample in which a model's
    scores or ``h`` are constant has no correlation, so an interval that comes out NaN (only
    possible for a handful of items) is a ValueError.

    Example: ``x = h = [1, ..., 10]`` and ``y`` the same with its first two items swapped ->
    value ``1 - 0.98788 = 0.01212``; with ``default_rng(0)`` the interval is (0.0, 0.1307).
    """
    a, b, c = _check_three(x, y, h, 4)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot: expected an integer >= 1, got {n_boot!r}")
    value = float(spearman_difference(a, b, c))
    if np.array_equal(a, b):
        return Interval(value, value, value)
    res = sps.bootstrap(
        (a, b, c),
        spearman_difference,
        n_resamples=n_boot,
        confidence_level=confidence,
        method="percentile",
        paired=True,
        vectorized=True,
        batch=max(1, min(n_boot, 1_000_000 // a.size)),  # bounds memory at ~100 MB a batch
        rng=rng,
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(
            f"bootstrap: expected a finite interval, got [{lo}, {hi}] (resamples of the {a.size} "
            "items with constant scores have no correlation)"
        )
    return Interval(value, lo, hi)


def spearman_difference_test(
    x, y, h, n_perm: int = 10_000, rng: np.random.Generator | None = None
) -> float:
    """Two-sided paired permutation test of "x and y correlate equally with h"; the p-value.

    ``x``, ``y``: two models' scores of the same n items, ``h``: the reference. The statistic is
    ``T = |rho(x, h) - rho(y, h)|`` (:func:`spearman_difference`). Under "no difference" the two
    models' standardized scores of an item are exchangeable, so the null distribution swaps them
    item by item (Deutsch, Dror & Roth 2021, "A Statistical Analysis of Summarization Evaluation
    Metrics using Resampling Methods", PERM-BOTH, here with one level of items): each model's
    scores are replaced by their within-model ranks (ranks put the two on one scale, and rho only
    sees ranks), item i's two ranks are swapped with probability 1/2, and ``T_s`` is the
    statistic of the swapped rank vectors (re-ranked, ties averaged).

    p-value convention, as :func:`paired_permutation_test`: all ``2**n`` swap patterns when
    ``2**n <= n_perm`` (n <= 20), ``p = #{T_s >= T} / 2**n``; otherwise ``n_perm`` random
    patterns from ``rng`` and ``p = (1 + #{T_s >= T}) / (n_perm + 1)``. ``T_s >= T`` has a
    tolerance of 1e-9 (floating-point noise decides no tie). Equal rankings give p = 1.

    Example: n = 4, ``h = x = [1, 2, 3, 4]``, ``y = [4, 3, 2, 1]`` -> T = 2; only the two
    patterns that swap all items or none reach it: exact p = 2/16 = 0.125.

    Needs n >= 4 and inputs that vary (ValueError otherwise).
    """
    a, b, c = _check_three(x, y, h, 4)
    if isinstance(n_perm, bool) or not isinstance(n_perm, int) or n_perm < 1:
        raise ValueError(f"n_perm: expected an integer >= 1, got {n_perm!r}")
    ra, rb = sps.rankdata(a), sps.rankdata(b)  # within-model ranks: the standardized scores
    n = a.size
    observed = abs(float(spearman_difference(ra, rb, c)))
    tol = 1e-9
    if np.array_equal(ra, rb) or observed <= tol:
        return 1.0

    def null(swap: np.ndarray) -> np.ndarray:  # swap [m, n] bool -> |T_s| [m]
        xs, ys = np.where(swap, rb, ra), np.where(swap, ra, rb)
        return np.abs(spearman_difference(xs, ys, c))

    if n <= 20 and 2**n <= n_perm:
        codes = np.arange(2**n, dtype=np.int64)[:, None]
        count = 0
        for start in range(0, 2**n, 65_536):  # [2**n, n] patterns, 65,536 at a time
            swap = ((codes[start : start + 65_536] >> np.arange(n)) & 1).astype(bool)
            count += int(np.count_nonzero(null(swap) >= observed - tol))
        return count / 2**n
    if rng is None:
        rng = np.random.default_rng()
    count, done = 0, 0
    batch = max(1, min(n_perm, 1_000_000 // n))  # bounds memory at ~100 MB a batch
    while done < n_perm:
        m = min(batch, n_perm - done)
        swap = rng.random((m, n)) < 0.5
        count += int(np.count_nonzero(null(swap) >= observed - tol))
        done += m
    return (1.0 + count) / (n_perm + 1.0)
