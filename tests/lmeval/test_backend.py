"""TinyLLM against lm-eval's own HFLM, per document, on lm-eval's REAL bundled task configs.

Each task is a local YAML that ``include``s the bundled config and overrides only
``dataset_path: json`` + ``dataset_kwargs.data_files`` (lmeval_helpers.TASKS); both backends
score the same GPT-2 object through ``lm_eval.simple_evaluate`` with ``log_samples``, and every
document must agree: the same prompts, log-likelihoods within 1e-4 (relative to the sum for
rolling texts: HFLM sums each window's log-probabilities in float32), the same
acc / acc_norm / exact_match / perplexity inputs, identical greedy generations.
"""

from __future__ import annotations

import math

import lm_eval
import pytest
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from tinyllm.eval.lmeval.backend import TinyLLM

ZERO_SHOT = ["arc_easy", "hellaswag", "winogrande", "copa", "lambada_openai", "wikitext"]
# logged samples per task: 4 documents; wikitext has 3; gsm8k 2 documents x 2 filters
SAMPLES = {"wikitext": 3, "gsm8k": 4}
METRICS = ("acc", "acc_norm", "acc_bytes", "exact_match")


def _run(model, task_dir, tasks, num_fewshot=None, limit=4):
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    out = lm_eval.simple_evaluate(
        model=model,
        tasks=tasks,
        task_manager=tm,
        num_fewshot=num_fewshot,
        limit=limit,
        log_samples=True,
    )
    return out["samples"]


@pytest.fixture(scope="module")
def runs(gpt2, tok, task_dir):
    """Both backends on every task: {name: (ours samples, HFLM samples)}."""
    got = {}
    for tasks, shots, limit in (
        (ZERO_SHOT, None, 4),
        (["mmlu_anatomy"], 2, 4),  # 2-shot from its dev split
        (["gsm8k"], None, 2),  # its own 5-shot from train
    ):
        ours = _run(TinyLLM(gpt2, tok), task_dir, tasks, shots, limit)
        ref = _run(
            HFLM(pretrained=gpt2, tokenizer=tok, batch_size=1), task_dir, tasks, shots, limit
        )
        for t in tasks:
            got[t] = (ours[t], ref[t])
    return got


def _close(a: float, b: float, rel: bool) -> bool:
    tol = 1e-4 * max(1.0, abs(b)) if rel else 1e-4
    return abs(a - b) <= tol


@pytest.mark.parametrize("task", [*ZERO_SHOT, "mmlu_anatomy", "gsm8k"])
def test_same_documents_as_hflm(runs, task):
    ours, ref = runs[task]
    assert len(ours) == len(ref) == SAMPLES.get(task, 4)
    for a, b in zip(ours, ref, strict=True):
        assert a["doc_id"] == b["doc_id"]
        assert a["arguments"] == b["arguments"], f"{task} doc {a['doc_id']}: prompts differ"
        for ra, rb in zip(a["resps"], b["resps"], strict=True):
            va, vb = ra[0], rb[0]
            if isinstance(vb, str):  # generate_until: identical greedy text
                assert va == vb, f"{task} doc {a['doc_id']}"
            elif isinstance(vb, tuple):  # (LL, is_greedy)
                assert _close(va[0], vb[0], rel=False), (task, a["doc_id"], va, vb)
            else:  # a rolling LL: a float32 sum over the whole text
                assert _close(va, vb, rel=True), (task, a["doc_id"], va, vb)
        assert a["filtered_resps"] == b["filtered_resps"] or task != "gsm8k"
        if task == "gsm8k":  # the model generated text, and stopped where HFLM did
            assert len(a["resps"][0][0]) > 20
        for m in METRICS:
            assert a.get(m) == b.get(m), f"{task} doc {a['doc_id']}: {m}"


def test_lambada_is_greedy_computed(runs):
    """lambada_openai's acc is is_greedy: computed (one continuation per context) and equal."""
    ours, ref = runs["lambada_openai"]
    assert [s["resps"][0][0][1] for s in ours] == [s["resps"][0][0][1] for s in ref]
    assert [s["perplexity"] for s in ours] == pytest.approx(
        [s["perplexity"] for s in ref], abs=1e-4
    )


def test_mmlu_two_shot_prompt_has_description_and_dev_examples(runs):
    ours, _ = runs["mmlu_anatomy"]
    prompt = ours[0]["arguments"][0][0]
    assert prompt.startswith(
        "The following are multiple choice questions (with answers) about anatomy."
    )
    assert prompt.count("\nAnswer:") == 3  # two dev examples and the question


def test_wikitext_rolling_metrics(runs):
    ours, ref = runs["wikitext"]
    for a, b in zip(ours, ref, strict=True):
        for m in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
            assert a[m][1] == b[m][1] and math.isclose(a[m][0], b[m][0], rel_tol=1e-6)
