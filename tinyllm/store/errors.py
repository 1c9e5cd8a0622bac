"""The store's errors, and :func:`naming`, which adds the store and key to any other error.

Every error of the store is a :class:`StoreError` (a :class:`tinyllm.errors.StorageError`) whose
message names the store and the key. They deliberately do not derive from ``OSError``: a
missing release is not a transient failure worth retrying. Real I/O failures (a full disk, a
dropped connection) still surface as ``OSError`` / botocore errors, with a note naming the key.
"""

from __future__ import annotations

import contextlib

from tinyllm.errors import StorageError


class StoreError(StorageError):
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


@contextlib.contextmanager
def naming(where: str):
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
