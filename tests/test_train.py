"""build_zoo with tiny recipes: checkpoints, data, a manifest the zoo reads, threads restored;
side by side in worker processes gives the same checkpoints as one after the other."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

import numpy as np
import pytest
import torch
import yaml

from tinyllm import cli, train
from tinyllm.models import FAMILIES, electra
from tinyllm.report import load_manifest, sha256_path
from tinyllm.tokens import read_tokens

TINY = {
    "bigram": train.Recipe(config={"k": 0.5}),
    "ngram": train.Recipe(config={"order": 3}),
    "nplm": train.Recipe(config={"context": 3, "emb_dim": 8, "hidden": 16}, steps=3),
    "rnnlm": train.Recipe(config={"emb_dim": 8, "hidden": 16}, train_config={"bptt": 8}, steps=3),
    "gpt": train.Recipe(
        config={"block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16},
        steps=3,
        train_config={"batch_size": 4},
        options={"ctx_len": 16, "stride": 8},
    ),
}


def test_every_lm_family_has_a_zoo_recipe():
    # every lm family the zoo can train (hf's models are trained elsewhere: it has no train)
    lm = {n for n, f in FAMILIES.items() if f.KIND == "lm" and hasattr(f, "train")}
    assert lm <= set(train.default_recipes())
    gpt = train.default_recipes()["gpt"]
    assert 1 <= gpt.options["stride"] < gpt.options["ctx_len"] <= gpt.config["block_size"]


def test_build_zoo_writes_a_manifest_that_loads_and_scores(tmp_path):
    calls = []
    before = torch.get_num_threads()
    results = train.build_zoo(
        tmp_path, seed=3, progress=lambda *a: calls.append(a), threads=2, jobs=1, recipes=TINY
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


def test_side_by_side_workers_give_the_same_checkpoints_as_one_process(tmp_path):
    """jobs=2 (two worker processes, one thread each) == jobs=1 (in process, one thread): the
    same bytes for every checkpoint, the same manifest, progress from every worker."""
    recipes = {n: TINY[n] for n in ("bigram", "nplm", "gpt")}
    seq, par = tmp_path / "seq", tmp_path / "par"
    train.build_zoo(seq, seed=1, progress=False, threads=1, jobs=1, recipes=recipes)
    calls = []
    res = train.build_zoo(
        par, seed=1, progress=lambda *a: calls.append(a), threads=1, jobs=2, recipes=recipes
    )
    assert [n for n, _ in res] == list(recipes)
    for name, path in res:
        assert sha256_path(path) == sha256_path(seq / path.relative_to(par)), name
    assert (par / "zoo.yaml").read_text() == (seq / "zoo.yaml").read_text()
    assert {c[0] for c in calls} == set(recipes)
    assert [c[1] for c in calls if c[0] == "gpt"] == [1, 2, 3]
    log = json.loads((par / "train_log.json").read_text())
    assert list(log) == list(recipes) and all(v["threads"] == 1 for v in log.values())
    # two worker processes for three models, none of them this one; a log per model
    pids = {v["pid"] for v in log.values()}
    assert len(pids) == 2 and os.getpid() not in pids
    assert sorted(p.name for p in (par / "logs").iterdir()) == sorted(f"{n}.log" for n in recipes)


def test_recipe_entries_family_and_init_from(tmp_path):
    """A recipe may be scored as several entries, name its family, and start from another
    recipe's checkpoint (passed as ``init=``; trained after it)."""
    recipes = {
        "small": train.Recipe(
            family="bigram", config={"k": 1.0}, entries={"a": "val", "b": "train"}
        ),
        "big": train.Recipe(family="ngram", config={"order": 2}),
    }
    train.build_zoo(tmp_path, progress=False, jobs=1, recipes=recipes)
    m = load_manifest(tmp_path / "zoo.yaml")
    assert [(e.name, e.family, e.checkpoint, e.data) for e in m.entries] == [
        ("a", "bigram", "small", "data/lee_val.bin"),
        ("b", "bigram", "small", "data/lee_train.bin"),
        ("big", "ngram", "big.safetensors", "data/lee_val.bin"),
    ]
    spec = train._job_spec(
        "x",
        {"x": train.Recipe(family="bigram", init_from="big"), "big": recipes["big"]},
        {"train": tmp_path / "t.bin"},
        tmp_path,
        0,
        1,
    )
    assert spec["init"] == str(tmp_path / "big.safetensors")  # the init model's own family's name


@pytest.mark.parametrize(
    "recipes, match",
    [
        ({"x": train.Recipe(family="nosuch")}, "expected a family in"),
        ({"x": train.Recipe(family="bigram", data="nosuch")}, "expected a corpus in"),
        ({"x": train.Recipe(family="bigram", init_from="y")}, "expected init_from"),
        (
            {
                "x": train.Recipe(family="bigram"),
                "y": train.Recipe(family="bigram", entries={"x": "val"}),
            },
            "already made by recipe 'x'",
        ),
        ({"x": train.Recipe(family="bigram", entries={"x": "nosuch"})}, "expected entry data keys"),
    ],
)
def test_bad_recipes_are_refused_before_training(tmp_path, recipes, match):
    with pytest.raises(ValueError, match=match):
        train.build_zoo(tmp_path, progress=False, jobs=1, recipes=recipes)
    assert not (tmp_path / "zoo.yaml").exists()


def test_a_failing_worker_fails_the_build_naming_the_model(tmp_path):
    recipes = {
        "bigram": TINY["bigram"],
        "broken": train.Recipe(
            family="nplm",
            config={"context": 3, "emb_dim": 8},
            steps=2,
            train_config={"no_such_kwarg": 1},
        ),
    }
    with pytest.raises(RuntimeError, match=r"training 'broken' \(nplm\) failed.*no_such_kwarg"):
        train.build_zoo(tmp_path, progress=False, jobs=2, recipes=recipes)
    assert not (tmp_path / "zoo.yaml").exists()


def test_a_job_failing_in_a_worker_that_trained_another_fails_the_build_naming_it(tmp_path):
    """Three jobs on two workers: the failing one (started last, the lowest cost) runs in a
    worker that trained a model before it; the error names it and its own log."""
    broken = train.Recipe(
        family="nplm", config={"context": 3, "emb_dim": 8}, steps=2, train_config={"oops": 1}
    )
    recipes = {
        "nplm": dataclasses.replace(TINY["nplm"], cost_s=2.0),
        "gpt": dataclasses.replace(TINY["gpt"], cost_s=1.0),
        "broken": broken,
    }
    log = tmp_path / "logs" / "broken.log"
    with pytest.raises(
        RuntimeError,
        match=rf"training 'broken' \(nplm\) failed.*oops.*full log: {re.escape(str(log))}",
    ):
        train.build_zoo(tmp_path, progress=False, jobs=2, recipes=recipes)
    assert "Traceback" in log.read_text()
    assert not (tmp_path / "zoo.yaml").exists()


def test_encoder_recipes_pretrain_on_the_encoder_corpus_with_their_zoo_settings(tmp_path):
    """bert's and electra's zoo recipes train on corpus ``encoder`` (encoder_train.bin) with
    their recipe's training settings (electra: a generator lr below the discriminator's), which
    the checkpoints record, and are scored on both rows files; the default recipes shrunk to 2
    steps still build and load."""
    default = train.default_recipes()
    # each row's name says what is scored (masked bytes, replaced-byte detection), then the rows
    for fam, scored in (("bert", "bert-mlm"), ("electra", "electra-rtd")):
        r = default[fam]
        assert r.data == "encoder"
        want = {f"{scored}-polarity": "polarity", f"{scored}-langid": "langid"}
        assert r.entries_of(fam) == want
        FAMILIES[fam].TrainConfig(**r.train_config)  # the family's settings, valid
    kw = default["electra"].train_config
    assert 0 < kw.get("gen_lr", kw["lr"]) <= kw["lr"]
    tiny = {"max_len": 24, "n_layer": 1, "n_head": 2, "n_embd": 16}
    recipes = {
        "bert": dataclasses.replace(default["bert"], config=tiny, steps=2),
        "electra": dataclasses.replace(
            default["electra"],
            config={**default["electra"].config, **tiny, "gen_n_embd": 8, "gen_n_head": 2},
            steps=2,
        ),
    }
    train.build_zoo(tmp_path, progress=False, jobs=1, recipes=recipes)
    m = load_manifest(tmp_path / "zoo.yaml")
    assert [(e.name, e.data) for e in m.entries] == [
        ("bert-mlm-polarity", "data/polarity.jsonl"),
        ("bert-mlm-langid", "data/langid.jsonl"),
        ("electra-rtd-polarity", "data/polarity.jsonl"),
        ("electra-rtd-langid", "data/langid.jsonl"),
    ]
    assert (tmp_path / "data" / "encoder_train.bin").is_file()
    loaded = electra.load(tmp_path / "electra")
    assert loaded.cfg.disc_local_bias == default["electra"].config["disc_local_bias"]
    assert loaded.train_cfg == electra.TrainConfig(**default["electra"].train_config)
    for fam in ("bert", "electra"):
        doc = json.loads((tmp_path / fam / "config.json").read_text())
        assert doc["train_config"] == dataclasses.asdict(
            FAMILIES[fam].load(tmp_path / fam).train_cfg
        )


def test_the_polarity_classifier_is_cross_fitted_and_its_row_scores_every_row(tmp_path):
    """classifier-polarity's recipe: 5 classifiers from the zoo's BERT, classifier j trained on
    the polarity rows outside hash fold j; its row scores all 200 rows, none by a classifier that
    trained on it. classifier-langid stays one classifier scored on the val rows."""
    from tinyllm.data import read_rows
    from tinyllm.eval.zoo import score_entry
    from tinyllm.models import classifier

    default = train.default_recipes()
    assert default["classifier-polarity"].train_config["cross_fit"] == 5
    assert "cross_fit" not in default["classifier-langid"].train_config
    tiny = {"max_len": 24, "n_layer": 1, "n_head": 2, "n_embd": 16}
    recipes = {"bert": dataclasses.replace(default["bert"], config=tiny, steps=1)}
    for name in ("classifier-polarity", "classifier-langid"):
        r = default[name]
        recipes[name] = dataclasses.replace(r, config={**r.config, **tiny}, steps=2)
    train.build_zoo(tmp_path, progress=False, jobs=1, recipes=recipes)
    m = load_manifest(tmp_path / "zoo.yaml")
    pol = next(e for e in m.entries if e.name == "classifier-polarity")
    model = classifier.load(tmp_path / pol.checkpoint)
    rows = read_rows(tmp_path / pol.data)
    assert model.n_folds == 5 and len(rows) == 200
    for j in range(5):
        held_out = {classifier.sentence_digest(r.sentence) for r in rows if r.fold == j}
        trained = {classifier.sentence_digest(r.sentence) for r in rows if r.fold != j}
        assert model.trained_on[j] == trained and held_out.isdisjoint(model.trained_on[j])
    row = score_entry(pol, base_dir=tmp_path)
    assert row["status"] == "ok" and row["n"] == 200
    d = row["details"]
    assert d["scoring"] == "cross-fit" and d["n_seen_in_training"] == 0
    assert sum(f["n"] for f in d["folds"]) == 200
    assert d["folds"][0]["n"] == sum(r.split == "val" for r in rows)
    lang = score_entry(
        next(e for e in m.entries if e.name == "classifier-langid"), base_dir=tmp_path
    )
    assert lang["details"]["scoring"] == "val" and lang["details"]["n_seen_in_training"] == 0
    assert lang["n"] == sum(r.split == "val" for r in read_rows(tmp_path / "data/langid.jsonl"))


def _out_target(tmp_path, kind: str):
    """``--out`` as a user might get it wrong: (path, kind named in the message)."""
    if kind == "file":
        (tmp_path / "zoo").write_text("keep me")
        return tmp_path / "zoo", "a regular file"
    if kind == "device":
        return "/dev/null", "a character device"
    if kind == "fifo":
        os.mkfifo(tmp_path / "zoo")
        return tmp_path / "zoo", "a FIFO"
    if kind == "link":
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "zoo").symlink_to(tmp_path / "elsewhere")
        return tmp_path / "zoo", "a symbolic link"
    (tmp_path / "afile").write_text("keep me")
    return tmp_path / "afile" / "zoo", f"a path under a regular file {tmp_path / 'afile'}"


@pytest.mark.parametrize("kind", ["file", "device", "fifo", "link", "under a file"])
def test_zoo_build_refuses_an_out_that_is_not_a_folder_before_training(
    tmp_path, monkeypatch, capsys, kind
):
    out, got = _out_target(tmp_path, kind)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    built = []
    monkeypatch.setattr(train, "build_zoo", lambda *a, **kw: built.append(a))
    monkeypatch.setattr(sys, "argv", ["tinyllm", "zoo", "build", "--out", str(out)])
    with pytest.raises(SystemExit) as ex:
        cli.main()
    res = capsys.readouterr()
    assert ex.value.code == 2, res
    assert res.err == f"error: --out {out}: expected a folder or a new path, got {got}\n"
    assert res.out == "" and built == []
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written
    kept = {"file": tmp_path / "zoo", "under a file": tmp_path / "afile"}.get(kind)
    assert kept is None or kept.read_text() == "keep me"


def test_build_zoo_refuses_a_file_for_out_dir_before_building_data(tmp_path, monkeypatch):
    (tmp_path / "zoo").write_text("keep me")
    monkeypatch.setattr(train, "default_recipes", lambda: pytest.fail("recipes were read"))
    with pytest.raises(
        ValueError, match=r"^out_dir .*/zoo: expected a folder or a new path, got a regular file$"
    ):
        train.build_zoo(tmp_path / "zoo")
    assert os.listdir(tmp_path) == ["zoo"] and (tmp_path / "zoo").read_text() == "keep me"
