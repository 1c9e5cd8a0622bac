"""Entry point of the EvalSuite flow in the checkout: prefect.yaml's ``release-eval`` deployment
loads ``flows/eval_suite.py:eval_suite``, and ``python flows/eval_suite.py --help`` runs it from a
shell. The flow itself is :mod:`tinyllm_suite.eval_suite` (installed with the package)."""

from tinyllm_suite.eval_suite import eval_suite

__all__ = ["eval_suite"]

if __name__ == "__main__":
    import typer

    typer.run(eval_suite)
