"""The default batch of strided windows, measured (tinyllm.windows.measured_batch): on a long
text a torch model gets the faster of one window per pass and the token budget's, measured once
per model and window shape; the NLLs do not depend on the pick."""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from tinyllm import windows
from tinyllm.eval import lm

V = 13


class Timed(nn.Module):
    """Logits from a fixed table (``emb(ids)``); each call sleeps ``per_call + per_row2 * B**2``
    seconds, so one window per pass or many is the faster by construction."""

    def __init__(self, per_call: float, per_row2: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(V, V)
        self.per_call, self.per_row2 = per_call, per_row2
        self.sizes: list[int] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        self.sizes.append(ids.shape[0])
        time.sleep(self.per_call + self.per_row2 * ids.shape[0] ** 2)
        return self.emb(ids)


C, S = 64, 32  # default batch 2048 // 64 = 32 windows per pass
IDS = np.random.default_rng(0).integers(0, V, C + (windows.MEASURE_AFTER * 32) * S)


def _oracle(model: Timed) -> np.ndarray:
    with torch.no_grad():
        return windows.token_nlls(lambda x: model.emb(x), IDS, C, S, batch_size=5)


def test_per_call_overhead_picks_the_budgets_batch():
    m = Timed(per_call=0.01, per_row2=0.0)
    got = lm.token_nlls(m, IDS, C, S)
    assert windows.measured_batches(m) == {(C, S): 32}
    np.testing.assert_allclose(got, _oracle(m), rtol=0, atol=1e-6)


def test_a_cost_growing_with_the_batch_picks_one_window_per_pass_and_remembers_it():
    m = Timed(per_call=0.0, per_row2=0.002)  # 64 ms a window at 32 a pass, 2 ms at 1
    got = lm.token_nlls(m, IDS, C, S)
    assert windows.measured_batches(m) == {(C, S): 1}
    np.testing.assert_allclose(got, _oracle(m), rtol=0, atol=1e-6)
    m.sizes.clear()
    again = lm.token_nlls(m, IDS, C, S)  # no second trial: every pass holds one window
    assert set(m.sizes) == {1}
    np.testing.assert_array_equal(again, got)


def test_a_short_text_or_an_explicit_batch_is_not_measured():
    m = Timed(per_call=0.0, per_row2=0.0)
    lm.token_nlls(m, IDS[: C + 20 * S], C, S)  # 21 windows < 6 x 32
    lm.token_nlls(m, IDS, C, S, batch_size=4)
    assert windows.measured_batches(m) == {}
