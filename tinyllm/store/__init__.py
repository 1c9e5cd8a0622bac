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

Two backends behind one small interface, :class:`Store` (:mod:`tinyllm.store.base`):
``put_bytes`` / ``get_bytes`` / ``exists`` / ``list`` (plus ``put_json`` / ``get_json``), and the
domain helpers on top of them (``write_run``, ``write_items``, ``write_report``,
``write_compare``, ``releases``, ...). Publishing a run (items, run file, comparison, merged
report, in that order) is :func:`tinyllm.publish.publish_run`, above the store and compare.

Modules: :mod:`~tinyllm.store.errors` (the errors), :mod:`~tinyllm.store.keys` (key names, run
ids, the history order), :mod:`~tinyllm.store.documents` (JSON and ``.npy`` bytes, the report
check), :mod:`~tinyllm.store.base`, :mod:`~tinyllm.store.local`, :mod:`~tinyllm.store.s3`.

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

import os
from collections.abc import Iterable
from typing import Any

from tinyllm.store.base import CAS_ATTEMPTS, HistoryEntry, Store
from tinyllm.store.documents import (
    MAX_JSON_BYTES,
    MAX_OBJECT_BYTES,
    check_report,
    parse_created_at,
)
from tinyllm.store.errors import (
    StoreConflictError,
    StoreError,
    StoreExistsError,
    StoreKeyError,
    StoreUnreadableError,
)
from tinyllm.store.keys import history_order, new_run_id, run_id_time
from tinyllm.store.local import DEFAULT_STORE, LocalStore
from tinyllm.store.s3 import CAS_BACKOFF_S, S3Store, parse_s3_uri

__all__ = [
    "CAS_ATTEMPTS",
    "CAS_BACKOFF_S",
    "DEFAULT_STORE",
    "MAX_JSON_BYTES",
    "MAX_OBJECT_BYTES",
    "HistoryEntry",
    "LocalStore",
    "S3Store",
    "Store",
    "StoreConflictError",
    "StoreError",
    "StoreExistsError",
    "StoreKeyError",
    "StoreUnreadableError",
    "check_report",
    "history_order",
    "iter_reports",
    "new_run_id",
    "open_store",
    "parse_created_at",
    "run_id_time",
]


def open_store(uri: str | os.PathLike[str] = DEFAULT_STORE, *, client: Any = None) -> Store:
    """Open the report store at ``uri``: a local folder path, or ``s3://bucket/prefix``.

    A local folder is created on the first write. For S3, ``client`` (a boto3 S3 client) may be
    given; otherwise ``boto3.client("s3")`` reads endpoint and credentials from the environment.
    Any other scheme (``gs://``, ``file://``) is refused.
    """
    text = os.fspath(uri)
    if text.startswith("s3://"):
        bucket, prefix = parse_s3_uri(text)
        return S3Store(bucket, prefix, client=client)
    if "://" in text:
        raise StoreError(f"store: expected a local folder or s3://bucket/prefix, got {text!r}")
    return LocalStore(text)


def iter_reports(store: Store, releases: Iterable[str] | None = None) -> Iterable[tuple[str, dict]]:
    """``(release, report)`` for ``releases`` (default: the whole history, oldest first)."""
    for name in store.releases() if releases is None else releases:
        yield name, store.read_report(name)
