"""The ``tinyllm eval`` group, one module per sub-command, each registering it on
:data:`tinyllm.cli.app.eval_app`: :mod:`~tinyllm.cli.eval.ppl` (``eval ppl``),
:mod:`~tinyllm.cli.eval.task` (``eval task``), :mod:`~tinyllm.cli.eval.lmeval` (``eval lmeval``),
and :mod:`~tinyllm.cli.eval.suite` the group's own call (``eval --suite zoo``);
:mod:`~tinyllm.cli.eval.options` holds the flags they share. The sub-commands are imported here in
the order ``tinyllm eval --help`` lists them."""

from tinyllm.cli.eval import ppl, task

# isort: split
from tinyllm.cli.eval import lmeval, suite

__all__ = ["lmeval", "ppl", "suite", "task"]
