"""tinyllm/models/hf_train.py: a byte-level BPE and a LlamaForCausalLM trained on the lee text,
saved as a folder the hf family and transformers' AutoTokenizer read without a download."""

import json

import numpy as np
import pytest
from transformers import AutoTokenizer, LlamaForCausalLM

from tinyllm.data import encode_documents, lee_split
from tinyllm.eval import zoo
from tinyllm.models import hf, hf_train
from tinyllm.tokens import ByteTokenizer

TINY = hf_train.Config(n_merges=200, hidden=32, n_layer=1, n_head=2, n_kv_head=1, ctx_len=32)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    train, val = lee_split()
    losses = []
    model = hf_train.train(
        TINY,
        encode_documents(train[:40]),  # byte ids, as the lee corpus gives every lm family
        seed=0,
        steps=60,
        progress=lambda step, total, loss: losses.append(loss),
        batch_size=8,
        seq_len=32,
        lr=1e-2,
    )
    out = hf_train.save(model, tmp_path_factory.mktemp("llama") / "llama")
    return model, out, losses, val


def test_bpe_has_bytes_merges_and_one_special_token():
    text = "".join(d + "\n" for d in lee_split()[0][:40])
    tok = hf_train.train_bpe(text, 200)
    assert len(tok) == 256 + 200 + 1
    assert tok.bos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|endoftext|>")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) < len(text.encode("utf-8")) / 2  # merges compress the training text
    assert tok.decode(ids) == text  # byte-level: lossless


def test_training_lowers_the_loss_and_records_its_settings(trained):
    model, out, losses, _ = trained
    assert isinstance(model, LlamaForCausalLM)
    assert len(losses) == 60 and np.mean(losses[-10:]) < np.mean(losses[:5]) - 0.5
    doc = json.loads((out / "config.json").read_text())
    assert doc["model_type"] == "llama" and doc["num_key_value_heads"] == 1
    assert doc["tl_train"]["config"]["n_merges"] == 200 and doc["tl_train"]["steps"] == 60
    assert doc["tl_train"]["train_config"]["lr"] == 1e-2


def test_saved_folder_loads_offline_with_its_tokenizer(trained):
    model, out, _, val = trained
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert len(tok) == model.config.vocab_size == 457
    back = hf.load(out)
    assert sum(p.numel() for p in back.parameters()) == sum(p.numel() for p in model.parameters())
    assert zoo.kind_of(zoo.read_config(out)) == "lm"


def test_zoo_scores_it_on_text_in_its_own_tokenizer(trained, tmp_path):
    _, out, _, val = trained
    text = "".join(d + "\n" for d in val[:3])
    (tmp_path / "val.txt").write_text(text, encoding="utf-8")
    entry = {"name": "llama", "family": "hf", "checkpoint": str(out), "data": "val.txt"}
    row = zoo.score_entry(entry, seed=0, base_dir=tmp_path)
    assert row["status"] == "ok", row["error"]
    assert row["details"]["n_bytes"] == len(text.encode("utf-8"))  # BOS first: every byte
    assert row["n"] < len(text.encode("utf-8")) / 1.5  # BPE tokens, not bytes
    assert row["value"] < 8.0  # 60 steps already beat the uniform byte model


def test_save_refuses_a_model_without_its_tokenizer(tmp_path):
    cfg = hf_train.llama_config(TINY, 300, 0)
    with pytest.raises(ValueError, match="expected a model trained by hf_train.train"):
        hf_train.save(LlamaForCausalLM(cfg), tmp_path / "m")


def test_bad_config_and_data_are_refused():
    with pytest.raises(ValueError, match="expected hidden % n_head == 0"):
        hf_train.Config(hidden=30, n_head=4)
    with pytest.raises(ValueError, match="expected byte ids 0..255"):
        hf_train.text_of(np.array([1, 300]))
    with pytest.raises(ValueError, match="expected seq_len <= ctx_len=32"):
        hf_train.train(TINY, ByteTokenizer().encode("abc " * 50), seed=0, steps=1, seq_len=64)


def test_the_zoo_recipe_trains_it_and_scores_it_on_the_lee_val_text(tmp_path):
    """The default llama recipe, shrunk: trained by hf_train (the recipe's trainer), scored by
    family hf on the lee val bytes read as text in its own tokenizer."""
    import dataclasses

    from tinyllm import train
    from tinyllm.report import load_manifest

    r = train.default_recipes()["llama"]
    assert r.family_of("llama") == "hf" and r.trainer == "tinyllm.models.hf_train"
    assert r.options["stride"] < r.options["ctx_len"] == r.config["ctx_len"]
    small = {**r.config, **dataclasses.asdict(TINY)}
    settings = {**r.train_config, "seq_len": 32, "batch_size": 4}
    recipes = {
        "llama": dataclasses.replace(
            r, config=small, train_config=settings, steps=3, options={"ctx_len": 32}
        )
    }
    train.build_zoo(tmp_path, progress=False, jobs=1, recipes=recipes)
    (entry,) = load_manifest(tmp_path / "zoo.yaml").entries
    assert (entry.family, entry.data) == ("hf", "data/lee_val.bin")
    row = zoo.score_entry(entry, base_dir=tmp_path)
    assert row["status"] == "ok", row["error"]
    assert row["details"]["n_bytes"] == row["details"]["text_bytes"] == 35_806
    assert row["details"]["tokenizer"].startswith("hf-sha256:")
