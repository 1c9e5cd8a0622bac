"""The zoo: a manifest of checkpoints in, one row per entry out, in one report (docs/definitions.md, the zoo).

The pieces, each usable alone::

    read_config(path)            checkpoint folder / one-file checkpoint / HF folder -> config dict
    kind_of(config)              -> "lm" | "seq2seq" | "classifier" | ...
    load_model(path)             dispatch on tl_arch through tinyllm.models.FAMILIES
    score_entry_row(entry, seed=..., base_dir=...) -> EntryRow   THE scoring path: a typed Row
                                 (tinyllm.report.Row) and every array
    score_entry(entry, seed=..., base_dir=..., items_dir=...) -> row dict   the same, arrays saved
    score_entry_items(entry, seed=..., base_dir=...) -> (row dict, per-item scores)   unsaved
    score_entry_result(entry, seed=..., base_dir=...) -> EntryResult   row dict and every array
    is_transient(exc)            worth retrying? (for a workflow's retry condition)
    build_report / build_run_report   rows scored anywhere -> a report in manifest order
    run_zoo(manifest, rng=None, seed=0) -> Report    every entry, in manifest order

A report on disk (report.json with items/<name>.npy beside it) is written and read by
:mod:`tinyllm.eval.report_files`.

Rows are typed (:class:`tinyllm.report.Row`) from the kind's :class:`~tinyllm.eval.kinds.Scored`
to the :class:`~tinyllm.report.Report`; a row is a dict only where it leaves the library as JSON
(:func:`score_entry`, :func:`score_entry_result` and :func:`error_row`, whose rows a workflow's
tasks return, and ``Report.to_json``) and where one comes back in (:func:`build_report` and
:func:`build_run_report` take either, validating a dict into a Row).

``score_entry`` never raises for a bad entry: an exception while loading or scoring becomes a row
with ``status: "error"`` and its type and message, and so does an entry option its kind does
not read (:meth:`tinyllm.eval.kinds.common.Kind.read_options`); an unknown family (or a kind
that has no scorer yet) a row with ``status: "skipped"`` and the reason. Each entry's randomness
comes from :func:`entry_rng` ``(seed, name)``, so rows do not depend on the order (or the
parallelism) in which entries are scored.

Scoring is done per kind by ``tinyllm/eval/kinds/`` (one module per kind, the same names in
each; :data:`tinyllm.eval.kinds.KINDS` and its view :data:`~tinyllm.eval.kinds.SCORERS` are
built from that folder's explicit list): the zoo reads an entry's options of its kind once and
hands them to the kind's scorer. This module keeps the dispatch, loading and the report. A Hugging Face folder is the ``hf`` family
(:mod:`tinyllm.models.hf`), dispatched like any other.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tinyllm import __version__, baselines, safeio
from tinyllm.checkpoint import CONFIG_NAME, MAX_CONFIG_BYTES, read_single_metadata
from tinyllm.checkpoint import read_config as read_checkpoint_config
from tinyllm.eval.kinds import KINDS, METRIC_OF_KIND, SCORERS, Scored
from tinyllm.eval.kinds.lmeval import entry_data_sha256
from tinyllm.eval.report_files import (
    save_npy,
    save_units,
    units_ref,
)
from tinyllm.eval.single import place_checkpoint
from tinyllm.models import FAMILIES, hf
from tinyllm.report import (
    Entry,
    Manifest,
    Report,
    Row,
    load_manifest,
    parse_manifest,
    sha256_path,
    validate_report,
)


class UnknownFamilyError(LookupError):
    """A ``tl_arch`` (or manifest family) that is not in ``tinyllm.models.FAMILIES``."""


def _family_module(arch: str):
    if arch not in FAMILIES:
        raise UnknownFamilyError(f"unknown family {arch!r}; expected one of {sorted(FAMILIES)}")
    return FAMILIES[arch]


# ---- checkpoints -------------------------------------------------------------------------------


def read_config(path: str | os.PathLike) -> dict:
    """The config of a checkpoint at ``path``, as a dict with at least ``tl_arch``.

    * a folder with a ``config.json`` naming ``tl_arch``: that file, validated by
      :func:`tinyllm.checkpoint.read_config`;
    * a folder whose ``config.json`` has no ``tl_arch`` but a ``model_type``: a Hugging Face
      model, returned as ``{"tl_arch": "hf", "format_version": 1, "config": <the HF config>}``
      (:func:`tinyllm.models.hf.config_from`);
    * one ``.safetensors`` file (the n-gram): ``{"tl_arch", "format_version", "metadata"}`` from
      its string metadata.

    Raises FileNotFoundError naming the path when nothing is there, CheckpointError otherwise.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: checkpoint not found")
    if p.is_file():  # a one-file checkpoint (normally named *.safetensors)
        meta = read_single_metadata(p)
        return {
            "tl_arch": meta["tl_arch"],
            "format_version": int(meta["format_version"]),
            "metadata": meta,
        }
    cfg_path = p / CONFIG_NAME
    try:  # a FIFO or a device is refused at once (never read), a huge file before it is read
        raw = safeio.read_regular(cfg_path, max_bytes=MAX_CONFIG_BYTES, what="config")
        doc = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        doc = None  # let the checkpoint reader say what is wrong, naming the file
    hf_config = hf.config_from(doc)
    if hf_config is not None:
        return hf_config
    return read_checkpoint_config(p)


def kind_of(config: Mapping) -> str:
    """The kind of a checkpoint from its config: ``"classifier"`` when it has ``tl_head``, else
    its family's ``KIND`` (``"lm"`` for a Hugging Face causal LM, the ``hf`` family).

    Raises UnknownFamilyError for a ``tl_arch`` that is not in ``FAMILIES``.
    """
    if "tl_head" in config:
        return "classifier"
    return _kind_of_family(str(config.get("tl_arch")))


def _kind_of_family(family: str) -> str:
    return _family_module(family).KIND


def load_model(path: str | os.PathLike, *, device: Any = None, dtype: Any = None):
    """``FAMILIES[tl_arch].load(path)``, ``tl_arch`` from :func:`read_config` (``"hf"``: a Hugging
    Face folder, :func:`tinyllm.models.hf.load`, safetensors only), on ``device`` in ``dtype``
    (None: ``"auto"``) by the CLI's rule (:func:`tinyllm.eval.single.place_checkpoint`)."""
    p, arch, dev, dt = Path(path), read_config(path)["tl_arch"], device or "auto", dtype or "auto"
    if arch == hf.ARCH:
        return hf.load(p, device=dev, dtype=dt)
    return place_checkpoint(_family_module(arch).load(p), arch, dev, dt, str(p))


# ---- one entry ---------------------------------------------------------------------------------


def entry_rng(seed: int, name: str) -> np.random.Generator:
    """The rng of entry ``name`` in a run with ``seed``: independent of every other entry and of
    the order in which entries are scored.

    ``numpy.random.default_rng([seed, h])`` with ``h`` the first 8 bytes of ``sha256(name)`` read
    as a little-endian integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    h = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([int(seed), h])


def _base_row(entry: Entry) -> dict:
    """The fields of ``entry``'s row before it is scored, every field of
    :class:`tinyllm.report.Row` (so each is written), in the schema's order."""
    try:
        kind = _kind_of_family(entry.family)
    except UnknownFamilyError:
        kind = None
    if kind is not None and entry.kind is not None:  # the entry's own kind (lmeval) wins
        kind = entry.kind
    return {
        "name": entry.name,
        "family": entry.family,
        "kind": kind,
        "metric": METRIC_OF_KIND.get(kind) if kind else None,
        "value": None,
        "lo": None,
        "hi": None,
        "interval": None,
        "n": None,
        "status": "error",
        "error": None,
        "reason": None,
        "checkpoint_sha256": None,
        "data_sha256": None,
        "seconds": 0.0,
        "items": None,
        "checkpoint": entry.checkpoint,
        "data": entry.data,
        "options": entry.options.model_dump(mode="json"),
        "details": None,
        "baseline": None,
        "beats_baseline": None,
        "n_units": None,
        "units": None,
        "iid_interval": None,
        "interval_warning": None,
    }


def row_json(row: Row) -> dict:
    """A row as the JSON document a report holds (``Report.to_json``'s row of a row the zoo
    built): what :func:`score_entry` returns and a workflow's task passes on."""
    return row.model_dump(mode="json")


def as_row(row: Row | Mapping) -> Row:
    """``row`` as a :class:`tinyllm.report.Row`: a Row as it is, a row document (a JSON dict,
    e.g. a workflow task's result) validated into one (pydantic's ValidationError on a bad
    one)."""
    return row if isinstance(row, Row) else Row.model_validate(dict(row))


def error_row(
    entry: Entry | Mapping,
    exc: BaseException,
    seconds: float = 0.0,
    checkpoint_sha256: str | None = None,
    data_sha256: str | None = None,
) -> dict:
    """The row document of an entry that failed with ``exc``: ``status: "error"``, ``error:
    {type, message}``, no value. (For callers that catch failures outside
    :func:`score_entry`, e.g. a workflow task that failed after its retries.)"""
    e = entry if isinstance(entry, Entry) else Entry.model_validate(dict(entry))
    return row_json(_error_row(e, exc, seconds, checkpoint_sha256, data_sha256))


def _error_row(
    entry: Entry,
    exc: BaseException,
    seconds: float,
    checkpoint_sha256: str | None = None,
    data_sha256: str | None = None,
) -> Row:
    error = {"type": type(exc).__name__, "message": str(exc)}
    hashes = {"checkpoint_sha256": checkpoint_sha256, "data_sha256": data_sha256}
    return Row(
        **(
            _base_row(entry)
            | hashes
            | {"status": "error", "error": error, "seconds": float(seconds)}
        )
    )


_PERMANENT_OS_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)
_PERMANENT_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL})
_BOTOCORE_TRANSIENT = frozenset(
    {
        "HTTPClientError",
        "ConnectionError",
        "ConnectionClosedError",
        "EndpointConnectionError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
    }
)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` may go away on retry (a workflow's retry condition uses this).

    Transient: timeouts and connection errors; any other ``OSError`` except "not found",
    "already exists", permission, is-/not-a-directory, name-too-long, symlink-loop and invalid-argument errors
    (those are deterministic); botocore connection errors and ``ClientError`` with an HTTP 5xx
    status or a throttling code. Everything else (a corrupt checkpoint, a bad config, a wrong
    shape) is deterministic: retrying cannot help.
    """
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    for cls in type(exc).__mro__:  # botocore's classes, without importing botocore
        if cls.__module__.startswith("botocore") and cls.__name__ in _BOTOCORE_TRANSIENT:
            return True
    response = getattr(exc, "response", None)
    if type(exc).__module__.startswith("botocore") and isinstance(response, Mapping):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        code = str(response.get("Error", {}).get("Code", ""))
        return status >= 500 or code in {"Throttling", "ThrottlingException", "SlowDown"}
    if isinstance(exc, _PERMANENT_OS_ERRORS) or getattr(exc, "errno", None) in _PERMANENT_ERRNOS:
        return False
    return isinstance(exc, OSError)


def resolve_input(entry: Entry, what: str, base_dir: str | os.PathLike) -> Path:
    """The path of an entry's ``checkpoint`` or ``data`` (``what``): absolute as written, else
    relative to ``base_dir`` (the manifest's folder). An ``hf`` checkpoint with nothing at that
    path and written as a hub id (``org/name``) is its snapshot in the local Hugging Face cache
    (:func:`tinyllm.models.hf.resolve_folder`, offline; not cached: one line naming the cache)."""
    rel = getattr(entry, what)
    p = Path(rel) if Path(rel).is_absolute() else Path(base_dir) / rel
    hub = what == "checkpoint" and entry.family == hf.ARCH and hf.is_hub_id(rel)
    return hf.resolve_folder(rel) if hub and not os.path.lexists(p) else p


def _check_input(path: Path, what: str, name: str, *, folder: bool) -> None:
    """An entry's checkpoint (a folder or a regular file) or data (a regular file), links to
    them followed: a FIFO or a device is refused, saying what it is, before anything opens it."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(f"{path}: {what} not found (entry {name!r})") from None
    if not (stat.S_ISREG(mode) or (folder and stat.S_ISDIR(mode))):
        want = "a folder or a regular file" if folder else "a regular file"
        raise safeio.UnsafePathError(
            f"{path}: {what}: expected {want}, got {safeio.mode_kind(mode)} (entry {name!r})"
        )


def score_entry_items(
    entry: Entry | Mapping,
    *,
    seed: int = 0,
    base_dir: str | os.PathLike = ".",
    raise_transient: bool = False,
) -> tuple[dict, np.ndarray | None]:
    """:func:`score_entry` without writing anything: ``(row, per-item scores)``, a float64 array
    (lm: per-token NLLs in nats; None for error and skipped rows) for ``items/<name>.npy``.

    ``raise_transient=True`` re-raises an exception :func:`is_transient` calls transient (a
    workflow retries it); every other exception is still an error row. The baseline's items
    and the unit ids are not returned, so the row's ``baseline.items`` and ``units`` are null.
    """
    res = score_entry_row(entry, seed=seed, base_dir=base_dir, raise_transient=raise_transient)
    return row_json(_unsaved(res.row, baseline_items=True, units=True)), res.items


def _unsaved(
    row: Row, *, items: bool = False, baseline_items: bool = False, units: bool = False
) -> Row:
    """``row`` naming no file for the arrays that are not saved beside its report."""
    update: dict[str, Any] = {}
    if items:
        update["items"] = None
    if baseline_items and row.baseline is not None:
        update["baseline"] = row.baseline.model_copy(update={"items": None})
    if units:
        update["units"] = None
    return row.model_copy(update=update) if update else row


class EntryRow(NamedTuple):
    """One entry scored (:func:`score_entry_row`): its typed row and the arrays saved beside
    it, each None where there is none (error and skipped rows; ``units`` when every item is its
    own unit)."""

    row: Row
    items: np.ndarray | None  # float64, the row's per-item scores
    baseline_items: np.ndarray | None  # float64, its baseline's on the same items
    units: np.ndarray | None  # int64, the unit id of each item


class EntryResult(NamedTuple):
    """One entry scored (:func:`score_entry_result`): :class:`EntryRow` with the row as its
    JSON document (:func:`row_json`), what a workflow's task returns."""

    row: dict
    items: np.ndarray | None  # float64, the row's per-item scores
    baseline_items: np.ndarray | None  # float64, its baseline's on the same items
    units: np.ndarray | None  # int64, the unit id of each item


def score_entry_arrays(
    entry: Entry | Mapping,
    *,
    seed: int = 0,
    base_dir: str | os.PathLike = ".",
    raise_transient: bool = False,
) -> tuple[dict, np.ndarray | None, np.ndarray | None]:
    """:func:`score_entry_items` and the baseline's items (:func:`tinyllm.baselines.row_fields`);
    :func:`score_entry_result` has the unit ids too."""
    row, items, base_items, _ = score_entry_result(
        entry, seed=seed, base_dir=base_dir, raise_transient=raise_transient
    )
    return row, items, base_items


def _unit_fields(scored: Scored, name: str) -> dict:
    """An ok row's unit fields: ``n_units``, ``units`` (the ids' file, :func:`units_ref`),
    ``iid_interval`` and ``interval_warning``."""
    iid = scored.iid_interval
    return {
        "n_units": scored.n_units,
        "units": None if scored.units is None else units_ref(name),
        "iid_interval": None if iid is None else {"lo": iid.lo, "hi": iid.hi, "method": iid.method},
        "interval_warning": scored.interval.warning or None,
    }


def scored_row(
    entry: Entry,
    scored: Scored,
    fields: dict,
    baseline: Any,
    beats_baseline: Any,
    seconds: float,
) -> Row:
    """The ok :class:`tinyllm.report.Row` of ``entry`` from its kind's :class:`Scored`:
    ``value``, ``lo``, ``hi`` of its interval, its estimator's name as ``interval``, ``n``,
    ``details``, the items' file, the unit fields, and ``baseline`` / ``beats_baseline``
    (:func:`tinyllm.baselines.row_fields`); ``fields``: the row's provenance
    (:func:`_base_row` with the hashes)."""
    return Row(
        **(
            fields
            | {
                "status": "ok",
                "metric": scored.metric,
                "value": scored.interval.value,
                "lo": scored.interval.lo,
                "hi": scored.interval.hi,
                "interval": scored.method,
                "n": scored.n,
                "details": scored.details or None,
                "items": None if scored.items is None else f"items/{entry.name}.npy",
                "baseline": baseline,
                "beats_baseline": beats_baseline,
                "seconds": seconds,
                **_unit_fields(scored, entry.name),
            }
        )
    )


def score_entry_result(
    entry: Entry | Mapping,
    *,
    seed: int = 0,
    base_dir: str | os.PathLike = ".",
    raise_transient: bool = False,
) -> EntryResult:
    """:func:`score_entry_row` with the row as its JSON document (:class:`EntryResult`): what a
    workflow's task returns, nothing written."""
    res = score_entry_row(entry, seed=seed, base_dir=base_dir, raise_transient=raise_transient)
    return EntryResult(row_json(res.row), res.items, res.baseline_items, res.units)


def score_entry_row(
    entry: Entry | Mapping,
    *,
    seed: int = 0,
    base_dir: str | os.PathLike = ".",
    raise_transient: bool = False,
) -> EntryRow:
    """One entry scored, nothing written: its typed row, per-item scores, baseline's per-item
    scores and unit ids (:class:`EntryRow`), what :func:`score_entry` saves beside a report."""
    entry = entry if isinstance(entry, Entry) else Entry.model_validate(dict(entry))
    base_dir = Path(base_dir)
    t0 = time.perf_counter()
    fields = _base_row(entry)
    kind = fields["kind"]
    if kind is None:
        reason = f"unknown family {entry.family!r}; known families: {sorted(FAMILIES)}"
        return EntryRow(Row(**(fields | {"status": "skipped", "reason": reason})), None, None, None)
    if kind not in SCORERS:
        reason = f"no scorer for kind {kind!r} yet"
        return EntryRow(Row(**(fields | {"status": "skipped", "reason": reason})), None, None, None)
    try:
        opts = KINDS[kind].read_options(entry)  # an option its kind does not read: an error row
        rng = entry_rng(seed, entry.name)
        ckpt = resolve_input(entry, "checkpoint", base_dir)
        data = resolve_input(entry, "data", base_dir)
        _check_input(ckpt, "checkpoint", entry.name, folder=True)
        fields["checkpoint_sha256"] = sha256_path(ckpt)
        _check_input(data, "data file", entry.name, folder=False)
        fields["data_sha256"] = entry_data_sha256(entry, data)  # lmeval: the task's files
        config = read_config(ckpt)
        if config["tl_arch"] != entry.family:
            raise ValueError(
                f"entry {entry.name!r}: expected a {entry.family!r} checkpoint, got tl_arch "
                f"{config['tl_arch']!r} in {ckpt}"
            )
        model = load_model(ckpt, device=entry.options.device, dtype=entry.options.dtype)
        scored = SCORERS[kind](entry, model, data, rng, opts)
        base_field, verdict, base_items = baselines.row_fields(scored, entry.name, rng)
    except Exception as exc:  # every failure is a row; the rest of the zoo is still scored
        if raise_transient and is_transient(exc):
            raise
        row = _error_row(entry, exc, time.perf_counter() - t0,
                         fields["checkpoint_sha256"], fields["data_sha256"])  # fmt: skip
        return EntryRow(row, None, None, None)
    row = scored_row(entry, scored, fields, base_field, verdict, time.perf_counter() - t0)
    items = None if scored.items is None else np.asarray(scored.items, dtype=np.float64)
    return EntryRow(row, items, base_items, scored.units)


def score_entry(
    entry: Entry | Mapping,
    *,
    seed: int = 0,
    base_dir: str | os.PathLike = ".",
    items_dir: str | os.PathLike | None = None,
) -> dict:
    """Score one manifest entry and return its row (a JSON-native dict, see
    formats/eval-results.schema.json). This is the one scoring path: :func:`run_zoo` and the
    EvalSuite flow both call it, one entry at a time.

    * ``seed``: the run's seed; the entry's rng is :func:`entry_rng` ``(seed, entry.name)``.
    * ``base_dir``: the folder the entry's relative paths are relative to (the manifest's).
    * ``items_dir``: where to save the per-item scores as ``<name>.npy``, the baseline's as
      ``<name>.baseline.npy`` and the unit ids as ``<name>.units.npy`` (normally
      ``<report folder>/items``); the row then says ``items: "items/<name>.npy"``. Without it
      none is kept and ``items`` is null.

    Never raises for a bad entry: exceptions become ``status: "error"`` rows (type + message),
    an unknown family a ``status: "skipped"`` row with the reason. (A dict that is not a valid
    manifest entry raises pydantic's ValidationError: manifests are validated before scoring.)
    """
    row, items, base_items, units = score_entry_row(entry, seed=seed, base_dir=base_dir)
    keep = items_dir is not None
    if keep and items is not None:
        save_npy(Path(items_dir), f"{row.name}.npy", items)
    if keep and base_items is not None:
        save_npy(Path(items_dir), f"{row.name}.baseline.npy", base_items)
    if keep and units is not None:
        save_units(Path(items_dir), f"{row.name}.units.npy", units)
    unsaved = _unsaved(row, items=not keep, baseline_items=not keep, units=not keep)
    return row_json(unsaved)


# ---- the whole zoo -----------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _resolve_manifest(
    manifest: Manifest | Mapping | str | os.PathLike, base_dir: str | os.PathLike | None
) -> tuple[Manifest, Path]:
    if isinstance(manifest, str | os.PathLike):
        m = load_manifest(manifest)
        return m, Path(base_dir) if base_dir is not None else Path(manifest).parent
    m = parse_manifest(manifest)
    return m, Path(base_dir) if base_dir is not None else Path(".")


def build_report(
    manifest: Manifest | Mapping,
    rows: Sequence[Row | Mapping],
    *,
    seed: int,
    release: str | None = None,
    items: Mapping[str, np.ndarray] | None = None,
    created_at: str | None = None,
    baseline_items: Mapping[str, np.ndarray] | None = None,
    units: Mapping[str, np.ndarray] | None = None,
) -> Report:
    """Assemble a :class:`Report` from rows scored by :func:`score_entry_row` (typed) or
    :func:`score_entry` (their documents; any order, any process): rows are put in manifest
    order, and one row per entry is required; the rows' ``beats_baseline`` verdicts are decided
    together (:func:`tinyllm.baselines.adjust_row_verdicts`).

    ``items`` maps row names to per-item score arrays that :func:`write_report` will save;
    ``baseline_items`` their baselines' per-item scores, ``units`` their unit ids
    (:func:`score_entry_result`).
    """
    report = _make_report(manifest, rows, seed, release, items, created_at, partial=False)
    for name, arr in (baseline_items or {}).items():
        report.baseline_item_scores[name] = np.asarray(arr, dtype=np.float64)
    for name, arr in (units or {}).items():
        report.unit_ids[name] = np.asarray(arr, dtype=np.int64)
    return report


def build_run_report(
    manifest: Manifest | Mapping,
    rows: Sequence[Row | Mapping],
    *,
    seed: int,
    release: str | None = None,
    created_at: str | None = None,
) -> dict:
    """The report document (JSON dict, schema-validated) of a run that scored SOME of the
    manifest's entries (e.g. a rerun of one failed family): each row must name an entry, at most
    once; rows are put in manifest order. Per-item scores are the caller's to store."""
    doc = _make_report(manifest, rows, seed, release, None, created_at, partial=True).to_json()
    validate_report(doc)
    return doc


def _make_report(
    manifest: Manifest | Mapping,
    rows: Sequence[Row | Mapping],
    seed: int,
    release: str | None,
    items: Mapping[str, np.ndarray] | None,
    created_at: str | None,
    partial: bool,
) -> Report:
    m = parse_manifest(manifest)
    names = [e.name for e in m.entries]
    rows = [as_row(r) for r in rows]
    got = [r.name for r in rows]
    unknown = [n for n in got if n not in names]
    dups = sorted({n for n in got if got.count(n) > 1})
    if unknown or dups or (not partial and len(got) != len(names)):
        expected = "rows naming manifest entries" if partial else "one row per manifest entry"
        raise ValueError(
            f"expected {expected} {names} (each at most once), got rows {got}"
            + (f"; unknown {unknown}" if unknown else "")
            + (f"; duplicated {dups}" if dups else "")
        )
    by_name = {r.name: r for r in rows}
    report = Report(
        suite=m.suite,
        release=release,
        created_at=created_at or _now(),
        seed=seed,
        tinyllm_version=__version__,
        manifest_sha256=m.sha256(),
        rows=baselines.adjust_row_verdicts([by_name[n] for n in names if n in by_name]),
    )
    for name, arr in (items or {}).items():
        report.item_scores[name] = np.asarray(arr, dtype=np.float64)
    return report


def run_zoo(
    manifest: Manifest | Mapping | str | os.PathLike,
    rng: np.random.Generator | None = None,
    seed: int = 0,
    *,
    release: str | None = None,
    base_dir: str | os.PathLike | None = None,
    progress: Callable[[int, int, Row], None] | None = None,
) -> Report:
    """Score every entry of ``manifest`` (a path, a parsed document or a :class:`Manifest`) in
    this process, in manifest order, and return the :class:`Report` (per-item scores attached;
    :func:`write_report` saves both).

    The manifest is validated first: a bad manifest raises
    :class:`tinyllm.report.ManifestError` before anything is scored. Paths in it are relative to
    ``base_dir`` (default: the manifest file's folder, or the current folder for an in-memory
    manifest). ``seed`` is recorded in the report; when ``rng`` is given the seed is drawn from it
    instead. ``progress(i, total, row)`` is called after each entry with its typed row
    (:class:`tinyllm.report.Row`).
    """
    m, base = _resolve_manifest(manifest, base_dir)
    if rng is not None:
        seed = int(rng.integers(0, 2**63 - 1))
    entry_rng(seed, "")  # refuse a bad seed before scoring anything
    rows: list[Row] = []
    arrays: dict[str, dict[str, np.ndarray]] = {"items": {}, "baseline_items": {}, "units": {}}
    for i, entry in enumerate(m.entries):
        res = score_entry_row(entry, seed=seed, base_dir=base)
        rows.append(res.row)
        for key, kept in arrays.items():
            if getattr(res, key) is not None:
                kept[entry.name] = getattr(res, key)
        if progress is not None:
            progress(i + 1, len(m.entries), res.row)
    return build_report(m, rows, seed=seed, release=release, **arrays)
