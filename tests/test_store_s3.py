"""tinyllm/store/s3.py: the S3 store against a real moto server on 127.0.0.1, reached with boto3.

moto_endpoint and s3_env come from tests/conftest.py: one moto server that serializes writes, so
a conditional PUT is atomic as on S3 (tests/s3server.py). S3-compatible servers differ: the real
moto client behind a thin proxy (:class:`ServerQuirks`) answers one call the way another server
would (an error code, no conditional writes); the server stays real.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from store_helpers import exercise_store

from tinyllm.store import S3Store, StoreError, StoreExistsError, StoreKeyError, open_store


class ServerQuirks:
    """A boto3 S3 client (here: moto's) that fails chosen calls with a chosen error code and
    renames the codes of real errors, the way other S3-compatible servers answer."""

    def __init__(self, client, fail=None, rename=None):
        self._client = client
        self.fail = fail or (lambda op, kw: None)  # (operation, kwargs) -> error code or None
        self.rename = rename or {}
        self.calls: list[tuple[str, dict]] = []

    def __getattr__(self, name):
        from botocore.exceptions import ClientError

        real = getattr(self._client, name)
        if name not in ("put_object", "get_object", "head_object", "delete_object"):
            return real

        def call(**kw):
            self.calls.append((name, kw))
            code = self.fail(name, kw)
            if code:
                raise ClientError({"Error": {"Code": code, "Message": code}}, name)
            try:
                return real(**kw)
            except ClientError as e:
                old = e.response["Error"]["Code"]
                e.response["Error"]["Code"] = self.rename.get(old, old)
                raise

        return call


def _conditional(op, kw):
    return op == "put_object" and ("IfNoneMatch" in kw or "IfMatch" in kw)


def test_s3_store_round_trip_against_moto(s3_env):
    import boto3

    s3 = boto3.client("s3")
    assert s3.meta.endpoint_url == s3_env  # the environment picks the endpoint, not our code
    s3.create_bucket(Bucket="tl-evals")
    store = open_store("s3://tl-evals/team/nightly")
    assert isinstance(store, S3Store)
    exercise_store(store)
    # the objects sit under the prefix, in the documented layout
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="tl-evals")["Contents"]]
    assert "team/nightly/releases/c-mid/report.json" in keys
    assert all(k.startswith("team/nightly/releases/") for k in keys)
    body = s3.get_object(Bucket="tl-evals", Key="team/nightly/releases/c-mid/items/gpt.npy")
    assert np.load(io.BytesIO(body["Body"].read()), allow_pickle=False).shape == (257,)
    # another prefix in the same bucket is another store
    assert open_store("s3://tl-evals/other").releases() == []


def test_s3_missing_bucket_is_a_clear_error(s3_env):
    store = open_store("s3://tl-no-such-bucket/x")
    with pytest.raises(StoreKeyError, match="no such bucket 'tl-no-such-bucket'"):
        store.releases()


def test_s3_compare_and_swap_retries_a_lost_race(s3_env):
    """If-Match on the ETag: a write that slips in between read and put is not overwritten."""
    import boto3

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="tl-cas")
    store = open_store("s3://tl-cas/p")
    store.put_json("releases/r1/x.json", {"n": 0})
    calls = []

    def bump(old):
        calls.append(old["n"])
        if len(calls) == 1:  # another writer gets in after our read
            s3.put_object(Bucket="tl-cas", Key="p/releases/r1/x.json", Body=b'{"n": 10}')
        return {"n": old["n"] + 1}

    assert store.update_json("releases/r1/x.json", bump) == {"n": 11}
    assert calls == [0, 10]  # the first put got 412, the retry saw the other write
    assert store.get_json("releases/r1/x.json") == {"n": 11}
    # a new key: If-None-Match: *
    assert store.update_json("releases/r1/y.json", lambda old: {"was": old}) == {"was": None}


def test_s3_site_files_check_writable_and_missing_bucket(s3_env):
    import boto3

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="tl-site")
    store = open_store("s3://tl-site/p")
    store.check_writable()
    assert "Contents" not in s3.list_objects_v2(Bucket="tl-site")  # the probe is gone
    assert store.write_site_file("dashboard/app.js", b"x=1", "text/javascript") == (
        "dashboard/app.js"
    )
    head = s3.head_object(Bucket="tl-site", Key="p/dashboard/app.js")
    assert head["ContentType"] == "text/javascript"  # static hosting serves it as such
    with pytest.raises(StoreError) as ei:
        store.write_site_file("releases/r1/x.json", b"{}", "application/json")
    assert str(ei.value) == (
        "s3://tl-site/p/releases/r1/x.json: expected a key under dashboard/, "
        "got 'releases/r1/x.json'"
    )
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="tl-site")["Contents"]] == [
        "p/dashboard/app.js"
    ]
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as ei:
        open_store("s3://tl-no-bucket/x").check_writable()
    assert "store s3://tl-no-bucket/x/" in ei.value.__notes__


@pytest.fixture
def s3(s3_env):
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="tl-q")
    return client


@pytest.mark.parametrize("code", ["NotImplemented", "501"])
def test_s3_without_conditional_writes(s3, code):
    quirky = ServerQuirks(s3, fail=lambda op, kw: code if _conditional(op, kw) else None)
    store = open_store("s3://tl-q/p", client=quirky)
    assert store.client is quirky
    # write-once falls back to check-then-write
    store.put_bytes("releases/r1/runs/a.json", b"1", overwrite=False)
    assert s3.get_object(Bucket="tl-q", Key="p/releases/r1/runs/a.json")["Body"].read() == b"1"
    with pytest.raises(StoreExistsError) as ei:
        store.put_bytes("releases/r1/runs/a.json", b"2", overwrite=False)
    assert str(ei.value) == "s3://tl-q/p/releases/r1/runs/a.json: refusing to overwrite; it exists"
    assert s3.get_object(Bucket="tl-q", Key="p/releases/r1/runs/a.json")["Body"].read() == b"1"
    # a merge of report.json cannot be made safe: refused, nothing written
    with pytest.raises(StoreError) as ei:
        store.update_json("releases/r1/x.json", lambda old: {"n": 1})
    assert str(ei.value) == (
        "s3://tl-q/p/releases/r1/x.json: expected an S3 server with conditional writes "
        f"(If-Match), got {code}: the release report cannot be merged safely"
    )
    assert not store.exists("releases/r1/x.json")


@pytest.mark.parametrize("code", ["PreconditionFailed", "412", "ConditionalRequestConflict", "409"])
def test_s3_write_once_refusal_codes(s3, code):
    quirky = ServerQuirks(s3, fail=lambda op, kw: code if _conditional(op, kw) else None)
    store = open_store("s3://tl-q/p", client=quirky)
    with pytest.raises(StoreExistsError) as ei:
        store.put_bytes("releases/r1/runs/a.json", b"1", overwrite=False)
    assert str(ei.value) == "s3://tl-q/p/releases/r1/runs/a.json: refusing to overwrite; it exists"


def test_s3_other_errors_are_raised_with_a_note_and_nothing_written(s3):
    from botocore.exceptions import ClientError

    quirky = ServerQuirks(s3, fail=lambda op, kw: "AccessDenied" if op == "put_object" else None)
    store = open_store("s3://tl-q/p", client=quirky)
    for overwrite in (True, False):
        with pytest.raises(ClientError) as ei:
            store.put_bytes("releases/r1/a.json", b"1", overwrite=overwrite)
        assert ei.value.response["Error"]["Code"] == "AccessDenied"
        assert ei.value.__notes__ == ["s3://tl-q/p/releases/r1/a.json"]
    with pytest.raises(ClientError) as ei:
        store.update_json("releases/r1/a.json", lambda old: {})
    assert ei.value.__notes__ == ["s3://tl-q/p/releases/r1/a.json"]
    assert "Contents" not in s3.list_objects_v2(Bucket="tl-q")
    # a plain put overwrites by default
    plain = open_store("s3://tl-q/p")
    plain.put_bytes("releases/r1/a.json", b"1")
    plain.put_bytes("releases/r1/a.json", b"2")
    assert plain.get_bytes("releases/r1/a.json") == b"2"


@pytest.mark.parametrize("code", ["PreconditionFailed", "412", "ConditionalRequestConflict", "409"])
def test_s3_compare_and_swap_retries_on_every_lost_race_code(s3, code, monkeypatch):
    import tinyllm.store.s3 as st  # the S3 backend waits with its time.sleep

    monkeypatch.setattr(st, "time", type("T", (), {"sleep": staticmethod(lambda s: None)}))
    lost = []

    def fail(op, kw):
        if _conditional(op, kw) and not lost:
            lost.append(code)
            return code
        return None

    store = open_store("s3://tl-q/p", client=ServerQuirks(s3, fail=fail))
    assert store.update_json("releases/r1/x.json", lambda old: {"was": old}) == {"was": None}
    assert lost == [code] and store.get_json("releases/r1/x.json") == {"was": None}


def test_s3_compare_and_swap_gives_up_after_20_lost_races_backing_off(s3, monkeypatch):
    import tinyllm.store.s3 as st  # the S3 backend waits with its time.sleep

    sleeps, draws = [], []
    monkeypatch.setattr(st, "time", type("T", (), {"sleep": staticmethod(sleeps.append)}))
    monkeypatch.setattr(
        st,
        "random",
        type("R", (), {"uniform": staticmethod(lambda a, b: draws.append((a, b)) or b)}),
    )
    quirky = ServerQuirks(s3, fail=lambda op, kw: "412" if _conditional(op, kw) else None)
    store = open_store("s3://tl-q/p", client=quirky)
    calls = []
    with pytest.raises(st.StoreConflictError) as ei:
        store.update_json("releases/r1/x.json", lambda old: calls.append(old) or {"n": 1})
    assert str(ei.value) == (
        "s3://tl-q/p/releases/r1/x.json: compare-and-swap lost 20 times in a row; "
        "too many concurrent writers of this key"
    )
    assert len(calls) == 20
    # full jitter: uniform(0, delay), the delay doubling from 0.05 s up to 2 s
    delays = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6] + [2.0] * 14
    assert draws == [(0, d) for d in delays] and sleeps == delays


def test_s3_new_key_race_uses_if_none_match(s3):
    # our read finds no object; another writer creates it before our put: we must not clobber it
    store = open_store("s3://tl-q/p")
    seen = []

    def create(old):
        seen.append(old)
        if len(seen) == 1:
            s3.put_object(Bucket="tl-q", Key="p/releases/r1/new.json", Body=b'{"n": 5}')
        return {"n": (old or {"n": 0})["n"] + 1}

    assert store.update_json("releases/r1/new.json", create) == {"n": 6}
    assert seen == [None, {"n": 5}]


def test_s3_missing_keys_buckets_and_malformed_objects(s3):
    store = open_store("s3://tl-q/p")
    with pytest.raises(StoreKeyError) as ei:
        store.get_bytes("releases/r1/x.json")
    assert str(ei.value) == "s3://tl-q/p/releases/r1/x.json: no such key"
    gone = open_store("s3://tl-gone/p")
    with pytest.raises(StoreKeyError) as ei:
        gone.get_bytes("releases/r1/x.json")
    assert str(ei.value) == "s3://tl-gone/p/: no such bucket 'tl-gone'"
    with pytest.raises(StoreKeyError) as ei:
        gone.update_json("releases/r1/x.json", lambda old: {})
    assert str(ei.value) == "s3://tl-gone/p/: no such bucket 'tl-gone'"
    store.put_bytes("releases/r1/x.json", b"{")
    with pytest.raises(StoreError) as ei:
        store.update_json("releases/r1/x.json", lambda old: old)
    assert str(ei.value).startswith("s3://tl-q/p/releases/r1/x.json: malformed JSON: expected JSON")
    store.put_bytes("releases/r1/report.json", b"{")
    with pytest.raises(StoreError) as ei:
        store.update_report("r1", lambda old: old)
    assert str(ei.value).startswith(
        "s3://tl-q/p/releases/r1/report.json: malformed report: expected JSON"
    )


@pytest.mark.parametrize("code", ["NoSuchKey", "404", "NotFound"])
def test_s3_not_found_in_any_of_its_spellings(s3, code):
    rename = {"NoSuchKey": code, "404": code}
    store = open_store("s3://tl-q/p", client=ServerQuirks(s3, rename=rename))
    assert store.exists("releases/r1/x.json") is False
    with pytest.raises(StoreKeyError, match="no such key"):
        store.get_bytes("releases/r1/x.json")
    store.put_bytes("releases/r1/x.json", b"1")
    assert store.exists("releases/r1/x.json") is True


def test_s3_uris_and_prefixes(s3):
    from tinyllm.store import S3Store

    assert (
        S3Store("tl-q", client=s3).prefix == "" and S3Store("tl-q", client=s3).uri == "s3://tl-q/"
    )
    assert S3Store("tl-q", "/", client=s3).prefix == ""
    assert S3Store("tl-q", "/a/b/", client=s3).prefix == "a/b/"
    assert S3Store("tl-q", "/a/b/", client=s3).uri == "s3://tl-q/a/b/"
    root = open_store("s3://tl-q")
    assert (root.bucket, root.prefix, root.uri) == ("tl-q", "", "s3://tl-q/")
    root.put_bytes("releases/r1/x.json", b"1")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="tl-q")["Contents"]] == [
        "releases/r1/x.json"
    ]
    assert root.where("releases/r1/x.json") == "s3://tl-q/releases/r1/x.json"
    assert root.list() == ["releases/r1/x.json"]
    assert open_store("s3://tl-q/releases").list() == ["r1/x.json"]
    # names 3 to 63 characters
    assert open_store("s3://abc/x").bucket == "abc"
    assert open_store("s3://" + "a" * 63 + "/x").bucket == "a" * 63
    for bad in ("s3://ab/x", "s3://" + "a" * 64 + "/x"):
        with pytest.raises(StoreError, match="expected s3://bucket/prefix"):
            open_store(bad)


def test_s3_read_errors_carry_a_note_naming_the_key(s3):
    from botocore.exceptions import ClientError

    def fail(op, kw):
        return "AccessDenied" if op in ("get_object", "head_object") else None

    store = open_store("s3://tl-q/p", client=ServerQuirks(s3, fail=fail))
    for call in (store.get_bytes, store.exists):
        with pytest.raises(ClientError) as ei:
            call("releases/r1/x.json")
        assert ei.value.__notes__ == ["s3://tl-q/p/releases/r1/x.json"]


def test_s3_prefixes_keep_their_own_characters(s3):
    # only '/' is stripped from a prefix: "X" at either end is part of the name
    store = open_store("s3://tl-q/X/team/X")
    assert (store.prefix, store.uri) == ("X/team/X/", "s3://tl-q/X/team/X/")
    assert store.where("releases/r1") == "s3://tl-q/X/team/X/releases/r1"
    store.write_site_file("dashboard/index.html", b"<html>", "text/html")
    body = s3.get_object(Bucket="tl-q", Key="X/team/X/dashboard/index.html")["Body"].read()
    assert body == b"<html>"


def test_s3_listing_errors_name_the_prefix_and_a_one_letter_prefix_is_kept(s3):
    from botocore.exceptions import ClientError

    assert open_store("s3://tl-q/X").prefix == "X/"

    def deny(**kw):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "ListObjectsV2")

    s3.meta.events.register("before-call.s3.ListObjectsV2", deny)
    store = open_store("s3://tl-q/p", client=s3)
    with pytest.raises(ClientError) as ei:
        store.list("releases/")
    assert ei.value.__notes__ == ["s3://tl-q/p/releases/"]
    with pytest.raises(ClientError) as ei:
        store.list()
    assert ei.value.__notes__ == ["s3://tl-q/p/"]
