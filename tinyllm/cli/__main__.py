"""``python -m tinyllm.cli``: the ``tinyllm`` command."""

from tinyllm.cli import main

main()
