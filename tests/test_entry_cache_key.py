"""The EvalSuite's cache key of one entry's score (tinyllm_suite.eval_tasks.entry_cache_key):
it follows every byte that defines the score (checkpoint, data, an lmeval task's files), the
seed and the code of the library and of the flow's package, and there is no key (no caching)
for an entry whose files are missing or refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is in the dev extra (pip install -e '.[dev]')")

from tinyllm.data import lee_split  # noqa: E402
from tinyllm.eval.lmeval import demo_task  # noqa: E402
from tinyllm_suite import eval_tasks  # noqa: E402


def lm_entry(**kw) -> dict:
    return {"name": "g", "family": "gpt", "checkpoint": "gpt", "data": "val.bin"} | kw


def lmeval_entry() -> dict:
    return lm_entry(kind="lmeval", data="task/lee_cloze.yaml", options={"limit": 2})


def key(entry: dict, base: Path, seed: int = 0) -> str | None:
    return eval_tasks.entry_cache_key(None, {"entry": entry, "base_dir": str(base), "seed": seed})


@pytest.fixture
def base(tmp_path) -> Path:
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "val.bin").write_bytes(b"some val text")
    train, val = lee_split()
    demo_task.write_cloze_task(tmp_path / "task", train[:1], val[:2])
    return tmp_path


def test_the_key_follows_the_bytes_and_the_seed_not_the_call(base):
    k = key(lm_entry(), base)
    assert k is not None and k.startswith("tinyllm-entry-")
    assert key(lm_entry(), base) == k
    assert key(lm_entry(), base, seed=1) != k
    (base / "val.bin").write_bytes(b"other val text")
    k2 = key(lm_entry(), base)
    assert k2 != k
    (base / "gpt" / "model.safetensors").write_bytes(b"retrained")
    assert key(lm_entry(), base) not in (k, k2)


def test_an_lmeval_key_follows_the_task_data_files_not_only_its_yaml(base):
    k = key(lmeval_entry(), base)
    assert k is not None
    val = base / "task" / demo_task.SPLITS["validation"]
    rows = val.read_text(encoding="utf-8").splitlines()
    val.write_text("\n".join(reversed(rows)) + "\n", encoding="utf-8")  # same YAML, new data
    assert key(lmeval_entry(), base) != k


def test_a_moved_task_folder_keeps_its_key(base, tmp_path_factory):
    k = key(lmeval_entry(), base)
    moved = tmp_path_factory.mktemp("moved")
    for name in ("gpt", "task"):
        shutil.copytree(base / name, moved / name)
    assert key(lmeval_entry(), moved) == k


def test_no_key_for_missing_or_refused_files(base):
    assert key(lm_entry(data="nope.bin"), base) is None
    assert key(lm_entry(checkpoint="nope"), base) is None
    y = base / "task" / "lee_cloze.yaml"
    doc = json.loads(y.read_text(encoding="utf-8"))
    doc["dataset_kwargs"]["data_files"]["validation"] = "/etc/passwd"  # leaves the folder
    y.write_text(json.dumps(doc), encoding="utf-8")
    assert key(lmeval_entry(), base) is None


def test_the_code_version_covers_the_flow_package(tmp_path, monkeypatch):
    suite = Path(eval_tasks.__file__).resolve().parent
    copy = tmp_path / "tinyllm_suite"
    shutil.copytree(suite, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(eval_tasks, "__file__", str(copy / "eval_tasks.py"))
    v = eval_tasks._code_version()
    assert eval_tasks._code_version() == v
    (copy / "eval_suite.py").write_text(
        (copy / "eval_suite.py").read_text(encoding="utf-8") + "\n# another result shape\n",
        encoding="utf-8",
    )
    assert eval_tasks._code_version() != v
