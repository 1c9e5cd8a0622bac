"""The EvalSuite flow on a 2-process local Dask cluster (prefect-dask), against a standing
Prefect server (the session's prefect_test_harness): same rows as the thread runner; a worker
process killed with SIGKILL in the middle of a task."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin
from prefect.task_runners import ThreadPoolTaskRunner
from prefect_dask import DaskTaskRunner
from standing import ENTRIES, build_zoo, strip

from tinyllm_suite.eval_suite import configured_suite, eval_suite, make_task_runner
from tinyllm_suite.eval_tasks import entry_cache_key

ENTRIES_BY_NAME = {e["name"]: e for e in ENTRIES}


class KillInLoad(WorkerPlugin):
    """In each Dask worker process: wrap ``zoo.load_model`` (called inside the Prefect task run,
    after the task run has started) so that loading ``target`` SIGKILLs the worker process.
    ``once``: only the first attempt across all workers dies (an O_EXCL marker file records the
    pid it killed); otherwise every attempt dies."""

    def __init__(self, target: str, marker: str, once: bool) -> None:
        self.target, self.marker, self.once = target, marker, once

    def setup(self, worker) -> None:
        from tinyllm.eval import zoo

        real = getattr(zoo.load_model, "__wrapped_real__", zoo.load_model)
        target, marker, once = self.target, self.marker, self.once

        def load_model(path, **kw):
            if Path(path).name == target:
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    fd = None
                if fd is not None or not once:
                    if fd is not None:
                        os.write(fd, str(os.getpid()).encode())
                        os.close(fd)
                    os.kill(os.getpid(), 9)
            return real(path, **kw)

        load_model.__wrapped_real__ = real
        zoo.load_model = load_model

    def teardown(self, worker) -> None:
        from tinyllm.eval import zoo

        zoo.load_model = getattr(zoo.load_model, "__wrapped_real__", zoo.load_model)


@pytest.fixture(scope="module")
def cluster():
    """A local Dask cluster of 2 single-threaded worker processes, shared by this module."""
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cl,
        Client(cl) as client,
    ):
        yield cl, client


@pytest.fixture
def manifest(tmp_path):
    return build_zoo(tmp_path / "zoo")


def test_task_runner_is_configuration():
    assert isinstance(make_task_runner(), ThreadPoolTaskRunner)
    local = make_task_runner(workers=2)
    assert isinstance(local, DaskTaskRunner)
    assert local.cluster_kwargs["n_workers"] == 2 and local.cluster_kwargs["processes"]
    remote = make_task_runner(dask_address="tcp://10.0.0.5:8786")
    assert isinstance(remote, DaskTaskRunner) and remote.address == "tcp://10.0.0.5:8786"
    with pytest.raises(ValueError, match="got both"):
        make_task_runner(dask_address="tcp://10.0.0.5:8786", workers=2)
    with pytest.raises(ValueError, match=">= 1, got 0"):
        make_task_runner(workers=0)
    # one flow: the Dask variant is the same function with another runner
    assert configured_suite(workers=2).fn is eval_suite.fn


def test_env_address_selects_dask(monkeypatch):
    monkeypatch.setenv("TINYLLM_DASK_ADDRESS", "tcp://10.0.0.7:8786")
    runner = make_task_runner()
    assert isinstance(runner, DaskTaskRunner) and runner.address == "tcp://10.0.0.7:8786"


def test_dask_rows_equal_thread_rows(cluster, manifest, tmp_path):
    cl, client = cluster

    def executed() -> int:
        return sum(client.run(lambda dask_worker: dask_worker.state.executed_count).values())

    before = executed()
    dask_out = configured_suite(dask_address=cl.scheduler_address)(
        manifest=manifest, release="r1", store=str(tmp_path / "dask-store"), seed=5
    )
    thread_out = eval_suite(
        manifest=manifest, release="r1", store=str(tmp_path / "thread-store"), seed=5
    )
    assert [r["status"] for r in dask_out["report"]["rows"]] == ["ok", "ok", "ok"]
    assert strip(dask_out["report"]["rows"]) == strip(thread_out["report"]["rows"])
    assert executed() - before == 3  # the 3 score tasks ran in the Dask worker processes


def test_worker_killed_mid_task_is_retried_and_scored(cluster, manifest, tmp_path):
    cl, client = cluster
    marker = tmp_path / "killed.pid"
    client.register_plugin(KillInLoad("bigram2", str(marker), once=True), name="kill")
    try:
        out = configured_suite(dask_address=cl.scheduler_address)(
            manifest=manifest, release="r1", store=str(tmp_path / "store")
        )
    finally:
        client.unregister_worker_plugin("kill")
    assert marker.is_file(), "expected a worker to be killed while loading bigram2"
    killed = int(marker.read_text())
    assert killed not in client.run(os.getpid).values()  # that process is gone
    rows = {r["name"]: r for r in out["report"]["rows"]}
    assert [r["status"] for r in out["report"]["rows"]] == ["ok", "ok", "ok"]
    ref = eval_suite(manifest=manifest, release="r1", store=str(tmp_path / "ref"))
    assert strip(out["report"]["rows"]) == strip(ref["report"]["rows"])
    assert rows["bigram2"]["value"] is not None


def test_entry_whose_worker_dies_every_time_becomes_an_error_row(cluster, manifest, tmp_path):
    cl, client = cluster
    # distributed.scheduler.allowed-failures (default 3) was read when the scheduler started:
    # lower it for this test, so the entry is given up after 2 attempts (2 killed workers)
    old = cl.scheduler.allowed_failures
    cl.scheduler.allowed_failures = 1
    marker = tmp_path / "killed.pid"
    client.register_plugin(KillInLoad("kn3.safetensors", str(marker), once=False), name="kill")
    try:
        out = configured_suite(dask_address=cl.scheduler_address)(
            manifest=manifest, release="r1", store=str(tmp_path / "store")
        )
    finally:
        client.unregister_worker_plugin("kill")
        cl.scheduler.allowed_failures = old
    rows = {r["name"]: r for r in out["report"]["rows"]}
    assert rows["kn3"]["status"] == "error" and rows["kn3"]["value"] is None
    assert rows["kn3"]["error"]["type"] == "KilledWorker"
    assert "died while running it" in rows["kn3"]["error"]["message"]
    assert rows["bigram"]["status"] == "ok" and rows["bigram2"]["status"] == "ok"
    assert len(out["report"]["rows"]) == 3  # the flow completed and published every row


def test_cli_dask_options_need_the_flow_and_exclude_each_other(manifest):
    from typer.testing import CliRunner

    from tinyllm.cli import app

    base = ["eval", "--suite", "zoo", "--manifest", manifest]
    r = CliRunner().invoke(app, [*base, "--workers", "2"])
    assert r.exit_code == 2 and "need --release without --out" in r.output
    r = CliRunner().invoke(app, [*base, "--release", "x", "--workers", "2", "--dask-address", "a"])
    assert r.exit_code == 2 and "expected --dask-address or --workers, got both" in r.output


def test_dask_error_row_reaches_the_flow_without_a_cache_record(cluster, tmp_path):
    """An error row is returned by its task run but not written to the result cache:
    from a Dask worker process it still reaches the flow; only the ok row has a cache record."""
    cl, _ = cluster
    wrong = {
        "name": "wrong",
        "family": "bigram",
        "checkpoint": "kn3.safetensors",
        "data": "val.tok",
    }
    m = build_zoo(tmp_path / "zoo", [ENTRIES_BY_NAME["bigram"], wrong])
    out = configured_suite(dask_address=cl.scheduler_address)(
        manifest=m, release="r1", store=str(tmp_path / "store")
    )
    rows = {r["name"]: r for r in out["report"]["rows"]}
    assert rows["bigram"]["status"] == "ok" and out["cached"] == []
    assert rows["wrong"]["status"] == "error" and rows["wrong"]["error"]["type"] == "ValueError"
    assert (
        "expected a 'bigram' checkpoint, got tl_arch 'ngram'" in rows["wrong"]["error"]["message"]
    )
    keys = {
        e["name"]: entry_cache_key(None, {"entry": e, "base_dir": str(tmp_path / "zoo"), "seed": 0})
        for e in (ENTRIES_BY_NAME["bigram"], wrong)
    }
    assert None not in keys.values()
    assert sorted(os.listdir(os.environ["TINYLLM_CACHE_DIR"])) == [keys["bigram"]]
