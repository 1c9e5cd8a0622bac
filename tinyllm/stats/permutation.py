"""The paired sign-flip permutation test (docs/definitions.md, "Paired tests"):
:func:`sign_flip_p` over any differences (items or units), :func:`paired_permutation_test` over
two paired samples.
"""

from __future__ import annotations

import math

import numpy as np

from tinyllm.stats.core import check_1d


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
    x = check_1d(a, "a")
    y = check_1d(b, "b")
    if x.size != y.size:
        raise ValueError(
            f"paired test: expected a and b scored on the same items (equal length), "
            f"got {x.size} and {y.size}"
        )
    if n_perm < 1:
        raise ValueError(f"n_perm: expected >= 1, got {n_perm}")
    return sign_flip_p(x - y, n_perm=n_perm, rng=rng)


def exact_sign_flips(n: int, n_perm: int) -> bool:
    """Whether :func:`sign_flip_p` enumerates all ``2**n`` sign patterns of ``n`` differences
    (``n <= 20`` and ``2**n <= n_perm``) rather than drawing ``n_perm`` of them."""
    return n <= 20 and 2**n <= n_perm


def sign_flip_p(d, n_perm: int = 10_000, rng: np.random.Generator | None = None) -> float:
    """Two-sided sign-flip permutation p of "the differences ``d`` are centred at 0".

    ``d`` are paired differences (per item, or per unit: :func:`tinyllm.stats.paired_difference`)
    and ``T = |sum_i d_i|``; the null distribution is ``|sum_i s_i d_i|`` over signs
    ``s_i in {-1, +1}``. Exact (all ``2**n`` patterns, ``p = #{T_s >= T} / 2**n``) when
    :func:`exact_sign_flips`, else ``n_perm`` patterns from ``rng`` with
    ``p = (1 + #{T_s >= T}) / (n_perm + 1)``; :func:`paired_permutation_test` states the
    conventions. ``rng=None`` draws from a fresh unseeded generator.

    Example: ``sign_flip_p([1.0, 1.0, 1.0, 1.0])`` -> 2/16 = 0.125 (exact).
    """
    d = check_1d(d, "d")
    if n_perm < 1:
        raise ValueError(f"n_perm: expected >= 1, got {n_perm}")
    n = d.size
    observed = abs(math.fsum(d))
    tol = 1e-9 * max(1.0, float(np.abs(d).sum()))
    if observed <= tol:
        return 1.0
    if exact_sign_flips(n, n_perm):
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
