"""The one writer of docs/benchmarks.md: each benchmark owns one section and a rerun replaces
that section in place, keeping every other byte of the file.

A section starts at its first line ``start`` (its ``## `` heading, or a begin marker such as
``<!-- fanout: written by bench/bench_fanout.py -->``) and ends at its ``end`` marker, or, with
no end marker, right before the next ``## `` heading. The text written starts with ``start``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"


def write_section(
    text: str,
    start: str,
    *,
    end: str | None = None,
    heading: str | None = None,
    after: str | None = None,
    path: Path = DOC,
) -> Path:
    """Put ``text`` in ``path`` as the section beginning with the line ``start``.

    The old section (``start`` through ``end``, or up to the next ``## `` heading) is replaced.
    When the file has no such section, the text goes right before the heading that follows the
    section ``after`` (when that section is there), else at the end of the file, under
    ``heading`` when the text has no heading of its own. Example: ``write_section(table,
    "<!-- fanout: ... -->", end="<!-- /fanout -->", heading="## Fan-out")``.
    """
    if not text.startswith(start):
        raise ValueError(f"expected the section text to start with {start!r}, got {text[:60]!r}")
    doc = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    body = text.strip("\n")
    i = _line_at(doc, start)
    if i >= 0 and (end is None or doc.find(end, i) >= 0):
        if end is not None:
            j = doc.index(end, i) + len(end)
            doc = doc[:i] + body + doc[j:]
        else:
            tail = _after_section(doc, i + len(start))
            doc = doc[:i] + body + ("\n\n" + tail if tail else "\n")
    else:
        k = _line_at(doc, after) if after else -1
        tail = _after_section(doc, k + len(after)) if k >= 0 and after else ""
        if tail:
            doc = doc[: len(doc) - len(tail)] + body + "\n\n" + tail
        else:
            top = f"{heading}\n\n" if heading else ""
            doc = doc.rstrip("\n") + "\n\n" + top + body + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc, encoding="utf-8")
    return path


def _line_at(doc: str, line: str) -> int:
    """Where the whole line ``line`` starts in ``doc``, or -1."""
    at = 0
    while (i := doc.find(line, at)) >= 0:
        whole = (i == 0 or doc[i - 1] == "\n") and doc[i + len(line) : i + len(line) + 1] in (
            "",
            "\n",
        )
        if whole:
            return i
        at = i + 1
    return -1


def _after_section(doc: str, at: int) -> str:
    """The rest of ``doc`` from the first ``## `` heading after position ``at`` ('' if none)."""
    nxt = doc.find("\n## ", at)
    return "" if nxt < 0 else doc[nxt + 1 :]


def show(text: str, start: str, *, write: bool = True, **kw) -> Path | None:
    """What every benchmark ends with: print its section, and write it (:func:`write_section`,
    ``kw`` its keywords) unless ``write`` is false (a quick or print-only run)."""
    print(text)
    if not write:
        return None
    path = write_section(text, start, **kw)
    print(f"wrote {path}")
    return path
