"""The store interface, :class:`Store`: four byte-level operations and the domain on top.

Backends (:mod:`tinyllm.store.local`, :mod:`tinyllm.store.s3`) implement ``put_bytes`` /
``get_bytes`` / ``exists`` / ``list``, the compare-and-swap ``update_json`` and
``check_writable``; everything else is written once here: the keys of the layout, runs (written
once, never replaced), per-item scores (content-addressed), the release's report (merged by
compare-and-swap), comparisons (one per report version, then ``compare.json``), the validated
readers (report and run: eval-results.schema.json as a reader needs it; comparison:
compare.schema.json) and the history.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from tinyllm.compare import parse_compare, validate_compare
from tinyllm.comparison import Comparison
from tinyllm.report import ReportSchemaError, StoredReport, check_stored_report, stored_report
from tinyllm.store.documents import (
    MAX_JSON_BYTES,
    MAX_OBJECT_BYTES,
    check_report,
    json_bytes,
    load_npy,
    load_units_npy,
    npy_bytes,
    parse_created_at,
    units_npy_bytes,
)
from tinyllm.store.errors import (
    StoreError,
    StoreExistsError,
    StoreKeyError,
    StoreUnreadableError,
)
from tinyllm.store.keys import check_key, check_name, digest, history_order

CAS_ATTEMPTS = 20
"""How many times :meth:`S3Store.update_json` re-reads and retries after a lost race (412/409)."""


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
        self.put_bytes(key, json_bytes(obj), overwrite=overwrite)

    def get_json(self, key: str, what: str = "JSON") -> Any:
        """Parse the JSON at ``key`` (at most :data:`MAX_JSON_BYTES`); a malformed file is a
        :class:`StoreUnreadableError` naming the key."""
        return self.parse_json(key, self.get_bytes(key, max_bytes=MAX_JSON_BYTES), what)

    def parse_json(self, key: str, data: bytes, what: str = "JSON") -> Any:
        """Parse ``data``, the bytes read at ``key``, as JSON; a malformed document is a
        :class:`StoreUnreadableError` naming the key and ``what`` it is."""
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
        return f"releases/{check_name(release, 'release')}/report.json"

    @staticmethod
    def compare_key(release: str) -> str:
        return f"releases/{check_name(release, 'release')}/compare.json"

    @staticmethod
    def compare_version_key(release: str, report_bytes: bytes) -> str:
        """``releases/<release>/compares/<h>.json``: the comparison made for the report.json
        whose bytes are ``report_bytes`` (``h``: the first 16 hex digits of their sha256)."""
        return f"releases/{check_name(release, 'release')}/compares/{digest(report_bytes)}.json"

    @staticmethod
    def run_key(release: str, run_id: str) -> str:
        return f"releases/{check_name(release, 'release')}/runs/{check_name(run_id, 'run_id')}.json"

    @staticmethod
    def items_key(release: str, name: str) -> str:
        return f"releases/{check_name(release, 'release')}/items/{check_name(name, 'entry')}.npy"

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
        prefix = f"releases/{check_name(release, 'release')}/runs/"
        return [k[len(prefix) : -len(".json")] for k in self.list(prefix) if k.endswith(".json")]

    # --- per-item scores ---------------------------------------------------------------------

    @staticmethod
    def ref_key(release: str, ref: str) -> str:
        """The key of a row's ``items`` reference (``items/<file>.npy``) in ``release``."""
        parts = ref.split("/") if isinstance(ref, str) else []
        if len(parts) != 2 or parts[0] != "items" or not parts[1].endswith(".npy"):
            raise StoreError(f"items: expected a reference like 'items/<name>.npy', got {ref!r}")
        return f"releases/{check_name(release, 'release')}/{check_key(ref)}"

    def write_items(self, release: str, name: str, array: Any) -> str:
        """Store an entry's per-item scores as a float64 ``.npy`` at the fixed name
        ``items/<entry>.npy``; return the key.

        ``array``: 1-d numeric (per-token NLLs in nats for LM rows, 0/1 for accuracy rows).
        The fixed name is the layout of stores written before content-addressed items (and of
        callers that write one release with one writer). The flow uses
        :meth:`write_items_ref`, whose name cannot be replaced under a row by another run.
        """
        key = self.items_key(release, name)
        self.put_bytes(key, npy_bytes(self.where(key), array))
        return key

    def write_items_ref(self, release: str, name: str, array: Any) -> str:
        """Store per-item scores under a content-addressed name; return the row's reference.

        The name is ``items/<entry>-<h>.npy`` with ``h`` the first 16 hex digits of the sha256
        of the ``.npy`` bytes. The same scores always get the same name and different scores a
        different one, so a row that says ``"items": "items/gpt-1f2e....npy"`` always reads the
        scores it was computed from, whatever other runs write at the same moment.
        """
        check_name(name, "entry")
        data = npy_bytes(self.where(self.items_key(release, name)), array)
        ref = f"items/{name}-{digest(data)}.npy"
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
        return load_npy(self.where(key), self.get_bytes(key))

    def write_units_ref(self, release: str, name: str, array: Any) -> str:
        """Store the unit id of each of an entry's items (1-d integer, one per item of its
        per-item scores) as an int64 ``.npy`` under a content-addressed name; return the row's
        ``units`` reference, ``items/<entry>.units-<h>.npy`` (the store entry
        ``<entry>.units``: no entry name has a dot)."""
        check_name(name, "entry")
        data = units_npy_bytes(self.where(self.items_key(release, name)), array)
        ref = f"items/{name}.units-{digest(data)}.npy"
        self.put_bytes(self.ref_key(release, ref), data)  # same name, same bytes: idempotent
        return ref

    def read_units(self, release: str, ref: str, n_items: int | None = None) -> np.ndarray:
        """The unit ids a row's ``units`` reference names: a 1-d int64 ``.npy`` (at most
        :data:`MAX_OBJECT_BYTES`), its header checked before anything is allocated and nothing
        unpickled, as :meth:`read_items` reads per-item scores; with ``n_items`` it must hold
        one id per item. Any bad file is a :class:`StoreUnreadableError` naming the key."""
        key = self.ref_key(release, ref)
        return load_units_npy(self.where(key), self.get_bytes(key), n_items)

    def units_loader(
        self, release: str, report: StoredReport | None = None
    ) -> Callable[[str], np.ndarray | None]:
        """``name -> unit ids`` of ``release`` (:meth:`read_units`), None for a row without a
        ``units`` reference: the units loader :func:`compare_reports` takes beside
        :meth:`items_loader`. ``report``: the release's report when the caller has it (else
        read on the first call)."""
        check_name(release, "release")
        refs: dict[str, str | None] | None = None

        def load(name: str) -> np.ndarray | None:
            nonlocal refs
            if refs is None:
                refs = self._row_refs(release, report, "units")
            ref = refs.get(name)
            return None if ref is None else self.read_units(release, ref)

        return load

    def items_loader(
        self, release: str, report: StoredReport | None = None
    ) -> Callable[[str], np.ndarray]:
        """``name -> per-item scores`` of ``release``: the loader :func:`compare_reports` takes.

        Each name is looked up in the rows of ``report`` (default: the release's stored report,
        read on first use) and read from the file its ``items`` reference names; a name with no
        row (or no reference) falls back to the fixed name ``items/<entry>.npy``.
        """
        check_name(release, "release")
        refs: dict[str, str | None] | None = None

        def load(name: str) -> np.ndarray:
            nonlocal refs
            if refs is None:
                refs = self._row_refs(release, report, "items")
            return self.read_items(release, name, refs.get(name))

        return load

    def _row_refs(
        self, release: str, report: StoredReport | None, field: str
    ) -> dict[str, str | None]:
        """Row name -> its ``field`` reference (``items`` or ``units``) in ``report`` (None: the
        release's stored report, when it has one)."""
        if report is None and self.has_report(release):
            report = self.read_stored_report(release)
        return {r.name: getattr(r, field) for r in report.rows} if report is not None else {}

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
        (:func:`check_report`), or not matching eval-results.schema.json
        (:func:`tinyllm.report.check_stored_report`).
        """
        key = self.report_key(release)
        return self._checked_report(key, self._get_json_or_missing(key, release, "report"))

    def read_stored_report(self, release: str) -> StoredReport:
        """The release's report as :meth:`read_report` reads it (validated, the same errors), as
        a :class:`tinyllm.report.StoredReport`: what history, the dashboard, the sweep and the
        exports read. A document that passed the checks always fits; one that does not is a
        :class:`StoreUnreadableError` naming the key."""
        doc = self.read_report(release)
        try:
            return stored_report(doc)
        except ValueError as e:
            raise StoreUnreadableError(f"{self.where(self.report_key(release))}: {e}") from None

    def _checked_report(self, key: str, doc: Any) -> dict:
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

    def write_compare(self, release: str, cmp: Comparison) -> str:
        """Write ``releases/<release>/compare.json``: ``cmp``'s document, validated against
        compare.schema.json."""
        return self._put_compare(self.compare_key(release), cmp)

    def write_compare_version(self, release: str, report_bytes: bytes, cmp: Comparison) -> str:
        """Write the comparison made for the report.json whose bytes are ``report_bytes`` at
        :meth:`compare_version_key` (validated); return the key. :func:`publish_run` writes it
        before the report, so every report it makes visible has its comparison already."""
        return self._put_compare(self.compare_version_key(release, report_bytes), cmp)

    def _put_compare(self, key: str, cmp: Comparison) -> str:
        if not isinstance(cmp, Comparison):
            raise StoreError(f"{self.where(key)}: expected a Comparison, got {type(cmp).__name__}")
        doc = cmp.to_json()
        try:
            validate_compare(doc, self.where(key))
        except ValueError as e:
            raise StoreError(str(e)) from None
        self.put_json(key, doc)
        return key

    def read_compare(self, release: str) -> Comparison:
        """The comparison of a release's report with its previous release, validated.

        The comparison made for the report.json as it is now (``compares/<h>.json``, ``h`` the
        hash of its bytes) when there is one, else ``compare.json`` (stores written before
        comparisons were kept per report, and comparisons written with :meth:`write_compare`
        alone). A missing one is a :class:`StoreKeyError`; one that is not a JSON object with a
        ``rows`` list matching compare.schema.json is a :class:`StoreUnreadableError`
        naming the key and what was expected (:func:`tinyllm.compare.parse_compare`).
        """
        key = self.compare_key(release)
        try:
            report_bytes = self.get_bytes(self.report_key(release), max_bytes=MAX_JSON_BYTES)
        except (StoreKeyError, StoreUnreadableError):
            report_bytes = None  # no usable report: only compare.json can say anything
        if report_bytes is not None:
            try:
                return self.read_compare_version(release, report_bytes)
            except StoreKeyError:
                pass
        return self._checked_compare(key, self._get_json_or_missing(key, release, "comparison"))

    def read_compare_version(self, release: str, report_bytes: bytes) -> Comparison:
        """The comparison made for the report.json whose bytes are ``report_bytes``
        (:meth:`compare_version_key`), validated as in :meth:`read_compare`; a
        :class:`StoreKeyError` when none was stored."""
        version = self.compare_version_key(release, report_bytes)
        return self._checked_compare(version, self.get_json(version, "comparison"))

    def _checked_compare(self, key: str, cmp: Any) -> Comparison:
        where = self.where(key)
        if not isinstance(cmp, dict):
            raise StoreUnreadableError(f"{where}: expected a JSON object, got {type(cmp).__name__}")
        if not isinstance(cmp.get("rows"), list):
            raise StoreUnreadableError(
                f"{where}: expected 'rows' to be a list, got {type(cmp.get('rows')).__name__}"
            )
        try:
            return parse_compare(cmp, where)
        except ValueError as e:
            raise StoreUnreadableError(str(e)) from None

    def write_site_file(self, key: str, data: bytes, content_type: str) -> str:
        """Write one file of the static dashboard (``dashboard/...`` only; never ``releases/``).

        ``content_type`` is kept where the backend has one (S3), so static hosting serves it.
        """
        if not check_key(key).startswith("dashboard/"):
            raise StoreError(f"{self.where(key)}: expected a key under dashboard/, got {key!r}")
        self.put_bytes(key, data)
        return key

    # --- history -----------------------------------------------------------------------------

    def release_names(self) -> list[str]:
        """The names of the release folders that hold a ``report.json``, sorted (unchecked:
        for messages that list what the store has)."""
        names = []
        for key in self.list("releases/"):
            parts = key.split("/")
            if len(parts) == 3 and parts[2] == "report.json":
                names.append(parts[1])
        return names

    def report_folders(self, keys: Iterable[str]) -> set[str]:
        """The release folders whose ``report.json`` is a folder, not a file: a key under
        ``releases/<release>/report.json/`` in ``keys`` (the listing of ``releases/``; on S3 the
        only way a "folder" exists). A local store adds empty folders (:class:`LocalStore`)."""
        folders = set()
        for key in keys:
            parts = key.split("/")
            if len(parts) > 3 and parts[0] == "releases" and parts[2] == "report.json":
                folders.add(parts[1])
        return folders

    def history_entries(self) -> list[HistoryEntry]:
        """Every release folder with a ``report.json``, readable or not; never raises for a bad
        stored file (only for the backend itself: an unreachable endpoint, a refused listing).

        A readable release is ``HistoryEntry(release, created_at, error=None)``; one whose report
        cannot be used (:meth:`read_report` raises a :class:`StoreError`: malformed, not matching
        its schema, a FIFO, a folder in place of the file (:meth:`report_folders`), or a folder
        name that is not a valid release name such as ``v1 copy``) is
        ``HistoryEntry(release, None, error="<key>: <why>")``. Order: readable
        releases by ``created_at``, then name (the history); each unreadable one in its place by
        the time in its first run id (``runs/YYYYMMDDTHHMMSSZ-xxxxxx.json``) when it has one,
        else after all the others, by name. A release folder without a ``report.json`` (a run
        that never finished) is not listed.
        """
        keys = self.list("releases/")
        reports: set[str] = set(self.report_folders(keys))
        run_ids: dict[str, list[str]] = {}
        for key in keys:
            parts = key.split("/")
            if len(parts) == 3 and parts[2] == "report.json":
                reports.add(parts[1])
            elif len(parts) == 4 and parts[2] == "runs" and parts[3].endswith(".json"):
                run_ids.setdefault(parts[1], []).append(parts[3][: -len(".json")])
        placed = []
        for name in sorted(reports):
            where = self.where(f"releases/{name}/report.json")
            try:
                check_name(name, f"{where}: release folder")
                created = parse_created_at(self.read_report(name)["created_at"], where)
            except StoreKeyError:
                continue  # deleted between the listing and the read: not there any more
            except StoreError as e:
                entry = HistoryEntry(name, None, str(e))
                placed.append((history_order(name, None, run_ids.get(name, [])), entry))
                continue
            placed.append((history_order(name, created, []), HistoryEntry(name, created)))
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
        check_name(release, "release")
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
        check_name(release, "release")
        names = [n for n, _ in self.history(skip_unreadable=True)]
        others = [n for n in names if n != release]
        if release not in names:
            return others[-1] if others else None
        try:
            prev = self.read_compare(release).previous
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
            if self.list(key + "/"):  # S3 keys under "<key>/" (a local folder: get_bytes says it)
                raise StoreUnreadableError(
                    f"{self.where(key)}: expected a file, got a folder"
                ) from None
            if what == "report" or not self.has_report(release):
                known = ", ".join(self.release_names()) or "none"
                raise StoreKeyError(
                    f"{self.where(key)}: no such {what}: release {release!r} is not in the store "
                    f"(releases: {known})"
                ) from None
            raise
