"""The rocklet's reader of an env process's answers (``env_process.LineReader``): lines from a
socket with a deadline per read, whatever the socket's descriptor number."""

from __future__ import annotations

import os
import resource
import socket
import time

import pytest

from rock_core.rocklet.env_process import LineReader


def test_a_socket_past_1024_descriptors_is_read_within_its_deadline() -> None:
    """A rocklet holding many descriptors gives an env's socket a number ``select`` refuses:
    its answers are still read, and a silent one still times out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1200, hard), hard))
    held: list[int] = []
    try:
        while not held or held[-1] <= 1030:
            held.append(os.open("/dev/null", os.O_RDONLY))
        ours, theirs = socket.socketpair()
        with ours, theirs:
            assert ours.fileno() > 1024
            reader = LineReader(ours)
            theirs.sendall(b'{"ok": true}\n')
            assert reader.line(time.monotonic() + 5) == b'{"ok": true}'
            with pytest.raises(TimeoutError):
                reader.line(time.monotonic() + 0.05)
            theirs.close()
            assert reader.line(time.monotonic() + 5) is None  # the env process went away
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
