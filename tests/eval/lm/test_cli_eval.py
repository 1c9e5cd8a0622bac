"""The `tinyllm eval ppl` / `tinyllm eval task` commands against the instrument they call.

Each command's JSON equals the library call on the same model (a tiny random GPT-2 saved as a
Hugging Face folder, our GPT, a count-based family); errors are one clear line.
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch
from lm_helpers import TASK, TableModel, spec_choice_table, table_token_nlls, tiny_gpt2, write_task
from typer.testing import CliRunner

from tinyllm.checkpoint import load_tensors, save_checkpoint
from tinyllm.cli import app
from tinyllm.eval import lm
from tinyllm.models import FAMILIES
from tinyllm.tokens import ByteTokenizer, write_tokens

transformers = pytest.importorskip("transformers")


def _invoke(args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    model = tiny_gpt2(vocab=300, seed=1)
    model.save_pretrained(d)  # safetensors
    return d


def test_cli_eval_ppl_hf_json_equals_eval_ppl(tmp_path, hf_dir):
    ids = np.random.default_rng(2).integers(0, 300, size=200)
    tok = write_tokens(tmp_path / "val.tok", ids)
    r = _invoke(
        ["eval", "ppl", "--hf", hf_dir, "--data", tok, "--ctx-len", 32, "--stride", 16, "--json"]
    )
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, use_safetensors=True)
    want = lm.eval_ppl(model.eval(), ids, 32, 16)
    assert (got["ctx_len"], got["stride"], got["n_tokens"]) == (32, 16, 199)
    for k in ("nll", "ppl", "bpb"):
        assert got[k] == pytest.approx(want[k], rel=1e-9)
    table = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", tok, "--ctx-len", 32])
    assert table.exit_code == 0, table.output
    assert "ppl" in table.stdout and "bits/byte" in table.stdout and "stride 16" in table.stdout


def test_cli_eval_ppl_errors_are_clear(tmp_path, hf_dir):
    tok = write_tokens(tmp_path / "big.tok", np.array([1, 2, 400, 3]))
    r = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", tok, "--ctx-len", 32, "--stride", 8])
    assert r.exit_code == 2 and "expected token ids < 300" in r.output
    ok = write_tokens(tmp_path / "ok.tok", np.array([1, 2, 3, 4]))
    r = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", ok, "--ctx-len", 32, "--stride", 32])
    assert r.exit_code == 2 and "stride" in r.output
    r = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", ok, "--ctx-len", 128])
    assert r.exit_code == 2 and "at most the model's context 64" in r.output
    r = _invoke(["eval", "ppl", "--data", ok])
    assert r.exit_code == 2 and "exactly one of --model DIR or --hf DIR" in r.output
    r = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", tmp_path / "missing.tok"])
    assert r.exit_code == 2 and "not found" in r.output


def test_cli_eval_task_hf_json_equals_run_task(tmp_path, hf_dir):
    path = write_task(tmp_path / "task.jsonl", TASK * 3)
    r = _invoke(
        [
            "eval",
            "task",
            "--hf",
            hf_dir,
            "--task",
            path,
            "--metric",
            "acc",
            "--tokenizer",
            "byte",
            "--seed",
            4,
            "--n-boot",
            100,
            "--json",
        ]
    )
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, use_safetensors=True)
    want = lm.run_task(
        model.eval(), ByteTokenizer(), path, "acc", np.random.default_rng(4), 100, 64
    )
    assert got["per_item"] == want.per_item.tolist()
    assert (got["value"], got["lo"], got["hi"], got["n"]) == (want.value, want.lo, want.hi, 12)
    table = _invoke(["eval", "task", "--hf", hf_dir, "--task", path, "--tokenizer", "byte"])
    assert table.exit_code == 0 and "acc_norm" in table.stdout


def test_cli_eval_task_max_len_and_delimiter(tmp_path, hf_dir):
    """--max-length above the model's 64 positions: one clear line, no traceback; a context longer
    than the model is cut as lm-eval cuts it (a warning, not an IndexError); --target-delimiter
    changes the scores as the library's target_delimiter does."""
    long = [{"context": "ab" * 60, "choices": ["bb", "c"], "gold": 0}] + TASK
    path = write_task(tmp_path / "task.jsonl", long)
    base = ["eval", "task", "--hf", hf_dir, "--task", path, "--tokenizer", "byte", "--json"]
    r = _invoke([*base, "--max-length", 65])
    assert r.exit_code == 2, r.output
    assert "expected at most the model's own context of 64 tokens, got 65" in r.output
    assert "Traceback" not in r.output
    with pytest.warns(UserWarning, match="cut 113 context tokens"):  # the CLI says so too
        r = _invoke(base)
    assert r.exit_code == 0, r.output
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, use_safetensors=True)
    with pytest.warns(UserWarning, match="cut 113 context tokens from the left of 2 of 10"):
        want = lm.run_task(
            model.eval(), ByteTokenizer(), long, "acc_norm", np.random.default_rng(0)
        )
    assert json.loads(r.stdout)["per_item"] == want.per_item.tolist()
    with pytest.warns(UserWarning, match="cut 115 context tokens"):
        r = _invoke([*base, "--target-delimiter", " ", "--metric", "acc"])
    assert r.exit_code == 0, r.output
    with pytest.warns(UserWarning, match="cut 115 context tokens"):
        want = lm.run_task(
            model.eval(),
            ByteTokenizer(),
            long,
            "acc",
            np.random.default_rng(0),
            target_delimiter=" ",
        )
    assert json.loads(r.stdout)["per_item"] == want.per_item.tolist()


def test_cli_eval_task_without_a_tokenizer_says_so(tmp_path, hf_dir):
    path = write_task(tmp_path / "task.jsonl", TASK)
    r = _invoke(["eval", "task", "--hf", hf_dir, "--task", path])
    assert r.exit_code == 2 and "--tokenizer byte" in r.output


def _table_family():
    """A count-based lm family as the zoo sees one: ARCH, KIND, load, token_nlls."""

    def load(path):
        return TableModel(load_tensors(path)["table"])

    return types.SimpleNamespace(
        ARCH="tabletest", KIND="lm", load=load, token_nlls=table_token_nlls
    )


def test_cli_model_dir_dispatches_to_the_family(tmp_path, monkeypatch):
    monkeypatch.setitem(FAMILIES, "tabletest", _table_family())
    P = spec_choice_table()
    ck = save_checkpoint(tmp_path / "table", "tabletest", {}, {"table": P})
    ids = ByteTokenizer().encode("abba cab abc bba")
    tok = write_tokens(tmp_path / "val.tok", ids)
    r = _invoke(["eval", "ppl", "--model", ck, "--data", tok, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    want = lm.summarize_nlls(table_token_nlls(TableModel(P), ids))
    assert got["bpb"] == pytest.approx(want["bpb"], rel=1e-12)
    assert got["stride"] is None
    path = write_task(tmp_path / "task.jsonl", TASK)
    r = _invoke(["eval", "task", "--model", ck, "--task", path, "--metric", "acc", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["per_item"] == [0, 0, 1, 1]
    bad = save_checkpoint(tmp_path / "nope", "nosuchfamily", {}, {"table": P})
    r = _invoke(["eval", "ppl", "--model", bad, "--data", tok])
    assert r.exit_code == 2 and "unknown tl_arch 'nosuchfamily'" in r.output


def test_cli_model_dir_gpt_is_strided(tmp_path, monkeypatch):
    gpt = pytest.importorskip("tinyllm.models.gpt")
    monkeypatch.setitem(FAMILIES, "gpt", FAMILIES.get("gpt", gpt))
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=2, n_head=2, n_embd=16)).eval()
    ck = gpt.save(model, tmp_path / "gpt")
    ids = np.random.default_rng(3).integers(0, 256, size=150)
    tok = write_tokens(tmp_path / "val.tok", ids.astype(np.uint8))
    r = _invoke(["eval", "ppl", "--model", ck, "--data", tok, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert (got["ctx_len"], got["stride"]) == (32, 16)  # defaults: block_size, half of it
    want = lm.eval_ppl(gpt.load(ck), ids, 32, 16)
    assert got["nll"] == pytest.approx(want["nll"], rel=1e-9)


def test_cli_eval_task_hf_uses_the_folders_own_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=280, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["a bb c", "the cat sat on the mat"] * 20, trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)
    d = tmp_path / "hf"
    model = tiny_gpt2(vocab=300, seed=2)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    path = write_task(tmp_path / "task.jsonl", TASK * 2)
    r = _invoke(["eval", "task", "--hf", d, "--task", path, "--metric", "acc", "--json"])
    assert r.exit_code == 0, r.output
    loaded = transformers.AutoTokenizer.from_pretrained(d, local_files_only=True)
    want = lm.run_task(model, loaded, path, "acc", np.random.default_rng(0), 1000, 64)
    assert json.loads(r.stdout)["per_item"] == want.per_item.tolist()
    assert json.loads(r.stdout)["lo"] == want.lo


def test_cli_one_file_ngram_checkpoint(tmp_path):
    ngram = pytest.importorskip("tinyllm.models.ngram")
    if FAMILIES.get("ngram") is not ngram:
        pytest.skip("ngram is not registered in FAMILIES")
    text = "the cat sat on the mat. a bb c. the bat sat on the cat. " * 20
    model = ngram.train(ngram.Config(order=3), ByteTokenizer().encode(text), seed=0)
    path = ngram.save(model, tmp_path / "ngram.safetensors")
    ids = ByteTokenizer().encode("the mat sat on a bat.")
    tok = write_tokens(tmp_path / "val.tok", ids.astype(np.uint8))
    r = _invoke(["eval", "ppl", "--model", path, "--data", tok, "--json"])
    assert r.exit_code == 0, r.output
    want = lm.summarize_nlls(ngram.token_nlls(ngram.load(path), ids))
    assert json.loads(r.stdout)["bpb"] == pytest.approx(want["bpb"], rel=1e-12)
    task = write_task(tmp_path / "task.jsonl", TASK)
    r = _invoke(["eval", "task", "--model", path, "--task", task, "--json"])
    assert r.exit_code == 0, r.output
    fam = lm.FamilyLM(ngram.load(path), ngram.token_nlls)
    want = lm.run_task(fam, ByteTokenizer(), task, "acc_norm", np.random.default_rng(0))
    assert json.loads(r.stdout)["per_item"] == want.per_item.tolist()
