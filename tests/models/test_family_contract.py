"""The family contract (tinyllm/models/__init__.py), checked on every family in ``FAMILIES``.

Every family: ARCH/KIND, a frozen JSON-native Config that refuses unknown keys, ``train`` with
keyword-only ``seed``/``steps``/``progress``; the one family trained elsewhere, ``hf`` (a local
Hugging Face causal LM, a tiny random GPT-2 here), has only ``save``/``load``. Every lm family
additionally: output shapes (``token_nlls`` -> float64[n-1]; ``model(idx)`` -> logits
[B, T, 256] that agree with ``token_nlls``), save -> load gives identical NLLs, memmap input, a
family scored in windows defaults to the model's own context, and (trained families) the loss
falls on a tiny batch within a few steps. "Loss falls" for count-based families (whose ``train`` ignores
``steps``) means: the NLL of the training bytes after training is below the untrained, uniform
NLL ``ln 256``; for the others the per-step loss reported through ``progress`` also falls.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tinyllm.checkpoint import read_config
from tinyllm.eval import lm, zoo
from tinyllm.models import FAMILIES
from tinyllm.models.translation import encode_sources, encode_targets
from tinyllm.tokens import (
    BOS,
    CLS,
    EOS,
    MASK,
    PAD,
    VOCAB_WITH_SPECIALS,
    ByteTokenizer,
    read_tokens,
    write_tokens,
)

KINDS = {"lm", "seq2seq", "classifier", "mlm", "rtd", "embeddings"}
LN256 = math.log(256)

# Tiny configs so that the whole contract runs in seconds; a new family falls back to Config().
SMALL = {
    "bigram": ({}, 0, {}),
    "ngram": ({"order": 3}, 0, {}),
    "nplm": (
        {"context": 3, "emb_dim": 8, "hidden": 32, "seq_len": 16, "batch_size": 8, "lr": 0.01},
        40,
        {},
    ),
    "rnnlm": ({"emb_dim": 16, "hidden": 32, "bptt": 16, "batch_size": 4, "lr": 0.01}, 40, {}),
    "gpt": (
        {"block_size": 32, "n_layer": 1, "n_head": 2, "n_embd": 32},
        40,
        {"batch_size": 8, "lr": 1e-2},
    ),
    "seq2seq": ({"emb_dim": 16, "hidden": 32, "max_len": 24, "batch_size": 8, "lr": 1e-2}, 40, {}),
    "transformer": (
        {"n_embd": 32, "n_head": 2, "n_enc_layer": 1, "n_dec_layer": 1, "max_len": 24},
        40,
        {},
    ),
    "copy": ({"max_len": 24}, 0, {}),
    "bert": ({"max_len": 24, "n_layer": 1, "n_head": 2, "n_embd": 32}, 60, {"lr": 3e-3}),
    "electra": (
        {"max_len": 24, "n_layer": 1, "n_head": 2, "n_embd": 32, "gen_n_embd": 16},
        40,
        {"lr": 3e-3},
    ),
    "classifier": (
        {"max_len": 24, "n_layer": 1, "n_head": 2, "n_embd": 32, "dropout": 0.0},
        40,
        {"batch_size": 8, "lr": 3e-3},
    ),
    "word2vec": (
        {"dim": 16, "window": 2, "negative": 3, "min_count": 1, "sample": 0.0, "lr": 0.2}
        | {"batch_size": 64},
        60,
        {},
    ),
}

TEXT = (
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox "
    "runs into the woods. A bushfire burns near the town; the firefighters say the wind will "
    "change tonight. "
) * 3
IDS = ByteTokenizer().encode(TEXT).astype(np.uint8)

LM_FAMILIES = sorted(n for n, f in FAMILIES.items() if getattr(f, "KIND", None) == "lm")
TRAINED_ELSEWHERE = {"hf"}  # families without Config / Model / train: loaded, saved, scored


def _small(name: str):
    """The family, its tiny Config, steps and training settings: the keys of SMALL's first dict
    that are not Config fields go to ``train`` (the family's TrainConfig)."""
    fam = FAMILIES[name]
    kw, steps, train_kw = SMALL.get(name, ({}, 20, {}))
    fields = {f.name for f in dataclasses.fields(fam.Config)}
    cfg_kw = {k: v for k, v in kw.items() if k in fields}
    train_kw = {k: v for k, v in kw.items() if k not in fields} | train_kw
    return fam, fam.Config(**cfg_kw), steps, train_kw


def _tiny_hf():
    """A Hugging Face causal LM over the 256 byte ids, random weights (no download)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _trainer(data_of):
    """A cache ``get(name) -> (model, progress calls)``: one tiny model per family, trained on
    ``data_of(fam)`` with seed 0 and its SMALL settings."""
    cache = {}

    def get(name: str):
        if name not in cache:
            fam, cfg, steps, train_kw = _small(name)
            calls = []
            model = fam.train(
                cfg,
                data_of(fam),
                seed=0,
                steps=steps,
                progress=lambda *a: calls.append(a),
                **train_kw,
            )
            cache[name] = (model, calls)
        return cache[name]

    return get


def _save_load(fam, model, tmp_path: Path):
    """``fam.load(fam.save(model, ...))``, checking the checkpoint names the family and the
    loaded config equals the model's."""
    path = fam.save(model, tmp_path / "ckpt")
    assert read_config(path)["tl_arch"] == fam.ARCH
    loaded = fam.load(path)
    assert loaded.cfg == model.cfg
    return loaded


def _logits(model, idx: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        out = model(idx)
    if hasattr(out, "logits"):  # a Hugging Face model's output
        return out.logits
    return out[0] if isinstance(out, tuple) else out


@pytest.fixture(scope="module")
def trained():
    """One tiny trained model per lm family, with the progress calls it made (hf: a random one,
    no calls)."""
    train = _trainer(lambda fam: IDS)
    hf = {}

    def get(name: str):
        if name not in TRAINED_ELSEWHERE:
            return train(name)
        if name not in hf:
            hf[name] = (_tiny_hf(), [])
        return hf[name]

    return get


def test_every_family_but_the_hugging_face_one_is_trained_here():
    assert {n for n, f in FAMILIES.items() if not hasattr(f, "train")} == TRAINED_ELSEWHERE


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_module_names_and_config(name):
    fam = FAMILIES[name]
    assert name == fam.ARCH  # FAMILIES is keyed by tl_arch
    assert fam.KIND in KINDS
    if name in TRAINED_ELSEWHERE:
        assert callable(fam.save) and callable(fam.load)
        return
    for attr in ("Config", "Model", "train", "save", "load"):
        assert hasattr(fam, attr), f"{name} lacks {attr}"
    cfg = fam.Config()
    assert dataclasses.is_dataclass(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cfg, dataclasses.fields(cfg)[0].name, None)
    d = dataclasses.asdict(cfg)
    assert json.loads(json.dumps(d)) == d  # JSON-native fields
    assert fam.Config(**d) == cfg
    with pytest.raises(TypeError):
        fam.Config(**d, not_a_field=1)
    params = inspect.signature(fam.train).parameters
    for kw in ("seed", "steps", "progress"):
        assert params[kw].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["progress"].default is None


@pytest.mark.parametrize("name", LM_FAMILIES)
def test_output_shapes_and_logits_agree_with_token_nlls(name, trained):
    fam = FAMILIES[name]
    model, _ = trained(name)
    nll = fam.token_nlls(model, IDS)
    assert nll.shape == (IDS.size - 1,)
    assert nll.dtype == np.float64
    assert np.all(np.isfinite(nll)) and np.all(nll > 0)

    # model(idx) -> logits [B, T, 256]; within one window they give the same NLLs
    T = 24
    idx = torch.from_numpy(IDS[: 2 * T].astype(np.int64)).reshape(2, T)
    logits = _logits(model, idx)
    assert tuple(logits.shape) == (2, T, 256)
    logp = F.log_softmax(logits[0].double(), dim=-1)
    from_logits = -logp[torch.arange(T - 1), idx[0, 1:]].numpy()
    np.testing.assert_allclose(fam.token_nlls(model, IDS[:T]), from_logits, rtol=0, atol=1e-5)

    with pytest.raises(ValueError):
        fam.token_nlls(model, IDS[:1])  # nothing to score


@pytest.mark.parametrize("name", LM_FAMILIES)
def test_save_load_gives_identical_nlls(name, trained, tmp_path: Path):
    fam = FAMILIES[name]
    model, _ = trained(name)
    path = tmp_path / "ckpt"
    fam.save(model, path)
    assert zoo.read_config(path)["tl_arch"] == fam.ARCH  # the folder, one file or HF folder
    loaded = fam.load(path)
    if hasattr(model, "cfg"):
        assert loaded.cfg == model.cfg
    else:  # a Hugging Face model: its config is its own; every tensor comes back
        for (k, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
            assert torch.equal(a, b), k
    np.testing.assert_array_equal(fam.token_nlls(loaded, IDS), fam.token_nlls(model, IDS))


@pytest.mark.parametrize("name", LM_FAMILIES)
def test_a_family_scored_in_windows_defaults_to_the_models_own_context(name, trained):
    """gpt and hf: ``token_nlls(model, ids)`` = the windows of the model's own context length
    (lm.model_ctx_len) with stride ctx // 2."""
    fam = FAMILIES[name]
    params = inspect.signature(fam.token_nlls).parameters
    if not ("ctx_len" in params and "stride" in params):
        pytest.skip(f"{name} is not scored in windows")
    model, _ = trained(name)
    ctx = lm.model_ctx_len(model)
    assert ctx is not None and ctx < IDS.size  # several windows
    want = lm.token_nlls(model, IDS, ctx, ctx // 2)
    np.testing.assert_allclose(fam.token_nlls(model, IDS), want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(
        fam.token_nlls(model, IDS), fam.token_nlls(model, IDS, ctx_len=ctx, stride=ctx // 2)
    )


@pytest.mark.parametrize("name", LM_FAMILIES)
def test_token_nlls_reads_a_memmap_token_file(name, trained, tmp_path: Path):
    fam = FAMILIES[name]
    model, _ = trained(name)
    mm = read_tokens(write_tokens(tmp_path / "ids.bin", IDS))
    assert isinstance(mm, np.memmap)
    np.testing.assert_array_equal(fam.token_nlls(model, mm), fam.token_nlls(model, IDS))


@pytest.mark.parametrize("name", LM_FAMILIES)
def test_loss_falls_on_a_tiny_batch(name, trained):
    if name in TRAINED_ELSEWHERE:
        pytest.skip(f"{name} is trained elsewhere")
    fam = FAMILIES[name]
    model, calls = trained(name)
    assert calls, "train must report progress"
    steps = [c[0] for c in calls]
    assert steps == list(range(1, len(calls) + 1))
    mean_nll = float(fam.token_nlls(model, IDS).mean())
    assert mean_nll < LN256 - 0.5, f"{name}: training NLL {mean_nll:.3f} vs uniform {LN256:.3f}"
    if len(calls) > 1:  # an optimizer: the reported loss falls within these few steps
        first, last = calls[0][2], calls[-1][2]
        assert last < first - 0.5, f"{name}: loss {first:.3f} -> {last:.3f}"


# ---------------------------------------------------------------------------- seq2seq kind

S2S_FAMILIES = sorted(n for n, f in FAMILIES.items() if getattr(f, "KIND", None) == "seq2seq")
PAIRS = [
    ("March 5, 2024", "5 mars 2024"),
    ("June 1, 1999", "1 juin 1999"),
    ("Afar", "afar"),
    ("Canada", "Canada"),
    ("Algeria", "Algérie"),
    ("", "vide"),
]


@pytest.fixture(scope="module")
def trained_s2s():
    """One tiny model per seq2seq family trained on PAIRS, with its progress calls."""
    return _trainer(lambda fam: PAIRS)


def test_seq2seq_families_are_registered():
    assert {"seq2seq", "transformer", "copy"} <= set(S2S_FAMILIES)


@pytest.mark.parametrize("name", S2S_FAMILIES)
def test_seq2seq_hooks_and_shapes(name, trained_s2s):
    fam = FAMILIES[name]
    for attr in ("encode", "decode_step", "translate", "translate_ids"):
        assert callable(getattr(fam, attr, None)), f"{name} lacks {attr}"
    model, _ = trained_s2s(name)
    srcs = [s for s, _ in PAIRS]
    with torch.inference_mode():
        state = fam.encode(model, encode_sources(srcs, model.cfg.max_len))
        prev = torch.full((len(srcs),), BOS)
        for _ in range(3):
            logp, state = fam.decode_step(model, state, prev)
            assert tuple(logp.shape) == (len(srcs), VOCAB_WITH_SPECIALS)
            # normalized over the vocabulary: log sum exp = 0 for every row
            torch.testing.assert_close(
                torch.logsumexp(logp.double(), dim=-1),
                torch.zeros(len(srcs), dtype=torch.float64),
                atol=1e-5,
                rtol=0,
            )
            prev = logp.argmax(-1)
    out = fam.translate(model, srcs, beam=2)
    assert isinstance(out, list) and len(out) == len(srcs)
    assert all(isinstance(t, str) for t in out)
    assert fam.translate(model, [], beam=2) == []


# the families whose Model reads (src, tgt_in) in one teacher-forced pass (copy has no network)
TAUGHT_S2S = sorted(n for n in S2S_FAMILIES if FAMILIES[n].Model.forward is not nn.Module.forward)
SRCS = ["March 5, 2024", "a", "Côte d’Ivoire", ""]
TGTS = ["5 mars 2024", "", "Côte d’Ivoire", "xyz"]


def _stepwise_logp(fam, model, srcs, tgts):
    """log p of each target position by ``decode_step``, fed the gold prefix: ([B, T, V],
    the decoder input ``BOS <bytes>`` [B, T])."""
    src = encode_sources(srcs, model.cfg.max_len)
    tgt_in, _ = encode_targets(tgts, model.cfg.max_len)
    state = fam.encode(model, src)
    out = []
    with torch.inference_mode():
        for t in range(tgt_in.shape[1]):
            logp, state = fam.decode_step(model, state, tgt_in[:, t])
            out.append(logp)
    return torch.stack(out, dim=1), tgt_in


def test_seq2seq_families_with_a_network_are_known():
    assert {"seq2seq", "transformer"} <= set(TAUGHT_S2S) and "copy" not in TAUGHT_S2S


@pytest.mark.parametrize("name", TAUGHT_S2S)
def test_seq2seq_teacher_forcing_equals_decoding_step_by_step(name, trained_s2s):
    fam = FAMILIES[name]
    model, _ = trained_s2s(name)
    step, tgt_in = _stepwise_logp(fam, model, SRCS, TGTS)
    with torch.inference_mode():
        src = encode_sources(SRCS, model.cfg.max_len)
        tf = torch.log_softmax(model(src, tgt_in), dim=-1)
    real = tgt_in != PAD  # positions past a row's end read padding: not compared
    torch.testing.assert_close(step[real], tf[real], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", TAUGHT_S2S)
def test_seq2seq_padding_is_invisible_to_a_source(name, trained_s2s):
    """A source decoded in a batch with longer ones gives the log-probs it gets alone."""
    fam = FAMILIES[name]
    model, _ = trained_s2s(name)
    batch, _ = _stepwise_logp(fam, model, SRCS, TGTS)
    for i, (s, t) in enumerate(zip(SRCS, TGTS, strict=True)):
        alone, tgt_in = _stepwise_logp(fam, model, [s], [t])
        torch.testing.assert_close(batch[i, : tgt_in.shape[1]], alone[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", TAUGHT_S2S)
def test_seq2seq_emits_only_bytes_and_eos(name, trained_s2s):
    fam = FAMILIES[name]
    model, _ = trained_s2s(name)
    logp, _ = _stepwise_logp(fam, model, SRCS, TGTS)
    for special in (PAD, BOS, MASK, CLS):
        assert torch.isneginf(logp[..., special]).all()
    assert torch.isfinite(logp[..., :256]).all() and torch.isfinite(logp[..., EOS]).all()
    # each row is a distribution over the 257 ids that can be emitted
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(logp.shape[:2]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", S2S_FAMILIES)
def test_seq2seq_save_load_gives_identical_decodes(name, trained_s2s, tmp_path: Path):
    fam = FAMILIES[name]
    model, _ = trained_s2s(name)
    loaded = _save_load(fam, model, tmp_path)
    srcs = [s for s, _ in PAIRS]
    for beam in (1, 3):
        assert fam.translate_ids(loaded, srcs, beam=beam) == fam.translate_ids(
            model, srcs, beam=beam
        )
    for (k, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("name", S2S_FAMILIES)
def test_seq2seq_loss_falls_on_a_tiny_batch(name, trained_s2s):
    fam = FAMILIES[name]
    model, calls = trained_s2s(name)
    if name == "copy":  # nothing to learn: it answers the source whatever it was trained on
        # one progress call: its training error, the share of pairs whose target is not the source
        err = sum(s != t for s, t in PAIRS) / len(PAIRS)
        assert calls == [(1, 1, err)]
        assert fam.translate(model, [s for s, _ in PAIRS]) == [s for s, _ in PAIRS]
        return
    assert [c[0] for c in calls] == list(range(1, len(calls) + 1))
    first, last = calls[0][2], calls[-1][2]
    assert last < first - 1.0, f"{name}: loss {first:.3f} -> {last:.3f}"


# ---- embeddings (word2vec): save -> load gives identical vectors; the loss falls ---------------

EMB_FAMILIES = sorted(n for n, f in FAMILIES.items() if getattr(f, "KIND", None) == "embeddings")


@pytest.fixture(scope="module")
def trained_emb():
    """One tiny trained model per embeddings family (on TEXT's words), with its progress calls."""
    from tinyllm.data import tokenize_words

    sentences = [tokenize_words(s) for s in TEXT.split(".") if tokenize_words(s)]
    return _trainer(lambda fam: sentences)


@pytest.mark.parametrize("name", EMB_FAMILIES)
def test_embeddings_save_load_gives_identical_vectors(name, trained_emb, tmp_path: Path):
    fam = FAMILIES[name]
    model, _ = trained_emb(name)
    loaded = _save_load(fam, model, tmp_path)
    vecs, got = fam.vectors(model), fam.vectors(loaded)
    assert list(got) == list(vecs) and "fox" in vecs
    for w, v in vecs.items():
        assert v.ndim == 1 and v.dtype == np.float32
        np.testing.assert_array_equal(got[w], v)
    assert fam.similarity(loaded, "fox", "dog") == fam.similarity(model, "fox", "dog")
    assert fam.similarity(loaded, "fox", "not-a-word") is None


@pytest.mark.parametrize("name", EMB_FAMILIES)
def test_embeddings_loss_falls_on_a_tiny_batch(name, trained_emb):
    _, calls = trained_emb(name)
    assert [c[0] for c in calls] == list(range(1, len(calls) + 1)) and len(calls) > 1
    first, last = calls[0][2], calls[-1][2]
    assert last < first - 0.5, f"{name}: loss {first:.3f} -> {last:.3f}"


# ---- encoder kinds (mlm, rtd, classifier): bytes or rows in, [CLS] bytes batches -------------

ENCODER_KINDS = ("mlm", "rtd", "classifier")
ENCODER_FAMILIES = sorted(
    n for n, f in FAMILIES.items() if getattr(f, "KIND", None) in ENCODER_KINDS
)
# classifier rows from TEXT's words: short (<= 3 bytes) or long
ROWS = [(w, "short" if len(w) <= 3 else "long") for w in TEXT.split()]


@pytest.fixture(scope="module")
def trained_enc():
    """One tiny model per encoder family (a classifier on ROWS, the others on IDS)."""
    return _trainer(lambda fam: ROWS if fam.KIND == "classifier" else IDS)


def _enc_batch(cfg) -> torch.Tensor:
    from tinyllm.tokens import encode_batch

    ids, _ = encode_batch(["the fox", "a bushfire burns near the town"], cls=True, max_len=24)
    return torch.from_numpy(ids)


def test_encoder_families_are_registered():
    assert {"bert", "electra", "classifier"} <= set(ENCODER_FAMILIES)


@pytest.mark.parametrize("name", ENCODER_FAMILIES)
def test_encoder_output_shapes(name, trained_enc):
    fam = FAMILIES[name]
    model, _ = trained_enc(name)
    ids = _enc_batch(model.cfg)
    with torch.inference_mode():
        out = model(ids)
    if fam.KIND == "classifier":
        want = (2, len(model.labels))  # one logit per label
    else:  # mlm: byte logits at every position; rtd: one "replaced" logit per position
        want = (2, ids.shape[1], 256) if fam.KIND == "mlm" else (2, ids.shape[1])
    assert tuple(out.shape) == want
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ENCODER_FAMILIES)
def test_encoder_save_load_gives_identical_outputs(name, trained_enc, tmp_path: Path):
    fam = FAMILIES[name]
    model, _ = trained_enc(name)
    loaded = _save_load(fam, model, tmp_path)
    ids = _enc_batch(model.cfg)
    with torch.inference_mode():
        torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)


@pytest.mark.parametrize("name", ENCODER_FAMILIES)
def test_encoder_loss_falls_on_a_tiny_batch(name, trained_enc):
    _, calls = trained_enc(name)
    assert [c[0] for c in calls] == list(range(1, len(calls) + 1)) and len(calls) > 10
    first = float(np.mean([c[2] for c in calls[:5]]))
    last = float(np.mean([c[2] for c in calls[-5:]]))
    assert last < 0.8 * first, f"{name}: loss {first:.3f} -> {last:.3f}"
