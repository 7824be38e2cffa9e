"""The hot path before and after the restructure of issue #40 (one pop door, planners on a context,
storage in packages, routes on services): pops (one task per request) and pushes (Baton's dialect,
and OpenKAT's boefje push with its schedule) through `baton serve` on this code and on the code of
commit BEFORE, at 1 and 8 clients, series interleaved round by round, each server's CPU per request
read. The old code is taken from this repository's history (`git archive`, no worktree needed) and
runs on the same Python and packages, on a database of its own on the same PostgreSQL server,
migrated by its own `baton migrate`. What it shows is a ratio, after / before, from one run."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from baton.storage.urls import libpq_conninfo
from bench.loadgen import Request
from bench.scenarios.common import (
    ORG,
    Context,
    Server,
    add_organisations,
    bench_queue,
    clients,
    database_of_its_own,
    fill,
    http_pop,
    interleaved,
    rows_against,
    serve,
    with_server_cpu,
)
from bench.scenarios.push import BOEFJE_BODY, http_push, openkat_push

# main just before the restructure began (the first commit of #40 is 1be4620, its parent's tip).
BEFORE = "7ae4991"
CLIENTS = (1, 8)
KINDS = ("pop", "push", "OpenKAT boefje push")
REPOSITORY = Path(__file__).resolve().parents[2]
OLD_DATABASE = "baton_bench_before"


def old_source(ctx: Context, commit: str = BEFORE) -> Path:
    """`src/` of `commit`, unpacked under the scenario's work folder."""
    target = ctx.work_dir / f"before-{commit}"
    archive = ctx.work_dir / f"before-{commit}.tar"
    done = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", "--format=tar", "-o", str(archive), commit, "src"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cannot take commit {commit} from {REPOSITORY}'s history: {done.stderr.strip()}")
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


@contextmanager
def old_server(ctx: Context, source: Path, queued: int) -> Iterator[Server]:
    with database_of_its_own(ctx, OLD_DATABASE) as url:
        env = {"PYTHONPATH": str(source), "BATON_DATABASE_URL": url}
        subprocess.run(
            [sys.executable, "-m", "baton", "migrate", "--database-url", url],
            check=True,
            capture_output=True,
            timeout=300,
            env={**os.environ, **env},
        )
        with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
            add_organisations(conn, [ORG])
            fill(conn, [ORG], queued)
        with serve(url, env, log_dir=ctx.work_dir) as server:
            yield server


def requests(url: str) -> dict[str, Request]:
    return {
        "pop": http_pop(url),
        "push": http_push(url),
        "OpenKAT boefje push": openkat_push(url, "boefje", BOEFJE_BODY),
    }


def run(ctx: Context) -> dict[str, Any]:
    queued = ctx.size(300_000, 30_000)
    bench_queue(ctx, queued)
    source = old_source(ctx)
    with serve(ctx.database_url, log_dir=ctx.work_dir) as after, old_server(ctx, source, queued) as before:
        series = {}
        for count in CLIENTS:
            for kind in KINDS:
                for label, server in (("before", before), ("after", after)):
                    request = requests(server.url)[kind]
                    series[f"{kind}, {label}|{count}"] = with_server_cpu(
                        clients(request, count, ctx.duration), server.process.pid
                    )
        measured = interleaved(series, ctx.rounds)
    ratios: dict[str, float | None] = {}
    cpu: dict[str, float | None] = {}
    for count in CLIENTS:
        for kind in KINDS:
            old, new = measured[f"{kind}, before|{count}"], measured[f"{kind}, after|{count}"]
            key = f"{kind.replace(' ', '_')}_{count}"
            ratios[key] = new["per_second"] / old["per_second"] if old["per_second"] else None
            old_cpu, new_cpu = old.get("server_cpu_ms_per_op"), new.get("server_cpu_ms_per_op")
            cpu[key] = new_cpu / old_cpu if old_cpu and new_cpu is not None else None
    return {
        "before_commit": BEFORE,
        "queued_at_start": queued,
        "duration_s": ctx.duration,
        "rounds": ctx.rounds,
        "series": rows_against_before(measured),
        "ratios": ratios,
        "cpu_ratios": cpu,
        "server_cpu_ms_per_op": {
            name: summary["server_cpu_ms_per_op"]
            for name, summary in measured.items()
            if "server_cpu_ms_per_op" in summary
        },
    }


def rows_against_before(measured: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per series, each `after` row's ratio to its `before`."""
    rows = []
    for kind in KINDS:
        part = {
            name.replace(f"{kind}, ", "", 1): summary
            for name, summary in measured.items()
            if name.startswith(f"{kind}, ")
        }
        for row in rows_against(part, "before"):
            rows.append({**row, "kind": kind})
    return rows
