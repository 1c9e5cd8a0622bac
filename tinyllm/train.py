"""Train the demo zoo: every family in ``FAMILIES`` that has a recipe, on real data, seeded.

``build_zoo(out_dir)`` writes::

    out_dir/data/...                           the corpora's files (tinyllm.data.CORPORA)
    out_dir/<name>/ or out_dir/<name>.safetensors   one checkpoint per recipe
    out_dir/zoo.yaml                           the manifest: suite zoo, one or more entries per model
    out_dir/train_log.json                     seconds, steps and last training loss per model

Each model is trained from a :class:`Recipe` (family, config, training settings, steps, the
corpus it trains on, the manifest entries it is scored as) with the same ``seed``;
:func:`default_recipes` are the zoo's, and docs/zoo.md says what each one's sweep measured.

Side by side: ``jobs`` models train at once, each in its own process on ``threads`` torch threads
(default 2 jobs x 1 thread: these models are too small for two threads to help one of them, and
two single-thread processes keep both cores busy; 2 threads on one of them train it more slowly
than 1). The longest recipe (its measured ``cost_s``, plus that of the recipes that start from
it) starts first; a recipe with ``init_from`` starts after the model it starts from. The worker
processes, one per job slot, are :mod:`tinyllm.train_jobs`'s (nothing is pickled). ``jobs=1``
trains in this process, one model after the other.

Threads: with more torch (OpenMP) threads than idle cores, GNU OpenMP's default spin-waiting
makes small ops many times slower. ``tinyllm zoo build`` and the worker processes set
``OMP_WAIT_POLICY=PASSIVE`` before torch is imported; set it yourself when calling
:func:`build_zoo` with ``jobs=1`` from a busy machine.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from tinyllm import safeio
from tinyllm.data import CORPORA
from tinyllm.eval.lmeval import demo_task
from tinyllm.models import FAMILIES
from tinyllm.train_jobs import ProgressFn, run_parallel, train_job

MANIFEST_NAME = "zoo.yaml"
LOG_NAME = "train_log.json"
DATA_DIR = "data"

LMEVAL_TASKS: dict[str, Callable[[Path], Path]] = {"lee_cloze": demo_task.build_lee_cloze}
"""lm-eval task name -> its builder: ``build(folder) -> the task YAML`` (written under
``data/<name>/``; lm-eval itself is needed only to score it)."""


@dataclass(frozen=True)
class Recipe:
    """How the zoo trains one model and what it is scored on.

    Training: ``FAMILIES[family].train(Config(**config), data, seed=seed, steps=steps,
    **train_config)`` with ``data = CORPORA[data].read_train(files["train"])`` (plus
    ``init=<checkpoint path of init_from>`` when ``init_from`` is set); ``train_config`` holds
    fields of the family's ``TrainConfig`` (the rest keep their defaults) and the checkpoint
    records them all. Scoring: one manifest entry per item of ``entries`` (entry name -> key of
    the corpus file it is scored on; default ``{<recipe name>: "val"}``), each with ``options``
    (gpt: ctx_len, stride; seq2seq: beam). ``family`` defaults to the recipe's name.
    ``cost_s``: measured single-thread training seconds, used only to start the longest recipe
    first (0: unknown). ``trainer``: a module of ``tinyllm.models`` whose ``Config``, ``train``
    and ``save`` train the model instead of the family's (``hf``, whose models are scored as they
    are, is trained by ``tinyllm.models.hf_train``); None: the family's own.
    ``lmeval_entries``: more entries of the same checkpoint, of kind ``lmeval`` (an lm-eval
    task, :mod:`tinyllm.eval.kinds.lmeval`): entry name -> ``{"task": <a key of
    LMEVAL_TASKS>, "options": {...}}`` (the entry's options, not the recipe's).
    """

    config: Mapping = field(default_factory=dict)
    steps: int = 0
    train_config: Mapping = field(default_factory=dict)
    options: Mapping = field(default_factory=dict)
    family: str | None = None
    data: str = "lee"
    entries: Mapping[str, str] | None = None
    init_from: str | None = None
    cost_s: float = 0.0
    trainer: str | None = None
    lmeval_entries: Mapping[str, Mapping] = field(default_factory=dict)

    def family_of(self, name: str) -> str:
        """The family this recipe trains (its own ``family``, else the recipe's name)."""
        return self.family or name

    def entries_of(self, name: str) -> dict[str, str]:
        """Manifest entry name -> corpus file key."""
        return dict(self.entries) if self.entries is not None else {name: "val"}


def _gpt_recipe() -> Recipe:
    """The GPT's zoo recipe, scored with windows of the full block and stride block // 2: every
    token after the first window sees at least block // 2 bytes of context."""
    block = 32
    return Recipe(
        config={"block_size": block, "n_layer": 2, "n_head": 4, "n_embd": 64}
        | {"dropout": 0.0, "tie_weights": False},
        steps=1200,
        train_config={"batch_size": 32, "lr": 1e-2},
        options={"ctx_len": block, "stride": block // 2},
        cost_s=57.5,
        # the lee cloze task (HellaSwag's schema, lm-eval's own config): chance is 1/4
        lmeval_entries={"gpt-lmeval-cloze": {"task": "lee_cloze", "options": {}}},
    )


# The zoo's BERT shape, shared by the classifiers fine-tuned from it.
_BERT_SHAPE = {"max_len": 64, "n_layer": 2, "n_head": 4, "n_embd": 64}


ENCODER_SCORES = {"bert": "mlm", "electra": "rtd"}
"""What an encoder's zoo rows score, in their names: bert its masked bytes (``mlm``), electra
its replaced-byte detection (``rtd``); the rows file only supplies the sentences."""


def _encoder_recipe(
    family: str, config: Mapping, train_config: Mapping, steps: int, cost_s: float
) -> Recipe:
    """bert's or electra's zoo recipe: pretrained on corpus ``encoder``'s ``encoder_train.bin``
    (the lee training bytes plus the rows files' train sentences, docs/data.md), scored on the
    val rows of both rows files as ``<family>-<what is scored>-<rows file>``
    (:data:`ENCODER_SCORES`: ``bert-mlm-polarity``, not a polarity classifier)."""
    scored = f"{family}-{ENCODER_SCORES[family]}"
    return Recipe(
        config=dict(config),
        steps=steps,
        train_config=dict(train_config),
        data="encoder",
        entries={f"{scored}-polarity": "polarity", f"{scored}-langid": "langid"},
        cost_s=cost_s,
    )


def _classifier_recipe(task: str, steps: int, cost_s: float, cross_fit: int = 0) -> Recipe:
    """A classifier (CLS head, dropout 0.1) fine-tuned from the zoo's BERT on ``task`` (a rows
    corpus): langid on its train rows, scored on its val rows; polarity (``cross_fit`` 5) as 5
    classifiers, each trained on 4 of the 5 hash folds and scoring the fifth, so that all of its
    rows are scored (tinyllm.models.classifier)."""
    return Recipe(
        config={"tl_head": "cls", "backbone": "bert", **_BERT_SHAPE, "dropout": 0.1},
        steps=steps,
        train_config={"batch_size": 32, "lr": 1e-3}
        | ({"cross_fit": cross_fit} if cross_fit else {}),
        family="classifier",
        data=task,
        entries={f"classifier-{task}": "rows"},
        init_from="bert",
        cost_s=cost_s,
    )


def _seq2seq_recipe(
    family: str, config: Mapping, train_config: Mapping, steps: int, cost_s: float
) -> Recipe:
    """A seq2seq family's zoo recipe: trained once on both cldr tasks and scored on each task's
    val file with beam 4."""
    return Recipe(
        config=dict(config),
        steps=steps,
        train_config=dict(train_config),
        options={"beam": 4},
        data="cldr",
        entries={f"{family}-names": "names_val", f"{family}-dates8": "dates8_val"},
        cost_s=cost_s,
    )


def default_recipes() -> dict[str, Recipe]:
    """The zoo's recipes by model name, two trained side by side, one thread each (docs/zoo.md:
    the sweeps). ``cost_s``: single-thread CPU seconds (train_log.json) of the fresh-clone
    ``make demo`` at 76acf50, alone on 2 cores (docs/zoo.md), so that the longest start first."""
    return {
        "bigram": Recipe(config={"k": 0.5}),
        "ngram": Recipe(config={"order": 5}, cost_s=0.6),
        "nplm": Recipe(
            config={"context": 8, "emb_dim": 32, "hidden": 384, "direct": True},
            train_config={"lr": 0.01},
            steps=150,
            cost_s=20.6,
        ),
        "rnnlm": Recipe(
            config={"cell": "gru", "emb_dim": 64, "hidden": 384},
            train_config={"bptt": 64, "batch_size": 32, "lr": 0.006},
            steps=120,
            cost_s=42.5,
        ),
        "gpt": _gpt_recipe(),
        # trained on the lee training text as words (corpus wordsim), scored on WordSim-353,
        # SimLex-999 and the questions-words analogies
        "word2vec": Recipe(
            config={"dim": 50},
            train_config={"batch_size": 2048},
            steps=3000,
            data="wordsim",
            entries={
                "word2vec-wordsim353": "wordsim353",
                "word2vec-simlex999": "simlex999",
                "word2vec-analogies": "analogies",
            },
            cost_s=52.2,
        ),
        "seq2seq": _seq2seq_recipe(
            "seq2seq",
            {"emb_dim": 64, "hidden": 128, "max_len": 64},
            {"batch_size": 64, "lr": 3e-3, "warmup": 50},
            steps=1000,
            cost_s=203.2,
        ),
        "transformer": _seq2seq_recipe(
            "transformer",
            {"n_embd": 64, "n_head": 4, "n_enc_layer": 1, "n_dec_layer": 1, "dropout": 0.1}
            | {"max_len": 64},
            {"batch_size": 64, "lr": 3e-3, "warmup": 100},
            steps=1400,
            cost_s=256.5,
        ),
        "copy": Recipe(  # answers the source; on dates8 only the seq2seq rows' baseline (0)
            config={"max_len": 64},
            options={"beam": 4},
            data="cldr",
            entries={"copy-names": "names_val"},
        ),
        "bert": _encoder_recipe(
            "bert", _BERT_SHAPE, {"batch_size": 32, "lr": 2e-3}, steps=400, cost_s=42.5
        ),
        "electra": _encoder_recipe(
            "electra",
            {"max_len": 32, "n_layer": 2, "n_head": 4, "n_embd": 64}
            | {"gen_n_layer": 1, "gen_n_embd": 32, "disc_local_bias": 1.0},
            {"batch_size": 32, "lr": 2e-3, "gen_lr": 2e-4},
            steps=1200,
            cost_s=68.0,
        ),
        "classifier-polarity": _classifier_recipe("polarity", steps=60, cost_s=40.0, cross_fit=5),
        "classifier-langid": _classifier_recipe("langid", steps=150, cost_s=17.6),
        # a Hugging Face LlamaForCausalLM with its own byte-level BPE, scored by family hf on
        # the lee val text (the val token file's bytes, read in its own tokenizer)
        "llama": Recipe(
            config={"n_merges": 1000, "hidden": 192, "n_layer": 3, "n_head": 6, "n_kv_head": 2}
            | {"intermediate": 512, "ctx_len": 128},
            steps=120,
            train_config={"batch_size": 16, "seq_len": 64, "lr": 3e-3},
            options={"ctx_len": 128, "stride": 64},
            family="hf",
            trainer="tinyllm.models.hf_train",
            cost_s=52.5,
        ),
    }


def _checkpoint_name(name: str, family: str) -> str:
    return f"{name}.safetensors" if family == "ngram" else name


def _check_recipes(recipes: Mapping[str, Recipe]) -> None:
    """Every recipe names a known family and corpus, ``init_from`` a recipe, entry names unique."""
    seen: dict[str, str] = {}
    for name, r in recipes.items():
        fam = r.family_of(name)
        if fam not in FAMILIES:
            raise ValueError(
                f"recipe {name!r}: expected a family in {sorted(FAMILIES)}, got {fam!r}"
            )
        if r.data not in CORPORA:
            raise ValueError(
                f"recipe {name!r}: expected a corpus in {sorted(CORPORA)}, got {r.data!r}"
            )
        if r.init_from is not None and (r.init_from not in recipes or r.init_from == name):
            raise ValueError(
                f"recipe {name!r}: expected init_from to name another recipe of "
                f"{sorted(recipes)}, got {r.init_from!r}"
            )
        if r.init_from is not None and recipes[r.init_from].init_from is not None:
            raise ValueError(
                f"recipe {name!r}: init_from {r.init_from!r} itself starts from another model; "
                "expected a chain of at most one"
            )
        if r.trainer is not None and not r.trainer.startswith("tinyllm.models."):
            raise ValueError(
                f"recipe {name!r}: expected trainer to name a module of tinyllm.models, "
                f"got {r.trainer!r}"
            )
        for entry, spec in r.lmeval_entries.items():
            if set(spec) - {"task", "options"} or spec.get("task") not in LMEVAL_TASKS:
                raise ValueError(
                    f"recipe {name!r}: lmeval entry {entry!r}: expected {{'task': one of "
                    f"{sorted(LMEVAL_TASKS)}, 'options': {{...}}}}, got {dict(spec)!r}"
                )
        for entry in [*r.entries_of(name), *r.lmeval_entries]:
            if entry in seen:
                raise ValueError(
                    f"recipe {name!r}: manifest entry {entry!r} is already made by recipe "
                    f"{seen[entry]!r}; expected unique entry names"
                )
            seen[entry] = name


def _job_spec(
    name: str,
    recipes: Mapping[str, Recipe],
    files: Mapping[str, Path],
    out: Path,
    seed: int,
    threads: int,
) -> dict:
    """Everything one training job needs, JSON-native (it crosses a process boundary as JSON)."""
    r = recipes[name]
    fam = r.family_of(name)
    init = None
    if r.init_from is not None:
        init = out / _checkpoint_name(r.init_from, recipes[r.init_from].family_of(r.init_from))
    return {
        "name": name,
        "family": fam,
        "config": dict(r.config),
        "steps": int(r.steps),
        "train_config": dict(r.train_config),
        "data": r.data,
        "train_file": str(files["train"]),
        "init": None if init is None else str(init),
        "out": str(out / _checkpoint_name(name, fam)),
        "seed": int(seed),
        "threads": int(threads),
        "trainer": r.trainer,
    }


def check_out_dir(out_dir: str | os.PathLike, what: str = "out_dir") -> Path:
    """Refuse an output folder that is not a folder or a new path (a file, a device, a FIFO, a
    symbolic link, or a new path under something that is not a folder), before anything is
    built: :class:`~tinyllm.safeio.UnsafePathError` naming ``what`` and the path."""
    out = Path(out_dir)
    got = safeio.path_kind(out)
    if got not in (None, "a folder"):
        raise safeio.UnsafePathError(f"{what} {out}: expected a folder or a new path, got {got}")
    above = out.parent
    while got is None and safeio.path_kind(above) is None and above != above.parent:
        above = above.parent  # the nearest existing folder above a new path
    if got is None and not above.is_dir():
        kind = safeio.path_kind(above)
        raise safeio.UnsafePathError(
            f"{what} {out}: expected a folder or a new path, got a path under {kind} {above}"
        )
    return out


def lm_options(family: str, options: Mapping) -> dict:
    """A recipe's entry options; an lm entry's say its documents, ``doc_sep: "\\n"`` (each
    corpus file holds one document per line, :func:`tinyllm.data.encode_documents`)."""
    out = dict(options)
    if getattr(FAMILIES.get(family), "KIND", None) == "lm":
        out.setdefault("doc_sep", "\n")
    return out


def build_zoo(
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    progress: bool | ProgressFn = True,
    threads: int = 1,
    jobs: int = 2,
    recipes: Mapping[str, Recipe] | None = None,
) -> list[tuple[str, Path]]:
    """Train every recipe (default :func:`default_recipes`); write checkpoints, data, manifest.

    ``progress``: True shows a rich progress bar, False nothing, a callable gets
    ``(name, step, total, loss)``. ``jobs``: models trained at once, each in its own process on
    ``threads`` torch threads; ``jobs=1`` trains them one after the other in this process (its
    torch thread count is set to ``threads`` and restored afterwards). Returns
    ``[(name, checkpoint path)]`` in recipe order; the manifest lists the entries in that order.
    ``out_dir`` must be a folder or a new path (:func:`check_out_dir`).
    """
    if jobs < 1 or threads < 1:
        raise ValueError(f"expected jobs >= 1 and threads >= 1, got jobs={jobs}, threads={threads}")
    out = check_out_dir(out_dir)
    recipes = default_recipes() if recipes is None else dict(recipes)
    _check_recipes(recipes)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        c: CORPORA[c].build(out / DATA_DIR) for c in dict.fromkeys(r.data for r in recipes.values())
    }
    for c, f in files.items():
        if "train" not in f:
            raise ValueError(f"corpus {c!r}: expected a 'train' file, got keys {sorted(f)}")
    for name, r in recipes.items():
        missing = [k for k in r.entries_of(name).values() if k not in files[r.data]]
        if missing:
            raise ValueError(
                f"recipe {name!r}: expected entry data keys among {sorted(files[r.data])} of "
                f"corpus {r.data!r}, got {missing}"
            )

    tasks_needed = {s["task"] for r in recipes.values() for s in r.lmeval_entries.values()}
    task_yamls = {t: LMEVAL_TASKS[t](out / DATA_DIR / t) for t in sorted(tasks_needed)}

    bar = None
    if progress is True:
        # rich only where a bar is shown: the worker processes never import it
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        width = max(len(n) for n in recipes)
        bar = Progress(
            TextColumn(f"{{task.description:<{width}}}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.3f}"),
            TimeElapsedColumn(),
        )
        tasks = {
            name: bar.add_task(name, total=max(r.steps, 1), loss=float("nan"))
            for name, r in recipes.items()
        }

    lock = threading.Lock()

    def report(name: str, step: int, total: int, loss: float) -> None:
        with lock:  # worker reader threads call this concurrently
            if bar is not None:
                bar.update(tasks[name], completed=step, total=max(total, 1), loss=loss)
            elif callable(progress):
                progress(name, step, total, loss)

    # start-priority order: the longest path first (a recipe's measured cost plus that of the
    # recipes that start from it, which wait for it), then recipe order
    path_s = {n: r.cost_s for n, r in recipes.items()}
    for r in recipes.values():
        if r.init_from is not None:
            path_s[r.init_from] += r.cost_s
    order = sorted(recipes, key=lambda n: -path_s[n])
    specs = [_job_spec(n, recipes, files[recipes[n].data], out, seed, threads) for n in order]
    log: dict[str, dict] = {}
    try:
        if bar is not None:
            bar.start()
        if jobs == 1:
            prev_threads = torch.get_num_threads()
            torch.set_num_threads(threads)
            try:
                for spec in sorted(specs, key=lambda s: recipes[s["name"]].init_from is not None):
                    log[spec["name"]] = train_job(spec, report)
            finally:
                torch.set_num_threads(prev_threads)
        else:
            deps = {n: r.init_from for n, r in recipes.items()}
            log = run_parallel(specs, deps, jobs, report, out / "logs")
    finally:
        if bar is not None:
            bar.stop()

    entries, results = [], []
    for name, r in recipes.items():
        path = Path(log[name].pop("path"))
        for entry, key in r.entries_of(name).items():
            entries.append(
                {
                    "name": entry,
                    "family": r.family_of(name),
                    "checkpoint": path.relative_to(out).as_posix(),
                    "data": Path(files[r.data][key]).relative_to(out).as_posix(),
                    "options": lm_options(r.family_of(name), r.options),
                }
            )
        for entry, spec in r.lmeval_entries.items():
            entries.append(
                {
                    "name": entry,
                    "family": r.family_of(name),
                    "kind": "lmeval",
                    "checkpoint": path.relative_to(out).as_posix(),
                    "data": task_yamls[spec["task"]].relative_to(out).as_posix(),
                    "options": dict(spec.get("options") or {}),
                }
            )
        results.append((name, path))
    manifest = {"suite": "zoo", "entries": entries}
    (out / MANIFEST_NAME).write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    log = {name: log[name] for name in recipes}
    (out / LOG_NAME).write_text(json.dumps(log, indent=2) + "\n", encoding="utf-8")
    return results
