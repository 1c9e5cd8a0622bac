"""Flow tests run against Prefect's own test harness (a temporary server and database)."""

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


@pytest.fixture(autouse=True, scope="session")
def prefect_db():
    from prefect.testing.utilities import prefect_test_harness

    # the temporary server starts in ~10 s alone; a loaded 2-core box has measured over 60 s
    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own result cache, so one test's cached scores never serve another."""
    monkeypatch.setenv("TINYLLM_CACHE_DIR", str(tmp_path / "prefect-cache"))
