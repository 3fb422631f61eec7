"""Network helpers shared by the stack and the gate: picking a free TCP port."""
from __future__ import annotations

import socket


class NoFreePortError(RuntimeError):
    """No free port outside the ones to avoid was found."""


def free_port(host: str = "127.0.0.1", avoid: set[int] | None = None) -> int:
    """An ephemeral port that is free right now on ``host`` (the kernel picks it), not in
    ``avoid``. Raises :class:`NoFreePortError` after 50 picks that were all in ``avoid``."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if not avoid or port not in avoid:
            return port
    raise NoFreePortError("could not find a free port")
