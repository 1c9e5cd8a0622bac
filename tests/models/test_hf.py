"""The hf family (tinyllm/models/hf.py): a local Hugging Face causal LM folder, loaded from
safetensors only, scored in strided windows; its views' pieces (the base model's last hidden
state, the cache layouts it reads) and the GPT-2 conversion to and from our GPT.

Oracles: transformers' own GPT2LMHeadModel, built from a small GPT2Config with random weights
(no download): our conversion must reproduce its logits to 1e-5; hand-built cache objects of
every transformers layout, whose (keys, values) are known exactly; the strided windows of
tinyllm.windows on the model itself. How the instrument uses the views (the "twin" / "hf"
hooks, the cached choices) is tested in tests/eval/lm/test_heads_hf.py and test_kvcache_hf.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types

import numpy as np
import pytest
import torch
from gpt_helpers import TINY, random_ids, randomize
from torch import nn

from tinyllm import windows
from tinyllm.checkpoint import CheckpointError
from tinyllm.models import gpt, hf

transformers = pytest.importorskip("transformers")


def _hf_model(tie: bool = True, act: str = "gelu_new"):
    hc = transformers.GPT2Config(
        vocab_size=256, n_positions=16, n_embd=16, n_layer=2, n_head=2,
        activation_function=act, tie_word_embeddings=tie, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    return randomize(transformers.GPT2LMHeadModel(hc))


def _gpt2(vocab: int = 97, n_positions: int = 32, seed: int = 0, layer_scaled: bool = False):
    """A small GPT2LMHeadModel with random weights (n_embd 32, 2 heads of 16, 2 layers);
    ``layer_scaled``: attention scaled by 1 / layer index, a variant our GPT does not run."""
    cfg = transformers.GPT2Config(
        vocab_size=vocab, n_positions=n_positions, n_embd=32, n_layer=2, n_head=2
    )
    torch.manual_seed(seed)
    m = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    if layer_scaled:
        m.config.scale_attn_by_inverse_layer_idx = True
        for block in m.transformer.h:
            block.attn.scale_attn_by_inverse_layer_idx = True
    return m.eval()


# ------------------------------------------------------------------------ the family's names


def test_the_family_names():
    assert (hf.ARCH, hf.KIND) == ("hf", "lm")
    for name in (
        "load",
        "save",
        "token_nlls",
        "context_length",
        "config_from",
        "views",
        "gpt2_twin",
    ):
        assert callable(getattr(hf, name)), name
    # trained elsewhere: no Config, Model or train of its own
    assert not any(hasattr(hf, name) for name in ("Config", "Model", "train"))


def test_config_from_wraps_a_hugging_face_config_only():
    doc = {"model_type": "gpt2", "n_positions": 8}
    assert hf.config_from(doc) == {"tl_arch": "hf", "format_version": 1, "config": doc}
    assert hf.config_from({"tl_arch": "gpt", "model_type": "gpt2"}) is None  # ours
    assert hf.config_from({"n_positions": 8}) is None  # no model_type
    assert hf.config_from({"model_type": 2}) is None  # not a string
    assert hf.config_from(["model_type"]) is None and hf.config_from(None) is None


# ----------------------------------------------------------------- loading: safetensors only


def test_check_weights_accepts_safetensors_and_refuses_pickles(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    with pytest.raises(CheckpointError) as e:
        hf.check_weights(d)
    assert str(e.value) == (
        f"{d}: expected Hugging Face weights in model.safetensors (safetensors; tinyllm never "
        "unpickles weights), got no weights file"
    )
    (d / "pytorch_model.bin").write_bytes(b"not read")
    (d / "tf_model.h5").write_bytes(b"not read")
    with pytest.raises(CheckpointError, match="got only pytorch_model.bin, tf_model.h5$"):
        hf.check_weights(d)
    (d / "model.safetensors.index.json").write_text("{}")  # a sharded checkpoint
    assert hf.check_weights(d) == d
    (d / "model.safetensors").write_bytes(b"")
    assert hf.check_weights(d) == d


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_check_weights_refuses_a_fifo_at_once(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    os.mkfifo(d / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model.safetensors: expected a regular file, got"):
        hf.check_weights(d)


def test_load_reads_float32_by_default_and_the_folders_own_dtype_on_request(tmp_path):
    model = _gpt2(vocab=256)
    hf.save(model.half(), tmp_path / "hf16")
    assert {p.dtype for p in hf.load(tmp_path / "hf16").parameters()} == {torch.float32}
    own = hf.load(tmp_path / "hf16", dtype=None, quiet=True)
    assert {p.dtype for p in own.parameters()} == {torch.float16}
    assert not own.training


def test_save_then_load_gives_the_same_logits(tmp_path):
    model = _gpt2(vocab=256)
    assert hf.save(model, tmp_path / "hf") == tmp_path / "hf"
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    idx = random_ids(2, 12)
    with torch.inference_mode():
        torch.testing.assert_close(
            hf.load(tmp_path / "hf")(idx).logits, model(idx).logits, rtol=0, atol=0
        )


def test_load_tokenizer_names_a_missing_or_unreadable_tokenizer(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    with pytest.raises(hf.MissingTokenizerError) as e:
        hf.load_tokenizer(d)
    assert str(e.value) == (
        f"{d}: expected a tokenizer in the folder (one of ['tokenizer.json', "
        "'tokenizer_config.json', 'vocab.json', 'tokenizer.model']), got none"
    )
    (d / "tokenizer.json").write_text("not a tokenizer")
    with pytest.raises(ValueError, match=f"^{d}: expected a readable tokenizer, got: "):
        hf.load_tokenizer(d)


def test_load_tokenizer_reads_the_folders_own(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=280, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["a bb c", "the cat sat on the mat"] * 20, trainer)
    transformers.PreTrainedTokenizerFast(tokenizer_object=bpe).save_pretrained(tmp_path / "hf")
    tok = hf.load_tokenizer(tmp_path / "hf")
    assert tok.encode("the cat") == bpe.encode("the cat").ids


# ------------------------------------------------------------------------------- scoring


def test_context_length_reads_the_first_usable_field():
    ns = types.SimpleNamespace
    assert hf.context_length(ns(config=ns(n_positions=3, max_position_embeddings=9))) == 3
    assert hf.context_length(ns(config=ns(max_position_embeddings=4, n_ctx=8))) == 4
    assert hf.context_length(ns(config=ns(n_ctx=5))) == 5
    m = ns(config=ns(n_positions=None, max_position_embeddings=1, n_ctx=12))
    assert (hf.context_length(m), hf.context_length(m, at_least=2)) == (1, 12)
    assert hf.context_length(ns(config=ns(n_positions=True, n_ctx=6))) == 6  # a bool is no length
    assert hf.context_length(ns(config=ns())) is None
    assert hf.context_length(ns()) is None  # no config at all


def test_token_nlls_are_the_strided_windows_of_the_model():
    """Defaults: ctx_len = n_positions, stride = ctx_len // 2; the views score the head only
    where tokens are scored and agree with the model's own full logits."""
    model = _gpt2(vocab=256, n_positions=32)
    ids = np.random.default_rng(3).integers(0, 256, size=90)
    got = hf.token_nlls(model, ids)
    assert got.dtype == np.float64 and got.shape == (89,)
    full = windows.token_nlls(lambda x: model(x).logits, ids, 32, 16)  # no views: full logits
    np.testing.assert_allclose(got, full, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(got, hf.token_nlls(model, ids, ctx_len=32, stride=16))
    other = hf.token_nlls(model, ids, ctx_len=20, stride=7, batch_size=1)
    np.testing.assert_allclose(other, windows.token_nlls(model, ids, 20, 7), rtol=0, atol=1e-5)
    done = []
    hf.token_nlls(model, ids, progress=lambda d, t: done.append((d, t)))
    assert done[-1] == (89, 89)


def test_token_nlls_refuses_a_vocabulary_under_256_byte_ids():
    with pytest.raises(ValueError) as e:
        hf.token_nlls(_gpt2(vocab=97), np.arange(10))
    assert str(e.value) == (
        "hf model: expected a vocabulary of at least 256 ids (the data are byte ids 0..255), "
        "got vocab_size=97"
    )


# ------------------------------------------------------------------- the views of a model


def test_views_of_a_gpt2_a_variant_and_other_models():
    model = _gpt2()
    assert [tag for tag, _ in hf.views(model)] == ["twin", "hf"]
    twin, base = (v for _, v in hf.views(model))
    assert isinstance(twin, gpt.Model) and twin is hf.gpt2_twin(model)
    assert base.lm_head is model.get_output_embeddings() and base.base is model.transformer
    assert isinstance(base.cache_engine(), hf.CacheEngine)
    assert [tag for tag, _ in hf.views(_gpt2(layer_scaled=True))] == ["hf"]  # no twin
    assert hf.views(gpt.Model(TINY)) == [] and hf.views(nn.Linear(2, 2)) == []


def test_last_hidden_runs_the_base_model_without_a_kv_cache():
    """last_hidden's documented contract: the last hidden state, no KV cache built."""
    model = _gpt2(layer_scaled=True)
    x = torch.tensor([[5, 3, 9, 2, 7, 1]])
    outs = []
    model.transformer.register_forward_hook(lambda m, a, o: outs.append(o))
    with torch.inference_mode():
        h = hf.last_hidden(model.transformer, x)
        want = model.transformer(input_ids=x, use_cache=False).last_hidden_state
    torch.testing.assert_close(h, want, rtol=0, atol=0)
    assert getattr(outs[0], "cache", None) is None
    assert getattr(outs[0], "past_key_values", None) is None


def _pairs(n_layer: int = 2):
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 2, 3, 4, generator=g))
        for _ in range(n_layer)
    ]


def test_cache_kv_reads_every_transformers_cache_layout():
    """transformers >= 4.56: ``cache.layers[i].keys/.values``; 4.36 - 4.55:
    ``cache.key_cache[i]/.value_cache[i]``; before: a tuple of (k, v) per layer. Hand-built
    objects of exactly that shape (no other attribute, not iterable): the very tensors back."""
    pairs = _pairs()
    layouts = {
        "layers": types.SimpleNamespace(
            layers=[types.SimpleNamespace(keys=k, values=v) for k, v in pairs]
        ),
        "key_cache": types.SimpleNamespace(
            key_cache=[k for k, _ in pairs], value_cache=[v for _, v in pairs]
        ),
        "legacy": tuple(pairs),
        "legacy-3": tuple((k, v, None) for k, v in pairs),  # some models add a third item
    }
    for name, cache in layouts.items():
        got = hf.cache_kv(cache)
        assert len(got) == len(pairs), name
        for (k, v), (gk, gv) in zip(pairs, got, strict=True):
            assert gk is k and gv is v, name


def test_cache_kv_of_the_installed_transformers_equals_its_cache_contents():
    """The layout this transformers produces, read back: per layer [B, H, S, Dh], equal to
    the keys/values of a second cache filled by hand with DynamicCache.update."""
    model = _gpt2()
    x = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.inference_mode():
        out = model.transformer(input_ids=x, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    got = hf.cache_kv(cache)
    assert len(got) == model.config.n_layer
    again = transformers.DynamicCache()
    for i, (k, v) in enumerate(got):
        assert tuple(k.shape) == (1, 2, 5, 16) and tuple(v.shape) == (1, 2, 5, 16)
        again.update(k, v, i)
    torch.testing.assert_close(hf.cache_kv(again), got, rtol=0, atol=0)


def test_cache_kv_refuses_key_and_value_lists_of_different_lengths():
    """A malformed cache is an error, not silently fewer layers."""
    pairs = _pairs(3)
    cache = types.SimpleNamespace(key_cache=[k for k, _ in pairs], value_cache=[pairs[0][1]])
    with pytest.raises(ValueError):
        hf.cache_kv(cache)


# ----------------------------------------------------------- GPT-2 to and from our GPT


def test_load_hf_gpt2_share_copies_nothing():
    """share=True: every parameter is a view of the HF tensor (Conv1D seen transposed), the
    logits equal HF's, and an in-place change of HF's weights shows in ours."""
    model = _hf_model(tie=True)
    m = hf.load_hf_gpt2(model, share=True)
    hw = model.transformer.h[1].mlp.c_fc.weight  # [in, out]
    assert m.h[1].mlp.c_fc.weight.data_ptr() == hw.data_ptr()
    assert m.h[1].mlp.c_fc.weight.shape == hw.shape[::-1]
    assert m.lm_head.weight is m.wte.weight
    idx = random_ids(2, 10, V=model.config.vocab_size)
    with torch.inference_mode():
        torch.testing.assert_close(m(idx)[0], model(idx).logits, rtol=0, atol=1e-5)
        hw.mul_(1.5)
        torch.testing.assert_close(m(idx)[0], model(idx).logits, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="float32"):
        hf.load_hf_gpt2(_hf_model(tie=True).double(), share=True)


@pytest.mark.parametrize("tie, act", [(True, "gelu_new"), (False, "gelu")])
def test_load_hf_gpt2_matches_hf_logits(tie, act):
    model = _hf_model(tie, act)
    m = hf.load_hf_gpt2(model)
    assert m.cfg.tie_weights is tie
    assert m.cfg.activation == ("gelu_tanh" if act == "gelu_new" else "gelu")
    idx = random_ids(2, 16)
    with torch.no_grad():
        want = model(idx).logits
    torch.testing.assert_close(m(idx)[0], want, rtol=0, atol=1e-5)


def test_load_hf_gpt2_from_folder_and_refusals(tmp_path):
    model = _hf_model()
    model.save_pretrained(str(tmp_path / "hf"))
    m = hf.load_hf_gpt2(tmp_path / "hf")
    idx = random_ids(1, 16)
    with torch.no_grad():
        torch.testing.assert_close(m(idx)[0], model(idx).logits, rtol=0, atol=1e-5)
    odd = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=256, n_positions=8, n_embd=8, n_layer=1, n_head=2,
            scale_attn_by_inverse_layer_idx=True,
        )
    )  # fmt: skip
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        hf.load_hf_gpt2(odd)
    with pytest.raises(CheckpointError, match="config.json"):
        hf.load_hf_gpt2(tmp_path / "nowhere")


@pytest.mark.parametrize("tie, bias", [(True, True), (False, False)])
def test_export_hf_round_trip_through_auto_model(tmp_path, tie, bias):
    cfg = dataclasses.replace(TINY, tie_weights=tie, bias=bias)
    m = randomize(gpt.Model(cfg))
    hf.export_hf(m, tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "hf"), local_files_only=True
    ).eval()
    assert type(model).__name__ == "GPT2LMHeadModel"
    idx = random_ids(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(idx).logits, m(idx)[0], rtol=0, atol=1e-5)
    # and back again: ours -> HF -> ours is the identity on logits
    back = hf.load_hf_gpt2(tmp_path / "hf")
    torch.testing.assert_close(back(idx)[0], m(idx)[0], rtol=0, atol=1e-5)
    # the folder is the hf family's: the zoo sees it as one
    doc = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf.config_from(doc)["tl_arch"] == "hf"
