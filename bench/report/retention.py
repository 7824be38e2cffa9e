"""The retention section: pops while finished tasks are removed, against pops without it."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, pct, runs, table

SERIES = (
    ("HTTP pops (`baton serve`)", "http", "http_8"),
    ("raw SQL pops (Baton's statement)", "sql", "sql_8"),
)


def section_retention(result: dict[str, Any]) -> list[str]:
    series = result["series"]
    rows = []
    for label, name, key in SERIES:
        without, beside = series[name], series[f"{name}_retention"]
        rows.append(
            [
                label,
                num(without["per_second"]),
                runs(without),
                num(beside["per_second"]),
                runs(beside),
                pct(result["ratios"][key]),
                f"{num(without['p99_ms'], 1)} / {num(beside['p99_ms'], 1)}",
            ]
        )
    removal = result["removal"]
    lasted = "yes" if result["backlog_lasted"] else "**NO: the measurement is invalid**"
    return [
        "## Retention beside pops",
        "",
        measured_on(result),
        "",
        f"{result['finished_at_start']:,} finished tasks (completed, failed, cancelled) last changed 60 days ago "
        f"(written in {num(result['fill_s'])} s) beside {result['queued_at_start']:,} queued ones; "
        f"`BATON_TASK_RETENTION_DAYS=30`. {result['clients']} clients pop one task per request for "
        f"{result['duration_s']:g} s, without and with Baton's housekeeper removing the backlog (batches of 1,000 "
        f"oldest first, paced to half of one connection's time, a second per round, as the leading director "
        f"or one `baton worker` runs it), interleaved over {result['rounds']} rounds; medians.",
        "",
        *table(
            ["pops, 8 clients", "without /s", "runs", "while removing /s", "runs", "ratio", "p99 ms without / with"],
            rows,
            "lrrrrrr",
        ),
        f"The housekeeper removed {removal['removed']:,} tasks during the measurements, "
        f"{num(removal['removed_per_second_median'])} per second (median over its runs, each from its start to "
        f"its stop around one series); {result['finished_left']:,} were left at the end (backlog lasted: {lasted}). "
        "At the issue's scale (200 M tasks a day, 2,300 a second on average) retention must remove as many as "
        "finish: the rate above is what one remover achieves beside this load, not its limit (it is paced).",
        "",
    ]
