"""What a Hugging Face model folder must be before transformers reads it, and the one lock every
transformers load runs under (the rules of :mod:`tinyllm.models.hf`, formats/checkpoint.md).

* :func:`loading`: the process-wide lock around transformers' import and every config, model
  and tokenizer it builds (its lazy imports, ``torch.set_default_dtype``, the patched
  ``torch.nn.init`` and its meta-device initialisation are process-wide state: two loads at once
  fail or load random weights), with transformers' progress bars and load reports off while it
  is held, unless debugging (``TINYLLM_DEBUG``);
* :func:`check_folder`: before transformers is called, a folder of regular files (a FIFO is
  refused, never opened), a ``config.json`` that is a JSON object with a string ``model_type``
  and positive sizes, no ``auto_map`` in any config (:data:`CODE_CONFIGS`: tinyllm never runs
  a folder's own code) and readable safetensors weights (:func:`check_headers`: each file's
  header read and checked, no pickle ever);
* :func:`check_causal`: a causal decoder-only LM by its config, never an encoder or an
  encoder-decoder;
* :func:`check_loading_info`: every weight the architecture has is in the files with its
  shape, and nothing else is (tied weights aside);
* :func:`resolve_folder`: a hub id (``org/name``) that is no local path names its snapshot in
  the local Hugging Face cache (:func:`cached_snapshot`, offline: nothing is ever downloaded).

Every refusal is one line naming the file: a :class:`tinyllm.checkpoint.CheckpointError`, whose
subclass :class:`RemoteCodeError` is a folder that asks to run its own code. This module imports
nothing of the families; transformers only inside :func:`loading` and :func:`check_causal`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tinyllm import safeio
from tinyllm.checkpoint import CONFIG_NAME, MAX_CONFIG_BYTES, WEIGHTS_NAME, CheckpointError

WEIGHTS_INDEX = "model.safetensors.index.json"  # a sharded checkpoint's safetensors index
UNSAFE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5")
CODE_CONFIGS = (
    CONFIG_NAME,
    "tokenizer_config.json",
    "processor_config.json",
    "preprocessor_config.json",
)
"""The JSON files through which a folder can name its own Python code (``auto_map``)."""

SIZE_KEYS = (
    "vocab_size",
    "hidden_size",
    "n_embd",
    "d_model",
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "intermediate_size",
    "n_inner",
    "ffn_dim",
    "head_dim",
    "max_position_embeddings",
    "n_positions",
    "n_ctx",
)
"""Config fields that size a model: each, when present and not null, a positive integer."""

NOT_CAUSAL_TYPES = frozenset({"xlnet"})
"""model_types transformers offers as causal LMs whose attention is not left-to-right at all."""

LEGACY_BUFFERS = (r"(^|\.)attn\.masked_bias$",)
"""Unexpected keys that are constants older transformers saved as buffers, never read now."""

ACCEPTED = "expected a causal decoder-only LM (a model_type of AutoModelForCausalLM)"
DEBUG_ENV = "TINYLLM_DEBUG"
MAX_KEYS_SHOWN = 8

LOADING = threading.RLock()
"""Held while transformers is imported and builds a config, a model or a tokenizer."""


class RemoteCodeError(CheckpointError):
    """A folder that names its own Python code (``auto_map``): refused, never run."""


class NotCachedError(CheckpointError):
    """A hub id (``org/name``) with no snapshot in the local Hugging Face cache."""


# ---------------------------------------------------------------------------- the lock


def debugging() -> bool:
    """Whether third-party output is shown in full: ``TINYLLM_DEBUG`` set and not ``0``."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


@contextmanager
def loading(quiet: bool | None = None) -> Iterator[Any]:
    """Hold :data:`LOADING` and yield the ``transformers`` module, imported under the lock.

    While held, transformers' progress bars ("Loading weights") are off and its logging shows
    errors only (no load reports, no notes on the config); both are put back as they were on
    exit. ``quiet=None`` (the default): quiet unless :func:`debugging`; False leaves them as
    they are. The lock is re-entrant: a load may take it again inside."""
    with LOADING:
        import transformers  # optional dependency: only Hugging Face folders
        from transformers.utils import logging as hf_logging  # as above

        if debugging() if quiet is None else not quiet:  # show everything, as transformers does
            yield transformers
            return
        level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            yield transformers
        finally:
            hf_logging.set_verbosity(level)
            if bar:
                hf_logging.enable_progress_bar()


# ------------------------------------------------------------------ the folder's files


def _mode(path: Path) -> int | None:
    try:
        return os.stat(path).st_mode  # a link is judged by its target
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_files(directory: str | os.PathLike) -> Path:
    """``directory`` is a folder whose entries are regular files or folders (a link to one is
    fine): a FIFO, a device or a socket anywhere at its top is refused before anything in it
    is opened, so no read can hang. Returns the folder."""
    d = Path(directory)
    mode = _mode(d)
    if mode is None:
        raise CheckpointError(
            f"{d}: not found (expected a Hugging Face model folder, {CONFIG_NAME} and weights)"
        )
    if not stat.S_ISDIR(mode):
        raise CheckpointError(
            f"{d}: expected a Hugging Face model folder, got {safeio.mode_kind(mode)}"
        )
    with os.scandir(d) as it:
        for entry in it:
            m = _mode(Path(entry.path))
            if m is not None and not (stat.S_ISREG(m) or stat.S_ISDIR(m)):
                raise CheckpointError(
                    f"{entry.path}: expected a regular file, got {safeio.mode_kind(m)}"
                )
    return d


def read_json(path: Path, what: str = "config") -> dict | None:
    """The JSON object in the regular file ``path`` (at most ``MAX_CONFIG_BYTES``), or None
    when there is none; anything else is a CheckpointError naming the file."""
    try:
        raw = safeio.read_regular(path, max_bytes=MAX_CONFIG_BYTES, what=what)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except safeio.UnsafePathError as e:
        raise CheckpointError(str(e)) from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: expected valid JSON, got a parse error: {e}") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def refuse_code(directory: str | os.PathLike, names: Iterable[str] = CODE_CONFIGS) -> None:
    """Refuse a folder whose configs (``names``, those present) name code of its own: an
    ``auto_map`` makes transformers import the folder's ``.py`` files. Raises
    :class:`RemoteCodeError` naming ``auto_map`` and the file."""
    d = Path(directory)
    for name in names:
        doc = read_json(d / name)
        if doc is not None and "auto_map" in doc:
            am = doc["auto_map"]
            code = sorted({str(v) for v in am.values()}) if isinstance(am, dict) else [repr(am)]
            raise RemoteCodeError(
                f"{d / name}: auto_map names the folder's own code ({', '.join(code)[:200]}); "
                f"tinyllm never runs a model folder's code (trust_remote_code=False): expected "
                f"a model and tokenizer transformers implements"
            )


def check_config(doc: Mapping, where: str | os.PathLike) -> None:
    """A Hugging Face config: a string ``model_type`` and every :data:`SIZE_KEYS` field present
    a positive integer (or null). Raises CheckpointError naming ``where`` and the field."""
    if not isinstance(doc.get("model_type"), str):
        raise CheckpointError(
            f"{where}: expected a string model_type, got {doc.get('model_type')!r}"
        )
    for key in SIZE_KEYS:
        v = doc.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise CheckpointError(f"{where}: {key}: expected a positive integer, got {v!r}")


def check_weights(directory: str | os.PathLike) -> Path:
    """A Hugging Face model folder must hold safetensors weights (``model.safetensors`` or a
    sharded ``model.safetensors.index.json``), each a regular file: a folder with only
    ``pytorch_model.bin`` (or another pickle-based format) is refused, so nothing is ever
    unpickled. Returns the folder; raises CheckpointError naming what it found."""
    d = Path(directory)
    for name in (WEIGHTS_NAME, WEIGHTS_INDEX):
        p = d / name
        mode = _mode(p)
        if mode is not None:  # a FIFO or a device is refused at once, never opened
            if not stat.S_ISREG(mode):
                raise CheckpointError(f"{p}: expected a regular file, got {safeio.mode_kind(mode)}")
            return d
    unsafe = [n for n in UNSAFE_WEIGHTS if (d / n).exists()]
    got = f"only {', '.join(unsafe)}" if unsafe else "no weights file"
    raise CheckpointError(
        f"{d}: expected Hugging Face weights in {WEIGHTS_NAME} (safetensors; tinyllm never "
        f"unpickles weights), got {got}"
    )


def weight_files(directory: str | os.PathLike) -> list[Path]:
    """The safetensors files of a folder that :func:`check_weights` accepts:
    ``model.safetensors``, else the shards its ``model.safetensors.index.json`` names (plain
    file names in the folder, each a regular file). Raises CheckpointError naming the file."""
    d = check_weights(directory)
    if _mode(d / WEIGHTS_NAME) is not None:
        return [d / WEIGHTS_NAME]
    p = d / WEIGHTS_INDEX
    index = read_json(p, "weights index") or {}
    wm = index.get("weight_map")
    if not isinstance(wm, dict) or not wm:
        raise CheckpointError(f"{p}: expected a weight_map of tensor names to files, got {wm!r}")
    if not isinstance(index.get("metadata"), dict):  # transformers reads it unconditionally
        raise CheckpointError(f"{p}: expected a metadata object, got {index.get('metadata')!r}")
    shards = []
    for f in dict.fromkeys(wm.values()):
        if not isinstance(f, str) or Path(f).name != f or f in ("", ".", ".."):
            raise CheckpointError(f"{p}: expected shard file names in the folder, got {f!r}")
        m = _mode(d / f)
        if m is None or not stat.S_ISREG(m):
            got = "nothing" if m is None else safeio.mode_kind(m)
            raise CheckpointError(
                f"{d / f}: expected a regular file (a shard of {p.name}), got {got}"
            )
        shards.append(d / f)
    return shards


def check_headers(directory: str | os.PathLike) -> list[Path]:
    """Each of the folder's :func:`weight_files` with its safetensors header read and checked
    by safetensors (shapes, dtypes and offsets against the file's size; no tensor data read):
    a file that lies is a CheckpointError naming it. Returns the files."""
    from safetensors import safe_open  # torch's companion: always installed with tinyllm

    files = weight_files(directory)
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as sf:
                sf.keys()
        except Exception as e:  # noqa: BLE001 - SafetensorError and OSError, named with the file
            msg = " ".join(str(e).split()) or type(e).__name__
            raise CheckpointError(
                f"{f}: expected a readable safetensors file, got: {msg}"
            ) from None
    return files


def check_folder(directory: str | os.PathLike) -> dict:
    """Everything :mod:`tinyllm.models.hf` checks before transformers reads a model folder
    (:func:`check_files`, :func:`refuse_code`, :func:`check_config`, :func:`check_headers`);
    returns the parsed ``config.json``."""
    d = check_files(directory)
    cfg_path = d / CONFIG_NAME
    doc = read_json(cfg_path)
    if doc is None:
        raise CheckpointError(f"{cfg_path}: missing (expected a Hugging Face model's config.json)")
    refuse_code(d)
    check_config(doc, cfg_path)
    check_headers(d)
    return doc


# ---------------------------------------------------------------- the architecture


def check_causal(hc: Any, where: str | os.PathLike) -> None:
    """Refuse a config that is not a causal decoder-only LM, in one line naming its class and
    what is accepted: an encoder-decoder (``is_encoder_decoder``: BART, T5), a model_type
    transformers has no causal LM for, and an encoder family that transformers can run as a
    decoder (BERT, RoBERTa, ... : a model_type with a masked-LM head) unless its config says
    ``is_decoder`` (its attention is then causal). Call it holding :func:`loading`."""
    from transformers.models.auto import modeling_auto  # optional dependency, as above

    cls, mt = type(hc).__name__, getattr(hc, "model_type", None)
    if getattr(hc, "is_encoder_decoder", False):
        raise CheckpointError(f"{where}: {cls} is an encoder-decoder: {ACCEPTED}")
    if mt not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or mt in NOT_CAUSAL_TYPES:
        raise CheckpointError(f"{where}: {cls} (model_type {mt!r}) is not a causal LM: {ACCEPTED}")
    encoder = mt in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if encoder and not (getattr(hc, "is_decoder", False) or getattr(hc, "causal", False)):
        raise CheckpointError(
            f"{where}: {cls} is an encoder (bidirectional; is_decoder is false): {ACCEPTED}"
        )


def _keys(keys: Iterable[Any]) -> str:
    names = sorted(str(k) for k in keys)
    more = f" and {len(names) - MAX_KEYS_SHOWN} more" if len(names) > MAX_KEYS_SHOWN else ""
    return f"[{', '.join(names[:MAX_KEYS_SHOWN])}]{more}"


def check_loading_info(info: Mapping, model: Any, where: str | os.PathLike) -> None:
    """Refuse a load whose weights do not match the architecture, by transformers' own loading
    info (``from_pretrained(..., output_loading_info=True, ignore_mismatched_sizes=True)``):
    a weight missing from the files (transformers would initialise it at random; a tied weight
    is not missing), a key the architecture does not have (but :data:`LEGACY_BUFFERS` and
    those transformers itself ignores), a shape other than the config's. Raises CheckpointError
    naming the keys."""
    cls = type(model).__name__
    legacy = re.compile("|".join(LEGACY_BUFFERS))
    missing = sorted(info.get("missing_keys") or ())
    unexpected = sorted(k for k in info.get("unexpected_keys") or () if not legacy.search(str(k)))
    if missing or unexpected:
        got = []
        if missing:
            got.append(f"missing {_keys(missing)}")
        if unexpected:
            got.append(f"unexpected {_keys(unexpected)}")
        raise CheckpointError(
            f"{where}: expected the weights of a {cls} as its config.json describes (tied weights "
            f"aside), got {' and '.join(got)}"
        )
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda t: str(t[0]))
    if mismatched:
        shown = [
            f"{t[0]} {list(t[1])} in the file, {list(t[2])} by config.json"
            for t in mismatched[:MAX_KEYS_SHOWN]
        ]
        more = (
            f" and {len(mismatched) - MAX_KEYS_SHOWN} more"
            if len(mismatched) > MAX_KEYS_SHOWN
            else ""
        )
        raise CheckpointError(
            f"{where}: expected the weights' shapes to match config.json, got {'; '.join(shown)}{more}"
        )


# ------------------------------------------------------------- hub ids, the local cache

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
"""``org/name`` as the hub spells a model repo: word characters, ``-`` and ``.``."""
COMMIT = re.compile(r"[0-9a-f]{40}")
"""What ``refs/main`` of a cached repo holds: the commit its snapshot folder is named by."""
MAX_REF_BYTES = 4096


def is_hub_id(spec: str | os.PathLike) -> bool:
    """Whether ``spec`` reads as a hub model id ``org/name`` (``--`` and ``..`` are not ids).

    Example: ``is_hub_id("myorg/tiny-llama")`` -> True; ``"runs/a/b"``, ``"./x/y"`` -> False.
    """
    s = os.fspath(spec)
    return bool(HUB_ID.fullmatch(s)) and "--" not in s and ".." not in s


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now, as ``huggingface_hub`` reads
    it at import: ``$HF_HUB_CACHE``, else ``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``,
    else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expanduser(os.path.expandvars(hub)))


def cached_snapshot(repo_id: str, cache: str | os.PathLike | None = None) -> Path:
    """The snapshot folder of the hub model ``repo_id`` (``org/name``) in the cache (``cache``,
    default :func:`hub_cache_dir`), as ``huggingface_hub.snapshot_download(repo_id,
    local_files_only=True)`` finds it: ``models--org--name/refs/main`` holds a commit, and
    ``models--org--name/snapshots/<commit>/`` is the folder. Offline: nothing is downloaded.
    ``refs/main`` is read as a regular file of at most 4 KiB (a FIFO is refused, never waited
    on). The folder's files are checked by the loader as any folder's are.

    Raises :class:`NotCachedError`, one line naming the repo id and the cache folder searched,
    when the repo, its ``refs/main`` or its snapshot is not there.
    """
    root = Path(cache) if cache is not None else hub_cache_dir()
    org, name = repo_id.split("/")
    repo = root / f"models--{org}--{name}"
    ref = repo / "refs" / "main"
    missing = None
    try:
        commit = safeio.read_regular(ref, max_bytes=MAX_REF_BYTES, what="hub ref").decode(
            "utf-8", "replace"
        )
    except (FileNotFoundError, NotADirectoryError):
        missing = f"no {repo.name}/refs/main" if _mode(repo) is not None else f"no {repo.name}"
    except safeio.UnsafePathError as e:
        raise CheckpointError(str(e)) from None
    else:
        commit = commit.strip()
        if not COMMIT.fullmatch(commit):
            raise CheckpointError(f"{ref}: expected a 40-hex commit id, got {commit[:60]!r}")
        snap = repo / "snapshots" / commit
        mode = _mode(snap)
        if mode is not None and stat.S_ISDIR(mode):
            return snap
        missing = f"no snapshots/{commit} in {repo.name}"
    raise NotCachedError(
        f"{repo_id}: expected a local folder or a model in the Hugging Face cache, got neither "
        f"({missing} in {root}; tinyllm never downloads: `hf download {repo_id}` fetches it, "
        f"HF_HUB_CACHE or HF_HOME name another cache)"
    )


def resolve_folder(spec: str | os.PathLike) -> Path:
    """The model folder ``spec`` names: itself when anything exists at that path (a local
    folder always wins, and is checked as it is), else, for a hub id ``org/name``
    (:func:`is_hub_id`), its snapshot in the local cache (:func:`cached_snapshot`); anything
    else is returned as it is, for the loader's own error.

    Example: with ``HF_HUB_CACHE=/c`` holding ``models--myorg--tiny/refs/main`` = ``<sha>``,
    ``resolve_folder("myorg/tiny")`` -> ``/c/models--myorg--tiny/snapshots/<sha>``.
    """
    p = Path(spec)
    if safeio.path_kind(p) is not None or not is_hub_id(spec):
        return p
    return cached_snapshot(os.fspath(spec))
