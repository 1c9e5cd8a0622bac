"""Error bases shared by modules that must not import each other.

:class:`StorageError` is the base of :class:`tinyllm.store.StoreError`. :mod:`tinyllm.compare`
reads per-item scores through loaders and catches a loader's ``StorageError`` without importing
the store that raised it (the store sits above compare).
"""

from __future__ import annotations


class StorageError(Exception):
    """A document or array cannot be read from, or written to, where it is kept: a missing key,
    a malformed or refused document, a refused write. The message names the place.

    It deliberately does not derive from ``OSError``: a missing release is not a transient
    failure worth retrying; real I/O failures still surface as ``OSError``.
    """
