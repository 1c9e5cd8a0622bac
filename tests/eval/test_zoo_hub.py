"""A manifest's ``hf`` entry may name its checkpoint by hub id (``org/name``): the zoo scores the
snapshot in the local Hugging Face cache, offline, as it scores that folder named by path; a hub
id not in the cache is an error row naming the cache folder searched, and has no cache key."""

from __future__ import annotations

import numpy as np
import pytest
from gensim.test.utils import datapath
from zoo_helpers import cache_as_hub, hf_gpt2, stable_row  # same folder: on sys.path

from tinyllm.eval import zoo
from tinyllm.tokens import write_tokens
from tinyllm_suite.eval_tasks import entry_cache_key

pytest.importorskip("transformers")
REPO = "myorg/tiny-gpt2"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def _cache(tmp_path):
    """A random-weight GPT-2 cached as huggingface_hub caches ``myorg/tiny-gpt2``."""
    hf_gpt2(tmp_path / "source")
    return cache_as_hub(tmp_path / "source", tmp_path / "hub", REPO, COMMIT)


def _manifest(tmp_path, checkpoint):
    write_tokens(tmp_path / "val.tok", np.fromfile(datapath("lee_background.cor"), np.uint8)[:200])
    entry = {"name": "hf", "family": "hf", "checkpoint": checkpoint, "data": "val.tok"}
    return {"entries": [entry]}


def test_hub_id_entry_scores_the_cached_snapshot(tmp_path, monkeypatch):
    snap = _cache(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    by_id = zoo.run_zoo(_manifest(tmp_path, REPO), base_dir=tmp_path).rows[0]
    by_path = zoo.run_zoo(_manifest(tmp_path, str(snap)), base_dir=tmp_path).rows[0]
    assert by_id.status == "ok", by_id.error
    a, b = stable_row(by_id), stable_row(by_path)
    assert a.pop("checkpoint") == REPO and b.pop("checkpoint") == str(snap)
    assert a == b and a["value"] > 0
    key = entry_cache_key(None, {"entry": _manifest(tmp_path, REPO)["entries"][0],
                                 "base_dir": str(tmp_path), "seed": 0})  # fmt: skip
    assert key is not None and key.startswith("tinyllm-entry-")


def test_hub_id_not_cached_is_an_error_row_naming_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    row = zoo.run_zoo(_manifest(tmp_path, REPO), base_dir=tmp_path).rows[0]
    assert row.status == "error"
    assert REPO in row.error.message and str(tmp_path / "empty-hub") in row.error.message
    key = entry_cache_key(None, {"entry": _manifest(tmp_path, REPO)["entries"][0],
                                 "base_dir": str(tmp_path), "seed": 0})  # fmt: skip
    assert key is None


def test_a_local_folder_named_like_a_hub_id_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    hf_gpt2(tmp_path / "myorg" / "tiny-gpt2")
    row = zoo.run_zoo(_manifest(tmp_path, REPO), base_dir=tmp_path).rows[0]
    assert row.status == "ok", row.error
