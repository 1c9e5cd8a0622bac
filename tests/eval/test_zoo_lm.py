"""tinyllm.eval.zoo's lm rows: each LM family's row is its own ``token_nlls`` and the stats module,
Hugging Face causal LMs, and the lm kind's windows and byte checks (tinyllm/eval/kinds/lm.py).

Checkpoints are real: each LM family in FAMILIES is trained for a few steps on real text (gensim's
lee_background.cor, the ``zoo_dir`` fixture of tests/eval/conftest.py) and saved through its own
``save``; the Hugging Face model is a random-weight ``GPT2LMHeadModel`` saved with
``save_pretrained`` (no download).
"""

import hashlib
import math

import numpy as np
import pytest
import torch
from gensim.test.utils import datapath
from zoo_helpers import (  # same folder: pytest puts it on sys.path
    LM_FAMILIES,
    LN2,
    VAL_BYTES,
    WINDOW,
    entry_of,
    hf_gpt2,
    strided,
    uniform_bigram,
)

from tinyllm import stats
from tinyllm.eval import zoo
from tinyllm.eval.kinds import lm as lm_kind
from tinyllm.models import FAMILIES
from tinyllm.report import Entry, sha256_path
from tinyllm.tokens import read_tokens, write_tokens

# ---- each LM family's row is its own token_nlls + the stats module -----------------------------


@pytest.mark.parametrize("arch", LM_FAMILIES)
def test_lm_row_equals_family_token_nlls_and_stats(zoo_dir, tmp_path, arch):
    entry = entry_of(zoo_dir, arch)
    row = zoo.score_entry(entry, seed=0, base_dir=zoo_dir, items_dir=tmp_path / "items")
    assert row["status"] == "ok", row["error"]
    fam = FAMILIES[arch]
    ckpt = zoo_dir / entry["checkpoint"]
    ids = read_tokens(zoo_dir / "data" / "val.tok")
    model = fam.load(ckpt)
    nlls = fam.token_nlls(model, ids, **WINDOW) if strided(fam) else fam.token_nlls(model, ids)
    assert nlls.shape == (VAL_BYTES - 1,)
    # per-item scores: exactly the family's NLLs
    saved = np.load(tmp_path / row["items"], allow_pickle=False)
    assert saved.dtype == np.float64
    np.testing.assert_array_equal(saved, nlls)
    # bpb = sum / (n_bytes ln 2) with n_bytes = scored tokens; the token file has no unit
    # boundaries: contiguous blocks (1499 tokens: 149 each, for 10 blocks at least) are the units
    # of the cluster-robust interval, its ends rescaled; Student t over tokens is iid_interval
    blocks = stats.contiguous_blocks(nlls.size, 149)
    ci = stats.cluster_ratio(nlls, blocks)
    t = stats.mean_ci(nlls)
    assert row["metric"] == "bpb" and row["interval"] == "cluster_ratio" and row["kind"] == "lm"
    assert row["n"] == VAL_BYTES - 1
    assert row["n_units"] == blocks.n_units == 11
    assert row["details"]["block_len"] == 149
    assert row["interval_warning"].startswith(f"no unit boundaries: {blocks.n_units} contiguous")
    np.testing.assert_array_equal(np.load(tmp_path / row["units"]), blocks.index)
    assert row["value"] == pytest.approx(math.fsum(nlls) / (nlls.size * LN2), rel=1e-12)
    assert row["lo"] == pytest.approx(ci.lo / LN2, rel=1e-12)
    assert row["hi"] == pytest.approx(ci.hi / LN2, rel=1e-12)
    assert row["iid_interval"] == {
        "lo": pytest.approx(t.lo / LN2, rel=1e-12),
        "hi": pytest.approx(t.hi / LN2, rel=1e-12),
        "method": "iid",
    }
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


def test_hf_row_matches_nlls_from_the_hf_logits(tmp_path):
    model = hf_gpt2(tmp_path / "hf")
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

    model = hf_gpt2(tmp_path / "hf")
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
    hf_gpt2(tmp_path / "hf", vocab=100)
    write_tokens(tmp_path / "val.tok", np.arange(50, dtype=np.uint8))
    entry = {"name": "tiny-vocab", "family": "hf", "checkpoint": "hf", "data": "val.tok"}
    row = zoo.score_entry(entry, seed=0, base_dir=tmp_path)
    assert row["status"] == "error"
    assert "vocab_size=100" in row["error"]["message"]


@pytest.mark.skipif("gpt" not in FAMILIES, reason="gpt family not registered")
def test_gpt_exported_to_hf_scores_the_same_as_gpt(zoo_dir, tmp_path):
    gpt = FAMILIES["gpt"]
    entry = entry_of(zoo_dir, "gpt")
    FAMILIES["hf"].export_hf(gpt.load(zoo_dir / entry["checkpoint"]), tmp_path / "gpt-hf")
    hf_entry = dict(entry, name="gpt-hf", family="hf", checkpoint=str(tmp_path / "gpt-hf"))
    a = zoo.score_entry(entry, seed=0, base_dir=zoo_dir, items_dir=tmp_path / "items")
    b = zoo.score_entry(hf_entry, seed=0, base_dir=zoo_dir, items_dir=tmp_path / "items")
    assert a["status"] == b["status"] == "ok", (a["error"], b["error"])
    np.testing.assert_allclose(
        np.load(tmp_path / b["items"]), np.load(tmp_path / a["items"]), rtol=0, atol=1e-4
    )
    assert b["value"] == pytest.approx(a["value"], rel=1e-5)


def test_hf_weights_saved_in_float16_are_scored_in_float32(tmp_path):
    model = hf_gpt2(tmp_path / "hf32")
    model.half().save_pretrained(tmp_path / "hf16")
    loaded = zoo.load_model(tmp_path / "hf16")
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}


# ---- the lm kind (tinyllm/eval/kinds/lm.py): windows, context length, byte ids ------------------


class _UniformHF:
    """A stand-in Hugging Face causal LM (docs/definitions.md, symbols: anything callable on ids[None]
    returning logits): uniform logits over 256 ids, a ``config`` with only the given fields,
    and the length of every window it was called on."""

    def __init__(self, **config):
        import types

        self.config = types.SimpleNamespace(**config)
        self.calls = []

    def __call__(self, ids):
        self.calls += [int(ids.shape[1])] * int(ids.shape[0])  # one length per window
        return torch.zeros(*ids.shape, 256)


NO_OPTIONS = lm_kind.Options()
"""An lm entry's options when it sets none."""


def _hf_entry(**options) -> Entry:
    d = {"name": "h", "family": "hf", "checkpoint": "x", "data": "d"}
    return Entry.model_validate(d | ({"options": options} if options else {}))


def test_hf_context_length_from_whichever_config_field_it_has():
    from tinyllm.eval.kinds.lm import lm_token_nlls

    ids = np.arange(20, dtype=np.uint8)
    # ctx 8, default stride 8 // 2 = 4: windows [0,8) [4,12) [8,16) [12,20)
    for key in ("n_positions", "max_position_embeddings", "n_ctx"):
        m = _UniformHF(vocab_size=256, **{key: 8})
        nlls = lm_token_nlls(m, ids, _hf_entry(), NO_OPTIONS)
        np.testing.assert_allclose(nlls, np.full(19, math.log(256.0)), rtol=1e-6)
        assert nlls.dtype == np.float64 and m.calls == [8, 8, 8, 8], key
    # the first usable field wins; None or a length below 2 is skipped
    m = _UniformHF(vocab_size=256, n_positions=None, max_position_embeddings=1, n_ctx=12)
    lm_token_nlls(m, ids, _hf_entry(), NO_OPTIONS)
    assert sorted(m.calls) == [8, 12, 12]  # ctx 12, stride 6: [0,12) [6,18) [12,20)
    m = _UniformHF(vocab_size=256, n_positions=2)  # the smallest window: stride max(1, 1) = 1
    lm_token_nlls(m, ids[:5], _hf_entry(), NO_OPTIONS)
    assert m.calls == [2, 2, 2, 2]
    m = _UniformHF(vocab_size=256, n_positions=3)  # 3 // 2 = 1: windows [0,3) [1,4) [2,5)
    lm_token_nlls(m, ids[:5], _hf_entry(), NO_OPTIONS)
    assert m.calls == [3, 3, 3]
    with pytest.raises(ValueError) as ei:
        lm_token_nlls(_UniformHF(vocab_size=256, n_positions=1), ids, _hf_entry(), NO_OPTIONS)
    assert str(ei.value) == (
        "hf model: expected a context length in its config (n_positions or "
        "max_position_embeddings), got none; set options.ctx_len"
    )


def test_hf_vocabulary_check_names_the_size_it_read():
    from tinyllm.eval.kinds.lm import lm_token_nlls

    ids = np.arange(10, dtype=np.uint8)
    for config, got in (({}, 0), ({"vocab_size": None}, 0), ({"vocab_size": 255}, 255)):
        with pytest.raises(ValueError) as ei:
            lm_token_nlls(_UniformHF(n_positions=8, **config), ids, _hf_entry(), NO_OPTIONS)
        assert str(ei.value) == (
            "hf model: expected a vocabulary of at least 256 ids (the data are byte ids "
            f"0..255), got vocab_size={got}"
        )


@pytest.mark.skipif("gpt" not in FAMILIES, reason="gpt family not registered")
def test_gpt_row_uses_the_entrys_stride_not_the_default(zoo_dir):
    gpt = FAMILIES["gpt"]
    e = dict(entry_of(zoo_dir, "gpt"), options={"ctx_len": 16, "stride": 5})
    row, items = zoo.score_entry_items(e, base_dir=zoo_dir)
    assert row["status"] == "ok", row["error"]
    model = gpt.load(zoo_dir / e["checkpoint"])
    ids = read_tokens(zoo_dir / "data" / "val.tok")
    np.testing.assert_array_equal(items, gpt.token_nlls(model, ids, ctx_len=16, stride=5))
    assert not np.array_equal(items, gpt.token_nlls(model, ids, ctx_len=16, stride=8))


def test_families_without_windows_refuse_either_window_option(zoo_dir):
    for options in ({"ctx_len": 16}, {"stride": 8}):
        e = dict(entry_of(zoo_dir, "bigram"), options=options)
        row = zoo.score_entry(e, base_dir=zoo_dir)
        assert row["status"] == "error" and "not scored in windows" in row["error"]["message"]


def test_a_family_token_nlls_gets_window_options_only_when_it_declares_windows(monkeypatch):
    """Window options go only to a family that declares WINDOWED (tinyllm.windows.
    scored_in_windows), whatever its token_nlls' signature; its answer must be float64[n-1]
    (converted when it is not)."""
    import types

    from tinyllm.eval.kinds import lm as kind

    ids = np.arange(10, dtype=np.uint8)

    def only_ctx(model, ids, ctx_len=None):  # takes ctx_len but not stride: not windowed
        return np.ones(len(ids) - 1, dtype=np.float32)

    monkeypatch.setitem(kind.FAMILIES, "fake", types.SimpleNamespace(token_nlls=only_ctx))
    e = Entry.model_validate({"name": "f", "family": "fake", "checkpoint": "x", "data": "d"})
    out = kind.lm_token_nlls(None, ids, e, NO_OPTIONS)
    assert out.dtype == np.float64 and out.tolist() == [1.0] * 9

    calls = []

    def both(model, ids, ctx_len=None, stride=None):  # takes both: windowed only if declared
        calls.append((ctx_len, stride))
        return np.ones(len(ids) - 1)

    monkeypatch.setitem(kind.FAMILIES, "fake", types.SimpleNamespace(token_nlls=both))
    kind.lm_token_nlls(None, ids, e, NO_OPTIONS)
    declared = types.SimpleNamespace(token_nlls=both, WINDOWED=True, ARCH="fake")
    monkeypatch.setitem(kind.FAMILIES, "fake", declared)
    model = types.SimpleNamespace(cfg=types.SimpleNamespace(block_size=8))
    kind.lm_token_nlls(model, ids, e, NO_OPTIONS)
    assert calls == [(None, None), (8, 4)]  # the model's context, half of it

    def wrong_shape(model, ids):
        return np.ones(len(ids) - 2)

    monkeypatch.setitem(kind.FAMILIES, "fake", types.SimpleNamespace(token_nlls=wrong_shape))
    with pytest.raises(ValueError) as ei:
        kind.lm_token_nlls(None, ids, e, NO_OPTIONS)
    assert str(ei.value) == ("fake.token_nlls: expected float64[9] (tokens 1..n-1), got shape (8,)")


def test_byte_ids_0_and_255_are_bytes_256_is_not_in_any_chunk(tmp_path, monkeypatch):
    from tinyllm.eval.kinds import lm as kind

    entry = uniform_bigram(tmp_path)
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
    entry = uniform_bigram(tmp_path)
    write_tokens(tmp_path / "three.tok", np.array([1, 2, 3], dtype=np.uint8))
    row = zoo.score_entry(dict(entry, data="three.tok"), base_dir=tmp_path)
    assert row["status"] == "ok" and row["n"] == 2 and row["lo"] == row["value"] == 8.0
