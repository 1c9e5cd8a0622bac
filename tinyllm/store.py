"""The report store: a local folder (the default, ``./evalstore``) or ``s3://bucket/prefix``.

Layout (formats/store.md has the full description)::

    releases/<release>/report.json         the release's merged view (one row per entry)
    releases/<release>/items/<entry>.npy   per-item scores of an entry (float64, np.save)
    releases/<release>/runs/<run-id>.json  every run's raw report, written once, never replaced
    releases/<release>/compare.json        the comparison with the previous release
    releases/<release>/compares/<h>.json   the comparison made for the report.json whose bytes
                                           hash to ``h`` (what :meth:`Store.read_compare` reads)

History is the listing of ``releases/``, ordered by each report's ``created_at``. A publish makes
a release visible last: the comparison of the new report is stored (under the report's hash)
before the report itself, so a reader sees the old report with its comparison or the new one
with its comparison, never a report without the comparison it was published with.

Two backends behind one small interface, :class:`Store`: ``put_bytes`` / ``get_bytes`` /
``exists`` / ``list`` (plus ``put_json`` / ``get_json``), and the domain helpers on top of them
(``write_run``, ``write_items``, ``write_report``, ``write_compare``, ``releases``, ...).

* :class:`LocalStore` writes every file to a temporary file in the same folder, fsyncs it and
  moves it into place with :func:`os.replace`, so a reader sees the old file or the new one,
  never half of one. JSON is streamed into the temporary file, so a serialisation error half way
  (a NaN in the last row, say) leaves the old report untouched.
* :class:`S3Store` talks to S3 through boto3; endpoint, region and credentials come from the
  standard AWS environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), nothing is
  hard-coded. A single ``put_object`` is atomic. "Never overwrite" uses a conditional put
  (``If-None-Match: *``).

Errors are :class:`StoreError` (a missing key: :class:`StoreKeyError`; a refused overwrite:
:class:`StoreExistsError`; a stored document that cannot be used: :class:`StoreUnreadableError`),
and name the store and the key. They deliberately do not derive from
``OSError``: a missing release is not a transient failure worth retrying. Real I/O failures
(a full disk, a dropped connection) still surface as ``OSError`` / botocore errors.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import hashlib
import io
import json
import os
import random
import re
import secrets
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tinyllm import safeio

DEFAULT_STORE = "./evalstore"

MAX_OBJECT_BYTES = 1 << 30
"""The largest stored object a reader takes (1 GiB: the per-item scores of 134 million items);
a larger one is refused before it is read (:class:`StoreUnreadableError`)."""

MAX_JSON_BYTES = 64 << 20
"""The largest stored JSON document (a report, a run, a comparison) a reader takes: 64 MiB."""

# One key segment: a release, an entry name, a run id, a file name. A leading dot is refused so
# that temporary files (".report.json.x1y2.tmp") are never mistaken for keys, and ".." never
# climbs out of the store.
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_S3_URI = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$")


class StoreError(Exception):
    """A store key is missing or malformed, or a write was refused. The message names the key."""


class StoreKeyError(StoreError):
    """The key (a release, a report, an items file) is not in the store."""


class StoreExistsError(StoreError):
    """A write that must never replace an existing object (a run file) found one."""


class StoreConflictError(StoreError):
    """A compare-and-swap update lost the race more times than it may retry."""


class StoreUnreadableError(StoreError):
    """A stored document exists but cannot be used: not a regular file (a FIFO, a device, a
    folder), larger than the readers take, malformed, or not matching its format (a report not
    matching eval-results.schema.json, a comparison not matching compare.schema.json, an items
    file whose header disagrees with its size). The message names the key and says what was
    expected; readers list such a document as unreadable and go on with the others."""


CAS_ATTEMPTS = 20
"""How many times :meth:`S3Store.update_json` re-reads and retries after a lost race (412/409)."""

CAS_BACKOFF_S = (0.05, 2.0)
"""First and largest wait (seconds) between compare-and-swap retries: exponential, with jitter."""


@contextlib.contextmanager
def _naming(where: str):
    """Add a note naming the store and key to any exception raised inside (the CLI prints it).

    The exception keeps its type, so a workflow's retry condition still sees an ``OSError`` or a
    botocore error and retries what is transient.
    """
    try:
        yield
    except StoreError:
        raise  # its message names the key already
    except Exception as e:
        if where not in getattr(e, "__notes__", ()):
            e.add_note(where)
        raise


def _check_name(value: str, what: str) -> str:
    """A release / entry / run id used as one key segment: ``[A-Za-z0-9][A-Za-z0-9._-]*``."""
    if not isinstance(value, str) or not _SEGMENT.match(value):
        raise StoreError(
            f"{what}: expected 1-128 characters of [A-Za-z0-9._-] not starting with '.', "
            f"'-' or '_', got {value!r}"
        )
    return value


def _check_key(key: str) -> str:
    """A relative key: segments joined by '/', each a valid name."""
    if not isinstance(key, str) or not key:
        raise StoreError(f"key: expected a non-empty relative key like 'releases/r1', got {key!r}")
    for part in key.split("/"):
        if not _SEGMENT.match(part):
            raise StoreError(
                f"key: expected '/'-separated segments of [A-Za-z0-9._-] (no '', '.', '..'), "
                f"got {key!r}"
            )
    return key


def parse_created_at(value: Any, where: str = "report") -> datetime:
    """Parse an ISO 8601 ``created_at`` ("2026-11-29T18:00:00Z"); naive times are taken as UTC."""
    if not isinstance(value, str):
        raise StoreError(f"{where}: expected created_at as an ISO 8601 string, got {value!r}")
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise StoreError(
            f"{where}: expected created_at in ISO 8601 (e.g. 2026-11-29T18:00:00Z), got {value!r}"
        ) from None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def check_report(report: Any, where: str, release: str | None = None) -> dict:
    """Check the parts of a report the store relies on; return it.

    The store needs: a JSON object with an ISO 8601 ``created_at``, a ``rows`` list of objects
    each with a unique ``name`` usable in a key, and, when the report names its ``release``, the
    same release as the key it is written under. The full row format is validated by the zoo
    (tinyllm/report.py) before a report reaches the store.
    """
    if not isinstance(report, dict):
        raise StoreError(f"{where}: expected a report (a JSON object), got {type(report).__name__}")
    parse_created_at(report.get("created_at"), where)
    rows = report.get("rows")
    if not isinstance(rows, list):
        raise StoreError(f"{where}: expected 'rows' to be a list, got {type(rows).__name__}")
    seen: set[str] = set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            raise StoreError(f"{where}: rows[{i}]: expected an object with a 'name', got {row!r}")
        name = _check_name(row["name"], f"{where}: rows[{i}].name")
        if name in seen:
            raise StoreError(f"{where}: expected unique row names, got {name!r} twice")
        seen.add(name)
    if release is not None and "release" in report and report["release"] != release:
        raise StoreError(
            f"{where}: expected a report of release {release!r}, got release {report['release']!r}"
        )
    return report


def _dump_json(obj: Any, f: BinaryIO) -> None:
    """Stream ``obj`` as strict UTF-8 JSON (NaN and infinity refused) into the binary file ``f``."""
    writer = codecs.getwriter("utf-8")(f)
    json.dump(obj, writer, indent=2, ensure_ascii=False, allow_nan=False)
    writer.write("\n")


def _json_bytes(obj: Any) -> bytes:
    """The exact bytes :meth:`Store.put_json` and ``update_json`` store for ``obj``."""
    buf = io.BytesIO()
    _dump_json(obj, buf)
    return buf.getvalue()


def _digest(data: bytes) -> str:
    """The first 16 hex digits of the sha256 of ``data``: the hash in content-addressed names."""
    return hashlib.sha256(data).hexdigest()[:16]


def new_run_id(now: datetime | None = None) -> str:
    """A run id that sorts by time: ``20261129T180000Z-3fa2c1`` (UTC second + 6 random hex)."""
    t = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{t:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def merge_rows(
    old_report: dict | None, new_rows: Sequence[dict], order: Sequence[str] | None = None
) -> list[dict]:
    """Rows of a rerun merged into a release's report: replace by name, keep the others.

    Each row of ``new_rows`` replaces the old row with the same ``name`` in place; old rows
    without a new row are kept as they were; new names are appended in ``new_rows`` order.
    With ``order`` (the manifest's entry names), the result is sorted into that order (names
    not in it go last, in their merged order). This is how ``only=["gpt"]`` works: the gpt row is
    replaced, every other row stays, and the earlier run's file under ``runs/`` is untouched.

    Example: old rows a=1, b=2, c=3 and new rows b=20, d=4 -> a=1, b=20, c=3, d=4.
    """
    new_by_name: dict[str, dict] = {}
    for row in new_rows:
        name = row["name"]
        if name in new_by_name:
            raise StoreError(
                f"merge_rows: expected unique names in the new rows, got {name!r} twice"
            )
        new_by_name[name] = row
    merged: list[dict] = []
    for row in (old_report or {}).get("rows", []):
        merged.append(new_by_name.pop(row["name"], row))
    merged.extend(new_by_name.values())  # dicts keep insertion order: new_rows order
    if order is not None:
        rank = {name: i for i, name in enumerate(order)}
        # stable sort: unknown names keep their merged order after the known ones
        merged.sort(key=lambda r: rank.get(r["name"], len(rank)))
    return merged


def merge_report(
    old_report: dict | None, new_report: dict, order: Sequence[str] | None = None
) -> dict:
    """The release's merged view after a run: ``new_report`` with its rows merged into the old.

    Everything comes from ``new_report`` except ``rows`` (:func:`merge_rows`) and ``created_at``,
    which keeps the old report's value when there is one: ``created_at`` is when the release was
    first evaluated and orders the history, so rerunning one entry of an old release does not
    move it after newer releases. The run's own time stays in its ``runs/<run-id>.json``.
    """
    merged = dict(new_report)
    merged["rows"] = merge_rows(old_report, new_report["rows"], order)
    if old_report is not None and "created_at" in old_report:
        merged["created_at"] = old_report["created_at"]
    return merged


# a run id from new_run_id(): the UTC second it was made, then 6 hex digits
_RUN_TIME = re.compile(r"^(\d{8}T\d{6}Z)-[0-9a-f]{6}\.json$")


@dataclass(frozen=True)
class HistoryEntry:
    """One release folder with a ``report.json``, as :meth:`Store.history_entries` lists it.

    ``release``: the folder's name (for an unreadable entry possibly not a valid release name);
    ``created_at``: the report's (None when unreadable); ``error``: None for a readable release,
    else one line naming the key and saying why it cannot be read.
    """

    release: str
    created_at: datetime | None = None
    error: str | None = None

    @property
    def readable(self) -> bool:
        return self.error is None


class Store:
    """The store interface: four byte-level operations and the domain helpers built on them.

    Keys are relative, '/'-separated (``releases/r1/report.json``). Subclasses implement
    ``put_bytes``, ``get_bytes``, ``exists`` and ``list``; ``uri`` names the store in messages.
    """

    uri: str = ""

    # --- the backend interface -------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes, *, overwrite: bool = True) -> None:
        """Write ``data`` at ``key`` atomically; with ``overwrite=False`` refuse an existing key."""
        raise NotImplementedError

    def get_bytes(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        """The bytes at ``key``; :class:`StoreKeyError` when there is none,
        :class:`StoreUnreadableError` for an object larger than ``max_bytes`` or (local folder)
        anything but a regular file, refused before it is read."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        """Whether an object is stored at ``key``."""
        raise NotImplementedError

    def list(self, prefix: str = "") -> list[str]:
        """Every key that starts with ``prefix`` (a plain string prefix), sorted."""
        raise NotImplementedError

    def put_json(self, key: str, obj: Any, *, overwrite: bool = True) -> None:
        """Write ``obj`` as strict JSON (NaN refused) at ``key``, atomically."""
        self.put_bytes(key, _json_bytes(obj), overwrite=overwrite)

    def get_json(self, key: str, what: str = "JSON") -> Any:
        """Parse the JSON at ``key`` (at most :data:`MAX_JSON_BYTES`); a malformed file is a
        :class:`StoreUnreadableError` naming the key."""
        return self._parse_json(key, self.get_bytes(key, max_bytes=MAX_JSON_BYTES), what)

    def _parse_json(self, key: str, data: bytes, what: str) -> Any:
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise StoreUnreadableError(
                f"{self.where(key)}: malformed {what}: expected JSON, got {e}"
            ) from None

    def where(self, key: str) -> str:
        """``<store uri>/<key>``, for messages."""
        return f"{self.uri.rstrip('/')}/{key}"

    # --- keys --------------------------------------------------------------------------------

    @staticmethod
    def report_key(release: str) -> str:
        return f"releases/{_check_name(release, 'release')}/report.json"

    @staticmethod
    def compare_key(release: str) -> str:
        return f"releases/{_check_name(release, 'release')}/compare.json"

    @staticmethod
    def compare_version_key(release: str, report_bytes: bytes) -> str:
        """``releases/<release>/compares/<h>.json``: the comparison made for the report.json
        whose bytes are ``report_bytes`` (``h``: the first 16 hex digits of their sha256)."""
        return f"releases/{_check_name(release, 'release')}/compares/{_digest(report_bytes)}.json"

    @staticmethod
    def run_key(release: str, run_id: str) -> str:
        return (
            f"releases/{_check_name(release, 'release')}/runs/{_check_name(run_id, 'run_id')}.json"
        )

    @staticmethod
    def items_key(release: str, name: str) -> str:
        return f"releases/{_check_name(release, 'release')}/items/{_check_name(name, 'entry')}.npy"

    # --- runs --------------------------------------------------------------------------------

    def write_run(self, release: str, run_id: str, report: dict) -> str:
        """Store one run's raw report at ``releases/<release>/runs/<run-id>.json``; return the key.

        Never overwrites: a second write of the same run id raises :class:`StoreExistsError`.
        """
        key = self.run_key(release, run_id)
        check_report(report, self.where(key), release)
        if self.exists(key):
            raise StoreExistsError(f"{self.where(key)}: run files are never overwritten; it exists")
        self.put_json(key, report, overwrite=False)
        return key

    def read_run(self, release: str, run_id: str) -> dict:
        """The raw report of one run, checked like :meth:`read_report`."""
        key = self.run_key(release, run_id)
        return self._checked_report(key, self._get_json_or_missing(key, release, "run"))

    def runs(self, release: str) -> list[str]:
        """The run ids of a release, sorted (run ids from :func:`new_run_id` sort by time)."""
        prefix = f"releases/{_check_name(release, 'release')}/runs/"
        return [k[len(prefix) : -len(".json")] for k in self.list(prefix) if k.endswith(".json")]

    # --- per-item scores ---------------------------------------------------------------------

    @staticmethod
    def ref_key(release: str, ref: str) -> str:
        """The key of a row's ``items`` reference (``items/<file>.npy``) in ``release``."""
        parts = ref.split("/") if isinstance(ref, str) else []
        if len(parts) != 2 or parts[0] != "items" or not parts[1].endswith(".npy"):
            raise StoreError(f"items: expected a reference like 'items/<name>.npy', got {ref!r}")
        return f"releases/{_check_name(release, 'release')}/{_check_key(ref)}"

    def _npy(self, key: str, array: Any) -> bytes:
        a = np.asarray(array)
        if a.ndim != 1 or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            raise StoreError(
                f"{self.where(key)}: expected a 1-d numeric array of per-item scores, got "
                f"dtype {a.dtype} shape {a.shape}"
            )
        buf = io.BytesIO()
        np.save(buf, a.astype(np.float64, copy=False), allow_pickle=False)
        return buf.getvalue()

    def write_items(self, release: str, name: str, array: Any) -> str:
        """Store an entry's per-item scores as a float64 ``.npy`` at the fixed name
        ``items/<entry>.npy``; return the key.

        ``array``: 1-d numeric (per-token NLLs in nats for LM rows, 0/1 for accuracy rows).
        The fixed name is the layout of stores written before content-addressed items (and of
        callers that write one release with one writer). The flow uses
        :meth:`write_items_ref`, whose name cannot be replaced under a row by another run.
        """
        key = self.items_key(release, name)
        self.put_bytes(key, self._npy(key, array))
        return key

    def write_items_ref(self, release: str, name: str, array: Any) -> str:
        """Store per-item scores under a content-addressed name; return the row's reference.

        The name is ``items/<entry>-<h>.npy`` with ``h`` the first 16 hex digits of the sha256
        of the ``.npy`` bytes. The same scores always get the same name and different scores a
        different one, so a row that says ``"items": "items/gpt-1f2e....npy"`` always reads the
        scores it was computed from, whatever other runs write at the same moment.
        """
        _check_name(name, "entry")
        data = self._npy(self.items_key(release, name), array)
        ref = f"items/{name}-{hashlib.sha256(data).hexdigest()[:16]}.npy"
        self.put_bytes(self.ref_key(release, ref), data)  # same name, same bytes: idempotent
        return ref

    def read_items(self, release: str, name: str, ref: str | None = None) -> np.ndarray:
        """An entry's per-item scores: a 1-d float64 ``.npy`` (at most :data:`MAX_OBJECT_BYTES`).

        ``ref``: the row's ``items`` reference (``items/<file>.npy``); without it, the fixed
        name ``items/<entry>.npy``. The ``.npy`` header is checked before anything is
        allocated: a 1-d float64 array (either byte order) whose length times 8 bytes is exactly
        the data after the header, so a 200-byte file claiming 10^11 items is refused at once.
        Nothing is ever unpickled (an object array is refused). Any bad file is a
        :class:`StoreUnreadableError` naming the key.
        """
        key = self.items_key(release, name) if ref is None else self.ref_key(release, ref)
        return self._load_npy(key, self.get_bytes(key))

    def _load_npy(self, key: str, data: bytes) -> np.ndarray:
        where = self.where(key)
        if not data.startswith(b"\x93NUMPY"):
            # not a .npy: np.load tells an .npz (refused below by its type) from other bytes
            # (refused: allow_pickle=False never unpickles them)
            try:
                a = np.load(io.BytesIO(data), allow_pickle=False)
            except (ValueError, OSError, EOFError) as e:
                raise StoreUnreadableError(
                    f"{where}: malformed items: expected a .npy array, got {e}"
                ) from None
            raise StoreUnreadableError(
                f"{where}: expected a 1-d array of per-item scores, got shape "
                f"{getattr(a, 'shape', None)}"
            )
        buf = io.BytesIO(data)
        try:
            version = np.lib.format.read_magic(buf)
            if version == (1, 0):
                shape, _fortran, dtype = np.lib.format.read_array_header_1_0(buf)
            elif version == (2, 0):
                shape, _fortran, dtype = np.lib.format.read_array_header_2_0(buf)
            else:
                raise ValueError(f"expected .npy format version 1.0 or 2.0, got {version}")
        except (ValueError, OSError, EOFError, SyntaxError) as e:
            raise StoreUnreadableError(
                f"{where}: malformed items: expected a .npy array, got {e}"
            ) from None
        if dtype.hasobject:
            raise StoreUnreadableError(
                f"{where}: malformed items: expected a .npy array of numbers, got dtype {dtype} "
                "(object arrays are pickles; allow_pickle=False never loads them)"
            )
        if len(shape) != 1:
            raise StoreUnreadableError(
                f"{where}: expected a 1-d array of per-item scores, got shape {shape}"
            )
        if dtype.kind != "f" or dtype.itemsize != 8:
            raise StoreUnreadableError(
                f"{where}: expected per-item scores as float64, got dtype {dtype}"
            )
        start, n = buf.tell(), shape[0]
        if n * 8 != len(data) - start:  # checked before anything of that size is allocated
            raise StoreUnreadableError(
                f"{where}: malformed items: expected {n} float64 values ({n * 8} bytes) after "
                f"the header, as its shape {shape} says, got {len(data) - start} bytes"
            )
        return np.frombuffer(data, dtype=dtype, count=n, offset=start).astype(np.float64)

    def items_loader(self, release: str, report: dict | None = None) -> Callable[[str], np.ndarray]:
        """``name -> per-item scores`` of ``release``: the loader :func:`compare_reports` takes.

        Each name is looked up in the rows of ``report`` (default: the release's stored report,
        read on first use) and read from the file its ``items`` reference names; a name with no
        row (or no reference) falls back to the fixed name ``items/<entry>.npy``.
        """
        _check_name(release, "release")
        refs: dict[str, str | None] | None = None

        def load(name: str) -> np.ndarray:
            nonlocal refs
            if refs is None:
                doc = report
                if doc is None:
                    doc = self.read_report(release) if self.has_report(release) else {"rows": []}
                refs = {r["name"]: r.get("items") for r in doc.get("rows", [])}
            return self.read_items(release, name, refs.get(name))

        return load

    # --- reports -----------------------------------------------------------------------------

    def write_report(self, release: str, report: dict) -> str:
        """Write the release's merged view ``releases/<release>/report.json`` atomically."""
        key = self.report_key(release)
        check_report(report, self.where(key), release)
        self.put_json(key, report)
        return key

    def update_json(self, key: str, update: Callable[[Any], Any], what: str = "JSON") -> Any:
        """Compare-and-swap: ``new = update(old)`` written at ``key`` only if nobody wrote it in
        between; ``old`` is None when there is no object yet. Returns ``new``.

        ``update`` may be called more than once (after a lost race it sees the newer object),
        so it must be a pure function of ``old``. Each backend implements the swap.
        """
        raise NotImplementedError

    def update_report(self, release: str, update: Callable[[dict | None], dict]) -> dict:
        """Read-merge-write of ``releases/<release>/report.json`` as one compare-and-swap.

        ``update(old_report_or_None) -> new_report``; the new report is checked like
        :meth:`write_report`'s. Two runs of different entries of one release that publish at
        the same moment both keep their rows (a plain read-merge-write loses one).
        """
        key = self.report_key(release)

        def checked(old: Any) -> dict:
            if old is not None:
                check_report(old, self.where(key))
            return check_report(update(old), self.where(key), release)

        return self.update_json(key, checked, "report")

    def check_writable(self) -> None:
        """Refuse a store that cannot be written (before any scoring): write a probe object and
        delete it. Raises the backend's error with a note naming the store."""
        raise NotImplementedError

    def read_report(self, release: str) -> dict:
        """The release's merged report, validated: the validated reader of every report.json.

        A missing release is a :class:`StoreKeyError`. A report that cannot be used is a
        :class:`StoreUnreadableError` naming the key and what was expected: not a regular file,
        over :data:`MAX_JSON_BYTES`, not JSON, missing what the store relies on
        (:func:`check_report`), or not matching formats/eval-results.schema.json
        (:func:`tinyllm.report.check_stored_report`).
        """
        key = self.report_key(release)
        return self._checked_report(key, self._get_json_or_missing(key, release, "report"))

    def _checked_report(self, key: str, doc: Any) -> dict:
        from tinyllm.report import ReportSchemaError, check_stored_report

        where = self.where(key)
        try:
            check_report(doc, where)
        except StoreError as e:
            raise StoreUnreadableError(str(e)) from None
        try:
            check_stored_report(doc)
        except ReportSchemaError as e:
            raise StoreUnreadableError(f"{where}: {e}") from None
        return doc

    def has_report(self, release: str) -> bool:
        return self.exists(self.report_key(release))

    def write_compare(self, release: str, cmp: dict) -> str:
        """Write ``releases/<release>/compare.json`` (validated against compare.schema.json)."""
        return self._put_compare(self.compare_key(release), cmp)

    def write_compare_version(self, release: str, report_bytes: bytes, cmp: dict) -> str:
        """Write the comparison made for the report.json whose bytes are ``report_bytes`` at
        :meth:`compare_version_key` (validated); return the key. :func:`publish_run` writes it
        before the report, so every report it makes visible has its comparison already."""
        return self._put_compare(self.compare_version_key(release, report_bytes), cmp)

    def _put_compare(self, key: str, cmp: dict) -> str:
        from tinyllm.compare import validate_compare

        try:
            validate_compare(cmp)
        except ValueError as e:
            raise StoreError(f"{self.where(key)}: {e}") from None
        self.put_json(key, cmp)
        return key

    def read_compare(self, release: str) -> dict:
        """The comparison of a release's report with its previous release, validated.

        The comparison made for the report.json as it is now (``compares/<h>.json``, ``h`` the
        hash of its bytes) when there is one, else ``compare.json`` (stores written before
        comparisons were kept per report, and comparisons written with :meth:`write_compare`
        alone). A missing one is a :class:`StoreKeyError`; one that is not a JSON object with a
        ``rows`` list matching formats/compare.schema.json is a :class:`StoreUnreadableError`
        naming the key and what was expected.
        """
        key = self.compare_key(release)
        try:
            report_bytes = self.get_bytes(self.report_key(release), max_bytes=MAX_JSON_BYTES)
        except (StoreKeyError, StoreUnreadableError):
            report_bytes = None  # no usable report: only compare.json can say anything
        if report_bytes is not None:
            version = self.compare_version_key(release, report_bytes)
            try:
                return self._checked_compare(version, self.get_json(version, "comparison"))
            except StoreKeyError:
                pass
        return self._checked_compare(key, self._get_json_or_missing(key, release, "comparison"))

    def _checked_compare(self, key: str, cmp: Any) -> dict:
        from tinyllm.compare import validate_compare

        where = self.where(key)
        if not isinstance(cmp, dict):
            raise StoreUnreadableError(f"{where}: expected a JSON object, got {type(cmp).__name__}")
        if not isinstance(cmp.get("rows"), list):
            raise StoreUnreadableError(
                f"{where}: expected 'rows' to be a list, got {type(cmp.get('rows')).__name__}"
            )
        try:
            validate_compare(cmp)
        except ValueError as e:
            raise StoreUnreadableError(f"{where}: {e}") from None
        return cmp

    def write_site_file(self, key: str, data: bytes, content_type: str) -> str:
        """Write one file of the static dashboard (``dashboard/...`` only; never ``releases/``).

        ``content_type`` is kept where the backend has one (S3), so static hosting serves it.
        """
        if not _check_key(key).startswith("dashboard/"):
            raise StoreError(f"{self.where(key)}: expected a key under dashboard/, got {key!r}")
        self.put_bytes(key, data)
        return key

    # --- history -----------------------------------------------------------------------------

    def _release_names(self) -> list[str]:
        names = []
        for key in self.list("releases/"):
            parts = key.split("/")
            if len(parts) == 3 and parts[2] == "report.json":
                names.append(parts[1])
        return names

    def history_entries(self) -> list[HistoryEntry]:
        """Every release folder with a ``report.json``, readable or not; never raises for a bad
        stored file (only for the backend itself: an unreachable endpoint, a refused listing).

        A readable release is ``HistoryEntry(release, created_at, error=None)``; one whose report
        cannot be used (:meth:`read_report` raises a :class:`StoreError`: malformed, not matching
        its schema, a FIFO, or a folder name that is not a valid release name such as
        ``v1 copy``) is ``HistoryEntry(release, None, error="<key>: <why>")``. Order: readable
        releases by ``created_at``, then name (the history); each unreadable one in its place by
        the time in its first run id (``runs/YYYYMMDDTHHMMSSZ-xxxxxx.json``) when it has one,
        else after all the others, by name. A release folder without a ``report.json`` (a run
        that never finished) is not listed.
        """
        reports, run_times = [], {}
        for key in self.list("releases/"):
            parts = key.split("/")
            if len(parts) == 3 and parts[2] == "report.json":
                reports.append(parts[1])
            elif len(parts) == 4 and parts[2] == "runs" and parts[3].endswith(".json"):
                m = _RUN_TIME.match(parts[3])
                if m and parts[1] not in run_times:  # keys are sorted: the first run id
                    t = datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
                    run_times[parts[1]] = t
        placed = []
        for name in reports:
            where = self.where(f"releases/{name}/report.json")
            try:
                _check_name(name, f"{where}: release folder")
                created = parse_created_at(self.read_report(name)["created_at"], where)
            except StoreKeyError:
                continue  # deleted between the listing and the read: not there any more
            except StoreError as e:
                entry = HistoryEntry(name, None, str(e))
                t = run_times.get(name)
                placed.append(((0, t.timestamp(), name) if t else (1, 0.0, name), entry))
                continue
            placed.append(((0, created.timestamp(), name), HistoryEntry(name, created)))
        placed.sort(key=lambda p: p[0])
        return [entry for _, entry in placed]

    def history(self, *, skip_unreadable: bool = False) -> list[tuple[str, datetime]]:
        """``(release, created_at)`` of every release with a readable report, oldest first.

        Order: ``created_at``, then the release name for equal times. A release folder without
        a ``report.json`` (a run that never finished) is not part of the history. A report that
        cannot be read (see :meth:`history_entries`) raises :class:`StoreUnreadableError`, or
        with ``skip_unreadable`` is left out with a warning naming it; errors of the backend
        itself (an unreachable endpoint) always raise.
        """
        out = []
        for entry in self.history_entries():
            if entry.error is not None:
                if not skip_unreadable:
                    raise StoreUnreadableError(entry.error)
                warnings.warn(f"left out of the history: {entry.error}", stacklevel=2)
                continue
            assert entry.created_at is not None
            out.append((entry.release, entry.created_at))
        return out

    def releases(self) -> list[str]:
        """Every release with a report, oldest first (by ``created_at``): the history."""
        return [name for name, _ in self.history()]

    def previous_release(self, release: str) -> str | None:
        """The latest release evaluated before ``release`` (by ``created_at``), or None.

        When ``release`` has no report yet (it is being evaluated now) it counts as the newest,
        so its previous release is the latest one in the store. Releases whose report cannot be
        read are skipped with a warning (one corrupt old report must not stop every later
        release from being compared): the comparison names the release it was made against.
        """
        _check_name(release, "release")
        hist = self.history(skip_unreadable=True)
        names = [n for n, _ in hist]
        if release not in names:
            return names[-1] if names else None
        i = names.index(release)
        return names[i - 1] if i > 0 else None

    def baseline_release(self, release: str) -> str | None:
        """The release a publish of ``release`` is compared with when no ``previous`` is given.

        1. ``release`` is not in the history yet (its first publish): the newest readable
           release other than itself, by ``created_at`` then name, whatever the publisher's
           clock says (a release dated ahead of this machine's clock is not skipped);
        2. ``release`` is in the history and its comparison names a readable release other
           than itself: that one (a rerun keeps the baseline its release was published with);
        3. otherwise the release before it in the history (:meth:`previous_release`), or None.

        Unreadable releases are skipped with a warning, as in :meth:`previous_release`.
        """
        _check_name(release, "release")
        names = [n for n, _ in self.history(skip_unreadable=True)]
        others = [n for n in names if n != release]
        if release not in names:
            return others[-1] if others else None
        try:
            prev = self.read_compare(release).get("previous")
        except StoreError:
            prev = None  # none, or unreadable: fall back to the history order
        if prev in others:
            return prev
        i = names.index(release)
        return names[i - 1] if i > 0 else None

    def _get_json_or_missing(self, key: str, release: str, what: str) -> Any:
        try:
            return self.get_json(key, what)
        except StoreKeyError:
            if what == "report" or not self.has_report(release):
                known = ", ".join(self._release_names()) or "none"
                raise StoreKeyError(
                    f"{self.where(key)}: no such {what}: release {release!r} is not in the store "
                    f"(releases: {known})"
                ) from None
            raise


class LocalStore(Store):
    """A store in a local folder; every write is a temp file + fsync + :func:`os.replace`."""

    def __init__(self, root: str | os.PathLike[str] = DEFAULT_STORE) -> None:
        self.root = Path(root)
        self.uri = str(self.root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"store: expected a folder, got the file {self.root}")

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*_check_key(key).split("/"))

    def _atomic_write(self, key: str, write: Callable[[BinaryIO], None], overwrite: bool) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # same folder as the target: os.replace/os.link are atomic only within one filesystem
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o644)  # mkstemp makes 0600; a report is for everyone
                write(f)
                f.flush()
                os.fsync(f.fileno())
            if overwrite:
                os.replace(tmp, path)
            else:
                self._link_new(tmp, path, key)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # after os.link: the temp name is a second link to the same file
        self._fsync_dir(path.parent)

    def _link_new(self, tmp: str, path: Path, key: str) -> None:
        """Create ``path`` from ``tmp`` only if it does not exist (os.link is atomic)."""
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise StoreExistsError(f"{self.where(key)}: refusing to overwrite; it exists") from None
        except OSError:
            # a filesystem without hard links: check, then replace (not race-free, but safe
            # for the single writer a release run has)
            if path.exists():
                raise StoreExistsError(
                    f"{self.where(key)}: refusing to overwrite; it exists"
                ) from None
            os.replace(tmp, path)

    @staticmethod
    def _fsync_dir(folder: Path) -> None:
        with contextlib.suppress(OSError):
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def put_bytes(self, key: str, data: bytes, *, overwrite: bool = True) -> None:
        with _naming(self.where(key)):
            self._atomic_write(key, lambda f: f.write(data), overwrite)

    def put_json(self, key: str, obj: Any, *, overwrite: bool = True) -> None:
        # streamed into the temp file: an error half way through leaves the old file as it was
        with _naming(self.where(key)):
            self._atomic_write(key, lambda f: _dump_json(obj, f), overwrite)

    def get_bytes(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        # safeio.read_regular opens without blocking and checks with fstat before reading: a
        # FIFO, a device or a folder in place of the file is refused at once, never waited on,
        # and a file over max_bytes is refused before it is read
        path = self._path(key)
        try:
            with _naming(self.where(key)):
                return safeio.read_regular(path, max_bytes=max_bytes, what="key")
        except (FileNotFoundError, NotADirectoryError):
            raise StoreKeyError(f"{self.where(key)}: no such key") from None
        except safeio.UnsafePathError as e:
            why = str(e).removeprefix(f"key {path}: ")
            if why == "expected a regular file, got a folder":
                why = "expected a file, got a folder"
            raise StoreUnreadableError(f"{self.where(key)}: {why}") from None

    @contextlib.contextmanager
    def _locked(self, key: str):
        """An exclusive ``fcntl.flock`` on ``.<name>.lock`` beside the key's file (a dotfile:
        never listed as a key). Every writer of the key takes it, so read-merge-write is
        atomic among processes on this machine (and on file systems that honour flock)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.parent / f".{path.name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the other writer is done
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def update_json(self, key: str, update: Callable[[Any], Any], what: str = "JSON") -> Any:
        with _naming(self.where(key)), self._locked(key):
            old = self.get_json(key, what) if self.exists(key) else None
            new = update(old)
            self._atomic_write(key, lambda f: _dump_json(new, f), True)
        return new

    def check_writable(self) -> None:
        with _naming(f"store {self.uri}"):
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".probe.", suffix=".tmp")
            os.close(fd)
            os.unlink(tmp)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        # walk from the deepest folder the prefix names, then filter by the string prefix
        parts = prefix.split("/")
        base = self.root.joinpath(*[p for p in parts[:-1] if p])
        if not base.is_dir():
            return []
        keys = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for fn in filenames:
                if fn.startswith("."):  # temp files of writes in progress (or of a crash)
                    continue
                key = fn if rel == "." else f"{rel}/{fn}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)


class S3Store(Store):
    """A store under ``s3://bucket/prefix`` through a boto3 S3 client.

    The client comes from ``boto3.client("s3")`` unless one is given, so endpoint, region and
    credentials follow the standard AWS environment and config files (``AWS_ENDPOINT_URL`` for
    MinIO / moto / any S3-compatible server).
    """

    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        if client is None:
            import boto3  # imported here: local stores should not pay for boto3

            client = boto3.client("s3")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.uri = f"s3://{bucket}/{self.prefix}"

    def _key(self, key: str) -> str:
        return self.prefix + _check_key(key)

    @staticmethod
    def _code(err: Exception) -> str:
        return str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))

    def write_site_file(self, key: str, data: bytes, content_type: str) -> str:
        if not _check_key(key).startswith("dashboard/"):
            raise StoreError(f"{self.where(key)}: expected a key under dashboard/, got {key!r}")
        self.client.put_object(
            Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type
        )
        return key

    def put_bytes(self, key: str, data: bytes, *, overwrite: bool = True) -> None:
        from botocore.exceptions import ClientError

        k = self._key(key)
        if overwrite:
            with _naming(self.where(key)):
                self.client.put_object(Bucket=self.bucket, Key=k, Body=data)
            return
        try:
            # a conditional put: S3 itself refuses when the key exists (no check-then-write race)
            self.client.put_object(Bucket=self.bucket, Key=k, Body=data, IfNoneMatch="*")
        except ClientError as e:
            code = self._code(e)
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                # 409: another conditional put of this key is in flight (it will exist)
                raise StoreExistsError(
                    f"{self.where(key)}: refusing to overwrite; it exists"
                ) from None
            if code not in ("NotImplemented", "501"):
                e.add_note(self.where(key))  # any other refusal: keep its type, name the key
                raise
            # an S3-compatible server without conditional writes: check, then write
            if self.exists(key):
                raise StoreExistsError(
                    f"{self.where(key)}: refusing to overwrite; it exists"
                ) from None
            self.client.put_object(Bucket=self.bucket, Key=k, Body=data)

    def get_bytes(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        return self._get(key, max_bytes)[0]

    def _get(self, key: str, max_bytes: int = MAX_OBJECT_BYTES) -> tuple[bytes, str]:
        """The bytes at ``key`` and their ETag; an object over ``max_bytes`` is refused by its
        ContentLength before its body is read (and a body longer than that is cut and refused)."""
        from botocore.exceptions import ClientError

        try:
            with _naming(self.where(key)):
                obj = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
                size = obj.get("ContentLength")
                if isinstance(size, int) and size > max_bytes:
                    obj["Body"].close()
                    raise StoreUnreadableError(
                        f"{self.where(key)}: expected at most {max_bytes} bytes, got {size}"
                    )
                data = obj["Body"].read(max_bytes + 1)
                if len(data) > max_bytes:
                    raise StoreUnreadableError(
                        f"{self.where(key)}: expected at most {max_bytes} bytes, got more"
                    )
                return data, obj["ETag"]
        except ClientError as e:
            if self._code(e) in ("NoSuchKey", "404", "NotFound"):
                raise StoreKeyError(f"{self.where(key)}: no such key") from None
            if self._code(e) == "NoSuchBucket":
                raise StoreKeyError(f"{self.uri}: no such bucket {self.bucket!r}") from None
            raise

    def update_json(self, key: str, update: Callable[[Any], Any], what: str = "JSON") -> Any:
        """Optimistic compare-and-swap on the object's ETag: read it (bytes + ETag), compute
        the new object, put it with ``If-Match: <etag>`` (``If-None-Match: *`` when there was
        none). S3 answers 412 Precondition Failed when another writer got in between (409
        ConditionalRequestConflict when two puts race): re-read, recompute, retry with
        exponential backoff and jitter, at most :data:`CAS_ATTEMPTS` times."""
        from botocore.exceptions import ClientError

        k = self._key(key)
        delay, cap = CAS_BACKOFF_S
        for _attempt in range(CAS_ATTEMPTS):
            try:
                data, etag = self._get(key, MAX_JSON_BYTES)
                old = self._parse_json(key, data, what)
                cond = {"IfMatch": etag}
            except StoreKeyError as e:
                if "no such bucket" in str(e):
                    raise
                old, cond = None, {"IfNoneMatch": "*"}
            new = update(old)
            body = _json_bytes(new)
            try:
                with _naming(self.where(key)):
                    self.client.put_object(Bucket=self.bucket, Key=k, Body=body, **cond)
                return new
            except ClientError as e:
                code = self._code(e)
                if code in ("NotImplemented", "501"):
                    raise StoreError(
                        f"{self.where(key)}: expected an S3 server with conditional writes "
                        f"(If-Match), got {code}: the release report cannot be merged safely"
                    ) from None
                if code not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise
            time.sleep(random.uniform(0, delay))  # full jitter: racing writers spread out
            delay = min(cap, delay * 2)
        raise StoreConflictError(
            f"{self.where(key)}: compare-and-swap lost {CAS_ATTEMPTS} times in a row; "
            "too many concurrent writers of this key"
        )

    def check_writable(self) -> None:
        probe = self._key(f"tmp-probe-{secrets.token_hex(4)}")
        with _naming(f"store {self.uri}"):
            self.client.put_object(Bucket=self.bucket, Key=probe, Body=b"")
            self.client.delete_object(Bucket=self.bucket, Key=probe)

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            with _naming(self.where(key)):
                self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            if self._code(e) in ("NoSuchKey", "404", "NotFound"):
                return False
            raise
        return True

    def list(self, prefix: str = "") -> list[str]:
        from botocore.exceptions import ClientError

        keys: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix
        )
        try:
            with _naming(self.where(prefix) if prefix else self.uri):
                for page in pages:
                    keys.extend(obj["Key"][len(self.prefix) :] for obj in page.get("Contents", []))
        except ClientError as e:
            if self._code(e) == "NoSuchBucket":
                raise StoreKeyError(f"{self.uri}: no such bucket {self.bucket!r}") from None
            raise
        return sorted(keys)


def _parse_s3_uri(uri: str) -> tuple[str, str]:
    m = _S3_URI.match(uri)
    if not m:
        raise StoreError(
            f"store: expected s3://bucket/prefix (bucket: 3-63 of [a-z0-9.-]), got {uri!r}"
        )
    return m.group(1), m.group(2) or ""


def open_store(uri: str | os.PathLike[str] = DEFAULT_STORE, *, client: Any = None) -> Store:
    """Open the report store at ``uri``: a local folder path, or ``s3://bucket/prefix``.

    A local folder is created on the first write. For S3, ``client`` (a boto3 S3 client) may be
    given; otherwise ``boto3.client("s3")`` reads endpoint and credentials from the environment.
    Any other scheme (``gs://``, ``file://``) is refused.
    """
    text = os.fspath(uri)
    if text.startswith("s3://"):
        bucket, prefix = _parse_s3_uri(text)
        return S3Store(bucket, prefix, client=client)
    if "://" in text:
        raise StoreError(f"store: expected a local folder or s3://bucket/prefix, got {text!r}")
    return LocalStore(text)


def check_publish_args(uri: str, release: str, previous: str | None = None) -> Store:
    """Everything about a publish that can be checked before any scoring; returns the store.

    The release name (a key segment), ``previous`` (when given: not the release itself, a
    release cannot be its own baseline), the store (opened, reachable and writable: a probe is
    written and deleted), and ``previous`` again (a release the store has). A bad argument is
    refused here instead of after every entry was scored and the release written.
    """
    _check_name(release, "release")
    if previous is not None:
        _check_previous(release, previous)
    st = open_store(uri)
    st.check_writable()
    if previous is not None:
        _check_name(previous, "previous")
        if not st.has_report(previous):
            known = ", ".join(st._release_names()) or "none"
            raise StoreKeyError(
                f"{st.where(st.report_key(previous))}: previous: expected a release in the "
                f"store, got {previous!r} (releases: {known})"
            )
    return st


def _check_previous(release: str, previous: str) -> str:
    """``previous`` names another release: comparing a release with itself says nothing."""
    _check_name(previous, "previous")
    if previous == release:
        raise StoreError(
            f"previous: expected a release other than the one being published, got {previous!r} "
            f"(the release itself: a release cannot be compared with itself)"
        )
    return previous


def iter_reports(store: Store, releases: Iterable[str] | None = None) -> Iterable[tuple[str, dict]]:
    """``(release, report)`` for ``releases`` (default: the whole history, oldest first)."""
    for name in store.releases() if releases is None else releases:
        yield name, store.read_report(name)


# The first failure of each publish that failed, by (store, release, run id): a retried publish
# (same run id) that fails too raises the first failure again, with the retry's error as a
# note, so the error a user reads is the cause and not a later symptom. Bounded: the oldest go.
_FIRST_FAILURES: dict[tuple[str, str, str], BaseException] = {}
_FIRST_FAILURES_KEPT = 64


def publish_run(
    store: Store,
    release: str,
    run_report: dict,
    items: dict[str, Any],
    *,
    order: Sequence[str] | None = None,
    previous: str | None = None,
    seed: int = 0,
    run_id: str | None = None,
) -> dict:
    """Publish one run of a release: items, the run file, the comparison, the merged report.

    0. every ``status: "ok"`` row with per-item scores is checked against them
       (:func:`tinyllm.compare.row_items_problem`: ``n`` is their count, and ``value`` their
       mean in the metric's units for the mean metrics); a row that disagrees becomes an error
       row saying why, and its scores are not stored;
    1. each entry's per-item scores under a content-addressed name (:meth:`Store.write_items_ref`),
       and each row's ``items`` set to that name (a row without scores gets ``null``);
    2. the run's raw report at ``runs/<run-id>.json`` (never overwritten);
    3. the baseline: ``previous``, or :meth:`Store.baseline_release` (decided before this
       release is visible, so the release never counts as its own predecessor);
    4. the release's ``report.json`` merged with the run's rows as one compare-and-swap
       (:meth:`Store.update_report`): concurrent runs of other entries keep their rows. Inside
       the swap, before the new report is put, its comparison with the baseline is written at
       :meth:`Store.compare_version_key` of the new report's bytes: the release (or its new
       report) becomes visible only once its comparison is stored, and a publish that fails or
       is killed anywhere leaves the old report with its old comparison;
    5. ``compare.json``, a copy of the comparison of the report as it now is (recomputed if
       another run changed the report meanwhile), for tools that read the file itself.

    Every report is validated against formats/eval-results.schema.json before it is written.
    A retried publish (same ``run_id``) that fails again raises the first attempt's error.
    Returns ``{"run_id", "report", "compare", "store"}`` (``report``: the merged report the
    comparison was made on).
    """
    _check_name(release, "release")
    if previous is not None:
        _check_previous(release, previous)
    attempt = (store.uri, release, run_id) if run_id else None
    run_id = run_id or new_run_id()
    try:
        out = _publish(store, release, run_report, items, order, previous, seed, run_id)
    except Exception as e:
        first = _FIRST_FAILURES.get(attempt) if attempt else None
        if attempt is None or first is None or first is e:
            if attempt is not None:
                _FIRST_FAILURES[attempt] = e
                while len(_FIRST_FAILURES) > _FIRST_FAILURES_KEPT:
                    del _FIRST_FAILURES[next(iter(_FIRST_FAILURES))]
            raise
        first.add_note(f"a retry of this publish failed too: {type(e).__name__}: {e}")
        raise first  # noqa: B904 (the retry's error is its context and its note)
    if attempt is not None:
        _FIRST_FAILURES.pop(attempt, None)
    return out


def _mismatch_row(row: dict, problem: str) -> dict:
    """``row`` as an error row: its result disagrees with its per-item scores."""
    from tinyllm.compare import RowItemsMismatchError

    out = dict(row)
    out.update(
        status="error",
        error={"type": RowItemsMismatchError.__name__, "message": problem},
        value=None,
        lo=None,
        hi=None,
        interval=None,
        n=None,
        items=None,
    )
    return out


def _publish(
    store: Store,
    release: str,
    run_report: dict,
    items: dict[str, Any],
    order: Sequence[str] | None,
    previous: str | None,
    seed: int,
    run_id: str,
) -> dict:
    from tinyllm.compare import compare_reports, row_items_problem
    from tinyllm.report import validate_report

    rows, arrays = [], dict(items)
    for row in run_report["rows"]:
        arr = items.get(row.get("name")) if isinstance(row, dict) else None
        problem = row_items_problem(row, arr) if arr is not None else None
        if problem is not None:
            row = _mismatch_row(row, problem)
            arrays.pop(row["name"])
        rows.append(row)
    refs = {name: store.write_items_ref(release, name, arr) for name, arr in arrays.items()}
    run = dict(run_report)
    run["rows"] = [dict(r, items=refs.get(r["name"])) for r in rows]
    validate_report(run)
    try:
        store.write_run(release, run_id, run)
    except StoreExistsError:
        # a retried publish (same run id) whose first attempt wrote the run file, then failed
        if store.read_run(release, run_id) != run:
            raise

    prev = previous if previous is not None else store.baseline_release(release)
    prev_report = store.read_report(prev) if prev is not None else None
    made: dict[str, dict] = {}  # digest of a report's bytes -> the comparison made for it

    def compare_with(report: dict, data: bytes) -> dict:
        assert prev is not None and prev_report is not None
        cmp = compare_reports(
            prev_report,
            report,
            store.items_loader(prev, prev_report),
            store.items_loader(release, report),
            seed=seed,
        )
        store.write_compare_version(release, data, cmp)
        made[_digest(data)] = cmp
        return cmp

    def merge(old: dict | None) -> dict:
        merged = merge_report(old, run, order)
        validate_report(merged)
        if prev_report is not None:  # the comparison is stored before the report is visible
            compare_with(merged, _json_bytes(merged))
        return merged

    merged = store.update_report(release, merge)
    cmp = None
    if prev_report is not None:
        key = store.report_key(release)
        for _ in range(CAS_ATTEMPTS):
            seen = store.get_bytes(key, max_bytes=MAX_JSON_BYTES)
            merged = check_report(store._parse_json(key, seen, "report"), store.where(key), release)
            cmp = made.get(_digest(seen))
            if cmp is None:  # another run's report, put by a writer that stored no comparison
                try:
                    version = store.compare_version_key(release, seen)
                    cmp = store._checked_compare(version, store.get_json(version, "comparison"))
                except StoreKeyError:
                    cmp = compare_with(merged, seen)
            store.write_compare(release, cmp)
            if store.get_bytes(key, max_bytes=MAX_JSON_BYTES) == seen:  # still the last report
                break
    return {"run_id": run_id, "report": merged, "compare": cmp, "store": store.uri}
