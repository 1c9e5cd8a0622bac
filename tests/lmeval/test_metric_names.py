"""Metrics by lm-eval's names on this path: acc_norm divides by characters, acc_bytes by UTF-8
bytes (lm-eval computes both from our log-likelihoods), on multi-byte ARC-schema choices."""

from __future__ import annotations

import json

import lm_eval
import numpy as np
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
