"""The one save/load pair for checkpoints (formats/checkpoint.md).

A checkpoint is a folder::

    config.json        {"tl_arch": "gpt", "format_version": 1, "config": {...},
                        "tokenizer": {"type": "byte", "vocab_size": 256}, ...}
    model.safetensors  the tensors, by name

A count-based family may instead be ONE ``.safetensors`` file whose string metadata carries
``tl_arch`` and ``format_version`` (plus the family's own keys). Nothing is ever unpickled.

Every failure is a :class:`CheckpointError` that names the file and says what was expected. Files
are read only when they are regular files (a FIFO or a device is refused, saying what it is) and
written with :func:`tinyllm.safeio.write_atomic` (a fresh random temporary name, never through a
planted link).
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save

from tinyllm import safeio

FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few KB; a larger one is refused unread


class CheckpointError(ValueError):
    """A checkpoint that cannot be read as the format says; the message names the file."""


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    safeio.write_atomic(path, data, what="checkpoint file")


def _check_regular(path: Path, missing: str) -> None:
    """``path`` (a link to one is fine) must be a regular file: ``missing`` is the message when
    nothing is there; a FIFO, a device or a folder is refused, saying what it is."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise CheckpointError(missing) from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{path}: expected a regular file, got {safeio.mode_kind(mode)}")


def _clean_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # safetensors refuses shared or non-contiguous storage: give each tensor its own copy
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}


def save_checkpoint(
    directory: str | os.PathLike,
    arch: str,
    config: Mapping,
    tensors: Mapping[str, torch.Tensor],
    tokenizer: Mapping | None = None,
    extra: Mapping | None = None,
) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed).

    ``config`` is the family's config as a JSON-native dict; ``extra`` adds top-level keys
    (a classifier's ``tl_head``, say). Each file is written under a temporary name and renamed.
    """
    d = safeio.make_dirs(directory, [])  # a real folder, never a planted link
    doc = {
        "tl_arch": arch,
        "format_version": FORMAT_VERSION,
        "config": dict(config),
        "tokenizer": dict(tokenizer or {"type": "byte", "vocab_size": 256}),
    }
    doc.update(extra or {})
    # safetensors' save_file creates the file mode 0600; bytes written by Python follow the
    # umask, like config.json
    _atomic_write_bytes(d / WEIGHTS_NAME, save(_clean_tensors(tensors), metadata={"tl_arch": arch}))
    _atomic_write_bytes(
        d / CONFIG_NAME, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    )
    return d


def read_config(directory: str | os.PathLike, known_archs: Iterable[str] | None = None) -> dict:
    """Read and validate a checkpoint folder's ``config.json``.

    Checks: the folder and the file exist, the JSON parses to an object, ``tl_arch`` is present
    (and, when ``known_archs`` is given, one of them), ``format_version`` is supported and
    ``config`` is an object.
    """
    d = Path(directory)
    if not d.exists():
        raise CheckpointError(f"{d}: checkpoint not found (expected a folder with {CONFIG_NAME})")
    if not d.is_dir():
        got = "a file" if d.is_file() else safeio.path_kind(d)
        raise CheckpointError(f"{d}: expected a checkpoint folder, got {got}")
    path = d / CONFIG_NAME
    _check_regular(path, f"{path}: missing (expected the checkpoint's {CONFIG_NAME})")
    try:
        raw = safeio.read_regular(path, max_bytes=MAX_CONFIG_BYTES, what="checkpoint config")
    except safeio.UnsafePathError as e:
        raise CheckpointError(str(e)) from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: expected valid JSON, got a parse error: {e}") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    arch = doc.get("tl_arch")
    if not isinstance(arch, str) or not arch:
        raise CheckpointError(
            f"{path}: expected a string 'tl_arch' naming the family, got {arch!r}"
        )
    if known_archs is not None:
        known = sorted(known_archs)
        if arch not in known:
            raise CheckpointError(f"{path}: unknown tl_arch {arch!r}; expected one of {known}")
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{path}: expected format_version {FORMAT_VERSION}, got {version!r}")
    if not isinstance(doc.get("config", {}), dict):
        raise CheckpointError(f"{path}: expected 'config' to be an object, got {doc['config']!r}")
    doc.setdefault("config", {})
    return doc


def read_family_config(directory: str | os.PathLike, arch: str, config_cls):
    """:func:`read_config` for one family, then ``config_cls(**config)``: the family's frozen
    Config, so an unknown or invalid key is a CheckpointError naming ``config.json``."""
    doc = read_config(directory, known_archs=[arch])
    try:
        return config_cls(**doc["config"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(
            f"{Path(directory) / CONFIG_NAME}: invalid {arch} config: {e}"
        ) from None


def expected_from(state_dict: Mapping[str, torch.Tensor]) -> dict[str, tuple[tuple, torch.dtype]]:
    """``{name: (shape, dtype)}`` of a freshly built model, to check a loaded file against."""
    return {k: (tuple(v.shape), v.dtype) for k, v in state_dict.items()}


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    _check_regular(path, f"{path}: missing (expected the checkpoint's weights)")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"{path}: expected a readable safetensors file, got: {e}") from None


def tensor_header(path: str | os.PathLike) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{name: (shape, dtype name)}`` of a safetensors file, from its header alone (no tensor
    is read; safetensors checks the header against the file's size, so a shape the file cannot
    hold is refused). A family checks its config against this before it allocates a model."""
    p = Path(path)
    _check_regular(p, f"{p}: missing (expected the checkpoint's weights)")
    try:
        with safe_open(str(p), framework="pt") as f:
            return {
                k: (tuple(f.get_slice(k).get_shape()), str(f.get_slice(k).get_dtype()))
                for k in f.keys()  # noqa: SIM118 - safe_open has keys(), no __iter__
            }
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"{p}: expected a readable safetensors file, got: {e}") from None


def _check_finite(path, name: str, t: torch.Tensor) -> None:
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise CheckpointError(f"{path}: tensor {name!r}: expected finite values, got inf or nan")


def check_tensors(
    path: str | os.PathLike,
    tensors: Mapping[str, torch.Tensor],
    expected: Mapping[str, tuple[tuple, torch.dtype]],
) -> None:
    """Check names, shapes, dtypes and finiteness of ``tensors`` against ``expected``."""
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: tensor names do not match the config: missing {missing}, unexpected {unexpected}"
        )
    for name, (shape, dtype) in expected.items():
        t = tensors[name]
        if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
            raise CheckpointError(
                f"{path}: tensor {name!r}: expected shape {list(shape)} {dtype}, "
                f"got {list(t.shape)} {t.dtype}"
            )
        _check_finite(path, name, t)


def load_tensors(
    directory: str | os.PathLike, expected: Mapping[str, tuple[tuple, torch.dtype]] | None = None
) -> dict[str, torch.Tensor]:
    """Read ``model.safetensors`` and, given ``expected``, validate it with :func:`check_tensors`."""
    path = Path(directory) / WEIGHTS_NAME
    tensors = _load_safetensors(path)
    if expected is not None:
        check_tensors(path, tensors, expected)
    return tensors


def save_single(path: str | os.PathLike, arch: str, tensors: Mapping, metadata: Mapping) -> Path:
    """Write a one-file checkpoint: tensors plus string metadata naming ``tl_arch``."""
    p = Path(path)
    meta = {k: str(v) for k, v in metadata.items()}
    meta.update({"tl_arch": arch, "format_version": str(FORMAT_VERSION)})
    _atomic_write_bytes(p, save(_clean_tensors(tensors), metadata=meta))  # mode follows umask
    return p


def read_single_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The string metadata of a one-file checkpoint, validated to name ``tl_arch``."""
    p = Path(path)
    _check_regular(p, f"{p}: checkpoint file not found")
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = dict(f.metadata() or {})
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"{p}: expected a readable safetensors file, got: {e}") from None
    if not meta.get("tl_arch"):
        raise CheckpointError(f"{p}: expected metadata key 'tl_arch', got keys {sorted(meta)}")
    if meta.get("format_version") != str(FORMAT_VERSION):
        raise CheckpointError(
            f"{p}: expected format_version {FORMAT_VERSION}, got {meta.get('format_version')!r}"
        )
    return meta


def load_single(path: str | os.PathLike) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """Read a one-file checkpoint: (metadata, tensors), with every float tensor finite."""
    p = Path(path)
    meta = read_single_metadata(p)
    tensors = _load_safetensors(p)
    for name, t in tensors.items():
        _check_finite(p, name, t)
    return meta, tensors


def config_float(meta: Mapping[str, str], key: str, path) -> float:
    """A float from one-file metadata, with a clear error when it is missing or not a number."""
    try:
        v = float(meta[key])
    except (KeyError, ValueError):
        raise CheckpointError(
            f"{path}: expected a number in metadata {key!r}, got {meta.get(key)!r}"
        ) from None
    if not math.isfinite(v):
        raise CheckpointError(f"{path}: expected a finite metadata {key!r}, got {v}")
    return v
