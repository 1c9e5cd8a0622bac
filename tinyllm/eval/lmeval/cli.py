"""lm-eval's own command line with our backend registered: ``lm_eval --model tinyllm``.

```text
python -m tinyllm.eval.lmeval.cli --model tinyllm --model_args pretrained=DIR[,dtype=float32] \\
    --tasks arc_easy --output_path runs/a --log_samples
```

Every argument is lm-eval's (``lm_eval --help``); this module only imports
:mod:`tinyllm.eval.lmeval.backend` (which registers :class:`~.backend.TinyLLM` as ``tinyllm``)
before handing the command line to ``lm_eval.__main__.cli_evaluate``: lm-eval's own ``lm_eval``
command never imports tinyllm, so ``--model tinyllm`` is unknown there. The model args are
:func:`tinyllm.eval.lmeval.backend.model_args`'s. The numbers are lm-eval's own (its stderr,
no intervals over units): ``tinyllm eval lmeval`` gives those.
"""

from __future__ import annotations

from tinyllm.eval.lmeval import MissingLmEvalError


def main() -> None:
    """Register ``tinyllm`` with lm-eval, then run lm-eval's CLI on ``sys.argv``."""
    try:
        from tinyllm.eval.lmeval import backend  # noqa: F401  (registers the model "tinyllm")
    except MissingLmEvalError as e:  # the extra to install, in one line
        raise SystemExit(f"error: {e}") from None
    from lm_eval.__main__ import cli_evaluate  # the lmeval extra: backend's import has checked it

    cli_evaluate()


if __name__ == "__main__":
    main()
