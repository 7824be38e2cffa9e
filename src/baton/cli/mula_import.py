"""What `baton import-mula` shows: a progress bar per kind of row on a terminal (log lines otherwise),
and the summary at the end: counts per kind, the rows left out and why, the statuses that changed."""

from __future__ import annotations

import sys
import time
from typing import Any

import typer

from baton.core.logging import get_logger
from baton.core.mula import KINDS, ImportTally
from baton.service.mula_import import ImportReport

log = get_logger("baton.import_mula")
LOG_EVERY_SECONDS = 10.0
LABELS = {"organisations": "organisations", "schedules": "schedules", "tasks": "tasks", "boefje_runs": "boefje runs"}


class TerminalProgress:
    """One progress bar per kind, on stderr."""

    def __init__(self) -> None:
        self._bar: Any = None

    def begin(self, kind: str, total: int) -> None:
        self._bar = typer.progressbar(length=max(total, 1), label=f"{kind:<13}", file=sys.stderr, show_pos=True)
        self._bar.__enter__()

    def advance(self, rows: int) -> None:
        self._bar.update(rows)

    def end(self) -> None:
        self._bar.update(max(0, self._bar.length - self._bar.pos))  # a length that was a bound: shown done
        self._bar.__exit__(None, None, None)
        self._bar = None


class LogProgress:
    """A log line when each kind begins and ends, and every LOG_EVERY_SECONDS between."""

    def __init__(self) -> None:
        self._kind, self._total, self._done, self._said = "", 0, 0, 0.0

    def begin(self, kind: str, total: int) -> None:
        self._kind, self._total, self._done, self._said = kind, total, 0, time.monotonic()
        log.info("importing", kind=kind, rows=total)

    def advance(self, rows: int) -> None:
        self._done += rows
        if time.monotonic() - self._said >= LOG_EVERY_SECONDS:
            self._said = time.monotonic()
            log.info("importing", kind=self._kind, done=self._done, rows=self._total)

    def end(self) -> None:
        log.info("imported", kind=self._kind, rows=self._done)


def progress() -> TerminalProgress | LogProgress:
    return TerminalProgress() if sys.stderr.isatty() else LogProgress()


def summary(report: ImportReport) -> list[str]:
    """The lines printed at the end of a run."""
    if report.outcome == "already":
        record = report.recorded
        assert record is not None and record.finished_at is not None
        kinds = (record.summary or {}).get("kinds", {})
        then = ", ".join(f"{kinds[kind]['added']} {LABELS[kind]}" for kind in KINDS if kind in kinds)
        return [
            f"mula's state was imported into {report.target} at {record.finished_at.isoformat(timespec='seconds')} "
            f"from {record.source} (alembic revision {record.revision}; {then}).",
            "Nothing added or changed: an import is taken over once (docs/openkat.md says how to start again).",
        ]
    if report.outcome == "absent":
        found = report.note or f"{report.source} has no tables of mula's"
        return [f"{found}: nothing to import into {report.target}."]
    layout = report.layout
    assert layout is not None
    lines = [
        f"mula: {report.source}, alembic revision {layout.revision} ({layout.release})",
        f"Baton: {report.target}",
    ]
    if report.note:
        lines.append(report.note)
    dry = report.outcome == "dry-run"
    lines.extend(_table(report.tally, dry))
    statuses = ", ".join(f"{count} {status}" for status, count in sorted(report.tally.statuses.items()))
    if statuses:
        lines.append(f"tasks read by status: {statuses}")
    lines.extend(_reasons(report.tally))
    if dry:
        lines.append("Dry run: nothing was written.")
    elif not report.tally.changed_anything:
        lines.append("Nothing added or changed: Baton's database had everything already. Import recorded as finished.")
    elif report.outcome == "completed":
        lines.append("The import begun earlier is complete now, and recorded as finished: a run again changes nothing.")
    else:
        lines.append("Import finished and recorded: a run again changes nothing.")
    return lines


def _table(tally: ImportTally, dry: bool) -> list[str]:
    added = "to add" if dry else "added"
    header = f"{'':<14}{'read':>10}{added:>10}" + ("" if dry else f"{'present':>10}") + f"{'skipped':>10}"
    lines = [header]
    for kind in KINDS:
        counts = tally[kind]
        row = f"{LABELS[kind]:<14}{counts.read:>10}{counts.added:>10}"
        if not dry:
            row += f"{counts.present:>10}"
        lines.append(row + f"{sum(counts.skipped.values()):>10}")
    return lines


def _reasons(tally: ImportTally) -> list[str]:
    lines = []
    for kind in KINDS:
        counts = tally[kind]
        for change, number in sorted(counts.changed.items()):
            if number:
                lines.append(f"{LABELS[kind]}: {number} {change}")
        for reason, number in sorted(counts.skipped.items()):
            lines.append(f"{LABELS[kind]}: {number} skipped: {reason}")
    return lines
