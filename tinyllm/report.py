"""The formats of the zoo: manifest in, report out (formats/manifest.md, tinyllm/schemas/).

* :class:`Manifest` / :class:`Entry` / :class:`EntryOptions` -- what to score (pydantic, strict:
  unknown keys, a missing field or a duplicate name is refused).
  ``tinyllm/schemas/manifest.schema.json`` is generated from :class:`Manifest` by
  :func:`write_manifest_schema` (``python -m tinyllm.report``); a test checks that the committed
  file equals the generated one.
* :class:`Row` / :class:`Report` -- the result of a zoo run. Every report is validated against the
  JSON Schema ``tinyllm/schemas/eval-results.schema.json`` (draft 2020-12, package data read by
  :mod:`tinyllm.schemas`) with jsonschema by :func:`validate_report` before it is written. Its
  kind, metric and interval names and its per-metric rules are written from the tables
  (:data:`tinyllm.metrics.METRICS`, :data:`tinyllm.stats.ESTIMATORS`, the kinds' names) by
  :func:`write_report_schema`; a test checks that the committed file equals
  :func:`report_schema_text`. :data:`KINDS` and :data:`Kind` are read from that file, the only
  list of kind names below :mod:`tinyllm.eval`.
* :func:`sha256_path` -- the content hash of a checkpoint (file or folder) or data file; the
  report records it per row and a cache key can reuse it.

Nothing here knows about models; :mod:`tinyllm.eval.zoo` does the scoring.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from tinyllm import metrics, safeio, schemas
from tinyllm.stats import ESTIMATORS

SCHEMA_VERSION = 1
MAX_MANIFEST_BYTES = 16 << 20
"""The largest manifest file read (16 MiB; a manifest of 10,000 entries is about 2 MB)."""
MANIFEST_SCHEMA_PATH = schemas.schema_file(schemas.MANIFEST)
REPORT_SCHEMA_PATH = schemas.schema_file(schemas.REPORT)

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
KINDS: tuple[str, ...] = tuple(
    k
    for k in schemas.load_schema(REPORT_SCHEMA_PATH, "report")["$defs"]["row"]["properties"][
        "kind"
    ]["enum"]
    if k is not None
)
"""The kinds a row may name: the report schema's ``kind`` enum, which
:func:`tinyllm.eval.kinds.write_report_schema` writes from :data:`tinyllm.eval.kinds.KINDS`."""
METRICS = metrics.NAMES
LEGACY_INTERVALS = ("student_t", "bootstrap_percentile")
"""Interval names of rows written before units (:data:`tinyllm.stats.LEGACY_METHODS` reads them:
``student_t`` is ``iid``, ``bootstrap_percentile`` is ``cluster_bootstrap`` over items)."""
INTERVALS = (*(str(m) for m in ESTIMATORS), *LEGACY_INTERVALS)
"""How a row's ``lo``/``hi`` are computed (the row's ``interval``): the names of the estimator
registry (:data:`tinyllm.stats.ESTIMATORS`), then the legacy names stored reports may hold."""
STATUSES = ("ok", "error", "skipped")
RUN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
"""A training run's name (a report's ``run``): a store key segment short enough that
``<run>-step-<step>`` is one too."""
REPORT_FIELDS_OF_A_RUN = ("run", "step")
"""The report fields of a checkpoint of a training run (``tinyllm sweep``): both or neither;
reports of anything else, and every report written before sweeps, have neither."""
LOWER_IS_BETTER = frozenset(name for name, d in metrics.DIRECTION.items() if d == "lower")
"""Metrics where a smaller value is better; every other metric is higher-is-better."""

Kind = Literal[KINDS]  # type: ignore[valid-type]
Metric = Literal[METRICS]  # type: ignore[valid-type]
IntervalMethod = Literal[INTERVALS]  # type: ignore[valid-type]
Status = Literal[STATUSES]  # type: ignore[valid-type]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class ManifestError(ValueError):
    """A manifest that cannot be read or validated; the message names the file and every problem."""


class ReportSchemaError(ValueError):
    """A report that does not validate against eval-results.schema.json (tinyllm/schemas/)."""


# ---- manifest ----------------------------------------------------------------------------------


class EntryOptions(BaseModel):
    """The kind's options of one manifest entry; every field is optional, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    ctx_len: int | None = Field(
        default=None,
        ge=2,
        description="Window length C for strided LM scoring (gpt, hf). Default: the model's.",
    )
    stride: int | None = Field(
        default=None,
        ge=1,
        description="Stride s of the windows, 1 <= s < C (gpt, hf). Default: the model's / C//2.",
    )
    beam: int | None = Field(default=None, ge=1, description="Beam size (seq2seq kinds).")
    split: str | None = Field(
        default=None, min_length=1, description="Which split of the task rows to score."
    )
    device: str | None = Field(
        default=None,
        pattern=r"^(auto|cpu|cuda|cuda:\d+|mps)$",
        description="Where the model runs (tinyllm.device): auto (cuda when available, else "
        "cpu), cpu, cuda, cuda:N, mps; gpt and hf only, other families stay on the CPU. "
        "Default (unset): auto.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(
        default=None,
        description="The weights' dtype (tinyllm.device): auto (float32 on CPU, on an "
        "accelerator the checkpoint's bfloat16/float16, else float32); gpt and hf only. "
        "Default (unset): auto.",
    )
    task: str | None = Field(
        default=None,
        min_length=1,
        description="lmeval: the lm-eval task to run. Default: the data YAML's 'task:'.",
    )
    include_path: str | None = Field(
        default=None,
        min_length=1,
        description="lmeval: the folder of task YAMLs lm-eval indexes, relative to the data "
        "YAML's folder. Default: that folder (lm-eval's bundled tasks are never indexed).",
    )
    num_fewshot: int | None = Field(
        default=None, ge=0, description="lmeval: few-shot examples. Default: the task's."
    )
    limit: int | None = Field(
        default=None, ge=1, description="lmeval: the first N documents. Default: all."
    )
    metric: Literal["acc", "acc_norm", "exact_match"] | None = Field(
        default=None,
        description="lmeval: the row's metric. Default: the first of acc, acc_norm, "
        "exact_match the task reports.",
    )
    cluster_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="lmeval: the document field that names each document's sampling unit "
        "(docs/definitions.md, units); documents sharing a value are resampled together. "
        "Default: each document is its own unit.",
    )
    doc_sep: str | None = Field(
        default=None,
        description="lm: the separator ending each document of the text, its sampling units "
        "(docs/definitions.md); 'none': contiguous blocks. Default: one document per line.",
    )

    @model_validator(mode="after")
    def _check_stride(self) -> EntryOptions:
        if self.ctx_len is not None and self.stride is not None and self.stride >= self.ctx_len:
            raise ValueError(
                f"expected stride < ctx_len (a window must keep some context), "
                f"got stride={self.stride}, ctx_len={self.ctx_len}"
            )
        return self


class Entry(BaseModel):
    """One model to score: its family, its checkpoint, its task data, the kind's options.

    ``checkpoint`` and ``data`` are paths relative to the manifest's folder (absolute paths are
    kept as they are).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(
        pattern=NAME_PATTERN,
        max_length=64,
        description="Unique row name; lowercase letters, digits, '_' and '-' (used in file names).",
    )
    family: str = Field(
        min_length=1,
        description="A tl_arch in tinyllm.models.FAMILIES, or 'hf' for a local Hugging Face "
        "causal LM folder. An unknown family is scored as a 'skipped' row, not refused here.",
    )
    checkpoint: str = Field(
        min_length=1,
        description="Checkpoint folder (config.json + model.safetensors) or one .safetensors file.",
    )
    data: str = Field(
        min_length=1,
        description="The kind's task data (lm: a token file; lmeval: an lm-eval task YAML).",
    )
    kind: Literal["lmeval"] | None = Field(
        default=None,
        description="Score the checkpoint as this kind instead of its family's: 'lmeval' runs "
        "an lm-eval task on an lm checkpoint. Default: the family's kind.",
    )
    options: EntryOptions = Field(default_factory=EntryOptions)


class Manifest(BaseModel):
    """A zoo manifest: the suite and its entries, scored and reported in this order."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        title="tinyllm zoo manifest",
        json_schema_extra={
            "description": "What `tinyllm eval --suite zoo` scores; see "
            "formats/manifest.md. Paths are relative to the manifest's folder."
        },
    )

    suite: Literal["zoo"] = "zoo"
    entries: list[Entry] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_unique_names(self) -> Manifest:
        names = [e.name for e in self.entries]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"expected unique entry names, got duplicates {dups}")
        return self

    def sha256(self) -> str:
        """sha256 of the canonical JSON of the validated manifest (sorted keys, no spaces).

        Formatting, comments and YAML-vs-JSON do not change it; any field's value does.
        """
        doc = self.model_dump(mode="json")
        canon = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canon.encode()).hexdigest()


def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<top>"
        if e["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key (got {e['input']!r})")
        elif e["type"] == "missing":
            lines.append(f"  {loc}: required field missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            got = f" (got {e['input']!r})" if e["loc"] else ""  # not the whole document
            lines.append(f"  {loc}: {msg}{got}"[:300])
    return "\n".join(lines)


def parse_manifest(doc: Any, source: str = "<manifest>") -> Manifest:
    """Validate a manifest document (already parsed YAML/JSON) into a :class:`Manifest`.

    Raises :class:`ManifestError` listing every problem (path in the document, what was wrong).
    """
    if isinstance(doc, Manifest):
        return doc
    if not isinstance(doc, Mapping):
        raise ManifestError(
            f"{source}: expected a mapping with 'suite' and 'entries', got {type(doc).__name__}"
        )
    try:
        return Manifest.model_validate(dict(doc))
    except ValidationError as e:
        n, lines = e.error_count(), _format_validation_error(e)
    # pydantic skips the whole-manifest checks when a field fails: report duplicates too
    entries = doc.get("entries")
    names = (
        [x.get("name") for x in entries if isinstance(x, Mapping)]
        if isinstance(entries, list)
        else []
    )
    dups = sorted({str(x) for x in names if names.count(x) > 1})
    if dups and "duplicates" not in lines:
        n += 1
        lines += f"\n  entries: expected unique entry names, got duplicates {dups}"
    raise ManifestError(f"{source}: invalid manifest ({n} problem{'s' * (n != 1)}):\n{lines}")


def load_manifest(path: str | os.PathLike) -> Manifest:
    """Read and validate a manifest file (YAML or JSON: JSON is YAML).

    The file is read with :func:`tinyllm.safeio.read_regular` (a regular file of at most
    :data:`MAX_MANIFEST_BYTES`: a FIFO or a device is refused at once, never waited on) and
    parsed with :func:`tinyllm.safeio.load_yaml` (safe YAML whose aliases expand to at most
    ``safeio.MAX_YAML_NODES`` nodes: an alias bomb, used or not, is refused before it is built).
    """
    p = Path(path)
    try:
        text = safeio.read_regular(p, max_bytes=MAX_MANIFEST_BYTES, what="manifest").decode("utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{p}: manifest not found") from None
    except safeio.UnsafePathError as e:
        raise ManifestError(f"{p}: {str(e).removeprefix(f'manifest {p}: ')}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{p}: expected a readable UTF-8 manifest, got: {e}") from None
    try:
        doc = safeio.load_yaml(text, str(p))
    except safeio.UnsafePathError as e:  # the alias bound; its message names the file
        raise ManifestError(str(e)) from None
    except yaml.YAMLError as e:
        raise ManifestError(f"{p}: expected YAML or JSON, got a parse error: {e}") from None
    return parse_manifest(doc, str(p))


def manifest_json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of :class:`Manifest`, as pydantic generates it."""
    schema = Manifest.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://tinyllm.invalid/formats/manifest.schema.json",
        **schema,
    }


def manifest_schema_text() -> str:
    """The exact text of ``tinyllm/schemas/manifest.schema.json`` (2-space indent, trailing
    newline)."""
    return json.dumps(manifest_json_schema(), indent=2) + "\n"


def write_manifest_schema(path: str | os.PathLike = MANIFEST_SCHEMA_PATH) -> Path:
    """(Re)generate ``tinyllm/schemas/manifest.schema.json`` from the pydantic model."""
    p = Path(path)
    p.write_text(manifest_schema_text(), encoding="utf-8")
    return p


# ---- rows and report ---------------------------------------------------------------------------


class ErrorInfo(BaseModel):
    """Why a row could not be scored: the exception's type name and message."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    type: str
    message: str


class BaselineInfo(BaseModel):
    """A row's trivial baseline (:class:`tinyllm.baselines.Baseline`, as the schema stores it)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    value: float
    interval: tuple[float, float] | None
    items: str | None = Field(pattern=r"^items/[a-z0-9][a-z0-9_.-]*\.npy$")
    details: dict[str, Any] = Field(default_factory=dict)


class BeatsBaseline(BaseModel):
    """Whether the row's model beats its baseline (:func:`tinyllm.baselines.judge`); the fields
    after ``n`` are absent in reports written before units."""

    model_config = ConfigDict(extra="forbid")
    verdict: Literal["better", "worse", "not distinguishable"]
    test: Literal["paired permutation", "wilson", "fisher z"]
    p: float = Field(ge=0, le=1)
    delta: float
    interval: tuple[float, float]
    n: int = Field(ge=1)
    p_adjusted: float | None = Field(default=None, ge=0, le=1)
    n_units: int | None = Field(default=None, ge=1)
    method: str | None = None
    se: float | None = None
    mde: float | None = None


class IidInterval(BaseModel):
    """The item-level reference interval of a row whose units hold several items."""

    model_config = ConfigDict(extra="forbid")
    lo: float
    hi: float
    method: str


class _RowFields(BaseModel):
    """The fields of a report row (tinyllm/schemas/eval-results.schema.json names each one)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    family: str
    kind: Kind | None
    metric: Metric | None
    value: float | None
    lo: float | None
    hi: float | None
    interval: IntervalMethod | None
    n: int | None
    status: Status
    error: ErrorInfo | None
    reason: str | None
    checkpoint_sha256: Hex64 | None
    data_sha256: Hex64 | None
    seconds: float = Field(ge=0)
    items: str | None
    # fields beyond the agreed row format
    checkpoint: str | None = None
    data: str | None = None
    options: dict[str, Any] | None = None
    details: dict[str, Any] | None = None
    # absent in reports written before rows carried a baseline
    baseline: BaselineInfo | None = None
    beats_baseline: BeatsBaseline | None = None
    # absent in reports written before rows knew their units
    n_units: int | None = Field(default=None, ge=1)
    units: str | None = Field(default=None, pattern=r"^items/[a-z0-9][a-z0-9_.-]*\.npy$")
    iid_interval: IidInterval | None = None
    interval_warning: str | None = None


class Row(_RowFields):
    """One manifest entry's result, as the zoo writes it: the provenance fields ``checkpoint``,
    ``data`` and ``options`` set, and the fields each status requires."""

    checkpoint: str
    data: str
    options: dict[str, Any]

    @model_validator(mode="after")
    def _check_status(self) -> Row:
        if self.status == "ok":
            if None in (self.value, self.lo, self.hi, self.n, self.metric, self.interval):
                raise ValueError("status ok: expected value, lo, hi, n, metric and interval")
            if not all(math.isfinite(v) for v in (self.value, self.lo, self.hi)):
                raise ValueError("status ok: expected finite value, lo and hi")
        elif self.value is not None:
            raise ValueError(f"status {self.status}: expected value null, got {self.value}")
        if (self.status == "error") != (self.error is not None):
            raise ValueError(f"status {self.status}: 'error' must be set exactly for error rows")
        if (self.status == "skipped") != (self.reason is not None):
            raise ValueError(f"status {self.status}: 'reason' must be set exactly for skipped rows")
        return self


class StoredRow(_RowFields):
    """A row as a store holds it (:func:`stored_report_schema`): every field of :class:`Row`
    with its type, the provenance fields :data:`STORED_OPTIONAL_ROW_FIELDS` possibly absent
    (None), and no status rules (an ok row may lack a number; the comparison says so). What
    :mod:`tinyllm.compare` reads; :func:`stored_rows` builds them from a report document."""

    def to_json(self) -> dict:
        """The row's JSON document: the fields it was read with or given (a field it was read
        without stays absent), in the schema's order."""
        return self.model_dump(mode="json", exclude_unset=True)


def stored_rows(doc: Mapping) -> list[StoredRow]:
    """The rows of a stored report document as :class:`StoredRow` (ValueError naming the row and
    the field when one does not fit; a document that passed :func:`check_stored_report` fits)."""
    out = []
    for i, row in enumerate(doc["rows"]):
        try:
            out.append(StoredRow.model_validate(row))
        except ValidationError as e:
            problems = "; ".join(x.strip() for x in _format_validation_error(e).splitlines())
            raise ValueError(
                f"rows[{i}]: expected a row of {REPORT_SCHEMA_PATH.name}, got {problems}"
            ) from None
    return out


class StoredReport(BaseModel):
    """A report as a store holds it (:func:`stored_report_schema`): the report-level fields
    (``created_at`` any ISO 8601 time; ``run`` and ``step`` None for a release that is no
    checkpoint of a training run) and its rows as :class:`StoredRow`. What history, the
    dashboard, the sweep, exports and the comparison read; :func:`stored_report` builds one
    from a report document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    suite: str = Field(min_length=1)
    release: str | None = Field(min_length=1)
    created_at: str
    seed: int = Field(ge=0, strict=True)
    tinyllm_version: str = Field(min_length=1)
    manifest_sha256: Hex64
    rows: list[StoredRow]
    run: str | None = Field(default=None, pattern=RUN_PATTERN)
    step: int | None = Field(default=None, ge=0, strict=True)

    @property
    def run_step(self) -> tuple[str, int] | None:
        """``(run, step)`` of a checkpoint of a training run (``tinyllm sweep``), else None."""
        if self.run is None or self.step is None:
            return None
        return self.run, self.step


def stored_report(doc: Mapping) -> StoredReport:
    """A stored report document as a :class:`StoredReport` (ValueError naming the field, or the
    row and its field, when one does not fit; a document that passed
    :func:`check_stored_report` fits)."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"expected a report object, got {type(doc).__name__}")
    rows = stored_rows(doc) if isinstance(doc.get("rows"), list) else doc.get("rows")
    try:
        return StoredReport.model_validate({**doc, "rows": rows})
    except ValidationError as e:
        problems = "; ".join(x.strip() for x in _format_validation_error(e).splitlines())
        raise ValueError(
            f"expected a report of {REPORT_SCHEMA_PATH.name}, got {problems}"
        ) from None


ROW_FIELDS_SINCE_BASELINES = ("baseline", "beats_baseline")
"""Row fields that reports written before rows carried a baseline lack (still valid, still read)."""
ROW_FIELDS_SINCE_UNITS = ("n_units", "units", "iid_interval", "interval_warning")
"""Row fields that reports written before rows knew their units lack (still valid, still read:
their rows are compared at the item level, the units unknown)."""


class Report(BaseModel):
    """A zoo report: provenance plus one :class:`Row` per manifest entry, in manifest order;
    for a checkpoint of a training run (``tinyllm sweep``), its ``run`` and ``step``.

    The per-item scores of each row (``row.items`` names their file relative to the report) travel
    with the object in :attr:`item_scores` until :func:`tinyllm.eval.report_files.write_report`
    saves them.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    suite: str
    release: str | None
    created_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
    seed: int = Field(ge=0)
    tinyllm_version: str
    manifest_sha256: Hex64
    rows: list[Row]
    # a checkpoint of a training run (tinyllm sweep); absent in every other report
    run: str | None = Field(default=None, pattern=RUN_PATTERN)
    step: int | None = Field(default=None, ge=0)

    _items: dict[str, np.ndarray] = PrivateAttr(default_factory=dict)
    _baseline_items: dict[str, np.ndarray] = PrivateAttr(default_factory=dict)
    _units: dict[str, np.ndarray] = PrivateAttr(default_factory=dict)

    @property
    def item_scores(self) -> dict[str, np.ndarray]:
        """Per-item score arrays by row name (float64, 1-d), for the rows that have them."""
        return self._items

    @property
    def baseline_item_scores(self) -> dict[str, np.ndarray]:
        """The baselines' per-item scores by row name (float64, 1-d, the row's item order), for
        the rows whose ``baseline.items`` names a file."""
        return self._baseline_items

    @property
    def unit_ids(self) -> dict[str, np.ndarray]:
        """The unit id of each item by row name (int64, 1-d, the row's item order), for the rows
        whose ``units`` names a file (units holding several items)."""
        return self._units

    def row(self, name: str) -> Row:
        """The row called ``name`` (KeyError listing the names if there is none)."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no row {name!r}; rows are {[r.name for r in self.rows]}")

    def to_json(self) -> dict:
        """The JSON document written to disk (validated by :func:`validate_report`). A row read
        without ``baseline`` / ``beats_baseline`` or the unit fields (an older report) is written
        without them, and so is a ``beats_baseline`` without its later fields; a report of no
        training run has no ``run`` and ``step``."""
        doc = self.model_dump(mode="json")
        for key in REPORT_FIELDS_OF_A_RUN:
            if doc[key] is None:
                del doc[key]
        for row, out in zip(self.rows, doc["rows"], strict=True):
            for key in ROW_FIELDS_SINCE_BASELINES + ROW_FIELDS_SINCE_UNITS:
                if key not in row.model_fields_set:
                    out.pop(key, None)
            if row.beats_baseline is not None:
                kept = row.beats_baseline.model_fields_set
                out["beats_baseline"] = {
                    k: v for k, v in out["beats_baseline"].items() if k in kept
                }
        return doc


_REPORT_VALIDATOR = None


def report_schema() -> dict:
    """The JSON Schema of a report (``tinyllm/schemas/eval-results.schema.json``)."""
    return schemas.load_schema(REPORT_SCHEMA_PATH, "report")


def metric_rule(metric: metrics.Metric) -> dict:
    """The row properties the report schema requires of a row of ``metric``, from its facts
    (:class:`tinyllm.metrics.Metric`): its kind where only one reports it, its intervals (or
    null), and its value (with ``lo`` and ``hi`` when ``interval_in_range``) in its range."""
    props: dict[str, Any] = {}
    if metric.kind is not None:
        props["kind"] = {"const": metric.kind}
    props["interval"] = {"enum": [*metric.intervals, None]}
    bounded: dict[str, Any] = {"type": ["number", "null"]}
    for key, bound in zip(("minimum", "maximum"), metric.value_range, strict=True):
        if bound is not None:
            bounded[key] = bound
    props["value"] = bounded
    if metric.interval_in_range:
        props["lo"] = dict(bounded)
        props["hi"] = dict(bounded)
    return props


def report_json_schema(kinds: Sequence[str], template: Mapping | None = None) -> dict:
    """The report schema with its tables written in: ``template`` (the committed schema by
    default) with the row's ``kind`` enum ``kinds``, its ``metric`` enum the names of
    :data:`tinyllm.metrics.METRICS`, its ``interval`` enum :data:`INTERVALS` (each with null),
    and one rule per metric (:func:`metric_rule`; consecutive metrics with the same rule share
    one) in place of the template's rules on ``metric``. Everything else is the template's."""
    schema = copy.deepcopy(dict(report_schema() if template is None else template))
    row = schema["$defs"]["row"]
    props = row["properties"]
    props["kind"]["enum"] = [*kinds, None]
    props["metric"]["enum"] = [*metrics.METRICS, None]
    props["interval"]["enum"] = [*INTERVALS, None]
    groups: list[tuple[list[str], dict]] = []
    for m in metrics.METRICS.values():
        rule = metric_rule(m)
        if groups and groups[-1][1] == rule:
            groups[-1][0].append(m.name)
        else:
            groups.append(([m.name], rule))
    rules = [r for r in row.get("allOf", []) if "metric" not in r["if"]["properties"]]
    for names, rule in groups:
        test = {"const": names[0]} if len(names) == 1 else {"enum": names}
        rules.append(
            {
                "if": {"properties": {"metric": test}, "required": ["metric"]},
                "then": {"properties": rule},
            }
        )
    row["allOf"] = rules
    return schema


def report_schema_text(kinds: Sequence[str]) -> str:
    """The exact text of ``tinyllm/schemas/eval-results.schema.json`` for the kind names
    ``kinds`` (:func:`report_json_schema`; 2-space indent, trailing newline)."""
    return json.dumps(report_json_schema(kinds), indent=2) + "\n"


def write_report_schema(kinds: Sequence[str], path: str | os.PathLike = REPORT_SCHEMA_PATH) -> Path:
    """(Re)write ``tinyllm/schemas/eval-results.schema.json`` for the kind names ``kinds``
    (:func:`tinyllm.eval.kinds.write_report_schema` passes its kinds'). The committed file is
    read first: its hand-written parts are kept."""
    text = report_schema_text(kinds)
    p = Path(path)
    p.write_text(text, encoding="utf-8")
    return p


def _validator():
    global _REPORT_VALIDATOR
    if _REPORT_VALIDATOR is None:
        _REPORT_VALIDATOR = schemas.build_validator(report_schema())
    return _REPORT_VALIDATOR


#: row fields a stored report may lack: provenance no reader uses (the history, the comparison and
#: the dashboard read every other field). Reports put with Store.write_report by other tools, and
#: those of older versions, may leave them out; publish_run always writes them.
STORED_OPTIONAL_ROW_FIELDS = ("checkpoint", "data", "options")
_STORED_VALIDATOR = None


def stored_report_schema() -> dict:
    """The schema a stored report is read with: what its readers rely on.

    ``eval-results.schema.json`` with three differences, each something the store has always
    taken (formats/store.md): the row fields :data:`STORED_OPTIONAL_ROW_FIELDS` may be missing
    (still checked when present); ``created_at`` is any ISO 8601 time (the store parses it), not
    only the ``...Z`` form the zoo writes; and a row's status-dependent rules (an ok row has
    numbers, an error row its error) are left to the writer, :func:`validate_report` in
    ``publish_run``. Every field keeps its type, so a reader never meets a string where a
    number or a list belongs, and unknown fields are still refused.
    """
    schema = copy.deepcopy(report_schema())
    row = schema["$defs"]["row"]
    row["required"] = [f for f in row["required"] if f not in STORED_OPTIONAL_ROW_FIELDS]
    row.pop("allOf", None)
    schema["properties"]["created_at"].pop("pattern", None)
    return schema


def check_stored_report(doc: Any) -> None:
    """Validate a report read from a store (:func:`stored_report_schema`), its rows as
    :class:`StoredRow` too; one line on failure.

    Raises :class:`ReportSchemaError`: ``expected a report matching eval-results.schema.json,
    got at rows/0/n: 'x' is not of type 'integer' (and 1 more problem)``.
    """
    global _STORED_VALIDATOR
    if _STORED_VALIDATOR is None:
        _STORED_VALIDATOR = schemas.build_validator(stored_report_schema())
    errors = list(_STORED_VALIDATOR.iter_errors(doc))
    if errors:
        raise ReportSchemaError(
            f"expected a report matching {REPORT_SCHEMA_PATH.name}, got "
            + schemas.problems_text(errors)
        )
    try:  # the typed rows the comparison reads: every row the schema takes is one
        stored_rows(doc)
    except ValueError as e:
        raise ReportSchemaError(str(e)[:400]) from None


def validate_report(doc: Mapping | Report) -> None:
    """Validate a report document against ``eval-results.schema.json`` (draft 2020-12).

    Raises :class:`ReportSchemaError` listing every violation as ``path: message``.
    """
    if isinstance(doc, Report):
        doc = doc.to_json()
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [
            f"  {'/'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}"[:300]
            for e in errors[:20]
        ]
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise ReportSchemaError(
            f"report does not match {REPORT_SCHEMA_PATH.name} ({len(errors)} problem"
            f"{'s' * (len(errors) != 1)}):\n" + "\n".join(lines) + more
        )


# ---- content hashes ----------------------------------------------------------------------------


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_path(path: str | os.PathLike) -> str:
    """Content hash of a file or a folder (hex sha256).

    * a file: the sha256 of its bytes (same as ``sha256sum``);
    * a folder: the sha256 of the text made of one line ``"<relpath>\\0<file sha256>\\n"`` per
      regular file below it (recursively, relative POSIX paths, sorted), so renaming, adding,
      removing or changing any file changes the hash, and nothing else does.

    Raises FileNotFoundError naming the path when it does not exist.
    """
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: not found (expected a file or a folder to hash)")
    h = hashlib.sha256()
    files = sorted((f.relative_to(p).as_posix(), f) for f in p.rglob("*") if f.is_file())
    for rel, f in files:
        h.update(f"{rel}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


if __name__ == "__main__":  # regenerate tinyllm/schemas/manifest.schema.json
    print(write_manifest_schema())
