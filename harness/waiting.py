"""Waiting for things: free ports, conditions that become true."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(condition: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Poll `condition` until it holds or `timeout` passes; the caller asserts on the result."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()
