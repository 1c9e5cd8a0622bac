"""TinyLLM's generation batches: by default more rows a step than HFLM's batch of 8 (one
decode step reads the weights once whatever its rows), with the same greedy text as HFLM and
as one row at a time."""

from __future__ import annotations

from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from tinyllm.eval.lmeval import generate
from tinyllm.eval.lmeval.backend import DEFAULT_GEN_BATCH, TinyLLM


def _reqs(n: int) -> list[Instance]:
    kw = {"until": ["\n\n"], "max_gen_toks": 6, "do_sample": False}
    texts = [f"The fire crews moved {i} trucks towards the town of Hill Top" for i in range(n)]
    return [
        Instance("generate_until", {}, (t, dict(kw)), idx=0, metadata=("t", i, 1))
        for i, t in enumerate(texts)
    ]


def test_default_batch_runs_12_rows_in_one_batch_with_hflms_text(gpt2, tok, monkeypatch):
    assert DEFAULT_GEN_BATCH == 32
    groups: list[list[list[int]]] = []
    real = generate.batches

    def spy(lengths, batch_size, same_length):
        groups.append(real(lengths, batch_size, same_length))
        return groups[-1]

    monkeypatch.setattr(generate, "batches", spy)
    reqs = _reqs(12)
    got = TinyLLM(gpt2, tok).generate_until(reqs)
    assert [len(g) for g in groups[-1]] == [12]  # one batch of 12 rows (8 + 4 at batch 8)
    one = TinyLLM(gpt2, tok, batch_size=1).generate_until(reqs)
    assert [len(g) for g in groups[-1]] == [1] * 12
    want = HFLM(pretrained=gpt2, tokenizer=tok, batch_size=8).generate_until(reqs)
    assert got == one == want
    assert any(g for g in got)  # some text was generated
