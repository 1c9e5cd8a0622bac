"""A hub id (``org/name``) that is no local path loads from the local Hugging Face cache, offline:
``models--org--name/refs/main`` names the commit, ``snapshots/<commit>/`` is the folder (its files
links into ``blobs/``, as huggingface_hub writes them), and the folder then goes through every check
a local folder does. A model not in the cache is one line naming the repo id and the cache folder
searched.

The cache is built here from a tiny random GPT-2 saved with ``save_pretrained`` (no download);
``huggingface_hub.snapshot_download(..., local_files_only=True)`` finding the same folder shows
the layout is the hub's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest
import torch

from tinyllm.checkpoint import CheckpointError
from tinyllm.models import hf

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

REPO = "myorg/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
IDS = torch.tensor([[5, 17, 3, 250, 9, 1]])


def _source(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    d = tmp_path / "source"
    model.save_pretrained(d)
    vocab = {f"w{i}": i for i in range(299)} | {"[UNK]": 299}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(d)
    return model, d


def _cache(root, source, repo=REPO, commit=COMMIT):
    """``source``'s files cached as huggingface_hub caches a repo: blobs named by their sha256,
    the snapshot's files links to them, refs/main naming the commit."""
    org, name = repo.split("/")
    repo_dir = root / f"models--{org}--{name}"
    snap = repo_dir / "snapshots" / commit
    (repo_dir / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    for f in sorted(source.iterdir()):
        data = f.read_bytes()
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.join("..", "..", "blobs", blob.name), snap / f.name)
    return snap


@pytest.fixture
def cached(tmp_path, monkeypatch):
    model, source = _source(tmp_path)
    root = tmp_path / "hub"
    snap = _cache(root, source)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.chdir(tmp_path)  # no local folder myorg/tiny-llama
    return model, root, snap


def test_a_hub_id_loads_its_cached_snapshot_with_the_same_logits(cached):
    model, root, snap = cached
    assert hf.resolve_folder(REPO) == snap
    from huggingface_hub import snapshot_download

    assert snapshot_download(REPO, local_files_only=True, cache_dir=root) == str(snap)
    got = hf.load(REPO)
    assert type(got).__name__ == "GPT2LMHeadModel"
    with torch.no_grad():
        assert torch.equal(got(IDS).logits, model(IDS).logits)
    tok = hf.load_tokenizer(REPO)
    assert tok("w3 w7 w250")["input_ids"] == [3, 7, 250]


def test_hf_home_names_the_cache_when_hf_hub_cache_is_unset(cached, monkeypatch, tmp_path):
    _, root, snap = cached
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    shutil.move(root, home / "hub")
    monkeypatch.setenv("HF_HOME", str(home))
    assert hf.hub_cache_dir() == home / "hub"
    assert hf.resolve_folder(REPO) == home / "hub" / snap.relative_to(root)


def test_a_model_not_in_the_cache_is_one_line_naming_the_repo_and_the_cache(cached):
    _, root, _ = cached
    with pytest.raises(hf.NotCachedError) as e:
        hf.load("myorg/other-model")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("myorg/other-model: expected a local folder or a model in the")
    assert f"(no models--myorg--other-model in {root};" in msg
    assert "never downloads" in msg
    # a repo folder without the snapshot its refs/main names
    shutil.rmtree(root / "models--myorg--tiny-llama" / "snapshots" / COMMIT)
    with pytest.raises(hf.NotCachedError, match=f"no snapshots/{COMMIT} in models--myorg--tiny"):
        hf.load_tokenizer(REPO)


def test_a_local_folder_wins_and_other_names_keep_the_loaders_own_error(cached, tmp_path):
    local = tmp_path / "myorg" / "tiny-llama"
    local.mkdir(parents=True)  # an empty local folder of that name: checked as it is
    with pytest.raises(CheckpointError, match="config.json: missing"):
        hf.load(REPO)
    assert not hf.is_hub_id("a/b/c") and not hf.is_hub_id("./a") and not hf.is_hub_id("a--b/c")
    with pytest.raises(CheckpointError, match="no/such/folder: not found"):
        hf.load("no/such/folder")


def test_a_cached_snapshot_goes_through_every_check_of_a_folder(tmp_path, monkeypatch):
    _, source = _source(tmp_path)
    cfg = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**cfg, "auto_map": {"x": "m.M"}}))
    root = tmp_path / "hub"
    _cache(root, source)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(hf.RemoteCodeError, match="auto_map names the folder's own code"):
        hf.load(REPO)


def test_refs_main_that_is_a_fifo_is_refused_never_waited_on(cached):
    _, root, _ = cached
    ref = root / "models--myorg--tiny-llama" / "refs" / "main"
    ref.unlink()
    os.mkfifo(ref)
    with pytest.raises(CheckpointError, match="expected a regular file, got a FIFO"):
        hf.resolve_folder(REPO)
    ref.unlink()
    ref.write_text("not-a-commit")
    with pytest.raises(CheckpointError, match="expected a 40-hex commit id"):
        hf.resolve_folder(REPO)
