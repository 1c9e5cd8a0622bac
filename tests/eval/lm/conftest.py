"""Fixtures shared by the instrument's tests: a tiny random GPT-2 and token ids for it."""

import numpy as np
import pytest
from lm_helpers import tiny_gpt2  # same folder: pytest puts it on sys.path


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2()


@pytest.fixture(scope="module")
def gpt2_ids():
    return np.random.default_rng(5).integers(0, 97, size=150)
