"""The reliability probe's findings on Hugging Face folders: each is one clear line naming the file,
nothing hangs, and loading prints nothing of transformers'.

* a safetensors header that lies about its offsets: the file's name, not safetensors' bare
  ``invalid shape, data type, or offset``;
* a FIFO ``config.json`` or ``tokenizer.json``: refused before it is opened (transformers would
  block on it forever);
* ``num_hidden_layers: -3``: "expected a positive integer, got -3" naming config.json (not
  ``__len__() should return >= 0``); a shard index naming a file outside the folder;
* Bloom (ALiBi: positions from the 2-d mask) and Mamba (no attention cache): their choices are
  scored on the plain path without the two warnings about a failed cache probe;
* no "Loading weights" bar, no notes on the config, no load report (with its ANSI codes) unless
  ``TINYLLM_DEBUG``, and transformers' own settings as they were after a load.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
import warnings

import numpy as np
import pytest
import torch
from hf_helpers import LLAMA, V
from safetensors.torch import load_file, save_file

from tinyllm.checkpoint import CheckpointError
from tinyllm.eval import lm
from tinyllm.models import hf

transformers = pytest.importorskip("transformers")

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("probe") / "llama"
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).save_pretrained(d)
    return d


def _copy(src, tmp_path, name="copy"):
    return shutil.copytree(src, tmp_path / name)


def _refusal(fn, *args, timeout=60.0) -> str:
    """The one-line message of the CheckpointError ``fn(*args)`` raises, run in a thread that
    must end within ``timeout`` seconds (a read that blocks fails the test, never hangs it)."""
    got: list = []

    def run():
        try:
            fn(*args)
            got.append(None)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            got.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert got, f"{fn.__name__} still running after {timeout} s"
    assert isinstance(got[0], CheckpointError), repr(got[0])
    msg = str(got[0])
    assert "\n" not in msg
    return msg


def test_a_lying_safetensors_header_is_named_by_its_file(llama, tmp_path):
    d = _copy(llama, tmp_path)
    raw = (d / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    first = next(k for k in header if k != "__metadata__")
    header[first]["data_offsets"][1] += 10**6  # past the end of the file
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(hb)) + hb + raw[8 + n :])
    assert _refusal(hf.load, d) == (
        f"{d / 'model.safetensors'}: expected a readable safetensors file, got: Error while "
        "deserializing header: invalid shape, data type, or offset for tensor"
    )


@needs_fifo
def test_a_fifo_config_json_is_refused_before_it_is_opened(llama, tmp_path):
    d = _copy(llama, tmp_path)
    (d / "config.json").unlink()
    os.mkfifo(d / "config.json")
    assert _refusal(hf.load, d) == f"{d / 'config.json'}: expected a regular file, got a FIFO"


@needs_fifo
def test_a_fifo_tokenizer_json_is_refused_before_it_is_opened(llama, tmp_path):
    d = _copy(llama, tmp_path)
    (d / "tokenizer_config.json").write_text("{}")
    os.mkfifo(d / "tokenizer.json")
    assert _refusal(hf.load_tokenizer, d) == (
        f"{d / 'tokenizer.json'}: expected a regular file, got a FIFO"
    )


@pytest.mark.parametrize(
    ("key", "value"), [("num_hidden_layers", -3), ("hidden_size", 0), ("vocab_size", True)]
)
def test_a_size_that_is_not_a_positive_integer_is_named_with_its_file(llama, tmp_path, key, value):
    d = _copy(llama, tmp_path)
    doc = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(dict(doc, **{key: value})))
    assert _refusal(hf.load, d) == (
        f"{d / 'config.json'}: {key}: expected a positive integer, got {value!r}"
    )


def test_a_shard_outside_the_folder_is_refused(llama, tmp_path):
    d = _copy(llama, tmp_path)
    shutil.move(d / "model.safetensors", tmp_path / "outside.safetensors")
    keys = load_file(tmp_path / "outside.safetensors")
    index = {"metadata": {}, "weight_map": dict.fromkeys(keys, "../outside.safetensors")}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    assert _refusal(hf.load, d) == (
        f"{d / 'model.safetensors.index.json'}: expected shard file names in the folder, got "
        "'../outside.safetensors'"
    )


def test_a_sharded_folder_loads(llama, tmp_path):
    d = _copy(llama, tmp_path)
    sd = load_file(d / "model.safetensors")
    (d / "model.safetensors").unlink()
    keys = sorted(sd)
    shards = {"a.safetensors": keys[: len(keys) // 2], "b.safetensors": keys[len(keys) // 2 :]}
    for name, ks in shards.items():
        save_file({k: sd[k] for k in ks}, d / name, metadata={"format": "pt"})
    wm = {k: name for name, ks in shards.items() for k in ks}
    index = {"metadata": {}, "weight_map": wm}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    x = torch.arange(20)[None]
    with torch.inference_mode():
        torch.testing.assert_close(hf.load(d)(x).logits, hf.load(llama)(x).logits, rtol=0, atol=0)


# ----------------------------------------------------- Bloom and Mamba: the plain path, quietly


class IdTok:
    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


@pytest.mark.parametrize(
    "build",
    [
        lambda: transformers.BloomForCausalLM(
            transformers.BloomConfig(vocab_size=V, hidden_size=16, n_layer=2, n_head=2)
        ),
        lambda: transformers.MambaForCausalLM(
            transformers.MambaConfig(
                vocab_size=V, hidden_size=16, num_hidden_layers=2, state_size=4
            )
        ),
    ],
    ids=["bloom", "mamba"],
)
def test_a_model_the_cache_engine_cannot_drive_is_scored_on_the_plain_path_without_warnings(
    tmp_path, build
):
    torch.manual_seed(0)
    build().save_pretrained(tmp_path / "m")
    model = hf.load(tmp_path / "m")
    items = [
        {"context": "5 6 7 8", "choices": ["9", "10 11"], "gold": 0},
        {"context": "1 2", "choices": ["3 4 5", "6"], "gold": 1},
    ]
    with warnings.catch_warnings(action="error"):
        got = lm.choice_lls(model, IdTok(), items)
    assert lm.cache_verdicts(model) == {}  # no engine was tried, none failed
    with torch.inference_mode():  # the oracle: one plain forward pass per context + choice
        for item, lls in zip(items, got, strict=True):
            ctx = IdTok().encode(item["context"])
            for choice, ll in zip(item["choices"], lls, strict=True):
                ids = ctx + IdTok().encode(choice)
                logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
                want = sum(float(logp[i - 1, ids[i]]) for i in range(len(ctx), len(ids)))
                np.testing.assert_allclose(ll, want, rtol=0, atol=1e-4)


# --------------------------------------------------------------------- what loading prints


@pytest.fixture
def noisy(tmp_path):
    """A GPT-2 folder on which transformers has things to say: bos/eos ids 50256 outside its
    300-id vocabulary (notes on the config) and the old ``attn.masked_bias`` buffers (a load
    report, "UNEXPECTED", in ANSI colours)."""
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=16, n_layer=2, n_head=2)
    d = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(cfg).save_pretrained(d)
    sd = load_file(d / "model.safetensors")
    sd.update({f"transformer.h.{i}.attn.masked_bias": torch.tensor(-1e4) for i in range(2)})
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    return d


def test_loading_prints_nothing_of_transformers(noisy, capfd, monkeypatch):
    from transformers.utils import logging as hf_logging

    monkeypatch.delenv("TINYLLM_DEBUG", raising=False)
    level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    capfd.readouterr()
    hf.load(noisy)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == (level, bar)


def test_with_tinyllm_debug_transformers_speaks(noisy, capfd, monkeypatch):
    from transformers.utils import logging as hf_logging

    monkeypatch.setenv("TINYLLM_DEBUG", "1")
    monkeypatch.setattr(hf_logging, "_tqdm_active", True)
    capfd.readouterr()
    hf.load(noisy)
    assert "Loading weights" in capfd.readouterr().err


def test_the_debug_flag_reaches_the_loader(monkeypatch):
    """``tinyllm --debug ...`` sets ``TINYLLM_DEBUG``, which the loader (and worker processes)
    read, so transformers' own output is shown under ``--debug`` and only then."""
    from typer.testing import CliRunner

    from tinyllm.cli import DEBUG, app
    from tinyllm.models import hf_checks

    monkeypatch.delenv("TINYLLM_DEBUG", raising=False)
    monkeypatch.setitem(DEBUG, "on", False)
    assert CliRunner().invoke(app, ["version"]).exit_code == 0
    assert not hf_checks.debugging()
    assert CliRunner().invoke(app, ["--debug", "version"]).exit_code == 0
    assert hf_checks.debugging()
