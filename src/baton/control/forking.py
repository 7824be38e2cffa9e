"""How the process runner starts its children: forked from a fork server that has imported what a
scheduler imports (cli/forkserver.py), so that each child adds only what it changes itself, or, where
the kernel has no pidfds, as a fresh interpreter each (`python -m baton standalone ...`).

Either way a child is a `Child`: its pid, whether it lives, SIGTERM, SIGKILL and a wait. A forked
child is the fork server's, not ours: we watch and signal it through a pidfd, which names that
process and no other, even once its pid is reused.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

from baton.core.logging import get_logger
from baton.core.processes import die_with_parent

log = get_logger("baton.runners")
REPLY_TIMEOUT_SECONDS = 120.0  # the first answer waits for the server's imports, on a busy machine too
CLOSE_TIMEOUT_SECONDS = 10.0


def fork_server_supported() -> bool:
    return hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


class Child(Protocol):
    pid: int

    def alive(self) -> bool: ...

    def terminate(self) -> None:
        """SIGTERM: stop gracefully."""

    def kill(self) -> None: ...

    def wait(self, timeout: float | None) -> bool:
        """Whether it has gone within `timeout` seconds (None: as long as it takes)."""
        ...


def stop_children(children: list[Child], timeout: float) -> None:
    """SIGTERM to all at once, then SIGKILL to those still running after `timeout`: they stop in
    parallel, not one after another."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + timeout
    for child in children:
        if not child.wait(max(0.0, deadline - time.monotonic())):
            log.warning("scheduler process did not stop in time; killing it", pid=child.pid)
            child.kill()
            child.wait(None)


class ExecutedChild:
    """A child we started ourselves as a fresh interpreter."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.pid = self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()

    def wait(self, timeout: float | None) -> bool:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


class ForkedChild:
    """A child of the fork server, known to us by a pidfd (closed once we have seen the child go)."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self._pidfd: int | None = pidfd
        self._lock = threading.Lock()  # the pidfd is closed by whichever caller sees the child go

    def alive(self) -> bool:
        with self._lock:
            if self._pidfd is None:
                return False
            if not _readable(self._pidfd, 0.0):
                return True
            self._forget()
            return False

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def wait(self, timeout: float | None) -> bool:
        with self._lock:
            if self._pidfd is None:
                return True
            watched = os.dup(self._pidfd)  # waited on outside the lock; ours to close
        try:
            gone = _readable(watched, timeout)
        finally:
            os.close(watched)
        if gone:
            with self._lock:
                self._forget()
        return gone

    def _signal(self, signum: int) -> None:
        with self._lock:
            if self._pidfd is None:
                return
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signum)

    def _forget(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _readable(pidfd: int, timeout: float | None) -> bool:
    """A pidfd turns readable when its process exits."""
    readable, _, _ = select.select([pidfd], [], [], timeout)
    return bool(readable)


class ForkServer:
    """The director's side of cli/forkserver.py: started on the first fork, started again if it died
    (its children got SIGTERM then, and the runner restarts them), closed with the runner.

    The server exits when its end of the socket reads end-of-file: when we close ours, or when this
    process dies however it dies (the kernel closes it). Not by a parent-death signal: that one
    follows the thread that started the server, which need not live as long as the process."""

    def __init__(self, environment: Callable[[], dict[str, str]]) -> None:
        self.environment = environment  # the children's, read when the server starts
        self.process: subprocess.Popen[bytes] | None = None
        self._channel: socket.socket | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        """Start the server now if it does not run: it imports in its own process meanwhile."""
        with self._lock:
            self._start_unless_running()

    def fork(self, argv: list[str]) -> ForkedChild:
        """A new child running `baton <argv>`."""
        with self._lock:
            self._start_unless_running()
            assert self._channel is not None
            try:
                self._channel.sendall(json.dumps({"argv": argv}).encode())
                message, fds, _, _ = socket.recv_fds(self._channel, 4096, 1)
            except OSError as exc:
                self._close_locked()
                raise RuntimeError(f"the fork server did not answer: {exc}") from exc
            if not message or not fds:
                self._close_locked()
                raise RuntimeError("the fork server exited; it is started again on the next fork")
            return ForkedChild(int(json.loads(message)["pid"]), fds[0])

    def _start_unless_running(self) -> None:
        if self.process is None or self.process.poll() is not None or self._channel is None:
            self._start()

    def _start(self) -> None:
        if self.process is not None:
            log.warning("fork server gone; starting another", exit_code=self.process.poll())
        self._close_locked()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "baton.cli.forkserver", str(theirs.fileno())],
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
            )
        ours.settimeout(REPLY_TIMEOUT_SECONDS)
        self._channel = ours

    def close(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> None:
        """Stop the server (its children should have been stopped first)."""
        with self._lock:
            self._close_locked(timeout)

    def _close_locked(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> None:
        channel, self._channel = self._channel, None
        process, self.process = self.process, None
        if channel is not None:
            channel.close()  # the server sees the end of its requests and exits
        if process is None:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
