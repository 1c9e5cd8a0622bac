"""`tinyllm eval ppl --text / --tokenizer / --against / --device / --dtype` against the library
calls they wire (tinyllm.eval.text, tinyllm.device), on tiny random models; errors are one line.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from lm_helpers import tiny_gpt2
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.eval import zoo
from tinyllm.eval.text import model_tokenizer, read_lm_tokens, summarize_text, text_ppl
from tinyllm.eval.text_compare import compare_on_text
from tinyllm.models import gpt
from tinyllm.models import hf as hf_family
from tinyllm.tokens import ByteTokenizer, write_tokens

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = "the cat sat on the mat; a bb c. Ünïcödé — the dog ate the hat.\n" * 6


def _invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _bpe():
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=290,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(TEXT.splitlines() * 5, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="a")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Two BPE models (A, B), a byte-level one without a tokenizer, a bf16 one, the text."""
    d = tmp_path_factory.mktemp("text")
    tok = _bpe()
    for name, seed in (("a", 1), ("b", 2)):
        tiny_gpt2(vocab=300, seed=seed).save_pretrained(d / name)
        tok.save_pretrained(d / name)
    tiny_gpt2(vocab=300, seed=3).save_pretrained(d / "bytes")
    tiny_gpt2(vocab=300, seed=4).to(torch.bfloat16).save_pretrained(d / "bf16")
    (d / "val.txt").write_text(TEXT, encoding="utf-8")
    return d


def _json(args):
    r = _invoke([*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_text_route_is_text_ppl_in_the_folders_tokenizer(folders):
    got = _json(["eval", "ppl", "--hf", folders / "a", "--text", folders / "val.txt",
                 "--ctx-len", 32, "--stride", 16])  # fmt: skip
    m = hf_family.load(folders / "a")
    tokens = read_lm_tokens(folders / "val.txt", model_tokenizer(m, "hf"))
    want = text_ppl(m, tokens, 32, 16)
    assert tokens.tokenizer.startswith("hf-sha256:") and tokens.ids.size < len(TEXT.encode())
    # a prefix token: bpb over every byte of the text
    assert got["n_bytes"] == want["n_bytes"] == len(TEXT.encode("utf-8"))
    assert got["tokenizer"] == tokens.tokenizer and got["n_tokens"] == tokens.ids.size - 1
    for k in ("nll", "ppl", "bpb"):
        assert got[k] == pytest.approx(want[k], rel=1e-12)
    table = _invoke(["eval", "ppl", "--hf", folders / "a", "--text", folders / "val.txt"])
    assert table.exit_code == 0, table.output
    assert f"over the text's {len(TEXT.encode())} bytes" in " ".join(table.stdout.split())


def test_tokenizer_byte_and_our_checkpoint_on_a_text(folders, tmp_path):
    # a folder without a tokenizer of its own reads the text in the tokenizer given
    got = _json(["eval", "ppl", "--hf", folders / "bytes", "--text", folders / "val.txt",
                 "--tokenizer", "byte", "--ctx-len", 32])  # fmt: skip
    m = hf_family.load(folders / "bytes")
    want = text_ppl(m, read_lm_tokens(folders / "val.txt", ByteTokenizer()), 32, 16)
    assert got["tokenizer"] == "byte" and got["bpb"] == pytest.approx(want["bpb"], rel=1e-12)
    torch.manual_seed(0)
    ck = gpt.save(
        gpt.Model(gpt.Config(block_size=32, n_layer=1, n_head=2, n_embd=16)), tmp_path / "g"
    )
    got = _json(["eval", "ppl", "--model", ck, "--text", folders / "val.txt", "--stride", 8])
    tokens = read_lm_tokens(folders / "val.txt", ByteTokenizer())
    want = text_ppl(gpt.load(ck), tokens, 32, 8)
    assert got["n_bytes"] == len(TEXT.encode()) - 1  # no prefix: token 0's byte is context
    assert got["bpb"] == pytest.approx(want["bpb"], rel=1e-12)


def test_against_is_compare_on_text(folders):
    args = ["eval", "ppl", "--hf", folders / "a", "--text", folders / "val.txt", "--ctx-len", 32]
    got = _json([*args, "--against", folders / "b", "--seed", 3])
    a, b = hf_family.load(folders / "a"), hf_family.load(folders / "b")
    tok = model_tokenizer(a, "hf")
    ta = read_lm_tokens(folders / "val.txt", tok)
    want = compare_on_text(a, ta, b, ta, 32, 16, rng=np.random.default_rng(3))
    assert got["delta"] == pytest.approx(want["delta"], rel=1e-12)
    assert got["delta_bpb"] == pytest.approx(want["delta_bpb"], rel=1e-12)
    assert got["p"] == want["p"] and got["n_bytes"] == len(TEXT.encode())
    table = _invoke([*args, "--against", folders / "b", "--seed", 3])
    assert table.exit_code == 0 and "delta_bpb" in table.stdout
    assert f"p = {want['p']:.4g}" in " ".join(table.stdout.split())
    # paired over the text's lines: the per-document sums, paired_difference over them
    assert got["paired"] is True and got["n_units"] == len(TEXT.splitlines()) > 2
    assert got["interval"] == "paired_t" and got["mde_bpb"] > 0
    # a byte-level folder reads the text in bytes: not pairable with the BPE model, each bpb
    # with its interval over documents side by side
    r = _json([*args, "--against", folders / "bytes"])
    one = _json(["eval", "ppl", "--hf", folders / "bytes", "--text", folders / "val.txt",
                 "--tokenizer", "byte", "--ctx-len", 32])  # fmt: skip
    assert r["paired"] is False
    assert r["note"] == "different tokenizers: compared by bpb only, unpaired"
    assert r["bpb_b"] == pytest.approx(one["bpb"], rel=1e-12)
    assert r["n_units_b"] == one["n_units"] and r["tokenizer_b"] == "byte"


def test_cli_and_zoo_score_a_bf16_folder_alike(folders, tmp_path):
    """One rule (dtype auto = float32 on CPU): the CLI's bpb is the zoo's on a bf16 folder."""
    ids = np.frombuffer(TEXT.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    tok = write_tokens(tmp_path / "val.tok", ids)
    opts = {"ctx_len": 32, "stride": 16}
    entry = {"name": "bf", "family": "hf", "checkpoint": str(folders / "bf16"), "data": str(tok)}
    row = zoo.score_entry({**entry, "options": opts})
    assert row["status"] == "ok", row
    for route in (["--data", tok], ["--text", folders / "val.txt"]):
        got = _json(["eval", "ppl", "--hf", folders / "bf16", *route, "--ctx-len", 32])
        assert got["bpb"]["value"] == pytest.approx(row["value"], rel=1e-12), route
    # the checkpoint's own bf16 gives another number: the rule is what makes them agree
    got = _json(["eval", "ppl", "--hf", folders / "bf16", "--data", tok, "--ctx-len", 32,
                 "--dtype", "bfloat16"])  # fmt: skip
    assert got["bpb"]["value"] != pytest.approx(row["value"], rel=1e-9)
    want = text_ppl(hf_family.load(folders / "bf16", dtype="bfloat16"),
                    read_lm_tokens(tok, ByteTokenizer()), 32, 16)  # fmt: skip
    assert got["bpb"]["value"] == pytest.approx(want["bpb"]["value"], rel=1e-12)


def test_device_and_dtype_of_our_checkpoint(tmp_path, folders):
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=1, n_head=2, n_embd=16))
    ck = gpt.save(model, tmp_path / "g")
    args = ["eval", "ppl", "--model", ck, "--text", folders / "val.txt", "--device", "cpu"]
    got = _json([*args, "--dtype", "bfloat16"])
    tokens = read_lm_tokens(folders / "val.txt", ByteTokenizer())
    want = text_ppl(gpt.load(ck).to(torch.bfloat16), tokens, 32, 16)
    assert got["bpb"] == pytest.approx(want["bpb"], rel=1e-12)
    assert got["bpb"] != pytest.approx(_json(args)["bpb"], rel=1e-9)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--device", "tpu"], "error: device: expected one of ['auto', 'cpu', 'cuda', 'cuda:N', "
         "'mps'], got 'tpu'"),
        (["--dtype", "float64"], "error: dtype: expected one of ['auto', 'float32', 'bfloat16', "
         "'float16'], got 'float64'"),
        (["--data", "x.tok"], "error: expected exactly one of --data TOKENS or --text FILE"),
        (["--n-bytes", 5], "error: --n-bytes: expected only with --data"),
        (["--tokenizer", "nowhere"], "error: tokenizer: expected 'byte' or a tokenizer folder, "
         "got 'nowhere'"),
    ],
)  # fmt: skip
def test_errors_are_one_line(folders, extra, message):
    r = _invoke(["eval", "ppl", "--hf", folders / "a", "--text", folders / "val.txt", *extra])
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith(message) and len(r.output.strip().splitlines()) == 1


def test_against_and_tokenizer_need_a_text(folders, tmp_path):
    tok = write_tokens(tmp_path / "v.tok", np.arange(50))
    for extra in (["--against", folders / "b"], ["--tokenizer", "byte"]):
        r = _invoke(["eval", "ppl", "--hf", folders / "a", "--data", tok, *extra])
        assert r.exit_code == 2 and "expected --text FILE" in r.output, r.output


def test_a_family_scored_by_its_own_nlls_stays_on_the_cpu(folders, tmp_path):
    from tinyllm.eval.lm import summarize_nlls
    from tinyllm.models import ngram

    model = ngram.train(ngram.Config(order=3), ByteTokenizer().encode(TEXT), seed=0)
    path = ngram.save(model, tmp_path / "ngram.safetensors")
    args = ["eval", "ppl", "--model", path, "--text", folders / "val.txt"]
    got = _json([*args, "--device", "cpu"])
    tokens = read_lm_tokens(folders / "val.txt", ByteTokenizer())
    nlls = ngram.token_nlls(ngram.load(path), tokens.ids)
    want = summarize_nlls(nlls, tokens.n_scored_bytes)
    assert got["bpb"]["value"] == pytest.approx(want["bpb"]["value"], rel=1e-12)
    assert got["iid_interval"]["bpb"] == pytest.approx(want["bpb"], rel=1e-12)
    clustered = summarize_text([(1, nlls)], tokens)
    assert got["bpb"] == pytest.approx(clustered["bpb"], rel=1e-12)
    assert got["n_units"] == clustered["n_units"] == len(TEXT.splitlines())
    assert got["n_bytes"] == len(TEXT.encode()) - 1
    for extra in (["--device", "cuda"], ["--dtype", "float16"]):
        r = _invoke([*args, *extra])
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert "expected device auto or cpu and dtype auto for ngram" in r.output


def test_manifest_device_and_dtype_follow_the_cli(folders, tmp_path):
    from tinyllm.models import ngram
    from tinyllm.report import ManifestError, parse_manifest

    entry = {"name": "bf", "family": "hf", "checkpoint": str(folders / "bf16")}
    entry["data"] = str(folders / "val.txt")
    opts = {"ctx_len": 32, "stride": 16, "device": "cpu", "dtype": "bfloat16"}
    row = zoo.score_entry({**entry, "options": opts})
    got = _json(["eval", "ppl", "--hf", folders / "bf16", "--text", folders / "val.txt",
                 "--ctx-len", 32, "--device", "cpu", "--dtype", "bfloat16"])  # fmt: skip
    assert row["status"] == "ok" and row["value"] == pytest.approx(got["bpb"]["value"], rel=1e-12)
    assert (row["options"]["device"], row["options"]["dtype"]) == ("cpu", "bfloat16")
    with pytest.raises(ManifestError, match="device"):
        parse_manifest({"entries": [{**entry, "options": {"device": "tpu"}}]})
    with pytest.raises(ManifestError, match="dtype"):
        parse_manifest({"entries": [{**entry, "options": {"dtype": "float64"}}]})
    model = ngram.train(ngram.Config(order=2), ByteTokenizer().encode(TEXT), seed=0)
    path = ngram.save(model, tmp_path / "ngram.safetensors")
    bad = {"name": "ng", "family": "ngram", "checkpoint": str(path), "data": entry["data"]}
    row = zoo.score_entry({**bad, "options": {"device": "cuda"}})
    assert row["status"] == "error" and "dtype auto for ngram" in row["error"]["message"]


def test_against_our_checkpoint_and_a_byte_level_hf_folder(folders, tmp_path):
    """OTHER may be one of our checkpoints; C defaults to the shorter of the two contexts."""
    torch.manual_seed(0)
    ck = gpt.save(
        gpt.Model(gpt.Config(block_size=32, n_layer=1, n_head=2, n_embd=16)), tmp_path / "g"
    )
    got = _json(["eval", "ppl", "--hf", folders / "bytes", "--text", folders / "val.txt",
                 "--against", ck])  # fmt: skip
    a = hf_family.load(folders / "bytes")
    tokens = read_lm_tokens(folders / "val.txt", ByteTokenizer())
    want = compare_on_text(a, tokens, gpt.load(ck), tokens, 32, 16, rng=np.random.default_rng(0))
    assert (got["ctx_len"], got["stride"], got["against"]) == (32, 16, str(ck))
    assert got["delta"] == pytest.approx(want["delta"], rel=1e-12) and got["p"] == want["p"]


def test_against_pairs_any_lm_family_per_document(folders, tmp_path):
    """gpt (strided windows) against an n-gram (its own NLLs): the same byte tokens, paired over
    the text's lines through stats.paired_difference on per-document sums computed here."""
    from tinyllm import stats
    from tinyllm.models import ngram

    torch.manual_seed(0)
    ck = gpt.save(
        gpt.Model(gpt.Config(block_size=32, n_layer=1, n_head=2, n_embd=16)), tmp_path / "g"
    )
    ng = ngram.save(
        ngram.train(ngram.Config(order=3), ByteTokenizer().encode(TEXT), seed=0),
        tmp_path / "ngram.safetensors",
    )
    got = _json(["eval", "ppl", "--model", ck, "--text", folders / "val.txt", "--against", ng])
    tokens = read_lm_tokens(folders / "val.txt", ByteTokenizer())
    a = gpt.token_nlls(gpt.load(ck), tokens.ids, ctx_len=32, stride=16)
    b = ngram.token_nlls(ngram.load(ng), tokens.ids)
    ids = np.asarray(tokens.ids, dtype=np.int64)
    doc = np.concatenate([[0], np.cumsum((ids[:-1] == 10) & (ids[1:] != 10))])[1:]
    SA, SB = np.bincount(doc, weights=a), np.bincount(doc, weights=b)
    N = np.bincount(doc).astype(float)
    want = stats.paired_difference(
        SB, SA, np.arange(N.size), np.random.default_rng(0), kind="ratio", weights=N
    )
    assert got["paired"] is True and got["n_units"] == want.n_units == 6
    assert got["delta"]["value"] == pytest.approx(want.delta, rel=1e-9)
    assert got["delta"]["lo"] == pytest.approx(want.lo, rel=1e-9)
    assert got["p"] == want.p and got["mde"] == pytest.approx(want.mde, rel=1e-9)
    scale = a.size / (got["n_bytes"] * np.log(2))
    assert got["delta_bpb"]["hi"] == pytest.approx(want.hi * scale, rel=1e-9)
    assert got["ctx_len"] == 32 and got["stride"] == 16


def test_doc_sep_sets_the_units_of_the_intervals(folders):
    args = ["eval", "ppl", "--hf", folders / "a", "--text", folders / "val.txt", "--ctx-len", 32]
    lines, none = _json(args), _json([*args, "--doc-sep", "none"])
    sentences = _json([*args, "--doc-sep", ". "])
    assert lines["n_units"] == 6 and lines["block_len"] is None and lines["doc_sep"] == "\n"
    assert lines["interval_warning"] == (
        "only 6 units: an interval over fewer than 10 units is unreliable"
    )
    assert none["block_len"] >= 1 and none["interval_warning"].startswith("no unit boundaries")
    assert sentences["n_units"] == 7  # one ". " a line: 6 cuts, 7 documents
    assert lines["bpb"]["value"] == none["bpb"]["value"] == sentences["bpb"]["value"]
    assert lines["iid_interval"] == none["iid_interval"]
    table = _invoke(args)
    assert "intervals over 6 units (cluster_ratio)" in " ".join(table.stdout.split())
