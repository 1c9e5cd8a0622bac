"""Sampling units: which unit (document, row, pair, declared cluster) each scored item belongs
to (docs/definitions.md, "Units").

An interval is about the population the eval set was drawn from, so it is computed over the units
that were drawn, not over the items inside them. :class:`Units` records, for ``n`` items in any
order, the unit of each; it is built from the caller's ids (:func:`group_units`), from the unit
lengths of a stream that is cut into consecutive units (:func:`units_from_lengths`), or, for a
text with no boundaries at all, from contiguous blocks of a stated length
(:func:`contiguous_blocks`).

Rules, each a clear ``ValueError`` naming the argument: one unit id per item; every id present
(not None, not NaN); at least 2 units. Fewer than :data:`MIN_UNITS` units is allowed but gives
:attr:`Units.warning`, one line the caller shows with the row.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

MIN_UNITS = 10
"""Below this many units an interval over units is unreliable: :attr:`Units.warning` says so."""


def few_units_warning(n_units: int) -> str:
    """``"only G units: ..."`` when ``G < MIN_UNITS``, else ``""``."""
    if n_units >= MIN_UNITS:
        return ""
    return f"only {n_units} units: an interval over fewer than {MIN_UNITS} units is unreliable"


def units_warning(n_units: int, block_len: int | None = None) -> str:
    """One line for a row over ``n_units`` units, ``""`` when there is nothing to say: the
    contiguous blocks of ``block_len`` items that stand in for units (None: declared units),
    and fewer than :data:`MIN_UNITS` units."""
    parts = []
    if block_len is not None:
        parts.append(
            f"no unit boundaries: {n_units} contiguous blocks of {block_len} items stand in "
            "for the units"
        )
    parts.append(few_units_warning(n_units))
    return "; ".join(p for p in parts if p)


@dataclass(frozen=True, eq=False)
class Units:
    """The unit of each of ``n_items`` items.

    * ``index``: ``[n_items]`` int64, the unit number ``0 .. G-1`` of each item, units numbered
      in the order they first appear among the items (read-only);
    * ``labels``: the caller's id of each unit, ``labels[g]`` for unit number g;
    * ``block_len``: for :func:`contiguous_blocks`, the block length in items; ``None`` for
      units the data declares (documents, rows, clusters).

    Example: ``group_units(["d2", "d1", "d2"])`` -> ``index [0, 1, 0]``, ``labels ("d2", "d1")``,
    ``sizes [2, 1]``, and a warning (2 units < 10).
    """

    index: np.ndarray
    labels: tuple
    block_len: int | None = None

    @property
    def n_items(self) -> int:
        """The number of items, n."""
        return int(self.index.size)

    @property
    def n_units(self) -> int:
        """The number of units, G."""
        return len(self.labels)

    @property
    def sizes(self) -> np.ndarray:
        """``[G]`` int64: how many items each unit holds (``N_g`` for unweighted items)."""
        return np.bincount(self.index, minlength=self.n_units)

    @property
    def singletons(self) -> bool:
        """Whether every unit holds exactly one item (units and items coincide)."""
        return self.n_units == self.n_items

    @property
    def warning(self) -> str:
        """One line for the row, ``""`` when there is nothing to say: the blocks that stand in
        for units, and fewer than :data:`MIN_UNITS` units (:func:`units_warning`)."""
        return units_warning(self.n_units, self.block_len)

    def sums(self, x, name: str = "items") -> np.ndarray:
        """``[G]`` per-unit sums ``S_g = sum_{i in g} x_i`` of per-item values ``x`` (float64).

        Example: units ``[0, 1, 0]`` and ``x = [1, 2, 3]`` -> ``[4, 2]``.
        """
        a = np.asarray(x, dtype=np.float64)
        if a.shape != self.index.shape:
            raise ValueError(
                f"{name}: expected one value per item ({self.n_items}), got shape {a.shape}"
            )
        return np.bincount(self.index, weights=a, minlength=self.n_units)

    def means(self, x, name: str = "items") -> np.ndarray:
        """``[G]`` per-unit means ``S_g / n_g`` of per-item values ``x``."""
        return self.sums(x, name) / self.sizes


def _refuse_missing(ids: Sequence, name: str) -> None:
    for i, u in enumerate(ids):
        if u is None or (isinstance(u, float | np.floating) and math.isnan(u)):
            raise ValueError(f"{name}: expected a unit id for every item, got {u!r} at index {i}")


def _frozen(index: np.ndarray) -> np.ndarray:
    index = np.ascontiguousarray(index, dtype=np.int64)
    index.setflags(write=False)
    return index


def _checked(units: Units, name: str, what: str = "unit") -> Units:
    if units.n_units < 2:
        label = units.labels[0] if units.labels else None
        raise ValueError(
            f"{name}: expected at least 2 units (an interval over units needs their spread), "
            f"got 1 {what} ({label!r}) holding all {units.n_items} items"
        )
    return units


def group_units(unit_ids: Iterable[Hashable], n_items: int | None = None, *, name="units") -> Units:
    """Group ``n`` items by their unit ids: ``unit_ids[i]`` is item i's unit.

    Ids are any hashable values (ints, strings, tuples), items in any order: a unit's items need
    not be adjacent. Units are numbered in the order they first appear. ``n_items``, when given,
    is the number of items the ids must match.

    Example: ``group_units([7, 7, 3, 7, 3])`` -> ``index [0, 0, 1, 0, 1]``, ``labels (7, 3)``,
    ``sizes [3, 2]``.

    Raises ValueError (naming ``name``) for a length other than ``n_items``, no ids, a missing id
    (None or NaN) and a single unit.
    """
    ids = unit_ids if isinstance(unit_ids, np.ndarray) else list(unit_ids)
    n = len(ids)
    if n_items is not None and n != n_items:
        raise ValueError(f"{name}: expected one unit id per item ({n_items}), got {n}")
    if n == 0:
        raise ValueError(f"{name}: expected a unit id for each item, got none")
    if isinstance(ids, np.ndarray) and ids.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d array of unit ids, got shape {ids.shape}")
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iub":
        values, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # unit numbers in order of first appearance
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        units = Units(_frozen(rank[inverse]), tuple(values[order].tolist()))
        return _checked(units, name)
    _refuse_missing(ids, name)
    number: dict = {}
    try:
        index = [number.setdefault(u, len(number)) for u in ids]
    except TypeError as e:
        raise ValueError(f"{name}: expected hashable unit ids, got {e}") from None
    return _checked(Units(_frozen(np.asarray(index)), tuple(number)), name)


def units_from_lengths(lengths: Iterable[int], *, name: str = "lengths") -> Units:
    """Units of a stream of items cut into consecutive units: unit ``j`` holds the next
    ``lengths[j]`` items (a text's documents, each with its count of scored tokens).

    Label ``j`` is the unit's position in ``lengths``; a unit of length 0 holds no item and is
    left out (a one-byte document whose only token is the unscored first one).

    Example: ``units_from_lengths([2, 0, 3])`` -> ``index [0, 0, 1, 1, 1]``, ``labels (0, 2)``.
    """
    raw = list(lengths)
    for j, k in enumerate(raw):
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
            raise ValueError(f"{name}: expected integer lengths >= 0, got {k!r} at index {j}")
    counts = np.asarray(raw, dtype=np.int64)
    kept = np.flatnonzero(counts > 0)
    if kept.size == 0:
        raise ValueError(f"{name}: expected at least one item, got {len(raw)} empty units")
    index = np.repeat(np.arange(kept.size), counts[kept])
    return _checked(Units(_frozen(index), tuple(kept.tolist())), name)


def contiguous_blocks(n_items: int, block_len: int, *, name: str = "blocks") -> Units:
    """Units for a stream with no unit boundaries: consecutive blocks of ``block_len`` items
    (the last one shorter when ``block_len`` does not divide ``n_items``); the block length is
    recorded (:attr:`Units.block_len`) and :attr:`Units.warning` always says blocks stand in for
    the units.

    Example: ``contiguous_blocks(7, 3)`` -> ``index [0, 0, 0, 1, 1, 1, 2]``, ``block_len 3``.

    Raises ValueError for ``block_len < 1`` and for ``n_items <= block_len`` (a single block).
    """
    for value, what in ((n_items, "n_items"), (block_len, "block_len")):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name}: expected {what} an integer >= 1, got {value!r}")
    index = np.arange(int(n_items), dtype=np.int64) // int(block_len)
    g = int(index[-1]) + 1
    units = Units(_frozen(index), tuple(range(g)), block_len=int(block_len))
    return _checked(units, name, what=f"block of {block_len}")


def as_units(units, n_items: int, name: str = "units") -> Units:
    """``units`` as :class:`Units` for ``n_items`` items: a :class:`Units` is checked against
    ``n_items``; anything else is unit ids, grouped by :func:`group_units`."""
    if isinstance(units, Units):
        if units.n_items != n_items:
            raise ValueError(
                f"{name}: expected units of {n_items} items (one unit per item), "
                f"got units of {units.n_items} items"
            )
        return units
    return group_units(units, n_items, name=name)
