"""Reading a seq2seq task file (formats/seq2seq-jsonl.md): JSONL ``{"src", "tgt"}`` pairs. The
data builders (:mod:`tinyllm.data`) and the seq2seq kind both read them; it imports nothing of
the project."""

from __future__ import annotations

import json
from pathlib import Path


def read_pairs(path: str | Path) -> list[tuple[str, str]]:
    """The (src, tgt) pairs of a seq2seq task file, in file order.

    One JSON object per line with string ``src`` and ``tgt`` (the target may be empty); other
    keys are ignored, blank lines skipped. Every problem is a ValueError naming the file and the
    line; a file without pairs is refused.

    Example: a line ``{"src": "March 5, 2024", "tgt": "5 mars 2024"}`` gives
    ``("March 5, 2024", "5 mars 2024")``.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: expected UTF-8 JSONL, got undecodable bytes: {e}") from None
    pairs = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{p}:{i}: expected a JSON object, got invalid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{p}:{i}: expected a JSON object, got {type(obj).__name__}")
        for key in ("src", "tgt"):
            if not isinstance(obj.get(key), str):
                raise ValueError(f"{p}:{i}: expected {key!r} to be a string, got {obj.get(key)!r}")
        pairs.append((obj["src"], obj["tgt"]))
    if not pairs:
        raise ValueError(f"{p}: expected at least one {{'src', 'tgt'}} line, got none")
    return pairs
