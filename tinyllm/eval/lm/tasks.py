"""Multiple-choice tasks (formats/task-jsonl.md) and their accuracy (docs/definitions.md,
"Multiple choice", "Units" and "Intervals").

:func:`read_task` reads and checks a task file; :func:`task_units` gives each item its sampling
unit (its ``cluster``, else the item itself); :func:`run_task` scores the items with
:func:`tinyllm.eval.lm.choices.choice_lls` and returns a :class:`Result`: ``acc`` or
``acc_norm`` with its interval over units, the per-item scores and each item's unit, which
:func:`tinyllm.eval.lm.paired.compare` pairs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm import metrics, stats
from tinyllm.eval.lm.choices import choice_bytes, choice_lls
from tinyllm.eval.lm.scoring import check_delimiter
from tinyllm.stats import Interval, Method

METRICS = (metrics.ACC.name, metrics.ACC_NORM.name)  # declared in tinyllm.metrics
CLUSTER = "cluster"
"""The optional key of a task item that names its sampling unit (a string or an integer)."""


@dataclass(frozen=True, eq=False)
class Result:
    """A metric with its 95% interval over units, the per-item scores and each item's unit.

    ``value`` and the interval ``[lo, hi]`` are in the metric's units (accuracy: a fraction in
    [0, 1]); ``n`` is the number of items; ``per_item`` (float64, length ``n``) keeps the item
    scores so that two runs on the same items can be compared pairwise
    (:func:`~tinyllm.eval.lm.paired.compare`).

    * ``units``: int64 ``[n]``, the unit number of each item, ``0 .. G-1`` in the order the
      units first appear (:func:`task_units`); None when every item is its own unit;
    * ``labels``: the task's id of each unit (``labels[g]`` for unit number g: the items'
      ``cluster`` values), ``()`` when every item is its own unit;
    * ``method``: the interval's estimator (:class:`tinyllm.stats.Method`): ``wilson`` when
      every unit is one item, ``cluster_bootstrap`` when units hold several;
    * ``n_units``: G, the units the interval is over (``n`` when every item is its own unit);
    * ``iid``: the item-level Wilson interval (every item taken as its own unit), kept beside
      a clustered interval for reference; None when the units are the items;
    * ``warning``: one line to show with the value (fewer than 10 units), ``""`` otherwise.
    """

    value: float
    lo: float
    hi: float
    n: int
    per_item: np.ndarray
    units: np.ndarray | None = None
    labels: tuple = ()
    method: str = Method.WILSON
    n_units: int | None = None
    iid: Interval | None = None
    warning: str = ""

    def to_dict(self) -> dict:
        """``{"value", "lo", "hi", "n", "interval", "n_units", "iid_interval",
        "interval_warning"}`` as JSON-native values (``per_item`` and ``units`` left out):
        ``interval`` the method's name, ``iid_interval`` ``{"lo", "hi", "method"}`` or None,
        ``interval_warning`` the warning or None (the names of a zoo row's fields)."""
        iid = self.iid
        return {
            "value": self.value,
            "lo": self.lo,
            "hi": self.hi,
            "n": self.n,
            "interval": str(self.method),
            "n_units": self.n if self.n_units is None else self.n_units,
            "iid_interval": None
            if iid is None
            else {"lo": iid.lo, "hi": iid.hi, "method": str(iid.method)},
            "interval_warning": self.warning or None,
        }


def _check_item(item: Any, where: str) -> dict:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(item).__name__}")
    missing = [k for k in ("context", "choices", "gold") if k not in item]
    if missing:
        raise ValueError(f"{where}: expected keys context, choices, gold; missing {missing}")
    ctx, choices, gold = item["context"], item["choices"], item["gold"]
    if not isinstance(ctx, str) or not ctx:
        raise ValueError(
            f"{where}: expected 'context' to be a non-empty string (the first choice token is "
            f"read at the position before it), got {ctx!r}"
        )
    if (
        not isinstance(choices, list)
        or len(choices) < 2
        or not all(isinstance(c, str) and c for c in choices)
    ):
        raise ValueError(
            f"{where}: expected 'choices' to be a list of at least 2 non-empty strings, "
            f"got {choices!r}"
        )
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        raise ValueError(
            f"{where}: expected 'gold' to be an int index in [0, {len(choices) - 1}], got {gold!r}"
        )
    check_delimiter(item.get("target_delimiter"), f"{where}: 'target_delimiter'")
    cluster = item.get(CLUSTER)
    if CLUSTER in item and (isinstance(cluster, bool) or not isinstance(cluster, str | int)):
        raise ValueError(
            f"{where}: expected '{CLUSTER}' to be a string or an integer (the item's sampling "
            f"unit), got {cluster!r}"
        )
    return item


def read_task(path: str | os.PathLike) -> list[dict]:
    """Read and validate a task file (formats/task-jsonl.md): one JSON object per line.

    Each line is ``{"context": str (non-empty), "choices": [str, ...] (>= 2, non-empty),
    "gold": int}``, optionally ``"target_delimiter": str`` and ``"cluster": str | int`` (the
    item's sampling unit, :func:`task_units`); other keys are kept and ignored; blank lines are
    skipped. Every error names the file and line (``path:line: expected ...``), invalid UTF-8
    included; clusters declared on some items only, or one cluster for every item, name the
    file and the field.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: task file not found")
    items = []
    with open(p, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{p}:{lineno}: expected UTF-8 text, got byte 0x{raw[e.start]:02x} at "
                    f"column {e.start + 1} ({e.reason})"
                ) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"{p}:{lineno}: expected a JSON object, got a parse error: {e}"
                ) from None
            items.append(_check_item(obj, f"{p}:{lineno}"))
            items[-1]["_where"] = f"{p}:{lineno}"
    if not items:
        raise ValueError(f"{p}: expected at least one task item, got an empty file")
    task_units(items, str(p))
    return items


def task_units(items: Sequence[dict], where: str = "task") -> tuple[np.ndarray | None, tuple]:
    """The sampling unit of each item (docs/definitions.md, "Units"): ``(units, labels)``.

    Without a ``cluster`` key every item is its own unit: ``(None, ())``. With one, every item
    must have it, and item i's unit is its ``cluster`` value (a string or an integer; ``"1"``
    and ``1`` are different units): ``units`` is int64 ``[n]``, the unit number of each item
    in the order the units first appear, ``labels[g]`` the cluster value of unit g.

    Example: clusters ``["p1", "p1", "p2", "p1"]`` -> ``units [0, 0, 1, 0]``,
    ``labels ("p1", "p2")``.

    Raises ValueError naming ``where`` (the file), the field and the line (a file's item) when
    some items have a cluster and others do not, and when all items share one cluster (an
    interval over units needs at least 2).
    """
    has = [CLUSTER in it for it in items]
    if not any(has):
        return None, ()
    if not all(has):
        first, missing = has.index(True), has.index(False)
        raise ValueError(
            f"{_item_where(items, missing, where)}: expected '{CLUSTER}' on every item once one "
            f"item declares it ({_item_where(items, first, where)} does), got none"
        )
    index: dict = {}
    units = np.asarray([index.setdefault(it[CLUSTER], len(index)) for it in items], np.int64)
    if len(index) < 2:
        raise ValueError(
            f"{where}: '{CLUSTER}': expected at least 2 units (an interval over units needs their "
            f"spread), got 1 ({next(iter(index))!r}) holding all {len(items)} items"
        )
    units.setflags(write=False)
    return units, tuple(index)


def _item_where(items: Sequence[dict], i: int, where: str) -> str:
    return items[i].get("_where") or f"{where} item {i}"


def item_predictions(lls: Sequence[np.ndarray], items: Sequence[dict], metric: str) -> np.ndarray:
    """Predicted choice per item: ``argmax LL(c)`` (acc) or ``argmax LL(c) / bytes(c)``
    (acc_norm, ``bytes(c)`` the UTF-8 bytes of the choice text, delimiter left out); ties go to
    the FIRST choice. Returns ``int64[n]``.

    Example: LLs ``[-1.0217, -0.7985]`` for choices "bb", "c" -> acc: 1, acc_norm: 0.
    """
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {list(METRICS)}, got {metric!r}")
    out = np.empty(len(items), dtype=np.int64)
    for i, (s, it) in enumerate(zip(lls, items, strict=True)):
        if metric == "acc_norm":
            s = s / choice_bytes(it["choices"])
        out[i] = int(np.argmax(s))  # argmax: the first maximum
    return out


def run_task(
    model: Any,
    tok: Any,
    task_jsonl: str | os.PathLike | Iterable[dict],
    metric: str,
    rng: np.random.Generator,
    n_boot: int = 1000,
    max_len: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
    target_delimiter: str | None = None,
    cache: str = "auto",
) -> Result:
    """Accuracy of ``model`` on a multiple-choice task, with its 95% interval over units.

    For each item the prediction is :func:`item_predictions` over
    :func:`~tinyllm.eval.lm.choices.choice_lls`: ``acc`` compares ``LL(c)``, ``acc_norm``
    compares ``LL(c) / bytes(c)`` (UTF-8 bytes of the choice, the delimiter left out). Ties go
    to the FIRST choice. ``per_item[i]`` is 1.0 when item i's prediction is its gold index, else
    0.0; ``value = mean(per_item)`` (a fraction).

    The interval is over the items' units (:func:`task_units`; docs/definitions.md,
    "Intervals"): when every unit is one item (no ``cluster`` key, or every cluster one item),
    the Wilson interval of ``(sum per_item, n)`` (:func:`tinyllm.stats.wilson`; ``rng`` is not
    drawn from); when units hold several items, the percentile bootstrap that resamples units
    (:func:`tinyllm.stats.cluster_bootstrap`, ``n_boot`` resamples drawn from ``rng``: the same
    rng state gives the same interval), with the item-level Wilson interval kept as ``iid``.
    Accuracy over clusters is a mean of 0/1 items whose units differ in size; the bootstrap
    over units is the estimator docs/definitions.md names for it.

    ``task_jsonl`` is a task file path or an iterable of already parsed items. ``max_len``,
    ``target_delimiter`` and ``cache`` are ``choice_lls``'s (default: the model's own context,
    each item's delimiter, the KV cache when it passes its check). ``progress(done, total)``
    counts scored items.

    Example: 3 items, 2 predicted right -> ``value = 0.6667``, ``per_item = [1, 0, 1]``
    (in item order), Wilson (0.2077, 0.9385); 6 items in clusters ``a a b b c c`` scoring
    ``[1, 1, 0, 0, 1, 0]`` -> 0.5, the bootstrap over the 3 clusters.
    """
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {list(METRICS)}, got {metric!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(task_jsonl, str | os.PathLike):
        items = read_task(task_jsonl)
    else:
        items = [_check_item(it, f"task item {i}") for i, it in enumerate(task_jsonl)]
        if not items:
            raise ValueError("task: expected at least one item, got none")
    units, labels = task_units(items)
    lls = choice_lls(model, tok, items, max_len, target_delimiter, progress=progress, cache=cache)
    pred = item_predictions(lls, items, metric)
    gold = np.asarray([it["gold"] for it in items])
    per_item = (pred == gold).astype(np.float64)
    return accuracy_result(per_item, units, labels, rng, n_boot)


def accuracy_result(
    per_item: np.ndarray,
    units: np.ndarray | None,
    labels: tuple,
    rng: np.random.Generator,
    n_boot: int = 1000,
) -> Result:
    """The :class:`Result` of 0/1 item scores in their units (:func:`run_task`'s interval):
    Wilson when every unit is one item (``units`` None or all distinct), else the cluster
    bootstrap over units from ``rng`` with the item-level Wilson interval as ``iid``."""
    n = per_item.size
    wilson_iv = _wilson(per_item)
    if units is None or len(labels) == n:  # every unit one item: the items are the units
        return Result(
            wilson_iv.value, wilson_iv.lo, wilson_iv.hi, n, per_item, units, labels,
            Method.WILSON, n, None, wilson_iv.warning,
        )  # fmt: skip
    iv = stats.cluster_bootstrap(per_item, units, rng, n_boot=n_boot)
    return Result(
        iv.value, iv.lo, iv.hi, n, per_item, units, labels,
        Method.CLUSTER_BOOTSTRAP, iv.n_units, wilson_iv, iv.warning,
    )  # fmt: skip


def _wilson(per_item: np.ndarray) -> Interval:
    """Wilson over items, each its own unit (one item: the plain Wilson interval of 1)."""
    if per_item.size < 2:
        iv = stats.wilson_interval(int(per_item.sum()), int(per_item.size))
        return Interval(iv.value, iv.lo, iv.hi, Method.WILSON, 1, None, None)
    return stats.wilson(per_item, np.arange(per_item.size))
