"""bench/docsection.py, the one writer of docs/benchmarks.md: a rerun replaces its own section
in place and keeps every other byte; a missing section is appended (under its heading) or put
after the section it follows. The committed docs/benchmarks.md is a fixed point: each
benchmark's section written back unchanged leaves the file byte-identical."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from docsection import DOC, show, write_section  # noqa: E402

DOC_TEXT = DOC.read_text(encoding="utf-8")

SECTIONS = [  # (first line, end marker): what each benchmark writes
    ("## Strided perplexity", None),
    ("## Token budget for strided perplexity", None),
    ("## GPT-2-small forward: where the time goes, fused paths tried", None),
    ("## Calibration: interval coverage and paired-test error rates", None),
    ("## GPU: strided perplexity and multiple choice (bench/bench_gpu.py)", None),
    ("## Strided perplexity beyond GPT-2: Llama shapes and other architectures", None),
    ("<!-- fanout: written by bench/bench_fanout.py -->", "<!-- /fanout -->"),
    ("<!-- text-memory: written by bench/bench_text_memory.py -->", "<!-- /text-memory -->"),
    ("<!-- dashboard: written by bench/bench_dashboard.py -->", "<!-- /dashboard -->"),
    ("## Multiple choice against lm-evaluation-harness", None),
    ("## Multiple choice against lm-evaluation-harness: a Llama shape", None),
    ("## A converted lm-eval task: per-item agreement", None),
    ("## lm-eval tasks end to end: the tinyllm backend against HFLM", None),
    (
        "## lm-eval's rolling path end to end: wikitext and lambada_openai against HFLM",
        "<!-- /lmeval-rolling -->",
    ),
]


def section_of(doc: str, start: str, end: str | None) -> str:
    i = doc.index("\n" + start + "\n") + 1
    if end is not None:
        return doc[i : doc.index(end, i) + len(end)]
    j = doc.find("\n## ", i + len(start))
    return doc[i:] if j < 0 else doc[i:j].rstrip("\n")


@pytest.mark.parametrize(("start", "end"), SECTIONS)
def test_each_benchmark_section_written_back_leaves_the_file_unchanged(tmp_path, start, end):
    path = tmp_path / "benchmarks.md"
    path.write_text(DOC_TEXT, encoding="utf-8")
    write_section(section_of(DOC_TEXT, start, end), start, end=end, path=path)
    assert path.read_text(encoding="utf-8") == DOC_TEXT


def test_a_rerun_replaces_only_its_own_section(tmp_path):
    path = tmp_path / "b.md"
    path.write_text("# B\n\n## A\n\nold a\n\n## Ab\n\nkeep\n\n## C\n\nkeep c\n", encoding="utf-8")
    write_section("## A\n\nnew a\nline 2\n", "## A", path=path)
    assert path.read_text() == "# B\n\n## A\n\nnew a\nline 2\n\n## Ab\n\nkeep\n\n## C\n\nkeep c\n"
    write_section("## C\n\nnew c", "## C", path=path)
    assert path.read_text().endswith("## Ab\n\nkeep\n\n## C\n\nnew c\n")


def test_a_marked_section_is_replaced_between_its_markers(tmp_path):
    path = tmp_path / "b.md"
    path.write_text("# B\n\n## F\n\nintro\n\n<!-- f -->\nt1\n<!-- /f -->\n\nafter\n", "utf-8")
    write_section("<!-- f -->\nt2\n<!-- /f -->", "<!-- f -->", end="<!-- /f -->", path=path)
    assert path.read_text() == "# B\n\n## F\n\nintro\n\n<!-- f -->\nt2\n<!-- /f -->\n\nafter\n"


def test_a_missing_section_is_appended_under_its_heading_or_put_after_its_neighbour(tmp_path):
    path = tmp_path / "b.md"
    path.write_text("# B\n\n## X\n\nx\n\n## Y\n\ny\n", encoding="utf-8")
    write_section("<!-- f -->\nt\n<!-- /f -->", "<!-- f -->", end="<!-- /f -->", heading="## F",
                  path=path)  # fmt: skip
    assert path.read_text().endswith("## Y\n\ny\n\n## F\n\n<!-- f -->\nt\n<!-- /f -->\n")
    write_section("## R\n\nr\n<!-- /r -->", "## R", end="<!-- /r -->", after="## X", path=path)
    assert "## X\n\nx\n\n## R\n\nr\n<!-- /r -->\n\n## Y\n" in path.read_text()


def test_text_that_does_not_start_with_its_section_line_is_refused(tmp_path):
    with pytest.raises(ValueError, match="expected the section text to start with '## A'"):
        write_section("## B\n", "## A", path=tmp_path / "b.md")


@given(
    st.lists(
        st.text("abc \n", max_size=12).map(lambda s: s.replace("#", "")), min_size=3, max_size=3
    ),  # fmt: skip
    st.text("xyz \n", min_size=1, max_size=12),
)
def test_writing_twice_is_writing_once(bodies, new):
    """Idempotent, and the other sections keep their bytes, whatever the bodies."""
    doc = "# B\n\n" + "".join(f"## S{i}\n\n{b.strip()}\n\n" for i, b in enumerate(bodies))
    with tempfile.TemporaryDirectory() as d:  # hypothesis reuses a function-scoped tmp_path
        path = Path(d) / "b.md"
        path.write_text(doc, encoding="utf-8")
        text = "## S1\n\n" + new
        write_section(text, "## S1", path=path)
        once = path.read_text()
        write_section(text, "## S1", path=path)
        assert path.read_text() == once
        assert once.startswith(f"# B\n\n## S0\n\n{bodies[0].strip()}\n\n## S1\n")
        assert once.endswith(f"## S2\n\n{bodies[2].strip()}\n\n")


def test_show_prints_the_section_and_writes_it_unless_told_not_to(tmp_path, capsys):
    path = tmp_path / "b.md"
    path.write_text("# B\n\n## A\n\nold\n", encoding="utf-8")
    assert show("## A\n\nnew", "## A", write=False, path=path) is None
    assert capsys.readouterr().out == "## A\n\nnew\n" and "old" in path.read_text()
    assert show("## A\n\nnew", "## A", path=path) == path
    assert capsys.readouterr().out == f"## A\n\nnew\nwrote {path}\n"
    assert path.read_text() == "# B\n\n## A\n\nnew\n"
