"""A retried publish that fails again raises the first attempt's error while that attempt is among
the last 64 failed publishes (by store, release and run id); an older one is forgotten and its
retry raises its own error."""

from __future__ import annotations

import pytest
from store_helpers import make_report

from tinyllm.publish import publish_run
from tinyllm.store import open_store

NOTE = "a retry of this publish failed too: "


def test_the_last_64_failed_publishes_are_remembered_and_the_oldest_goes(tmp_path):
    store = open_store(tmp_path)
    bad = dict(make_report("r1", "2026-12-01T18:00:00Z", []), schema_version=99)

    def fail(run_id: str) -> BaseException:
        with pytest.raises(Exception) as ei:
            publish_run(store, "r1", bad, {}, run_id=run_id)
        return ei.value

    first = [fail(f"run-{i}") for i in range(64)]
    assert len({id(e) for e in first}) == 64 and not getattr(first[0], "__notes__", [])
    again = fail("run-0")  # 64 remembered: run-0 is one of them
    assert again is first[0]
    assert len(again.__notes__) == 1 and again.__notes__[0].startswith(NOTE)
    assert fail("run-63") is first[63]
    fail("run-64")  # the 65th: run-0, the oldest, is forgotten
    forgotten = fail("run-0")
    assert forgotten is not first[0] and type(forgotten) is type(first[0])
    assert not getattr(forgotten, "__notes__", [])
    # run-0's new failure is remembered in its turn and pushes out the oldest, run-1
    assert fail("run-2") is first[2]
    assert fail("run-0") is forgotten
