"""The shared kind tester: every kind of tinyllm.eval.kinds.KINDS runs its own scorer on a tiny
case whose row is worked out by hand (the closed forms of docs/definitions.md, "Intervals"),
with the model's answers stood in for, so the case checks what the kind does with them: its
metric, value, interval, n, units and items, and that the row is what its Kind says."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from tinyllm.data import Row, write_rows
from tinyllm.eval.kinds import KINDS, embeddings, mlm, rtd
from tinyllm.models import FAMILIES
from tinyllm.models import bert as bert_family
from tinyllm.models import classifier as classifier_family
from tinyllm.models import electra as electra_family
from tinyllm.report import Entry

T975 = {2: 4.302653, 3: 3.182446}  # Student t quantile 0.975 with 2 and 3 degrees of freedom
Z975 = 1.959964
LN2 = math.log(2.0)


@dataclass(frozen=True)
class Oracle:
    """A row worked out by hand: ``value`` in ``(lo, hi)`` over ``n_units`` units of ``n``
    items, by ``method``."""

    metric: str
    value: float
    lo: float
    hi: float
    n: int
    n_units: int
    method: str
    items: list


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson's score interval by its closed form."""
    p, z2 = k / n, Z975**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z975 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return centre - half, centre + half


def ratio(S: list[float], N: list[float]) -> tuple[float, float, float]:
    """The cluster-robust ratio estimator by its closed form: ``r = sum S / sum N``,
    ``u_g = S_g - r N_g``, ``se = sqrt(G / (G - 1) sum u_g^2) / sum N``, ``r ± t se``."""
    G, r = len(S), sum(S) / sum(N)
    se = math.sqrt(G / (G - 1) * sum((s - r * n) ** 2 for s, n in zip(S, N, strict=True)))
    se /= sum(N)
    return r, r - T975[G - 1] * se, r + T975[G - 1] * se


def _entry(family: str, data, kind: str | None = None) -> Entry:
    doc = {"name": "e", "family": family, "checkpoint": "x", "data": str(data)}
    return Entry.model_validate(doc | ({"kind": kind} if kind else {}))


# ---- one hand-worked case per kind --------------------------------------------------------------


def lm_case(tmp_path, monkeypatch):
    """The bigram family's NLLs stood in for: documents ``ab\\n``, ``cd\\n``, ``ef\\n``, ``gh``
    (one per line), tokens 1..10 scored with NLLs summing to ``S = [2, 6, 9, 2]`` nats over
    ``N = [2, 3, 3, 2]`` tokens; one byte per token, so bpb = nats per token / ln 2."""
    nlls = [1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 1.0, 1.0]
    monkeypatch.setattr(FAMILIES["bigram"], "token_nlls", lambda model, ids: np.array(nlls))
    data = tmp_path / "t.txt"
    data.write_bytes(b"ab\ncd\nef\ngh")
    r, lo, hi = ratio([2, 6, 9, 2], [2, 3, 3, 2])  # 1.9 nats per token
    oracle = Oracle("bpb", r / LN2, lo / LN2, hi / LN2, 10, 4, "cluster_ratio", nlls)
    return _entry("bigram", data), object(), data, oracle


def seq2seq_case(tmp_path, monkeypatch):
    """Beam search stood in for: 3 of 4 hypotheses equal their targets (the kind's docstring
    example)."""
    pairs = [("a", "x"), ("b", "y"), ("c", "z"), ("d", "w")]
    data = tmp_path / "p.jsonl"
    data.write_text("".join(f'{{"src": "{s}", "tgt": "{t}"}}\n' for s, t in pairs))
    hyps = [list(b"x"), list(b"y"), list(b"q"), list(b"w")]
    fam = FAMILIES["seq2seq"]
    monkeypatch.setattr(fam, "translate_ids", lambda model, srcs, beam: hyps)
    lo, hi = wilson(3, 4)  # (0.3006, 0.9544)
    return _entry("seq2seq", data), object(), data, Oracle("exact_match", 0.75, lo, hi, 4, 4,
                                                             "wilson", [1.0, 1.0, 0.0, 1.0])  # fmt: skip


def classifier_case(tmp_path, monkeypatch):
    """Predictions stood in for: 8 of 10 val rows right (Wilson 0.8 in (0.4902, 0.9433)); the
    train rows are read, never scored."""
    labels = ["a", "b"] * 5
    preds = list(labels)
    preds[2], preds[7] = "b", "a"
    rows = [Row("train", "t", "a")] + [Row("val", f"s{i}", y) for i, y in enumerate(labels)]
    data = write_rows(tmp_path / "r.jsonl", rows)
    monkeypatch.setattr(classifier_family, "predict", lambda model, sentences: preds)
    model = SimpleNamespace(n_folds=1, trained_on=None, labels=["a", "b"])
    model.fold_model = lambda j: model
    lo, hi = wilson(8, 10)
    items = [float(p == y) for p, y in zip(preds, labels, strict=True)]
    return _entry("classifier", data), model, data, Oracle("acc", 0.8, lo, hi, 10, 10, "wilson",
                                                            items)  # fmt: skip


ROW_ITEMS = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]  # rows 0, 1, 2 hold 2, 3, 3 of them
ROW_UNITS = [0, 0, 1, 1, 1, 2, 2, 2]


def _row_oracle() -> Oracle:
    """``S = [2, 2, 2]`` right of ``N = [2, 3, 3]``: 0.75, its upper end cut to 1."""
    r, lo, hi = ratio([2, 2, 2], [2, 3, 3])
    return Oracle("acc", r, lo, min(hi, 1.0), 8, 3, "cluster_ratio", ROW_ITEMS)


def _val_rows(tmp_path):
    rows = [Row("train", "zz", "-")] + [Row("val", s, "-") for s in ("ab", "cde", "fgh")]
    return write_rows(tmp_path / "r.jsonl", rows)


STUB = SimpleNamespace(cfg=SimpleNamespace(max_len=24))  # a model the stand-ins never run


def mlm_case(tmp_path, monkeypatch):
    """The masked positions and the model's calls on them stood in for (rows as units)."""
    targets = np.array([97, 98, 99, 100, 101, 102, 103, 104])
    answer = (np.array(ROW_ITEMS), targets)
    monkeypatch.setattr(bert_family, "mlm_accuracy", lambda model, texts, rng, p: answer)
    monkeypatch.setattr(mlm, "selected_rows", lambda *a: np.array(ROW_UNITS))
    data = _val_rows(tmp_path)
    return _entry("bert", data), STUB, data, _row_oracle()


def rtd_case(tmp_path, monkeypatch):
    """The discriminator's calls stood in for: the same 0/1 items in the same rows."""
    answer = {
        "correct": np.array(ROW_ITEMS),
        "replaced": np.zeros(8, dtype=bool),
        "masked": np.zeros(8, dtype=bool),
        "gen_correct": np.zeros(0),
    }
    monkeypatch.setattr(electra_family, "rtd_accuracy", lambda model, texts, rng: answer)
    monkeypatch.setattr(rtd, "counted_rows", lambda *a: np.array(ROW_UNITS))
    data = _val_rows(tmp_path)
    return _entry("electra", data), STUB, data, _row_oracle()


def embeddings_case(tmp_path, monkeypatch):
    """The model's cosines stood in for: 5 pairs whose ranks differ by one swap, Spearman
    ``rho = 1 - 6 sum d^2 / (n (n^2 - 1)) = 1 - 12 / 120 = 0.9`` with the Fisher z interval
    ``tanh(atanh(rho) ± z / sqrt(n - 3))``."""
    human = [1.0, 3.0, 2.0, 4.0, 5.0]
    cos = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    data = tmp_path / "pairs.txt"
    data.write_text("".join(f"w{i} v{i} {h}\n" for i, h in enumerate(human)))
    answer = (cos, np.array(human), list(range(5)))
    monkeypatch.setattr(embeddings, "pair_similarities", lambda sim, model, pairs: answer)
    z, half = math.atanh(0.9), Z975 / math.sqrt(5 - 3)
    oracle = Oracle("spearman", 0.9, math.tanh(z - half), math.tanh(z + half), 5, 5, "fisher_z",
                    cos.tolist())  # fmt: skip
    return _entry("word2vec", data), object(), data, oracle


def lmeval_case(tmp_path, monkeypatch):
    """lm-eval's run stood in for: a task whose documents score 1 1 0 1 1 1 1 1 0 1 on acc,
    each its own unit: Wilson 0.8 in (0.4902, 0.9433)."""
    from tinyllm.eval.lmeval import run

    per_doc = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    data = tmp_path / "task.yaml"
    data.write_text("task: tiny\ndataset_path: json\noutput_type: multiple_choice\n")
    res = {
        "metrics": {"acc,none": {"value": 0.8, "lo": 0.0, "hi": 1.0, "interval": "wilson"}},
        "per_item": {"acc,none": per_doc},
        "doc_ids": list(range(10)),
    }
    answer = {"tasks": {"tiny": res}, "lm_eval_version": "0"}
    monkeypatch.setattr(run, "evaluate", lambda *a, **k: answer)
    lo, hi = wilson(8, 10)
    model = SimpleNamespace(cfg=SimpleNamespace(block_size=8))
    return _entry("gpt", data, kind="lmeval"), model, data, Oracle("acc", 0.8, lo, hi, 10, 10,
                                                                    "wilson", per_doc)  # fmt: skip


CASES: dict[str, Callable] = {
    "lm": lm_case,
    "seq2seq": seq2seq_case,
    "classifier": classifier_case,
    "mlm": mlm_case,
    "rtd": rtd_case,
    "embeddings": embeddings_case,
    "lmeval": lmeval_case,
}


def test_every_kind_has_a_hand_worked_case():
    assert set(CASES) == set(KINDS)


@pytest.mark.parametrize("name", list(KINDS))
def test_a_kind_scores_its_hand_worked_case(name, tmp_path, monkeypatch):
    kind = KINDS[name]
    entry, model, data, want = CASES[name](tmp_path, monkeypatch)
    s = kind.score(entry, model, data, np.random.default_rng(0), kind.read_options(entry))
    assert (s.metric, s.method) == (want.metric, want.method) and (s.metric, s.method) in kind.rows
    got = (s.interval.value, s.interval.lo, s.interval.hi)
    assert got == pytest.approx((want.value, want.lo, want.hi), abs=1e-6)
    assert (s.n, s.n_units) == (want.n, want.n_units)
    np.testing.assert_array_equal(s.items, want.items)
    if want.n_units < want.n:  # units of several items: the item-level reference beside them
        assert s.iid_interval is not None and s.units is not None
    if kind.mean_of_items:  # one byte per token here: bpb's scale is the metric's 1 / ln 2
        assert s.interval.value == pytest.approx(np.mean(want.items) * kind.item_scale, abs=1e-12)
