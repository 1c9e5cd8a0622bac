"""tinyllm/windows.py's model facts and its batch measurement, case by case: the context limit a
model declares (our GPT's block_size, a Hugging Face config's fields, the smallest values
taken), the name an error gives a model, check_context without a text length, and what
measured_batch times (which windows, positions, targets and bound it hands the head) and picks."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from tinyllm import windows


def test_our_gpts_block_size_is_the_limit_down_to_one_token():
    ours = SimpleNamespace(cfg=SimpleNamespace(block_size=64))
    assert windows.context_limit(ours) == ("block_size", 64)
    assert windows.context_limit(SimpleNamespace(cfg=SimpleNamespace(block_size=1))) == (
        "block_size",
        1,
    )
    # a boolean or zero block_size is no limit: the config's fields are read instead
    both = SimpleNamespace(cfg=SimpleNamespace(block_size=True), config=SimpleNamespace(n_ctx=9))
    assert windows.context_limit(both) == ("n_ctx", 9)
    assert windows.context_limit(SimpleNamespace(cfg=SimpleNamespace(block_size=0))) is None


def test_a_config_field_of_two_tokens_is_a_limit_and_one_is_skipped():
    two = SimpleNamespace(config=SimpleNamespace(n_positions=2))
    assert windows.context_limit(two) == ("n_positions", 2)
    skip = SimpleNamespace(config=SimpleNamespace(n_positions=1, max_position_embeddings=3))
    assert windows.context_limit(skip) == ("max_position_embeddings", 3)


def test_an_error_names_our_model_by_family_and_class_and_others_by_class():
    ours = type("Model", (), {"__module__": "tinyllm.models.gpt"})()
    theirs = type("LlamaForCausalLM", (), {"__module__": "transformers.models.llama"})()
    assert windows.model_name(ours) == "gpt.Model"
    assert windows.model_name(theirs) == "LlamaForCausalLM"


def test_check_context_without_a_text_length_checks_ctx_len():
    ours = type("Model", (), {"__module__": "tinyllm.models.gpt"})()
    ours.cfg = SimpleNamespace(block_size=16)
    windows.check_context(ours, 16)
    with pytest.raises(ValueError) as e:
        windows.check_context(ours, 17)
    assert str(e.value) == (
        "gpt.Model: expected windows of at most block_size=16 tokens, got ctx_len=17"
    )
    windows.check_context(ours, 17, n=16)  # a text of 16 tokens: windows of 16


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))


class SlowBatches:
    """A head that records what it is asked and sleeps 0.2 s on a pass of several windows, so
    one window per pass is the faster by a wide margin (no model work is timed)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def nlls(self, x, rows, cols, targets, span=None, max_logits=None):
        self.calls.append(
            dict(x=x, rows=rows, cols=cols, targets=targets, span=span, ml=max_logits)
        )
        if x.shape[0] > 1:
            time.sleep(0.2)
        return np.zeros(rows.shape[0])


C, S, D = 8, 4, 3  # windows of 8 tokens every 4, a default of 3 windows per pass


def test_measured_batch_times_the_default_full_windows_after_the_first_and_picks_the_faster():
    a = np.arange(100, 100 + C + (D + 1) * S, dtype=np.int32)
    head, model = SlowBatches(), Tiny()
    assert windows.measured_batch(model, head, a, C, S, D, max_logits=777) == 1
    want = torch.tensor(
        np.stack([a[k * S : k * S + C] for k in range(1, D + 1)]), dtype=torch.int64
    )
    lo, hi = C - S - 1, C - 1
    assert [c["x"].shape[0] for c in head.calls] == [D, 1, 1, 1]  # the default, then 1 by 1
    first = head.calls[0]
    assert first["x"].dtype == torch.int64 and torch.equal(first["x"], want)
    assert torch.equal(torch.cat([c["x"] for c in head.calls[1:]]), want)
    assert first["span"] == (lo, hi) and first["ml"] == 777
    assert torch.equal(first["rows"], torch.arange(D).repeat_interleave(hi - lo))
    assert torch.equal(first["cols"], torch.arange(lo, hi).repeat(D))
    assert torch.equal(first["targets"], want[first["rows"], first["cols"] + 1])
    assert windows.measured_batches(model) == {(C, S): 1}
    head.calls.clear()
    assert windows.measured_batch(model, head, a, C, S, D) == 1 and head.calls == []


class Unreferenceable:
    """A model that cannot be weakly referenced: measured on every call, nothing remembered."""

    __slots__ = ()

    def parameters(self):
        return iter(())


def test_a_model_without_weak_references_is_measured_every_time():
    a = np.arange(C + D * S)  # just long enough for the D windows after the first
    head, model = SlowBatches(), Unreferenceable()
    assert windows.measured_batch(model, head, a, C, S, D) == 1
    assert windows.measured_batch(model, head, a, C, S, D) == 1
    assert len(head.calls) == 2 * (1 + D)
    assert windows.measured_batches(model) == {}


class _Uniform(nn.Module):
    """Logits of zeros over 16 ids: every scored token costs ln 16."""

    def forward(self, x):
        return torch.zeros(*x.shape, 16)


def test_a_negative_id_after_the_first_window_is_refused_with_its_value():
    """The first window is checked before the head is built, each later batch when it is read
    (a memmapped text is never scanned whole): -3 at position 6 is found in the second window."""
    ids = np.array([0, 1, 2, 3, 4, 5, -3, 7])
    with pytest.raises(ValueError) as e:
        windows.token_nlls(_Uniform(), ids, 4, 2, batch_size=1)
    assert str(e.value) == "ids: expected non-negative token ids, got -3"
    ok = windows.token_nlls(_Uniform(), np.arange(8) % 16, 4, 2, batch_size=1)
    np.testing.assert_allclose(ok, np.full(7, np.log(16)), rtol=1e-6)  # fp32 logits


@pytest.mark.parametrize(
    "ctx_len, stride, n, measured",
    [
        # default batch 2048 // 1024 = 2: measured from 6 * 2 = 12 windows, 1 + ceil((n - 1024) / 512)
        (1024, 512, 1024 + 11 * 512, True),  # 12 windows exactly
        (1024, 512, 1024 + 10 * 512 + 1, True),  # 12 windows, the last one partial
        (1024, 512, 1024 + 10 * 512, False),  # 11 windows
        # default batch 1: one window a pass already, never measured however long the text
        (2048, 1024, 2048 + 20 * 1024, False),
    ],
)
def test_the_default_batch_is_measured_from_six_batches_of_windows(ctx_len, stride, n, measured):
    model = _Uniform()
    ids = np.arange(n) % 16
    got = windows.token_nlls(model, ids, ctx_len, stride, batch_size=None)
    np.testing.assert_allclose(got, np.full(n - 1, np.log(16)), rtol=1e-6)  # fp32 logits
    picked = windows.measured_batches(model)
    assert (list(picked) == [(ctx_len, stride)]) is measured, picked
    assert not measured or picked[(ctx_len, stride)] in (1, 2)
