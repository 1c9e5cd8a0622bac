"""Offline lm-eval fixtures: a BPE tokenizer trained on the lee text, a random-weight GPT-2, and
local YAMLs that include lm-eval's REAL bundled task configs, overriding only ``dataset_path:
json`` and ``dataset_kwargs.data_files`` (a few documents in each dataset's own schema)."""

from __future__ import annotations

import os
import tempfile

# datasets reads these at import: never reach a hub, cache in a private folder
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="tl-lmeval-ds-"))

import pytest  # noqa: E402

pytest.importorskip("lm_eval", reason="lm-eval is in the dev extra (pip install -e '.[dev]')")

import lmeval_helpers as H  # noqa: E402


@pytest.fixture(scope="session")
def tok():
    return H.bpe_tokenizer()


@pytest.fixture(scope="session")
def gpt2(tok):
    return H.tiny_gpt2(len(tok), tok.eos_token_id)


@pytest.fixture(scope="session")
def task_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("lmeval_tasks")
    H.write_tasks(d)
    return d
