"""Convert a local lm-evaluation-harness multiple-choice task into a tinyllm task file.

``tinyllm task import-lmeval TASK.yaml --out task.jsonl`` reads an lm-eval task config (YAML, with
``include:`` followed: one file or a list, merged in order as lm-eval does, the including file's
keys last) and its local JSON/JSONL data, and writes one line per document in the
format of formats/task-jsonl.md:
``{"context", "choices", "gold", "target_delimiter", "doc_id"}``. With the delimiter kept apart
from the choice, :func:`tinyllm.eval.lm.run_task` then scores ``target_delimiter + choice`` and
divides acc_norm by the bytes of the choice alone, as lm-eval does (docs/definitions.md, multiple choice).

The fields follow lm-eval's own rules (``ConfigurableTask.doc_to_text`` / ``doc_to_choice`` /
``doc_to_target``, lm-eval 0.4):

* ``doc_to_text``: a column name gives that column; anything else is a Jinja template rendered
  with the document's fields (jinja2, ``StrictUndefined``, ``keep_trailing_newline``, lm-eval's
  ``regex_replace`` filter) in jinja2's ``ImmutableSandboxedEnvironment``: a task file is
  untrusted input, so a template that reaches for an unsafe attribute (``__globals__``,
  ``__class__``, a list's ``append``, ...) is refused, naming the YAML file and key;
* ``doc_to_choice``: a column name (a list), a YAML list, a mapping (its values), or a template
  whose rendering is a Python list literal (``ast.literal_eval``);
* ``doc_to_target``: an int, a column name, or a template; all-digit text is an index, other text
  is looked up in the choices;
* ``target_delimiter`` (default " ") goes into every item.

Data: ``dataset_path: json`` with ``dataset_kwargs: {data_files: ...}`` (a file, a list, or a
``{split: files}`` mapping; a bare file or list is the ``train`` split, as in ``datasets``), or a
``dataset_path`` that is itself a local ``.json``/``.jsonl`` file or a folder holding
``<split>.jsonl``/``<split>.json``. Relative paths are read from the working directory (as
lm-eval does), else from the folder of the YAML that was asked for (never an included one's).
The split is ``test_split``, else ``validation_split``, else ``train_split``.
Nothing is ever downloaded; hub datasets, ``!function`` hooks, ``process_docs``, few-shot
settings, ``description`` and multiple-input tasks are refused with an error naming the key and
the file that set it. For what this converter refuses, ``tinyllm eval lmeval``
(:mod:`tinyllm.eval.lmeval`) runs the task in lm-eval itself, on our engine.

Inputs are untrusted: a YAML file is read as a regular file of at most
:data:`MAX_CONFIG_BYTES` through :func:`tinyllm.safeio.load_yaml` (an alias bomb is refused), an
``include:`` cycle is refused naming the cycle, a data file is a regular file of at most
:data:`MAX_DATA_BYTES` (a FIFO or a device is refused, never read). The output is checked before
anything is converted and written with :func:`tinyllm.safeio.write_atomic`.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from tinyllm import safeio

__all__ = ["TaskImportError", "check_out", "convert", "import_task", "load_config"]

MAX_CONFIG_BYTES = 1 << 20  # a task YAML is a few KB; lm-eval's largest are under 100 KB
MAX_DATA_BYTES = 1 << 30  # the data are parsed in memory whole, as datasets' JSON reader does
MAX_INCLUDE_DEPTH = 32  # lm-eval's task folders nest includes two or three deep


class TaskImportError(ValueError):
    """A task config or its data that cannot be converted; the message names the file."""


class _Function:
    """A ``!function module.name`` hook: kept as a marker so the key can be refused by name."""

    def __init__(self, ref: str) -> None:
        self.ref = ref


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!function", lambda loader, node: _Function(loader.construct_scalar(node)))

_UNSUPPORTED = {
    "process_docs": "documents rewritten by Python code",
    "description": "a task description before the prompt",
    "doc_to_decontamination_query": None,
    "fewshot_config": "few-shot examples",
    "gen_prefix": "a generation prefix",
}


def _read_regular(path: Path, max_bytes: int, what: str) -> bytes:
    """The bytes of the regular file ``path``; a FIFO, a device, a folder or a larger file is a
    TaskImportError saying what it is (nothing is read from it)."""
    try:
        return safeio.read_regular(path, max_bytes=max_bytes, what=what)
    except (FileNotFoundError, NotADirectoryError):
        raise TaskImportError(f"{path}: {what} not found") from None
    except (safeio.UnsafePathError, IsADirectoryError) as e:
        raise TaskImportError(str(e)) from None


def load_config(path: str | os.PathLike, _chain: tuple[Path, ...] = ()) -> dict:
    """The task's config: the YAML at ``path`` over the files it ``include:``-s (recursively,
    relative to each file's folder; the including file's keys win).

    ``_origin`` maps each key to the file that set it (errors name that file). An include cycle
    (``a.yaml`` including itself, or ``a -> b -> a``) or more than :data:`MAX_INCLUDE_DEPTH`
    nested includes is a TaskImportError naming the files."""
    p = Path(path)
    key = p.resolve()
    if key in _chain:
        cycle = " -> ".join(str(x) for x in (*_chain[_chain.index(key) :], key))
        raise TaskImportError(f"{p}: include: expected no include cycle, got {cycle}")
    if len(_chain) > MAX_INCLUDE_DEPTH:
        raise TaskImportError(
            f"{p}: include: expected at most {MAX_INCLUDE_DEPTH} nested includes, got more"
        )
    raw = _read_regular(p, MAX_CONFIG_BYTES, "task config")
    try:
        doc = safeio.load_yaml(raw.decode("utf-8"), str(p), loader=_Loader)
    except (yaml.YAMLError, UnicodeDecodeError, safeio.UnsafePathError) as e:
        raise TaskImportError(f"{p}: expected a YAML task config, got: {e}") from None
    if not isinstance(doc, dict):
        raise TaskImportError(f"{p}: expected a YAML mapping, got {type(doc).__name__}")
    inc = doc.pop("include", None)
    origin = dict.fromkeys(doc, str(p))
    if inc is not None:
        # lm-eval's rule: one file or a list, merged in order (a later one wins), then the
        # including file's own keys over all of them
        incs = inc if isinstance(inc, list) else [inc]
        if not incs or not all(isinstance(i, str) and i for i in incs):
            raise TaskImportError(
                f"{p}: include: expected a file name or a list of them, got {inc!r}"
            )
        merged: dict = {}
        base_origin: dict = {}
        for i in incs:
            base = load_config(p.parent / i, (*_chain, key))
            base_origin.update(base.pop("_origin"))
            for k in ("_dir", "_file", "task_list"):
                base.pop(k, None)  # task_list defines the included file's own tasks only
            merged.update(base)
        origin = {**base_origin, **origin}
        merged.update(doc)
        doc = merged
    # the file asked for, never an included one: errors name it, data paths fall back to it
    doc["_dir"] = str(p.parent)
    doc["_file"] = str(p)
    doc["_origin"] = origin
    return doc


# the largest sequence a template's ``*`` may build and the largest power its ``**`` may take:
# a prompt is a few KB; ``{{ 'a' * 10**10 }}`` must not exhaust memory
MAX_TEMPLATE_SEQ = 1_000_000
MAX_TEMPLATE_POW_BITS = 4096


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox with ``*`` and ``**`` bounded (the sandbox bounds ``range``
    only): a repeated string or list longer than :data:`MAX_TEMPLATE_SEQ`, or a power of more
    than :data:`MAX_TEMPLATE_POW_BITS` bits, is a :class:`jinja2.sandbox.SecurityError`."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            for seq, k in ((left, right), (right, left)):
                repeated = isinstance(seq, str | bytes | list | tuple) and isinstance(k, int)
                if repeated and len(seq) * k > MAX_TEMPLATE_SEQ:
                    raise SecurityError(
                        f"expected a repeated sequence of at most {MAX_TEMPLATE_SEQ} items, "
                        f"got {len(seq)} x {k}"
                    )
        elif isinstance(left, int) and isinstance(right, int) and right > 0:
            bits = max(abs(left), 1).bit_length() * right
            if bits > MAX_TEMPLATE_POW_BITS:
                raise SecurityError(
                    f"expected a power of at most {MAX_TEMPLATE_POW_BITS} bits, got {left} ** {right}"
                )
        return super().call_binop(context, operator, left, right)


def _env():
    """lm-eval's template environment (``StrictUndefined``, ``keep_trailing_newline``, its
    ``regex_replace`` filter), sandboxed: a template reads the document's fields and calls
    non-mutating methods, and nothing else (no dunder attributes, no ``__globals__``)."""
    from jinja2 import BaseLoader, StrictUndefined  # jinja2: only rendering a template needs it

    env = _BoundedSandbox(loader=BaseLoader, undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["regex_replace"] = lambda s, pattern, repl, count=0: re.sub(
        pattern, repl, s, count=count
    )
    return env


def _resolve(base_dir: str, name: str) -> Path:
    p = Path(name)
    # lm-eval (datasets) reads relative paths from the working directory: that first
    for cand in (p, p if p.is_absolute() else Path(base_dir) / p):
        if cand.exists():
            return cand
    raise TaskImportError(f"{name}: data file not found (looked in {base_dir} and {os.getcwd()})")


def _read_records(path: Path, field: str | None) -> list[dict]:
    try:
        text = _read_regular(path, MAX_DATA_BYTES, "data file").decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskImportError(f"{path}: expected UTF-8 JSON, got: {e}") from None
    if path.suffix == ".jsonl" or (field is None and not text.lstrip().startswith(("[", "{"))):
        recs = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise TaskImportError(f"{path}:{i}: expected a JSON object, got: {e}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            try:  # a .json file holding JSON lines (datasets reads those too)
                data = [json.loads(x) for x in text.splitlines() if x.strip()]
            except json.JSONDecodeError:
                raise TaskImportError(f"{path}: expected JSON, got: {e}") from None
        if field is not None:
            if not isinstance(data, dict) or field not in data:
                raise TaskImportError(f"{path}: expected a top-level field {field!r}")
            data = data[field]
        recs = data if isinstance(data, list) else [data]
    for i, r in enumerate(recs):
        if not isinstance(r, dict):
            raise TaskImportError(f"{path}: record {i}: expected a JSON object, got {r!r}")
    return recs


def _split_files(cfg: dict) -> dict[str, list[str]]:
    where = cfg["_file"]
    dp = cfg.get("dataset_path")
    kw = cfg.get("dataset_kwargs") or {}
    files = kw.get("data_files") if isinstance(kw, dict) else None
    if dp is None:
        raise TaskImportError(f"{where}: expected a dataset_path (json, or a local file or folder)")
    if dp == "json" or files is not None:
        if files is None:
            raise TaskImportError(
                f"{where}: dataset_path {dp!r}: expected dataset_kwargs.data_files naming local "
                "JSON/JSONL files"
            )
        if isinstance(files, str | list):
            files = {"train": files}
        if not isinstance(files, dict):
            raise TaskImportError(f"{where}: data_files: expected a file, a list or a mapping")
        out = {}
        for split, f in files.items():
            out[str(split)] = [f] if isinstance(f, str) else list(f)
        if dp != "json":  # a folder with data_files inside it
            base = _resolve(cfg["_dir"], dp)
            out = {s: [str(base / f) for f in fs] for s, fs in out.items()}
        return out
    try:
        p = _resolve(cfg["_dir"], dp)
    except TaskImportError:
        raise TaskImportError(
            f"{where}: dataset_path {dp!r}: expected a local JSON/JSONL file or folder (hub "
            "datasets are never downloaded), got no such path"
        ) from None
    if p.is_file():
        return {"train": [str(p)], "test": [str(p)], "validation": [str(p)]}
    if not p.is_dir():
        raise TaskImportError(
            f"{where}: dataset_path {dp!r}: expected a local JSON/JSONL file or folder, got "
            f"{safeio.path_kind(p)}"
        )
    out = {}
    for f in sorted(p.iterdir()):
        if f.suffix in (".jsonl", ".json"):
            out.setdefault(f.stem, []).append(str(f))
    return out


def _field(env, spec: Any, doc: dict, what: str, where: str, cfg: dict) -> Any:
    if isinstance(spec, _Function):
        raise TaskImportError(f"{where}: {what}: !function {spec.ref} (Python hooks are not run)")
    if isinstance(spec, str):
        if spec in doc:
            return doc[spec]
        try:
            return env.from_string(spec).render(**doc)
        except SecurityError as e:  # the sandbox refused an access or a size: the task file's fault
            yaml_file = cfg["_origin"].get(what, cfg["_file"])
            raise TaskImportError(
                f"{yaml_file}: {what}: expected a template that reads only the document's "
                f"fields, got an unsafe access ({e}) in {spec!r}"
            ) from None
        except Exception as e:  # noqa: BLE001 - jinja's errors, with the template named
            raise TaskImportError(f"{where}: {what}: template {spec!r} failed: {e}") from None
    return spec


def convert(path: str | os.PathLike, split: str | None = None) -> list[dict]:
    """The documents of the lm-eval task at ``path`` as tinyllm task items, in data order.

    Each item is ``{"context": doc_to_text, "choices": doc_to_choice, "gold": index of
    doc_to_target, "target_delimiter": target_delimiter, "doc_id": i}`` (see the module
    docstring for lm-eval's rules). Raises :class:`TaskImportError` naming the file and document.
    """
    cfg = load_config(path)
    where = cfg["_file"]

    def set_by(key: str) -> str:  # a refusal names the file that set the key
        return cfg["_origin"].get(key, where)

    out_type = cfg.get("output_type", "generate_until")
    if out_type != "multiple_choice":
        raise TaskImportError(
            f"{set_by('output_type')}: output_type: expected 'multiple_choice', got {out_type!r}"
        )
    for key, why in _UNSUPPORTED.items():
        if cfg.get(key):
            raise TaskImportError(f"{set_by(key)}: {key}: not supported ({why or 'not converted'})")
    if int(cfg.get("num_fewshot") or 0) > 0:
        raise TaskImportError(
            f"{set_by('num_fewshot')}: num_fewshot: expected 0, got {cfg['num_fewshot']!r}"
        )
    delim = cfg.get("target_delimiter", " ")
    if not isinstance(delim, str):
        raise TaskImportError(f"{where}: target_delimiter: expected a string, got {delim!r}")
    for key in ("doc_to_text", "doc_to_choice", "doc_to_target"):
        if cfg.get(key) is None:
            raise TaskImportError(f"{where}: expected {key} in the task config")
    files = _split_files(cfg)
    if split is None:
        for key in ("test_split", "validation_split", "train_split"):
            if cfg.get(key):
                split = str(cfg[key])
                break
        else:
            split = "train" if "train" in files else None
    if split not in files:
        raise TaskImportError(
            f"{where}: split {split!r}: expected one of the data's splits {sorted(files)}"
        )
    kw = cfg.get("dataset_kwargs") or {}
    field = kw.get("field") if isinstance(kw, dict) else None
    docs: list[tuple[str, dict]] = []
    for f in files[split]:
        fp = _resolve(cfg["_dir"], f)
        docs += [(f"{fp} record {i}", r) for i, r in enumerate(_read_records(fp, field))]
    if not docs:
        raise TaskImportError(f"{where}: split {split!r} has no documents")
    env = _env()
    items = []
    for i, (dwhere, doc) in enumerate(docs):
        text = _field(env, cfg["doc_to_text"], doc, "doc_to_text", dwhere, cfg)
        if isinstance(text, int) or (
            isinstance(text, str) and text.isdigit() and cfg["doc_to_text"] not in doc
        ):
            raise TaskImportError(
                f"{dwhere}: doc_to_text gave an index ({text!r}): multiple-input tasks "
                "(one context per choice) are not supported"
            )
        spec = cfg["doc_to_choice"]
        choices = _field(env, spec, doc, "doc_to_choice", dwhere, cfg)
        if isinstance(spec, str) and spec not in doc:
            try:
                choices = ast.literal_eval(choices)
            except (SyntaxError, ValueError):
                raise TaskImportError(
                    f"{dwhere}: doc_to_choice: expected the template to render a Python list, "
                    f"got {choices!r}"
                ) from None
        if isinstance(choices, dict):
            choices = list(choices.values())
        if not isinstance(choices, list | tuple) or len(choices) < 2:
            raise TaskImportError(
                f"{dwhere}: doc_to_choice: expected a list of >= 2, got {choices!r}"
            )
        choices = [str(c) for c in choices]
        tspec = cfg["doc_to_target"]
        target = _field(env, tspec, doc, "doc_to_target", dwhere, cfg)
        templated = not (isinstance(tspec, str) and tspec in doc)
        if isinstance(target, str) and templated and target.isdigit():
            target = int(target)  # lm-eval: an all-digit rendering is an index
        if isinstance(target, bool | list | tuple):
            raise TaskImportError(f"{dwhere}: doc_to_target: expected one answer, got {target!r}")
        if isinstance(target, str):
            if target not in choices:
                raise TaskImportError(
                    f"{dwhere}: doc_to_target: expected one of the choices {choices}, "
                    f"got {target!r}"
                )
            target = choices.index(target)
        if not isinstance(target, int) or not 0 <= target < len(choices):
            raise TaskImportError(
                f"{dwhere}: doc_to_target: expected an index in [0, {len(choices) - 1}], "
                f"got {target!r}"
            )
        if not isinstance(text, str) or not text:
            raise TaskImportError(
                f"{dwhere}: doc_to_text: expected a non-empty context (tinyllm reads the first "
                f"choice token after at least one context token), got {text!r}"
            )
        if not all(choices):
            raise TaskImportError(
                f"{dwhere}: doc_to_choice: expected non-empty choices, got {choices}"
            )
        items.append(
            {
                "context": text,
                "choices": choices,
                "gold": target,
                "target_delimiter": delim,
                "doc_id": i,
            }
        )
    return items


def check_out(out: str | os.PathLike) -> Path:
    """Refuse an output path that is not a regular file or a new path whose parent is a folder
    (a FIFO, a symlink, a device, a folder: :func:`tinyllm.safeio.check_target`), naming
    ``--out``; returns the path. :func:`import_task` calls it before converting anything."""
    return safeio.check_target(out, "--out")


def import_task(
    path: str | os.PathLike, out: str | os.PathLike, split: str | None = None
) -> tuple[Path, int]:
    """Convert the lm-eval task at ``path`` (:func:`convert`) and write it to ``out`` as JSONL
    (UTF-8, one item a line). ``out`` is checked first (:func:`check_out`), so a bad target fails
    before any work; the file is written with :func:`tinyllm.safeio.write_atomic` (a random
    temporary name beside it, then renamed: a planted link is never followed). Returns
    (out, items)."""
    dst = check_out(out)
    items = convert(path, split)
    text = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items)
    safeio.write_atomic(dst, text.encode("utf-8"), what="--out")
    return dst, len(items)
