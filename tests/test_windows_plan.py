"""The one window rule (tinyllm.windows.resolve_windows): the windows a model is scored in, and
the refusal of window options for a family without windows, are the same from the CLI
(tinyllm.eval.single), the zoo (tinyllm.eval.kinds.lm) and the families' own token_nlls."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyllm import windows
from tinyllm.eval import single, zoo
from tinyllm.eval.kinds import lm as lm_kind
from tinyllm.models import FAMILIES, bigram, gpt
from tinyllm.models import hf as hf_family
from tinyllm.report import Entry
from tinyllm.tokens import write_tokens
from tinyllm.windows import WindowPlan, default_stride, resolve_windows, window_plan

HERE = str(Path(__file__).parent)  # an existing folder: open_lm's "hf" folder (load is faked)
N = 40  # tokens of the text the windows are cut from


def _gpt(block_size: int) -> gpt.Model:
    torch.manual_seed(0)
    cfg = gpt.Config(block_size=block_size, n_layer=1, n_head=1, n_embd=8)
    return gpt.Model(cfg).eval()


# ---- the arithmetic ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "ctx_len", "stride", "want"),
    [
        (32, None, None, (32, 16)),  # the model's context, half of it
        (32, 20, None, (20, 10)),
        (32, 20, 19, (20, 19)),
        (32, 3, None, (3, 1)),  # 3 // 2 = 1
        (32, 2, None, (2, 1)),  # the smallest window: max(1, 1) = 1
        (2, None, None, (2, 1)),
    ],
)
def test_the_plan_is_the_models_context_and_half_of_it_by_default(block, ctx_len, stride, want):
    plan = resolve_windows(gpt, _gpt(block), ctx_len, stride)
    assert plan == WindowPlan(*want)


@settings(max_examples=200, deadline=None)
@given(
    own=st.one_of(st.none(), st.integers(1, 64)),
    ctx_len=st.one_of(st.none(), st.integers(-2, 80)),
    stride=st.one_of(st.none(), st.integers(-2, 80)),
)
def test_a_plan_is_the_given_or_default_windows_or_a_value_error(own, ctx_len, stride):
    model = SimpleNamespace(cfg=SimpleNamespace(block_size=own))  # our GPT's context field
    c = own if ctx_len is None else ctx_len
    s = (max(1, c // 2) if c is not None else None) if stride is None else stride
    ok = c is not None and c >= 2 and (own is None or c <= own) and 1 <= s < c
    if ok:
        assert window_plan(model, ctx_len, stride) == WindowPlan(c, s)
        assert default_stride(c) == max(1, c // 2)
    else:
        with pytest.raises(ValueError):
            window_plan(model, ctx_len, stride)


def test_the_refusals_name_the_option_the_model_and_its_limit():
    with pytest.raises(ValueError) as e:
        window_plan(_gpt(16), 17, None, options=("--ctx-len", "--stride"))
    assert str(e.value) == (
        "--ctx-len: expected at most the model's context 16, got 17 (gpt.Model: block_size=16)"
    )
    with pytest.raises(ValueError) as e:
        window_plan(SimpleNamespace(config=SimpleNamespace()), name="hf")
    assert str(e.value) == (
        "hf model: expected a context length in its config (n_positions or "
        "max_position_embeddings), got none; set ctx_len"
    )
    with pytest.raises(ValueError, match=r"^stride: expected 1 <= stride < ctx_len = 8, got 8"):
        window_plan(_gpt(16), 8, 8)
    with pytest.raises(TypeError, match=r"^ctx_len: expected an int, got float 8.0"):
        window_plan(_gpt(16), 8.0, None)


def test_a_family_without_windows_takes_neither_option_and_answers_none():
    assert resolve_windows(bigram, object()) is None
    with pytest.raises(ValueError) as e:
        resolve_windows(bigram, object(), None, 4, options=("options.ctx_len", "options.stride"))
    assert str(e.value) == (
        "family 'bigram' is not scored in windows (it scores every token with its own "
        "context): expected no options.ctx_len or options.stride, got options.stride=4"
    )


@pytest.mark.parametrize("arch", sorted(a for a, f in FAMILIES.items() if f.KIND == "lm"))
def test_a_family_declares_windows_exactly_when_its_token_nlls_takes_them(arch):
    fam = FAMILIES[arch]
    params = inspect.signature(fam.token_nlls).parameters
    assert windows.scored_in_windows(fam) == ("ctx_len" in params and "stride" in params)


# ---- the CLI, the zoo and the family resolve alike ----------------------------------------------


def _scoring_checks(model, ids, ctx_len, stride, *args, **kwargs):
    """What the windows check before any model runs (tinyllm.windows.nll_chunks); returns the
    windows asked for instead of NLLs."""
    windows.check_window_args(len(ids), ctx_len, stride)
    windows.check_context(model, ctx_len, len(ids))
    raise _WindowsAskedError(ctx_len, stride)


class _WindowsAskedError(Exception):
    def __init__(self, ctx_len, stride):
        super().__init__()
        self.plan = (ctx_len, stride)


def _outcome(fn):
    """``("windows", C, s)`` for the windows a path asks the model for, ``("refused",)`` for a
    ValueError (TypeError: a wrong type, the same on every path)."""
    try:
        fn()
    except _WindowsAskedError as a:
        return ("windows", *a.plan)
    except ValueError:
        return ("refused",)
    raise AssertionError("the path neither scored nor refused")


def _entry(family: str, ctx_len, stride) -> Entry:
    opts = {k: v for k, v in (("ctx_len", ctx_len), ("stride", stride)) if v is not None}
    doc = {"name": "e", "family": family, "checkpoint": "x", "data": "d", "options": opts}
    return Entry.model_validate(doc)


def _options(e: Entry):
    """The entry's options of the lm kind, read as the zoo reads them."""
    return lm_kind.DEFINITION.read_options(e)


def _cli(m: single.LoadedLM, ids, ctx_len, stride):
    """The CLI's windows for ``m`` (tinyllm.eval.single.windows), then what scoring checks."""
    c, s = single.windows(m, ctx_len, stride)
    _scoring_checks(m.model, ids, c, s)


field = st.one_of(st.none(), st.integers(0, 40))
_GPTS = {b: _gpt(b) for b in (4, 16)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_positions=field,
    max_position_embeddings=field,
    n_ctx=field,
    ctx_len=st.one_of(st.none(), st.integers(2, 60)),
    stride=st.one_of(st.none(), st.integers(1, 60)),
)
def test_cli_zoo_and_family_ask_an_hf_model_for_the_same_windows(
    n_positions, max_position_embeddings, n_ctx, ctx_len, stride
):
    """A Hugging Face model whose config has any mix of the three context fields (None, 0, 1
    or a length): the windows the CLI, the zoo and hf.token_nlls ask for, or their refusal,
    are the same."""
    cfg = SimpleNamespace(
        vocab_size=256, n_positions=n_positions, max_position_embeddings=max_position_embeddings,
        n_ctx=n_ctx,
    )  # fmt: skip
    model = SimpleNamespace(config=cfg)
    ids = np.arange(N) % 256
    if ctx_len is not None and stride is not None and stride >= ctx_len:
        stride = None  # a manifest refuses it before any model is read (EntryOptions)
    with (
        mock.patch.object(hf_family, "load", return_value=model),
        mock.patch.object(hf_family, "views", return_value=None),
        mock.patch.object(hf_family.windows, "token_nlls", _scoring_checks),
    ):
        m = single.open_lm(hf=HERE)
        cli = _outcome(lambda: _cli(m, ids, ctx_len, stride))
        e = _entry("hf", ctx_len, stride)
        zoo_path = _outcome(lambda: lm_kind.lm_token_nlls(model, ids, e, _options(e)))
        family = _outcome(lambda: hf_family.token_nlls(model, ids, ctx_len, stride))
    assert cli == zoo_path == family


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block=st.sampled_from([4, 16]),
    ctx_len=st.one_of(st.none(), st.integers(2, 24)),
    stride=st.one_of(st.none(), st.integers(1, 24)),
)
def test_cli_zoo_and_family_ask_our_gpt_for_the_same_windows(block, ctx_len, stride):
    model = _GPTS[block]
    ids = np.arange(N) % 256
    if ctx_len is not None and stride is not None and stride >= ctx_len:
        stride = None
    with mock.patch.object(gpt.windows, "token_nlls", _scoring_checks):
        m = single.LoadedLM(model, "gpt", gpt, 256, windows.model_context(model), {}, "x")
        cli = _outcome(lambda: _cli(m, ids, ctx_len, stride))
        e = _entry("gpt", ctx_len, stride)
        zoo_path = _outcome(lambda: lm_kind.lm_token_nlls(model, ids, e, _options(e)))
        family = _outcome(lambda: gpt.token_nlls(model, ids, ctx_len, stride))
    assert cli == zoo_path == family


def test_cli_and_manifest_refuse_a_window_option_for_a_family_without_windows(tmp_path):
    """The same refusal, naming the family, from ``tinyllm eval ppl`` and a manifest entry
    (each in its own names of the options)."""
    data = np.frombuffer(b"the cat sat on the mat. " * 20, dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", data)
    bigram.save(bigram.train(bigram.Config(k=0.5), data, seed=0), tmp_path / "bigram")
    with pytest.raises(ValueError) as e:
        single.score_ppl(str(tmp_path / "val.tok"), model=str(tmp_path / "bigram"), ctx_len=16)
    entry = {"name": "b", "family": "bigram", "checkpoint": "bigram", "data": "val.tok"}
    row = zoo.score_entry(dict(entry, options={"ctx_len": 16}), base_dir=tmp_path)
    assert row["status"] == "error"
    why = "family 'bigram' is not scored in windows (it scores every token with its own context)"
    assert str(e.value) == f"{why}: expected no --ctx-len or --stride, got --ctx-len=16"
    assert row["error"]["message"] == (
        f"{why}: expected no options.ctx_len or options.stride, got options.ctx_len=16"
    )
