"""The EvalSuite flow under prefect_test_harness: fan-out, retries, error rows, cache, store."""

import json
import threading

import numpy as np
import pytest
import yaml
from zoo_rows import assert_flow_rows_equal_run_zoo, assert_holm, entry_level

from tinyllm.eval import zoo
from tinyllm.models import bigram, ngram
from tinyllm.store import open_store
from tinyllm.tokens import write_tokens
from tinyllm_suite.eval_suite import eval_suite

TEXT = (
    b"the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat by the log. "
) * 8


@pytest.fixture
def zoo_dir(tmp_path):
    """A small real zoo: two bigrams and a 3-gram trained from counts, and a val token file."""
    data = np.frombuffer(TEXT, dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", data[:300])
    bigram.save(bigram.train(bigram.Config(k=0.5), data, seed=0), tmp_path / "bigram")
    bigram.save(bigram.train(bigram.Config(k=2.0), data, seed=0), tmp_path / "bigram2")
    ngram.save(ngram.train(ngram.Config(order=3), data, seed=0), tmp_path / "kn3.safetensors")
    return tmp_path


def write_manifest(folder, entries, name="zoo.yaml"):
    doc = {"suite": "zoo", "entries": entries}
    (folder / name).write_text(yaml.safe_dump(doc))
    return str(folder / name)


def entry(name, family, checkpoint, data="val.tok", **options):
    e = {"name": name, "family": family, "checkpoint": checkpoint, "data": data}
    if options:
        e["options"] = options
    return e


HEALTHY = [
    entry("bigram", "bigram", "bigram"),
    entry("bigram2", "bigram", "bigram2"),
    entry("kn3", "ngram", "kn3.safetensors"),
]


def strip(rows):
    """Rows without wall time (two runs of the flow store the same scores under the same names)."""
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


REAL_LOAD_MODEL = zoo.load_model


class CountingLoader:
    """Wraps the real zoo.load_model: counts calls per checkpoint and can inject failures."""

    def __init__(self, monkeypatch, fail=None):
        self.real = REAL_LOAD_MODEL
        self.calls: dict[str, int] = {}
        self.fail = fail or {}
        self.lock = threading.Lock()
        monkeypatch.setattr(zoo, "load_model", self)

    def __call__(self, path, **kw):
        key = str(path).rsplit("/", 1)[-1]
        with self.lock:
            self.calls[key] = self.calls.get(key, 0) + 1
            n = self.calls[key]
        exc = self.fail.get(key)
        if exc is not None and n <= exc[1]:
            raise exc[0]
        return self.real(path, **kw)


def test_fan_out_with_broken_entry_gives_error_row_and_scores_the_rest(zoo_dir, tmp_path):
    m = write_manifest(zoo_dir, [*HEALTHY, entry("ghost", "bigram", "missing-dir")])
    out = eval_suite(manifest=m, release="r1", store=str(tmp_path / "store"))
    rows = {r["name"]: r for r in out["report"]["rows"]}
    assert [r["name"] for r in out["report"]["rows"]] == ["bigram", "bigram2", "kn3", "ghost"]
    assert rows["ghost"]["status"] == "error"
    assert rows["ghost"]["error"]["type"] == "FileNotFoundError"
    assert "missing-dir" in rows["ghost"]["error"]["message"]
    assert all(rows[n]["status"] == "ok" for n in ("bigram", "bigram2", "kn3"))
    st = open_store(tmp_path / "store")
    assert st.read_report("r1")["rows"] == out["report"]["rows"]
    assert st.items_loader("r1")("kn3").size == rows["kn3"]["n"]
    # items are content-addressed: the row names the very file its scores are in
    assert rows["kn3"]["items"].startswith("items/kn3-")
    assert st.exists(f"releases/r1/{rows['kn3']['items']}")


def test_flow_rows_equal_run_zoo_rows(zoo_dir, tmp_path):
    m = write_manifest(zoo_dir, HEALTHY)
    out = eval_suite(manifest=m, release="r1", store=str(tmp_path / "store"), seed=3)
    ref = zoo.run_zoo(m, seed=3)
    st = open_store(tmp_path / "store")
    # every row, its items and its baseline's (the unigram's per-token NLLs) as run_zoo has them
    assert assert_flow_rows_equal_run_zoo(out["report"]["rows"], ref, st, "r1") == 3
    assert out["report"]["manifest_sha256"] == ref.manifest_sha256


def test_transient_oserror_is_retried_and_scored(zoo_dir, tmp_path, monkeypatch):
    loader = CountingLoader(monkeypatch, fail={"bigram": (ConnectionResetError("reset"), 1)})
    m = write_manifest(zoo_dir, HEALTHY)
    out = eval_suite(manifest=m, release="r1", store=str(tmp_path / "store"))
    row = out["report"]["rows"][0]
    assert row["status"] == "ok" and row["value"] is not None
    assert loader.calls["bigram"] == 2  # failed once, retried once


def test_transient_error_that_persists_becomes_error_row_after_retries(
    zoo_dir, tmp_path, monkeypatch
):
    loader = CountingLoader(monkeypatch, fail={"bigram": (TimeoutError("slow disk"), 99)})
    m = write_manifest(zoo_dir, HEALTHY)
    out = eval_suite(manifest=m, release="r1", store=str(tmp_path / "store"))
    row = out["report"]["rows"][0]
    assert row["status"] == "error"
    assert row["error"] == {"type": "TimeoutError", "message": "slow disk"}
    assert loader.calls["bigram"] == 3  # the first attempt and two retries
    assert out["report"]["rows"][1]["status"] == "ok"


def test_deterministic_error_is_not_retried(zoo_dir, tmp_path, monkeypatch):
    loader = CountingLoader(monkeypatch, fail={"bigram": (ValueError("bad weights"), 99)})
    m = write_manifest(zoo_dir, HEALTHY)
    out = eval_suite(manifest=m, release="r1", store=str(tmp_path / "store"))
    assert out["report"]["rows"][0]["error"] == {"type": "ValueError", "message": "bad weights"}
    assert loader.calls["bigram"] == 1


def test_rerun_after_failure_recomputes_only_what_did_not_finish(zoo_dir, tmp_path, monkeypatch):
    m = write_manifest(zoo_dir, HEALTHY)
    store = str(tmp_path / "store")
    loader = CountingLoader(monkeypatch, fail={"kn3.safetensors": (OSError("io"), 99)})
    first = eval_suite(manifest=m, release="r1", store=store)
    assert [r["status"] for r in first["report"]["rows"]] == ["ok", "ok", "error"]
    loader = CountingLoader(monkeypatch)  # the failure is gone
    second = eval_suite(manifest=m, release="r1", store=store)
    assert loader.calls == {"kn3.safetensors": 1}  # the two finished entries came from the cache
    assert [r["status"] for r in second["report"]["rows"]] == ["ok", "ok", "ok"]
    # the cached rows as they were, but for what the report decides over its rows (Holm over
    # the two tested rows first, over three now)
    assert strip(map(entry_level, second["report"]["rows"][:2])) == strip(
        map(entry_level, first["report"]["rows"][:2])
    )
    assert_holm(first["report"]["rows"])
    assert_holm(second["report"]["rows"])


def test_checkpoint_changed_in_place_is_rescored(zoo_dir, tmp_path, monkeypatch):
    m = write_manifest(zoo_dir, HEALTHY)
    store = str(tmp_path / "store")
    first = eval_suite(manifest=m, release="r1", store=store)
    data = np.frombuffer(TEXT[:200], dtype=np.uint8)
    bigram.save(bigram.train(bigram.Config(k=5.0), data, seed=0), zoo_dir / "bigram")
    loader = CountingLoader(monkeypatch)
    second = eval_suite(manifest=m, release="r2", store=store)
    assert loader.calls == {"bigram": 1}
    assert second["report"]["rows"][0]["value"] != first["report"]["rows"][0]["value"]
    assert (
        second["report"]["rows"][0]["checkpoint_sha256"]
        != first["report"]["rows"][0]["checkpoint_sha256"]
    )


def test_only_replaces_one_row_and_keeps_the_old_run(zoo_dir, tmp_path):
    m = write_manifest(zoo_dir, HEALTHY)
    store = str(tmp_path / "store")
    first = eval_suite(manifest=m, release="r1", store=store)
    bigram.save(
        bigram.train(bigram.Config(k=9.0), np.frombuffer(TEXT, dtype=np.uint8), seed=0),
        zoo_dir / "bigram2",
    )
    second = eval_suite(manifest=m, release="r1", store=store, only=["bigram2"])
    st = open_store(store)
    report = st.read_report("r1")
    assert [r["name"] for r in report["rows"]] == ["bigram", "bigram2", "kn3"]
    assert report["rows"][0] == first["report"]["rows"][0]
    assert report["rows"][2] == first["report"]["rows"][2]
    assert report["rows"][1]["value"] != first["report"]["rows"][1]["value"]
    runs = st.runs("r1")
    assert len(runs) == 2 and first["run_id"] in runs and second["run_id"] in runs
    assert st.read_run("r1", first["run_id"])["rows"] == first["report"]["rows"]
    assert [r["name"] for r in st.read_run("r1", second["run_id"])["rows"]] == ["bigram2"]
    for r in report["rows"]:  # every row's baseline scores resolve from the merged report
        assert st.read_items("r1", r["name"], r["baseline"]["items"]).size == r["n"]
    # the unigram is fit on the scored tokens: the retrained bigram2 has the same baseline file
    old_ref = first["report"]["rows"][1]["baseline"]["items"]
    assert report["rows"][1]["baseline"]["items"] == old_ref
    with pytest.raises(Exception, match="expected entry names"):
        eval_suite(manifest=m, release="r1", store=store, only=["nope"])


def test_comparison_flags_planted_regression_and_unchanged(zoo_dir, tmp_path):
    m = write_manifest(zoo_dir, HEALTHY)
    store = str(tmp_path / "store")
    eval_suite(manifest=m, release="r1", store=store)
    same = eval_suite(manifest=m, release="r2", store=store)
    assert {r["name"]: r["verdict"] for r in same["compare"]["rows"]} == {
        "bigram": "unchanged",
        "bigram2": "unchanged",
        "kn3": "unchanged",
    }
    # degrade the 3-gram: a heavily smoothed bigram table saved in place of the 3-gram's scores
    weak = ngram.train(ngram.Config(order=3), np.frombuffer(TEXT[:90], dtype=np.uint8), seed=0)
    ngram.save(weak, zoo_dir / "kn3.safetensors")
    worse = eval_suite(manifest=m, release="r3", store=store)
    verdicts = {r["name"]: r["verdict"] for r in worse["compare"]["rows"]}
    assert verdicts["kn3"] == "regressed"
    assert verdicts["bigram"] == "unchanged"
    assert worse["compare"]["rows"][2]["p"] < 0.05
    st = open_store(store)
    assert st.read_compare("r3").to_json() == worse["compare"]  # the flow's result is JSON
    assert st.releases() == ["r1", "r2", "r3"]
    for release in ("r1", "r3"):  # the compared releases' baseline scores resolve too
        for r in st.read_report(release)["rows"]:
            base = st.read_items(release, r["name"], r["baseline"]["items"])
            assert base.size == r["n"] and np.all(base > 0)  # unigram NLLs: -ln(c / n) > 0


def test_bad_manifest_fails_before_anything_runs(zoo_dir, tmp_path, monkeypatch):
    loader = CountingLoader(monkeypatch)
    m = write_manifest(zoo_dir, [*HEALTHY, {"name": "x", "family": "bigram"}])
    with pytest.raises(Exception, match="checkpoint"):
        eval_suite(manifest=m, release="r1", store=str(tmp_path / "store"))
    assert loader.calls == {}
    assert not (tmp_path / "store").exists()


def test_s3_store_through_moto_server(zoo_dir, monkeypatch, s3_env):
    boto3 = pytest.importorskip("boto3")
    boto3.client("s3").create_bucket(Bucket="evals")
    m = write_manifest(zoo_dir, HEALTHY)
    out = eval_suite(manifest=m, release="r1", store="s3://evals/tinyllm")
    eval_suite(manifest=m, release="r2", store="s3://evals/tinyllm")
    st = open_store("s3://evals/tinyllm")
    assert st.releases() == ["r1", "r2"]
    assert st.read_report("r1")["rows"] == out["report"]["rows"]
    keys = boto3.client("s3").list_objects_v2(Bucket="evals")["Contents"]
    names = {k["Key"] for k in keys}
    assert "tinyllm/releases/r1/report.json" in names
    assert "tinyllm/releases/r2/compare.json" in names
    assert json.loads(st.get_bytes("releases/r2/compare.json"))["rows"][0]["verdict"] == (
        "unchanged"
    )
    # the CLI's closing line names the release folder without a double slash
    from typer.testing import CliRunner

    from tinyllm.cli import app

    monkeypatch.setenv("COLUMNS", "200")
    args = ["eval", "--suite", "zoo", "--manifest", m, "--store", "s3://evals/tinyllm"]
    res = CliRunner().invoke(app, [*args, "--release", "r3", "-q", "--only", "kn3"])
    assert res.exit_code == 0, res.output
    assert "written to s3://evals/tinyllm/releases/r3/" in res.stdout.replace("\n", "")
    assert "//releases" not in res.stdout.replace("\n", "")


def test_cli_release_runs_the_flow_and_only_reruns_one_entry(zoo_dir, tmp_path):
    from typer.testing import CliRunner

    from tinyllm.cli import app

    m = write_manifest(zoo_dir, HEALTHY)
    store = str(tmp_path / "store")
    args = ["eval", "--suite", "zoo", "--manifest", m, "--store", store]
    res = CliRunner().invoke(app, [*args, "--release", "v1"])
    assert res.exit_code == 0, res.output
    assert "no earlier release" in res.output and "kn3" in res.output
    res = CliRunner().invoke(app, [*args, "--release", "v2", "--only", "kn3"])
    assert res.exit_code == 0, res.output
    st = open_store(store)
    assert [r["name"] for r in st.read_report("v2")["rows"]] == ["kn3"]
    assert st.read_compare("v2").rows[0].verdict == "unchanged"
    assert "unchanged" in res.output
    res = CliRunner().invoke(app, [*args, "--only", "kn3"])
    assert res.exit_code == 2 and "--only and --previous need --release" in res.output


def test_retry_condition_retries_transient_failures_only():
    from prefect.states import Failed

    from tinyllm_suite.eval_tasks import is_transient_state

    def failed(exc):
        return Failed(data=exc, message=str(exc))

    assert is_transient_state(None, None, failed(ConnectionResetError("reset"))) is True
    assert is_transient_state(None, None, failed(TimeoutError("slow"))) is True
    assert is_transient_state(None, None, failed(ValueError("bad weights"))) is False
    assert is_transient_state(None, None, failed(FileNotFoundError("gone"))) is False


def test_a_task_result_cached_without_baseline_items_or_units_has_none():
    from tinyllm_suite.eval_tasks import result_arrays

    assert result_arrays({"row": {}, "items": [0.5, 1.5]}) == ([0.5, 1.5], None, None)
    both = {"row": {}, "items": [0.5], "baseline_items": [2.0]}
    assert result_arrays(both) == ([0.5], [2.0], None)
    every = {"row": {}, "items": [0.5, 1.0], "baseline_items": [2.0, 2.5], "units": [0, 0]}
    assert result_arrays(every) == ([0.5, 1.0], [2.0, 2.5], [0, 0])


# --- a changed data file, a store that is down, errors in flow mode -------------------------------


def test_data_file_rewritten_in_place_is_rescored(zoo_dir, tmp_path, monkeypatch):
    """The cache key hashes the data file, so new bytes at the same path are rescored."""
    m = write_manifest(zoo_dir, HEALTHY)
    store = str(tmp_path / "store")
    first = eval_suite(manifest=m, release="r1", store=store)
    other = TEXT.replace(b"cat", b"cow").replace(b"dog", b"doe")
    write_tokens(zoo_dir / "val.tok", np.frombuffer(other, dtype=np.uint8)[:300])  # same path
    loader = CountingLoader(monkeypatch)
    second = eval_suite(manifest=m, release="r2", store=store)
    assert loader.calls == {"bigram": 1, "bigram2": 1, "kn3.safetensors": 1}  # loaded, scored
    for a, b in zip(first["report"]["rows"], second["report"]["rows"], strict=True):
        assert a["data_sha256"] != b["data_sha256"]
        assert a["value"] != b["value"]
        assert a["checkpoint_sha256"] == b["checkpoint_sha256"]


class ResettingEndpoint:
    """A moto server (tests/s3server.py's) on a fixed port that goes down on demand: while down,
    the port answers the first connection with a TCP reset (as a dying endpoint does), then moto
    is started again on the same port, with the same buckets (moto keeps its state in this
    process)."""

    def __init__(self):
        from s3server import MotoS3Server

        self._cls = MotoS3Server
        self.server = MotoS3Server(ip_address="127.0.0.1", port=0).start()
        self.host, self.port = self.server.get_host_and_port()
        self.resets = 0
        self.back = threading.Event()

    def go_down(self):
        import socket
        import struct

        self.server.stop()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen()

        def reset_then_restart():
            conn, _ = sock.accept()
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # linger 0: an RST, "connection reset by peer"
            sock.close()
            self.resets += 1
            self.server = self._cls(ip_address=self.host, port=self.port).start()
            self.back.set()

        threading.Thread(target=reset_then_restart, daemon=True).start()

    def stop(self):
        self.server.stop()


def point_at(monkeypatch, endpoint, home):
    """boto3 reaches ``endpoint`` (a ResettingEndpoint) through the environment alone."""
    from s3server import aws_env

    for k, v in aws_env(f"http://{endpoint.host}:{endpoint.port}", home).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # no retries inside botocore: Prefect's count


def test_publish_is_retried_when_the_store_is_down_for_the_first_attempt(
    zoo_dir, monkeypatch, tmp_path
):
    """The S3 endpoint goes down after scoring; the publish task's first attempt gets a
    connection reset, the endpoint comes back, the retry publishes (scores are not redone)."""
    import boto3

    endpoint = ResettingEndpoint()
    try:
        point_at(monkeypatch, endpoint, tmp_path)
        boto3.client("s3").create_bucket(Bucket="evals-retry")  # moto keeps buckets per process

        class DownAfterScoring(CountingLoader):
            def __call__(self, path, **kw):
                out = super().__call__(path, **kw)
                if sum(self.calls.values()) == len(HEALTHY):  # the last entry is loaded
                    endpoint.go_down()
                return out

        loader = DownAfterScoring(monkeypatch)
        m = write_manifest(zoo_dir, HEALTHY)
        out = eval_suite(manifest=m, release="r1", store="s3://evals-retry/tinyllm")
        assert endpoint.back.is_set() and endpoint.resets == 1  # the first publish was refused
        assert set(loader.calls) == {"bigram", "bigram2", "kn3.safetensors"}
        assert all(r["status"] == "ok" for r in out["report"]["rows"])
        st = open_store("s3://evals-retry/tinyllm")
        assert st.read_report("r1")["rows"] == out["report"]["rows"]
        assert st.runs("r1") == [out["run_id"]]  # the retry wrote the same run file, once
    finally:
        endpoint.stop()


def test_cli_flow_table_shows_why_a_row_failed(zoo_dir, tmp_path, monkeypatch):
    """In flow mode the terminal table says why a row is an error."""
    from typer.testing import CliRunner

    from tinyllm.cli import app

    monkeypatch.setenv("COLUMNS", "200")
    m = write_manifest(zoo_dir, [*HEALTHY, entry("ghost", "bigram", "missing-dir")])
    args = ["eval", "--suite", "zoo", "--manifest", m, "--store", str(tmp_path / "s")]
    res = CliRunner().invoke(app, [*args, "--release", "v1", "-q"])
    assert res.exit_code == 0, res.output
    table_row = next(line for line in res.stdout.splitlines() if "ghost" in line and "│" in line)
    assert "error" in table_row and "FileNotFoundError:" in table_row
    assert "ghost: FileNotFoundError: " in res.stdout and "missing-dir" in res.stdout
    assert f"written to {tmp_path / 's'}/releases/v1/" in res.stdout.replace("\n", "")


def test_cli_error_inside_the_flow_is_one_line(zoo_dir, tmp_path, monkeypatch, capsys):
    """A store failure inside the flow (after the checks) is one line on stderr, with
    Prefect's console tracebacks held back (they still reach the server); exit status 1."""
    import logging
    import sys

    from prefect.logging.configuration import ensure_logging_setup

    from tinyllm import cli

    store = tmp_path / "store"
    (store / "releases").mkdir(parents=True)
    (store / "releases" / "r1").write_text("a file where the release folder goes\n")
    m = write_manifest(zoo_dir, HEALTHY)
    ensure_logging_setup()
    # Prefect's console handler writes to the stream it was made with: point it at this test's
    # captured stderr, so that what it prints is seen here
    handlers = [
        h for h in logging.getLogger().handlers if type(h).__name__ == "PrefectConsoleHandler"
    ]
    assert handlers
    saved = [(h, h.level, h.stream, h.console.file, list(h.filters)) for h in handlers]
    for h in handlers:
        h.stream = h.console.file = sys.stderr
    monkeypatch.setattr(
        sys, "argv", ["tinyllm", "eval", "--suite", "zoo", "--manifest", m, "--store", str(store),
                      "--release", "r1"],
    )  # fmt: skip
    try:
        with pytest.raises(SystemExit) as ex:
            cli.main()
    finally:
        for h, level, stream, file, filters in saved:
            h.setLevel(level)
            h.stream, h.console.file, h.filters = stream, file, filters
    err = capsys.readouterr().err
    assert ex.value.code == 1
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, err  # progress lines may show; the error is one line
    assert errors[0].startswith(f"error: {store}/releases/r1/items/")
    assert "expected a folder, got a regular file" in errors[0] and "Traceback" not in err
