"""Orchestration above the tinyllm library: the EvalSuite Prefect flow and its tasks, the local
and PostgreSQL-backed Prefect servers, and the demo runner. The library (``tinyllm``, except its
CLI) never imports this package or Prefect; the CLI is the one layer above both."""
