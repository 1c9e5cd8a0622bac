"""Key names: one segment (a release, an entry, a run id), a relative key, run ids.

A segment is ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``: a leading dot is refused so that temporary
files (``.report.json.x1y2.tmp``) are never mistaken for keys, and ``..`` never climbs out of
the store. A run id (:func:`new_run_id`) sorts by time: ``20261129T180000Z-3fa2c1``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime

from tinyllm.store.errors import StoreError

# One key segment: a release, an entry name, a run id, a file name. A leading dot is refused so
# that temporary files (".report.json.x1y2.tmp") are never mistaken for keys, and ".." never
# climbs out of the store.
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(value: str, what: str) -> str:
    """A release / entry / run id used as one key segment: ``[A-Za-z0-9][A-Za-z0-9._-]*``."""
    if not isinstance(value, str) or not _SEGMENT.match(value):
        raise StoreError(
            f"{what}: expected 1-128 characters of [A-Za-z0-9._-] not starting with '.', "
            f"'-' or '_', got {value!r}"
        )
    return value


def check_key(key: str) -> str:
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


def digest(data: bytes) -> str:
    """The first 16 hex digits of the sha256 of ``data``: the hash in content-addressed names."""
    return hashlib.sha256(data).hexdigest()[:16]


def new_run_id(now: datetime | None = None) -> str:
    """A run id that sorts by time: ``20261129T180000Z-3fa2c1`` (UTC second + 6 random hex)."""
    t = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{t:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


# a run id that sorts by time starts with the UTC second it was made (new_run_id adds 6 hex digits)
_RUN_TIME = re.compile(r"^(\d{8}T\d{6}Z)")


def run_id_time(run_id: str) -> datetime | None:
    """The UTC second a run id starts with (``20261129T180000Z-3fa2c1``: 2026-11-29 18:00:00),
    or None for a run id that does not start with one (including digits that are not a real
    time, such as month 13)."""
    m = _RUN_TIME.match(run_id)
    if m is None:
        return None
    try:
        return datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def history_order(release: str, created_at: datetime | None, run_ids: list[str]) -> tuple:
    """The sort key of a release folder in the history (oldest first).

    A readable release (``created_at`` known) goes by ``created_at``, then name; an unreadable
    one by the time of its first run id (in sorted order) that starts with one
    (:func:`run_id_time`), else after all the others, by name. :meth:`Store.history_entries`
    and the dashboard order by it.
    """
    if created_at is not None:
        return (0, created_at.timestamp(), release)
    for run_id in sorted(run_ids):
        t = run_id_time(run_id)
        if t is not None:
            return (0, t.timestamp(), release)
    return (1, 0.0, release)
