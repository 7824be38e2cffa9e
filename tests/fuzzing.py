"""Counts of what the fuzzers sent and got, per backend and operation, for scripts/fuzz.sh's report."""

from __future__ import annotations

import json
import os
from collections import Counter

EXAMPLES = int(os.environ.get("BATON_FUZZ_EXAMPLES", "15"))
REPORT = os.environ.get("BATON_FUZZ_REPORT")
OUTCOMES: dict[tuple[str, str], Counter[int]] = {}


def record(backend: str, operation: str, status: int) -> None:
    OUTCOMES.setdefault((backend, operation), Counter())[status] += 1


def write_report() -> None:
    """Append this process's counts to BATON_FUZZ_REPORT (JSON lines), then forget them."""
    if REPORT:
        with open(REPORT, "a") as handle:
            for (backend, operation), counts in sorted(OUTCOMES.items()):
                line = {"backend": backend, "operation": operation, "statuses": dict(counts)}
                handle.write(json.dumps(line) + "\n")
    OUTCOMES.clear()
