"""adev.net.free_port: a port the kernel picked, never one to avoid."""
from __future__ import annotations

import socket

import pytest

from adev import net


def test_free_port_is_bindable_and_skips_avoided(monkeypatch):
    port = net.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free right now
    picks = iter([5001, 5001, 5002])

    class FakeSocket:
        def __init__(self, *a):
            self.port = next(picks)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, addr):
            pass

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(net.socket, "socket", FakeSocket)
    assert net.free_port(avoid={5001}) == 5002


def test_no_free_port_outside_avoided_is_an_error(monkeypatch):
    class Always:
        def __init__(self, *a):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, addr):
            pass

        def getsockname(self):
            return ("127.0.0.1", 5001)

    monkeypatch.setattr(net.socket, "socket", Always)
    with pytest.raises(net.NoFreePortError, match="could not find a free port"):
        net.free_port(avoid={5001})
