"""The report store: a local folder (the default, ``./evalstore``) or ``s3://bucket/prefix``.

Layout (formats/store.md has the full description)::

    releases/<release>/report.json         the release's merged view (one row per entry)
    releases/<release>/items/<entry>.npy   per-item scores of an entry (float64, np.save)
    releases/<release>/runs/<run-id>.json  every run's raw report, written once, never replaced
    releases/<release>/compare.json        the comparison with the previous release

History is the listing of ``releases/``, ordered by each report's ``created_at``.

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
:class:`StoreExistsError`), and name the store and the key. They deliberately do not derive from
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

DEFAULT_STORE = "./evalstore"

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

    def get_bytes(self, key: str) -> bytes:
        """The bytes at ``key``; :class:`StoreKeyError` when there is none."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        """Whether an object is stored at ``key``."""
        raise NotImplementedError

    def list(self, prefix: str = "") -> list[str]:
        """Every key that starts with ``prefix`` (a plain string prefix), sorted."""
        raise NotImplementedError

    def put_json(self, key: str, obj: Any, *, overwrite: bool = True) -> None:
        """Write ``obj`` as strict JSON (NaN refused) at ``key``, atomically."""
        buf = io.BytesIO()
        _dump_json(obj, buf)
        self.put_bytes(key, buf.getvalue(), overwrite=overwrite)

    def get_json(self, key: str, what: str = "JSON") -> Any:
        """Parse the JSON at ``key``; a malformed file is a :class:`StoreError` naming the key."""
        data = self.get_bytes(key)
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise StoreError(
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
        """The raw report of one run."""
        key = self.run_key(release, run_id)
        return check_report(self._get_json_or_missing(key, release, "run"), self.where(key))

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
        """An entry's per-item scores: ``np.load(allow_pickle=False)`` of the stored bytes.

        ``ref``: the row's ``items`` reference (``items/<file>.npy``); without it, the fixed
        name ``items/<entry>.npy``.
        """
        key = self.items_key(release, name) if ref is None else self.ref_key(release, ref)
        data = self.get_bytes(key)
        try:
            a = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise StoreError(
                f"{self.where(key)}: malformed items: expected a .npy array, got {e}"
            ) from None
        if not isinstance(a, np.ndarray) or a.ndim != 1:
            raise StoreError(
                f"{self.where(key)}: expected a 1-d array of per-item scores, got shape "
                f"{getattr(a, 'shape', None)}"
            )
        return a

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
        """The release's merged report; a missing release or malformed file names the key."""
        key = self.report_key(release)
        return check_report(self._get_json_or_missing(key, release, "report"), self.where(key))

    def has_report(self, release: str) -> bool:
        return self.exists(self.report_key(release))

    def write_compare(self, release: str, cmp: dict) -> str:
        """Write ``releases/<release>/compare.json`` (validated against compare.schema.json)."""
        from tinyllm.compare import validate_compare

        key = self.compare_key(release)
        try:
            validate_compare(cmp)
        except ValueError as e:
            raise StoreError(f"{self.where(key)}: {e}") from None
        self.put_json(key, cmp)
        return key

    def read_compare(self, release: str) -> dict:
        """The stored comparison of a release with its previous one."""
        key = self.compare_key(release)
        cmp = self._get_json_or_missing(key, release, "comparison")
        if not isinstance(cmp, dict):
            raise StoreError(f"{self.where(key)}: expected a JSON object, got {type(cmp).__name__}")
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

    def history(self, *, skip_unreadable: bool = False) -> list[tuple[str, datetime]]:
        """``(release, created_at)`` of every release with a report, oldest first.

        Order: ``created_at``, then the release name for equal times. A release folder without
        a ``report.json`` (a run that never finished) is not part of the history. A report that
        cannot be read (malformed JSON, no ``created_at``: a :class:`StoreError`) raises, or with
        ``skip_unreadable`` is left out with a warning naming it; errors of the backend itself
        (an unreachable endpoint) always raise.
        """
        out = []
        for name in self._release_names():
            key = self.report_key(name)
            try:
                created = parse_created_at(self.read_report(name)["created_at"], self.where(key))
            except StoreError as e:
                if not skip_unreadable:
                    raise
                warnings.warn(f"left out of the history: {e}", stacklevel=2)
                continue
            out.append((name, created))
        out.sort(key=lambda t: (t[1], t[0]))
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

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            with _naming(self.where(key)):
                return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise StoreKeyError(f"{self.where(key)}: no such key") from None
        except IsADirectoryError:
            raise StoreError(f"{self.where(key)}: expected a file, got a folder") from None

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

    def get_bytes(self, key: str) -> bytes:

        return self._get(key)[0]

    def _get(self, key: str) -> tuple[bytes, str]:
        """The bytes at ``key`` and their ETag."""
        from botocore.exceptions import ClientError

        try:
            with _naming(self.where(key)):
                obj = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
                return obj["Body"].read(), obj["ETag"]
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
                data, etag = self._get(key)
                old = json.loads(data.decode("utf-8"))
                cond = {"IfMatch": etag}
            except StoreKeyError as e:
                if "no such bucket" in str(e):
                    raise
                old, cond = None, {"IfNoneMatch": "*"}
            except (UnicodeDecodeError, ValueError) as e:
                raise StoreError(
                    f"{self.where(key)}: malformed {what}: expected JSON, got {e}"
                ) from None
            new = update(old)
            buf = io.BytesIO()
            _dump_json(new, buf)
            try:
                with _naming(self.where(key)):
                    self.client.put_object(Bucket=self.bucket, Key=k, Body=buf.getvalue(), **cond)
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

    The release name (a key segment), the store (opened, reachable and writable: a probe is
    written and deleted), and ``previous`` (when given, a release the store has). A bad
    argument is refused here instead of after every entry was scored and the release written.
    """
    _check_name(release, "release")
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


def iter_reports(store: Store, releases: Iterable[str] | None = None) -> Iterable[tuple[str, dict]]:
    """``(release, report)`` for ``releases`` (default: the whole history, oldest first)."""
    for name in store.releases() if releases is None else releases:
        yield name, store.read_report(name)


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
    """Publish one run of a release: items, the run file, the merged report, the comparison.

    1. each entry's per-item scores under a content-addressed name (:meth:`Store.write_items_ref`),
       and each row's ``items`` set to that name (a row without scores gets ``null``);
    2. the run's raw report at ``runs/<run-id>.json`` (never overwritten);
    3. the release's ``report.json`` merged with the run's rows as one compare-and-swap
       (:meth:`Store.update_report`): concurrent runs of other entries keep their rows;
    4. ``compare.json`` against ``previous`` (default: the release before this one), computed
       from the report as it now is, and recomputed if another run changed the report meanwhile,
       so the last comparison written is always the one of the last report.

    Every report is validated against formats/eval-results.schema.json before it is written.
    Returns ``{"run_id", "report", "compare", "store"}`` (``report``: the merged report the
    comparison was made on).
    """
    from tinyllm.compare import compare_reports
    from tinyllm.report import validate_report

    _check_name(release, "release")
    run_id = run_id or new_run_id()
    refs = {name: store.write_items_ref(release, name, arr) for name, arr in items.items()}
    run = dict(run_report)
    run["rows"] = [dict(r, items=refs.get(r["name"])) for r in run_report["rows"]]
    validate_report(run)
    try:
        store.write_run(release, run_id, run)
    except StoreExistsError:
        # a retried publish (same run id) whose first attempt wrote the run file, then failed
        if store.read_run(release, run_id) != run:
            raise

    def merge(old: dict | None) -> dict:
        merged = merge_report(old, run, order)
        validate_report(merged)
        return merged

    merged = store.update_report(release, merge)
    prev = previous or store.previous_release(release)
    cmp = None
    if prev is not None:
        key = store.report_key(release)
        prev_report = store.read_report(prev)
        for _ in range(CAS_ATTEMPTS):
            seen = store.get_bytes(key)
            merged = check_report(json.loads(seen.decode("utf-8")), store.where(key), release)
            cmp = compare_reports(
                prev_report,
                merged,
                store.items_loader(prev, prev_report),
                store.items_loader(release, merged),
                seed=seed,
            )
            store.write_compare(release, cmp)
            if store.get_bytes(key) == seen:  # nobody merged in between: this compare is current
                break
    return {"run_id": run_id, "report": merged, "compare": cmp, "store": store.uri}
