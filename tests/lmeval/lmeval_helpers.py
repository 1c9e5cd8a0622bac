"""Builders for the lm-eval tests: tokenizer, model, task data in each dataset's schema."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval
import transformers
from gensim.test.utils import datapath
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tests.eval.lm.lm_helpers import tiny_gpt2 as lm_tiny_gpt2

EOT = "<|endoftext|>"
BUNDLED = Path(lm_eval.__file__).parent / "tasks"


def lee_lines(n: int | None = None) -> list[str]:
    text = Path(datapath("lee_background.cor")).read_text(encoding="utf-8")
    lines = [s.strip() for s in text.splitlines() if len(s.split()) > 8]
    return lines[:n] if n else lines


def bpe_tokenizer(vocab: int = 400):
    """A byte-level BPE trained on the lee text, as a transformers fast tokenizer."""
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    t.train_from_iterator(lee_lines(), tr)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=t, bos_token=EOT, eos_token=EOT, unk_token=EOT
    )


def tiny_gpt2(vocab: int, eot: int, n_positions: int = 1024, seed: int = 0):
    """GPT2LMHeadModel, hidden 32, 2 layers, random weights (scaled so context matters): the
    instrument tests' model (tests/eval/lm/lm_helpers.py) with ``eot`` as bos and eos."""
    return lm_tiny_gpt2(vocab=vocab, n_positions=n_positions, seed=seed, eot=eot)


# ------------------------------------------------------------------ documents, one schema each


def _words(i: int, k: int) -> str:
    return " ".join(lee_lines(60)[i % 60].split()[:k])


def arc_docs(n):
    return [
        {
            "id": f"q{i}",
            "question": _words(i, 12) + "?",
            "choices": {
                "text": [_words(i + j + 1, 3 + j) for j in range(4)],
                "label": list("ABCD"),
            },
            "answerKey": "ABCD"[i % 4],
        }
        for i in range(n)
    ]


def hellaswag_docs(n):
    return [
        {
            "ind": i,
            "activity_label": "News",
            "ctx_a": _words(i, 8) + ".",
            "ctx_b": "then [title] " + _words(i + 1, 4),
            "ctx": "",
            "endings": [_words(i + j + 2, 4 + j) + "." for j in range(4)],
            "source_id": f"s{i}",
            "split": "val",
            "split_type": "indomain",
            "label": str(i % 4),
        }
        for i in range(n)
    ]


def winogrande_docs(n):
    return [
        {
            "sentence": _words(i, 2) + " _ " + _words(i + 1, 2) + ".",
            "option1": _words(i + 2, 1),
            "option2": _words(i + 3, 1),
            "answer": str(1 + i % 2),
        }
        for i in range(n)
    ]


def copa_docs(n):
    return [
        {
            "premise": _words(i, 7) + ".",
            "choice1": _words(i + 1, 5) + ".",
            "choice2": _words(i + 2, 6) + ".",
            "question": ("cause", "effect")[i % 2],
            "idx": i,
            "label": i % 2,
        }
        for i in range(n)
    ]


def mmlu_docs(n, off=0):
    return [
        {
            "question": _words(i + off, 10) + "?",
            "subject": "anatomy",
            "choices": [_words(i + off + j + 1, 2 + j) for j in range(4)],
            "answer": (i + off) % 4,
        }
        for i in range(n)
    ]


def lambada_docs(n):
    return [{"text": _words(i, 14 + i % 5)} for i in range(n)]


def wikitext_docs(n):
    lines = lee_lines()
    # long enough for several of lm-eval's rolling windows at max_length 1024
    return [{"page": " \n ".join(lines[8 * i : 8 * i + 8 + 20 * (i == 0)])} for i in range(n)]


def gsm8k_docs(n, off=0):
    return [
        {
            "question": _words(i + off, 15) + f"? How many are {i + off}?",
            "answer": _words(i + off + 1, 8) + f".\n#### {3 * (i + off)}",
        }
        for i in range(n)
    ]


# name: (bundled YAML, {split: docs})
TASKS = {
    "arc_easy": ("arc/arc_easy.yaml", {"test": arc_docs(6)}),
    "hellaswag": ("hellaswag/hellaswag.yaml", {"validation": hellaswag_docs(6)}),
    "winogrande": ("winogrande/default.yaml", {"validation": winogrande_docs(6)}),
    "copa": ("super_glue/copa/default.yaml", {"validation": copa_docs(6)}),
    "mmlu_anatomy": (
        "mmlu/default/mmlu_anatomy.yaml",
        {"test": mmlu_docs(5), "dev": mmlu_docs(5, off=20)},
    ),
    "lambada_openai": ("lambada/lambada_openai.yaml", {"test": lambada_docs(6)}),
    "wikitext": ("wikitext/wikitext.yaml", {"test": wikitext_docs(3)}),
    "gsm8k": ("gsm8k/gsm8k.yaml", {"test": gsm8k_docs(3), "train": gsm8k_docs(8, off=30)}),
}


# splits the config loads at build time (its few-shot source) though no test reads them
TRAIN = {
    "arc_easy": ("train", "validation"),
    "hellaswag": ("train",),
    "winogrande": ("train",),
    "copa": ("train",),
    "wikitext": ("train", "validation"),
}


def write_tasks(d: Path, names=None, tasks=None) -> Path:
    """For each task: its documents as JSONL and a YAML that includes the bundled config and
    overrides only ``dataset_path`` and ``dataset_kwargs.data_files``. ``tasks`` defaults to
    :data:`TASKS` (a mapping of the same shape)."""
    tasks = TASKS if tasks is None else tasks
    for name in names or tasks:
        rel, splits = tasks[name]
        files = {}
        splits = {**{s: next(iter(splits.values())) for s in TRAIN.get(name, ())}, **splits}
        for split, docs in splits.items():
            p = d / f"{name}.{split}.jsonl"
            p.write_text("".join(json.dumps(x) + "\n" for x in docs), encoding="utf-8")
            files[split] = str(p)
        y = {
            "include": str(BUNDLED / rel),
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": files},
        }
        (d / f"{name}.yaml").write_text(json.dumps(y, indent=1), encoding="utf-8")
    return d
