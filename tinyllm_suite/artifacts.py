"""The EvalSuite flow's Prefect artifacts: every user-derived string in them is text.

The Prefect UI renders a markdown artifact, an artifact's description and every string cell of a
table artifact as GitHub-flavoured markdown, raw HTML included (it strips scripts, not links or
images). :func:`md_text` turns each character that can start HTML, a link, an image, a code span,
emphasis or a table cell into its numeric character reference (shown as the character itself);
':' and '@' too, and the '.' of "www.", so that no bare URL or e-mail address is autolinked.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from tinyllm.comparison import Comparison
from tinyllm.report import NAME_PATTERN

_MD_REFS = {ord(c): f"&#{ord(c)};" for c in "&<>\"'[]()!`|*_~\\:@#"}
_MD_REFS.update({ord("\n"): " ", ord("\r"): " ", ord("\t"): " "})  # one line: a table stays a table
_WWW = re.compile(r"(www)\.", re.IGNORECASE)


def md_text(value: Any) -> str:
    """``value`` as markdown that renders as exactly its text: no HTML element, no link, no image,
    no autolinked URL (error messages and paths come from users: a checkpoint path may hold
    ``<a href=...>`` or ``[x](http://...)``)."""
    return _WWW.sub(r"\1&#46;", str(value).translate(_MD_REFS))


def md_link(url: str) -> str:
    """A markdown link to one of our own addresses (the dashboard's ``file://`` or ``s3://``
    URI): the text escaped, the target percent-encoded (a path holding ``)`` or ``<`` cannot end
    the link or start an element)."""
    return f"[{md_text(url)}]({urllib.parse.quote(url, safe=':/%')})"


def md_safe_comparison(cmp: Comparison) -> Comparison:
    """A copy of a comparison whose free-text fields (reasons: error messages, paths; release
    names) are :func:`md_text`, for :func:`tinyllm.compare_render.compare_markdown`, which inserts them
    as they are. Entry names go into code spans there, where references would show as typed:
    they are kept when they are plain names (the manifest's pattern), escaped otherwise."""
    rows = []
    for r in cmp.rows:
        safe: dict = {}
        if r.reason is not None:
            safe["reason"] = md_text(r.reason)
        if not re.fullmatch(NAME_PATTERN, r.name):
            safe["name"] = md_text(r.name)
        rows.append(r.model_copy(update=safe))
    update = {"rows": rows, "current": md_text(cmp.current), "previous": md_text(cmp.previous)}
    return cmp.model_copy(update=update)


def artifact_rows(rows: list[dict]) -> list[dict]:
    """The rows of the table artifact: values to 4 decimals, names and error messages as text;
    the trivial baseline's value, the verdict against it with its p and its Holm-adjusted p over
    the report's rows (``p_holm``, the p the verdict reads; None in reports written before
    units), the number of sampling units and the interval's warning (no unit boundaries, few
    units; docs/definitions.md)."""

    def fmt(x: Any) -> Any:
        return None if x is None else round(float(x), 4)

    def p(x: Any) -> Any:
        return None if x is None else float(f"{float(x):.3g}")

    out = []
    for r in rows:
        base, beats = r.get("baseline") or {}, r.get("beats_baseline") or {}
        out.append(
            {
                "name": r["name"] if re.fullmatch(NAME_PATTERN, r["name"]) else md_text(r["name"]),
                "family": r["family"],
                "metric": r["metric"],
                "value": fmt(r["value"]),
                "lo": fmt(r["lo"]),
                "hi": fmt(r["hi"]),
                "n": r["n"],
                "n_units": r.get("n_units"),
                "baseline": fmt(base.get("value")),
                "vs_baseline": beats.get("verdict"),
                "p": p(beats.get("p")),
                "p_holm": p(beats.get("p_adjusted")),
                "status": r["status"],
                "warning": _md_or_none(r.get("interval_warning")),
                "error": _md_or_none((r.get("error") or {}).get("message") or r.get("reason")),
            }
        )
    return out


def _md_or_none(value: Any) -> str | None:
    return None if value is None else md_text(value)
