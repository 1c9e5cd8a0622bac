"""The strided window arithmetic of SPEC.md section 2: which windows, which tokens each scores.

Window k over ``n`` tokens is ``[a_k, e_k)`` with ``a_k = k * stride`` and
``e_k = min(a_k + ctx_len, n)``; it scores the tokens ``[first_k, e_k)`` it adds. Pure integer
arithmetic, no model: :mod:`tinyllm.eval.lm.ppl` runs a model over these windows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def check_window_args(n: int, ctx_len: int, stride: int) -> None:
    """Raise TypeError / ValueError unless ``n`` tokens can be cut into windows of ``ctx_len``
    tokens every ``stride`` tokens (``2 <= ctx_len``, ``1 <= stride < ctx_len``, ``n >= 2``)."""
    for name, v in (("ctx_len", ctx_len), ("stride", stride)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise TypeError(f"{name}: expected an int, got {type(v).__name__} {v!r}")
    if ctx_len < 2:
        raise ValueError(
            f"ctx_len: expected >= 2 (a window must hold a token and its context), got {ctx_len}"
        )
    if stride < 1 or stride >= ctx_len:
        raise ValueError(
            f"stride: expected 1 <= stride < ctx_len = {ctx_len}, got {stride}. "
            "With stride >= ctx_len the first token of each window is predicted from nothing "
            "inside its own window (disjoint windows); stride = ctx_len - 1 is the cheapest "
            "valid stride, stride = 1 the fairest"
        )
    if n < 2:
        raise ValueError(
            f"expected at least 2 tokens (token 0 has no context and is never scored), got {n}"
        )


def iter_windows(n: int, ctx_len: int, stride: int) -> Iterator[tuple[int, int, int]]:
    """Yield the strided windows over ``n`` tokens as ``(a, e, first)``, lazily.

    Window k is ``[a_k, e_k)`` with ``a_k = k * stride`` and ``e_k = min(a_k + ctx_len, n)``; it
    scores the tokens it adds, ``t in [first_k, e_k)`` with ``first_k = max(e_{k-1}, 1)``
    (``e_{-1} = 0``), each read from the window's position ``t - 1 - a_k``. The last window is
    the first whose end reaches ``n``. Every token ``1 .. n-1`` is scored exactly once, and in
    every window after the first a scored token has at least ``ctx_len - stride`` tokens of
    context (``t - a_k >= ctx_len - stride``).

    Example: ``list(iter_windows(6, 4, 2))`` -> ``[(0, 4, 1), (2, 6, 4)]``.

    Raises ValueError for ``stride >= ctx_len``, ``stride < 1``, ``ctx_len < 2`` or ``n < 2``.
    """
    check_window_args(n, ctx_len, stride)
    return _iter_windows(int(n), int(ctx_len), int(stride))


def _iter_windows(n: int, ctx_len: int, stride: int) -> Iterator[tuple[int, int, int]]:
    a, prev_end = 0, 0
    while True:
        e = min(a + ctx_len, n)
        yield a, e, max(prev_end, 1)
        if e == n:
            return
        prev_end = e
        a += stride


def windows(n: int, ctx_len: int, stride: int) -> list[tuple[int, int, int]]:
    """All strided windows as a list of ``(a, e, first)``; see :func:`iter_windows`.

    Example: ``windows(6, 4, 3)`` -> ``[(0, 4, 1), (3, 6, 4)]``: the second window scores
    tokens 4 and 5 at window positions 0 and 1.
    """
    return list(iter_windows(n, ctx_len, stride))


def window_groups(
    n: int, ctx_len: int, stride: int, batch_size: int
) -> Iterator[list[tuple[int, int, int]]]:
    """Consecutive windows of equal length that score equally many tokens (so the same span of
    positions in each: the first window, which scores all but its first token, goes alone), at
    most ``batch_size`` of them per group. The arguments are taken as checked
    (:func:`check_window_args`).

    Example: ``list(window_groups(6, 4, 2, 8))`` -> ``[[(0, 4, 1)], [(2, 6, 4)]]``.
    """
    group: list[tuple[int, int, int]] = []
    for w in _iter_windows(n, ctx_len, stride):
        if group and (
            len(group) == batch_size
            or w[1] - w[0] != group[0][1] - group[0][0]
            or w[1] - w[2] != group[0][1] - group[0][2]
        ):
            yield group
            group = []
        group.append(w)
    if group:
        yield group
