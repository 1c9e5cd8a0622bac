"""Train the demo zoo: every LM family in ``FAMILIES`` on the ``lee`` corpus, small and seeded.

``build_zoo(out_dir)`` writes::

    out_dir/data/lee_train.bin, lee_val.bin    token files (tinyllm.data.build_lee)
    out_dir/<name>/ or out_dir/<name>.safetensors   one checkpoint per family
    out_dir/zoo.yaml                           the manifest: suite zoo, one entry per model
    out_dir/train_log.json                     seconds, steps and last training loss per model

Each family is trained from a :class:`Recipe` (config, steps, extra train kwargs, manifest
options) with the same ``seed``, on ``threads`` torch threads (2: the machine's cores). Steps are
fixed, not time budgets, so a build is reproducible on one machine and thread count.

Threads: with more torch (OpenMP) threads than idle cores, GNU OpenMP's default spin-waiting
makes small ops many times slower. ``tinyllm zoo build`` sets ``OMP_WAIT_POLICY=PASSIVE`` before
torch is imported; set it yourself when calling :func:`build_zoo` from a busy machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tinyllm.data import build_lee
from tinyllm.tokens import read_tokens

MANIFEST_NAME = "zoo.yaml"
LOG_NAME = "train_log.json"
DATA_DIR = "data"


@dataclass(frozen=True)
class Recipe:
    """How the zoo trains one family: ``family.train(Config(**config), data, seed=seed,
    steps=steps, **train_kwargs)``; ``options`` go into the manifest entry (gpt: ctx_len,
    stride)."""

    config: Mapping = field(default_factory=dict)
    steps: int = 0
    train_kwargs: Mapping = field(default_factory=dict)
    options: Mapping = field(default_factory=dict)


def _gpt_recipe() -> Recipe:
    """The GPT's zoo recipe: ``gpt.ZOO_CONFIG``, ``ZOO_STEPS``, ``ZOO_TRAIN_KWARGS`` (the
    measurements behind them are beside them in tinyllm/models/gpt.py). Scored with windows of
    the full block and stride block // 2: every token after the first window sees at least
    block // 2 bytes of context."""
    from tinyllm.models import gpt

    cfg = gpt.ZOO_CONFIG
    return Recipe(
        config=dataclasses.asdict(cfg),
        steps=gpt.ZOO_STEPS,
        train_kwargs=dict(gpt.ZOO_TRAIN_KWARGS),
        options={"ctx_len": cfg.block_size, "stride": cfg.block_size // 2},
    )


def default_recipes() -> dict[str, Recipe]:
    """The zoo's recipes by family name, sized for about 5 minutes in all on 2 idle cores."""
    return {
        "bigram": Recipe(config={"k": 0.5}),
        "ngram": Recipe(config={"order": 5}),
        "nplm": Recipe(
            config={"context": 8, "emb_dim": 32, "hidden": 384, "direct": True, "lr": 0.01},
            steps=300,
        ),
        "rnnlm": Recipe(
            config={
                "cell": "gru",
                "emb_dim": 64,
                "hidden": 384,
                "bptt": 64,
                "batch_size": 32,
                "lr": 0.006,
            },
            steps=600,
        ),
        "gpt": _gpt_recipe(),
    }


ProgressFn = Callable[[str, int, int, float], None]


def _checkpoint_name(family: str) -> str:
    return f"{family}.safetensors" if family == "ngram" else family


def build_zoo(
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    progress: bool | ProgressFn = True,
    threads: int = 2,
    recipes: Mapping[str, Recipe] | None = None,
) -> list[tuple[str, Path]]:
    """Train every LM family of ``FAMILIES`` that has a recipe; write checkpoints, data, manifest.

    ``progress``: True shows a rich progress bar, False nothing, a callable gets
    ``(name, step, total, loss)``. ``recipes`` replaces :func:`default_recipes` (tests use tiny
    ones). LM families without a recipe are skipped. Returns ``[(name, checkpoint path)]`` in
    ``FAMILIES`` order. torch's thread count is set to ``threads`` and restored afterwards.
    """
    import numpy as np
    import torch

    from tinyllm.models import FAMILIES

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = build_lee(out / DATA_DIR)
    train_data = np.array(read_tokens(corpus.train_path))  # in memory: ~330 KB
    recipes = default_recipes() if recipes is None else dict(recipes)
    todo = [
        (name, fam)
        for name, fam in FAMILIES.items()
        if getattr(fam, "KIND", None) == "lm" and name in recipes
    ]

    bar = None
    if progress is True:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        bar = Progress(
            TextColumn("{task.description:<8}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.3f}"),
            TimeElapsedColumn(),
        )
        tasks = {
            name: bar.add_task(name, total=max(recipes[name].steps, 1), loss=float("nan"))
            for name, _ in todo
        }

    def report(name: str, step: int, total: int, loss: float) -> None:
        if bar is not None:
            bar.update(tasks[name], completed=step, total=total, loss=loss)
        elif callable(progress):
            progress(name, step, total, loss)

    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    results: list[tuple[str, Path]] = []
    entries, log = [], {}
    try:
        if bar is not None:
            bar.start()
        for name, fam in todo:
            r = recipes[name]
            last = {"loss": float("nan")}

            def cb(step, total, loss, _name=name, _last=last):
                _last["loss"] = float(loss)
                report(_name, step, total, loss)

            t0, c0 = time.perf_counter(), time.process_time()
            model = fam.train(
                fam.Config(**dict(r.config)),
                train_data,
                seed=seed,
                steps=r.steps,
                progress=cb,
                **dict(r.train_kwargs),
            )
            path = fam.save(model, out / _checkpoint_name(name))
            log[name] = {
                "seconds": round(time.perf_counter() - t0, 2),
                "cpu_seconds": round(time.process_time() - c0, 2),
                "steps": r.steps,
                "last_loss": last["loss"],
                "seed": seed,
                "threads": threads,
            }
            entries.append(
                {
                    "name": name,
                    "family": name,
                    "checkpoint": Path(path).relative_to(out).as_posix(),
                    "data": Path(corpus.val_path).relative_to(out).as_posix(),
                    "options": dict(r.options),
                }
            )
            results.append((name, Path(path)))
    finally:
        torch.set_num_threads(prev_threads)
        if bar is not None:
            bar.stop()
    manifest = {"suite": "zoo", "entries": entries}
    (out / MANIFEST_NAME).write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    (out / LOG_NAME).write_text(json.dumps(log, indent=2) + "\n", encoding="utf-8")
    return results
