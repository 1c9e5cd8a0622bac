"""A store in a local folder (the default, ``./evalstore``).

Every write goes to a temporary file in the same folder, is fsynced and moved into place with
:func:`os.replace`, so a reader sees the old file or the new one, never half of one. JSON is
streamed into the temporary file, so a serialisation error half way (a NaN in the last row,
say) leaves the old report untouched. Reads go through :func:`tinyllm.safeio.read_regular`: a
FIFO, a device or a folder in place of a file is refused at once, never waited on.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from tinyllm import safeio
from tinyllm.store.base import Store
from tinyllm.store.documents import MAX_OBJECT_BYTES, dump_json
from tinyllm.store.errors import (
    StoreError,
    StoreExistsError,
    StoreKeyError,
    StoreUnreadableError,
    naming,
)
from tinyllm.store.keys import check_key

DEFAULT_STORE = "./evalstore"


class LocalStore(Store):
    """A store in a local folder; every write is a temp file + fsync + :func:`os.replace`."""

    def __init__(self, root: str | os.PathLike[str] = DEFAULT_STORE) -> None:
        self.root = Path(root)
        self.uri = str(self.root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"store: expected a folder, got the file {self.root}")

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def _folder_of(self, key: str) -> Path:
        """The folder of ``key``'s file, made folder by folder below the root
        (:func:`tinyllm.safeio.make_dirs`): a symbolic link or a file on the way
        (``releases/r1`` a link to another folder, ``releases/r1/runs`` a file) is a
        :class:`StoreError` naming it, so nothing is ever written through a link out of the store
        and a misplaced file is not an OSError retried as transient. The root itself may be a
        link (``./evalstore`` -> a data disk)."""
        parts = check_key(key).split("/")[:-1]
        if not parts:
            self.root.mkdir(parents=True, exist_ok=True)
            return self.root
        if safeio.path_kind(self.root) is None:
            self.root.mkdir(parents=True, exist_ok=True)
        try:
            return safeio.make_dirs(self.root / parts[0], parts[1:])
        except safeio.UnsafePathError as e:
            raise StoreError(f"{self.where(key)}: not written: {e}") from None

    def _atomic_write(self, key: str, write: Callable[[BinaryIO], None], overwrite: bool) -> None:
        path = self._folder_of(key) / self._path(key).name
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
        with naming(self.where(key)):
            self._atomic_write(key, lambda f: f.write(data), overwrite)

    def put_json(self, key: str, obj: Any, *, overwrite: bool = True) -> None:
        # streamed into the temp file: an error half way through leaves the old file as it was
        with naming(self.where(key)):
            self._atomic_write(key, lambda f: dump_json(obj, f), overwrite)

    def get_bytes(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        # safeio.read_regular opens without blocking and checks with fstat before reading: a
        # FIFO, a device or a folder in place of the file is refused at once, never waited on,
        # and a file over max_bytes is refused before it is read
        path = self._path(key)
        try:
            with naming(self.where(key)):
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
        path = self._folder_of(key) / self._path(key).name
        lock = path.parent / f".{path.name}.lock"
        # O_NOFOLLOW: a link planted at the lock's name is refused, never followed
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the other writer is done
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def update_json(self, key: str, update: Callable[[Any], Any], what: str = "JSON") -> Any:
        with naming(self.where(key)), self._locked(key):
            try:  # a folder or a FIFO in place of the file is refused, never replaced
                old = self.get_json(key, what)
            except StoreKeyError:
                old = None
            new = update(old)
            self._atomic_write(key, lambda f: dump_json(new, f), True)
        return new

    def check_writable(self) -> None:
        with naming(f"store {self.uri}"):
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".probe.", suffix=".tmp")
            os.close(fd)
            os.unlink(tmp)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def report_folders(self, keys: Iterable[str]) -> set[str]:
        # a folder at releases/<r>/report.json, empty or not (a listing has only its files)
        folders = super().report_folders(keys)
        with contextlib.suppress(OSError), os.scandir(self.root / "releases") as found:
            for d in found:
                if not d.name.startswith(".") and os.path.isdir(Path(d.path) / "report.json"):
                    folders.add(d.name)
        return folders

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
