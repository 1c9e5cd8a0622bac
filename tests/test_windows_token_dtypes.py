"""tinyllm/windows.py: token ids of any integer dtype score as their int64 values.

A token file is often uint16 (nanoGPT's ``.bin``) and read as a memmap that stays uint16
(:func:`tinyllm.logits.as_ids`); the windows read from it, the first one (the head's probe)
included, go to the model as int64, so the NLLs equal those of the same ids as int64, bit for
bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm import windows
from tinyllm.models import gpt


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return gpt.Model(gpt.Config(block_size=16, n_layer=1, n_head=2, n_embd=16)).eval()


def test_a_uint16_token_file_scores_as_its_int64_ids(tmp_path, model):
    ids = np.random.default_rng(0).integers(0, 256, 40)
    path = tmp_path / "val.bin"
    ids.astype(np.uint16).tofile(path)
    mm = np.memmap(path, dtype=np.uint16, mode="r")
    want = windows.token_nlls(model, ids.astype(np.int64), 16, 8)
    assert want.shape == (39,) and np.isfinite(want).all()
    for a in (mm, ids.astype(np.uint16), ids.astype(np.int32), ids.astype(np.uint8)):
        np.testing.assert_array_equal(windows.token_nlls(model, a, 16, 8), want)


def test_a_text_shorter_than_the_context_is_one_window_of_any_dtype(model):
    ids = np.arange(1, 11)
    want = windows.token_nlls(model, ids.astype(np.int64), 16, 8)
    np.testing.assert_array_equal(windows.token_nlls(model, ids.astype(np.uint16), 16, 8), want)
