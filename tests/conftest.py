"""Test-wide settings: Prefect offline and quiet, torch on one thread (the box has 2 cores);
the suite's S3 (moto's server behind tests/s3server.py's write lock)."""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # before prefect is imported
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def moto_endpoint():
    """The URL of moto's S3 on 127.0.0.1, one server for the session, with S3's atomic
    conditional writes (tests/s3server.py: moto's own server lets two of them both win)."""
    from s3server import MotoS3Server

    server = MotoS3Server().start()
    yield server.url
    server.stop()


@pytest.fixture
def s3_env(moto_endpoint, monkeypatch, tmp_path):
    """An empty S3 at ``moto_endpoint`` that boto3 finds through the environment alone."""
    from s3server import aws_env, reset_s3

    # every test starts from an empty S3: moto keeps its buckets in the process, across servers
    # and across pytest sessions in one process (mutmut runs the suite more than once)
    reset_s3(moto_endpoint)
    for k, v in aws_env(moto_endpoint, tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return moto_endpoint
