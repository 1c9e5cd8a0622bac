"""--track: a release's rows, intervals and verdicts in a real local MLflow file store (read back
with MLflow's client) and in W&B's offline run files (read back record by record); an unknown
tracker or a missing extra is one line; a tracker that fails is reported, never raised."""

from __future__ import annotations

import glob
import importlib.util
import json
import struct
from pathlib import Path

import pytest
from export_helpers import two_releases
from typer.testing import CliRunner

from tinyllm import trackers
from tinyllm.cli import app


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return two_releases(tmp_path_factory.mktemp("trackers") / "store")[0]


def expected_numbers(store, release: str) -> dict[str, float]:
    """What a tracker must hold, from the stored report and comparison themselves: each row's
    value, interval ends, n and n_units; each compared row's delta, p and Holm p."""
    want = {}
    for r in store.read_report(release)["rows"]:
        for k in ("value", "lo", "hi", "n", "n_units"):
            if r.get(k) is not None:
                want[f"{r['name']}/{k}"] = float(r[k])
    for c in store.read_compare(release).rows:
        for k in ("delta", "p", "p_adjusted"):
            if getattr(c, k) is not None:
                want[f"{c.name}/{k}"] = float(getattr(c, k))
    return want


def expected_verdicts(store, release: str) -> dict[str, str]:
    return {f"{c.name}/vs_previous": c.verdict for c in store.read_compare(release).rows}


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses file: without it
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return uri


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    return tmp_path


def test_mlflow_run_holds_the_rows_intervals_and_verdicts(store, mlflow_store, tmp_path):
    from mlflow.tracking import MlflowClient

    (t,) = trackers.track_release(store, "r2", ["mlflow"])
    assert t.error is None and t.where.startswith(mlflow_store + "#")
    client = MlflowClient(tracking_uri=mlflow_store)
    run = client.get_run(t.where.split("#")[1])
    assert run.info.run_name == "r2" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "tinyllm"
    assert run.data.metrics == expected_numbers(store, "r2")
    tags = run.data.tags
    assert {k: tags[k] for k in expected_verdicts(store, "r2")} == expected_verdicts(store, "r2")
    assert tags["broken/status"] == "error" and tags["cls/beats_baseline"] == "not distinguishable"
    assert run.data.params["release"] == "r2" and run.data.params["previous"] == "r1"
    rows = json.loads(
        Path(client.download_artifacts(run.info.run_id, "rows.json", str(tmp_path))).read_text()
    )
    assert [(r["entry"], r["value"]) for r in rows] == [
        (r["name"], r["value"]) for r in store.read_report("r2")["rows"]
    ]


def test_mlflow_without_a_tracking_uri_logs_to_a_sqlite_file_in_the_working_folder(
    store, mlflow_store, tmp_path, monkeypatch
):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(tmp_path)
    (t,) = trackers.track_release(store, "r2", ["mlflow"])
    assert t.error is None and t.where.startswith("sqlite:///mlflow.db#")
    assert (tmp_path / "mlflow.db").is_file()
    run = MlflowClient(tracking_uri="sqlite:///mlflow.db").get_run(t.where.split("#")[1])
    assert run.data.metrics == expected_numbers(store, "r2")


def wandb_records(path: str):
    """The protobuf records of a W&B ``.wandb`` run file (LevelDB's log format: 32 KiB blocks of
    chunks, each ``crc32 (4) length (2) type (1)``; 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        room = 32768 - pos % 32768
        if room < 7:
            pos += room
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + n], pos + 7 + n
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def test_wandb_offline_run_holds_the_rows_intervals_and_verdicts(store, wandb_offline):
    import wandb

    (t,) = trackers.track_release(store, "r2", ["wandb"])
    assert t.error is None and t.where.startswith(str(wandb_offline / "wandb" / "offline-run-"))
    wandb.teardown()  # the run is finished; its service writes the run file out when it stops
    (path,) = glob.glob(f"{t.where}/run-*.wandb")
    history, summary, name, project = {}, {}, None, None
    kinds = []
    for rec in wandb_records(path):
        kind = rec.WhichOneof("record_type")
        kinds.append(kind)
        if kind == "run":
            name, project = rec.run.display_name, rec.run.project
        elif kind == "history":
            history.update(
                {"/".join(i.nested_key) or i.key: i.value_json for i in rec.history.item}
            )
        elif kind == "summary":
            summary.update(
                {"/".join(i.nested_key) or i.key: i.value_json for i in rec.summary.update}
            )
    assert (name, project) == ("r2", "tinyllm"), (kinds, Path(path).stat().st_size)
    want = expected_numbers(store, "r2")
    assert {k: json.loads(history[k]) for k in want} == want
    assert not [k for k in history if "/" in k and k not in want and not k.startswith("rows/")]
    verdicts = expected_verdicts(store, "r2")
    assert {k: json.loads(summary[k]) for k in verdicts} == verdicts
    (table,) = glob.glob(f"{t.where}/files/media/table/rows_*.table.json")
    doc = json.loads(Path(table).read_text())
    rows = [dict(zip(doc["columns"], line, strict=True)) for line in doc["data"]]
    assert [(r["entry"], r["value"], r["lo"], r["hi"]) for r in rows] == [
        (r["name"], r["value"], r["lo"], r["hi"]) for r in store.read_report("r2")["rows"]
    ]


def test_a_failing_tracker_is_one_line_and_the_next_one_still_runs(
    store, mlflow_store, wandb_offline, monkeypatch
):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # MLflow 3 now refuses the file store
    bad, good = trackers.track_release(store, "r1", ["mlflow", "wandb"])
    assert bad.tracker == "mlflow" and bad.where is None
    assert bad.error.startswith("MlflowException: ") and "MLFLOW_ALLOW_FILE_STORE" in bad.error
    assert "\n" not in bad.error
    assert good.tracker == "wandb" and good.error is None


def test_cli_export_track_logs_or_warns_in_one_line(store, mlflow_store, monkeypatch):
    res = CliRunner().invoke(app, ["export", "r2", "--store", str(store.root), "--track", "mlflow"])
    assert res.exit_code == 0, res.output
    assert f"r2 logged to mlflow: {mlflow_store}#" in res.output
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # a new file store (MLflow keeps each it made)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store + "-refused")
    res = CliRunner().invoke(app, ["export", "r2", "--store", str(store.root), "--track", "mlflow"])
    assert res.exit_code == 1
    assert res.stderr.startswith("warning: r2 not logged to mlflow: MlflowException: ")
    assert len(res.stderr.strip().splitlines()) == 1


def test_unknown_tracker_and_missing_extra_are_one_line(monkeypatch):
    real = importlib.util.find_spec
    present = lambda name, *a: object() if name in ("mlflow", "wandb") else real(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", present)
    assert trackers.check_trackers(["wandb", "mlflow", "wandb"]) == ("wandb", "mlflow")
    with pytest.raises(trackers.TrackerError) as ei:
        trackers.check_trackers(["mlflow", "neptune"])
    assert str(ei.value) == "--track: expected one of mlflow, wandb, got 'neptune'"
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(trackers.TrackerError) as ei:
        trackers.check_trackers(["mlflow"])
    assert str(ei.value) == (
        "--track mlflow: expected the mlflow extra, got no module 'mlflow': "
        "pip install 'tinyllm[mlflow]'"
    )
    res = CliRunner().invoke(app, ["export", "r2", "--track", "mlflow"])
    assert res.exit_code == 2
    assert res.output.strip() == f"error: {ei.value}"
