"""How values, rows and tables are written in the documents."""

from __future__ import annotations

import math
from typing import Any

from bench.report.targets import Shown


def shown(value: float | None, how: Shown) -> str:
    if value is None:
        return "—"
    if how == "percent":
        return f"{value:.0%}"
    if how == "times":
        return f"{value:.2f}x"
    if how == "mib":
        return f"{value:.1f} MiB"
    if how == "seconds":
        return "never" if math.isinf(value) else f"{value:,.1f} s"
    if how == "count":
        return f"{value:,.0f}"
    if how == "ms":
        return f"{value:.2f} ms"
    if how == "cpu_per_minute":
        return f"{value:,.1f} CPU-s/min"
    return f"{value:,.0f}/s"


def num(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def runs(row: dict[str, Any]) -> str:
    values = row.get("runs") or []
    if len(values) < 2:
        return ""
    return f"{min(values):,.0f} to {max(values):,.0f}"


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(marks) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def measured_on(result: dict[str, Any]) -> str:
    meta = result.get("_meta", {})
    quick = " (`--quick`)" if meta.get("quick") else ""
    return f"*Measured {meta.get('started', '?')}{quick} in {meta.get('seconds', 0):.0f} s.*"


def seconds(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    return "never" if math.isinf(value) else num(value, digits)


def lease_settings(settings: dict[str, Any]) -> str:
    parts = [
        f"lease {settings['lease_s']:g} s",
        f"renew deadline {settings['renew_deadline_s']:g} s",
        f"retry period {settings['retry_period_s']:g} s",
    ]
    if "worker_round_s" in settings:
        parts.append(f"worker round {settings['worker_round_s']:g} s")
    if "scheduler_threads" in settings:
        parts.append(f"{settings['scheduler_threads']} threads per worker for its schedulers' turns")
    if "reconcile_interval_s" in settings:
        parts.append(f"reconcile interval {settings['reconcile_interval_s']:g} s")
    if "poll_interval_s" in settings:
        parts.append(f"scheduler poll interval {settings['poll_interval_s']:g} s")
    return ", ".join(parts)
