"""bench/bench_lmeval.py's rolling-path pieces without running a model: the per-document check
that the bench asserts (float32 rounding of a rolling sum passes; a window's worth of nats, an
is_greedy flip, another word count do not), and where ``--rolling --write`` puts its section
(after the lm-eval table's section, replaced in place on the next write)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_lmeval as B  # noqa: E402


def _wiki(ll: float, words: int = 120) -> dict:
    return {
        "doc_id": 0,
        "arguments": [["page text"]],
        "resps": [[ll]],
        "word_perplexity": [ll, words],
        "byte_perplexity": [ll, 700],
        "bits_per_byte": [ll, 700],
    }


def _lambada(ll: float, greedy: bool) -> dict:
    return {
        "doc_id": 3,
        "arguments": [["ctx", " word"]],
        "resps": [[[ll, greedy]]],
        "acc": int(greedy),
        "perplexity": ll,
    }


def test_same_doc_passes_rounding_and_flags_real_differences():
    # HFLM's and ours on a 15,229-token page at gpt2-6x512 differed by 6e-4 nats
    assert B.same_doc(_wiki(-166013.3402), _wiki(-166013.3408)) is None
    assert "response" in B.same_doc(_wiki(-166013.34 + 2.5), _wiki(-166013.34))
    assert "word_perplexity" in B.same_doc(_wiki(-5.0, 121), _wiki(-5.0, 120))
    assert B.same_doc(_lambada(-7.12345, True), _lambada(-7.12349, True)) is None
    assert "response" in B.same_doc(_lambada(-7.1, False), _lambada(-7.1, True))
    assert "response" in B.same_doc(_lambada(-7.1, True), _lambada(-7.2, True))
    other = _lambada(-7.1, True) | {"arguments": [["ctx.", " word"]]}
    assert B.same_doc(other, _lambada(-7.1, True)) == "prompt"
    same, total, bad = B.agree([_wiki(-1.0), _wiki(-9.0)], [_wiki(-1.0), _wiki(-1.0)])
    assert (same, total, len(bad)) == (1, 2, 1) and bad[0].startswith("doc 0: response")


def test_rolling_section_goes_after_the_lmeval_table_and_is_replaced(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\n{B.SECTION}\n\ntable\n\n## Calibration\n\nc\n")
    for n in (1, 2):
        text = f"{B.ROLLING_SECTION}\n\n{B.ROLLING_BEGIN}\n\nrun {n}\n\n{B.ROLLING_END}\n"
        B.write_rolling(text, doc)
    got = doc.read_text()
    assert got.count(B.ROLLING_SECTION) == 1 and "run 2" in got and "run 1" not in got
    assert got.index(B.SECTION) < got.index(B.ROLLING_SECTION) < got.index("## Calibration")
    assert "table\n\n## lm-eval's rolling" in got and f"{B.ROLLING_END}\n\n## Calibration" in got
