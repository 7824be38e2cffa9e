"""Child processes that die with their parent (Linux): no scheduler process runs on as an orphan."""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent dies (called in the child; elsewhere a no-op)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
