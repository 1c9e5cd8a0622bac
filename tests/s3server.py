"""moto's S3 on 127.0.0.1 with S3's write atomicity: the one S3 server of the test suite.

moto's ``put_object`` (moto/s3/responses.py) compares ``If-Match``/``If-None-Match`` with the
stored object and then writes it, with no lock between the two, and ``ThreadedMotoServer``
serves every request on its own thread. Two conditional PUTs with the same ``If-Match`` can
then both pass the check and both answer 200: a lost update that real S3 never shows (it
orders a conditional write atomically against every other write of the key). Our store's
compare-and-swap is tested against S3's semantics, so this server builds the same werkzeug
server and moto app as ``ThreadedMotoServer`` and wraps the app in :class:`SerializedWrites`,
which holds one lock across each request that writes (PUT, POST, DELETE). Reads stay
concurrent, so a read-modify-write race in our code still shows.

``python tests/s3server.py`` races conditional PUTs against moto's plain ``ThreadedMotoServer``
and against this one and prints how many won (it is kept out of the suite: on the plain server
the count depends on thread timing).
"""

from __future__ import annotations

import threading
from typing import Any

WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})


class SerializedWrites:
    """WSGI middleware: one request that writes at a time; a read runs alongside any request.

    moto builds each response in full inside the app call (the write included), so holding the
    lock across the call covers the check and the write of a conditional PUT."""

    def __init__(self, app: Any):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        if environ.get("REQUEST_METHOD", "GET").upper() not in WRITE_METHODS:
            return self.app(environ, start_response)
        with self.lock:
            return self.app(environ, start_response)


class MotoS3Server:
    """moto's server in a thread of this process, behind :class:`SerializedWrites`.

    The same interface as ``moto.server.ThreadedMotoServer`` (``start``, ``stop``,
    ``get_host_and_port``) plus ``url``. moto keeps its buckets in the process, so a server
    started again (on the same port or another) still has them; :func:`reset_s3` empties them."""

    def __init__(self, ip_address: str = "127.0.0.1", port: int = 0):
        self._ip_address = ip_address
        self._port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> MotoS3Server:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        # as ThreadedMotoServer._server_entry builds it, with the app wrapped
        app = SerializedWrites(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self._ip_address, self._port, app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def get_host_and_port(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("expected a started server, got one not started: call start()")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()  # the port is free again at once
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None


def slow_writes(monkeypatch: Any, seconds: float, keys: str = "") -> None:
    """moto sleeps ``seconds`` after checking a PUT's condition, before writing (each key
    ending in ``keys``): racing writers all fall into moto's check-then-write window. It patches
    moto's backend (``S3Backend.put_object``), not our code; ``monkeypatch`` undoes it."""
    import time

    from moto.s3.models import S3Backend

    put_object = S3Backend.put_object

    def slow_put_object(self: Any, bucket_name: str, key_name: str, *args: Any, **kw: Any) -> Any:
        if key_name.endswith(keys):
            time.sleep(seconds)
        return put_object(self, bucket_name, key_name, *args, **kw)

    monkeypatch.setattr(S3Backend, "put_object", slow_put_object)


def reset_s3(endpoint: str) -> None:
    """Empty moto's S3: every bucket of this process, whichever server made it."""
    import urllib.request

    req = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(req).close()


def aws_env(endpoint: str, home: Any) -> dict[str, str]:
    """The environment that points boto3 at ``endpoint`` with test credentials, and at config
    and credentials files under ``home`` that do not exist (the machine's own never leak in)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": f"{home}/no-config",
        "AWS_SHARED_CREDENTIALS_FILE": f"{home}/no-credentials",
    }


def s3_clients(endpoint: str, n: int) -> list[Any]:
    """``n`` boto3 S3 clients of ``endpoint``, each with its own connections and no retries."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"total_max_attempts": 1}, max_pool_connections=2)
    return [boto3.client("s3", endpoint_url=endpoint, config=config) for _ in range(n)]


def writer_body(i: int, size: int = 16) -> bytes:
    """What writer ``i`` of :func:`race_conditional_puts` puts: ``size`` bytes naming it."""
    return (b"writer %d " % i).ljust(size, b".")


def race_conditional_puts(
    clients: list[Any], bucket: str, key: str, *, if_none_match: bool = False, size: int = 16
) -> list[int]:
    """One thread per client puts ``size`` bytes at ``key`` at the same moment with the same
    condition (``If-Match`` on the object's current ETag, or ``If-None-Match: *`` on a key that
    does not exist); the HTTP status each one got, in client order."""
    from botocore.exceptions import ClientError

    cond: dict[str, str] = {"IfNoneMatch": "*"}
    if not if_none_match:
        etag = clients[0].put_object(Bucket=bucket, Key=key, Body=b"first")["ETag"]
        cond = {"IfMatch": etag}
    body = [writer_body(i, size) for i in range(len(clients))]
    barrier = threading.Barrier(len(clients))
    status = [0] * len(clients)

    def put(i: int) -> None:
        barrier.wait()
        try:
            resp = clients[i].put_object(Bucket=bucket, Key=key, Body=body[i], **cond)
            status[i] = resp["ResponseMetadata"]["HTTPStatusCode"]
        except ClientError as e:
            status[i] = e.response["ResponseMetadata"]["HTTPStatusCode"]

    threads = [threading.Thread(target=put, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return status


def _demo(rounds: int = 20, writers: int = 8, size: int = 8 << 20) -> None:
    """Races ``writers`` conditional PUTs of ``size`` bytes, ``rounds`` times per condition,
    against ``ThreadedMotoServer`` and :class:`MotoS3Server`. A body over moto's 5 MiB key
    buffer widens its window between check and write: moto spools the body to a temporary file
    there, with the GIL released. (On the plain server a write can also close the file of a key
    that a racing write is still answering from: a 500.)"""
    import logging
    import os
    import tempfile

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)  # no line or traceback per request
    plain = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    plain.start()
    host, port = plain.get_host_and_port()
    ours = MotoS3Server().start()
    servers = {"ThreadedMotoServer": f"http://{host}:{port}", "MotoS3Server": ours.url}
    with tempfile.TemporaryDirectory() as home:
        os.environ.update(aws_env("http://unused.invalid", home))
        for name, endpoint in servers.items():
            clients = s3_clients(endpoint, writers)
            bucket = f"race-{name.lower()}"  # both servers share moto's state in this process
            clients[0].create_bucket(Bucket=bucket)
            for cond in ("If-Match", "If-None-Match"):
                new_key = cond == "If-None-Match"
                wins, errors = [], 0
                for r in range(rounds):
                    key = f"{cond}-{r}"
                    status = race_conditional_puts(
                        clients, bucket, key, if_none_match=new_key, size=size
                    )
                    wins.append(status.count(200))
                    errors += status.count(500)
                print(
                    f"{name}: {cond}, {rounds} rounds of {writers} writers of {size} bytes: "
                    f"{sum(w > 1 for w in wins)} rounds with more than one 200 (most in one "
                    f"round: {max(wins)}), {wins.count(1)} with exactly one, "
                    f"{wins.count(0)} with none; {errors} answers 500",
                    flush=True,
                )
    plain.stop()
    ours.stop()


if __name__ == "__main__":
    import sys

    _demo(*(int(a) for a in sys.argv[1:4]))
