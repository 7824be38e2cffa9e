"""The listings section: paged listings at 10 and at 10,000 organisations (issue #33, item 2)."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, table


def _size(value: int) -> str:
    return f"{value / 1024:,.1f} KiB" if value >= 1024 else f"{value:,} B"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def section_listings(result: dict[str, Any]) -> list[str]:
    small, large = result["organisations"]["small"], result["organisations"]["large"]
    rows = []
    for row in result["rows"]:
        at_small, at_large = row["small"], row["large"]
        rows.append(
            [
                row["listing"] + ("" if row["judged"] else " ¹"),
                f"{num(at_small['p50_ms'], 2)} / {num(at_small['p99_ms'], 2)}",
                f"{num(at_large['p50_ms'], 2)} / {num(at_large['p99_ms'], 2)}",
                f"**{_ratio(row['p99_ratio'])}**" if row["judged"] else _ratio(row["p99_ratio"]),
                f"{_size(at_small['bytes'])} / {_size(at_large['bytes'])}",
            ]
        )
    worst = result["worst_p99_ratio"]
    return [
        "## Listings at 10,000 organisations",
        "",
        measured_on(result),
        "",
        f"`GET /organisations`, `/schedulers`, `/queues` (keyset pages: `limit`, `cursor` from the `Link` header, "
        f"`organisation=` and `q=` searches; docs/api.md) and the status page's paged views, at {small:,} "
        f"organisations ({result['schedulers']['small']:,} schedulers) and at {large:,} "
        f"({result['schedulers']['large']:,}), each estate in its own database on the same PostgreSQL, one "
        f"`baton serve` on each; one client per series for {result['duration_s']:g} s, both estates' series "
        f"interleaved over {result['rounds']} round(s); medians of the rounds. Pages of `limit={result['limit']}` "
        "so that a page holds as many rows at both sizes; the last page is the deepest cursor that still fills "
        "a page (at 10 organisations, the first page); a prefix search matches ten organisations. Before paging "
        "(issue #33), `GET /schedulers` answered 9.1 MB in 1.2 s at 10,000 organisations, `GET /queues` 3.7 MB "
        "in 0.9 s.",
        "",
        *table(
            [
                "request",
                f"{small:,} orgs p50 / p99 ms",
                f"{large:,} orgs p50 / p99 ms",
                "p99 ratio",
                "answer, small / large",
            ],
            rows,
            "lrrrr",
        ),
        f"Worst p99 ratio of the judged listings: **{_ratio(worst)}** (target ≤ "
        f"{result['targets']['p99_ratio']:g}x). ¹ Not judged: the default page holds up to 100 rows at 10,000 "
        "organisations but only 10 or 30 at 10, and the status page's views add the estate's counts, aggregate "
        "statements over every scheduler whose cost grows with the estate, though no row is listed: from 3,000 "
        "schedulers one process shares them between requests for ten times what they took to compute, at least "
        '2 s (operations.md, "At 10,000 organisations"), so most requests measured at 10,000 read a shared '
        "snapshot and the rest pay for a new one.",
        "",
    ]
