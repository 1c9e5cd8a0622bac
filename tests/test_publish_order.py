"""A failed or killed publish leaves the old state or the complete new one.

The faults are real: a disk that is really full (a small tmpfs, so ``ENOSPC`` comes from the
kernel at whichever write it hits), a publishing process SIGKILLed before each of its writes
(a forked child, killed at the OS boundary: ``os.replace`` / ``os.link`` locally, boto3's
``PutObject`` on a moto S3 server), and S3 refusing one ``PutObject``. After each fault the
store is read back through its readers only (``history``, ``read_report``, ``read_compare``,
``baseline_release``): a release is either not visible, or visible with the comparison of
exactly the report it shows.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import time
import uuid

import numpy as np
import pytest
from store_helpers import acc_row

from tinyllm.comparison import Comparison
from tinyllm.publish import publish_run
from tinyllm.store import StoreKeyError, open_store

SHA = "ab" * 32
PAGE = 4096


def hits(seed: int, n: int = 60) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < 0.6).astype(np.float64)


def run_report(release: str, day: int, items: dict[str, np.ndarray]) -> dict:
    return {
        "schema_version": 1,
        "suite": "zoo",
        "release": release,
        "created_at": f"2026-11-{day:02d}T18:00:00Z",
        "seed": 0,
        "tinyllm_version": "0.1.0",
        "manifest_sha256": SHA,
        "rows": [acc_row(n, v) for n, v in items.items()],
    }


def publish(store, release: str, day: int, seed: int, names=("a", "b"), **kw) -> dict:
    items = {n: hits(seed + i) for i, n in enumerate(names)}
    return publish_run(store, release, run_report(release, day, items), items, **kw)


# --- what a reader sees ---------------------------------------------------------------------------


def visible(store, release: str) -> tuple[dict, Comparison | None] | None:
    """None when ``release`` is not in the history, else its report and its comparison."""
    if release not in [n for n, _ in store.history()]:
        return None
    report = store.read_report(release)
    try:
        return report, store.read_compare(release)
    except StoreKeyError:
        return report, None


def agrees(report: dict, cmp: Comparison | None) -> bool:
    """``cmp`` is the comparison of exactly this report: it names the release and holds each
    row's value as its current value."""
    if cmp is None:
        return False
    current = {r.name: r.current_value for r in cmp.rows if r.verdict != "removed"}
    return cmp.current == report["release"] and current == {
        r["name"]: r["value"] for r in report["rows"]
    }


def check_new_release(store, failed: bool) -> str:
    """r2 (baseline r1) after a publish that may have failed: not visible, or complete."""
    seen = visible(store, "r2")
    if seen is None:
        assert failed, "a publish that returned must leave r2 visible"
        assert store.previous_release("r3") == "r1"  # the next release is compared with r1
        return "old"
    report, cmp = seen
    assert agrees(report, cmp), f"r2 is visible without its comparison: {cmp}"
    assert cmp.previous == "r1"
    assert store.previous_release("r3") == "r2"
    return "new"


def check_rerun(store, old: tuple[dict, dict], new_a: float, failed: bool) -> str:
    """r1 after a rerun of its entry a: the old report with its old comparison, or the new."""
    seen = visible(store, "r1")
    assert seen is not None, "a rerun must never hide its release"
    report, cmp = seen
    assert agrees(report, cmp), f"r1's report and comparison disagree: {cmp}"
    if (report, cmp) == old:
        assert failed
        return "old"
    assert report["rows"][0]["value"] == new_a and cmp.previous == "r0"
    return "new"


# --- a really full disk: a 1 MiB tmpfs ------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def fill_leaving(disk, pages: int) -> None:
    """Fill the file system, then free exactly ``pages`` pages: the next writes get ENOSPC once
    they need more."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            try:
                os.write(fd, b"\0" * PAGE)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        used = -(-os.fstat(fd).st_size // PAGE)
        os.ftruncate(fd, max(0, used - pages) * PAGE)
    finally:
        os.close(fd)


def fresh(disk):
    for p in disk.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return open_store(disk / "store")


def attempt(fn) -> OSError | None:
    try:
        fn()
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
        return e
    return None


def test_disk_full_at_any_point_of_a_new_release_leaves_it_invisible_or_complete(tiny_disk):
    outcomes, retried_and_failed = [], []
    for pages in range(40):
        store = fresh(tiny_disk)
        publish(store, "r1", 1, seed=0)
        fill_leaving(tiny_disk, pages)
        err = attempt(lambda store=store: publish(store, "r2", 2, seed=10, run_id="run-2"))
        state = check_new_release(store, failed=err is not None)
        where = err.__notes__[0].rsplit("/releases/r2/", 1)[1] if err else None
        outcomes.append((state, where))
        if err is None:
            break
        # a retry (same run id) on the still full disk that fails reports the first failure
        again = attempt(lambda store=store: publish(store, "r2", 2, seed=10, run_id="run-2"))
        if again is not None:
            retried_and_failed.append(where)
            assert again is err
            assert err.__notes__[-1].startswith(
                "a retry of this publish failed too: OSError: [Errno 28] No space left on device"
            )
        check_new_release(store, failed=again is not None)
        (tiny_disk / "filler").unlink()  # space again: the next retry completes the release
        publish(store, "r2", 2, seed=10, run_id="run-2")
        assert check_new_release(store, failed=False) == "new"
    assert outcomes[-1] == ("new", None)  # with room enough, the publish completes
    failed_at = {where.split("/")[0].split("-")[0] for _, where in outcomes[:-1]}
    # the disk filled up at every kind of write: items, run file, comparison, report
    assert {"items", "runs", "compares"} <= failed_at, outcomes
    assert any(w and w.startswith(("report.json", "compare.json")) for _, w in outcomes), outcomes
    assert len(retried_and_failed) >= 3, outcomes


def test_disk_full_at_any_point_of_a_rerun_leaves_the_old_report_and_comparison_or_the_new(
    tiny_disk,
):
    outcomes = []
    for pages in range(40):
        store = fresh(tiny_disk)
        publish(store, "r0", 1, seed=0)
        publish(store, "r1", 2, seed=10)
        old = visible(store, "r1")
        new_a = hits(99)
        rerun = run_report("r1", 2, {"a": new_a})
        fill_leaving(tiny_disk, pages)
        err = attempt(
            lambda store=store, rerun=rerun, a=new_a: publish_run(store, "r1", rerun, {"a": a})
        )
        outcomes.append(check_rerun(store, old, float(new_a.mean()), failed=err is not None))
        if err is None:
            break
    assert outcomes[-1] == "new" and outcomes.count("old") >= 4, outcomes


# --- a publish killed before each of its writes ---------------------------------------------------


def killed_at(n: int, action, patch) -> bool:
    """Run ``action()`` in a forked child that SIGKILLs itself at its ``n``-th write (``patch``
    installs the hook); True when it was killed, False when it finished first."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            calls = [0]

            def hook():
                calls[0] += 1
                if calls[0] == n:
                    os.kill(os.getpid(), signal.SIGKILL)

            patch(hook)
            action()
        except BaseException:
            code = 3
        os._exit(code)
    for _ in range(1200):  # a child that neither finishes nor dies in 120 s is a failure
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the publishing child was still running after 120 s (write {n})")
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the publish failed instead of finishing"
    return False


def patch_local_writes(hook) -> None:
    """Call ``hook`` before every file the local store moves into place."""
    for name in ("replace", "link"):
        real = getattr(os, name)

        def call(*a, real=real, **kw):
            hook()
            return real(*a, **kw)

        setattr(os, name, call)


def test_a_publish_killed_before_any_local_write_leaves_old_or_complete_state(tmp_path):
    states = []
    for n in range(1, 30):
        root = tmp_path / f"s{n}"
        store = open_store(root)
        publish(store, "r0", 1, seed=0)
        publish(store, "r1", 2, seed=10)
        old_r1 = visible(store, "r1")
        killed = killed_at(
            n,
            lambda root=root: publish(open_store(root), "r2", 3, seed=20, previous="r1"),
            patch_local_writes,
        )
        seen = visible(store, "r2")
        if seen is None:
            assert killed
            states.append("old")
        else:
            assert agrees(*seen) and seen[1].previous == "r1"
            states.append("new")
        assert visible(store, "r1") == old_r1
        # a rerun of r1 killed at the same write
        new_a = hits(77)
        rerun = run_report("r1", 2, {"a": new_a})
        killed_rerun = killed_at(
            n,
            lambda root=root, rerun=rerun, a=new_a: publish_run(
                open_store(root), "r1", rerun, {"a": a}
            ),
            patch_local_writes,
        )
        check_rerun(store, old_r1, float(new_a.mean()), failed=killed_rerun)
        if not killed and not killed_rerun:
            break
    assert states[-1] == "new" and states.count("old") >= 4, states


# --- S3: killed before each PutObject, or one PutObject refused -----------------------------------


def s3_client(url: str):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_an_s3_publish_killed_before_any_put_leaves_old_or_complete_state(moto_endpoint):
    states = []
    for n in range(1, 30):
        bucket = f"tl-kill-{uuid.uuid4().hex[:12]}"
        client = s3_client(moto_endpoint)
        client.create_bucket(Bucket=bucket)
        uri = f"s3://{bucket}/p"
        store = open_store(uri, client=client)
        publish(store, "r1", 1, seed=0)

        hook_ref = [lambda: None]

        def action(uri=uri, hook_ref=hook_ref):
            child = s3_client(moto_endpoint)  # a client of the child's own, after the fork
            child.meta.events.register("before-call.s3.PutObject", lambda **kw: hook_ref[0]())
            publish(open_store(uri, client=child), "r2", 2, seed=10)

        killed = killed_at(n, action, lambda hook, ref=hook_ref: ref.__setitem__(0, hook))
        try:
            states.append(check_new_release(store, failed=killed))
        except AssertionError as e:
            raise AssertionError(f"killed at PutObject {n}: {e}") from None
        if not killed:
            break
    assert states[-1] == "new" and states.count("old") >= 3, states


def test_s3_refusing_one_put_leaves_old_or_complete_state_and_reports_that_failure(moto_endpoint):
    from botocore.exceptions import ClientError

    outcomes = []
    for n in range(1, 30):
        bucket = f"tl-fail-{uuid.uuid4().hex[:12]}"
        client = s3_client(moto_endpoint)
        client.create_bucket(Bucket=bucket)
        store = open_store(f"s3://{bucket}/p", client=client)
        publish(store, "r1", 1, seed=0)
        calls = []

        def refuse(params, n=n, calls=calls, **kw):  # the request's own parameters
            calls.append(params["Key"])
            if len(calls) == n:
                error = {"Code": "InternalError", "Message": "We encountered an internal error"}
                meta = {"HTTPStatusCode": 500}
                raise ClientError({"Error": error, "ResponseMetadata": meta}, "PutObject")

        client.meta.events.register("before-parameter-build.s3.PutObject", refuse)
        err = None
        try:
            publish(store, "r2", 2, seed=10)
        except ClientError as e:
            err = e
        client.meta.events.unregister("before-parameter-build.s3.PutObject", refuse)
        state = check_new_release(store, failed=err is not None)
        if err is not None:  # the error names the key that was refused
            assert err.__notes__ == [f"s3://{bucket}/p/{calls[-1].removeprefix('p/')}"]
        outcomes.append((state, calls[-1].split("/")[-2] if err else None))
        if err is None:
            break
    assert outcomes[-1] == ("new", None)
    assert {"items", "runs", "compares"} <= {w for _, w in outcomes[:-1]}, outcomes


# --- the first failure is the one reported --------------------------------------------------------


def test_a_retried_publish_that_fails_again_raises_the_first_failure(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    publish(store, "r1", 1, seed=0)
    real = os.replace
    refuse = {"compares/": True}

    def replace(src, dst):
        for part, on in refuse.items():
            if on and part in str(dst):
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError) as first:
        publish(store, "r2", 2, seed=10, run_id="run-9")
    assert first.value.__notes__[0].startswith(f"{tmp_path}/releases/r2/compares/")
    refuse["items/"] = True  # the retry fails earlier, at another key
    with pytest.raises(OSError) as again:
        publish(store, "r2", 2, seed=10, run_id="run-9")
    assert again.value is first.value  # the cause, not the later symptom
    assert again.value.__notes__[0].startswith(f"{tmp_path}/releases/r2/compares/")
    assert again.value.__notes__[-1].startswith(
        "a retry of this publish failed too: OSError: [Errno 28] No space left on device"
    )
    assert visible(store, "r2") is None
    monkeypatch.undo()
    out = publish(store, "r2", 2, seed=10, run_id="run-9")  # a retry that succeeds
    assert agrees(*visible(store, "r2")) and out["compare"] == store.read_compare("r2")
    # a publish of another run id is not another attempt of that one
    monkeypatch.setattr(os, "replace", replace)
    refuse.update({"compares/": False, "items/": False, "report.json": True})
    with pytest.raises(OSError) as other:
        publish(store, "r3", 3, seed=20, run_id="run-10")
    assert other.value is not first.value and len(other.value.__notes__) == 1
    # without a run id every call is a publish of its own: each raises its own failure
    with pytest.raises(OSError) as one:
        publish(store, "r3", 3, seed=20)
    with pytest.raises(OSError) as two:
        publish(store, "r3", 3, seed=20)
    assert one.value is not two.value and len(two.value.__notes__) == 1
