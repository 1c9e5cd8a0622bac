"""Streaming summary of per-token NLLs in bounded memory (docs/definitions.md, "Strided
perplexity"): N, the compensated sum, mean NLL, perplexity, bits per byte and the Student t
interval over tokens.
"""

from __future__ import annotations

import math

import numpy as np

from tinyllm.stats.core import CONFIDENCE, LN2, Interval, t_quantile


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
        half = t_quantile(self.n, confidence) * self.std() / math.sqrt(self.n)
        return Interval(m, m - half, m + half)

    def _require(self, k: int) -> None:
        if self.n < k:
            raise ValueError(f"expected at least {k} NLLs, got {self.n}")
