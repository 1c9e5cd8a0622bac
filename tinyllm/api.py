"""The Python API: one call each for a training loop or a notebook (docs/api.md).

::

    import tinyllm
    r = tinyllm.bpb(model, "val.txt")                 # bits per byte, interval over documents
    acc = tinyllm.task(model, "arc.jsonl")            # multiple choice, interval over units
    run = tinyllm.lmeval(model, "my_tasks/arc.yaml")  # lm-eval: a name, a YAML or a folder
    d = tinyllm.paired(acc_a, acc_b)                  # paired comparison, over units
    steps = tinyllm.releases("./evalstore")           # a store's releases with their rows

``model`` is a model object or a folder. The paired comparison is ``paired`` and a store's
history ``releases``: ``tinyllm.compare`` and ``tinyllm.history`` are the modules of release
comparison and history, which the API wraps. An object: one of our families' ``Model`` (the family
is found by its class), a transformers ``PreTrainedModel`` (read as the ``hf`` family), or any
callable ``model(ids[None]) -> logits [1, T, V]`` (scored in strided windows; its context and
tokenizer are unknown, so ``ctx_len=`` is needed and the text is read in bytes unless
``tokenizer=`` names another). A folder: one of our lm checkpoints or a local Hugging Face
causal LM folder (:func:`tinyllm.eval.single.open_path`). Every function computes what the
command line computes (``tinyllm eval ppl --text``, ``eval task``, ``eval lmeval``,
``history``), through the same library functions; a bad input is one ValueError (a TypeError for
an argument of the wrong type) saying what was expected and what was got.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm.comparison import ComparisonRow
from tinyllm.dashboard import load_history
from tinyllm.eval import lm, single
from tinyllm.eval.lmeval import run as lmeval_run
from tinyllm.eval.lmeval.task_files import folder_tasks, task_config, task_name
from tinyllm.eval.text import load_tokenizer, model_tokenizer, own_tokenizer, summarize_text
from tinyllm.eval.text_compare import paired_nlls
from tinyllm.eval.text_docs import DOC_SEP, check_doc_sep, scored_starts
from tinyllm.history import release_history
from tinyllm.models import FAMILIES
from tinyllm.models import hf as hf_family
from tinyllm.stats import PairedDifference, exact_sign_flips
from tinyllm.store import Store, open_store
from tinyllm.tokens import ByteTokenizer, tokenizer_id
from tinyllm.windows import WINDOW_OPTIONS, model_context

__all__ = ["Comparison", "LmEvalRun", "Release", "TextBpb", "bpb", "lmeval", "paired"]
__all__ += ["releases", "task"]

OBJECT = "<model object>"
"""The ``model`` field of a result scored on a model object (a folder's is its path)."""


# ---- the model: an object or a folder ---------------------------------------------------------


def _is_folder(model: Any) -> bool:
    return isinstance(model, str | os.PathLike)


def _family_of(model: Any) -> tuple[str, Any]:
    """``(arch, family module or None)`` of a model object: one of our lm families' ``Model``,
    a transformers ``PreTrainedModel`` (``hf``, None), else a plain callable (``"callable"``)."""
    for arch, fam in FAMILIES.items():
        cls = getattr(fam, "Model", None)
        if isinstance(cls, type) and isinstance(model, cls):
            if getattr(fam, "KIND", None) != "lm":
                raise ValueError(
                    f"model: expected a language model (kind lm), got {arch!r} of kind "
                    f"{getattr(fam, 'KIND', None)!r}"
                )
            return arch, fam
    tf = sys.modules.get("transformers")
    if tf is not None and isinstance(model, tf.PreTrainedModel):
        return hf_family.ARCH, None
    if callable(model):
        return "callable", None
    raise TypeError(
        "model: expected a model object (callable as model(ids[None]) -> logits) or a folder "
        f"(our lm checkpoint or a local Hugging Face folder), got {type(model).__name__}"
    )


def _loaded(model: Any, ctx_len: int | None, what: str, **load: Any) -> single.LoadedLM:
    """A folder opened by :func:`tinyllm.eval.single.open_path`, or a model object as a
    :class:`tinyllm.eval.single.LoadedLM` (its context by :func:`tinyllm.windows.model_context`,
    the lookup of the CLI and the zoo). A plain callable declares no context, so ``what`` (the
    option giving it) is required."""
    if _is_folder(model):
        if not Path(model).exists():
            raise ValueError(
                f"model: expected a model object or an existing folder, got {str(model)!r}, "
                "which does not exist"
            )
        return single.open_path(str(model), **load)
    arch, fam = _family_of(model)
    if arch == hf_family.ARCH:
        vocab = model.config.vocab_size
        return single.LoadedLM(model, arch, None, vocab, model_context(model), "hf", OBJECT)
    if fam is not None:
        cfg = getattr(model, "cfg", None)
        vocab = getattr(cfg, "vocab_size", None) or getattr(fam, "VOCAB", None)
        ctx = model_context(model)
        return single.LoadedLM(model, arch, fam, vocab, ctx, {"type": "byte"}, OBJECT)
    if ctx_len is None:
        raise ValueError(f"{what}: expected the context of a plain model callable, got None")
    return single.LoadedLM(model, "callable", None, None, None, None, OBJECT)


def _own_tokenizer(m: single.LoadedLM) -> Any:
    """The tokenizer ``m`` reads: bytes for our families and a plain callable, a Hugging Face
    model's own (bytes for a folder without one)."""
    if m.arch == "callable":
        return ByteTokenizer()
    return model_tokenizer(m.model, hf_family.ARCH if m.family is None else m.arch)


def _tokenizer(m: single.LoadedLM, tokenizer: Any) -> Any:
    """``tokenizer`` (``None``: the model's own; ``"byte"`` or a folder:
    :func:`tinyllm.eval.single.text_tokenizer`'s rule; a tokenizer object: used as it is,
    when it is the model's own or the model has none, as a Hugging Face model from a training
    loop)."""
    if tokenizer is None:
        return _own_tokenizer(m)
    if m.arch == "callable":
        return load_tokenizer(str(tokenizer)) if _is_folder(tokenizer) else tokenizer
    if _is_folder(tokenizer):
        return single.text_tokenizer(m, str(tokenizer))
    own = own_tokenizer(m.model, hf_family.ARCH if m.family is None else m.arch)
    if own is not None and tokenizer_id(tokenizer) != tokenizer_id(own):
        raise ValueError(
            f"tokenizer: expected the model's own ({tokenizer_id(own)}), got "
            f"{tokenizer_id(tokenizer)}: a model is never fed ids of another tokenizer"
        )
    return tokenizer


# ---- bits per byte of a text ------------------------------------------------------------------

_PATHLIKE = re.compile(r"[^\s/]+\.[A-Za-z0-9]{1,5}|\S*/\S*")


@contextmanager
def _text_file(text_or_path: Any):
    """The file to read: a path (``os.PathLike``, or a ``str`` naming an existing file), or the
    text itself (a ``str`` that names no file, or ``bytes``) in a temporary file."""
    if isinstance(text_or_path, os.PathLike):
        yield str(text_or_path), str(text_or_path)
        return
    if isinstance(text_or_path, str) and "\n" not in text_or_path:
        if os.path.isfile(text_or_path):
            yield text_or_path, text_or_path
            return
        if _PATHLIKE.fullmatch(text_or_path):
            raise ValueError(
                f"text_or_path: expected an existing file or the text itself, got "
                f"{text_or_path!r}, which looks like a file name but names no file (pass "
                "bytes to score it as text)"
            )
    if isinstance(text_or_path, str):
        data = text_or_path.encode("utf-8")
    elif isinstance(text_or_path, bytes):
        data = text_or_path
    else:
        raise TypeError(
            f"text_or_path: expected a text (str or bytes) or a file path, got "
            f"{type(text_or_path).__name__}"
        )
    with tempfile.TemporaryDirectory(prefix="tinyllm-text-") as d:
        p = Path(d) / "text.txt"
        p.write_bytes(data)
        yield str(p), "<text>"


@dataclass(frozen=True, eq=False)
class TextBpb:
    """Bits per byte of a text (:func:`bpb`), with its 95% interval over the text's documents.

    * ``value`` = ``sum_t l_t / (n_bytes ln 2)`` over the scored tokens t = 1 .. n-1;
    * ``lo``, ``hi``: the cluster-robust ratio interval over documents (``method``
      ``cluster_ratio``, ``n_units`` documents; docs/definitions.md, "Units"); a text without
      boundaries: contiguous blocks of ``block_len`` tokens (``warning`` says so);
    * ``iid``: the Student t interval over tokens, ``{"value", "lo", "hi"}``;
    * ``n``: scored tokens; ``n_bytes``: the UTF-8 bytes they cover; ``nll``, ``ppl``:
      ``{"value", "lo", "hi"}`` in nats per token and perplexity, over documents;
    * ``per_item``: each scored token's NLL (nats) and ``doc_starts`` where each unit begins
      among them, for :func:`paired` of two models on the same text.
    """

    value: float
    lo: float
    hi: float
    n: int
    n_units: int
    method: str
    n_bytes: int
    nll: dict
    ppl: dict
    iid: dict
    model: str
    arch: str
    data: str
    tokenizer: str
    doc_sep: str | None
    ctx_len: int | None
    stride: int | None
    block_len: int | None = None
    warning: str = ""
    per_item: np.ndarray = dataclasses.field(default=None, repr=False)
    doc_starts: np.ndarray = dataclasses.field(default=None, repr=False)

    def to_dict(self) -> dict:
        """The fields but ``per_item``, ``doc_starts``; ``method`` named ``interval``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del d["per_item"], d["doc_starts"]
        return d | {"interval": d.pop("method")}


def bpb(
    model: Any,
    text_or_path: Any,
    *,
    tokenizer: Any = None,
    ctx_len: int | None = None,
    stride: int | None = None,
    doc_sep: str | None = DOC_SEP,
    device: Any = "auto",
    dtype: Any = "auto",
) -> TextBpb:
    """Bits per byte of a text under ``model``, in the model's own tokenizer (docs/definitions.md section
    2), with its 95% interval over the text's documents: ``tinyllm eval ppl --text F --json``'s
    ``bpb`` (:func:`tinyllm.eval.single.score_text`).

    ``text_or_path``: a file (an ``os.PathLike``, or a ``str`` naming an existing file: UTF-8
    text or a token file of its bytes) or the text itself (a ``str`` naming no file, or
    ``bytes``). Documents: the text cut after each run of ``doc_sep`` (default one per line;
    ``"none"``: contiguous blocks of tokens, with a warning). Our gpt, Hugging Face models and
    plain callables are scored in strided windows of ``ctx_len`` tokens (default: the model's
    context) every ``stride`` (default ``ctx_len // 2``); our other families by their own NLLs,
    refusing ``ctx_len`` / ``stride`` as the CLI and a manifest do
    (:func:`tinyllm.windows.resolve_windows`). ``bpb = sum_t l_t / (n_bytes ln 2)``; the interval is the
    cluster-robust ratio estimator over documents
    (:func:`tinyllm.eval.text.summarize_text`). ``device`` / ``dtype``: for a folder
    (:func:`tinyllm.eval.single.open_lm`).
    """
    sep = check_doc_sep(doc_sep)
    with _text_file(text_or_path) as (path, label):
        single.text_size(path)  # what the file cannot be is refused before a model is loaded
        m = _loaded(model, ctx_len, "ctx_len", device=device, dtype=dtype)
        c, s = single.windows(m, ctx_len, stride, options=WINDOW_OPTIONS)
        tokens = single.text_tokens(m, path, _tokenizer(m, tokenizer), None, doc_sep)
        nlls = single.family_nlls(m, tokens.ids, c, s)
        res = summarize_text([(1, nlls)], tokens)
        starts, _ = scored_starts(tokens.doc_starts, int(tokens.ids.size))
    return TextBpb(
        value=res["bpb"]["value"],
        lo=res["bpb"]["lo"],
        hi=res["bpb"]["hi"],
        n=res["n_tokens"],
        n_units=res["n_units"],
        method=res["interval"],
        n_bytes=res["n_bytes"],
        nll=res["nll"],
        ppl=res["ppl"],
        iid=res["iid_interval"]["bpb"],
        model=m.source,
        arch=m.arch,
        data=label,
        tokenizer=res["tokenizer"],
        doc_sep=sep,
        ctx_len=c,
        stride=s,
        block_len=res.get("block_len"),
        warning=res.get("interval_warning") or "",
        per_item=nlls,
        doc_starts=starts,
    )


# ---- a multiple-choice task -------------------------------------------------------------------


def task(
    model: Any,
    task_path: str | os.PathLike,
    *,
    metric: str = "acc_norm",
    seed: int = 0,
    tokenizer: Any = None,
    max_len: int | None = None,
    n_boot: int = 1000,
    device: Any = "auto",
    dtype: Any = "auto",
) -> lm.Result:
    """Multiple-choice accuracy of ``model`` on the task file ``task_path``
    (formats/task-jsonl.md): :func:`tinyllm.eval.lm.run_task`, as ``tinyllm eval task`` runs
    it (:func:`tinyllm.eval.single.score_task`).

    ``metric``: ``acc`` (the choice of highest log-likelihood) or ``acc_norm`` (highest LL per
    UTF-8 byte of the choice). The interval is over the task's units (Wilson when each item is
    its own unit; the bootstrap over ``cluster`` values, ``n_boot`` resamples from
    ``numpy.random.default_rng(seed)``). ``max_len``: tokens the model reads (default: a
    strided model's own context). Returns a :class:`tinyllm.eval.lm.Result` (``value``,
    ``lo``, ``hi``, ``n``, ``n_units``, ``method``, ``per_item``, ``units``, ``to_dict()``).
    """
    if metric not in lm.METRICS:
        raise ValueError(f"metric: expected one of {list(lm.METRICS)}, got {metric!r}")
    if not _is_folder(task_path):
        raise TypeError(f"task_path: expected a task file path, got {type(task_path).__name__}")
    items = lm.read_task(task_path)
    m = _loaded(model, max_len, "max_len", device=device, dtype=dtype)
    tok = _tokenizer(m, tokenizer)
    return m.run_task(tok, items, metric, np.random.default_rng(seed), n_boot, max_len)


# ---- lm-eval tasks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LmEvalRun:
    """lm-eval tasks scored by our engine (:func:`lmeval`): :func:`tinyllm.eval.lmeval.run.
    evaluate`'s answer. ``tasks[name]["metrics"]["METRIC,FILTER"]`` is ``{"value", "lo", "hi",
    "interval", "n", "n_units", ...}``; ``tasks[name]["per_item"]`` each document's scores."""

    tasks: dict
    groups: dict
    lm_eval_version: str | None
    seed: int
    num_fewshot: int | None
    limit: int | None
    n_boot: int
    cluster_key: str | None

    def to_dict(self) -> dict:
        """The fields as evaluate returns them (JSON-native)."""
        return dataclasses.asdict(self)

    def scores(self, task: str, metric: str | None = None) -> np.ndarray:
        """The per-document scores of ``task`` on ``metric`` (``"acc,none"``; default the
        task's first metric), for :func:`paired`."""
        if task not in self.tasks:
            raise ValueError(f"task: expected one of {sorted(self.tasks)}, got {task!r}")
        per = self.tasks[task]["per_item"]
        key = metric if metric is not None else next(iter(per), None)
        if key not in per:
            raise ValueError(f"metric: expected one of {sorted(per)}, got {metric!r}")
        return np.asarray(per[key], dtype=np.float64)


def _task_specs(tasks: Any) -> tuple[list, str | None, bool]:
    """``(specs, include_path, include_defaults)`` for :func:`tinyllm.eval.lmeval.run.evaluate`:
    a YAML file -> its task config (:func:`tinyllm.eval.lmeval.task_files.task_config`, paths
    resolved against its folder); a folder -> each task its YAMLs define, the folder the
    include path; a name -> itself, found in a folder given beside it, else in lm-eval's
    bundled tasks (indexed only then)."""
    if isinstance(tasks, str | os.PathLike):
        tasks = [tasks] if not isinstance(tasks, str) or "," not in str(tasks) else tasks.split(",")
    if not isinstance(tasks, Sequence) or not tasks:
        raise ValueError(
            f"tasks: expected a task name, a task YAML, a folder of them or a list of those, "
            f"got {tasks!r}"
        )
    specs: list = []
    folders: list[Path] = []
    names: list[str] = []  # found in the folder given beside them, else in lm-eval's bundled
    for t in tasks:
        if not isinstance(t, str | os.PathLike) or not str(t):
            raise ValueError(f"tasks: expected names or paths, got {t!r}")
        p = Path(t)
        if p.is_file():
            specs.append(task_config(p))
        elif p.is_dir():
            folders.append(p)
            for y in sorted(p.glob("*.yaml")):
                name = task_name(y) if y.is_file() and not y.is_symlink() else None
                if name is not None:
                    specs.extend(folder_tasks([name], p))
        elif str(t).endswith((".yaml", ".yml")) or os.sep in str(t):
            raise ValueError(f"tasks: expected a task YAML or folder, got {str(t)!r}: not found")
        else:
            names.append(str(t))
    if len(folders) > 1:
        raise ValueError(f"tasks: expected at most one folder of task YAMLs, got {len(folders)}")
    include = str(folders[0]) if folders else None
    specs.extend(folder_tasks(names, include) if include is not None and names else names)
    return specs, include, include is None and any(isinstance(s, str) for s in specs)


def lmeval(
    model: Any,
    tasks: Any,
    *,
    seed: int = 0,
    num_fewshot: int | None = None,
    limit: int | None = None,
    cluster_key: str | None = None,
    n_boot: int = 1000,
    max_length: int | None = None,
    device: Any = "auto",
    dtype: Any = "auto",
) -> LmEvalRun:
    """lm-eval tasks scored by our engine, every metric with its 95% interval and n
    (:func:`tinyllm.eval.lmeval.run.evaluate`, as ``tinyllm eval lmeval`` runs them).

    ``tasks``: a task name (lm-eval's bundled tasks, indexed only when a name needs them: about
    a minute), a task YAML (its ``include`` and ``data_files`` resolved against its folder, so
    it runs from anywhere), a folder of YAMLs (each task they define; names given beside it are
    found there first), or a list of those. ``seed``: lm-eval's seeds and each task's bootstrap
    stream; ``num_fewshot``, ``limit`` as lm-eval's; ``cluster_key``: a document field whose
    value is the document's unit (default: each document its own). ``max_length``: tokens the
    model reads (default its context). Needs the ``lmeval`` extra.
    """
    specs, include, defaults = _task_specs(tasks)
    m = _loaded(model, max_length, "max_length", device=device, dtype=dtype)
    tok = _own_tokenizer(m)
    backend = {} if max_length is None else {"max_length": max_length}
    out = lmeval_run.evaluate(
        specs,
        m.model,
        tok,
        include_path=include,
        include_defaults=defaults,
        num_fewshot=num_fewshot,
        limit=limit,
        seed=seed,
        n_boot=n_boot,
        backend=backend,
        cluster_key=cluster_key,
    )
    return LmEvalRun(**{f.name: out[f.name] for f in dataclasses.fields(LmEvalRun)})


# ---- the paired comparison --------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison(PairedDifference):
    """``value(a) - value(b)`` on the same items over units (:func:`paired`): the fields of
    :class:`tinyllm.stats.PairedDifference` (``delta``, ``lo``, ``hi``, ``p``, ``se``, ``mde``,
    ``n_units``, ``n_items``, ``value_a``, ``value_b``, ``method``, ...) and ``unit``: what
    they are in (``"bits/byte"`` for two :class:`TextBpb`, else the items' own)."""

    unit: str = "items"

    value = property(lambda self: self.delta, doc="``delta``, as other results' ``value``.")
    n = property(lambda self: self.n_items, doc="``n_items``.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"method": str(self.method)}


def paired(a: Any, b: Any, *, units: Any = None, seed: int = 0, n_perm: int = 10_000) -> Comparison:
    """Paired comparison of two results on the same items, over units
    (:func:`tinyllm.eval.lm.compare`; docs/definitions.md, "Paired tests"): delta =
    ``value(a) - value(b)`` with its 95% interval, the sign-flip permutation p (``n_perm``
    patterns from ``numpy.random.default_rng(seed)`` unless exact) and the minimum detectable
    difference.

    ``a``, ``b``: two :class:`tinyllm.eval.lm.Result` of one task file (their own units), two
    :class:`TextBpb` of one text in one tokenizer (per-token NLLs over their documents; the
    answer in bits per byte, positive: ``a`` is worse), or two 1-d arrays of per-item scores
    (``units``: one id per item; default each item its own unit).
    """
    if isinstance(a, TextBpb) or isinstance(b, TextBpb):
        return _paired_text(a, b, seed, n_perm)
    for name, x in (("a", a), ("b", b)):
        if isinstance(x, LmEvalRun):
            raise TypeError(
                f"{name}: expected per-item scores, got an LmEvalRun: pass run.scores(task)"
            )
    d = lm.compare(a, b, n_perm, np.random.default_rng(seed), units=units)
    return Comparison(**dataclasses.asdict(d))


def _paired_text(a: Any, b: Any, seed: int, n_perm: int) -> Comparison:
    """Two :class:`TextBpb` of one text: :func:`tinyllm.eval.text_compare.paired_nlls` over
    its documents (as ``tinyllm eval ppl --against``), in bits per byte."""
    if not (isinstance(a, TextBpb) and isinstance(b, TextBpb)):
        raise TypeError(
            f"paired: expected two TextBpb, got {type(a).__name__} and {type(b).__name__}"
        )
    if (a.tokenizer, a.n, a.n_bytes) != (b.tokenizer, b.n, b.n_bytes) or not np.array_equal(
        a.doc_starts, b.doc_starts
    ):
        raise ValueError(
            f"paired: expected two bpb results on the same tokens and documents, got {a.n} "
            f"tokens of {a.tokenizer} and {b.n} of {b.tokenizer}"
        )
    rng = np.random.default_rng(seed)
    r = paired_nlls(b.per_item, a.per_item, n_bytes=a.n_bytes, n_perm=n_perm, rng=rng,
                    doc_starts=a.doc_starts, block_len=a.block_len)  # fmt: skip
    d = r["delta_bpb"]
    g = int(r["n_units"])
    return Comparison(
        d["value"], d["lo"], d["hi"], r["p"], r["se_bpb"], g - 1, r["mde_bpb"], g, a.n,
        a.value, b.value, "ratio", r["interval"], exact_sign_flips(g, n_perm), n_perm,
        r["interval_warning"] or "", "bits/byte",
    )  # fmt: skip


# ---- a store's history ------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """One release of a store's history (:func:`releases`): ``state`` (``ok``, ``unreadable``,
    ``no report``), its ``rows`` (report.json's), ``previous`` (the release it is compared
    with), ``verdicts`` (entry -> its verdict against ``previous``), ``regressions`` (the
    compare rows that regressed) and ``error`` (why it cannot be read)."""

    name: str
    state: str
    created_at: str | None
    rows: tuple
    previous: str | None
    verdicts: dict
    regressions: tuple[ComparisonRow, ...]
    error: str | None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return d | {"rows": list(self.rows), "regressions": [r.to_json() for r in self.regressions]}


def releases(store: Any, *, n_perm: int = 10_000, seed: int = 0) -> list[Release]:
    """The releases of ``store`` (a folder, ``s3://bucket/prefix`` or a
    :class:`tinyllm.store.Store`), oldest first, each with its rows and its verdicts against
    the release before it, as ``tinyllm history`` shows them (:func:`tinyllm.history.
    release_history`; nothing written). A local store must exist."""
    if not isinstance(store, Store):
        if not _is_folder(store):
            raise TypeError(f"store: expected a folder, an s3:// URI or a Store, got {store!r}")
        if "://" not in str(store) and not os.path.isdir(store):
            raise ValueError(f"store: expected an existing store folder, got {str(store)!r}")
        store = open_store(store)
    out = []
    for step in release_history(store, load_history(store), n_perm=n_perm, seed=seed):
        v = step.view
        rep = v.report
        out.append(
            Release(
                name=v.name,
                state=step.state,
                created_at=None if rep is None else rep.created_at,
                rows=() if rep is None else tuple(r.to_json() for r in rep.rows),
                previous=step.previous,
                verdicts=step.verdicts,
                regressions=tuple(step.regressions()),
                error=v.error,
            )
        )
    return out
