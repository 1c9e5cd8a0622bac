"""Safe file I/O for every file tinyllm writes for a user or reads from one.

Every path a user hands us is untrusted: an ``--out`` may be a symlink, a FIFO or a device, a
folder inside an output tree may be a planted link, a "report.json" may be a FIFO that never
ends, a YAML file may be an alias bomb. The helpers here give one answer to each:

* :func:`check_target` / :func:`write_atomic`: the target is a regular file or a new path whose
  parent is a real folder; the data goes to a fresh random temporary name in that folder
  (``mkstemp``: ``O_CREAT | O_EXCL``, so a planted link is never followed), is fsynced and moved
  into place with :func:`os.replace` (which replaces a name, never writes through it).
* :func:`make_dirs` / :func:`write_under`: files inside an output root, every folder between the
  root and the file a real folder (a symlink or a file there is refused, nothing is written
  through it).
* :func:`read_regular`: a regular file of at most ``max_bytes``; a FIFO, a device or a folder
  is refused at once (opened non-blocking, checked with ``fstat``), a larger file is refused
  before it is read.
* :func:`load_yaml`: YAML whose node tree, with every alias expanded, has at most ``max_nodes``
  nodes; an alias bomb is refused before anything is built.

Errors are :class:`UnsafePathError` (a :class:`ValueError`), one line saying what was expected
and what was found, naming the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import yaml

# an expanded YAML document bigger than this is refused: a manifest or task config has at most a
# few thousand nodes; a billion-laughs bomb of 9 levels of 9 aliases has 387 million
MAX_YAML_NODES = 1_000_000

_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UnsafePathError(ValueError):
    """A path that is not what it must be (a link, a FIFO, a device, too large, ...)."""


def mode_kind(mode: int) -> str:
    """The kind of file an ``st_mode`` describes, in words ("a FIFO", "a regular file", ...)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a special file"


def path_kind(path: str | os.PathLike[str]) -> str | None:
    """The kind of ``path`` itself (a symlink is "a symbolic link", not its target's kind), or
    None where nothing exists."""
    try:
        return mode_kind(os.lstat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_target(path: str | os.PathLike[str], what: str = "output") -> Path:
    """Refuse a write target that is not a regular file or a new path, or whose parent is not a
    real folder (a missing parent is fine: :func:`write_atomic` creates it). Returns the path."""
    p = Path(path)
    got = path_kind(p)
    if got not in (None, "a regular file"):
        raise UnsafePathError(f"{what} {p}: expected a regular file or a new path, got {got}")
    parent = p.parent
    got = path_kind(parent) if str(parent) not in ("", ".") else "a folder"
    if got not in (None, "a folder"):
        raise UnsafePathError(f"{what} {p}: expected its parent {parent} to be a folder, got {got}")
    return p


def make_dirs(root: str | os.PathLike[str], parts: list[str] | tuple[str, ...]) -> Path:
    """Create ``root/parts[0]/parts[1]/...`` folder by folder; refuse any component (the root
    included) that exists as anything but a real folder, so nothing is written through a link."""
    folder = Path(root)
    for i, part in enumerate(("", *parts)):
        if i:
            folder = folder / part
        got = path_kind(folder)
        if got is None:
            with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
                folder.mkdir(parents=i == 0)
            got = path_kind(folder)
        if got != "a folder":
            raise UnsafePathError(f"{folder}: expected a folder, got {got}")
    return folder


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | Callable[[BinaryIO], None],
    *,
    what: str = "output",
    fsync: bool = True,
) -> Path:
    """Write ``data`` (bytes, or a function that writes to a binary file) to ``path`` all or
    nothing: a fresh random temporary file beside it, fsynced, then :func:`os.replace`. The target
    is checked first (:func:`check_target`); its parent folder is created when missing. On any
    error the temporary file is removed and the target is as it was. Returns the path."""
    p = check_target(path, what)
    if path_kind(p.parent) is None:
        p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp makes 0600; what we write is for everyone
            if callable(data):
                data(f)
            else:
                f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return p


def write_under(
    root: str | os.PathLike[str],
    relpath: str,
    data: bytes | Callable[[BinaryIO], None],
    *,
    fsync: bool = True,
) -> Path:
    """Write ``data`` to ``root/relpath`` (``/``-separated) with :func:`write_atomic`, every
    folder on the way a real folder (:func:`make_dirs`). Returns the file's path."""
    parts = relpath.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise UnsafePathError(f"{root}: expected a relative path of plain names, got {relpath!r}")
    folder = make_dirs(root, parts[:-1])
    return write_atomic(folder / parts[-1], data, what="output", fsync=fsync)


def read_regular(path: str | os.PathLike[str], *, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (a link to one is followed), at most ``max_bytes``.

    A FIFO, device, socket or folder is refused at once (the file is opened non-blocking, so a
    FIFO without a writer does not hang, and checked with ``fstat`` before anything is read); a
    larger file is refused before it is read. Raises :class:`FileNotFoundError` when nothing is
    there, :class:`UnsafePathError` otherwise.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(
                f"{what} {path}: expected a regular file, got {mode_kind(st.st_mode)}"
            )
        if st.st_size > max_bytes:
            raise UnsafePathError(
                f"{what} {path}: expected at most {max_bytes} bytes, got {st.st_size}"
            )
        chunks, left = [], max_bytes + 1
        while left > 0:  # a file that grows while we read is cut at max_bytes + 1 and refused
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise UnsafePathError(f"{what} {path}: expected at most {max_bytes} bytes, got more")
    return data


def _expanded_size(node: yaml.Node, where: str, max_nodes: int) -> int:
    """The number of nodes of ``node``'s tree with every alias expanded, refused past
    ``max_nodes`` (a recursive alias expands forever, so it is refused too)."""
    count, stack = 0, [node]
    while stack:
        n = stack.pop()
        count += 1
        if count > max_nodes:
            raise UnsafePathError(
                f"{where}: expected a YAML document of at most {max_nodes} nodes with its aliases "
                f"expanded, got more (an alias bomb or a recursive alias?)"
            )
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.append(k)
                stack.append(v)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    return count


def load_yaml(
    text: str | bytes,
    where: str,
    *,
    loader: type = yaml.SafeLoader,
    max_nodes: int = MAX_YAML_NODES,
) -> Any:
    """Parse one YAML document with ``loader`` (default :class:`yaml.SafeLoader`), refusing a
    document that expands to more than ``max_nodes`` nodes before anything is constructed.
    Parse errors propagate as :class:`yaml.YAMLError`."""
    ld = loader(text)
    try:
        node = ld.get_single_node()
        if node is None:
            return None
        _expanded_size(node, where, max_nodes)
        return ld.construct_document(node)
    finally:
        ld.dispose()
