"""Data are never fetched on the lm-eval path: datasets and the hub are offline for a run unless
the user set HF_DATASETS_OFFLINE or HF_HUB_OFFLINE, and a dataset that is not local is one line
naming it and how to give local files (it was the hub's retries, then a ConnectionError)."""

from __future__ import annotations

import json
import socket

import datasets.config
import huggingface_hub.constants
import pytest
from lmeval_helpers import BUNDLED

from tinyllm.eval.lmeval import guards
from tinyllm.eval.lmeval.guards import DatasetNotLocalError, offline_data
from tinyllm.eval.lmeval.run import evaluate


@pytest.fixture
def online(monkeypatch):
    """A process where nobody set offline mode (the conftest sets it for every other test);
    every connection attempt is recorded and refused."""
    for var in guards.OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    attempts = []

    def connect(self, address):
        attempts.append(address)
        raise OSError(f"test: no network ({address})")

    monkeypatch.setattr(socket.socket, "connect", connect)
    return attempts


def test_a_dataset_that_is_not_local_is_one_line_and_nothing_is_fetched(
    online, gpt2, tok, tmp_path
):
    y = tmp_path / "arc_not_local.yaml"
    y.write_text(
        json.dumps({"include": str(BUNDLED / "arc/arc_easy.yaml"), "task": "arc_not_local"})
    )
    with pytest.raises(DatasetNotLocalError) as e:
        evaluate(["arc_not_local"], gpt2, tok, include_path=tmp_path, include_defaults=False)
    msg = str(e.value)
    assert online == [] and "\n" not in msg
    assert msg.startswith("arc_not_local: dataset 'allenai/ai2_arc' ('ARC-Easy') is not in the")
    assert f"include: {y}, dataset_path: json and dataset_kwargs: {{data_files: {{test: " in msg
    assert "HF_DATASETS_OFFLINE=0 allows it" in msg
    assert datasets.config.HF_HUB_OFFLINE is False  # the run's setting did not outlive it
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False


def test_a_bundled_task_names_its_bundled_yaml_to_include():
    e = DatasetNotLocalError("arc_easy", "allenai/ai2_arc", "ARC-Easy", ["test", "train"])
    msg = str(e.with_include("arc/arc_easy.yaml"))
    assert "include: arc/arc_easy.yaml, dataset_path: json" in msg
    assert "data_files: {test: FILE.jsonl, train: FILE.jsonl}" in msg


def test_the_users_own_offline_setting_wins(online, monkeypatch):
    with offline_data():
        assert datasets.config.HF_HUB_OFFLINE is True
        assert huggingface_hub.constants.HF_HUB_OFFLINE is True
    assert datasets.config.HF_HUB_OFFLINE is False
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")  # the user asks for downloads
    with offline_data():
        assert datasets.config.HF_HUB_OFFLINE is False
        assert huggingface_hub.constants.HF_HUB_OFFLINE is False
