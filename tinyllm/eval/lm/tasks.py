"""Multiple-choice tasks (formats/task-jsonl.md) and their accuracy (SPEC.md sections 3 and 4).

:func:`read_task` reads and checks a task file; :func:`run_task` scores it with
:func:`tinyllm.eval.lm.choices.choice_lls` and returns a :class:`Result`: ``acc`` or
``acc_norm`` with its bootstrap interval and the per-item scores that
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

METRICS = (metrics.ACC.name, metrics.ACC_NORM.name)  # declared in tinyllm.metrics


@dataclass(frozen=True, eq=False)
class Result:
    """A metric with its 95% interval and the per-item scores it was computed from.

    ``value`` and the interval ``[lo, hi]`` are in the metric's units (accuracy: a fraction in
    [0, 1]); ``n`` is the number of items; ``per_item`` (float64, length ``n``) keeps the item
    scores so that two runs on the same items can be compared pairwise
    (:func:`~tinyllm.eval.lm.paired.compare`).
    """

    value: float
    lo: float
    hi: float
    n: int
    per_item: np.ndarray

    def to_dict(self) -> dict:
        """``{"value", "lo", "hi", "n"}`` as JSON-native numbers (``per_item`` left out)."""
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "n": self.n}


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
    return item


def read_task(path: str | os.PathLike) -> list[dict]:
    """Read and validate a task file (formats/task-jsonl.md): one JSON object per line.

    Each line is ``{"context": str (non-empty), "choices": [str, ...] (>= 2, non-empty),
    "gold": int}``, optionally ``"target_delimiter": str``; other keys are kept and ignored;
    blank lines are skipped. Every error names the file and line (``path:line: expected ...``),
    invalid UTF-8 included.
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
    return items


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
    """Accuracy of ``model`` on a multiple-choice task, with a percentile bootstrap interval.

    For each item the prediction is :func:`item_predictions` over
    :func:`~tinyllm.eval.lm.choices.choice_lls`: ``acc`` compares ``LL(c)``, ``acc_norm``
    compares ``LL(c) / bytes(c)`` (UTF-8 bytes of the choice, the delimiter left out). Ties go
    to the FIRST choice. ``per_item[i]`` is 1.0 when item i's prediction is its gold index, else
    0.0; ``value = mean(per_item)`` (a fraction) and ``[lo, hi]`` is
    :func:`tinyllm.stats.bootstrap_ci` of ``per_item`` with ``n_boot`` resamples drawn from
    ``rng`` (the same rng state gives the same interval).

    ``task_jsonl`` is a task file path or an iterable of already parsed items. ``max_len``,
    ``target_delimiter`` and ``cache`` are ``choice_lls``'s (default: the model's own context,
    each item's delimiter, the KV cache when it passes its check). ``progress(done, total)``
    counts scored items.

    Example: 3 items, 2 predicted right -> ``value = 0.6667``, ``per_item = [1, 0, 1]``
    (in item order).
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
    lls = choice_lls(model, tok, items, max_len, target_delimiter, progress=progress, cache=cache)
    pred = item_predictions(lls, items, metric)
    gold = np.asarray([it["gold"] for it in items])
    per_item = (pred == gold).astype(np.float64)
    ci = stats.bootstrap_ci(per_item, rng, n_boot=n_boot)
    return Result(ci.value, ci.lo, ci.hi, len(items), per_item)
