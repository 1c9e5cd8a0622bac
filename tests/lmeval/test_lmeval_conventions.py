"""lm-eval's conventions: ``--model_args pretrained=DIR,dtype=...,device=...,batch_size=N`` for
our backend (``hf=DIR`` the same), conflicting folders one line."""

from __future__ import annotations

import pytest
import torch

from tinyllm.eval.lmeval.backend import TinyLLM, model_args


@pytest.fixture(scope="module")
def folder(gpt2, tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("conv_hf")
    gpt2.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_pretrained_with_lm_eval_args(folder):
    lm = TinyLLM.create_from_arg_string(
        f"pretrained={folder},dtype=bfloat16,device=cpu,batch_size=3,max_length=64"
    )
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    assert next(lm.model.parameters()).device.type == "cpu"
    assert (lm.batch_size, lm.max_length) == (3, 64)
    same = TinyLLM.create_from_arg_string(f"hf={folder}", {"batch_size": 5, "device": None})
    assert same.batch_size == 5 and next(same.model.parameters()).dtype == torch.float32
    # the alias loads the same weights as hf=
    a = dict(same.model.named_parameters())["transformer.wte.weight"]
    b = TinyLLM.create_from_arg_string(f"pretrained={folder}").model.transformer.wte.weight
    assert torch.equal(a, b)


def test_model_args_mapping():
    folder, load, kw = model_args(
        {"pretrained": "d", "dtype": "float16", "batch_size": "auto:4", "rolling": "strided"},
        {"batch_size": 8, "max_batch_size": None, "device": "cuda:1"},
    )
    assert (folder, load, kw) == (
        "d",
        {"dtype": "float16", "device": "cuda:1"},
        {"rolling": "strided"},
    )
    assert model_args({"hf": "d"}, {"batch_size": "16"})[2] == {"batch_size": 16}
    assert model_args({"hf": "d", "pretrained": "d"})[0] == "d"


@pytest.mark.parametrize(
    "args, msg",
    [
        ({"hf": "a", "pretrained": "b"}, "expected one folder, got pretrained='b' and hf='a'"),
        ({"dtype": "float16"}, "expected pretrained=DIR"),
    ],
)
def test_bad_model_args_one_line(args, msg):
    with pytest.raises(ValueError, match=msg) as e:
        model_args(args)
    assert "\n" not in str(e.value)
