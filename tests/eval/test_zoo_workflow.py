"""tinyllm.eval.zoo for the workflow: partial runs (a subset of the manifest's rows) and retries
(which failures are transient, and raised only when the caller retries them).
"""

import pytest
from zoo_helpers import (  # same folder: pytest puts it on sys.path
    entry_of,
    manifest_of,
    uniform_bigram,
)

from tinyllm.eval import kinds, zoo
from tinyllm.report import validate_report

# ---- for the workflow: partial runs and retries ------------------------------------------------


def test_build_run_report_takes_a_subset_in_manifest_order(zoo_dir):
    m = manifest_of(zoo_dir)
    names = [e["name"] for e in m["entries"]]
    picked = [e for e in m["entries"] if e["name"] in names[-2:]]
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in reversed(picked)]
    doc = zoo.build_run_report(m, rows, seed=0, release="r2")
    validate_report(doc)
    assert [r["name"] for r in doc["rows"]] == names[-2:] and doc["release"] == "r2"
    with pytest.raises(ValueError, match=r"unknown \['nope'\]"):
        zoo.build_run_report(m, [dict(rows[0], name="nope")], seed=0)
    with pytest.raises(ValueError, match="duplicated"):
        zoo.build_run_report(m, [rows[0], rows[0]], seed=0)


def test_is_transient_separates_retryable_errors_from_deterministic_ones():
    import errno

    from botocore.exceptions import ClientError, EndpointConnectionError

    from tinyllm.checkpoint import CheckpointError

    def client_error(status: int, code: str) -> ClientError:
        meta = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(meta, "GetObject")

    transient = [
        TimeoutError("slow disk"),
        ConnectionResetError("peer"),
        OSError(errno.EIO, "Input/output error"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        client_error(503, "ServiceUnavailable"),
        client_error(400, "SlowDown"),
    ]
    permanent = [
        FileNotFoundError(errno.ENOENT, "gone"),
        FileExistsError(errno.EEXIST, "run file already written"),
        PermissionError(errno.EACCES, "no"),
        OSError(errno.ENAMETOOLONG, "File name too long"),
        client_error(404, "NoSuchKey"),
        CheckpointError("x: expected a readable safetensors file"),
        ValueError("bad config"),
        KeyError("w"),
    ]
    assert [zoo.is_transient(e) for e in transient] == [True] * len(transient)
    assert [zoo.is_transient(e) for e in permanent] == [False] * len(permanent)


def test_deterministic_failures_stay_rows_when_transient_ones_are_raised(zoo_dir):
    long_name = "x" * 300  # a real OSError (ENAMETOOLONG), deterministic: still a row
    for ckpt in ("models/gone", f"models/{long_name}"):
        entry = dict(entry_of(zoo_dir, "bigram"), checkpoint=ckpt)
        row, items = zoo.score_entry_items(entry, seed=0, base_dir=zoo_dir, raise_transient=True)
        assert row["status"] == "error" and items is None
        assert row["error"]["type"] in ("FileNotFoundError", "OSError")


def test_transient_failures_are_rows_unless_the_caller_retries_them(tmp_path, monkeypatch):
    def flaky(entry, model, data_path, rng, opts):
        raise TimeoutError("store timed out")

    monkeypatch.setitem(kinds.SCORERS, "lm", flaky)
    entry = uniform_bigram(tmp_path)
    row, items = zoo.score_entry_items(entry, base_dir=tmp_path)  # default: a row
    assert row["status"] == "error" and row["error"]["type"] == "TimeoutError" and items is None
    with pytest.raises(TimeoutError, match="store timed out"):
        zoo.score_entry_items(entry, base_dir=tmp_path, raise_transient=True)


def test_is_transient_reads_botocore_responses_field_by_field():
    from botocore.exceptions import ClientError

    def client_error(response: dict) -> ClientError:
        return ClientError(response, "GetObject")

    assert zoo.is_transient(client_error({"ResponseMetadata": {"HTTPStatusCode": 500}}))
    assert not zoo.is_transient(client_error({"ResponseMetadata": {"HTTPStatusCode": 499}}))
    for code in ("Throttling", "ThrottlingException", "SlowDown"):  # no status at all
        assert zoo.is_transient(client_error({"Error": {"Code": code}}))
    assert not zoo.is_transient(client_error({"Error": {"Code": "throttling"}}))
    assert not zoo.is_transient(client_error({}))

    class NotBotocoreError(Exception):  # a response attribute alone does not make it botocore's
        response = {"ResponseMetadata": {"HTTPStatusCode": 503}}

    assert not zoo.is_transient(NotBotocoreError("x"))
