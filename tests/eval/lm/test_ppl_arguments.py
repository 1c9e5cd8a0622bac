"""Arguments of the perplexity entry points reach the windows (tinyllm/eval/lm/ppl.py):
``max_logits`` is checked by both token_nlls and eval_ppl, and eval_ppl's default n_bytes 0
means one token per byte (bpb = mean NLL / ln 2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from tinyllm.eval import lm

V = 7


class Table(nn.Module):
    """Logits from a fixed table: ``emb(ids)``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(V, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids)


IDS = np.random.default_rng(0).integers(0, V, 40)
WANT = "max_logits: expected an int >= 1 (elements of one block of head output), got 0"


def test_max_logits_reaches_the_windows_of_both_entry_points():
    with pytest.raises(ValueError) as e:
        lm.token_nlls(Table(), IDS, 8, 4, max_logits=0)
    assert str(e.value) == WANT
    with pytest.raises(ValueError) as e:
        lm.eval_ppl(Table(), IDS, 8, 4, max_logits=0)
    assert str(e.value) == WANT


def test_eval_ppl_by_default_counts_one_byte_per_token():
    m = Table()
    nll = lm.token_nlls(m, IDS, 8, 4)
    out = lm.eval_ppl(m, IDS, 8, 4)
    assert out["bpb"]["value"] == pytest.approx(float(np.mean(nll)) / math.log(2), rel=1e-12)
