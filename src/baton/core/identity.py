"""Who this process is, as other processes see it in the database."""

from __future__ import annotations

import os


def process_location() -> str:
    """`host:pid`: where a scheduler, director or worker runs."""
    return f"{os.uname().nodename}:{os.getpid()}"
