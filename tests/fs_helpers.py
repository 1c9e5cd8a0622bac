"""Special files and a deadline for the tests of untrusted paths (FIFOs, devices, links)."""

from __future__ import annotations

import contextlib
import os
import signal
import stat

import pytest


@contextlib.contextmanager
def within(seconds: float):
    """Fail with TimeoutError instead of hanging: SIGALRM interrupts a blocking open() or read()
    (of a FIFO without a writer, say)."""

    def alarm(signum, frame):
        raise TimeoutError(f"still blocked after {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def chardev(path) -> None:
    """A character device (major 1, minor 3: what /dev/null is) at ``path``, inside the test's
    folder; the test is skipped where making one needs root."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a character device needs root")
