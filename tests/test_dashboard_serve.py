"""tinyllm.dashboard.serve_until_interrupted: a Ctrl-C (KeyboardInterrupt in the main thread)
stops the server, which then refuses connections; a request served before it is answered."""

from __future__ import annotations

import _thread
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

from tinyllm.dashboard import bind, serve_until_interrupted


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler for the test: a suite started from a background shell
    inherits SIGINT ignored, and ``interrupt_main`` then does nothing (the test would hang)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_ctrl_c_shuts_the_server_down_and_closes_it(tmp_path, ctrl_c_raises):
    (tmp_path / "index.html").write_text("<h1>Overview</h1>", encoding="utf-8")
    server = bind(tmp_path, 0)
    port = server.server_address[1]
    got: list[bytes] = []

    def client() -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10) as r:
                got.append(r.read())
        finally:
            _thread.interrupt_main()  # what Ctrl-C does: KeyboardInterrupt in the main thread

    threading.Thread(target=client, daemon=True).start()
    t0 = time.monotonic()
    serve_until_interrupted(server)  # returns on the interrupt, without raising it
    assert time.monotonic() - t0 < 30
    assert got == [b"<h1>Overview</h1>"]
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5)
