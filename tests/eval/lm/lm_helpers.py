"""Models, tokenizers, oracles and items shared by the instrument's tests (tests/eval/lm/).

The oracles: docs/definitions.md, strided perplexity one window per forward pass from a model's full logits
(:func:`reference_nlls`), and section 3 with lm-eval's truncation one choice per forward pass
(:func:`oracle_lls`); the models are built so that their NLLs reveal their context (docs/definitions.md's
worked examples) or have random weights (no download). Models that need transformers skip the
test calling them when it is not installed.
"""

from __future__ import annotations

import json
import math
import types
import warnings

import numpy as np
import pytest
import torch
from hypothesis import strategies as st

from tinyllm.eval import lm
from tinyllm.models import gpt

try:  # bound once: a test may replace sys.modules["transformers"] while it builds a model
    import transformers
except ImportError:  # the models below need it; the tests calling them are skipped
    transformers = None


def _need_transformers() -> None:
    if transformers is None:
        pytest.skip("transformers is not installed")


# ------------------------------------- docs/definitions.md, bits per byte and text in: models whose NLLs reveal their context


class RevealingModel:
    """Gives the true next token probability 1/(j+2) at window position j (docs/definitions.md, strided perplexity).

    The sequence is ``0, 1, 2, ...`` modulo ``V``, so the true next token after id ``i`` is
    ``(i + 1) % V``; the rest of the mass is spread evenly. Records every window it is called on.
    """

    def __init__(self, V: int = 11) -> None:
        self.V = V
        self.calls: list[list[int]] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        self.calls.extend(row.tolist() for row in ids)
        pt = 1.0 / (torch.arange(T, dtype=torch.float64) + 2.0)  # [T]
        p = ((1.0 - pt) / (self.V - 1))[None, :, None].expand(B, T, self.V).clone()
        p.scatter_(2, ((ids + 1) % self.V)[..., None], pt[None, :, None].expand(B, T, 1).clone())
        return p.log()  # [B, T, V] log-probabilities are valid logits


def revealing_logits(ids: torch.Tensor, V: int = 11) -> torch.Tensor:
    """True next token (id + 1) % V gets probability 1/(j+2) at window position j (docs/definitions.md, strided perplexity)."""
    B, T = ids.shape
    pt = 1.0 / (torch.arange(T, dtype=torch.float64) + 2.0)
    p = ((1.0 - pt) / (V - 1))[None, :, None].expand(B, T, V).clone()
    p.scatter_(2, ((ids + 1) % V)[..., None], pt[None, :, None].expand(B, T, 1).clone())
    return p.log()


class Revealing:
    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return revealing_logits(ids)


@st.composite
def window_settings(draw, max_n=3000, max_c=400):
    ctx_len = draw(st.integers(2, max_c))
    stride = draw(st.integers(1, ctx_len - 1))
    n = draw(st.integers(2, max_n))
    return n, ctx_len, stride


def reference_nlls(model, ids: np.ndarray, C: int, s: int) -> np.ndarray:
    """docs/definitions.md, strided perplexity written out independently: one window per forward pass, full logits."""
    n = len(ids)
    out = np.full(n - 1, np.nan)
    prev_end = 0
    for begin in range(0, n, s):
        end = min(begin + C, n)
        x = torch.as_tensor(ids[begin:end], dtype=torch.long)[None]
        with torch.no_grad():
            lp = torch.log_softmax(model(x).logits[0].double(), dim=-1)
        for t in range(max(prev_end, 1), end):
            out[t - 1] = -lp[t - 1 - begin, int(ids[t])].item()
        prev_end = end
        if end == n:
            break
    return out


def ref_nlls(fn, ids: np.ndarray, C: int, s: int) -> np.ndarray:
    """docs/definitions.md, strided perplexity from ``fn(x)`` = full logits, one window per pass, float64."""
    return reference_nlls(lambda x: types.SimpleNamespace(logits=fn(x)), ids, C, s)


IDS = np.random.default_rng(7).integers(0, 23, size=60)


# ------------------------------------------- docs/definitions.md, multiple choice: the bigram of the worked example


def spec_choice_table() -> torch.Tensor:
    """Bigram table of docs/definitions.md, multiple choice: p(b|a) = 0.4, p(c|a) = 0.45, p(b|b) = 0.9."""
    V = 256
    P = torch.full((V, V), 1.0 / V, dtype=torch.float64)
    a, b, c = ord("a"), ord("b"), ord("c")
    P[a] = 0.15 / (V - 2)
    P[a, b], P[a, c] = 0.4, 0.45
    P[b] = 0.1 / (V - 1)
    P[b, b] = 0.9
    return P


class TableModel:
    """Logits = log P[previous token]: a bigram given as a table. Records the sequences seen."""

    def __init__(self, P: torch.Tensor) -> None:
        self.logP = P.log()
        self.calls: list[list[int]] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.calls.extend(row.tolist() for row in ids)
        return self.logP[ids]  # [B, T, V]


def table_token_nlls(model: TableModel, ids) -> np.ndarray:
    """A family-style ``token_nlls`` for the table model (count-based families look like this)."""
    a = np.asarray(ids, dtype=np.int64)
    return -model.logP[a[:-1], a[1:]].numpy()


class Table(TableModel):
    """The table model on docs/definitions.md, multiple choice's bigram."""

    def __init__(self) -> None:
        super().__init__(spec_choice_table())


LN = math.log
# docs/definitions.md, multiple choice: "bb", "c" after "a"
SPEC_S3_LL = [LN(0.4) + LN(0.9), LN(0.45)]


ITEMS = [
    {"context": "a", "choices": ["bb", "c"], "gold": 0},
    {"context": "a", "choices": ["c", "bb"], "gold": 0},
]


TASK = [
    {"context": "a", "choices": ["bb", "c"], "gold": 0},  # acc wrong, acc_norm right
    {"context": "a", "choices": ["d", "e"], "gold": 1},  # a tie: goes to the first -> wrong
    {"context": "a", "choices": ["d", "e"], "gold": 0, "id": "tie-right"},
    {"context": "b", "choices": ["c", "b"], "gold": 1},  # p(b|b) = 0.9: right
]


def write_task(path, items) -> str:
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    return str(path)


# ------------------------ random-weight models (no download) and the one-choice-at-a-time oracle


def tiny_gpt2(
    vocab: int = 97, n_positions: int = 64, seed: int = 0, dropout: float = 0.0, eot: int = 0
):
    """A small GPT2LMHeadModel (hidden 32, 2 layers) with random weights large enough that
    context matters; ``eot`` is its bos and eos id."""
    _need_transformers()
    cfg = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=n_positions,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=eot,
        eos_token_id=eot,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    torch.manual_seed(seed)
    m = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m.eval()


class IdTok:
    """A tokenizer over text that is a space-separated list of ids: "3 17 5" -> [3, 17, 5]."""

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


def oracle_lls(model, items, L: int) -> list[np.ndarray]:
    tok = IdTok()
    out = []
    for it in items:
        ctx = tok.encode(it["context"])
        lls = []
        for ch in it["choices"]:
            cont = tok.encode(ch)
            fed = (ctx + cont)[-(L + 1) :][:-1]
            with torch.inference_mode():
                o = model(torch.tensor([fed]))
                logits = o.logits if hasattr(o, "logits") else o[0]
            lp = torch.log_softmax(logits[0].double(), dim=-1)
            n = len(cont)
            pos = torch.arange(len(fed) - n, len(fed))  # cont token j is read at the one before
            lls.append(float(lp[pos, torch.tensor(cont)].sum()))
        out.append(np.asarray(lls))
    return out


def random_items(seed: int, n: int, V: int, ctx_range=(1, 20), cont_range=(1, 6), k=4):
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        ctx = rng.integers(0, V, rng.integers(*ctx_range))
        choices = [
            " ".join(map(str, rng.integers(0, V, rng.integers(*cont_range)))) for _ in range(k)
        ]
        items.append({"context": " ".join(map(str, ctx)), "choices": choices, "gold": 0})
    return items


def our_gpt(block: int = 32, seed: int = 0) -> gpt.Model:
    torch.manual_seed(seed)
    m = gpt.Model(gpt.Config(block_size=block, n_layer=2, n_head=2, n_embd=32))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m.eval()


def hf_gpt2(n_positions: int = 32, seed: int = 0):
    _need_transformers()
    cfg = transformers.GPT2Config(
        vocab_size=97, n_positions=n_positions, n_embd=32, n_layer=2, n_head=2
    )
    torch.manual_seed(seed)
    m = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m.eval()


def hf_gpt2_layer_scaled(seed: int = 0):
    """A GPT-2 variant our GPT does not implement (attention scaled by 1 / layer index): no
    twin, so choices are scored from the HF model's own cache (past_key_values)."""
    m = hf_gpt2(seed=seed)
    m.config.scale_attn_by_inverse_layer_idx = True
    for block in m.transformer.h:
        block.attn.scale_attn_by_inverse_layer_idx = True
    return m


MODELS = {"gpt": lambda: our_gpt(), "hf": lambda: hf_gpt2(), "hf-own-cache": hf_gpt2_layer_scaled}


# which cached path each model's choices take (lm.cache_verdicts after a call)
CACHE_PATH = {"gpt": {"gpt": True}, "hf": {"twin": True}, "hf-own-cache": {"hf": True}}


def vocab_of(model) -> int:
    cfg = getattr(model, "cfg", None) or model.config
    return cfg.vocab_size


def assert_oracle(model, items, got, L: int = 32, atol: float = 1e-4) -> None:
    want = oracle_lls(model, items, L)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=atol)


def silent_choice_lls(model, items, **kw):
    """choice_lls with every warning an error: the cached path must pass its own check."""
    with warnings.catch_warnings(action="error"):
        return lm.choice_lls(model, IdTok(), items, **kw)


def ids_item(ctx, choices, gold: int = 0) -> dict:
    return {
        "context": " ".join(map(str, ctx)),
        "choices": [" ".join(map(str, c)) for c in choices],
        "gold": gold,
    }


class Calls:
    """Records our GPT's ``hidden_cached`` calls: (ids fed, whether a cache was passed)."""

    def __init__(self, model: gpt.Model) -> None:
        self.model, self.calls = model, []

    def __call__(self, idx, past=None, **kw):
        self.calls.append((idx.clone(), past is not None))
        return gpt.Model.hidden_cached(self.model, idx, past, **kw)
