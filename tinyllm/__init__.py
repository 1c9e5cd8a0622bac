"""tinyllm: an evaluation system for small language models (see README.md).

The Python API (docs/api.md; :mod:`tinyllm.api`), one call each::

    tinyllm.bpb(model, text_or_path)       # bits per byte, interval over documents
    tinyllm.task(model, task_path)         # multiple choice, interval over units
    tinyllm.lmeval(model, tasks)           # lm-eval tasks: a name, a YAML path or a folder
    tinyllm.paired(a, b)                   # paired comparison over units
    tinyllm.releases(store)                # a store's releases with their rows

``model`` is a model object (from a training loop) or a folder. The names are loaded on first
use (PEP 562): ``import tinyllm`` stays cheap (no torch) for every command line call.
``tinyllm.compare`` and ``tinyllm.history`` stay the modules of release comparison and history.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = ("bpb", "task", "lmeval", "paired", "releases", "TextBpb", "LmEvalRun", "Comparison")
_API += ("Release",)
__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    """The API's names, imported from :mod:`tinyllm.api` on first use."""
    if name in _API:
        value = getattr(importlib.import_module("tinyllm.api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tinyllm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
