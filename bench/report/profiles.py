"""Sections on where the time goes: the hot path's and ingest's profiles."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, pct, table


def _profile_table(
    label: str, before: dict[str, Any] | None, after: dict[str, Any], key: str, after_name: str = "after"
) -> list[str]:
    width = max(len(after[key]), len(before[key]) if before else 0)
    rows = []
    for index in range(width):
        cells = []
        for side in (before, after):
            if side is None:
                continue
            entries = side[key]
            if index < len(entries):
                frame, share = entries[index]
                cells += [f"`{frame}`", f"{share:.1%}"]
            else:
                cells += ["", ""]
        rows.append(cells)
    header = (["before", "share"] if before else []) + [after_name, "share"]
    return [f"**{label}**", "", *table(header, rows, ("lr" if before else "") + "lr")]


def section_profile(result: dict[str, Any]) -> list[str]:
    after = result["after"]
    before = result.get("before")
    lines = [
        "## Profile: where a pop's time goes (before / after)",
        "",
        measured_on(result),
        "",
        f"`py-spy record -r {result['rate_hz']} -d {result['seconds']} -f raw` on the `baton serve` process while "
        f"{result['clients']} clients pop one task per request from a filled queue. "
        f'"Before" is commit {result["old_commit"]} (the code before the restructure: sync endpoints, the ORM, '
        'a thread hop per request) on a fresh database of its own on the same PostgreSQL server; "after" is this '
        "code. py-spy pauses the process for each sample (its default), which slows both versions, the one with "
        "more threads more; so pops/s are also given unprofiled, measured just before. Samples whose innermost "
        "frame is a blocked thread (waiting for work, a lock, or a synchronous PostgreSQL answer) are counted "
        "as waiting and left out of the tables, whose shares are of the remaining (busy) samples.",
        "",
    ]
    if before is None:
        lines += [f"Before: not measured ({result.get('before_skipped', 'skipped')}).", ""]
    lines += table(
        ["", "pops/s, 8 clients, unprofiled", "pops/s while profiled", "p50 ms profiled", "samples", "waiting"],
        [
            [
                name,
                num(side.get("pops_per_second_unprofiled")),
                num(side["pops_per_second"]),
                num(side["p50_ms"], 2),
                f"{side['samples']:,}",
                pct(side.get("waiting_share")),
            ]
            for name, side in (("before", before), ("after", after))
            if side is not None
        ],
    )
    lines += _profile_table("Self time by component", before, after, "by_component")
    lines += _profile_table("Top self frames", before, after, "top_self")
    lines += _profile_table(
        "Top inclusive frames (frames that spend 95 % or more of their time in a single callee, such as the "
        "middleware chain, left out)",
        before,
        after,
        "top_inclusive",
    )
    return lines + section_ingest_profile(result)


def section_ingest_profile(result: dict[str, Any]) -> list[str]:
    ingest = result.get("ingest")
    if not ingest:
        return []
    lines = [
        "### Where an ingested event's time goes",
        "",
        f"py-spy (100 Hz) on the benchmark process itself while one `NormalizerScheduler` (a thread of it, as "
        f"in the ingest scenario) turned {ingest['events']:,} RabbitMQ events into tasks "
        f"({num(ingest['per_second'])} events/s while profiled). Shares of busy samples of the whole process "
        "(the benchmark's own thread that watches the queue's counter is in there too, mostly asleep).",
        "",
    ]
    lines += _profile_table("Top inclusive frames", None, ingest, "top_inclusive", "frame")
    lines += _profile_table("Top self frames", None, ingest, "top_self", "frame")
    return lines
