"""The checkpoint folder and one-file formats (formats/checkpoint.md)."""

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tinyllm.checkpoint import (
    CheckpointError,
    expected_from,
    load_single,
    load_tensors,
    read_config,
    read_single_metadata,
    save_checkpoint,
    save_single,
)


def _tensors():
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(3, 4, generator=g), "b": torch.zeros(4), "ids": torch.arange(5)}


def _save(tmp_path, **kw):
    return save_checkpoint(tmp_path / "ck", "bigram", {"k": 0.5}, _tensors(), **kw)


def test_round_trip(tmp_path):
    d = _save(tmp_path, extra={"tl_head": "sentiment"})
    cfg = read_config(d, known_archs=["bigram", "gpt"])
    assert cfg["tl_arch"] == "bigram"
    assert cfg["format_version"] == 1
    assert cfg["config"] == {"k": 0.5}
    assert cfg["tokenizer"] == {"type": "byte", "vocab_size": 256}
    assert cfg["tl_head"] == "sentiment"
    got = load_tensors(d, expected_from(_tensors()))
    for k, v in _tensors().items():
        assert torch.equal(got[k], v)
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors"]


def test_shared_storage_is_saved(tmp_path):
    w = torch.randn(4, 4)
    d = save_checkpoint(tmp_path / "tied", "gpt", {}, {"a": w, "b": w, "c": w.t()})
    got = load_tensors(d)
    assert torch.equal(got["a"], got["b"]) and torch.equal(got["c"], w.t())


def test_missing_folder_and_files(tmp_path):
    with pytest.raises(CheckpointError, match=r"nope: checkpoint not found"):
        read_config(tmp_path / "nope")
    d = _save(tmp_path)
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors: missing"):
        load_tensors(d)
    (d / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: missing"):
        read_config(d)


def test_malformed_json_names_file(tmp_path):
    d = _save(tmp_path)
    (d / "config.json").write_text('{"tl_arch": "bigram",')
    with pytest.raises(CheckpointError, match=r"config\.json: expected valid JSON"):
        read_config(d)
    (d / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="expected a JSON object, got list"):
        read_config(d)


def test_missing_unknown_arch_and_version(tmp_path):
    d = _save(tmp_path)
    doc = json.loads((d / "config.json").read_text())
    del doc["tl_arch"]
    (d / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="expected a string 'tl_arch'.*got None"):
        read_config(d)
    doc["tl_arch"] = "lstm9000"
    (d / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=r"unknown tl_arch 'lstm9000'; expected one of \['b"):
        read_config(d, known_archs=["bigram", "gpt"])
    doc["tl_arch"], doc["format_version"] = "bigram", 2
    (d / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="expected format_version 1, got 2"):
        read_config(d)


def test_wrong_shape_dtype_names_and_nonfinite(tmp_path):
    d = _save(tmp_path)
    exp = expected_from(_tensors())
    bad = dict(exp, w=((4, 3), torch.float32))
    with pytest.raises(CheckpointError, match=r"tensor 'w': expected shape \[4, 3\] torch.float32"):
        load_tensors(d, bad)
    bad = dict(exp, b=((4,), torch.float64))
    with pytest.raises(CheckpointError, match="expected shape .4. torch.float64, got .4. torch.fl"):
        load_tensors(d, bad)
    with pytest.raises(CheckpointError, match=r"missing \['extra'\]"):
        load_tensors(d, dict(exp, extra=((1,), torch.float32)))
    t = _tensors()
    t["w"][1, 2] = float("nan")
    save_file(t, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor 'w': expected finite"):
        load_tensors(d, exp)


def test_corrupt_safetensors_names_file(tmp_path):
    d = _save(tmp_path)
    (d / "model.safetensors").write_bytes(b"\x00garbage" * 3)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: expected a readable safetens"):
        load_tensors(d)


def test_single_file_checkpoint(tmp_path):
    p = save_single(tmp_path / "kn.safetensors", "ngram", _tensors(), {"order": 5, "d1": 0.7})
    meta = read_single_metadata(p)
    assert meta["tl_arch"] == "ngram" and meta["order"] == "5" and meta["format_version"] == "1"
    meta2, tensors = load_single(p)
    assert meta2 == meta and torch.equal(tensors["w"], _tensors()["w"])
    save_file(_tensors(), str(tmp_path / "plain.safetensors"), metadata={"x": "1"})
    with pytest.raises(CheckpointError, match="expected metadata key 'tl_arch'"):
        read_single_metadata(tmp_path / "plain.safetensors")
    with pytest.raises(CheckpointError, match="not found"):
        read_single_metadata(tmp_path / "none.safetensors")


def test_no_pickle_anywhere_in_the_project():
    root = Path(__file__).resolve().parents[1]
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    me = Path(__file__).name
    # loading is what executes code: torch.load, pickle, and np.load with allow_pickle=True
    # (a test may *write* a pickled .npy to check that it is refused)
    banned = [
        re.compile(r"torch\.load\("),
        re.compile(r"import\s+(c|cloud)?pickle|from\s+(c|cloud)?pickle\s+import"),
        re.compile(r"pickle\.loads?\("),
        re.compile(r"np\.load\([^)]*allow_pickle\s*=\s*True"),
    ]
    hits = [
        f"{f}: {b.pattern}"
        for f in files
        if Path(f).name != me
        for b in banned
        if b.search((root / f).read_text(encoding="utf-8"))
    ]
    assert hits == []


def test_read_family_config_refuses_unknown_keys_naming_the_file(tmp_path):
    from tinyllm.checkpoint import read_family_config
    from tinyllm.models import bigram

    d = save_checkpoint(tmp_path / "b", "bigram", {"k": 0.25}, _tensors())
    assert read_family_config(d, "bigram", bigram.Config) == bigram.Config(k=0.25)
    save_checkpoint(d, "bigram", {"k": 0.25, "kk": 1}, _tensors())
    with pytest.raises(CheckpointError, match=r"b/config\.json: invalid bigram config: .*kk"):
        read_family_config(d, "bigram", bigram.Config)
    with pytest.raises(CheckpointError, match="unknown tl_arch 'bigram'"):
        read_family_config(d, "gpt", bigram.Config)
