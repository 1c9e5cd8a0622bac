"""The JSON schemas of tinyllm's documents, shipped inside the package, and their one loader.

* ``eval-results.schema.json``: a zoo report (hand-written, its tables written in by
  :func:`tinyllm.eval.kinds.write_report_schema`; formats/manifest.md, tinyllm/report.py)
* ``compare.schema.json``: a release comparison (hand-written; formats/store.md, tinyllm/compare.py)
* ``manifest.schema.json``: a zoo manifest (generated from :class:`tinyllm.report.Manifest`)

The files are package data read through :mod:`importlib.resources`, so an installed wheel
validates exactly as the source tree does. :func:`load_schema` parses one;
:func:`build_validator` checks it against draft 2020-12 (the ``$schema`` of all three) and
returns the jsonschema validator the report and compare modules validate with.

    >>> load_schema(schema_file(COMPARE), "compare")["$schema"]
    'https://json-schema.org/draft/2020-12/schema'
"""

from __future__ import annotations

import json
import os
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

REPORT = "eval-results.schema.json"
COMPARE = "compare.schema.json"
MANIFEST = "manifest.schema.json"
NAMES = (REPORT, COMPARE, MANIFEST)
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_file(name: str) -> Traversable:
    """The packaged file of the schema ``name`` (one of :data:`NAMES`); a real path when tinyllm
    is installed as files (a wheel, an editable install, the source tree)."""
    if name not in NAMES:
        raise ValueError(f"schema: expected one of {', '.join(NAMES)}, got {name!r}")
    return resources.files(__name__).joinpath(name)


def load_schema(file: Traversable | os.PathLike[str], what: str) -> dict:
    """Parse the schema in ``file`` (UTF-8 JSON); ``what`` names it in the error.

    A missing file is a :class:`FileNotFoundError` naming it: ``<file>: the report schema is
    missing (tinyllm reads it from its package data, tinyllm/schemas/; reinstall tinyllm)``.
    """
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{file}: the {what} schema is missing (tinyllm reads it from its package data, "
            f"tinyllm/schemas/; reinstall tinyllm)"
        ) from None


def build_validator(schema: dict) -> Any:
    """jsonschema's own draft 2020-12 validator of ``schema``, after checking the schema itself
    (:class:`jsonschema.SchemaError` if invalid). ``$schema`` must name draft 2020-12 or
    nothing (ValueError otherwise).

    The class is named, not looked up from ``$schema``: ``validator_for`` returns whichever
    validator a library registered last for that dialect (Prefect registers one of its own).
    """
    # imported here: jsonschema costs start-up time, and only validating needs it
    from jsonschema import Draft202012Validator

    dialect = schema.get("$schema", DIALECT)
    if dialect != DIALECT:
        raise ValueError(f"schema: expected $schema {DIALECT!r}, got {dialect!r}")
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def best_problem(errors: list) -> tuple[str, str]:
    """The most relevant of a validator's ``errors`` (jsonschema's ``best_match``) as
    ``(where, message)``: ``where`` its path in the document joined by '/' ("(top level)" for
    the document itself)."""
    from jsonschema.exceptions import best_match  # imported here, as in build_validator

    e = best_match(errors)
    return "/".join(map(str, e.absolute_path)) or "(top level)", e.message


def problems_text(errors: list, limit: int = 200) -> str:
    """A validator's non-empty ``errors`` in one line: ``at <where>: <message>`` of the most
    relevant (:func:`best_problem`, its message cut at ``limit`` characters) and how many more
    there are. Example: ``at rows/0/n: 'x' is not of type 'integer' (and 1 more problem)``."""
    where, msg = best_problem(errors)
    msg = msg if len(msg) <= limit else msg[:limit] + "..."
    more = len(errors) - 1
    return f"at {where}: {msg}" + (f" (and {more} more problem{'s' * (more != 1)})" if more else "")
