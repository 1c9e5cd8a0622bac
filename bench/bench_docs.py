"""Documents for bench/bench_lmeval.py in each dataset's schema AND its shape, built from the lee text.

The tests' builders (tests/lmeval/lmeval_helpers.py) exercise the schema with few, short
documents; a speed bench also needs each dataset's proportions, since they decide what can be
shared between a document's requests. Every sentence here is a sentence of gensim's lee corpus
(:func:`sentences`: split at ``". "``, 12 to 30 words), so the text is real English.

* :func:`winogrande_docs`: WinoGrande's shape. A real sentence is ~20 words with the blank in
  its second clause, filled by one of two nouns or names ("The trophy doesn't fit into the
  brown suitcase because the _ is too large."): the part before the blank, shared by both
  requests (lm-eval's context is ``sentence[:blank] + option``), is most of the text, and the
  continuation after it is short. Here: a lee sentence of 15 to 30 words, the blank at the word
  at 70% of its length (so 4 to 9 words follow it), ``option1`` / ``option2`` that word and a
  capitalised or long word from before the blank (as WinoGrande's two candidates both occur
  earlier), ``answer`` alternating.
* :func:`hellaswag_docs`: HellaSwag's shape. ``ctx_a`` a whole sentence (~12 to 20 words),
  ``ctx_b`` the next sentence's first 4 words, four endings of 8 to 20 words (HellaSwag's
  endings are full clauses, ActivityNet's shorter than WikiHow's; the context and each ending
  are of a size).
* :func:`arc_docs`: ARC's shape: a question of one sentence (12 to 30 words) + "?", four
  choices of 1 to 4 words.
* :func:`mmlu_docs`: MMLU's shape: a one-sentence question, four choices of 1 to 6 words (the
  continuations lm-eval scores are the single letters " A" .. " D" after the listed choices).
* COPA's shape (premise ~6 to 8 words, two choices of ~5 to 7 words, cause/effect), LAMBADA's
  (a passage whose last word is the target) and GSM8K's are the tests' builders'
  (:mod:`lmeval_helpers`): COPA's and LAMBADA's already have their dataset's proportions
  (LAMBADA's passages are shorter than the dataset's ~4 sentences, and not multiple choice);
  GSM8K's questions and answers are shorter than the dataset's (~45 words each), which keeps
  its 5-shot prompts under the 768 tokens a 256-token generation leaves at context 1024 on
  both sides.
"""

from __future__ import annotations

import functools
import re

import lmeval_helpers as H


@functools.cache
def sentences() -> tuple[str, ...]:
    """The lee corpus's sentences of 12 to 30 words, without their final period."""
    out = []
    for line in H.lee_lines():
        for s in re.split(r"(?<=[a-z0-9])\. (?=[A-Z])", line):
            s = s.rstrip(". ")
            if 12 <= len(s.split()) <= 30:
                out.append(s)
    return tuple(out)


def _s(i: int) -> list[str]:
    pool = sentences()
    return pool[i % len(pool)].split()


def _word(w: str) -> str:
    return w.strip(".,;:'\"()")


def _clause(w: list[str]) -> str:
    return " ".join(w).rstrip(",;:") + "."


def winogrande_docs(n: int) -> list[dict]:
    """WinoGrande-shaped documents (see the module docstring); each sentence has one ``_``."""
    docs = []
    i = 0
    while len(docs) < n:
        w = _s(i)
        i += 1
        if len(w) < 15:
            continue
        k = int(0.7 * len(w))
        right = _word(w[k])
        cands = [_word(x) for x in w[1:k] if (_word(x)[:1].isupper() or len(_word(x)) > 6)]
        cands = [c for c in cands if c and c != right and "_" not in c]
        if not right or "_" in right or not cands:
            continue
        other = cands[len(docs) % len(cands)]
        opts = (right, other) if len(docs) % 2 == 0 else (other, right)
        docs.append(
            {
                "sentence": " ".join(w[:k]) + " _ " + " ".join(w[k + 1 :]) + ".",
                "option1": opts[0],
                "option2": opts[1],
                "answer": "1" if len(docs) % 2 == 0 else "2",
            }
        )
    return docs


def hellaswag_docs(n: int) -> list[dict]:
    """HellaSwag-shaped documents (see the module docstring)."""
    return [
        {
            "ind": i,
            "activity_label": "News",
            "ctx_a": " ".join(_s(i)[:20]) + ".",
            "ctx_b": " ".join(_s(i + 1)[:4]),
            "ctx": "",
            "endings": [_clause(_s(i + 5 * j + 2)[: 8 + 4 * j]) for j in range(4)],
            "source_id": f"s{i}",
            "split": "val",
            "split_type": "indomain",
            "label": str(i % 4),
        }
        for i in range(n)
    ]


def arc_docs(n: int) -> list[dict]:
    """ARC-shaped documents (see the module docstring)."""
    return [
        {
            "id": f"q{i}",
            "question": " ".join(_s(i)) + "?",
            "choices": {
                "text": [" ".join(_s(i + 7 * j + 3)[-1 - j :]) for j in range(4)],
                "label": list("ABCD"),
            },
            "answerKey": "ABCD"[i % 4],
        }
        for i in range(n)
    ]


def mmlu_docs(n: int, off: int = 0) -> list[dict]:
    """MMLU-shaped documents (see the module docstring)."""
    return [
        {
            "question": " ".join(_s(i + off)) + "?",
            "subject": "anatomy",
            "choices": [" ".join(_s(i + off + 7 * j + 3)[: 1 + (i + j) % 6]) for j in range(4)],
            "answer": (i + off) % 4,
        }
        for i in range(n)
    ]
