"""What a Hugging Face folder must be to be scored: no code of the folder ever runs, every weight of
the architecture comes from the files, and only causal decoder-only LMs are accepted.

* A folder whose config.json or tokenizer_config.json has an ``auto_map`` is refused before
  transformers is called, in one line naming ``auto_map`` and the file; transformers would
  otherwise ask "Do you wish to run the custom code? [y/N]" on stdout, read the answer from
  stdin and import the folder's ``.py``. The oracle is a marker file the folder's code would
  write, and stdin ("y") still unread after the refusal.
* transformers' own loading info (``output_loading_info=True``): a weight missing from the files
  (randomly initialised: two loads of the folder differ), a key the architecture lacks, a shape
  other than the config's are errors naming the keys; a tied head absent from the file loads,
  with the logits of the model that was saved.
* An encoder (BERT's masked LM: bidirectional, so changing a later token moves the scores of
  the earlier ones) and an encoder-decoder (BART, T5) are refused in one short line naming the
  config class and what is accepted; BERT configured as a decoder is causal and accepted.

Every model is a tiny random config built with transformers (no download).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from hf_helpers import LLAMA, V
from safetensors.torch import load_file, save_file

from tinyllm.checkpoint import CheckpointError
from tinyllm.models import hf

transformers = pytest.importorskip("transformers")

IDS = (np.arange(40) * 7) % 256


def _save(model, d):
    model.save_pretrained(d)
    return d


def _llama(tmp_path, name="llama", seed=0, **kw):
    torch.manual_seed(seed)
    return _save(
        transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA, **kw)), tmp_path / name
    )


def _edit_weights(d, drop=(), add=None):
    sd = load_file(d / "model.safetensors")
    for k in drop:
        del sd[k]
    sd.update(add or {})
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------- no code of the folder


EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("the folder's code ran")
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
class EvilConfig(LlamaConfig):
    model_type = "evil"
class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""

LOAD_WITH_STDIN = r"""
import sys
from tinyllm.models import hf
what, folder = sys.argv[1], sys.argv[2]
try:
    (hf.load if what == "model" else hf.load_tokenizer)(folder)
    print("LOADED")
except hf.RemoteCodeError as e:
    print("REFUSED", e)
print("STDIN", repr(sys.stdin.read()))
"""


@pytest.fixture
def evil(tmp_path):
    """A Llama folder whose config.json names its own code (``model_type`` "evil", auto_map ->
    evil.py), and a tokenizer folder whose tokenizer_config.json does (auto_map ->
    evil.EvilTokenizer). Neither model_type nor tokenizer class is one transformers has, so
    transformers asks whether to run the folder's code."""
    marker = tmp_path / "marker"
    d = _llama(tmp_path, "evil")
    (d / "evil.py").write_text(EVIL.format(marker=str(marker)))
    doc = json.loads((d / "config.json").read_text())
    doc["model_type"] = "evil"
    doc["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (d / "config.json").write_text(json.dumps(doc))
    t = tmp_path / "evil-tok"
    t.mkdir()
    shutil.copy(d / "evil.py", t / "evil.py")
    tc = {
        "tokenizer_class": "EvilTokenizer",
        "auto_map": {"AutoTokenizer": [None, "evil.EvilTokenizer"]},
    }
    (t / "tokenizer_config.json").write_text(json.dumps(tc))
    return d, t, marker


@pytest.mark.parametrize("what", ["model", "tokenizer"])
def test_a_folder_with_auto_map_is_refused_and_its_code_never_runs(evil, what, tmp_path):
    d, t, marker = evil
    folder = d if what == "model" else t
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_OFFLINE="1")
    p = subprocess.run(
        [sys.executable, "-c", LOAD_WITH_STDIN, what, str(folder)],
        input="y\n", capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert not marker.exists()
    assert "custom code" not in p.stdout  # transformers' prompt never shown
    assert lines[-1] == "STDIN 'y\\n'"  # and stdin never read
    name = "config.json" if what == "model" else "tokenizer_config.json"
    assert lines[-2].startswith(f"REFUSED {folder / name}: auto_map names the folder's own code")
    assert "trust_remote_code=False" in lines[-2]


def test_auto_map_in_config_json_also_refuses_the_tokenizer(evil, tmp_path):
    d, _, marker = evil
    (d / "tokenizer.json").write_text("{}")
    with pytest.raises(hf.RemoteCodeError) as e:
        hf.load_tokenizer(d)
    assert _one_line(e).startswith(f"{d / 'config.json'}: auto_map names the folder's own code (")
    assert "evil.EvilConfig" in str(e.value)
    assert not marker.exists()


# ---------------------------------------------------------- every weight from the files


def test_a_missing_untied_head_is_an_error_naming_it(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(
        **LLAMA, num_key_value_heads=1, head_dim=8, tie_word_embeddings=False
    )
    d = _save(transformers.Qwen3ForCausalLM(cfg), tmp_path / "qwen3")
    _edit_weights(d, drop=["lm_head.weight"])
    with pytest.raises(CheckpointError) as e:
        hf.load(d)
    assert _one_line(e) == (
        f"{d}: expected the weights of a Qwen3ForCausalLM as its config.json describes (tied "
        "weights aside), got missing [lm_head.weight]"
    )


def test_an_unexpected_key_is_an_error_naming_it(tmp_path):
    d = _llama(tmp_path)
    _edit_weights(
        d, add={"model.extra.weight": torch.zeros(3), "model.layers.0.gate": torch.zeros(2)}
    )
    with pytest.raises(CheckpointError) as e:
        hf.load(d)
    assert _one_line(e).endswith("got unexpected [model.extra.weight, model.layers.0.gate]")


def test_a_shape_other_than_the_configs_is_an_error_naming_the_keys(tmp_path):
    d = _llama(tmp_path)
    doc = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(dict(doc, vocab_size=V + 1)))
    with pytest.raises(CheckpointError) as e:
        hf.load(d)
    assert _one_line(e) == (
        f"{d}: expected the weights' shapes to match config.json, got lm_head.weight [300, 16] "
        "in the file, [301, 16] by config.json; model.embed_tokens.weight [300, 16] in the "
        "file, [301, 16] by config.json"
    )


def test_a_tied_head_absent_from_the_file_loads_with_the_saved_models_logits(tmp_path):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**LLAMA, tie_word_embeddings=True)
    )
    d = _save(model, tmp_path / "tied")
    assert "lm_head.weight" not in load_file(d / "model.safetensors")
    x = torch.as_tensor(IDS)[None]
    with torch.inference_mode():
        torch.testing.assert_close(hf.load(d)(x).logits, model.eval()(x).logits, rtol=0, atol=0)


def test_an_old_gpt2_buffer_is_not_an_unexpected_weight(tmp_path):
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    d = _save(transformers.GPT2LMHeadModel(cfg), tmp_path / "gpt2")
    old = {
        "transformer.h.0.attn.bias": torch.ones(1, 1, 32, 32),
        "transformer.h.0.attn.masked_bias": torch.tensor(-1e4),
    }
    _edit_weights(d, add=old)  # what transformers 2.x - 4.x saved as buffers
    assert type(hf.load(d)).__name__ == "GPT2LMHeadModel"


# --------------------------------------------------------------- causal decoder-only LMs

ACCEPTED = "expected a causal decoder-only LM (a model_type of AutoModelForCausalLM)"
BERT = dict(
    vocab_size=V,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=64,
)


def test_an_encoder_masked_lm_is_refused(tmp_path):
    torch.manual_seed(0)
    d = _save(transformers.BertForMaskedLM(transformers.BertConfig(**BERT)), tmp_path / "bert")
    with pytest.raises(CheckpointError) as e:
        hf.load(d)
    assert _one_line(e) == (
        f"{d / 'config.json'}: BertConfig is an encoder (bidirectional; is_decoder is false): "
        + ACCEPTED
    )


def test_bert_configured_as_a_decoder_is_causal_and_accepted(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(**BERT, is_decoder=True)
    d = _save(transformers.BertLMHeadModel(cfg), tmp_path / "bert-decoder")
    model = hf.load(d)
    x = torch.as_tensor(IDS)[None]
    y = x.clone()
    y[0, 30] = (y[0, 30] + 1) % 256
    with torch.inference_mode():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[:, :30], b[:, :30], rtol=0, atol=0)  # causal: 0..29 unmoved
    assert not torch.equal(a[:, 30:], b[:, 30:])


@pytest.mark.parametrize(
    ("name", "build"),
    [
        (
            "BartConfig",
            lambda: transformers.BartForConditionalGeneration(
                transformers.BartConfig(
                    vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1,
                    encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                    decoder_ffn_dim=32, max_position_embeddings=64,
                )
            ),
        ),
        (
            "T5Config",
            lambda: transformers.T5ForConditionalGeneration(
                transformers.T5Config(vocab_size=V, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
            ),
        ),
    ],
)  # fmt: skip
def test_an_encoder_decoder_is_refused_in_one_short_line(tmp_path, name, build):
    torch.manual_seed(0)
    d = _save(build(), tmp_path / name)
    with pytest.raises(CheckpointError) as e:
        hf.load(d)
    assert _one_line(e) == f"{d / 'config.json'}: {name} is an encoder-decoder: {ACCEPTED}"
