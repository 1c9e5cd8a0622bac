"""The suite's S3 server (tests/s3server.py): conditional writes are atomic, as on S3.

moto checks a PUT's condition and then writes, unlocked; these tests slow moto's write down
(s3server.slow_writes) so that every racing writer is inside that window at once.
Against moto's plain ThreadedMotoServer all of them then win; against ours exactly one does."""

from __future__ import annotations

import threading

import pytest
from s3server import race_conditional_puts, s3_clients, slow_writes, writer_body

WRITERS = 8


@pytest.mark.parametrize("condition", ["If-Match", "If-None-Match"])
def test_racing_conditional_puts_have_exactly_one_winner(s3_env, monkeypatch, condition):
    slow_writes(monkeypatch, 0.3)
    clients = s3_clients(s3_env, WRITERS)
    clients[0].create_bucket(Bucket="tl-race")
    status = race_conditional_puts(
        clients, "tl-race", "k", if_none_match=condition == "If-None-Match"
    )
    assert sorted(status) == [200] + [412] * (WRITERS - 1), (
        f"expected one 200 and {WRITERS - 1} 412 for {condition}, got {status}"
    )
    body = clients[0].get_object(Bucket="tl-race", Key="k")["Body"].read()
    assert body == writer_body(status.index(200))  # the object is the winner's


def test_reads_run_alongside_a_write(s3_env, monkeypatch):
    """The lock holds writes only: a GET answers while a PUT is inside moto's write."""
    from moto.s3.models import S3Backend

    put_object = S3Backend.put_object
    inside, read_done = threading.Event(), threading.Event()

    def held_put_object(self, bucket_name, key_name, *args, **kwargs):
        if key_name == "held":
            inside.set()
            read_done.wait(30)
        return put_object(self, bucket_name, key_name, *args, **kwargs)

    clients = s3_clients(s3_env, 2)
    clients[0].create_bucket(Bucket="tl-read")
    clients[0].put_object(Bucket="tl-read", Key="other", Body=b"x")
    monkeypatch.setattr(S3Backend, "put_object", held_put_object)
    writer = threading.Thread(
        target=lambda: clients[0].put_object(Bucket="tl-read", Key="held", Body=b"y")
    )
    writer.start()
    assert inside.wait(30), "expected the PUT inside moto's write, got no PUT after 30 s"
    assert clients[1].get_object(Bucket="tl-read", Key="other")["Body"].read() == b"x"
    held = writer.is_alive()  # still inside its write: the GET did not wait for it
    read_done.set()
    writer.join(30)
    assert held, "expected the GET to answer while the PUT was held, got it after the PUT"
