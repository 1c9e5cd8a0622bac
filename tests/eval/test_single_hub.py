"""`tinyllm eval ppl --hf org/name` reads the model from the local Hugging Face cache: the CLI
scores the cached snapshot as it scores the folder itself."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from zoo_helpers import cache_as_hub  # same folder: pytest puts it on sys.path

from tinyllm.cli import app

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
REPO = "myorg/tiny-gpt2"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cached_snapshot(tmp_path):
    """A tiny GPT-2 with a word-level tokenizer, cached as huggingface_hub caches
    ``myorg/tiny-gpt2`` (refs/main naming the commit, the snapshot's files links to blobs)."""
    import torch

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    src = tmp_path / "source"
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(src)
    vocab = {f"w{i}": i for i in range(299)} | {"[UNK]": 299}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    fast.save_pretrained(src)
    return cache_as_hub(src, tmp_path / "hub", REPO, COMMIT)


def test_eval_ppl_hf_hub_id_scores_the_cached_snapshot(tmp_path, monkeypatch):
    snap = _cached_snapshot(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)  # no local folder myorg/tiny-gpt2
    text = tmp_path / "t.txt"
    text.write_text("w3 w7 w250 w1 w2\nw9 w8 w7\n", encoding="utf-8")
    runner = CliRunner()
    args = ["eval", "ppl", "--text", str(text), "--json", "--quiet", "--ctx-len", "8"]
    by_id = runner.invoke(app, [*args, "--hf", REPO])
    assert by_id.exit_code == 0, by_id.output
    by_folder = runner.invoke(app, [*args, "--hf", str(snap)])
    assert by_folder.exit_code == 0, by_folder.output
    a, b = json.loads(by_id.stdout), json.loads(by_folder.stdout)
    assert a["model"] == str(snap)
    assert a["bpb"] == b["bpb"] and a["n_tokens"] == b["n_tokens"] > 0
