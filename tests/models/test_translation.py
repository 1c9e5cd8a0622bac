"""What the seq2seq families share (tinyllm/models/translation.py): the layout of encoded
sources and targets, the pair data check, the settings check, the never-emitted ids."""

from __future__ import annotations

import pytest
import torch

from tinyllm.models.translation import (
    NEVER_EMITTED,
    VOCAB,
    check_pairs,
    encode_sources,
    encode_targets,
    output_mask,
)
from tinyllm.tokens import BOS, EOS, PAD


def test_encode_batch_layout_for_sources_and_targets():
    src = encode_sources(["ab", ""], max_len=4)
    assert src.tolist() == [[97, 98, EOS], [EOS, PAD, PAD]]
    tgt_in, tgt_out = encode_targets(["ab", ""], max_len=4)
    # the short row's EOS is also an input, whose target is PAD: ignored by the loss
    assert tgt_in.tolist() == [[BOS, 97, 98], [BOS, EOS, PAD]]
    assert tgt_out.tolist() == [[97, 98, EOS], [EOS, PAD, PAD]]
    # max_len cuts the bytes, never the specials
    assert encode_sources(["abcdef"], max_len=3).tolist() == [[97, 98, 99, EOS]]
    tgt_in, tgt_out = encode_targets(["abcdef"], max_len=3)
    assert tgt_out.tolist() == [[97, 98, 99, EOS]]


def test_check_pairs_accepts_pairs_and_dicts_and_refuses_the_rest():
    assert check_pairs([("a", "b"), {"src": "c", "tgt": ""}], "t") == [
        ("a", "b"),
        ("c", ""),
    ]
    with pytest.raises(ValueError, match="expected pair 1 to be two strings"):
        check_pairs([("a", "b"), ("c", 3)], "t")
    with pytest.raises(ValueError, match="at least one"):
        check_pairs([], "t")
    with pytest.raises(ValueError, match="list of"):
        check_pairs("ab", "t")


def test_output_mask_hides_exactly_the_ids_never_emitted():
    m = output_mask()
    assert m.shape == (VOCAB,)
    assert torch.isneginf(m[list(NEVER_EMITTED)]).all()
    keep = [i for i in range(VOCAB) if i not in NEVER_EMITTED]
    assert (m[keep] == 0).all() and EOS in keep


def test_pairs_of_the_wrong_shape_name_the_pair():
    with pytest.raises(ValueError, match="expected pair 0 to be two strings"):
        check_pairs([("a", "b", "c")], "t")
