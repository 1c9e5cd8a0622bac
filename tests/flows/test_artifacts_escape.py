"""The EvalSuite flow's artifacts show user-derived text as text.

The Prefect UI renders the markdown artifact, each artifact's description and every string cell
of the table artifact as GitHub-flavoured markdown, raw HTML included (scripts stripped, links
and images kept; UI bundle: ArtifactDataTable renders string cells with p-markdown-renderer,
marked with gfm: true). A checkpoint path and a store path holding HTML, markdown links and
images, a bare URL and an e-mail address go through the flow under Prefect's test harness; the
artifacts read back from the server must render (markdown-it, CommonMark + tables) to no element
but our own dashboard link, and hold no text a GFM renderer would autolink.
"""

from __future__ import annotations

import asyncio
import re
import urllib.parse

import yaml
from markdown_it import MarkdownIt
from standing import ENTRIES, build_zoo

from tinyllm_suite.artifacts import artifact_rows, md_text
from tinyllm_suite.eval_suite import COMPARE_ARTIFACT, ROWS_ARTIFACT, eval_suite

HOSTILE = (
    'ev<a href="http://evil.example/a">click</a><img src="http://evil.example/i.png">'
    "[link](http://evil.example/l)![img](http://evil.example/i2.png)`code`|cell|"
    " www.evil.example mail@evil.example javascript:alert(1) *bold* __init__ \\"
)


async def _artifacts(flow_run_name: str) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterName,
    )

    async with get_client() as client:
        (run,) = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[flow_run_name]))
        )
        arts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
        return {a.key: a for a in arts}


def _as_html(text: str) -> str:
    """``text`` as markdown-it writes text: & < > " escaped."""
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _render(md: str) -> str:
    """HTML as a permissive renderer makes it: every link target accepted (markdown-it refuses
    javascript: and file: by default; the UI's marked does not)."""
    renderer = MarkdownIt("commonmark").enable("table")
    renderer.validateLink = lambda url: True
    return renderer.render(md)


def _no_live_content(md: str, allowed_links: tuple[str, ...] = ()) -> None:
    """``md`` renders to no image and no link but ``allowed_links``, holds no raw ``<a`` or
    ``<img``, and nothing GFM would autolink (a URL, www., an e-mail address)."""
    assert "<a" not in md.lower() and "<img" not in md.lower(), md
    html = _render(md)
    assert "<img" not in html, html
    assert re.findall(r'<a href="([^"]*)"', html) == list(allowed_links), html
    bare = md
    for link in allowed_links:
        bare = bare.replace(f"({link})", "")
    assert not re.search(r"(?i)(https?|ftp|javascript|mailto):|www\.|\w@\w", bare), bare


def test_hostile_paths_and_messages_are_text_in_the_artifacts(tmp_path):
    manifest = build_zoo(tmp_path / "zoo")
    store = tmp_path / "store [s](http://evil.example/s) <b>"  # a store path is user input too
    first = eval_suite(manifest=manifest, release="esc1", store=str(store))
    assert first["compare"] is None
    # the next release: the bigram's checkpoint is a hostile path (not found: an error row)
    entries = [dict(e) for e in ENTRIES]
    entries[0]["checkpoint"] = HOSTILE
    (tmp_path / "zoo" / "zoo.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": entries}))
    out = eval_suite(manifest=manifest, release="esc2", store=str(store))
    rows = {r["name"]: r for r in out["report"]["rows"]}
    msg = rows["bigram"]["error"]["message"]  # the path as the OS has it ('//' is '/')
    assert rows["bigram"]["status"] == "error" and '<a href="http:/evil.example/a">' in msg
    verdicts = {r["name"]: r for r in out["compare"]["rows"]}
    assert msg[:120] in verdicts["bigram"]["reason"]  # the comparison keeps the raw text

    arts = asyncio.run(_artifacts("eval-esc2"))
    md = arts[COMPARE_ARTIFACT].data
    dashboard = out["dashboard"]
    assert dashboard.startswith("file://")
    target = urllib.parse.quote(dashboard, safe=":/%")
    _no_live_content(md, allowed_links=(target,))
    html = _render(md)
    # the text itself is there, as text: the reader sees what the path was
    assert _as_html(msg[:120]) in html
    assert "ev&lt;a href=&quot;http:/evil.example/a&quot;&gt;click&lt;/a&gt;&lt;img" in html
    # still one table: a '|' in the message is not a cell boundary
    table = html[html.index("<table>") : html.index("</table>")]
    assert table.count("<tr>") == 1 + 3
    assert all(tr.count("<td") == 10 for tr in table.split("<tr>")[2:])
    _no_live_content(arts[COMPARE_ARTIFACT].description or "")
    _no_live_content(arts[ROWS_ARTIFACT].description or "")

    table_rows = arts[ROWS_ARTIFACT].data
    table_rows = yaml.safe_load(table_rows) if isinstance(table_rows, str) else table_rows
    cells = [str(v) for row in table_rows for v in row.values() if isinstance(v, str)]
    assert any("evil" in c for c in cells)
    for cell in cells:  # the UI renders each string cell as markdown
        _no_live_content(cell)
    error = next(r["error"] for r in table_rows if r["name"] == "bigram")
    assert _render(error) == f"<p>{_as_html(msg)}</p>\n"  # exactly the message, as text


def test_the_rows_artifact_has_the_baseline_verdicts_p_holm_p_and_the_interval_warning():
    ok = {
        "name": "gpt", "family": "gpt", "metric": "bpb", "value": 2.123456, "lo": 2.0, "hi": 2.3,
        "n": 199, "status": "ok", "n_units": 11,
        "baseline": {"name": "unigram", "value": 3.349561},
        "beats_baseline": {"verdict": "better", "p": 0.00097656, "p_adjusted": 0.00195312},
        "interval_warning": "no unit boundaries: 11 contiguous blocks of 19 items stand in for "
        "the units",
    }  # fmt: skip
    old = {  # a row of a report written before baselines and units
        "name": "kn3", "family": "ngram", "metric": "bpb", "value": 2.5, "lo": 2.4, "hi": 2.6,
        "n": 199, "status": "ok",
    }  # fmt: skip
    got = artifact_rows([ok, old])
    assert {k: got[0][k] for k in ("baseline", "vs_baseline", "p", "p_holm", "n_units")} == {
        "baseline": 3.3496,
        "vs_baseline": "better",
        "p": 0.000977,
        "p_holm": 0.00195,
        "n_units": 11,
    }
    assert got[0]["warning"] == md_text(ok["interval_warning"])
    assert _render(got[0]["warning"]) == f"<p>{_as_html(ok['interval_warning'])}</p>\n"
    assert [
        got[1][k] for k in ("baseline", "vs_baseline", "p", "p_holm", "n_units", "warning")
    ] == [None] * 6
