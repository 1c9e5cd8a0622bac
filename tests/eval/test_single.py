"""tinyllm.eval.single: one model on one file, equal to the instrument's own calls on the same
model (what `tinyllm eval ppl` and `tinyllm eval task` print)."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import torch

from tinyllm.eval import lm
from tinyllm.eval.single import check_vocab, open_lm, score_ppl, score_task
from tinyllm.models import bigram, gpt
from tinyllm.tokens import ByteTokenizer, write_tokens

TEXT = b"the cat sat on the mat. the dog sat on the log. a cat and a dog met by the log. " * 6


@pytest.fixture
def files(tmp_path):
    data = np.frombuffer(TEXT, dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", data[:300])
    bigram.save(bigram.train(bigram.Config(k=0.5), data, seed=0), tmp_path / "bigram")
    items = [{"context": "the cat", "choices": [" sat", " dog"], "gold": 0}] * 2
    items += [{"context": "a dog met by the", "choices": [" log", " mat"], "gold": 1}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    return tmp_path


def recorder(calls):
    """A progress factory that records (description, total) and every update."""

    @contextlib.contextmanager
    def progress(description, total):
        calls.append((description, total))

        class Bar:
            def update(self, done, total=None):
                calls.append(done)

        yield Bar()

    return progress


def test_score_ppl_of_a_family_is_its_own_nlls_summarized(files):
    calls = []
    out = score_ppl(str(files / "val.tok"), model=str(files / "bigram"), progress=recorder(calls))
    ids = np.frombuffer(TEXT, dtype=np.uint8)[:300]
    want = lm.summarize_nlls(bigram.token_nlls(bigram.load(files / "bigram"), ids), 0)
    assert {k: out[k] for k in want} == want
    assert (out["arch"], out["ctx_len"], out["stride"], out["n_tokens"]) == (
        "bigram",
        None,
        None,
        299,
    )
    assert calls == [("scoring tokens (bigram)", 299), 299]


@pytest.mark.parametrize(
    ("options", "got"),
    [({"ctx_len": 8}, "--ctx-len=8"), ({"stride": 4}, "--stride=4"),
     ({"ctx_len": 8, "stride": 4}, "--ctx-len=8, --stride=4")],
)  # fmt: skip
def test_a_window_option_for_a_family_without_windows_is_an_error_naming_it(files, options, got):
    want = (
        "family 'bigram' is not scored in windows (it scores every token with its own "
        f"context): expected no --ctx-len or --stride, got {got}"
    )
    with pytest.raises(ValueError) as e:
        score_ppl(str(files / "val.tok"), model=str(files / "bigram"), **options)
    assert str(e.value) == want


def test_score_ppl_of_gpt_is_strided_with_the_models_context(tmp_path):
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=1, n_head=2, n_embd=16)).eval()
    ck = gpt.save(model, tmp_path / "gpt")
    ids = np.random.default_rng(3).integers(0, 256, size=120)
    write_tokens(tmp_path / "v.tok", ids.astype(np.uint8))
    out = score_ppl(str(tmp_path / "v.tok"), model=str(ck), n_bytes=200)
    assert (out["ctx_len"], out["stride"]) == (32, 16)  # block_size, half of it
    want = lm.eval_ppl(gpt.load(ck), ids, 32, 16, 200)
    assert out["nll"] == pytest.approx(want["nll"], rel=1e-12) and out["n_bytes"] == 200
    with pytest.raises(ValueError) as e:
        score_ppl(str(tmp_path / "v.tok"), model=str(ck), ctx_len=64)
    assert str(e.value) == (
        "--ctx-len: expected at most the model's context 32, got 64 (gpt.Model: block_size=32)"
    )


def test_score_task_equals_run_task_on_the_familys_nlls(files):
    calls = []
    out = score_task(str(files / "t.jsonl"), model=str(files / "bigram"), metric="acc",
                     seed=3, n_boot=200, progress=recorder(calls))  # fmt: skip
    m = bigram.load(files / "bigram")
    items = lm.read_task(files / "t.jsonl")
    scorer = lm.FamilyLM(m, bigram.token_nlls)
    want = lm.run_task(scorer, ByteTokenizer(), items, "acc", np.random.default_rng(3), 200)
    assert out["per_item"] == want.per_item.tolist()
    assert (out["value"], out["lo"], out["hi"], out["n"]) == (want.value, want.lo, want.hi, 3)
    assert calls[0] == ("scoring items", 3)


def test_refusals_name_the_flag_or_file(files):
    with pytest.raises(ValueError, match="expected exactly one of --model DIR or --hf DIR"):
        open_lm()
    with pytest.raises(ValueError, match="expected a local Hugging Face model folder"):
        open_lm(hf=str(files / "nope"))
    with pytest.raises(ValueError, match=r"--n-bytes: expected at least the 299 scored tokens"):
        score_ppl(str(files / "val.tok"), model=str(files / "bigram"), n_bytes=10)
    with pytest.raises(
        ValueError, match=r"expected token ids < 256 \(the vocabulary of m\), got id 300"
    ):
        check_vocab(np.array([1, 300, 2]), 256, "d.tok", "m")
    with pytest.raises(
        ValueError, match=r"--metric: expected one of \['acc', 'acc_norm'\], got 'f1'"
    ):
        score_task(str(files / "t.jsonl"), model=str(files / "bigram"), metric="f1")
