"""Untrusted files in and out: the zoo's report, token files, checkpoints and the demo data.

Writers use fresh random temporary names (tinyllm.safeio), so a planted ``<file>.tmp`` link is
never followed and the outputs are regular files; the zoo's report refuses an ``items`` folder
that is a link. Readers refuse a FIFO or a device at once, saying what it is (never "not found",
never a hang); a negative token id names its file; a checkpoint whose config.json declares an
absurd size is a CheckpointError naming the file and key, not an allocation; a Hugging Face
folder with only ``pytorch_model.bin`` is refused and never unpickled.
"""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
import torch
from fs_helpers import within
from safetensors.torch import load_file
from typer.testing import CliRunner

from tinyllm import checkpoint, data, safeio
from tinyllm.checkpoint import CheckpointError
from tinyllm.cli import app
from tinyllm.eval import report_files, zoo
from tinyllm.models import FAMILIES, gpt, hf
from tinyllm.tokens import TokenFileError, read_header, read_tokens, write_tokens

TEXT = b"The zoo's unit: eight bits per byte, exactly."


def _special(kind: str, path) -> None:
    """A FIFO or a character device (major 1, minor 3: what /dev/null is) in the test's folder."""
    if kind == "fifo":
        os.mkfifo(path)
        return
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a character device needs root")


KINDS = [("fifo", "a FIFO"), ("device", "a character device")]


def _victim(tmp_path, name="victim.txt"):
    v = tmp_path / name
    v.write_text("keep me")
    return v


def _regular(path) -> bool:
    return stat.S_ISREG(os.lstat(path).st_mode)


def _uniform_bigram(d) -> dict:
    """A real (all-zero, uniform) bigram checkpoint and a token file in ``d``: its entry."""
    bigram = FAMILIES["bigram"]
    bigram.save(bigram.Model(bigram.Config()), d / "uniform")
    write_tokens(d / "val.tok", np.frombuffer(TEXT, dtype=np.uint8))
    return {"name": "uni", "family": "bigram", "checkpoint": "uniform", "data": "val.tok"}


def _tiny_gpt(path) -> gpt.Model:
    torch.manual_seed(0)
    m = gpt.Model(gpt.Config(block_size=8, n_layer=1, n_head=1, n_embd=8))
    gpt.save(m, path)
    return m


# ---- the zoo's report never follows a planted link -------------------------------------


def test_write_report_does_not_follow_planted_tmp_links(tmp_path):
    entry = _uniform_bigram(tmp_path)
    out = tmp_path / "out"
    (out / "items").mkdir(parents=True)
    v1, v2 = _victim(tmp_path, "v1.txt"), _victim(tmp_path, "v2.txt")
    os.symlink(v1, out / "report.json.tmp")
    os.symlink(v2, out / "items" / "uni.npy.tmp")
    report = zoo.run_zoo({"suite": "zoo", "entries": [entry]}, base_dir=tmp_path)
    path = report_files.write_report(report, out / "report.json")
    assert v1.read_text() == v2.read_text() == "keep me"
    assert _regular(out / "report.json") and _regular(out / "items" / "uni.npy")
    back = report_files.read_report(path)
    assert back.rows[0].value == pytest.approx(8.0, abs=1e-12)
    items = report_files.load_items(path, back.rows[0])
    np.testing.assert_allclose(items, np.full(len(TEXT) - 1, np.log(256.0)), rtol=1e-12)
    assert os.path.islink(out / "report.json.tmp")  # left alone, never renamed into place


def test_cli_eval_suite_zoo_does_not_follow_planted_tmp_links(tmp_path):
    entry = _uniform_bigram(tmp_path)
    (tmp_path / "zoo.yaml").write_text(json.dumps({"suite": "zoo", "entries": [entry]}))
    out = tmp_path / "out"
    (out / "items").mkdir(parents=True)
    v1, v2 = _victim(tmp_path, "v1.txt"), _victim(tmp_path, "v2.txt")
    os.symlink(v1, out / "report.json.tmp")
    os.symlink(v2, out / "items" / "uni.npy.tmp")
    args = ["eval", "--suite", "zoo", "--manifest", str(tmp_path / "zoo.yaml")]
    r = CliRunner().invoke(app, [*args, "--out", str(out / "report.json"), "--quiet"])
    assert r.exit_code == 0, r.output
    assert v1.read_text() == v2.read_text() == "keep me"
    assert _regular(out / "report.json") and _regular(out / "items" / "uni.npy")
    assert json.loads((out / "report.json").read_text())["rows"][0]["status"] == "ok"


def test_write_report_refuses_an_items_folder_that_is_a_link(tmp_path):
    entry = _uniform_bigram(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(elsewhere, out / "items")
    report = zoo.run_zoo({"suite": "zoo", "entries": [entry]}, base_dir=tmp_path)
    with pytest.raises(safeio.UnsafePathError) as e:
        report_files.write_report(report, out / "report.json")
    assert str(e.value) == f"{out / 'items'}: expected a folder, got a symbolic link"
    assert os.listdir(elsewhere) == [] and not (out / "report.json").exists()


@pytest.mark.parametrize("kind, got", KINDS)
def test_write_report_refuses_a_special_report_path_before_writing(tmp_path, kind, got):
    entry = _uniform_bigram(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    _special(kind, out / "report.json")
    report = zoo.run_zoo({"suite": "zoo", "entries": [entry]}, base_dir=tmp_path)
    with within(10), pytest.raises(safeio.UnsafePathError) as e:
        report_files.write_report(report, out / "report.json")
    want = f"report {out / 'report.json'}: expected a regular file or a new path, got {got}"
    assert str(e.value) == want
    assert os.listdir(out) == ["report.json"]  # no items/ either


def test_score_entry_items_dir_does_not_follow_a_planted_tmp_link(tmp_path):
    entry = _uniform_bigram(tmp_path)
    items = tmp_path / "items"
    items.mkdir()
    v = _victim(tmp_path)
    os.symlink(v, items / "uni.npy.tmp")
    row = zoo.score_entry(entry, base_dir=tmp_path, items_dir=items)
    assert row["status"] == "ok" and v.read_text() == "keep me"
    assert _regular(items / "uni.npy")
    assert np.load(items / "uni.npy", allow_pickle=False).shape == (len(TEXT) - 1,)


# ---- every other writer with a fixed temporary name ------------------------------------


def _write_tokens(d):
    write_tokens(d / "t.tok", np.arange(5, dtype=np.uint8))
    return {"t.tok": lambda p: read_tokens(p).tolist() == [0, 1, 2, 3, 4]}


def _save_checkpoint(d):
    _tiny_gpt(d / "ck")
    ok = {
        "ck/model.safetensors": lambda p: "wte.weight" in load_file(str(p)),
        "ck/config.json": lambda p: json.loads(p.read_text())["tl_arch"] == "gpt",
    }
    return ok


def _save_single(d):
    checkpoint.save_single(d / "one.safetensors", "x", {"w": torch.ones(2)}, {"k": 1})
    return {"one.safetensors": lambda p: checkpoint.read_single_metadata(p)["k"] == "1"}


def _write_rows(d):
    data.write_rows(d / "rows.jsonl", [data.Row("val", "a b", "pos")])
    return {"rows.jsonl": lambda p: data.read_rows(p) == [data.Row("val", "a b", "pos")]}


def _write_pairs(d):
    data.write_pairs(d / "pairs.jsonl", [("one", "un")])
    return {"pairs.jsonl": lambda p: json.loads(p.read_text()) == {"src": "one", "tgt": "un"}}


def _write_word_pairs(d):
    data.write_word_pairs(d / "wp.txt", [("cat", "dog", 7.5)], source="test")
    return {"wp.txt": lambda p: p.read_text() == "# test\ncat dog 7.5\n"}


def _wordsim_files(d):
    data.wordsim_files(d)
    n = len(data.lee_split()[0])
    return {
        "wordsim_train.txt": lambda p: len(data.read_wordsim_train(p)) == n,
        "wordsim353.txt": lambda p: p.read_text().startswith("# from gensim"),
    }


WRITERS = {
    "write_tokens": (_write_tokens, ["t.tok"]),
    "save_checkpoint": (_save_checkpoint, ["ck/model.safetensors", "ck/config.json"]),
    "save_single": (_save_single, ["one.safetensors"]),
    "write_rows": (_write_rows, ["rows.jsonl"]),
    "write_pairs": (_write_pairs, ["pairs.jsonl"]),
    "write_word_pairs": (_write_word_pairs, ["wp.txt"]),
    "wordsim_files": (_wordsim_files, ["wordsim_train.txt", "wordsim353.txt"]),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_writers_do_not_follow_planted_tmp_links(tmp_path, writer):
    fn, outputs = WRITERS[writer]
    victims = {}
    for rel in outputs:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        victims[rel] = _victim(tmp_path, f"victim-{len(victims)}.txt")
        os.symlink(victims[rel], tmp_path / f"{rel}.tmp")
    checks = fn(tmp_path)
    for rel in outputs:
        assert victims[rel].read_text() == "keep me", rel
        assert _regular(tmp_path / rel), rel
        assert os.path.islink(tmp_path / f"{rel}.tmp"), rel
    for rel, ok in checks.items():
        assert ok(tmp_path / rel), rel


@pytest.mark.parametrize("kind, got", KINDS)
def test_write_tokens_refuses_a_special_target(tmp_path, kind, got):
    p = tmp_path / "t.tok"
    _special(kind, p)
    with pytest.raises(safeio.UnsafePathError) as e:
        write_tokens(p, np.arange(3, dtype=np.uint8))
    assert str(e.value) == f"token file {p}: expected a regular file or a new path, got {got}"
    assert safeio.path_kind(p) == got


def test_save_checkpoint_refuses_a_folder_that_is_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / "ck")
    with pytest.raises(safeio.UnsafePathError, match="expected a folder, got a symbolic link"):
        _tiny_gpt(tmp_path / "ck")
    assert os.listdir(elsewhere) == []


# ---- Hugging Face weights are safetensors only --------------------------------------


def _hf_bin_only(d) -> None:
    """A GPT-2 folder whose weights are only ``pytorch_model.bin`` (a pickle)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=256, n_positions=16, n_embd=8, n_layer=1, n_head=1)
    GPT2LMHeadModel(cfg).save_pretrained(d)
    sd = load_file(str(d / "model.safetensors"))
    torch.save(sd, d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()


@pytest.fixture
def torch_load_calls(monkeypatch):
    """Every call of torch.load (the library's unpickler) while the test runs."""
    calls = []
    real = torch.load

    def spy(*args, **kwargs):
        calls.append(args[:1])
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    return calls


def test_zoo_refuses_a_hf_folder_with_only_pytorch_model_bin(tmp_path, torch_load_calls):
    _hf_bin_only(tmp_path / "hf")
    write_tokens(tmp_path / "val.tok", np.frombuffer(TEXT, dtype=np.uint8))
    entry = {"name": "hf", "family": "hf", "checkpoint": "hf", "data": "val.tok"}
    row = zoo.score_entry(entry, base_dir=tmp_path)
    assert row["status"] == "error"
    assert row["error"] == {
        "type": "CheckpointError",
        "message": f"{tmp_path / 'hf'}: expected Hugging Face weights in model.safetensors "
        "(safetensors; tinyllm never unpickles weights), got only pytorch_model.bin",
    }
    assert not zoo.is_transient(CheckpointError("x"))  # a workflow does not retry it
    assert torch_load_calls == []


def test_load_hf_gpt2_refuses_a_folder_with_only_pytorch_model_bin(tmp_path, torch_load_calls):
    _hf_bin_only(tmp_path / "hf")
    with pytest.raises(CheckpointError, match="got only pytorch_model.bin"):
        hf.load_hf_gpt2(tmp_path / "hf")
    assert torch_load_calls == []


# ---- a negative token id names its file -------------------------------------------


def _negative_tokens(p) -> None:
    write_tokens(p, np.array([1, 2, 3, 4, 5, 6], dtype=np.int64), dtype="int64")
    raw = bytearray(p.read_bytes())
    raw[32 + 8 * 3 : 32 + 8 * 4] = (-7).to_bytes(8, "little", signed=True)  # id 3 -> -7
    p.write_bytes(bytes(raw))


def test_a_negative_token_id_is_reported_with_the_file_name(tmp_path):
    p = tmp_path / "neg.tok"
    _negative_tokens(p)
    with pytest.raises(TokenFileError) as e:
        read_tokens(p)
    assert str(e.value) == (
        f"{p}: expected non-negative token ids, got -7 (first negative id at index 3)"
    )
    _tiny_gpt(tmp_path / "g")
    r = CliRunner().invoke(app, ["eval", "ppl", "--model", str(tmp_path / "g"), "--data", str(p)])
    assert r.exit_code == 2 and f"{p}: expected non-negative token ids" in r.output


def test_int64_ids_are_read_unchanged(tmp_path):
    p = write_tokens(tmp_path / "big.tok", np.array([0, 2**40, 5], dtype=np.int64))
    assert read_tokens(p).tolist() == [0, 2**40, 5]


# ---- absurd sizes in config.json ---------------------------------------------------


@pytest.mark.parametrize(
    "key, value, want",
    [
        ("block_size", 10**15, "expected 8 (wpe.weight in model.safetensors is [8, 8])"),
        ("vocab_size", 10**15, "expected 256 (wte.weight in model.safetensors is [256, 8])"),
        ("n_embd", 10**15, "expected 8 (wte.weight in model.safetensors is [256, 8])"),
        ("n_layer", 10**9, "expected 1 (the blocks h.* in model.safetensors)"),
    ],
)
def test_an_absurd_size_in_config_json_is_a_clear_error(tmp_path, key, value, want):
    _tiny_gpt(tmp_path / "g")
    cfg_path = tmp_path / "g" / "config.json"
    doc = json.loads(cfg_path.read_text())
    doc["config"][key] = value
    cfg_path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError) as e:
        gpt.load(tmp_path / "g")
    assert str(e.value) == f"{cfg_path}: {key}: {want}, got {value}"


def test_a_float_size_in_config_json_is_refused_by_the_config(tmp_path):
    _tiny_gpt(tmp_path / "g")
    cfg_path = tmp_path / "g" / "config.json"
    cfg_path.write_text(cfg_path.read_text().replace('"block_size": 8', '"block_size": 1e15'))
    with pytest.raises(
        CheckpointError, match=r"block_size: expected a positive int, got 1000000000000000\.0$"
    ):
        gpt.load(tmp_path / "g")


def test_tensor_header_reads_shapes_without_the_data(tmp_path):
    _tiny_gpt(tmp_path / "g")
    h = checkpoint.tensor_header(tmp_path / "g" / "model.safetensors")
    assert h["wpe.weight"] == ((8, 8), "F32") and h["wte.weight"] == ((256, 8), "F32")


# ---- FIFOs and devices as inputs ---------------------------------------------------


@pytest.mark.parametrize("kind, got", KINDS)
def test_a_special_token_file_says_what_it_is(tmp_path, kind, got):
    p = tmp_path / "val.tok"
    _special(kind, p)
    for read in (read_tokens, read_header):
        with within(10), pytest.raises(TokenFileError) as e:
            read(p)
        assert str(e.value) == f"{p}: token file: expected a regular file, got {got}"


@pytest.mark.parametrize("kind, got", KINDS)
def test_a_special_data_file_is_an_error_row_saying_what_it_is(tmp_path, kind, got):
    entry = _uniform_bigram(tmp_path)
    _special(kind, tmp_path / "special.tok")
    with within(20):
        row = zoo.score_entry({**entry, "data": "special.tok"}, base_dir=tmp_path)
    assert row["status"] == "error"
    assert row["error"]["message"] == (
        f"{tmp_path / 'special.tok'}: data file: expected a regular file, got {got} (entry 'uni')"
    )
    assert not zoo.is_transient(safeio.UnsafePathError("x"))


@pytest.mark.parametrize("kind, got", KINDS)
def test_a_special_checkpoint_is_an_error_row_saying_what_it_is(tmp_path, kind, got):
    entry = _uniform_bigram(tmp_path)
    _special(kind, tmp_path / "special.safetensors")
    with within(20):
        row = zoo.score_entry({**entry, "checkpoint": "special.safetensors"}, base_dir=tmp_path)
    assert row["error"]["message"] == (
        f"{tmp_path / 'special.safetensors'}: checkpoint: expected a folder or a regular file, "
        f"got {got} (entry 'uni')"
    )


@pytest.mark.parametrize("kind, got", KINDS)
def test_a_special_config_json_says_what_it_is(tmp_path, kind, got):
    _tiny_gpt(tmp_path / "g")
    cfg = tmp_path / "g" / "config.json"
    cfg.unlink()
    _special(kind, cfg)
    with within(10), pytest.raises(CheckpointError) as e:
        zoo.read_config(tmp_path / "g")
    assert str(e.value) == f"{cfg}: expected a regular file, got {got}"
    with within(10), pytest.raises(CheckpointError, match=f"got {got}"):
        gpt.load(tmp_path / "g")


@pytest.mark.parametrize("kind, got", KINDS)
def test_special_weights_say_what_they_are(tmp_path, kind, got):
    _tiny_gpt(tmp_path / "g")
    w = tmp_path / "g" / "model.safetensors"
    w.unlink()
    _special(kind, w)
    with within(10), pytest.raises(CheckpointError) as e:
        gpt.load(tmp_path / "g")
    assert str(e.value) == f"{w}: expected a regular file, got {got}"


@pytest.mark.parametrize("kind, got", KINDS)
def test_cli_eval_ppl_on_a_special_data_file_says_what_it_is(tmp_path, kind, got):
    _tiny_gpt(tmp_path / "g")
    p = tmp_path / "val.tok"
    _special(kind, p)
    with within(30):
        r = CliRunner().invoke(
            app, ["eval", "ppl", "--model", str(tmp_path / "g"), "--data", str(p)]
        )
    assert r.exit_code == 2, r.output
    assert f"expected a regular file, got {got}" in " ".join(r.output.split())


@pytest.mark.parametrize("kind, got", KINDS)
@pytest.mark.parametrize("reader", ["read_rows", "read_wordsim_train", "lee_documents"])
def test_data_readers_refuse_special_files_at_once(tmp_path, kind, got, reader):
    p = tmp_path / "rows.jsonl"
    _special(kind, p)
    with within(10), pytest.raises(ValueError) as e:
        getattr(data, reader)(p)
    assert str(e.value).endswith(f"expected a regular file, got {got}")
