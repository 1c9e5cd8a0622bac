"""The stored documents as bytes: JSON written strictly, reports checked, ``.npy`` checked.

* :func:`dump_json` / :func:`json_bytes`: strict UTF-8 JSON (NaN refused), the exact bytes the
  store keeps (a report's bytes name its comparison, ``compares/<h>.json``);
* :func:`check_report`: what the store relies on in a report (``created_at``, unique row names);
* :func:`npy_bytes` / :func:`load_npy`: per-item scores as float64 ``.npy``, never unpickled, the
  header checked against the size before anything is allocated;
* :func:`units_npy_bytes` / :func:`load_units_npy`: the unit id of each item as int64 ``.npy``,
  checked the same way and against the number of items.
"""

from __future__ import annotations

import codecs
import io
import json
from datetime import UTC, datetime
from typing import Any, BinaryIO

import numpy as np

from tinyllm.store.errors import StoreError, StoreUnreadableError
from tinyllm.store.keys import check_name

MAX_OBJECT_BYTES = 1 << 30
"""The largest stored object a reader takes (1 GiB: the per-item scores of 134 million items);
a larger one is refused before it is read (:class:`StoreUnreadableError`)."""

MAX_JSON_BYTES = 64 << 20
"""The largest stored JSON document (a report, a run, a comparison) a reader takes: 64 MiB."""


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
        name = check_name(row["name"], f"{where}: rows[{i}].name")
        if name in seen:
            raise StoreError(f"{where}: expected unique row names, got {name!r} twice")
        seen.add(name)
    if release is not None and "release" in report and report["release"] != release:
        raise StoreError(
            f"{where}: expected a report of release {release!r}, got release {report['release']!r}"
        )
    return report


def dump_json(obj: Any, f: BinaryIO) -> None:
    """Stream ``obj`` as strict UTF-8 JSON (NaN and infinity refused) into the binary file ``f``."""
    writer = codecs.getwriter("utf-8")(f)
    json.dump(obj, writer, indent=2, ensure_ascii=False, allow_nan=False)
    writer.write("\n")


def json_bytes(obj: Any) -> bytes:
    """The exact bytes :meth:`Store.put_json` and ``update_json`` store for ``obj``."""
    buf = io.BytesIO()
    dump_json(obj, buf)
    return buf.getvalue()


def npy_bytes(where: str, array: Any) -> bytes:
    """``array`` (1-d numeric) as the bytes of a float64 ``.npy``; ``where`` names it in errors."""
    a = np.asarray(array)
    if a.ndim != 1 or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise StoreError(
            f"{where}: expected a 1-d numeric array of per-item scores, got "
            f"dtype {a.dtype} shape {a.shape}"
        )
    buf = io.BytesIO()
    np.save(buf, a.astype(np.float64, copy=False), allow_pickle=False)
    return buf.getvalue()


def units_npy_bytes(where: str, array: Any) -> bytes:
    """``array`` (1-d integer unit ids) as the bytes of an int64 ``.npy``; ``where`` names it."""
    a = np.asarray(array)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise StoreError(
            f"{where}: expected a 1-d integer array of unit ids, got dtype {a.dtype} "
            f"shape {a.shape}"
        )
    buf = io.BytesIO()
    np.save(buf, a.astype(np.int64, copy=False), allow_pickle=False)
    return buf.getvalue()


def load_units_npy(where: str, data: bytes, n_items: int | None = None) -> np.ndarray:
    """The unit ids in ``data``, the bytes of a 1-d int64 ``.npy`` (either byte order), checked
    as :func:`load_npy` checks per-item scores (header first, nothing unpickled) and, with
    ``n_items``, to hold one id per item; ``where`` names it in every error."""
    a = _load_1d(where, data, "i", "unit ids", "int64")
    if n_items is not None and a.size != n_items:
        raise StoreUnreadableError(
            f"{where}: expected one unit id per item ({n_items}), got {a.size} unit ids"
        )
    return a.astype(np.int64)


def load_npy(where: str, data: bytes) -> np.ndarray:
    """The per-item scores in ``data``, the bytes of a 1-d float64 ``.npy`` (either byte order),
    checked before anything is allocated (see :meth:`Store.read_items`); ``where`` names it."""
    return _load_1d(where, data, "f", "per-item scores", "float64").astype(np.float64)


def _load_1d(where: str, data: bytes, kind: str, what: str, dtype_name: str) -> np.ndarray:
    """A 1-d ``.npy`` of 8-byte values of numpy ``kind`` ("f" or "i") in ``data``."""
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
            f"{where}: expected a 1-d array of {what}, got shape {getattr(a, 'shape', None)}"
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
        raise StoreUnreadableError(f"{where}: expected a 1-d array of {what}, got shape {shape}")
    if dtype.kind != kind or dtype.itemsize != 8:
        raise StoreUnreadableError(f"{where}: expected {what} as {dtype_name}, got dtype {dtype}")
    start, n = buf.tell(), shape[0]
    if n * 8 != len(data) - start:  # checked before anything of that size is allocated
        raise StoreUnreadableError(
            f"{where}: malformed items: expected {n} {dtype_name} values ({n * 8} bytes) after "
            f"the header, as its shape {shape} says, got {len(data) - start} bytes"
        )
    return np.frombuffer(data, dtype=dtype, count=n, offset=start)
