"""Serving a dashboard folder on 127.0.0.1 with the standard library's http.server."""

from __future__ import annotations

import functools
import http.server
import os
import socketserver
import threading
from typing import Any


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass


def bind(folder: str | os.PathLike[str], port: int) -> socketserver.ThreadingTCPServer:
    """A server for ``folder`` bound to 127.0.0.1:PORT (0: a free port) but not yet serving;
    ``server.server_address[1]`` is the port it is bound to. Call ``serve_forever()``."""
    handler = functools.partial(_QuietHandler, directory=os.fspath(folder))
    server = socketserver.ThreadingTCPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


def serve(folder: str | os.PathLike[str], port: int, *, block: bool = True) -> Any:
    """Serve ``folder`` on http://127.0.0.1:PORT/ with the standard library's http.server.

    ``block=False`` starts it on a daemon thread and returns the server (call ``shutdown()``).
    """
    server = bind(folder, port)
    if block:
        with server:
            server.serve_forever()
        return server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve_until_interrupted(server: socketserver.BaseServer) -> None:
    """Run ``server`` (from :func:`bind`) until Ctrl-C, then shut it down and close it.

    The server loop runs on a daemon thread and this thread only waits for it, so the
    KeyboardInterrupt of a Ctrl-C is raised here, never inside the server's loop or while it
    starts a request's thread; ``shutdown()`` is then called from another thread than the
    loop's, as socketserver requires.
    """
    loop = threading.Thread(target=server.serve_forever, daemon=True)
    loop.start()
    try:
        while loop.is_alive():
            loop.join(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
