"""The ``tinyllm`` command. Sub-commands are thin: they parse, call the library, print.

Where a command lives: ``tinyllm <group> <command>`` in the group's module
``tinyllm/cli/<group>.py``, or, for the ``eval`` group (sub-commands of their own size), in its
package, one module per sub-command ``tinyllm/cli/eval/<command>.py``; ``tinyllm <command>`` in
``tinyllm/cli/<command>.py``, or in the module of the command it works beside. Each module
registers its commands on the app of :mod:`tinyllm.cli.app`:

* :mod:`tinyllm.cli.eval` -- ``eval ppl``, ``eval task``, ``eval lmeval`` and ``eval --suite zoo``
  (the ``eval`` group's own call), one module each;
* :mod:`tinyllm.cli.demo` -- ``demo`` (the main job on the embedded defaults);
* :mod:`tinyllm.cli.compare` -- ``compare`` (two releases of a store, row by row);
* :mod:`tinyllm.cli.history` -- ``history``, ``dashboard`` (the store's release history);
* :mod:`tinyllm.cli.sweep` -- ``sweep`` (the checkpoints of a training run, by step);
* :mod:`tinyllm.cli.export` -- ``export`` (a release as CSV / Parquet, to MLflow or W&B);
* :mod:`tinyllm.cli.judge` -- ``judge`` (lm-eval runs made anywhere, from their samples);
* :mod:`tinyllm.cli.plan` -- ``plan`` (how many units a row needs to detect a change);
* :mod:`tinyllm.cli.zoo` -- ``zoo build``; :mod:`tinyllm.cli.task` -- ``task import-lmeval``;
* :mod:`tinyllm.cli.server` -- ``server start``, ``server stop``.

A command module imports at its top what ``tinyllm --help`` and a shell-completion TAB (each a
fresh process) can afford; torch, lm-eval, transformers and prefect (seconds), numpy, scipy and
the store (about a second), jinja2 (a tenth) are imported inside the function that needs them,
with a comment naming what they load.

:func:`main` is the entry point (``tinyllm = "tinyllm.cli:main"``) and the CLI's one error
boundary; it also prints every Python warning as one line.
"""

from __future__ import annotations

import sys
import warnings

# the commands are listed in --help in the order they register: export (imported by the eval
# group's suite), then demo and compare before history
from tinyllm.cli import eval as eval_group

# isort: split
from tinyllm.cli import demo

# isort: split
from tinyllm.cli import compare

# isort: split
from tinyllm.cli import export, history, judge, plan, server, sweep, task, zoo
from tinyllm.cli.app import DEBUG, app
from tinyllm.cli.common import MAX_N_PERM
from tinyllm.console import error_line, warning_line

__all__ = ["DEBUG", "MAX_N_PERM", "app", "error_line", "main", "show_warning"]
COMMAND_MODULES = eval_group, demo, compare, history, sweep, export, judge, plan, zoo, task, server
"""The command groups, imported for the commands they register on :data:`app`."""

_python_showwarning = warnings.showwarning


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """:data:`warnings.showwarning` of the CLI: ``warning: <message>`` as one line on stderr
    (:func:`tinyllm.console.warning_line`), no category, file, line or source; with ``--debug``
    Python's own format."""
    if DEBUG["on"]:
        _python_showwarning(message, category, filename, lineno, file, line)
        return
    print(warning_line(message), file=sys.stderr if file is None else file)


def main() -> None:
    """The ``tinyllm`` command, with the CLI's one error boundary around every sub-command.

    Any exception that reaches here is printed as ONE line on stderr (:func:`error_line`) and
    the exit status is 1; ``--debug`` (or ``TINYLLM_DEBUG=1``) shows the full traceback instead.
    Usage errors keep click's status 2; Ctrl-C exits with 130. Every Python warning is one line
    (:func:`show_warning`).
    """
    warnings.showwarning = show_warning
    try:
        app()
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the boundary: every error becomes one line
        if DEBUG["on"]:
            raise
        print(f"{error_line(exc)}  (--debug: full traceback)", file=sys.stderr)
        sys.exit(1)
