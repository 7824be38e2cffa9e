"""The section on taking over mula's database: rows per second against a raw INSERT ... SELECT, peak memory."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, pct, table


def section_mula_import(result: dict[str, Any]) -> list[str]:
    small, large = result["sizes"]
    ratios = result["ratios"]
    complete = "yes" if result["complete"] else "**NO: the measurement is invalid**"
    rows = []
    for size in (small, large):
        raw = " and ".join(num(seconds, 1) for seconds in size["raw_runs"])
        rows.append(
            [
                f"{size['tasks']:,} tasks, {size['schedules']:,} schedules",
                num(size["import_seconds"], 1),
                num(size["import_rows_per_second"]),
                f"{num(size['raw_seconds'], 1)} ({raw})",
                num(size["raw_rows_per_second"]),
                pct(size["import_rows_per_second"] / size["raw_rows_per_second"]),
                num(size["peak_rss_mib"], 1),
            ]
        )
    header = [
        "",
        "import-mula s",
        "rows/s",
        "raw INSERT ... SELECT s (before and after)",
        "rows/s",
        "ratio",
        "peak MiB",
    ]
    return [
        "## Taking over mula's database",
        "",
        measured_on(result),
        "",
        f"`baton import-mula` as an operator runs it (a process of its own) on a mula-shaped database (the "
        f"stand-in of `harness/standins/mula_db.py` at alembic revision 0010: boefje tasks running "
        f"{large['schedules']:,} jobs again and again over {large['organisations']} organisations, a schedule "
        f"per job, one task per job queued, the rest completed), into Baton's tables in schema `baton` of the "
        "same database (BATON_DATABASE_SCHEMA): organisations with their queues, schedules, tasks (those not "
        "queued, then the queued ones in mula's order) and `boefje_runs`, read through server-side cursors in "
        "one read-only snapshot and written 10,000 rows a batch (COPY into a temporary table, one INSERT from "
        "it). Rows are tasks plus schedules; the command's time includes starting Python, migrating and "
        "counting. The baseline copies the same rows into the same tables with one raw `INSERT ... SELECT` "
        "each (organisations and queues, schedules, tasks, `boefje_runs`: every index and trigger of Baton's "
        f"tables), measured before and after the import. Every row imported: {complete}.",
        "",
        *table(header, rows, "lrrrrrr"),
        f"Rows per second at {large['tasks']:,} tasks: {pct(ratios['import_to_raw'])} of the raw copy "
        f"({pct(ratios['import_to_raw_small'])} at {small['tasks']:,}). Peak memory (the process's resident set "
        f"high-water mark, from the kernel) at {large['tasks']:,} tasks is "
        f"{num(ratios['peak_rss_large_to_small'], 2)} times that at {small['tasks']:,}: the rows are streamed, "
        "a batch at a time.",
        "",
    ]
