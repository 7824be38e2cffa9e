#!/usr/bin/env python3
"""Container health probes for Baton (installed in the image as `baton-probe`), stdlib and psycopg only.

    baton-probe api [--port 8000]     ready to serve: GET /ready answers 200
    baton-probe director [--live]     the database answers, and if this container leads, it renews
    baton-probe worker [--live]       this container's `baton worker` renews its row in `workers`

`api`: GET /ready (no token needed) answers 200 once the database answers with a migrated schema.

`director`: the leader renews `leaders.renewed_at` every retry period; a director that holds the
row (holder `<hostname>:<pid>`, or its pod name) but has not renewed it for --stale seconds is hung.
Without --live an unreachable database fails the probe too (not ready); with --live it does not, so
a database outage does not restart every director (what a Kubernetes livenessProbe wants).
A standby's loop writes nothing, so a hung standby is not detected here (see docs/deployment.md).
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime

DEFAULT_DATABASE_URL = "sqlite:///baton.db"


def database_url() -> str:
    return os.environ.get("BATON_DATABASE_URL", DEFAULT_DATABASE_URL)


def query(sql: str) -> list[tuple[object, ...]]:
    """Run one read-only statement on Baton's database (PostgreSQL or SQLite), 3 s connect timeout."""
    url = database_url()
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[1]
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=3) as conn:
            return conn.execute(sql).fetchall()
    import psycopg

    libpq = url.replace("postgresql+psycopg://", "postgresql://").replace("postgres://", "postgresql://")
    with psycopg.connect(libpq, connect_timeout=3, autocommit=True) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def probe_api(port: int) -> str | None:
    status = http_status(port, "/ready")
    return None if status == 200 else f"/ready answered {status}"


def probe_director(live: bool, stale_seconds: float) -> str | None:
    try:
        rows = query("SELECT holder, renewed_at FROM leaders WHERE role = 'director'")
    except Exception as exc:  # any driver error: the database does not answer
        return None if live else f"database unreachable: {exc}"
    if not rows:
        return None
    holder, renewed_at = rows[0]
    hostname = socket.gethostname()
    if str(holder).rsplit(":", 1)[0] != hostname and str(holder) != os.environ.get("POD_NAME", hostname):
        return None
    renewed = renewed_at if isinstance(renewed_at, datetime) else datetime.fromisoformat(str(renewed_at))
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=UTC)
    age = (datetime.now(UTC) - renewed).total_seconds()
    return f"leading but last renewed {age:.0f} s ago" if age > stale_seconds else None


def probe_worker(live: bool, stale_seconds: float) -> str | None:
    """Ready when this pod's row in `workers` was renewed lately; alive unless it went stale while
    the database answers (a hung worker)."""
    try:
        rows = query("SELECT id, heartbeat_at FROM workers")
    except Exception as exc:
        return None if live else f"database unreachable: {exc}"
    prefix = f"{socket.gethostname()}:"
    mine = [heartbeat for worker_id, heartbeat in rows if str(worker_id).startswith(prefix)]
    if not mine:
        return None if live else "this worker has not registered yet"
    newest = max(as_utc(heartbeat) for heartbeat in mine)
    age = (datetime.now(UTC) - newest).total_seconds()
    return f"worker row last renewed {age:.0f} s ago" if age > stale_seconds else None


def as_utc(value: object) -> datetime:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def main() -> int:
    parser = argparse.ArgumentParser(prog="baton-probe", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    api = sub.add_parser("api", help="the API is ready")
    api.add_argument("--port", type=int, default=int(os.environ.get("BATON_PORT", "8000")))
    director = sub.add_parser("director", help="the director can work (and renews if it leads)")
    director.add_argument("--live", action="store_true", help="pass while the database is unreachable")
    director.add_argument("--stale", type=float, default=60.0, help="seconds without renewal that mean hung")
    worker = sub.add_parser("worker", help="the worker renews its row")
    worker.add_argument("--live", action="store_true", help="pass while the database is unreachable")
    worker.add_argument("--stale", type=float, default=60.0, help="seconds without renewal that mean hung")
    args = parser.parse_args()
    try:
        if args.what == "api":
            problem = probe_api(args.port)
        elif args.what == "worker":
            problem = probe_worker(args.live, args.stale)
        else:
            problem = probe_director(args.live, args.stale)
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
