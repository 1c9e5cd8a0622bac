"""tinyllm.eval.zoo: manifest -> rows -> report, against the families' own NLLs and the stats module.

Checkpoints are real: each LM family in FAMILIES is trained for a few steps on real text (gensim's
lee_background.cor) and saved through its own ``save``; the Hugging Face model is a random-weight
``GPT2LMHeadModel`` saved with ``save_pretrained`` (no download).
"""

import contextlib
import dataclasses
import hashlib
import inspect
import json
import math
import random
import shutil
import sys
import time

import numpy as np
import pytest
import torch
import yaml
from gensim.test.utils import datapath
from typer.testing import CliRunner

from tinyllm import stats
from tinyllm.eval import zoo
from tinyllm.models import FAMILIES
from tinyllm.report import Entry, ManifestError, ReportSchemaError, sha256_path, validate_report
from tinyllm.tokens import read_tokens, write_tokens

LN2 = math.log(2.0)
# the lm families trained here (hf, a Hugging Face folder, has its own tests below)
LM_FAMILIES = sorted(a for a, m in FAMILIES.items() if m.KIND == "lm" and hasattr(m, "train"))
# small shapes for whichever of these fields a family's Config has
SMALL = {
    "block_size": 32,
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 16,
    "hidden": 16,
    "emb_dim": 8,
    "seq_len": 16,
    "bptt": 16,
    "batch_size": 4,
    "context": 3,
    "order": 3,
}
WINDOW = {"ctx_len": 16, "stride": 8}  # for families scored in strided windows (gpt, hf)
VAL_BYTES = 1500


def _strided(fam) -> bool:
    params = inspect.signature(fam.token_nlls).parameters
    return "ctx_len" in params and "stride" in params


def _build(arch: str, path, train_ids: np.ndarray):
    """Train ``arch`` briefly on real bytes and save it with the family's own ``save``."""
    fam = FAMILIES[arch]
    names = {f.name for f in dataclasses.fields(fam.Config)}
    cfg = fam.Config(**{k: v for k, v in SMALL.items() if k in names})
    model = fam.train(cfg, train_ids, seed=0, steps=3)
    out = fam.save(model, path)
    if out.is_file():  # one-file checkpoint (ngram): give it its usual suffix
        out = out.rename(out.with_name(out.name + ".safetensors"))
    return out


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    """A folder with train/val token files, one checkpoint per LM family, and their manifest."""
    d = tmp_path_factory.mktemp("zoo")
    text = np.fromfile(datapath("lee_background.cor"), dtype=np.uint8)
    write_tokens(d / "data" / "val.tok", text[-VAL_BYTES:])
    train_ids = text[:20_000]
    entries = []
    for arch in LM_FAMILIES:
        ckpt = _build(arch, d / "models" / arch, train_ids)
        e = {
            "name": arch,
            "family": arch,
            "checkpoint": ckpt.relative_to(d).as_posix(),
            "data": "data/val.tok",
        }
        if _strided(FAMILIES[arch]):
            e["options"] = dict(WINDOW)
        entries.append(e)
    (d / "zoo.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": entries}))
    return d


def _manifest(zoo_dir) -> dict:
    return yaml.safe_load((zoo_dir / "zoo.yaml").read_text())


def _entry(zoo_dir, name: str) -> dict:
    return next(e for e in _manifest(zoo_dir)["entries"] if e["name"] == name)


def _stable(row) -> dict:
    """A row without what legitimately changes between runs (wall time)."""
    r = dict(row if isinstance(row, dict) else row.model_dump(mode="json"))
    r.pop("seconds")
    return r


# ---- each LM family's row is its own token_nlls + the stats module -----------------------------


@pytest.mark.parametrize("arch", LM_FAMILIES)
def test_lm_row_equals_family_token_nlls_and_stats(zoo_dir, tmp_path, arch):
    entry = _entry(zoo_dir, arch)
    row = zoo.score_entry(entry, seed=0, base_dir=zoo_dir, items_dir=tmp_path / "items")
    assert row["status"] == "ok", row["error"]
    fam = FAMILIES[arch]
    ckpt = zoo_dir / entry["checkpoint"]
    ids = read_tokens(zoo_dir / "data" / "val.tok")
    model = fam.load(ckpt)
    nlls = fam.token_nlls(model, ids, **WINDOW) if _strided(fam) else fam.token_nlls(model, ids)
    assert nlls.shape == (VAL_BYTES - 1,)
    # per-item scores: exactly the family's NLLs
    saved = np.load(tmp_path / row["items"], allow_pickle=False)
    assert saved.dtype == np.float64
    np.testing.assert_array_equal(saved, nlls)
    # bpb = sum / (n_bytes ln 2) with n_bytes = scored tokens; Student t ends rescaled
    ci = stats.mean_ci(nlls)
    assert row["metric"] == "bpb" and row["interval"] == "student_t" and row["kind"] == "lm"
    assert row["n"] == VAL_BYTES - 1
    assert row["value"] == pytest.approx(math.fsum(nlls) / (nlls.size * LN2), rel=1e-12)
    assert row["lo"] == pytest.approx(ci.lo / LN2, rel=1e-12)
    assert row["hi"] == pytest.approx(ci.hi / LN2, rel=1e-12)
    assert row["lo"] < row["value"] < row["hi"]
    assert 0.5 < row["value"] < 9.0  # a barely trained byte model is near the uniform 8 bits
    assert row["checkpoint_sha256"] == sha256_path(ckpt)
    data_bytes = (zoo_dir / "data" / "val.tok").read_bytes()
    assert row["data_sha256"] == hashlib.sha256(data_bytes).hexdigest()


def test_uniform_bigram_is_8_bpb_with_zero_width_interval(tmp_path):
    bigram = FAMILIES["bigram"]
    model = bigram.Model(bigram.Config())
    assert not torch.any(model.logits)  # an all-zero table: every byte 1/256
    bigram.save(model, tmp_path / "uniform")
    ids = np.frombuffer(b"The zoo's unit: eight bits per byte, exactly.", dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", ids)
    entry = {"name": "uniform", "family": "bigram", "checkpoint": "uniform", "data": "val.tok"}
    row = zoo.score_entry(entry, seed=0, base_dir=tmp_path)
    assert row["status"] == "ok", row["error"]
    assert row["value"] == pytest.approx(8.0, abs=1e-12)
    assert row["lo"] == row["value"] == row["hi"]
    assert row["n"] == ids.size - 1


# ---- Hugging Face causal LMs -------------------------------------------------------------------


def _hf_gpt2(path, vocab=256, n_positions=64):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=vocab, n_positions=n_positions, n_embd=32, n_layer=2, n_head=2, n_inner=64
    )
    model = GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(path)
    return model


def test_hf_row_matches_nlls_from_the_hf_logits(tmp_path):
    model = _hf_gpt2(tmp_path / "hf")
    ids = np.fromfile(datapath("lee_background.cor"), dtype=np.uint8)[:50]
    write_tokens(tmp_path / "short.tok", ids)
    # 50 tokens < n_positions = 64: one window, so the oracle is one forward pass
    entry = {"name": "hf", "family": "hf", "checkpoint": "hf", "data": "short.tok"}
    row = zoo.score_entry(entry, seed=0, base_dir=tmp_path, items_dir=tmp_path / "items")
    assert row["status"] == "ok", row["error"]
    with torch.no_grad():
        logits = model(torch.from_numpy(ids.astype(np.int64))[None]).logits[0].double()
    oracle = -torch.log_softmax(logits[:-1], -1)[torch.arange(49), ids[1:].astype(np.int64)]
    oracle = oracle.numpy()
    got = np.load(tmp_path / row["items"], allow_pickle=False)
    np.testing.assert_allclose(got, oracle, rtol=0, atol=1e-5)
    assert row["value"] == pytest.approx(oracle.sum() / (49 * LN2), rel=1e-5)


def test_hf_row_uses_the_strided_instrument(tmp_path):
    from tinyllm.eval import lm

    model = _hf_gpt2(tmp_path / "hf")
    ids = np.fromfile(datapath("lee_background.cor"), dtype=np.uint8)[:300]
    write_tokens(tmp_path / "val.tok", ids)
    entry = {
        "name": "hf",
        "family": "hf",
        "checkpoint": "hf",
        "data": "val.tok",
        "options": {"ctx_len": 16, "stride": 5},  # not the default stride ctx_len // 2
    }
    row = zoo.score_entry(entry, seed=0, base_dir=tmp_path, items_dir=tmp_path / "items")
    assert row["status"] == "ok", row["error"]
    expected = lm.token_nlls(model, ids, 16, 5)
    np.testing.assert_allclose(np.load(tmp_path / row["items"]), expected, rtol=0, atol=1e-6)
    assert row["value"] == pytest.approx(lm.summarize_nlls(expected)["bpb"]["value"], rel=1e-9)


def test_hf_model_with_a_small_vocabulary_is_an_error_row(tmp_path):
    _hf_gpt2(tmp_path / "hf", vocab=100)
    write_tokens(tmp_path / "val.tok", np.arange(50, dtype=np.uint8))
    entry = {"name": "tiny-vocab", "family": "hf", "checkpoint": "hf", "data": "val.tok"}
    row = zoo.score_entry(entry, seed=0, base_dir=tmp_path)
    assert row["status"] == "error"
    assert "vocab_size=100" in row["error"]["message"]


@pytest.mark.skipif("gpt" not in FAMILIES, reason="gpt family not registered")
def test_gpt_exported_to_hf_scores_the_same_as_gpt(zoo_dir, tmp_path):
    gpt = FAMILIES["gpt"]
    entry = _entry(zoo_dir, "gpt")
    FAMILIES["hf"].export_hf(gpt.load(zoo_dir / entry["checkpoint"]), tmp_path / "gpt-hf")
    hf_entry = dict(entry, name="gpt-hf", family="hf", checkpoint=str(tmp_path / "gpt-hf"))
    a = zoo.score_entry(entry, seed=0, base_dir=zoo_dir, items_dir=tmp_path / "items")
    b = zoo.score_entry(hf_entry, seed=0, base_dir=zoo_dir, items_dir=tmp_path / "items")
    assert a["status"] == b["status"] == "ok", (a["error"], b["error"])
    np.testing.assert_allclose(
        np.load(tmp_path / b["items"]), np.load(tmp_path / a["items"]), rtol=0, atol=1e-4
    )
    assert b["value"] == pytest.approx(a["value"], rel=1e-5)


# ---- dispatch ----------------------------------------------------------------------------------


def test_load_model_dispatches_on_tl_arch(zoo_dir, tmp_path):
    for e in _manifest(zoo_dir)["entries"]:
        path = zoo_dir / e["checkpoint"]
        config = zoo.read_config(path)
        assert config["tl_arch"] == e["family"]
        assert zoo.kind_of(config) == "lm"
        model = zoo.load_model(path)
        assert isinstance(model, FAMILIES[e["family"]].Model)
    _hf_gpt2(tmp_path / "hf")
    assert zoo.read_config(tmp_path / "hf")["tl_arch"] == "hf"
    assert type(zoo.load_model(tmp_path / "hf")).__name__ == "GPT2LMHeadModel"
    assert zoo.kind_of({"tl_arch": "bigram", "tl_head": {"n_classes": 2}}) == "classifier"
    with pytest.raises(zoo.UnknownFamilyError, match="'mystery'"):
        zoo.kind_of({"tl_arch": "mystery"})
    with pytest.raises(FileNotFoundError, match="nowhere"):
        zoo.load_model(tmp_path / "nowhere")


@pytest.mark.skipif("ngram" not in FAMILIES, reason="ngram family not registered")
def test_single_file_checkpoint_reads_its_arch_from_metadata(zoo_dir):
    path = zoo_dir / _entry(zoo_dir, "ngram")["checkpoint"]
    assert path.is_file() and path.suffix == ".safetensors"
    assert zoo.read_config(path)["tl_arch"] == "ngram"
    assert isinstance(zoo.load_model(path), FAMILIES["ngram"].Model)


# ---- the report --------------------------------------------------------------------------------


def _broken_zoo(zoo_dir, tmp_path) -> dict:
    """The real zoo plus broken entries, copied to ``tmp_path`` (the originals stay intact)."""
    d = tmp_path / "z"
    shutil.copytree(zoo_dir, d)
    doc = _manifest(d)
    # corrupt copies: a folder checkpoint with garbage weights, a truncated one-file checkpoint
    shutil.copytree(d / "models" / "bigram", d / "models" / "bigram-bad")
    (d / "models" / "bigram-bad" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00garbage!")
    broken = [
        {
            "name": "missing",
            "family": "bigram",
            "checkpoint": "models/gone",
            "data": "data/val.tok",
        },
        {"name": "mystery", "family": "mystery", "checkpoint": "models/x", "data": "data/val.tok"},
        {
            "name": "corrupt",
            "family": "bigram",
            "checkpoint": "models/bigram-bad",
            "data": "data/val.tok",
        },
    ]
    if "ngram" in FAMILIES:
        src = d / _entry(d, "ngram")["checkpoint"]
        bad = d / "models" / "ngram-bad.safetensors"
        bad.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
        broken.append(
            {
                "name": "ngram-truncated",
                "family": "ngram",
                "checkpoint": "models/ngram-bad.safetensors",
                "data": "data/val.tok",
            }
        )
    # interleave broken and healthy entries
    entries = doc["entries"]
    for i, b in enumerate(broken):
        entries.insert(min(2 * i + 1, len(entries)), b)
    (d / "zoo.yaml").write_text(yaml.safe_dump(doc))
    return doc


def test_failures_are_rows_and_healthy_rows_are_still_scored(zoo_dir, tmp_path):
    doc = _broken_zoo(zoo_dir, tmp_path)
    report = zoo.run_zoo(tmp_path / "z" / "zoo.yaml", seed=0)
    assert [r.name for r in report.rows] == [e["name"] for e in doc["entries"]]
    rows = {r.name: r for r in report.rows}
    missing = rows["missing"]
    assert missing.status == "error" and missing.value is None
    assert missing.error.type == "FileNotFoundError"
    assert str(tmp_path / "z" / "models" / "gone") in missing.error.message
    assert rows["mystery"].status == "skipped" and rows["mystery"].value is None
    assert "unknown family 'mystery'" in rows["mystery"].reason and rows["mystery"].error is None
    corrupt = rows["corrupt"]
    assert corrupt.status == "error" and corrupt.value is None
    assert "bigram-bad" in corrupt.error.message and "safetensors" in corrupt.error.message
    assert corrupt.checkpoint_sha256 is not None  # the bytes that failed are identified
    if "ngram" in FAMILIES:
        t = rows["ngram-truncated"]
        assert t.status == "error" and "ngram-bad.safetensors" in t.error.message
    for arch in LM_FAMILIES:
        assert rows[arch].status == "ok" and rows[arch].value is not None
    validate_report(report.to_json())
    # the error/skipped rows carry no per-item scores; every ok row does
    assert set(report.item_scores) == set(LM_FAMILIES)


def test_report_validates_is_in_manifest_order_and_records_the_seed(zoo_dir, tmp_path):
    report = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=7, release="r1")
    doc = report.to_json()
    validate_report(doc)
    assert doc["seed"] == 7 and doc["release"] == "r1" and doc["suite"] == "zoo"
    assert [r["name"] for r in doc["rows"]] == [e["name"] for e in _manifest(zoo_dir)["entries"]]
    from tinyllm.report import load_manifest

    assert doc["manifest_sha256"] == load_manifest(zoo_dir / "zoo.yaml").sha256()
    out = zoo.write_report(report, tmp_path / "out" / "report.json")
    on_disk = json.loads(out.read_text())
    assert on_disk == doc
    back = zoo.read_report(out)
    for row in back.rows:
        saved = zoo.load_items(out, row)
        np.testing.assert_array_equal(saved, report.item_scores[row.name])
        assert (tmp_path / "out" / "items" / f"{row.name}.npy").is_file()
    assert not list((tmp_path / "out").rglob("*.tmp"))


def test_same_seed_same_report(zoo_dir):
    a = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=3).to_json()
    b = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=3).to_json()
    for doc in (a, b):
        doc.pop("created_at")
        doc["rows"] = [_stable(r) for r in doc["rows"]]
    assert a == b


def test_shuffled_manifest_gives_the_same_rows(zoo_dir, tmp_path):
    doc = _manifest(zoo_dir)
    random.Random(1).shuffle(doc["entries"])
    doc["entries"].reverse()  # never the original order, even for two entries
    (zoo_dir / "shuffled.yaml").write_text(yaml.safe_dump(doc))
    try:
        a = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=5)
        b = zoo.run_zoo(zoo_dir / "shuffled.yaml", seed=5)
    finally:
        (zoo_dir / "shuffled.yaml").unlink()
    assert [r.name for r in b.rows] == [e["name"] for e in doc["entries"]]
    assert {r.name: _stable(r) for r in a.rows} == {r.name: _stable(r) for r in b.rows}


def test_entry_rng_depends_on_seed_and_name_only():
    draw = [zoo.entry_rng(0, "gpt").random(3) for _ in range(2)]
    np.testing.assert_array_equal(draw[0], draw[1])
    assert not np.array_equal(draw[0], zoo.entry_rng(0, "bigram").random(3))
    assert not np.array_equal(draw[0], zoo.entry_rng(1, "gpt").random(3))
    with pytest.raises(ValueError, match="non-negative"):
        zoo.entry_rng(-1, "gpt")


def test_run_zoo_with_an_rng_records_the_seed_it_drew(zoo_dir):
    a = zoo.run_zoo(zoo_dir / "zoo.yaml", rng=np.random.default_rng(11))
    b = zoo.run_zoo(zoo_dir / "zoo.yaml", rng=np.random.default_rng(11))
    assert a.seed == b.seed == int(np.random.default_rng(11).integers(0, 2**63 - 1))


def test_bad_manifest_is_one_error_before_anything_is_scored(zoo_dir, tmp_path):
    doc = _manifest(zoo_dir)
    doc["entries"].append(dict(doc["entries"][0]))  # duplicate name
    doc["entries"][0]["checkpointt"] = "typo"  # unknown key
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    scored = []
    with pytest.raises(ManifestError) as ei:
        zoo.run_zoo(bad, progress=lambda i, n, row: scored.append(row))
    assert scored == []
    msg = str(ei.value)
    assert str(bad) in msg and "entries.0.checkpointt: unknown key" in msg
    assert "duplicates" in msg


@pytest.mark.parametrize(
    "change, message",
    [
        ({"family": "nplm"}, "expected a 'nplm' checkpoint, got tl_arch 'bigram'"),
        ({"options": {"ctx_len": 16, "stride": 8}}, "not scored in windows"),
        ({"data": "data/nothing.tok"}, "data/nothing.tok: data file not found"),
        ({"data": "data/wide.tok"}, "expected byte ids 0..255"),
        ({"data": "data/one.tok"}, "expected at least 3 tokens"),
    ],
)
def test_entry_problems_are_error_rows(zoo_dir, tmp_path, change, message):
    write_tokens(tmp_path / "data" / "wide.tok", np.array([1, 2, 300, 4], dtype=np.uint16))
    write_tokens(tmp_path / "data" / "one.tok", np.array([1], dtype=np.uint8))
    shutil.copy(zoo_dir / "data" / "val.tok", tmp_path / "data" / "val.tok")
    entry = dict(_entry(zoo_dir, "bigram"), **change)
    entry["checkpoint"] = str(zoo_dir / entry["checkpoint"])  # absolute: kept as it is
    row = zoo.score_entry(entry, seed=0, base_dir=tmp_path)
    assert row["status"] == "error" and row["value"] is None, row
    assert message in row["error"]["message"]


def test_score_entry_accepts_entries_and_keeps_items_only_when_asked(zoo_dir, tmp_path):
    e = Entry.model_validate(_entry(zoo_dir, "bigram"))
    row = zoo.score_entry(e, seed=0, base_dir=zoo_dir)
    assert row["status"] == "ok" and row["items"] is None
    row2 = zoo.score_entry(e, seed=0, base_dir=zoo_dir, items_dir=tmp_path / "items")
    assert row2["items"] == "items/bigram.npy" and (tmp_path / "items" / "bigram.npy").is_file()
    assert _stable(row) | {"items": None} == _stable(row2) | {"items": None}


def test_write_report_refuses_a_report_that_violates_the_schema(zoo_dir, tmp_path):
    doc = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=0).to_json()
    doc["rows"][0]["status"] = "fine"
    out = tmp_path / "report.json"
    with pytest.raises(ReportSchemaError, match="rows/0/status"):
        zoo.write_report(doc, out)
    assert not out.exists() and not (tmp_path / "items").exists()
    # a row naming per-item scores that do not exist is refused too
    good = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=0).to_json()
    with pytest.raises(FileNotFoundError, match="neither given nor found"):
        zoo.write_report(good, out)
    assert not out.exists()


def test_build_report_puts_rows_in_manifest_order(zoo_dir):
    m = _manifest(zoo_dir)
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in reversed(m["entries"])]
    report = zoo.build_report(m, rows, seed=0)
    assert [r.name for r in report.rows] == [e["name"] for e in m["entries"]]
    with pytest.raises(ValueError, match="one row per manifest entry"):
        zoo.build_report(m, rows[:-1], seed=0)


# ---- CLI ---------------------------------------------------------------------------------------


def test_cli_eval_suite_zoo_prints_the_table_and_writes_the_report(zoo_dir, tmp_path):
    from tinyllm.cli import app

    out = tmp_path / "rep" / "report.json"
    args = ["eval", "--suite", "zoo", "--manifest", str(zoo_dir / "zoo.yaml"), "--out", str(out)]
    res = CliRunner().invoke(app, [*args, "--release", "r9"])
    assert res.exit_code == 0, res.output
    for col in ("family", "metric", "value", "95% interval", "status"):
        assert col in res.output
    for arch in LM_FAMILIES:
        assert arch in res.output
    doc = json.loads(out.read_text())
    validate_report(doc)
    assert doc["release"] == "r9" and len(doc["rows"]) == len(LM_FAMILIES)

    res = CliRunner().invoke(app, [*args, "--json", "--seed", "4"])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout[res.stdout.index("{") :])
    assert printed == json.loads(out.read_text()) and printed["seed"] == 4


def test_cli_bad_manifest_exits_2_with_the_problem(tmp_path):
    from tinyllm.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("entries:\n  - name: x\n")
    out = tmp_path / "report.json"
    res = CliRunner().invoke(
        app, ["eval", "--suite", "zoo", "--manifest", str(bad), "--out", str(out)]
    )
    assert res.exit_code == 2
    assert "entries.0.family: required field missing" in res.output
    assert not out.exists()
    res = CliRunner().invoke(app, ["eval", "--suite", "glue", "--manifest", str(bad)])
    assert res.exit_code == 2 and "expected one of ['zoo']" in res.output


def test_the_manifest_that_zoo_build_writes_is_scored(tmp_path):
    from tinyllm.train import MANIFEST_NAME, Recipe, build_zoo

    recipes = {"bigram": Recipe(config={"k": 0.5}), "ngram": Recipe(config={"order": 2})}
    built = build_zoo(tmp_path, progress=False, threads=1, recipes=recipes)
    report = zoo.run_zoo(tmp_path / MANIFEST_NAME, seed=0)
    assert [r.name for r in report.rows] == [name for name, _ in built]
    for r in report.rows:
        assert r.status == "ok", r.error
        assert r.n > 10_000 and 1.0 < r.value < 8.0
    validate_report(report.to_json())


# ---- for the workflow: partial runs and retries ------------------------------------------------


def test_build_run_report_takes_a_subset_in_manifest_order(zoo_dir):
    m = _manifest(zoo_dir)
    names = [e["name"] for e in m["entries"]]
    picked = [e for e in m["entries"] if e["name"] in names[-2:]]
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in reversed(picked)]
    doc = zoo.build_run_report(m, rows, seed=0, release="r2")
    validate_report(doc)
    assert [r["name"] for r in doc["rows"]] == names[-2:] and doc["release"] == "r2"
    with pytest.raises(ValueError, match=r"unknown \['nope'\]"):
        zoo.build_run_report(m, [dict(rows[0], name="nope")], seed=0)
    with pytest.raises(ValueError, match="duplicated"):
        zoo.build_run_report(m, [rows[0], rows[0]], seed=0)


def test_is_transient_separates_retryable_errors_from_deterministic_ones():
    import errno

    from botocore.exceptions import ClientError, EndpointConnectionError

    from tinyllm.checkpoint import CheckpointError

    def client_error(status: int, code: str) -> ClientError:
        meta = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(meta, "GetObject")

    transient = [
        TimeoutError("slow disk"),
        ConnectionResetError("peer"),
        OSError(errno.EIO, "Input/output error"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        client_error(503, "ServiceUnavailable"),
        client_error(400, "SlowDown"),
    ]
    permanent = [
        FileNotFoundError(errno.ENOENT, "gone"),
        FileExistsError(errno.EEXIST, "run file already written"),
        PermissionError(errno.EACCES, "no"),
        OSError(errno.ENAMETOOLONG, "File name too long"),
        client_error(404, "NoSuchKey"),
        CheckpointError("x: expected a readable safetensors file"),
        ValueError("bad config"),
        KeyError("w"),
    ]
    assert [zoo.is_transient(e) for e in transient] == [True] * len(transient)
    assert [zoo.is_transient(e) for e in permanent] == [False] * len(permanent)


def test_deterministic_failures_stay_rows_when_transient_ones_are_raised(zoo_dir):
    long_name = "x" * 300  # a real OSError (ENAMETOOLONG), deterministic: still a row
    for ckpt in ("models/gone", f"models/{long_name}"):
        entry = dict(_entry(zoo_dir, "bigram"), checkpoint=ckpt)
        row, items = zoo.score_entry_items(entry, seed=0, base_dir=zoo_dir, raise_transient=True)
        assert row["status"] == "error" and items is None
        assert row["error"]["type"] in ("FileNotFoundError", "OSError")


# ---- oracles written for mutants that survived `make mutate MODULE=tinyllm/eval/zoo.py` -------


NO_OPTIONS = {"ctx_len": None, "stride": None, "beam": None, "split": None}


def _uniform_bigram(d) -> dict:
    """A uniform bigram checkpoint (every byte 1/256, SPEC.md section 6) and an 18-byte token
    file in ``d``; the entry that scores them (relative paths)."""
    bigram = FAMILIES["bigram"]
    bigram.save(bigram.Model(bigram.Config()), d / "uniform")
    write_tokens(d / "val.tok", np.frombuffer(b"nineteen bytes long", dtype=np.uint8))
    return {"name": "uniform", "family": "bigram", "checkpoint": "uniform", "data": "val.tok"}


def _spy_scorer(calls: list):
    """A scorer for the lm kind whose value is the first draw of the rng it was given, with
    float32 per-item scores: what score_entry does with an entry's rng and items is visible."""
    from tinyllm.stats import Interval

    def score(entry, model, data_path, rng):
        calls.append(entry.name)
        v = float(rng.random())
        items = np.array([v, 1.0 - v], dtype=np.float32)
        return zoo.Scored("bpb", Interval(v, v, v), "student_t", 2, items, {"spy": True})

    return score


def test_uniform_bigram_row_carries_every_field_of_the_row(tmp_path):
    entry = _uniform_bigram(tmp_path)
    t0 = time.perf_counter()
    row = zoo.score_entry(entry, base_dir=tmp_path)
    elapsed = time.perf_counter() - t0
    ln256 = math.log(256.0)
    assert _stable(row) == {
        "name": "uniform",
        "family": "bigram",
        "kind": "lm",
        "metric": "bpb",
        "value": 8.0,
        "lo": 8.0,
        "hi": 8.0,
        "interval": "student_t",
        "n": 18,
        "status": "ok",
        "error": None,
        "reason": None,
        "checkpoint_sha256": sha256_path(tmp_path / "uniform"),
        "data_sha256": sha256_path(tmp_path / "val.tok"),
        "items": None,
        "checkpoint": "uniform",
        "data": "val.tok",
        "options": NO_OPTIONS,
        "details": {
            "n_bytes": 18,
            "sum_nll": pytest.approx(18 * ln256, rel=1e-12),
            "nll": {k: pytest.approx(ln256, rel=1e-12) for k in ("value", "lo", "hi")},
            "ppl": {k: pytest.approx(256.0, rel=1e-12) for k in ("value", "lo", "hi")},
        },
    }
    assert 0.0 < row["seconds"] <= elapsed  # wall time of this entry, not a clock reading


def test_error_row_of_an_entry_that_failed_elsewhere():
    entry = {"name": "b", "family": "bigram", "checkpoint": "m/b", "data": "d.tok"}
    exc = TimeoutError("store did not answer in 30 s")
    row = zoo.error_row(entry, exc, seconds=2, checkpoint_sha256="a" * 64, data_sha256="b" * 64)
    want = {
        "name": "b",
        "family": "bigram",
        "kind": "lm",
        "metric": "bpb",  # the kind's metric, so the failed row still says what it measures
        "value": None,
        "lo": None,
        "hi": None,
        "interval": None,
        "n": None,
        "status": "error",
        "error": {"type": "TimeoutError", "message": "store did not answer in 30 s"},
        "reason": None,
        "checkpoint_sha256": "a" * 64,
        "data_sha256": "b" * 64,
        "seconds": 2.0,
        "items": None,
        "checkpoint": "m/b",
        "data": "d.tok",
        "options": NO_OPTIONS,
        "details": None,
    }
    assert row == want and type(row["seconds"]) is float
    validate_report(
        zoo.build_run_report({"entries": [entry]}, [row], seed=0, created_at="2026-01-01T00:00:00Z")
    )
    # an Entry works as well as a dict; without the optional arguments: 0 s, no hashes
    row = zoo.error_row(Entry.model_validate(entry), exc)
    assert row == want | {"seconds": 0.0, "checkpoint_sha256": None, "data_sha256": None}
    # an unknown family: no kind, no metric
    row = zoo.error_row(dict(entry, family="mystery"), KeyError("w"))
    assert (row["kind"], row["metric"], row["error"]) == (
        None,
        None,
        {"type": "KeyError", "message": "'w'"},
    )


def test_skipped_rows_have_no_value_and_zero_seconds(tmp_path, monkeypatch):
    entry = _uniform_bigram(tmp_path)
    row, items = zoo.score_entry_items(dict(entry, family="mystery"), base_dir=tmp_path)
    assert items is None and row["seconds"] == 0.0 and row["metric"] is None
    monkeypatch.delitem(zoo.SCORERS, "lm")  # a kind without a scorer (yet)
    row, items = zoo.score_entry_items(entry, base_dir=tmp_path)
    assert items is None
    assert (row["status"], row["reason"], row["error"]) == (
        "skipped",
        "no scorer for kind 'lm' yet",
        None,
    )
    assert (row["kind"], row["metric"], row["value"], row["seconds"]) == ("lm", "bpb", None, 0.0)


def test_error_rows_keep_their_kind_metric_and_wall_time(tmp_path):
    entry = dict(_uniform_bigram(tmp_path), data="missing.tok")
    t0 = time.perf_counter()
    row = zoo.score_entry(entry, base_dir=tmp_path)
    elapsed = time.perf_counter() - t0
    assert row["status"] == "error" and row["error"]["type"] == "FileNotFoundError"
    assert (row["kind"], row["metric"], row["value"]) == ("lm", "bpb", None)
    assert 0.0 < row["seconds"] <= elapsed
    assert row["checkpoint_sha256"] == sha256_path(tmp_path / "uniform")  # hashed before failing
    assert row["data_sha256"] is None


def test_the_entry_rng_reaches_the_scorer_and_items_become_float64(tmp_path, monkeypatch):
    entry = _uniform_bigram(tmp_path)
    calls = []
    monkeypatch.setitem(zoo.SCORERS, "lm", _spy_scorer(calls))
    first = {s: float(zoo.entry_rng(s, "uniform").random()) for s in (0, 5)}
    row, items = zoo.score_entry_items(entry, base_dir=tmp_path)  # default seed: 0
    assert row["value"] == first[0] and row["details"] == {"spy": True}
    assert items.dtype == np.float64 and items.tolist() == pytest.approx([first[0], 1 - first[0]])
    assert row["items"] == "items/uniform.npy"
    row = zoo.score_entry(entry, seed=5, base_dir=tmp_path, items_dir=tmp_path / "it")
    assert row["value"] == first[5]
    assert np.load(tmp_path / "it" / "uniform.npy").dtype == np.float64
    assert zoo.score_entry(entry, base_dir=tmp_path)["value"] == first[0]
    report = zoo.run_zoo({"entries": [entry]}, seed=5, base_dir=tmp_path)
    assert report.rows[0].value == first[5] and report.seed == 5
    spy_items = np.array([first[5], 1.0 - first[5]], dtype=np.float32).astype(np.float64)
    np.testing.assert_array_equal(report.item_scores["uniform"], spy_items)
    assert zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path).seed == 0  # default seed 0
    assert calls == ["uniform"] * 5


def test_a_scorer_without_items_gives_a_row_without_items(tmp_path, monkeypatch):
    from tinyllm.stats import Interval

    def no_items(entry, model, data_path, rng):
        return zoo.Scored("bpb", Interval(1.0, 0.5, 1.5), "student_t", 3, None, {})

    monkeypatch.setitem(zoo.SCORERS, "lm", no_items)
    entry = _uniform_bigram(tmp_path)
    row, items = zoo.score_entry_items(entry, base_dir=tmp_path)
    assert items is None and row["items"] is None and row["details"] is None
    assert (row["value"], row["lo"], row["hi"], row["n"]) == (1.0, 0.5, 1.5, 3)
    report = zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path)
    assert report.item_scores == {}


def test_transient_failures_are_rows_unless_the_caller_retries_them(tmp_path, monkeypatch):
    def flaky(entry, model, data_path, rng):
        raise TimeoutError("store timed out")

    monkeypatch.setitem(zoo.SCORERS, "lm", flaky)
    entry = _uniform_bigram(tmp_path)
    row, items = zoo.score_entry_items(entry, base_dir=tmp_path)  # default: a row
    assert row["status"] == "error" and row["error"]["type"] == "TimeoutError" and items is None
    with pytest.raises(TimeoutError, match="store timed out"):
        zoo.score_entry_items(entry, base_dir=tmp_path, raise_transient=True)


def test_relative_paths_default_to_the_current_folder(tmp_path, monkeypatch):
    entry = _uniform_bigram(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert zoo.score_entry_items(entry)[0]["status"] == "ok"
    assert zoo.score_entry(entry)["status"] == "ok"
    report = zoo.run_zoo({"entries": [entry]})  # an in-memory manifest: base "."
    assert report.rows[0].status == "ok" and report.rows[0].value == 8.0


def test_base_dir_overrides_the_manifest_folder(tmp_path):
    entry = _uniform_bigram(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "elsewhere" / "zoo.yaml"
    path.write_text(yaml.safe_dump({"entries": [entry]}))
    assert zoo.run_zoo(path).rows[0].status == "error"  # relative to elsewhere/: not there
    assert zoo.run_zoo(path, base_dir=tmp_path).rows[0].value == 8.0
    assert zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path).rows[0].value == 8.0


def test_progress_is_called_after_each_entry_with_its_position(tmp_path):
    entry = _uniform_bigram(tmp_path)
    entries = [dict(entry, name=n) for n in ("a", "b", "c")]
    seen = []
    report = zoo.run_zoo(
        {"entries": entries}, base_dir=tmp_path, progress=lambda i, n, r: seen.append((i, n, r))
    )
    assert [(i, n, r["name"]) for i, n, r in seen] == [(1, 3, "a"), (2, 3, "b"), (3, 3, "c")]
    assert [r["value"] for _, _, r in seen] == [row.value for row in report.rows] == [8.0] * 3
    for name in ("a", "b", "c"):  # the report keeps each entry's own per-token NLLs
        np.testing.assert_allclose(report.item_scores[name], np.full(18, math.log(256.0)))


def test_entry_rng_is_the_documented_generator():
    for seed, name in ((0, "gpt"), (7, "bert-rows"), (2**40, "é")):
        h = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")
        want = np.random.default_rng([seed, h]).random(4)
        np.testing.assert_array_equal(zoo.entry_rng(seed, name).random(4), want)
    assert zoo.entry_rng(np.int64(3), "x").random() == zoo.entry_rng(3, "x").random()
    for bad in (True, False, -1, 1.0, "3", None):
        with pytest.raises(ValueError, match=r"^seed: expected a non-negative integer, got"):
            zoo.entry_rng(bad, "gpt")


def test_read_config_of_each_kind_of_checkpoint(zoo_dir, tmp_path):
    from tinyllm.checkpoint import CheckpointError

    if "ngram" in FAMILIES:  # one file: its metadata
        path = zoo_dir / _entry(zoo_dir, "ngram")["checkpoint"]
        cfg = zoo.read_config(path)
        assert set(cfg) == {"tl_arch", "format_version", "metadata"}
        assert cfg["format_version"] == 1 and cfg["metadata"]["tl_arch"] == "ngram"
    _hf_gpt2(tmp_path / "hf")
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


def test_hf_weights_saved_in_float16_are_scored_in_float32(tmp_path):
    model = _hf_gpt2(tmp_path / "hf32")
    model.half().save_pretrained(tmp_path / "hf16")
    loaded = zoo.load_model(tmp_path / "hf16")
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}


def test_is_transient_reads_botocore_responses_field_by_field():
    from botocore.exceptions import ClientError

    def client_error(response: dict) -> ClientError:
        return ClientError(response, "GetObject")

    assert zoo.is_transient(client_error({"ResponseMetadata": {"HTTPStatusCode": 500}}))
    assert not zoo.is_transient(client_error({"ResponseMetadata": {"HTTPStatusCode": 499}}))
    for code in ("Throttling", "ThrottlingException", "SlowDown"):  # no status at all
        assert zoo.is_transient(client_error({"Error": {"Code": code}}))
    assert not zoo.is_transient(client_error({"Error": {"Code": "throttling"}}))
    assert not zoo.is_transient(client_error({}))

    class NotBotocoreError(Exception):  # a response attribute alone does not make it botocore's
        response = {"ResponseMetadata": {"HTTPStatusCode": 503}}

    assert not zoo.is_transient(NotBotocoreError("x"))


def test_report_errors_name_what_is_wrong_exactly(zoo_dir):
    m = _manifest(zoo_dir)
    names = [e["name"] for e in m["entries"]]
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in m["entries"]]
    with pytest.raises(ValueError) as ei:
        zoo.build_report(m, rows[:-1], seed=0)
    assert str(ei.value) == (
        f"expected one row per manifest entry {names} (each at most once), got rows {names[:-1]}"
    )
    with pytest.raises(ValueError) as ei:
        zoo.build_run_report(m, [rows[0], dict(rows[0], name="nope")], seed=0)
    assert str(ei.value) == (
        f"expected rows naming manifest entries {names} (each at most once), "
        f"got rows {[names[0], 'nope']}; unknown ['nope']"
    )
    with pytest.raises(ValueError) as ei:
        zoo.build_run_report(m, [rows[0], rows[0]], seed=0)
    assert str(ei.value).endswith(f"got rows {[names[0]] * 2}; duplicated {[names[0]]}")


def test_created_at_is_the_given_one_or_now_in_utc(zoo_dir, monkeypatch):
    from datetime import UTC, datetime

    m = _manifest(zoo_dir)
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in m["entries"]]
    stamp = "2026-01-02T03:04:05Z"
    assert zoo.build_report(m, rows, seed=0, created_at=stamp).created_at == stamp
    assert zoo.build_run_report(m, rows[:1], seed=0, created_at=stamp)["created_at"] == stamp
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30: local time is not UTC
    time.tzset()
    try:
        got = zoo.build_report(m, rows, seed=0).created_at
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    when = datetime.strptime(got, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - when).total_seconds()) < 60


def test_build_report_keeps_items_as_float64(zoo_dir):
    m = _manifest(zoo_dir)
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in m["entries"]]
    name = rows[0]["name"]
    report = zoo.build_report(m, rows, seed=0, items={name: [1, 0, 1]})
    assert report.item_scores[name].dtype == np.float64
    assert report.item_scores[name].tolist() == [1.0, 0.0, 1.0]


def test_write_report_nested_folders_text_and_non_finite_numbers(tmp_path):
    entry = _uniform_bigram(tmp_path)
    rows = [zoo.score_entry(entry, base_dir=tmp_path, items_dir=tmp_path / "a" / "b" / "items")]
    assert (tmp_path / "a" / "b" / "items" / "uniform.npy").is_file()  # parents made
    # per-item scores given for a row that does not name a file: nothing written for it
    plain = zoo.score_entry(entry, base_dir=tmp_path)
    report = zoo.build_report({"entries": [entry]}, [plain], seed=0, items={"uniform": [1.0]})
    out = zoo.write_report(report, tmp_path / "x" / "y" / "report.json")
    assert not (tmp_path / "x" / "y" / "items").exists()
    doc = report.to_json()
    assert out.read_text(encoding="utf-8") == json.dumps(doc, indent=2) + "\n"
    # NaN is not JSON: a report carrying one (here in free-form details) is refused
    bad = json.loads(json.dumps(doc))
    bad["rows"][0]["details"]["sum_nll"] = float("nan")
    with pytest.raises(ValueError, match="JSON compliant"):
        zoo.write_report(bad, tmp_path / "nan" / "report.json")
    assert not (tmp_path / "nan" / "report.json").exists()
    assert rows[0]["items"] == "items/uniform.npy"


def test_load_items_takes_a_row_dict_and_refuses_pickles(tmp_path):
    entry = _uniform_bigram(tmp_path)
    report = zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path)
    out = zoo.write_report(report, tmp_path / "rep" / "report.json")
    doc = json.loads(out.read_text())
    got = zoo.load_items(out, doc["rows"][0])  # a plain dict, as read from the JSON
    np.testing.assert_array_equal(got, report.item_scores["uniform"])
    assert zoo.load_items(out, dict(doc["rows"][0], items=None)) is None
    np.save(tmp_path / "rep" / "items" / "uniform.npy", np.array([{}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        zoo.load_items(out, doc["rows"][0])  # an object array is never unpickled


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
    _hf_gpt2(tmp_path / "hf")
    doc = json.loads((tmp_path / "hf" / "config.json").read_text(encoding="utf-8"))
    doc["_name_or_path"] = "modèle-é"
    text = json.dumps(doc, ensure_ascii=False)
    (tmp_path / "hf" / "config.json").write_text(text, encoding="utf-8")
    entry = _uniform_bigram(tmp_path)
    row = zoo.error_row(entry, ValueError("entrée refusée"))
    report = zoo.build_run_report({"entries": [entry]}, [row], seed=0)
    out = tmp_path / "report.json"
    out.write_text(json.dumps(report, ensure_ascii=False), encoding="utf-8")  # another writer
    with ascii_locale():
        cfg = zoo.read_config(tmp_path / "hf")
        back = zoo.read_report(out)
    assert cfg["tl_arch"] == "hf" and cfg["config"]["_name_or_path"] == "modèle-é"
    assert back.rows[0].error.message == "entrée refusée"


def test_saved_items_are_float64_whatever_was_attached(tmp_path):
    """formats/manifest.md: per-item scores are saved as float64, also when a caller attached
    float32 (or integer) arrays to ``report.item_scores`` itself."""
    entry = _uniform_bigram(tmp_path)
    report = zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path)
    report.item_scores["uniform"] = report.item_scores["uniform"].astype(np.float32)
    out = zoo.write_report(report, tmp_path / "rep" / "report.json")
    saved = zoo.load_items(out, report.rows[0])
    assert saved.dtype == np.float64 and saved.shape == (18,)


def test_the_seed_drawn_from_an_rng_is_its_first_integer_below_2_63(zoo_dir):
    for s in (2, 4):  # rngs whose draw below 2**63 - 1 and below 2**63 - 2 differ
        want = int(np.random.default_rng(s).integers(0, 2**63 - 1))
        assert want != int(np.random.default_rng(s).integers(0, 2**63 - 2))
        assert zoo.run_zoo(zoo_dir / "zoo.yaml", rng=np.random.default_rng(s)).seed == want


# ---- the lm kind (tinyllm/eval/kinds/lm.py): oracles written for its surviving mutants ---------


class _UniformHF:
    """A stand-in Hugging Face causal LM (SPEC.md section 1: anything callable on ids[None]
    returning logits): uniform logits over 256 ids, a ``config`` with only the given fields,
    and the length of every window it was called on."""

    def __init__(self, **config):
        import types

        self.config = types.SimpleNamespace(**config)
        self.calls = []

    def __call__(self, ids):
        self.calls += [int(ids.shape[1])] * int(ids.shape[0])  # one length per window
        return torch.zeros(*ids.shape, 256)


def _hf_entry(**options) -> Entry:
    d = {"name": "h", "family": "hf", "checkpoint": "x", "data": "d"}
    return Entry.model_validate(d | ({"options": options} if options else {}))


def test_hf_context_length_from_whichever_config_field_it_has():
    from tinyllm.eval.kinds.lm import lm_token_nlls

    ids = np.arange(20, dtype=np.uint8)
    # ctx 8, default stride 8 // 2 = 4: windows [0,8) [4,12) [8,16) [12,20)
    for key in ("n_positions", "max_position_embeddings", "n_ctx"):
        m = _UniformHF(vocab_size=256, **{key: 8})
        nlls = lm_token_nlls(m, ids, _hf_entry())
        np.testing.assert_allclose(nlls, np.full(19, math.log(256.0)), rtol=1e-6)
        assert nlls.dtype == np.float64 and m.calls == [8, 8, 8, 8], key
    # the first usable field wins; None or a length below 2 is skipped
    m = _UniformHF(vocab_size=256, n_positions=None, max_position_embeddings=1, n_ctx=12)
    lm_token_nlls(m, ids, _hf_entry())
    assert sorted(m.calls) == [8, 12, 12]  # ctx 12, stride 6: [0,12) [6,18) [12,20)
    m = _UniformHF(vocab_size=256, n_positions=2)  # the smallest window: stride max(1, 1) = 1
    lm_token_nlls(m, ids[:5], _hf_entry())
    assert m.calls == [2, 2, 2, 2]
    m = _UniformHF(vocab_size=256, n_positions=3)  # 3 // 2 = 1: windows [0,3) [1,4) [2,5)
    lm_token_nlls(m, ids[:5], _hf_entry())
    assert m.calls == [3, 3, 3]
    with pytest.raises(ValueError) as ei:
        lm_token_nlls(_UniformHF(vocab_size=256, n_positions=1), ids, _hf_entry())
    assert str(ei.value) == (
        "hf model: expected a context length in its config (n_positions or "
        "max_position_embeddings), got none; set options.ctx_len"
    )


def test_hf_vocabulary_check_names_the_size_it_read():
    from tinyllm.eval.kinds.lm import lm_token_nlls

    ids = np.arange(10, dtype=np.uint8)
    for config, got in (({}, 0), ({"vocab_size": None}, 0), ({"vocab_size": 255}, 255)):
        with pytest.raises(ValueError) as ei:
            lm_token_nlls(_UniformHF(n_positions=8, **config), ids, _hf_entry())
        assert str(ei.value) == (
            "hf model: expected a vocabulary of at least 256 ids (the data are byte ids "
            f"0..255), got vocab_size={got}"
        )


@pytest.mark.skipif("gpt" not in FAMILIES, reason="gpt family not registered")
def test_gpt_row_uses_the_entrys_stride_not_the_default(zoo_dir):
    gpt = FAMILIES["gpt"]
    e = dict(_entry(zoo_dir, "gpt"), options={"ctx_len": 16, "stride": 5})
    row, items = zoo.score_entry_items(e, base_dir=zoo_dir)
    assert row["status"] == "ok", row["error"]
    model = gpt.load(zoo_dir / e["checkpoint"])
    ids = read_tokens(zoo_dir / "data" / "val.tok")
    np.testing.assert_array_equal(items, gpt.token_nlls(model, ids, ctx_len=16, stride=5))
    assert not np.array_equal(items, gpt.token_nlls(model, ids, ctx_len=16, stride=8))


def test_families_without_windows_refuse_either_window_option(zoo_dir):
    for options in ({"ctx_len": 16}, {"stride": 8}):
        e = dict(_entry(zoo_dir, "bigram"), options=options)
        row = zoo.score_entry(e, base_dir=zoo_dir)
        assert row["status"] == "error" and "not scored in windows" in row["error"]["message"]


def test_a_family_token_nlls_is_called_as_its_signature_allows(monkeypatch):
    """Window options go only to a token_nlls that takes both ctx_len and stride; its answer
    must be float64[n-1] (converted when it is not)."""
    import types

    from tinyllm.eval.kinds import lm as kind

    ids = np.arange(10, dtype=np.uint8)

    def only_ctx(model, ids, ctx_len=None):  # takes ctx_len but not stride: not windowed
        return np.ones(len(ids) - 1, dtype=np.float32)

    monkeypatch.setitem(kind.FAMILIES, "fake", types.SimpleNamespace(token_nlls=only_ctx))
    e = Entry.model_validate({"name": "f", "family": "fake", "checkpoint": "x", "data": "d"})
    out = kind.lm_token_nlls(None, ids, e)
    assert out.dtype == np.float64 and out.tolist() == [1.0] * 9

    def wrong_shape(model, ids):
        return np.ones(len(ids) - 2)

    monkeypatch.setitem(kind.FAMILIES, "fake", types.SimpleNamespace(token_nlls=wrong_shape))
    with pytest.raises(ValueError) as ei:
        kind.lm_token_nlls(None, ids, e)
    assert str(ei.value) == ("fake.token_nlls: expected float64[9] (tokens 1..n-1), got shape (8,)")


def test_byte_ids_0_and_255_are_bytes_256_is_not_in_any_chunk(tmp_path, monkeypatch):
    from tinyllm.eval.kinds import lm as kind

    entry = _uniform_bigram(tmp_path)
    good = np.array([0, 255, 0, 7, 255, 1, 2, 3, 4, 0], dtype=np.uint16)  # wide dtype: checked
    write_tokens(tmp_path / "good.tok", good)
    row = zoo.score_entry(dict(entry, data="good.tok"), base_dir=tmp_path)
    assert row["status"] == "ok" and row["n"] == 9 and row["value"] == 8.0
    monkeypatch.setattr(kind, "BYTE_CHECK_CHUNK", 4)  # chunks [0,4) [4,8) [8,10)
    for pos, got in ((0, "0..256"), (9, "4..256")):  # first and last chunk, each its range
        bad = good.copy()
        bad[pos] = 256
        write_tokens(tmp_path / "bad.tok", bad)
        row = zoo.score_entry(dict(entry, data="bad.tok"), base_dir=tmp_path)
        assert row["error"]["message"] == (
            f"{tmp_path / 'bad.tok'}: expected byte ids 0..255 (bits per byte counts one byte "
            f"per token), got ids in {got}"
        ), pos


def test_three_tokens_are_enough_for_a_row(tmp_path):
    entry = _uniform_bigram(tmp_path)
    write_tokens(tmp_path / "three.tok", np.array([1, 2, 3], dtype=np.uint8))
    row = zoo.score_entry(dict(entry, data="three.tok"), base_dir=tmp_path)
    assert row["status"] == "ok" and row["n"] == 2 and row["lo"] == row["value"] == 8.0
