"""The instrument on every Hugging Face architecture a user brings, against a float64 oracle.

Each model is a tiny random config built with transformers (hidden 32, 2 layers, vocab 100,
128 positions, seed fixed): GPT-2, Llama (tied embeddings; grouped-query attention), Mistral
with a 16-token sliding window, Qwen2 with ``use_sliding_window``, GPT-NeoX, OPT, Phi, Gemma and
Gemma 2 (local layers and logit soft-capping). The oracle is written here: the model copied to
float64, one plain forward pass per strided window (docs/definitions.md, bits per byte and text in) or per context + choice
(section 3, lm-eval's truncation), log-softmax in float64. The instrument, in float32, must give
the same per-token NLLs and per-choice LLs within 1e-5 -- on a task whose contexts are longer
than the sliding windows, so a cache that does not apply the window is caught.
"""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch

from tinyllm import device as devices
from tinyllm.eval import lm
from tinyllm.logits import Head
from tinyllm.models import hf

transformers = pytest.importorskip("transformers")

V, P = 100, 128
COMMON = dict(
    vocab_size=V,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=P,
)


def _llama(**kw):
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**COMMON, **kw}))


ARCHS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=V,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=P,
            bos_token_id=0,
            eos_token_id=0,
        )
    ),
    "llama-tied": lambda: _llama(tie_word_embeddings=True),
    "llama-gqa": lambda: _llama(num_key_value_heads=2),
    "mistral-window16": lambda: transformers.MistralForCausalLM(
        transformers.MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=16)
    ),
    "qwen2-sliding": lambda: transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(
            **COMMON,
            num_key_value_heads=2,
            use_sliding_window=True,
            sliding_window=16,
            max_window_layers=1,
        )
    ),
    "gpt-neox": lambda: transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**COMMON)),
    "opt": lambda: transformers.OPTForCausalLM(
        transformers.OPTConfig(
            vocab_size=V,
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=P,
            word_embed_proj_dim=32,
        )
    ),
    "phi": lambda: transformers.PhiForCausalLM(transformers.PhiConfig(**COMMON)),
    "gemma": lambda: transformers.GemmaForCausalLM(
        transformers.GemmaConfig(**COMMON, num_key_value_heads=1, head_dim=8)
    ),
    "gemma2-local-softcap": lambda: transformers.Gemma2ForCausalLM(
        transformers.Gemma2Config(**COMMON, num_key_value_heads=1, head_dim=8, sliding_window=16)
    ),
}


def build(name: str, seed: int = 0):
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on the tiny configs
        model = ARCHS[name]()
    model.eval()
    # random init leaves some models nearly uniform; larger weights make wrong contexts visible
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.mul_(4.0)
    return model


class IdTok:
    """Whitespace-separated ids (the items below are written in token ids)."""

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


def items_crossing_window(seed: int, n: int = 12) -> list[dict]:
    """Items whose context + choice runs from 3 to 90 tokens: most are longer than the
    16-token windows, the first three short (the requests the cache check's probe reads first)."""
    rng = np.random.default_rng(seed)
    lens = [3, 4, 5, *rng.integers(6, 80, n - 3).tolist()]
    out = []
    for n_ctx in lens:
        ctx = " ".join(map(str, rng.integers(0, V, n_ctx)))
        choices = [" ".join(map(str, rng.integers(0, V, rng.integers(1, 9)))) for _ in range(3)]
        out.append({"context": ctx, "choices": choices})
    return out


def oracle_nlls(model64, ids: np.ndarray, C: int, s: int) -> np.ndarray:
    """docs/definitions.md, strided perplexity, one float64 window per forward pass."""
    out = np.full(ids.size - 1, np.nan)
    for a, e, first in lm.windows(ids.size, C, s):
        x = torch.as_tensor(ids[a:e])[None]
        with torch.no_grad():
            lp = torch.log_softmax(model64(x).logits[0].double(), dim=-1)
        for t in range(first, e):
            out[t - 1] = -float(lp[t - 1 - a, ids[t]])
    return out


def oracle_lls(model64, items: list[dict], L: int) -> list[np.ndarray]:
    """docs/definitions.md, multiple choice, one float64 forward pass per context + choice, lm-eval's truncation:
    the model reads ``(ctx + cont)[-(L+1):][:-1]``."""
    tok, out = IdTok(), []
    for it in items:
        ctx = tok.encode(it["context"])
        row = []
        for c in it["choices"]:
            cont = tok.encode(c)
            whole = (ctx + cont)[-(L + 1) :]
            x = torch.as_tensor(whole[:-1])[None]
            with torch.no_grad():
                lp = torch.log_softmax(model64(x).logits[0].double(), dim=-1)
            at = len(whole) - 1 - len(cont)  # the position before the first choice token
            row.append(math.fsum(float(lp[at + j, cont[j]]) for j in range(len(cont))))
        out.append(np.asarray(row))
    return out


@pytest.mark.parametrize("name", list(ARCHS))
def test_every_architecture_matches_the_float64_oracle(name):
    model = build(name)
    model64 = copy.deepcopy(model).double()
    ids = np.random.default_rng(1).integers(0, V, 150)
    got = lm.token_nlls(model, ids, 40, 20)
    np.testing.assert_allclose(got, oracle_nlls(model64, ids, 40, 20), rtol=0, atol=1e-5)

    items = items_crossing_window(2)
    with warnings.catch_warnings(action="error"):  # every path checks out silently
        lls = lm.choice_lls(model, IdTok(), items)
    want = oracle_lls(model64, items, P)
    for g, w in zip(lls, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    # truncation: contexts cut from the left to 24 tokens, longer than the 16-token windows
    with pytest.warns(UserWarning, match="^cut 437 context tokens from the left of 21 of 36"):
        lls24 = lm.choice_lls(model, IdTok(), items, max_len=24)
    for g, w in zip(lls24, oracle_lls(model64, items, 24), strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("name", "kind"), [("llama-gqa", "hf"), ("gemma2-local-softcap", "keep"), ("gpt2", "twin")]
)
def test_the_head_runs_only_at_scored_positions_through_a_view_that_reproduces_the_model(
    name, kind
):
    """Gemma 2 soft-caps its logits after the head: the hidden-state hook is refused and the
    model's own logits_to_keep is used (silently), never the full logits."""
    model = build(name)
    x = torch.as_tensor(np.random.default_rng(0).integers(0, V, (2, 20)))
    with warnings.catch_warnings(action="error"):
        assert Head(model, x, hf.views(model)).kind == kind


def test_the_sliding_window_repro_gives_the_plain_forward_lls():
    """Mistral, window 16, three short items then longer ones: the cached LLs are the plain
    forward's, so the cache neither skips the sliding window (LLs off by nats) nor fails on a
    context over window - 1 tokens."""
    model = build("mistral-window16", seed=3)
    items = items_crossing_window(4, n=10)
    cached = lm.choice_lls(model, IdTok(), items)
    plain = lm.choice_lls(model, IdTok(), items, cache="off")
    for a, b in zip(cached, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert lm.cache_verdicts(model) == {"hf": True}  # the short items still use the cache


@pytest.mark.parametrize(
    ("name", "window"),
    [
        ("mistral-window16", 16),
        ("qwen2-sliding", 16),
        ("gemma2-local-softcap", 16),
        ("llama-gqa", None),
        ("gpt2", None),
    ],
)
def test_attention_window_is_read_from_the_config(name, window):
    assert hf.attention_window(build(name)) == window


def test_attention_window_off_switches():
    qwen = transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(**COMMON, num_key_value_heads=2, sliding_window=16)
    )
    assert hf.attention_window(qwen) is None  # use_sliding_window defaults to False
    mistral = transformers.MistralForCausalLM(
        transformers.MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=None)
    )
    assert hf.attention_window(mistral) is None


@pytest.mark.parametrize(
    ("name", "cls", "field"),
    [
        ("llama-tied", "LlamaForCausalLM", "max_position_embeddings"),
        ("opt", "OPTForCausalLM", "max_position_embeddings"),
        ("gpt2", "GPT2LMHeadModel", "n_positions"),
        ("mistral-window16", "MistralForCausalLM", "max_position_embeddings"),
    ],
)
def test_a_context_over_the_models_is_refused_naming_its_class_and_limit(name, cls, field):
    model = build(name)
    ids = np.random.default_rng(0).integers(0, V, 300)
    want = f"{cls}: expected windows of at most {field}={P} tokens, got ctx_len=200"
    with pytest.raises(ValueError) as e:
        lm.token_nlls(model, ids, 200, 100)
    assert str(e.value) == want
    with pytest.raises(ValueError) as e:
        lm.eval_ppl(model, ids, 200, 100)
    assert str(e.value) == want
    with pytest.raises(ValueError, match=rf"^{cls} \({field}={P}\): max_len: expected at most"):
        lm.choice_lls(model, IdTok(), [{"context": "1 2", "choices": ["3"]}], max_len=200)
    # windows shorter than the limit because the text is: scored
    assert lm.token_nlls(model, ids[:100], 200, 100).shape == (99,)


# ---------------------------------------------------------------------- device and dtype


def test_the_device_and_dtype_rule():
    cpu = torch.device("cpu")
    assert devices.resolve_device("cpu") == cpu
    auto = devices.resolve_device("auto")
    assert auto == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert devices.resolve_dtype("auto", cpu, "bfloat16") is torch.float32
    assert devices.resolve_dtype("auto", "cuda", "bfloat16") is torch.bfloat16
    assert devices.resolve_dtype("auto", "cuda", "float32") is torch.float32
    assert devices.resolve_dtype("auto", "cuda", None) is torch.float32
    assert devices.resolve_dtype("float16", cpu) is torch.float16
    with pytest.raises(ValueError, match=r"^device: expected one of \['auto', 'cpu', 'cuda'"):
        devices.resolve_device("gpu")
    with pytest.raises(ValueError, match=r"^dtype: expected one of \['auto', 'float32', 'bf"):
        devices.resolve_dtype("fp8")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^device: expected a device this machine has, got"):
            devices.resolve_device("cuda:0")


def test_load_follows_the_rule_on_a_bfloat16_folder(tmp_path):
    model = build("llama-gqa").to(torch.bfloat16)
    hf.save(model, tmp_path / "bf16")
    assert {p.dtype for p in hf.load(tmp_path / "bf16").parameters()} == {torch.float32}
    got = hf.load(tmp_path / "bf16", device="cpu", dtype="bfloat16")
    assert {p.dtype for p in got.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in got.parameters()} == {"cpu"}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_uses_the_cache_whatever_the_item_order(dtype):
    """The cache check's tolerance follows the dtype's epsilon: bf16 / fp16 on CPU get the
    cached path for every order of the items (a fixed 1e-4 refused it in bf16 always)."""
    base = build("llama-gqa", seed=5)
    items = items_crossing_window(6, n=9)
    want = oracle_lls(copy.deepcopy(base).double(), items, P)
    rng = np.random.default_rng(0)
    for _ in range(4):
        order = rng.permutation(len(items))
        model = copy.deepcopy(base).to(dtype)
        with warnings.catch_warnings(action="error"):
            got = lm.choice_lls(model, IdTok(), [items[i] for i in order])
        assert lm.cache_verdicts(model) == {"hf": True}
        for g, i in zip(got, order, strict=True):  # log-softmax in float32: near the oracle
            np.testing.assert_allclose(g, want[i], rtol=0.05, atol=0.3)
