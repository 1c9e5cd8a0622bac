"""The demo zoo's lm-eval task: a cloze task in HellaSwag's schema built from the lee text.

Each document is one sentence of a lee document: the context ``ctx_a`` is the sentence without
its last :data:`CONT_WORDS` words, the four ``endings`` are that true continuation and the last
:data:`CONT_WORDS` words of three other sentences of the same split (drawn from
``numpy.random.default_rng(seed)``, all four distinct), in a random order with ``label`` the
true one's index. The ``validation`` split comes from the lee val documents (the byte models
never train on them), the ``train`` split (the few-shot source lm-eval's HellaSwag config
names) from the first sentences of the lee training documents (at most :data:`MAX_TRAIN`).

:func:`write_cloze_task` writes the two JSONL files and a task YAML that ``include``s lm-eval's
own bundled ``hellaswag/hellaswag.yaml`` (so its ``process_docs``, prompt and metrics are
lm-eval's) and overrides only ``task``, ``dataset_path: json`` and
``dataset_kwargs.data_files``. Both paths are relative: the data files to the YAML's folder,
the include to ``lm_eval/tasks`` (:func:`bundled_tasks_dir`), resolved when the task is scored
(:func:`tinyllm.eval.lmeval.task_files.task_config`), so the folder and the venv can each move.
lm-eval is not imported here. Chance is 1/4 on every document.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import numpy as np

from tinyllm.data import lee_split
from tinyllm.eval.lmeval import EXTRA_HINT, MissingLmEvalError

TASK = "lee_cloze"
"""The task's name (its YAML's ``task:``)."""
YAML_NAME = f"{TASK}.yaml"
BUNDLED_TASK = "hellaswag/hellaswag.yaml"
"""The bundled lm-eval config the task YAML includes (relative to ``lm_eval/tasks``)."""
CONT_WORDS = 1
"""Words in each ending: the sentence's last word (with its punctuation), a cloze in the spirit of
LAMBADA; the zoo's byte GPT reads at most 32 bytes, so a longer ending leaves it little context."""
N_CHOICES = 4
MIN_WORDS = 8
"""Sentences with fewer words are left out (a context of at least 5 words)."""
SPLITS = {"train": "lee_cloze.train.jsonl", "validation": "lee_cloze.validation.jsonl"}
MAX_TRAIN = 200
"""Documents of the train split (only a few-shot source; building it is lm-eval's cost)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(docs: list[str], min_words: int = MIN_WORDS) -> list[str]:
    """The sentences of ``docs`` in order (split after ``.``, ``!`` or ``?`` followed by
    whitespace), those with at least ``min_words`` words, brackets dropped (HellaSwag's
    ``preprocess`` would delete bracketed text), duplicates removed.

    Example: ``sentences(["One two three four. Five six seven eight nine."], 4)`` ->
    ``["One two three four.", "Five six seven eight nine."]``.
    """
    out: list[str] = []
    for doc in docs:
        for s in _SENTENCE_END.split(doc):
            s = " ".join(s.replace("[", "").replace("]", "").split())
            if len(s.split()) >= min_words:
                out.append(s)
    return list(dict.fromkeys(out))


def cloze_docs(sents: list[str], seed: int, split: str, k: int = CONT_WORDS) -> list[dict]:
    """One HellaSwag-schema document per sentence (see the module docstring); ``ind`` is the
    sentence's index. Sentences whose ending has no three distinct other endings are skipped.

    Example: for ``"The prime minister said on Tuesday he would go."`` with ``k = 3``:
    ``ctx_a = "The prime minister said on Tuesday"``, the true ending ``"he would go."``
    (with ``k = 1``: ``"go."``).
    """
    rng = np.random.default_rng(seed)
    ends = [" ".join(s.split()[-k:]) for s in sents]
    out = []
    for i, s in enumerate(sents):
        others = [j for j in range(len(sents)) if ends[j] != ends[i]]
        picked: list[str] = []
        for j in rng.permutation(others):
            if ends[j] not in picked:
                picked.append(ends[j])
            if len(picked) == N_CHOICES - 1:
                break
        if len(picked) < N_CHOICES - 1:
            continue
        label = int(rng.integers(N_CHOICES))
        endings = picked[:label] + [ends[i]] + picked[label:]
        ctx = " ".join(s.split()[:-k])
        out.append(
            {
                "ind": i,
                "activity_label": "News",
                "ctx_a": ctx,
                "ctx_b": "",
                "ctx": ctx,
                "endings": endings,
                "source_id": f"lee-{split}-{i}",
                "split": split,
                "split_type": "indomain",
                "label": str(label),
            }
        )
    return out


def bundled_tasks_dir() -> Path:
    """``lm_eval/tasks`` of the installed lm-eval, found without importing it."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise MissingLmEvalError(
            f"lm_eval: expected lm-evaluation-harness to be installed ({EXTRA_HINT}), got none"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "tasks"


def write_cloze_task(
    out_dir: str | os.PathLike, train_docs: list[str], val_docs: list[str], seed: int = 0
) -> Path:
    """Write ``lee_cloze.{train,validation}.jsonl`` (:func:`cloze_docs` of the sentences of
    ``train_docs`` / ``val_docs``) and ``lee_cloze.yaml`` into ``out_dir``; returns the YAML's
    path. The YAML's ``data_files`` are the two file names (relative to its folder) and its
    ``include`` is :data:`BUNDLED_TASK`, lm-eval's bundled HellaSwag config by its name under
    ``lm_eval/tasks``, so the task is the bundled one on these documents wherever the folder
    and lm-eval are (without lm-eval installed the zoo still builds; its lmeval row is an error
    naming the ``lmeval`` extra)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, docs, s in (("train", train_docs, seed), ("validation", val_docs, seed + 1)):
        sents = sentences(docs)
        rows = cloze_docs(sents[:MAX_TRAIN] if split == "train" else sents, s, split)
        (out / SPLITS[split]).write_text(
            "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
        )
        files[split] = SPLITS[split]
    doc = {
        "include": BUNDLED_TASK,
        "task": TASK,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": files},
    }
    path = out / YAML_NAME
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def build_lee_cloze(out_dir: str | os.PathLike) -> Path:
    """:func:`write_cloze_task` on the lee corpus's own split (:func:`tinyllm.data.lee_split`:
    the documents the byte models train on, and the held-out val documents)."""
    train, val = lee_split()
    return write_cloze_task(out_dir, train, val)
