"""Metrics by lm-eval's names on this path: acc_norm divides by characters, acc_bytes by UTF-8
bytes (lm-eval computes both from our log-likelihoods), on multi-byte ARC-schema choices."""

from __future__ import annotations

import itertools
import json

import lm_eval
import numpy as np
import pytest
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager
from lmeval_helpers import BUNDLED, arc_docs

from tinyllm.eval.lmeval.backend import TinyLLM

WORDS = ["café crème", "naïve", "über", "日本語の文", "plain", "smörgåsbord", "€ 5", "ok"]


def test_acc_norm_by_characters_acc_bytes_by_bytes(gpt2, tok, tmp_path):
    docs = arc_docs(8)
    for i, d in enumerate(docs):
        d["choices"]["text"] = [WORDS[(i + j) % len(WORDS)] for j in range(4)]
    data = tmp_path / "probe.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    files = {s: str(data) for s in ("train", "validation", "test")}
    metrics = [{"metric": m, "aggregation": "mean"} for m in ("acc", "acc_norm", "acc_bytes")]
    y = {
        "include": str(BUNDLED / "arc/arc_easy.yaml"),
        "task": "arc_mb_probe",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": files},
        "metric_list": metrics,
    }
    (tmp_path / "probe.yaml").write_text(json.dumps(y), encoding="utf-8")
    got = {}
    for name, model in (
        ("ours", TinyLLM(gpt2, tok)),
        ("ref", HFLM(pretrained=gpt2, tokenizer=tok)),
    ):
        out = lm_eval.simple_evaluate(
            model=model,
            tasks=["arc_mb_probe"],
            task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),
            log_samples=True,
        )
        got[name] = out["samples"]["arc_mb_probe"]
    for a, b in zip(got["ours"], got["ref"], strict=True):
        assert [a[m] for m in ("acc", "acc_norm", "acc_bytes")] == [
            b[m] for m in ("acc", "acc_norm", "acc_bytes")
        ]
        lls = np.array([r[0][0] for r in a["resps"]])
        chars = np.array([len(c) for c in a["doc"]["choices"]["text"]], dtype=float)
        nbytes = np.array([len(c.encode()) for c in a["doc"]["choices"]["text"]], dtype=float)
        gold = "ABCD".index(a["doc"]["answerKey"])
        assert a["acc_norm"] == float(np.argmax(lls / chars) == gold)
        assert a["acc_bytes"] == float(np.argmax(lls / nbytes) == gold)


POOL = [*WORDS, "東京の駅", "zebra crossing", "ça va", "a", "ñandú", "the end of it"]


def _split_docs(lm, n):
    """ARC documents whose best choice by LL per character and by LL per byte differ: for each
    document, two choices of :data:`POOL` (scored by ``lm`` in ARC's prompt), one ahead per
    character and the other per byte, and two more behind both by both, gold alternating
    between the two, so acc_norm and acc_bytes disagree on each."""
    from lm_eval.api.instance import Instance

    docs = []
    for d in arc_docs(n):
        ctx = f"Question: {d['question']}\nAnswer:"
        reqs = [Instance("loglikelihood", {}, (ctx, f" {w}"), k) for k, w in enumerate(POOL)]
        ll = np.array([r[0] for r in lm.loglikelihood(reqs)])
        per_char = ll / [len(w) for w in POOL]
        per_byte = ll / [len(w.encode()) for w in POOL]
        pick = None
        for a, b in itertools.permutations(range(len(POOL)), 2):
            if per_char[a] > per_char[b] and per_byte[b] > per_byte[a]:
                rest = [k for k in range(len(POOL))
                        if per_char[k] < per_char[a] and per_byte[k] < per_byte[b]]  # fmt: skip
                if len(rest) >= 2:
                    pick = [a, b, *rest[:2]]
                    break
        assert pick is not None, f"expected two choices ranked apart per char and per byte: {d}"
        d["choices"]["text"] = [POOL[k] for k in pick]
        d["answerKey"] = "ABCD"[len(docs) % 2]
        docs.append(d)
    return docs


def test_per_document_acc_norm_and_acc_bytes_through_evaluate(gpt2, tok, tmp_path):
    """evaluate's per-document scores and values of acc, acc_norm and acc_bytes on documents
    where acc_norm and acc_bytes disagree: each is lm-eval's own rule on the logged LLs."""
    from tinyllm.eval.lmeval.run import evaluate

    docs = _split_docs(TinyLLM(gpt2, tok), 6)
    data = tmp_path / "split.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    metrics = [{"metric": m, "aggregation": "mean"} for m in ("acc", "acc_norm", "acc_bytes")]
    y = {
        "include": str(BUNDLED / "arc/arc_easy.yaml"),
        "task": "arc_split",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {s: str(data) for s in ("train", "validation", "test")}},
        "metric_list": metrics,
    }
    (tmp_path / "split.yaml").write_text(json.dumps(y), encoding="utf-8")
    samples: dict = {}

    def capture(**kw):
        out = lm_eval.simple_evaluate(**kw)
        samples.update(out["samples"])
        return out

    out = evaluate(["arc_split"], gpt2, tok, include_path=tmp_path, include_defaults=False,
                   simple_evaluate=capture)["tasks"]["arc_split"]  # fmt: skip
    want: dict = {"acc": [], "acc_norm": [], "acc_bytes": []}
    for s in sorted(samples["arc_split"], key=lambda s: s["doc_id"]):
        lls = np.array([r[0][0] for r in s["resps"]])
        text = s["doc"]["choices"]["text"]
        gold = "ABCD".index(s["doc"]["answerKey"])
        want["acc"].append(float(np.argmax(lls) == gold))
        want["acc_norm"].append(float(np.argmax(lls / [len(c) for c in text]) == gold))
        want["acc_bytes"].append(float(np.argmax(lls / [len(c.encode()) for c in text]) == gold))
    assert want["acc_norm"] == [1.0, 0.0] * 3 and want["acc_bytes"] == [0.0, 1.0] * 3
    for m, items in want.items():
        assert out["per_item"][f"{m},none"] == items, m
        assert out["metrics"][f"{m},none"]["value"] == pytest.approx(np.mean(items), abs=1e-12)
