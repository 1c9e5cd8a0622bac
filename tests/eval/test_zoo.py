"""tinyllm.eval.zoo: manifest -> rows -> report, against the families' own NLLs and the stats module.

Checkpoints are real: each LM family in FAMILIES is trained for a few steps on real text (gensim's
lee_background.cor) and saved through its own ``save``; the Hugging Face model is a random-weight
``GPT2LMHeadModel`` saved with ``save_pretrained`` (no download).
"""

import dataclasses
import hashlib
import inspect
import json
import math
import random
import shutil

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
LM_FAMILIES = sorted(a for a, m in FAMILIES.items() if m.KIND == "lm")
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
    gpt.export_hf(gpt.load(zoo_dir / entry["checkpoint"]), tmp_path / "gpt-hf")
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
