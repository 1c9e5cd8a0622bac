"""build_zoo with tiny recipes: checkpoints, data, a manifest the zoo reads, threads restored."""

from __future__ import annotations

import json

import numpy as np
import torch
import yaml

from tinyllm import train
from tinyllm.models import FAMILIES
from tinyllm.report import load_manifest
from tinyllm.tokens import read_tokens

TINY = {
    "bigram": train.Recipe(config={"k": 0.5}),
    "ngram": train.Recipe(config={"order": 3}),
    "nplm": train.Recipe(config={"context": 3, "emb_dim": 8, "hidden": 16}, steps=3),
    "rnnlm": train.Recipe(config={"emb_dim": 8, "hidden": 16, "bptt": 8}, steps=3),
    "gpt": train.Recipe(
        config={"block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16},
        steps=3,
        train_kwargs={"batch_size": 4},
        options={"ctx_len": 16, "stride": 8},
    ),
}


def test_every_lm_family_has_a_zoo_recipe():
    lm = {n for n, f in FAMILIES.items() if f.KIND == "lm"}
    assert lm <= set(train.default_recipes())
    gpt = train.default_recipes()["gpt"]
    assert 1 <= gpt.options["stride"] < gpt.options["ctx_len"] <= gpt.config["block_size"]


def test_build_zoo_writes_a_manifest_that_loads_and_scores(tmp_path):
    calls = []
    before = torch.get_num_threads()
    results = train.build_zoo(
        tmp_path, seed=3, progress=lambda *a: calls.append(a), threads=2, recipes=TINY
    )
    assert torch.get_num_threads() == before
    expected = [n for n in FAMILIES if FAMILIES[n].KIND == "lm" and n in TINY]
    assert [name for name, _ in results] == expected
    assert {c[0] for c in calls} == set(expected)

    doc = yaml.safe_load((tmp_path / "zoo.yaml").read_text())
    assert doc["suite"] == "zoo"
    manifest = load_manifest(tmp_path / "zoo.yaml")  # the zoo's own validation
    val = read_tokens(tmp_path / "data" / "lee_val.bin")
    assert (tmp_path / "data" / "lee_train.bin").is_file()
    for entry, (name, path) in zip(manifest.entries, results, strict=True):
        assert entry.name == entry.family == name
        assert not entry.checkpoint.startswith("/")  # relative to the manifest's folder
        assert (tmp_path / entry.checkpoint).resolve() == path.resolve()
        assert entry.data == "data/lee_val.bin"
        fam = FAMILIES[name]
        nll = fam.token_nlls(fam.load(tmp_path / entry.checkpoint), val)
        assert nll.shape == (val.size - 1,) and np.all(np.isfinite(nll))
    gpt_entry = next(e for e in manifest.entries if e.family == "gpt")
    assert (gpt_entry.options.ctx_len, gpt_entry.options.stride) == (16, 8)
    log = json.loads((tmp_path / "train_log.json").read_text())
    assert set(log) == set(expected) and all(v["seed"] == 3 for v in log.values())
