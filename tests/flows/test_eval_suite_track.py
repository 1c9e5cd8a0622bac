"""The EvalSuite flow's --track: the published release, compared, logged to MLflow (a real local
file store, read back with its client); an unknown tracker fails before anything runs; a
tracker that fails leaves the release published and is one warning line."""

import numpy as np
import pytest
import yaml

from tinyllm.eval import zoo
from tinyllm.models import bigram, ngram
from tinyllm.store import open_store
from tinyllm.tokens import write_tokens
from tinyllm.trackers import TrackerError
from tinyllm_suite.eval_suite import eval_suite

TEXT = b"the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat. " * 6


@pytest.fixture
def manifest(tmp_path):
    """Two small real models (a bigram, a 3-gram) and a val token file."""
    data = np.frombuffer(TEXT, dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", data[:200])
    bigram.save(bigram.train(bigram.Config(k=0.5), data, seed=0), tmp_path / "bigram")
    ngram.save(ngram.train(ngram.Config(order=3), data, seed=0), tmp_path / "kn3.safetensors")
    entries = [
        {"name": "bigram", "family": "bigram", "checkpoint": "bigram", "data": "val.tok"},
        {"name": "kn3", "family": "ngram", "checkpoint": "kn3.safetensors", "data": "val.tok"},
    ]
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": entries}))
    return str(tmp_path / "zoo.yaml")


@pytest.fixture
def mlflow_uri(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return uri


def test_flow_logs_the_published_release_and_its_verdicts_to_mlflow(manifest, tmp_path, mlflow_uri):
    from mlflow.tracking import MlflowClient

    store = str(tmp_path / "store")
    eval_suite(manifest=manifest, release="r1", store=store, track=["mlflow"])
    out = eval_suite(manifest=manifest, release="r2", store=store, seed=1, track=["mlflow"])
    (t,) = out["tracked"]
    assert t["tracker"] == "mlflow" and t["error"] is None
    run = MlflowClient(tracking_uri=mlflow_uri).get_run(t["where"].split("#")[1])
    assert run.info.run_name == "r2"
    st = open_store(store)
    want = {}
    for r in st.read_report("r2")["rows"]:
        want.update(
            {f"{r['name']}/{k}": float(r[k]) for k in ("value", "lo", "hi", "n", "n_units")}
        )
    for c in st.read_compare("r2").rows:
        want.update({f"{c.name}/{k}": float(getattr(c, k)) for k in ("delta", "p", "p_adjusted")})
        assert run.data.tags[f"{c.name}/vs_previous"] == c.verdict
    assert run.data.metrics == want
    assert run.data.params["previous"] == "r1"


def test_an_unknown_tracker_fails_before_anything_runs(manifest, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(zoo, "load_model", lambda *a, **k: calls.append(a))
    with pytest.raises(TrackerError, match="--track: expected one of mlflow, wandb, got 'tb'"):
        eval_suite(manifest=manifest, release="r1", store=str(tmp_path / "store"), track=["tb"])
    assert calls == [] and not (tmp_path / "store").exists()


def test_cli_a_failing_tracker_warns_and_the_release_stays_published(
    manifest, tmp_path, mlflow_uri, monkeypatch
):
    from typer.testing import CliRunner

    from tinyllm.cli import app

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # MLflow 3 refuses its file store without it
    store = str(tmp_path / "store")
    args = ["eval", "--suite", "zoo", "--manifest", manifest, "--store", store]
    res = CliRunner().invoke(app, [*args, "--release", "v1", "--track", "mlflow"])
    assert res.exit_code == 0, res.output
    (line,) = [x for x in res.stderr.splitlines() if "not logged" in x]
    assert line.startswith("warning: v1 not logged to mlflow: MlflowException: ")
    assert [r["name"] for r in open_store(store).read_report("v1")["rows"]] == ["bigram", "kn3"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "r.json"), "--track", "mlflow"])
    assert res.exit_code == 2
    assert "--track needs --release" in res.output and not (tmp_path / "r.json").exists()
