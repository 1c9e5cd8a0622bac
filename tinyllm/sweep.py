"""Checkpoint sweeps: the checkpoints of one training run, each a release recorded with its step.

::

    ckpts = resolve_checkpoints(["runs/a/step-*"])          # [Checkpoint(path, step)], by step
    template = sweep_template(manifest=..., or family/data) # entries on "{checkpoint}"
    for c in ckpts:                                         # the Sweep flow scores each entry
        publish_checkpoint(store, template, run, c, ...)    # release <run>-step-<step>
    summary = summarize(store, run)                         # consecutive paired verdicts

A sweep's releases are ordinary releases of the store (formats/store.md) whose report carries
``run`` and ``step`` (tinyllm/schemas/eval-results.schema.json); each is compared with the
release of the largest smaller step of its run (its ``compare.json``), so history, compare and
the dashboard read a run in step order (:func:`tinyllm.history.order_by_step`).

The summary tests every consecutive pair of the run's checkpoints, row by row, with the paired
test of :func:`tinyllm.compare.compare_reports` (:func:`tinyllm.stats.paired_difference` over
the row's units) and decides them together: Holm over every pair and row of the run (m tests,
:func:`tinyllm.stats.holm_adjust`), so that "the last step that improved significantly" holds
its family-wise error rate at ``alpha`` however many checkpoints the run has. Each release's own
``compare.json`` adjusts over its rows only; the summary's calls can be more conservative.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tinyllm.comparison import TESTED, Comparison
from tinyllm.eval import zoo
from tinyllm.history import compare_stored
from tinyllm.metrics import DIRECTION
from tinyllm.publish import publish_run
from tinyllm.report import (
    RUN_PATTERN,
    Manifest,
    ManifestError,
    StoredReport,
    load_manifest,
    parse_manifest,
)
from tinyllm.stats import ALPHA, COMPARE_WORDS, holm_adjust, verdict
from tinyllm.store import Store, StoreError

CHECKPOINT_FIELD = "{checkpoint}"
"""A sweep manifest's ``checkpoint``: each checkpoint of the sweep is put in its place."""

STEP_NAME = re.compile(r"(?:^|[-_.])(?:step|ckpt|checkpoint|iter)[-_.]?(\d+)$", re.IGNORECASE)
"""The step in a checkpoint's name (its file name without ``.safetensors``): ``step-1200``,
``step1200``, ``ckpt_1200``, ``checkpoint-1200``, ``model.iter_1200``; a name of digits alone
(``1200``) is that step too."""

NAME_HINT = "step-1200, ckpt_1200, checkpoint-1200 or 1200"
GLOB_CHARS = frozenset("*?[")


class SweepError(ValueError):
    """A sweep that cannot be run as asked: the message is one line naming the input."""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of the run: its path (absolute) and its training step."""

    path: str
    step: int


def step_from_name(path: str | os.PathLike) -> int | None:
    """The training step a checkpoint's file or folder name states, or None (:data:`STEP_NAME`).

    Example: ``runs/a/checkpoint-1200`` -> 1200; ``runs/a/model_step_300.safetensors`` -> 300;
    ``runs/a/final`` -> None.
    """
    name = Path(path).name
    stem = name[: -len(".safetensors")] if name.endswith(".safetensors") else name
    if stem.isdigit():
        return int(stem)
    m = STEP_NAME.search(stem)
    return int(m.group(1)) if m else None


def _expand(args: Sequence[str]) -> list[Path]:
    paths: list[Path] = []
    for arg in args:
        if GLOB_CHARS & set(arg):
            found = sorted(glob.glob(arg))
            if not found:
                raise SweepError(f"no checkpoint matches {arg!r}: expected a glob of checkpoints")
            paths += [Path(p) for p in found]
        elif not os.path.exists(arg):
            raise SweepError(f"{arg}: checkpoint not found")
        else:
            paths.append(Path(arg))
    return paths


def resolve_checkpoints(
    args: Sequence[str], steps: Mapping[str, int] | None = None
) -> list[Checkpoint]:
    """The checkpoints ``args`` name (paths or globs, expanded here), each with its step, in step
    order; the same path twice counts once.

    A checkpoint's step is ``steps[path]`` or ``steps[name]`` (the path as given, or its file or
    folder name) when given, else the one its name states (:func:`step_from_name`). Raises
    :class:`SweepError` (one line) for a glob matching nothing, a path that does not exist, a
    checkpoint whose step cannot be determined, two checkpoints of one step, and a ``steps`` key
    that names no checkpoint.
    """
    steps = dict(steps or {})
    if not args:
        raise SweepError("expected checkpoints (paths or globs), got none")
    used: set[str] = set()
    by_path: dict[Path, Checkpoint] = {}
    for p in _expand(args):
        keys = [k for k in (str(p), p.name, str(p).rstrip("/")) if k in steps]
        step = steps[keys[0]] if keys else step_from_name(p)
        used.update(keys)
        if step is None:
            raise SweepError(
                f"{p}: expected a step in the checkpoint's name ({NAME_HINT}) or "
                f"--step {p.name}=N, got none"
            )
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise SweepError(f"{p}: expected a step >= 0, got {step!r}")
        by_path.setdefault(p.resolve(), Checkpoint(str(p.resolve()), step))
    unknown = sorted(set(steps) - used)
    if unknown:
        raise SweepError(
            f"--step {unknown[0]}={steps[unknown[0]]}: expected the path or name of a checkpoint "
            f"of the sweep, got none named {unknown[0]!r}"
        )
    ckpts = sorted(by_path.values(), key=lambda c: c.step)
    for a, b in zip(ckpts, ckpts[1:], strict=False):
        if a.step == b.step:
            raise SweepError(
                f"expected one checkpoint per step, got step {a.step} twice: {a.path}, {b.path}"
            )
    return ckpts


def default_run(ckpts: Sequence[Checkpoint]) -> str:
    """The run's name when none is given: the name of the one folder holding every checkpoint
    (``runs/gpt-a/step-*`` -> ``gpt-a``). Raises :class:`SweepError` when they are in several
    folders or the folder's name is no run name."""
    parents = sorted({Path(c.path).parent.name for c in ckpts})
    if len(parents) != 1:
        raise SweepError(
            f"expected --run NAME: the checkpoints are in {len(parents)} folders ({', '.join(parents)})"
        )
    return check_run(parents[0], "the checkpoints' folder")


def check_run(run: str, what: str = "--run") -> str:
    """``run`` when it is a run name (:data:`tinyllm.report.RUN_PATTERN`), else SweepError."""
    if not isinstance(run, str) or not re.match(RUN_PATTERN, run):
        raise SweepError(
            f"{what}: expected a run name of 1-100 letters, digits, '.', '_' or '-' "
            f"(not starting with '.', '_' or '-'), got {run!r}"
        )
    return run


def release_name(run: str, step: int) -> str:
    """The release of ``run``'s checkpoint at ``step``: ``<run>-step-<step>``."""
    return f"{run}-step-{step}"


# ---- what each checkpoint is scored on ---------------------------------------------------------


def entry_name(data: str) -> str:
    """A row name from a data file's name: ``wiki.val.tokens`` -> ``wiki``."""
    stem = Path(data).name.split(".")[0].lower()
    name = re.sub(r"[^a-z0-9_-]+", "-", stem).strip("-_")[:64]
    return name or "lm"


def sweep_template(
    *,
    manifest: str | None = None,
    family: str | None = None,
    data: str | None = None,
    name: str | None = None,
    first: Checkpoint | None = None,
) -> tuple[Manifest, str]:
    """What every checkpoint is scored on: ``(template, base_dir)``.

    Either a manifest file (formats/manifest.md) whose every entry has ``checkpoint:
    "{checkpoint}"`` (its data paths relative to its folder), or one entry on ``data`` (a path
    from here) scored as ``family`` (default: the ``tl_arch`` of the ``first`` checkpoint's
    config.json, or ``hf`` for a Hugging Face folder), named ``name`` (default
    :func:`entry_name` of the data file). Raises :class:`SweepError`, one line.
    """
    if (manifest is None) == (data is None):
        raise SweepError(
            "expected --manifest FILE (entries on checkpoint '{checkpoint}') or --data FILE, "
            f"got {'both' if manifest else 'neither'}"
        )
    if manifest is not None:
        if family is not None or name is not None:
            raise SweepError("--family and --name go with --data, not with --manifest")
        try:
            m = load_manifest(manifest)
        except ManifestError as e:
            raise SweepError(str(e).replace("\n", " ")) from None
        fixed = [e for e in m.entries if e.checkpoint != CHECKPOINT_FIELD]
        if fixed:
            raise SweepError(
                f"{manifest}: entry {fixed[0].name!r}: expected checkpoint {CHECKPOINT_FIELD!r} "
                f"(each checkpoint of the sweep is put in its place), got {fixed[0].checkpoint!r}"
            )
        return m, str(Path(manifest).resolve().parent)
    assert data is not None
    if not os.path.exists(data):
        raise SweepError(f"--data {data}: not found")
    if family is None and first is not None:
        try:
            family = zoo.read_config(first.path)["tl_arch"]
        except Exception as e:  # noqa: BLE001 - any unreadable config: one line saying so
            raise SweepError(
                f"{first.path}: expected --family or a readable checkpoint: {e}"
            ) from None
    entry = {"name": name or entry_name(data), "family": family, "checkpoint": CHECKPOINT_FIELD}
    entry["data"] = str(Path(data).resolve())
    try:
        return parse_manifest({"entries": [entry]}, "the sweep's entry"), str(Path.cwd())
    except ManifestError as e:
        raise SweepError(str(e).replace("\n", " ")) from None


def checkpoint_entries(template: Manifest, ckpt: Checkpoint) -> list[dict]:
    """The template's entries (JSON) with ``ckpt``'s path as their checkpoint."""
    return [dict(e.model_dump(mode="json"), checkpoint=ckpt.path) for e in template.entries]


def checkpoint_manifest(template: Manifest, ckpt: Checkpoint) -> Manifest:
    """The manifest of one checkpoint: the template on ``ckpt``."""
    return parse_manifest({"suite": template.suite, "entries": checkpoint_entries(template, ckpt)})


# ---- the run's releases in the store -----------------------------------------------------------


@dataclass(frozen=True)
class RunRelease:
    """A readable release of the run: its step, name and report."""

    step: int
    release: str
    report: StoredReport


def run_releases(store: Store, run: str) -> list[RunRelease]:
    """The readable releases of ``run`` in ``store``, in step order (unreadable ones skipped)."""
    out = []
    for name, _ in store.history(skip_unreadable=True):
        report = store.read_stored_report(name)
        if report.run == run and report.step is not None:
            out.append(RunRelease(report.step, name, report))
    return sorted(out, key=lambda r: (r.step, r.release))


def previous_of(releases: Iterable[RunRelease], step: int, exclude: str) -> str | None:
    """The release of the largest step below ``step`` (another release than ``exclude``)."""
    before = [r for r in releases if r.step < step and r.release != exclude]
    return before[-1].release if before else None


def up_to_date(store: Store, release: str, rows: Sequence[dict], previous: str | None) -> bool:
    """Whether ``release`` already holds ``rows`` (same names, ok, same checkpoint and data
    bytes) and, with a ``previous``, its comparison with that release: publishing again would
    write nothing new. ``rows``: row documents as the EvalSuite flow gathers them; the stored
    rows are read as :class:`tinyllm.report.StoredRow`."""
    try:
        report = store.read_stored_report(release)
        cmp = store.read_compare(release) if previous is not None else None
    except StoreError:
        return False
    stored = {r.name: r for r in report.rows}
    for row in rows:
        old = stored.get(row["name"])
        keys = ("status", "checkpoint_sha256", "data_sha256", "value")
        if row["status"] != "ok" or old is None or any(getattr(old, k) != row[k] for k in keys):
            return False
    return previous is None or (cmp is not None and cmp.previous == previous)


def publish_checkpoint(
    store: Store,
    template: Manifest,
    run: str,
    ckpt: Checkpoint,
    scored: tuple[list[dict], dict, dict, dict],
    *,
    previous: str | None,
    seed: int = 0,
    run_id: str | None = None,
    created_at: str | None = None,
) -> dict:
    """Publish one checkpoint's rows as release ``<run>-step-<step>`` (:func:`publish_run`),
    its report carrying ``run`` and ``step``, compared with ``previous`` (the release of the
    run's previous step; None: the store's latest). ``scored``: ``(rows, items, baseline items,
    unit ids)`` as the EvalSuite flow gathers them. Returns publish_run's result."""
    rows, items, base_items, units = scored
    release = release_name(run, ckpt.step)
    m = checkpoint_manifest(template, ckpt)
    doc = zoo.build_run_report(m, rows, seed=seed, release=release, created_at=created_at)
    doc.update(run=run, step=ckpt.step)
    return publish_run(
        store,
        release,
        doc,
        items,
        baseline_items=base_items,
        units=units,
        order=[e.name for e in m.entries],
        previous=previous,
        seed=seed,
        run_id=run_id,
    )


# ---- the summary: consecutive paired verdicts, Holm over the run ----------------------------------


def _pair_comparison(
    store: Store, prev: RunRelease, cur: RunRelease, n_perm: int, seed: int
) -> Comparison:
    """The stored comparison of ``cur`` when it was made against ``prev``, else one computed."""
    try:
        cmp = store.read_compare(cur.release)
    except StoreError:
        cmp = None
    if cmp is not None and cmp.previous == prev.release:
        return cmp
    return compare_stored(
        store, (prev.release, prev.report), (cur.release, cur.report), n_perm=n_perm, seed=seed
    )


PAIR_ROW_KEYS = ("name", "metric", "previous_value", "current_value", "delta", "lo", "hi", "p")


def summarize(
    store: Store, run: str, *, n_perm: int = 10_000, seed: int = 0, alpha: float = ALPHA
) -> dict:
    """The run's checkpoints compared in step order, each with the one before it, decided
    together.

    Per consecutive pair and row: the comparison's delta, interval and permutation ``p``
    (the release's stored ``compare.json`` when it was made against the previous step, else
    computed with ``n_perm`` and ``seed``); ``p_run``, Holm's adjustment over the ``m`` pairs
    and rows of the run that were tested; ``verdict`` read from ``p_run`` at ``alpha``.
    ``last_improved``: per row, the last step whose verdict is "improved" (None: none was).

    Example: steps 100, 300, 1000, 3000 whose bpb drops by 0.4, 0.1 and 0.0002 -> the first
    two pairs "improved", the last "unchanged": ``last_improved == {"lee": 1000}``.
    """
    releases = run_releases(store, run)
    pairs, tested = [], []
    for prev, cur in zip(releases, releases[1:], strict=False):
        cmp = _pair_comparison(store, prev, cur, n_perm, seed)
        rows = [
            {k: getattr(r, k) for k in PAIR_ROW_KEYS} | {"verdict": r.verdict} for r in cmp.rows
        ]
        for r in rows:
            if r["verdict"] in TESTED and r["p"] is not None:
                tested.append(r)
            r["p_run"] = None
        pairs.append({"previous_step": prev.step, "step": cur.step, "rows": rows})
        pairs[-1].update(previous=prev.release, current=cur.release)
    for r, p in zip(tested, holm_adjust([r["p"] for r in tested]), strict=True):
        r["p_run"] = p
        r["verdict"] = verdict(
            p, r["delta"], DIRECTION[r["metric"]], alpha=alpha, words=COMPARE_WORDS
        )
    names = list(dict.fromkeys(r["name"] for p in pairs for r in p["rows"]))
    last = {
        n: max(
            (
                p["step"]
                for p in pairs
                for r in p["rows"]
                if r["name"] == n and r["verdict"] == "improved"
            ),
            default=None,
        )
        for n in names
    }
    return {
        "run": run,
        "steps": [r.step for r in releases],
        "releases": [r.release for r in releases],
        "alpha": alpha,
        "m": len(tested),
        "pairs": pairs,
        "last_improved": last,
    }


def conclusion(summary: dict) -> list[str]:
    """One line per row: the last step that improved significantly, or plainly that none did."""
    m, alpha = summary["m"], summary["alpha"]
    how = f"Holm over the run's {m} paired test{'s' * (m != 1)} at alpha {alpha:g}"
    if not summary["pairs"]:
        n = len(summary["steps"])
        return [f"run {summary['run']}: {n} checkpoint{'s' * (n != 1)}, nothing to compare yet"]
    lines = []
    for name, step in summary["last_improved"].items():
        if step is None:
            lines.append(f"{name}: no step improved significantly ({how})")
            continue
        later = [p["step"] for p in summary["pairs"] if p["step"] > step]
        after = (
            f"; no significant improvement in the {len(later)} step{'s' * (len(later) != 1)} after it"
            if later
            else " (the last checkpoint)"
        )
        lines.append(f"{name}: last improved significantly at step {step}{after} ({how})")
    return lines
