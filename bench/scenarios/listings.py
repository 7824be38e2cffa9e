"""Listings at the size of a large estate (issue #33, item 2): `GET /organisations`, `/schedulers`,
`/queues` and the status page's two paged views, at 10 organisations (30 schedulers) and at 10,000
(30,000), on PostgreSQL.

Two databases side by side, one per estate (organisations and schedulers written in two statements
each, straight into the database, two queued tasks per organisation so that the queue counters have
rows), one `baton serve --no-director` on each; every series is one client for a few seconds, the
series of both estates interleaved round by round (the machine is shared). Each listing is measured
on its first page, on its last full page (the deepest cursor that still fills a page: at 10
organisations that is the first page) and with a search (a prefix that matches ten organisations, or
one organisation's exact id), all with `limit=10`, so that a page holds the same rows at both sizes;
the first page at the default limit (100) beside them, and the bytes of each answer. Target: the p99
at 10,000 organisations at most twice the p99 at 10, for every listing.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import psycopg
from psycopg.conninfo import conninfo_to_dict

from baton.core.listing import encode_cursor
from baton.core.model import SchedulerType, scheduler_id_for
from baton.storage.urls import libpq_conninfo
from bench.loadgen import Request
from bench.scenarios.common import (
    Context,
    add_organisations,
    clients,
    fill,
    fresh_database,
    interleaved,
    ratio,
    serve,
)

LIMIT = 10
TARGET_P99_RATIO = 2.0
TYPES = sorted(kind.value for kind in SchedulerType)


def organisation_names(count: int) -> list[str]:
    return [f"est-{n:05d}" for n in range(count)]


def scheduler_keys(organisations: list[str]) -> list[tuple[str, str]]:
    """The schedulers' ordering keys (organisation, id), in the listing's order (byte order)."""
    return sorted((org, scheduler_id_for(kind, org)) for org in organisations for kind in TYPES)


def last_full_page(listing: str, keys: list[tuple[str, ...]]) -> str:
    """`&cursor=...` of the deepest page that still holds LIMIT rows; '' when that is the first."""
    if len(keys) <= LIMIT:
        return ""
    return "&cursor=" + quote(encode_cursor(listing, keys[-LIMIT - 1]))


def paths(count: int) -> dict[str, str]:
    """Each measured request of an estate of `count` organisations."""
    organisations = organisation_names(count)
    middle = organisations[count // 2]
    prefix = organisations[(count // 2) // 10 * 10][:-1]  # ten organisations: est-0500 → est-05000 .. est-05009
    schedulers = scheduler_keys(organisations)
    org_keys = [(org,) for org in organisations]
    page = f"limit={LIMIT}"
    return {
        "organisations first page": f"/organisations?{page}",
        "organisations last page": f"/organisations?{page}{last_full_page('organisations', org_keys)}",
        "organisations search (prefix)": f"/organisations?{page}&q={prefix}",
        "schedulers first page": f"/schedulers?{page}",
        "schedulers last page": f"/schedulers?{page}{last_full_page('schedulers', schedulers)}",
        "schedulers search (organisation)": f"/schedulers?{page}&organisation={middle}",
        "schedulers search (prefix)": f"/schedulers?{page}&q={prefix}",
        "queues first page": f"/queues?{page}",
        "queues last page": f"/queues?{page}{last_full_page('queues', schedulers)}",
        "queues search (prefix)": f"/queues?{page}&q={prefix}",
        "organisations, default page (100)": "/organisations",
        "schedulers, default page (100)": "/schedulers",
        "queues, default page (100)": "/queues",
        "status page: overview": f"/ui/api/overview?{page}",
        "status page: schedulers": f"/ui/api/schedulers?{page}",
    }


# Judged against the target: the listings (the status page's views and the default page are shown).
JUDGED = tuple(name for name in paths(LIMIT) if "default" not in name and not name.startswith("status"))


def database_name(ctx: Context) -> str:
    return str(conninfo_to_dict(ctx.libpq)["dbname"])


def estate_database(ctx: Context, name: str) -> Context:
    """A database of its own on the same server, with the current schema and nothing else."""
    with psycopg.connect(ctx.libpq, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = libpq_conninfo(ctx.database_url, dbname=name)
    other = Context(url, ctx.amqp_url, quick=ctx.quick, work_dir=ctx.work_dir)
    fresh_database(other)
    return other


def populate(ctx: Context, count: int) -> None:
    with psycopg.connect(ctx.libpq, autocommit=True) as conn:
        organisations = organisation_names(count)
        add_organisations(conn, organisations)
        fill(conn, organisations, 2)  # queued tasks: counter rows for the listings to read
        conn.execute("VACUUM ANALYZE")


def answer_bytes(url: str, path: str) -> int:
    response = httpx.get(url + path, timeout=30)
    response.raise_for_status()
    return len(response.content)


def run(ctx: Context) -> dict[str, Any]:
    small, large = 10, ctx.size(10_000, 2_000)
    duration = 1.5 if ctx.quick else 4.0
    rounds = 1 if ctx.quick else max(ctx.rounds, 5)  # p99 of a shared machine: more rounds, a steadier median
    estates = {}
    for count in (small, large):
        estates[count] = estate_database(ctx, f"{database_name(ctx)}_listings_{count}")
        populate(estates[count], count)
    with (
        serve(estates[small].database_url, log_dir=ctx.work_dir) as small_server,
        serve(estates[large].database_url, log_dir=ctx.work_dir) as large_server,
    ):
        servers = {small: small_server.url, large: large_server.url}
        series = {}
        sizes: dict[str, dict[int, int]] = {}
        for count, url in servers.items():
            for name, path in paths(count).items():
                request = Request(kind="http", target=url, counting="ok", method="GET", path=path)
                series[f"{name}|{count}"] = clients(request, 1, duration, processes=1)
                sizes.setdefault(name, {})[count] = answer_bytes(url, path)
        measured = interleaved(series, rounds)
    rows = []
    for name in paths(small):
        at_small, at_large = measured[f"{name}|{small}"], measured[f"{name}|{large}"]
        rows.append(
            {
                "listing": name,
                "judged": name in JUDGED,
                "small": {**at_small, "bytes": sizes[name][small]},
                "large": {**at_large, "bytes": sizes[name][large]},
                "p99_ratio": ratio(at_large["p99_ms"], at_small["p99_ms"]),
                "p50_ratio": ratio(at_large["p50_ms"], at_small["p50_ms"]),
            }
        )
    judged = [row["p99_ratio"] for row in rows if row["judged"] and row["p99_ratio"] is not None]
    for count in (small, large):
        with psycopg.connect(ctx.libpq, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database_name(estates[count])}" WITH (FORCE)')
    return {
        "organisations": {"small": small, "large": large},
        "schedulers": {"small": small * 3, "large": large * 3},
        "limit": LIMIT,
        "duration_s": duration,
        "rounds": rounds,
        "rows": rows,
        "worst_p99_ratio": max(judged) if judged else None,
        "targets": {"p99_ratio": TARGET_P99_RATIO},
    }
