"""The ``tinyllm`` command. Sub-commands are thin: they parse, call the library, print."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Evaluate small language models."
)
_DEBUG = {"on": bool(os.environ.get("TINYLLM_DEBUG"))}
"""Whether the error boundary in :func:`main` shows the full traceback (``--debug``)."""


def _flag_display_type(self, ctx):
    """Help shows a value's type (``--store <str>``) but no tag for a flag (``--json``)."""
    if getattr(self, "is_flag", False) and not getattr(self, "metavar", None):
        return None
    return _typer_display_type(self, ctx)


_typer_display_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_display_type


@app.callback()
def _global_options(
    debug: bool = typer.Option(
        False, "--debug", help="On an error, print the full traceback, not one line."
    ),
) -> None:
    """Evaluate small language models."""
    if debug:
        _DEBUG["on"] = True


eval_app = typer.Typer(help="Score models: perplexity, multiple-choice tasks, the zoo suite.")
zoo_app = typer.Typer(no_args_is_help=True, help="Build the demo zoo of trained models.")
app.add_typer(eval_app, name="eval")
app.add_typer(zoo_app, name="zoo")
# piped output (make demo, CI logs) gets 120 columns instead of rich's 80 so tables are not cut
console = Console() if sys.stdout.isatty() else Console(width=120)


@app.command()
def version() -> None:
    """Print the tinyllm version."""
    from tinyllm import __version__

    console.print(__version__)


@app.command()
def demo() -> None:
    """The main job on the embedded defaults (what `make demo` runs)."""
    from tinyllm_suite.demo import run_demo

    raise typer.Exit(run_demo(console))


# --- tinyllm eval (the suite callback, `eval ppl`, `eval task`) ---


# >>> eval ppl / eval task (helper A: tinyllm/eval/lm.py) >>>
def _lm_fail(msg: str) -> typer.Exit:
    from rich.markup import escape

    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(msg)}", highlight=False)
    return typer.Exit(2)


class _LoadedLM:
    """A model opened from --model or --hf, with what the commands need to know about it."""

    def __init__(self, model, arch, family, vocab_size, ctx_len, tokenizer, source) -> None:
        self.model, self.arch, self.family = model, arch, family
        self.vocab_size, self.ctx_len = vocab_size, ctx_len
        self.tokenizer, self.source = tokenizer, source  # tokenizer: a dict, "hf", or None

    @property
    def strided(self) -> bool:
        """Scored by the instrument's strided windows (gpt, Hugging Face), not family NLLs."""
        return self.family is None or self.arch == "gpt"


def _open_lm(model, hf) -> _LoadedLM:
    """Open exactly one of --model DIR (a tinyllm lm checkpoint) or --hf DIR."""
    from pathlib import Path

    if (model is None) == (hf is None):
        raise _lm_fail("expected exactly one of --model DIR or --hf DIR")
    if hf is not None:
        if not Path(hf).is_dir():
            raise _lm_fail(f"{hf}: expected a local Hugging Face model folder")
        from tinyllm.models import hf as hf_family

        try:  # safetensors only: a pickled .bin is never unpickled; in the folder's own dtype
            m = hf_family.load(hf, dtype=None, quiet=True)
        except (OSError, ValueError) as e:
            raise _lm_fail(
                f"{hf}: expected a Hugging Face causal LM in safetensors, got: {e}"
            ) from None
        ctx = hf_family.context_length(m)
        return _LoadedLM(m, hf_family.ARCH, None, m.config.vocab_size, ctx, "hf", str(hf))
    from tinyllm.checkpoint import read_config, read_single_metadata
    from tinyllm.models import FAMILIES

    p = Path(model)
    if p.is_file():
        arch, tok = read_single_metadata(p)["tl_arch"], {"type": "byte", "vocab_size": 256}
    else:
        doc = read_config(p)
        arch, tok = doc["tl_arch"], doc.get("tokenizer") or {"type": "byte", "vocab_size": 256}
    family = FAMILIES.get(arch)
    if family is None:
        raise _lm_fail(f"{p}: unknown tl_arch {arch!r}; expected one of {sorted(FAMILIES)}")
    if getattr(family, "KIND", None) != "lm":
        raise _lm_fail(
            f"{p}: expected a language model (kind lm), got {arch!r} of kind "
            f"{getattr(family, 'KIND', None)!r}"
        )
    m = family.load(p)
    cfg = getattr(m, "cfg", None)
    ctx = getattr(cfg, "ctx_len", None) or getattr(cfg, "block_size", None)
    return _LoadedLM(m, arch, family, getattr(cfg, "vocab_size", None), ctx, tok, str(p))


def _check_vocab(ids, vocab_size, data, source) -> None:
    """Every id in the token file must be < the model's vocabulary (read in chunks)."""
    if vocab_size is None or ids.size == 0:
        return
    top = max(int(ids[i : i + (1 << 22)].max()) for i in range(0, ids.size, 1 << 22))
    if top >= vocab_size:
        raise _lm_fail(
            f"{data}: expected token ids < {vocab_size} (the vocabulary of {source}), got id {top}"
        )


class _Progress:
    """Progress of a long command on stderr; ``--quiet`` turns it off.

    A terminal gets a live rich bar. Anything else (a pipe, a CI log, ``make``) gets a plain
    line when work starts, then at most one every :attr:`every` seconds, then when it ends:
    a live bar is invisible there, and a silent 9-minute run looks hung.
    """

    every = 10.0

    def __init__(self, description: str, total: int, quiet: bool = False) -> None:
        import time

        self.description, self.total, self.quiet = description, max(int(total), 0), quiet
        self._time = time.monotonic
        self._t0 = self._last = self._time()
        self._done = 0
        self._err = Console(stderr=True)
        self._bar = None

    def __enter__(self) -> _Progress:
        if self.quiet:
            return self
        if self._err.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self._err,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total)
        else:
            self._line()
        return self

    def _line(self) -> None:
        pct = 100.0 * self._done / self.total if self.total else 100.0
        took = self._time() - self._t0
        self._err.print(
            f"{self.description}: {self._done}/{self.total} ({pct:.0f}%, {took:.0f} s)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )

    def update(self, done: int, total: int | None = None) -> None:
        """Record ``done`` units of ``total``: the callback the instrument calls."""
        self._done = int(done)
        if total is not None:
            self.total = int(total)
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self._done, total=self.total)
        elif self._time() - self._last >= self.every:
            self._last = self._time()
            self._line()

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif not self.quiet and exc[0] is None:
            self._line()


_QUIET_HELP = "No progress output on stderr."


def _interval_table(title: str, rows: list[tuple[str, dict, str]], caption: str):
    from rich.table import Table

    table = Table(title=title, caption=caption)
    for col in ("metric", "value", "95% lo", "95% hi", "unit"):
        table.add_column(col, justify="left" if col in ("metric", "unit") else "right")
    for name, iv, unit in rows:
        table.add_row(name, f"{iv['value']:.4f}", f"{iv['lo']:.4f}", f"{iv['hi']:.4f}", unit)
    return table


@eval_app.command("ppl")
def eval_ppl_cmd(
    data: str = typer.Option(..., "--data", help="Token file (formats/tokens-bin.md)."),
    model: str | None = typer.Option(None, "--model", help="A tinyllm lm checkpoint."),
    hf: str | None = typer.Option(None, "--hf", help="A local Hugging Face causal LM folder."),
    ctx_len: int | None = typer.Option(
        None, "--ctx-len", min=2, help="Window length C (default: the model's context)."
    ),
    stride: int | None = typer.Option(
        None, "--stride", min=1, help="Stride s, 1 <= s < C (default: C // 2)."
    ),
    n_bytes: int = typer.Option(
        0,
        "--n-bytes",
        min=0,
        help="UTF-8 bytes of the scored text, at least the scored tokens (0: one token per byte).",
    ),
    batch_size: int | None = typer.Option(
        None,
        "--batch-size",
        min=1,
        help="Windows per forward pass (default: 2048 // C, a budget of 2048 tokens).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for machines."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=_QUIET_HELP),
) -> None:
    """Strided perplexity of a token file: mean NLL, perplexity and bits per byte, 95% intervals.

    Our gpt and Hugging Face models are scored with strided windows (every token once, at least C - s tokens of context after the first window); other lm families with their own NLLs.
    """
    import json

    from tinyllm.eval import lm
    from tinyllm.tokens import read_tokens

    try:
        ids = read_tokens(data, min_tokens=2)
        if n_bytes and n_bytes < ids.size - 1:
            # every scored token covers at least one byte of text: fewer bytes than tokens is a
            # wrong count, and would report bits per byte inflated by tokens/bytes
            raise _lm_fail(
                f"--n-bytes: expected at least the {ids.size - 1} scored tokens of {data} (each "
                f"token covers at least one byte), got {n_bytes}"
            )
        lm_ = _open_lm(model, hf)
        _check_vocab(ids, lm_.vocab_size, data, lm_.source)
        out = {"model": lm_.source, "arch": lm_.arch, "data": str(data)}
        if lm_.strided:
            c = ctx_len if ctx_len is not None else lm_.ctx_len
            if c is None:
                raise _lm_fail(f"{lm_.source}: context length unknown; pass --ctx-len")
            if lm_.ctx_len is not None and c > lm_.ctx_len:
                raise _lm_fail(
                    f"--ctx-len: expected at most the model's context {lm_.ctx_len}, got {c}"
                )
            s = stride if stride is not None else max(1, c // 2)
            bs = batch_size if batch_size is not None else lm.DEFAULT_BATCH_SIZE
            with _Progress("scoring tokens", int(ids.size) - 1, quiet) as bar:
                res = lm.eval_ppl(lm_.model, ids, c, s, n_bytes, bs, progress=bar.update)
            out.update({"ctx_len": c, "stride": s})
        else:
            if ctx_len is not None or stride is not None:
                Console(stderr=True).print(
                    f"note: --ctx-len/--stride ignored: {lm_.arch} scores with its own context"
                )
            # the family's own NLLs come in one call: progress says when it starts and ends
            with _Progress(f"scoring tokens ({lm_.arch})", int(ids.size) - 1, quiet) as bar:
                nlls = lm_.family.token_nlls(lm_.model, ids)
                bar.update(len(nlls))
            res = lm.summarize_nlls(nlls, n_bytes)
            out.update({"ctx_len": None, "stride": None})
    except ValueError as e:  # CheckpointError and TokenFileError are ValueErrors
        raise _lm_fail(str(e)) from None
    out.update(res)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    window = "" if out["ctx_len"] is None else f", ctx {out['ctx_len']}, stride {out['stride']}"
    bytes_note = "one token per byte" if n_bytes == 0 else f"{res['n_bytes']} bytes"
    console.print(
        _interval_table(
            f"perplexity of {lm_.source} on {data}",
            [
                ("nll", res["nll"], "nats/token"),
                ("ppl", res["ppl"], "perplexity"),
                ("bpb", res["bpb"], "bits/byte"),
            ],
            f"{res['n_tokens']} tokens scored{window}; bpb: {bytes_note}",
        )
    )


@eval_app.command("task")
def eval_task_cmd(
    task: str = typer.Option(..., "--task", help="Task file (formats/task-jsonl.md)."),
    model: str | None = typer.Option(None, "--model", help="A tinyllm lm checkpoint."),
    hf: str | None = typer.Option(None, "--hf", help="A local Hugging Face causal LM folder."),
    metric: str = typer.Option("acc_norm", "--metric", help="acc or acc_norm (per UTF-8 byte)."),
    max_len: int | None = typer.Option(
        None,
        "--max-len",
        min=1,
        help="Tokens the model reads; contexts are cut from the left as lm-eval does, "
        "(ctx + choice)[-(L+1):][:-1] (default: the model's own context).",
    ),
    target_delimiter: str | None = typer.Option(
        None,
        "--target-delimiter",
        help="Score DELIM + choice as lm-eval does (acc_norm still divides by the choice's "
        "bytes); overrides the task file's target_delimiter.",
    ),
    tokenizer: str = typer.Option(
        "auto", "--tokenizer", help="auto (the checkpoint's / the HF folder's) or byte."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap interval."),
    n_boot: int = typer.Option(1000, "--n-boot", min=1, help="Bootstrap resamples."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (with per-item scores)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=_QUIET_HELP),
) -> None:
    """Multiple-choice accuracy of a model on a task file, with a 95% bootstrap interval."""
    import json

    import numpy as np

    from tinyllm.eval import lm
    from tinyllm.tokens import ByteTokenizer

    if metric not in lm.METRICS:
        raise _lm_fail(f"--metric: expected one of {list(lm.METRICS)}, got {metric!r}")
    if tokenizer not in ("auto", "byte"):
        raise _lm_fail(f"--tokenizer: expected one of ['auto', 'byte'], got {tokenizer!r}")
    try:
        items = lm.read_task(task)
        lm_ = _open_lm(model, hf)
        if tokenizer == "byte" or isinstance(lm_.tokenizer, dict):
            tok = ByteTokenizer()
            if lm_.vocab_size is not None and lm_.vocab_size < 256:
                raise _lm_fail(
                    f"{lm_.source}: expected a vocabulary of at least 256 for byte tokens, "
                    f"got {lm_.vocab_size}"
                )
        else:
            from tinyllm.models import hf as hf_family

            try:  # an unreadable tokenizer is a ValueError: the error line below names it
                tok = hf_family.load_tokenizer(hf)
            except hf_family.MissingTokenizerError as e:
                raise _lm_fail(f"{e}; pass --tokenizer byte for a byte-level model") from None
        scorer = lm_.model if lm_.strided else lm.FamilyLM(lm_.model, lm_.family.token_nlls)
        with _Progress("scoring items", len(items), quiet) as bar:
            res = lm.run_task(
                scorer,
                tok,
                items,
                metric,
                np.random.default_rng(seed),
                n_boot,
                max_len=max_len if max_len is not None else (lm_.ctx_len if lm_.strided else None),
                progress=bar.update,
                target_delimiter=target_delimiter,
            )
    except ValueError as e:
        raise _lm_fail(str(e)) from None
    out = {"model": lm_.source, "arch": lm_.arch, "task": str(task), "metric": metric}
    out.update(res.to_dict())
    out.update({"seed": seed, "n_boot": n_boot, "per_item": res.per_item.tolist()})
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    unit = "fraction correct" + (" (LL per UTF-8 byte)" if metric == "acc_norm" else " (LL)")
    console.print(
        _interval_table(
            f"{metric} of {lm_.source} on {task}",
            [(metric, res.to_dict(), unit)],
            f"{res.n} items; bootstrap interval, {n_boot} resamples, seed {seed}",
        )
    )


task_app = typer.Typer(no_args_is_help=True, help="Task files: convert from lm-eval.")
app.add_typer(task_app, name="task")


@task_app.command("import-lmeval")
def task_import_lmeval_cmd(
    config: str = typer.Argument(..., help="An lm-eval multiple-choice task YAML (local data)."),
    out: str = typer.Option(..., "--out", help="The task file to write (JSONL)."),
    split: str | None = typer.Option(
        None, "--split", help="Data split (default: test_split, validation_split, train_split)."
    ),
) -> None:
    """Convert a local lm-evaluation-harness multiple-choice task into a tinyllm task file."""
    from tinyllm.lmeval_import import import_task

    _check_target(out)  # before the conversion: nothing is read or written for a bad --out
    try:
        path, n = import_task(config, out, split)
    except (ValueError, OSError) as e:
        raise _lm_fail(str(e)) from None
    console.print(f"wrote {n} items to {path}")


# <<< eval ppl / eval task <<<


# >>> eval --suite zoo (helper C: tinyllm/eval/zoo.py) >>>
def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _short(text: str, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    one = " ".join(str(text).split())
    return one if len(one) <= width else one[: width - 1] + "…"


def _row_note(r) -> str:
    """Why a row has no value: the error's type and message, or the skip reason."""
    if r.status == "error" and r.error is not None:
        return f"{r.error.type}: {r.error.message}"
    if r.status == "skipped":
        return f"skipped: {r.reason}"
    return ""


def _zoo_table(report):
    from rich.markup import escape
    from rich.table import Table

    title = f"zoo report (release {report.release or '-'}, seed {report.seed})"
    table = Table(title=title)
    notes = any(_row_note(r) for r in report.rows)
    cols = ("name", "family", "metric", "value", "95% interval", "n", "status")
    for col in (*cols, "why") if notes else cols:
        table.add_column(col, justify="right" if col in ("value", "n") else "left")
    style = {"ok": "green", "error": "red", "skipped": "yellow"}
    for r in report.rows:
        interval = "-" if r.lo is None else f"[{r.lo:.4f}, {r.hi:.4f}]"
        cells = [
            r.name,
            r.family,
            r.metric or "-",
            _fmt(r.value),
            interval,
            "-" if r.n is None else str(r.n),
            f"[{style[r.status]}]{r.status}[/]",
        ]
        if notes:
            cells.append(escape(_short(_row_note(r))))
        table.add_row(*cells)
    return table


def _print_report(report, path_note: str) -> None:
    """The table, then each error / skipped row's full reason, then the counts."""
    from rich.markup import escape

    console.print(_zoo_table(report))
    for r in report.rows:
        if r.status != "ok":
            colour = "red" if r.status == "error" else "yellow"
            console.print(f"[{colour}]{r.name}[/]: {escape(_row_note(r))}", highlight=False)
    counts = {s: sum(r.status == s for r in report.rows) for s in ("ok", "error", "skipped")}
    console.print(
        f"{counts['ok']} ok, {counts['error']} error, {counts['skipped']} skipped; {path_note}"
    )


def _check_target(path: str, flag: str = "--out") -> Path:
    """A file the CLI writes (``--out``) must be a regular file or a new path whose parent is a
    folder (:func:`tinyllm.safeio.check_target`): a symlink, FIFO, device or folder is refused
    before any work, instead of being replaced by a regular file or written through."""
    from tinyllm.safeio import UnsafePathError, check_target

    try:
        return check_target(path, flag)
    except UnsafePathError as e:
        raise _lm_fail(str(e)) from None


def _check_out(out: str) -> None:
    """``eval --out``: the report's target (:func:`_check_target`), and ``items/`` beside it a
    folder or a new path."""
    from tinyllm.safeio import path_kind

    p = _check_target(out)
    items = p.parent / "items"
    got = path_kind(items)
    if got not in (None, "a folder"):
        raise _lm_fail(
            f"--out {out}: expected {items} (the per-item scores beside the report) to be a "
            f"folder or a new path, got {got}"
        )


@eval_app.callback(invoke_without_command=True)
def eval_suite(
    ctx: typer.Context,
    suite: str | None = typer.Option(None, "--suite", help="The suite to run: zoo."),
    manifest: str | None = typer.Option(
        None, "--manifest", help="Zoo manifest (YAML or JSON); paths are relative to its folder."
    ),
    release: str | None = typer.Option(
        None,
        "--release",
        help="Release label. Without --out: run the EvalSuite flow (Prefect) for this release "
        "into --store and compare it with the previous release.",
    ),
    out: str | None = typer.Option(
        None,
        "--out",
        help="Score in this process and write the report here (default report.json when no "
        "--release is given): a new path or a regular file.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON, not a table."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the run (per entry: seed+name)."),
    store: str = typer.Option(
        "./evalstore", "--store", help="With --release: a folder or s3://bucket/prefix."
    ),
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="With --release: rescore only this entry (repeatable)."),
    ] = None,
    previous: str | None = typer.Option(
        None, "--previous", help="With --release: compare with this release (default: latest)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=_QUIET_HELP),
    dask_address: str | None = typer.Option(
        None,
        "--dask-address",
        help="With --release: fan the entries out to this Dask scheduler (tcp://host:8786; "
        "default $TINYLLM_DASK_ADDRESS, else 2 threads).",
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="With --release: a local Dask cluster of N processes."
    ),
) -> None:
    """Score a suite: `tinyllm eval --suite zoo --manifest zoo.yaml` scores every entry and writes the report (plus items/<name>.npy beside it); with `--release R` and no `--out` it runs the EvalSuite flow into the store instead; or use a sub-command.

    Every argument is checked before anything is scored: the manifest, the release name, --only names, --out, and in flow mode the store (reachable and writable) and --previous (a release in the store).
    """
    if ctx.invoked_subcommand is not None:
        return
    if suite is None:
        console.print(ctx.get_help())
        raise typer.Exit(0)
    if suite != "zoo":
        raise _lm_fail(f"--suite: expected one of ['zoo'], got {suite!r}")
    if manifest is None:
        raise _lm_fail("--suite zoo: expected --manifest FILE, got none")
    import json

    from tinyllm.eval.zoo import write_report
    from tinyllm.publish import check_publish_args
    from tinyllm.report import ManifestError, load_manifest
    from tinyllm.store import StoreError

    flow_mode = release is not None and out is None
    if (only or previous is not None) and not flow_mode:
        raise _lm_fail("--only and --previous need --release without --out (the EvalSuite flow)")
    if (dask_address is not None or workers is not None) and not flow_mode:
        raise _lm_fail("--dask-address and --workers need --release without --out (the flow)")
    if dask_address is not None and workers is not None:
        raise _lm_fail(
            f"expected --dask-address or --workers, got both ({dask_address}, {workers})"
        )
    try:
        m = load_manifest(manifest)
        names = [e.name for e in m.entries]
        unknown = [n for n in only or [] if n not in names]
        if unknown:
            raise ManifestError(
                f"--only: expected entry names from {manifest} {names}, got {unknown}"
            )
        if flow_mode:
            check_publish_args(store, release, previous)
        elif release is not None:
            from tinyllm.store import Store

            Store.report_key(release)  # the same rule as the store's, though nothing is stored
    except (ManifestError, StoreError) as e:
        raise _lm_fail(str(e)) from None
    if flow_mode:
        runner = (dask_address, workers)
        _run_suite_flow(
            manifest, release, store, only or None, previous, seed, as_json, quiet, runner
        )
        return
    out = out or "report.json"
    _check_out(out)
    from tinyllm.eval.zoo import run_zoo

    err = Console(stderr=True)

    def progress(i: int, total: int, row: dict) -> None:
        if not quiet:
            err.print(
                f"[{i}/{total}] {row['name']}: {row['status']} ({row['seconds']:.1f} s)",
                markup=False,
                highlight=False,
            )

    report = run_zoo(
        m, seed=seed, release=release, base_dir=Path(manifest).parent, progress=progress
    )
    path = write_report(report, out)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    _print_report(report, f"report written to {path}")


class _BelowError:
    """A logging filter that lets progress (INFO, WARNING) through and holds back errors."""

    @staticmethod
    def filter(record) -> bool:
        return record.levelno < 40  # logging.ERROR


def _quiet_prefect_console(quiet: bool = False) -> None:
    """Prefect's console log handler (on the root logger) prints each task's progress, and each
    failure's traceback. The CLI reports errors itself (one line, see :func:`main`), so the
    console shows progress only; ``--quiet`` hides that too, ``--debug`` shows everything.
    The logs still reach the Prefect server and its UI."""
    import logging

    if _DEBUG["on"]:
        return
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()
    names = ["", *(n for n in logging.root.manager.loggerDict if n.startswith("prefect"))]
    for name in names:
        for h in logging.getLogger(name).handlers:
            if type(h).__name__ == "PrefectConsoleHandler":
                if quiet:
                    h.setLevel(logging.CRITICAL)
                elif _BelowError not in h.filters:
                    h.addFilter(_BelowError)


def _run_suite_flow(
    manifest, release, store, only, previous, seed, as_json, quiet=False, runner=(None, None)
) -> None:
    """`tinyllm eval --suite zoo --release R`: the EvalSuite flow, then its table and comparison.

    The flow reports to the same Prefect server as `make demo` (:func:`tinyllm_suite.demo.choose_server`:
    the one PREFECT_API_URL names, else the local server, started if none answers).
    """
    import json

    from tinyllm.compare import compare_table
    from tinyllm_suite.demo import choose_server
    from tinyllm.report import Report

    err = Console(stderr=True, quiet=quiet)
    api = choose_server(err)
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        temporary_settings,
    )

    from tinyllm_suite.eval_suite import configured_suite, ensure_crash_detection

    suite_flow = configured_suite(*runner)  # threads, or Dask (--dask-address / --workers)

    _quiet_prefect_console(quiet)
    if not quiet:
        err.print(f"running the EvalSuite flow for release {release} on {api} ...")
    beat = int(os.environ["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"])
    settings = {PREFECT_API_URL: api, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: beat}
    with temporary_settings(updates=settings):
        try:
            ensure_crash_detection()
        except Exception as e:  # noqa: BLE001 - a missing automation must not stop the run
            err.print(f"warning: killed runs will not be marked Crashed: {error_line(e)}")
        out = suite_flow(
            manifest=manifest, release=release, store=store, only=only, previous=previous, seed=seed
        )
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    where = f"{out['store'].rstrip('/')}/releases/{release}/"
    _print_report(Report.model_validate(out["report"]), f"run {out['run_id']} written to {where}")
    if out["compare"] is not None:
        console.print(compare_table(out["compare"]))
    else:
        console.print(f"release {release}: no earlier release in {out['store']} to compare with")


# <<< eval --suite zoo <<<

# --- tinyllm zoo build ---


def _training_progress(quiet: bool):
    """build_zoo's ``progress``: nothing with --quiet, its live bars on a terminal, else a plain
    line per model when it starts and ends, and at most every 10 s while it trains."""
    if quiet:
        return False
    err = Console(stderr=True)
    if err.is_terminal:
        return True
    import time

    last: dict[str, float] = {}

    def line(name: str, step: int, total: int, loss: float) -> None:
        now = time.monotonic()
        if name not in last or step >= total or now - last[name] >= _Progress.every:
            last[name] = now
            err.print(
                f"training {name}: step {step}/{total}, loss {loss:.4f}",
                markup=False,
                highlight=False,
            )

    return line


@zoo_app.command("build")
def zoo_build_cmd(
    out: Annotated[str, typer.Option("--out", help="Folder for checkpoints, data and zoo.yaml.")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of every model's training.")] = 0,
    jobs: Annotated[
        int, typer.Option("--jobs", help="Models trained side by side, one process each.")
    ] = 2,
    threads: Annotated[
        int, typer.Option("--threads", help="torch threads of each training process.")
    ] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=_QUIET_HELP)] = False,
) -> None:
    """Train the demo zoo (every family with a recipe, small configs, fixed seeds) on real data."""
    import os
    import time

    # GNU OpenMP spin-waits by default: on a busy machine 2 threads then run many times slower.
    # Must be set before torch is first imported (this command imports it below).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from rich.table import Table

    from tinyllm.train import MANIFEST_NAME, build_zoo

    if threads < 1 or jobs < 1:
        raise typer.BadParameter(f"expected --jobs >= 1 and --threads >= 1, got {jobs}, {threads}")
    t0 = time.perf_counter()
    results = build_zoo(
        out, seed=seed, progress=_training_progress(quiet), threads=threads, jobs=jobs
    )
    table = Table(title=f"zoo built in {time.perf_counter() - t0:.0f} s (seed {seed})")
    table.add_column("name")
    table.add_column("checkpoint")
    for name, path in results:
        table.add_row(name, str(path))
    console.print(table)
    console.print(f"manifest: {os.path.join(out, MANIFEST_NAME)}")


# >>> compare / history (helper D: tinyllm/store.py, tinyllm/compare.py) >>>
def _store_error(e: Exception) -> None:
    """Print ``error: <message>`` to stderr (message verbatim, unwrapped) and exit with 2."""
    from rich.text import Text

    Console(stderr=True).print(Text.assemble(("error: ", "red"), str(e)), soft_wrap=True)
    raise typer.Exit(2)


def _store_or_exit(uri: str):
    from tinyllm.store import StoreError, open_store

    try:
        return open_store(uri)
    except StoreError as e:
        _store_error(e)


def _existing_store_or_exit(uri: str):
    """The store of a command that reads it (compare, history, dashboard): a local store must be
    a folder that exists, so a mistyped ``--store`` is an error, not an empty store (and, for
    ``dashboard``, a new folder holding an empty site)."""
    if "://" not in uri and not os.path.exists(uri):  # a link to a store folder is fine
        _store_error(
            ValueError(f"--store {uri}: expected an existing store folder, got no such path")
        )
    return _store_or_exit(uri)


MAX_N_PERM = 1_000_000
"""The most permutations per row ``compare`` and ``history`` accept: the library's bound
``tinyllm.compare.MAX_N_PERM`` (the same number, written here so that ``--help`` needs no numpy;
a test checks they agree). One row of 500 items takes about 5 s at this count on one core
(``time tinyllm compare --n-perm 1000000``); 1e12 would run for weeks."""

LARGE_N_PERM = 100_000
"""From this many permutations per row, ``compare`` reports its progress on stderr."""


def _check_n_perm(n_perm: int) -> None:
    """Refuse ``--n-perm`` above the library's maximum before the store is even opened."""
    from tinyllm import compare

    most = compare.MAX_N_PERM
    if n_perm > most:
        _store_error(
            ValueError(f"--n-perm: expected at most {most} permutations per row, got {n_perm}")
        )


@app.command("compare")
def compare_cmd(
    a: str = typer.Argument(..., help="The earlier (baseline) release."),
    b: str = typer.Argument(..., help="The release to judge against A."),
    store: str = typer.Option("./evalstore", "--store", help="A folder or s3://bucket/prefix."),
    n_perm: int = typer.Option(
        10_000, "--n-perm", min=1, help=f"Permutations per row (at most {MAX_N_PERM})."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the permutation test."),
    alpha: float = typer.Option(0.05, "--alpha", min=0.0, max=1.0, help="Test level."),
    as_json: bool = typer.Option(False, "--json", help="Print compare.json, not a table."),
    fail_on_regression: bool = typer.Option(
        False, "--fail-on-regression", help="Exit with status 1 when a row regressed."
    ),
) -> None:
    """Compare release B with release A: a paired permutation test per row (nothing written)."""
    import json

    from tinyllm.compare import compare_reports, compare_table, regressions
    from tinyllm.store import StoreError

    _check_n_perm(n_perm)
    st = _existing_store_or_exit(store)
    try:
        prev, cur = st.read_report(a), st.read_report(b)
        # compare_reports has no per-row callback: a large count gets a line when it starts and
        # one when it ends, so a long run does not look hung
        rows, quiet = len(cur["rows"]), n_perm < LARGE_N_PERM
        with _Progress(
            f"comparing {b} with {a}, {n_perm} permutations per row", rows, quiet
        ) as bar:
            cmp = compare_reports(
                prev,
                cur,
                st.items_loader(a),
                st.items_loader(b),
                n_perm=n_perm,
                seed=seed,
                alpha=alpha,
            )
            bar.update(rows)
    except (StoreError, ValueError) as e:
        _store_error(e)
    if as_json:
        typer.echo(json.dumps(cmp, indent=2))
    else:
        console.print(compare_table(cmp))
    if fail_on_regression and regressions(cmp):
        raise typer.Exit(1)


_HISTORY_STYLE = {"regressed": "bold red", "improved": "green", "error": "red", "skipped": "yellow"}


def _history_line(text: str, style: str) -> None:
    console.print(text, style=style, highlight=False, markup=False, soft_wrap=True)


@app.command("history")
def history_cmd(
    store: str = typer.Option("./evalstore", "--store", help="A folder or s3://bucket/prefix."),
    n_perm: int = typer.Option(
        10_000,
        "--n-perm",
        min=1,
        help=f"Permutations, for releases without a stored compare.json (at most {MAX_N_PERM}).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed, for releases without compare.json."),
) -> None:
    """Every release in the store, oldest first: its rows and its regressions.

    A release whose report.json cannot be read is listed in its place with the reason (the
    others are still shown, each compared with the last readable release before it), and the
    command then exits with 1. A release folder without a report (a run that never finished, or
    one in progress) is listed as such and is not an error. A compare.json that cannot be read
    (or is not a valid comparison) is named, and the comparison is computed instead.
    """
    from rich import box
    from rich.table import Table

    from tinyllm.compare import compare_reports, regressions, summary_line
    from tinyllm.dashboard import fmt_interval, fmt_value, load_history
    from tinyllm.store import StoreError

    _check_n_perm(n_perm)
    st = _existing_store_or_exit(store)
    try:
        views = load_history(st)
    except StoreError as e:
        _store_error(e)
    if not views:
        console.print(f"no releases in {st.uri}")
        return
    unreadable: list[str] = []
    try:
        previous: tuple[str, dict] | None = None  # (name, report) of the last readable one
        for v in views:
            if v.report is None:
                if v.has_report_file:
                    unreadable.append(v.name)
                    _history_line(f"{v.name}  unreadable: {v.error}", "bold red")
                else:
                    _history_line(f"{v.name}  {v.error}", "dim")
                continue
            report = v.report
            verdicts: dict[str, str] = {}
            cmp = v.compare  # load_history keeps only a valid comparison
            if v.compare_error is not None:
                _history_line(
                    f"{v.name}: compare.json unreadable: {v.compare_error} (compared here instead)",
                    "yellow",
                )
            if cmp is None and previous is not None:  # no stored comparison: compute one
                # an unreadable items file makes its row "not comparable", not an error
                cmp = compare_reports(
                    previous[1],
                    report,
                    st.items_loader(previous[0]),
                    st.items_loader(v.name),
                    n_perm=n_perm,
                    seed=seed,
                )
            if cmp is not None:
                verdicts = {r["name"]: r["verdict"] for r in cmp["rows"]}
            title = f"{v.name}  ({report['created_at']})"
            title += f"  {summary_line(cmp)}" if cmp is not None else "  (first release)"
            _history_line(title, "bold")
            table = Table(
                box=box.SIMPLE_HEAD,
                pad_edge=False,
                collapse_padding=True,
            )
            for col in ("entry", "metric", "value", "95% interval", "n", "status", "vs previous"):
                justify = "right" if col in ("value", "n") else "left"
                table.add_column(col, justify=justify, no_wrap=True)
            for r in report["rows"]:
                verdict = verdicts.get(r["name"], "-")
                table.add_row(
                    r["name"],
                    str(r.get("metric") or "-"),
                    fmt_value(r.get("value")),
                    fmt_interval(r.get("lo"), r.get("hi")),
                    "-" if r.get("n") is None else str(r["n"]),
                    f"[{_HISTORY_STYLE.get(r.get('status'), 'green')}]{r.get('status')}[/]",
                    f"[{_HISTORY_STYLE[verdict]}]{verdict}[/]"
                    if verdict in _HISTORY_STYLE
                    else verdict,
                )
            console.print(table)
            if cmp is not None:
                for r in regressions(cmp):
                    console.print(
                        f"[bold red]regressed[/] {v.name} {r['name']}: {r['metric']} "
                        f"{r['previous_value']:.4f} -> {r['current_value']:.4f} "
                        f"(delta {r['delta']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}], "
                        f"p {r['p']:.2g}) vs {cmp['previous']}",
                        highlight=False,
                        soft_wrap=True,
                    )
            previous = (v.name, report)
    except (StoreError, ValueError) as e:
        _store_error(e)
    if unreadable:
        from rich.text import Text

        Console(stderr=True).print(
            Text.assemble(
                ("error: ", "red"),
                f"{len(unreadable)} of {len(views)} release(s) in {st.uri} unreadable: "
                + ", ".join(unreadable),
            ),
            soft_wrap=True,
        )
        raise typer.Exit(1)


# <<< compare / history <<<


# >>> dashboard (helper: tinyllm/dashboard.py) >>>
@app.command("dashboard")
def dashboard_cmd(
    store: str = typer.Option("./evalstore", "--store", help="A folder or s3://bucket/prefix."),
    out: str | None = typer.Option(
        None, "--out", help="Write the site into this folder (default: <store>/dashboard/)."
    ),
    open_: bool = typer.Option(False, "--open", help="Open the overview in a web browser."),
    serve_port: int | None = typer.Option(
        None,
        "--serve",
        min=0,
        max=65535,
        help="Then serve it on http://127.0.0.1:PORT/ (0: a free port, printed).",
    ),
) -> None:
    """Render the store's run history into a static site (overview, trends, releases, entries).

    Every argument is checked before anything is written: the store (a local one must exist),
    --out (a folder or a new path), and --serve (needs --out for an s3:// store; the port is
    bound first, so a busy one is refused before the site is built)."""
    import time
    import webbrowser
    from pathlib import Path

    from tinyllm import dashboard
    from tinyllm.safeio import UnsafePathError, path_kind
    from tinyllm.store import LocalStore, StoreError

    st = _existing_store_or_exit(store)
    if out is not None:
        got = path_kind(out)
        if got not in (None, "a folder"):
            _store_error(ValueError(f"--out {out}: expected a folder or a new path, got {got}"))
        folder = Path(out)
    elif isinstance(st, LocalStore):
        folder = st.root / dashboard.SITE_PREFIX
    else:
        folder = None
    if serve_port is not None and folder is None:
        _store_error(ValueError("--serve: expected --out DIR for an s3:// store"))
    server = None
    if serve_port is not None:
        try:
            server = dashboard.bind(folder, serve_port)
        except OSError as e:
            _store_error(
                ValueError(f"--serve {serve_port}: expected a free port on 127.0.0.1, got {e}")
            )
    try:
        t0 = time.perf_counter()
        try:
            files = dashboard.build_site(st)
            if out is not None:
                where = str(dashboard.write_site(files, folder))
            else:
                where = dashboard.publish_site(st, files)
        except (StoreError, OSError, UnsafePathError) as e:
            _store_error(e)
        console.print(
            f"dashboard: {len(files)} pages from {st.uri} in {time.perf_counter() - t0:.1f} s: "
            f"{where}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        if open_ and folder is not None:
            webbrowser.open((folder / "index.html").resolve().as_uri())
        if server is not None:
            port = server.server_address[1]  # the bound port: the real one for --serve 0
            console.print(
                f"serving {folder} on http://127.0.0.1:{port}/ (Ctrl-C stops)",
                highlight=False,
                soft_wrap=True,
            )
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how the server is stopped
                server.serve_forever()
    finally:
        if server is not None:
            server.server_close()


# <<< dashboard <<<


# >>> server (helper: tinyllm/pgserver.py) >>>
server_app = typer.Typer(no_args_is_help=True, help="A standing Prefect server on this machine.")
app.add_typer(server_app, name="server")


@server_app.command("start")
def server_start_cmd(
    db: str = typer.Option(
        "postgres", "--db", help="postgres: a PostgreSQL cluster in $PREFECT_HOME/pg; or sqlite."
    ),
    port: int = typer.Option(4200, "--port", min=0, max=65535, help="The API/UI port (0: free)."),
    pg_port: int = typer.Option(
        0,
        "--pg-port",
        min=0,
        max=65535,
        help="PostgreSQL's port (0: the cluster's recorded port if free, else a free one).",
    ),
) -> None:
    """Start PostgreSQL (under $PREFECT_HOME/pg) and a Prefect server on it; `server stop` (or
    `make stop`) stops both. Prints the PREFECT_API_URL for workers and flow runs."""
    from tinyllm_suite import pgserver

    s = pgserver.start(db=db, port=port, pg_port=pg_port or None)
    where = f"PostgreSQL {s.pg_dir} on 127.0.0.1:{s.pg_port}" if s.db == "postgres" else "SQLite"
    console.print(f"Prefect server (pid {s.pid}) on {where}; log {s.home / 'server.log'}")
    console.print(f"export PREFECT_API_URL={s.api_url}", highlight=False, soft_wrap=True)


@server_app.command("stop")
def server_stop_cmd() -> None:
    """Stop the Prefect server and the PostgreSQL cluster `server start` started (quiet when
    nothing runs)."""
    from tinyllm_suite import pgserver

    for what in pgserver.stop():
        console.print(f"stopped {what}", highlight=False)


# <<< server <<<


def error_line(exc: BaseException) -> str:
    """One line for any exception: ``error: <where>: <Type>: <message>``.

    ``<where>`` are the exception's notes (the store adds the store and key it was working
    on, see tinyllm/store/); our own errors (StoreError, ManifestError, ValueError-based
    format errors) already name their file or key and say "expected X, got Y", so their type
    is left out. Newlines are folded, so the whole error is one line.
    """
    from tinyllm.store import StoreError

    notes = [n for n in getattr(exc, "__notes__", ()) if isinstance(n, str)]
    msg = str(exc) or repr(exc)
    own = isinstance(exc, StoreError) or type(exc).__name__ in (
        "ManifestError",
        "CheckpointError",
        "TokenFileError",
        "ReportSchemaError",
    )
    parts = [*notes, msg if own else f"{type(exc).__name__}: {msg}"]
    return "error: " + " ".join(": ".join(parts).split())


def main() -> None:
    """The ``tinyllm`` command, with the CLI's one error boundary around every sub-command.

    Any exception that reaches here is printed as ONE line on stderr (:func:`error_line`) and
    the exit status is 1; ``--debug`` (or ``TINYLLM_DEBUG=1``) shows the full traceback instead.
    Usage errors keep click's status 2; Ctrl-C exits with 130.
    """
    try:
        app()
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the boundary: every error becomes one line
        if _DEBUG["on"]:
            raise
        print(f"{error_line(exc)}  (--debug: full traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
