"""tinyllm.eval.zoo's checkpoints: reading a config (tinyllm folder, one-file checkpoint, Hugging
Face folder) and loading the model through its family, whatever the locale.
"""

import contextlib
import json
import shutil
import sys

import pytest
from zoo_helpers import (  # same folder: pytest puts it on sys.path
    entry_of,
    hf_gpt2,
    manifest_of,
    uniform_bigram,
)

from tinyllm.eval import report_files, zoo
from tinyllm.models import FAMILIES

# ---- dispatch ----------------------------------------------------------------------------------


def test_load_model_dispatches_on_tl_arch(zoo_dir, tmp_path):
    for e in manifest_of(zoo_dir)["entries"]:
        path = zoo_dir / e["checkpoint"]
        config = zoo.read_config(path)
        assert config["tl_arch"] == e["family"]
        assert zoo.kind_of(config) == "lm"
        model = zoo.load_model(path)
        assert isinstance(model, FAMILIES[e["family"]].Model)
    hf_gpt2(tmp_path / "hf")
    assert zoo.read_config(tmp_path / "hf")["tl_arch"] == "hf"
    assert type(zoo.load_model(tmp_path / "hf")).__name__ == "GPT2LMHeadModel"
    assert zoo.kind_of({"tl_arch": "bigram", "tl_head": {"n_classes": 2}}) == "classifier"
    with pytest.raises(zoo.UnknownFamilyError, match="'mystery'"):
        zoo.kind_of({"tl_arch": "mystery"})
    with pytest.raises(FileNotFoundError, match="nowhere"):
        zoo.load_model(tmp_path / "nowhere")


@pytest.mark.skipif("ngram" not in FAMILIES, reason="ngram family not registered")
def test_single_file_checkpoint_reads_its_arch_from_metadata(zoo_dir):
    path = zoo_dir / entry_of(zoo_dir, "ngram")["checkpoint"]
    assert path.is_file() and path.suffix == ".safetensors"
    assert zoo.read_config(path)["tl_arch"] == "ngram"
    assert isinstance(zoo.load_model(path), FAMILIES["ngram"].Model)


def test_read_config_of_each_kind_of_checkpoint(zoo_dir, tmp_path):
    from tinyllm.checkpoint import CheckpointError

    if "ngram" in FAMILIES:  # one file: its metadata
        path = zoo_dir / entry_of(zoo_dir, "ngram")["checkpoint"]
        cfg = zoo.read_config(path)
        assert set(cfg) == {"tl_arch", "format_version", "metadata"}
        assert cfg["format_version"] == 1 and cfg["metadata"]["tl_arch"] == "ngram"
    hf_gpt2(tmp_path / "hf")
    hf_doc = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert zoo.read_config(tmp_path / "hf") == {
        "tl_arch": "hf",
        "format_version": 1,
        "config": hf_doc,
    }
    # a tinyllm config that also carries a model_type is still tinyllm's
    shutil.copytree(zoo_dir / "models" / "bigram", tmp_path / "tl")
    doc = json.loads((tmp_path / "tl" / "config.json").read_text())
    (tmp_path / "tl" / "config.json").write_text(json.dumps(doc | {"model_type": "gpt2"}))
    assert zoo.read_config(tmp_path / "tl")["tl_arch"] == "bigram"
    # an unreadable config.json: the checkpoint reader's error, naming the file
    (tmp_path / "tl" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config.json: expected valid JSON"):
        zoo.read_config(tmp_path / "tl")
    (tmp_path / "tl" / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config.json: missing"):
        zoo.read_config(tmp_path / "tl")


@contextlib.contextmanager
def ascii_locale():
    """LC_CTYPE "C" for the block: Python's default text encoding becomes ASCII, as on a system
    whose locale is not UTF-8 (a file opened without an explicit encoding then fails on "é")."""
    import locale

    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode ignores the locale")
    old = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        assert locale.getencoding().lower() in ("ascii", "ansi_x3.4-1968")
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, old)


def test_configs_and_reports_are_read_as_utf8_whatever_the_locale(tmp_path):
    hf_gpt2(tmp_path / "hf")
    doc = json.loads((tmp_path / "hf" / "config.json").read_text(encoding="utf-8"))
    doc["_name_or_path"] = "modèle-é"
    text = json.dumps(doc, ensure_ascii=False)
    (tmp_path / "hf" / "config.json").write_text(text, encoding="utf-8")
    entry = uniform_bigram(tmp_path)
    row = zoo.error_row(entry, ValueError("entrée refusée"))
    report = zoo.build_run_report({"entries": [entry]}, [row], seed=0)
    out = tmp_path / "report.json"
    out.write_text(json.dumps(report, ensure_ascii=False), encoding="utf-8")  # another writer
    with ascii_locale():
        cfg = zoo.read_config(tmp_path / "hf")
        back = report_files.read_report(out)
    assert cfg["tl_arch"] == "hf" and cfg["config"]["_name_or_path"] == "modèle-é"
    assert back.rows[0].error.message == "entrée refusée"
