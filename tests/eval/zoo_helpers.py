"""Checkpoints, entries and rows shared by the zoo's tests (tests/eval/test_zoo_*.py)."""

import dataclasses
import hashlib
import math
import os

import numpy as np
import torch
import yaml

from tinyllm.data import Row, write_rows
from tinyllm.models import FAMILIES, bert, electra
from tinyllm.tokens import write_tokens
from tinyllm.windows import scored_in_windows

LN2 = math.log(2.0)
# the lm families trained here (hf, a Hugging Face folder, has its own tests in test_zoo_lm.py)
LM_FAMILIES = sorted(a for a, m in FAMILIES.items() if m.KIND == "lm" and hasattr(m, "train"))
# small shapes for whichever of these fields a family's Config has
SMALL = {
    "block_size": 32,
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 16,
    "hidden": 16,
    "emb_dim": 8,
    "seq_len": 16,
    "bptt": 16,
    "batch_size": 4,
    "context": 3,
    "order": 3,
}
WINDOW = {"ctx_len": 16, "stride": 8}  # for families scored in strided windows (gpt, hf)
VAL_BYTES = 1500


def strided(fam) -> bool:
    return scored_in_windows(fam)


def build(arch: str, path, train_ids: np.ndarray):
    """Train ``arch`` briefly on real bytes and save it with the family's own ``save``."""
    fam = FAMILIES[arch]
    names = {f.name for f in dataclasses.fields(fam.Config)}
    cfg = fam.Config(**{k: v for k, v in SMALL.items() if k in names})
    model = fam.train(cfg, train_ids, seed=0, steps=3)
    out = fam.save(model, path)
    if out.is_file():  # one-file checkpoint (ngram): give it its usual suffix
        out = out.rename(out.with_name(out.name + ".safetensors"))
    return out


def manifest_of(zoo_dir) -> dict:
    return yaml.safe_load((zoo_dir / "zoo.yaml").read_text())


def entry_of(zoo_dir, name: str) -> dict:
    return next(e for e in manifest_of(zoo_dir)["entries"] if e["name"] == name)


def stable_row(row) -> dict:
    """A row without what legitimately changes between runs (wall time)."""
    r = dict(row if isinstance(row, dict) else row.model_dump(mode="json"))
    r.pop("seconds")
    return r


def hf_gpt2(path, vocab=256, n_positions=64):
    """A random-weight GPT-2 saved with ``save_pretrained`` in ``path`` (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=vocab, n_positions=n_positions, n_embd=32, n_layer=2, n_head=2, n_inner=64
    )
    model = GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(path)
    return model


NO_OPTIONS = {
    "ctx_len": None, "stride": None, "beam": None, "split": None, "device": None, "dtype": None,
    "task": None, "include_path": None, "num_fewshot": None, "limit": None, "metric": None,
    "cluster_key": None, "doc_sep": None,
}  # fmt: skip


def uniform_bigram(d) -> dict:
    """A uniform bigram checkpoint (every byte 1/256, docs/definitions.md, the zoo) and an 18-byte token
    file in ``d``; the entry that scores them (relative paths)."""
    bigram = FAMILIES["bigram"]
    bigram.save(bigram.Model(bigram.Config()), d / "uniform")
    write_tokens(d / "val.tok", np.frombuffer(b"nineteen bytes long", dtype=np.uint8))
    return {"name": "uniform", "family": "bigram", "checkpoint": "uniform", "data": "val.tok"}


# ---- the row kinds (mlm, rtd): a trained encoder and the val rows it is scored on ------------

ROWS_TEXT = ("the cat sat on the mat. the dog sat on the log. " * 12).encode()
ROWS_VAL = [
    Row("val", s, "-") for s in ("the cat sat on the mat.", "the dog sat", "on the log.")
] * 6
ROWS_TRAIN = [Row("train", "zzzzzzzzzzzzzzzzzzzz", "-")] * 5
ROWS_BERT = bert.Config(max_len=24, n_layer=1, n_head=2, n_embd=32)
ROWS_ELECTRA = electra.Config(
    max_len=24, n_layer=1, n_head=2, n_embd=32, gen_n_layer=1, gen_n_head=2, gen_n_embd=16
)
ROW_KINDS = {  # kind -> (family, checkpoint folder, entry name)
    "mlm": ("bert", "bert", "bert-rows"),
    "rtd": ("electra", "el", "electra-rows"),
}


def rows_dir(d, kind: str):
    """``d`` with the row kind's trained encoder (its checkpoint folder of :data:`ROW_KINDS`)
    and ``rows.jsonl`` of :data:`ROWS_TRAIN` + :data:`ROWS_VAL`."""
    ids = np.frombuffer(ROWS_TEXT, dtype=np.uint8)
    if kind == "mlm":
        model = bert.train(ROWS_BERT, ids, seed=0, steps=200, batch_size=16, lr=3e-3)
        bert.save(model, d / ROW_KINDS[kind][1])
    else:
        model = electra.train(ROWS_ELECTRA, ids, seed=0, steps=40, batch_size=16, lr=3e-3)
        electra.save(model, d / ROW_KINDS[kind][1])
    write_rows(d / "rows.jsonl", ROWS_TRAIN + ROWS_VAL)
    return d


def score_rows(d, kind: str, data="rows.jsonl", seed=0):
    """The zoo's row and items of the row kind's entry on ``data`` in ``d``."""
    from tinyllm.eval import zoo

    family, ckpt, name = ROW_KINDS[kind]
    e = {"name": name, "family": family, "checkpoint": ckpt, "data": data}
    return zoo.score_entry_items(e, seed=seed, base_dir=d)


def cache_as_hub(src, hub, repo: str, commit: str):
    """The model folder ``src`` cached under ``hub`` as huggingface_hub caches ``repo``
    (``org/name``): ``refs/main`` names ``commit``, the snapshot's files are links to
    content-named blobs. Returns the snapshot folder."""
    folder = hub / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    for d in (folder / "blobs", snap, folder / "refs"):
        d.mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    for f in sorted(src.iterdir()):
        blob = folder / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        blob.write_bytes(f.read_bytes())
        os.symlink(os.path.join("..", "..", "blobs", blob.name), snap / f.name)
    return snap
