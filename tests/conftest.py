"""Test-wide settings: Prefect offline and quiet, torch on one thread (the box has 2 cores)."""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # before prefect is imported
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")

import torch  # noqa: E402

torch.set_num_threads(1)
