"""Baton through a PostgreSQL failover: builds a pg_auto_failover formation on loopback, runs
push/pop/patch load through API replicas and a director, applies each fault, and reports.

    python -m bench.failover [--replicas 2] [--scenarios restart,planned,unplanned] [--no-docs]

As root, installs nothing itself: scripts/test.sh (or apt-get) brings `pg-auto-failover-cli` and
`postgresql-15-auto-failover`. Writes docs/failover.md and docs/failover.json after a run in which
every scenario recovered.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from typing import Any

from baton.storage.urls import libpq_conninfo
from bench.failover.report import write_docs
from harness.failover import cluster
from harness.failover.cluster import Formation
from harness.failover.load import Baton
from harness.failover.scenarios import SCENARIOS, run_scenario


def run(scenarios: list[str], replicas: int, per_replica: int, director: bool, keep: bool = False) -> dict[str, Any]:
    formation = Formation()
    results: dict[str, Any] = {"replicas": replicas, "clients_per_replica": per_replica, "scenarios": []}
    with ExitStack() as stack:
        if keep:
            print(f"logs and records kept in {formation.directory}", file=sys.stderr)
        else:
            stack.callback(formation.remove)
        stack.callback(formation.stop)
        started = time.monotonic()
        formation.create()
        results["formation_seconds"] = round(time.monotonic() - started, 1)
        results["uri"] = formation.uri
        conninfo = libpq_conninfo(formation.uri, user=cluster.USER)
        baton = Baton(formation.uri, formation.directory, replicas, director, {"PGUSER": cluster.USER})
        stack.callback(baton.stop)
        for name in scenarios:
            formation.wait_healthy()
            print(f"-- {SCENARIOS[name].title}", file=sys.stderr, flush=True)
            outcome = run_scenario(SCENARIOS[name], formation, baton, conninfo, per_replica, director)
            print(json.dumps(outcome, indent=1), file=sys.stderr, flush=True)
            results["scenarios"].append(outcome)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--clients-per-replica", type=int, default=2)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--no-docs", action="store_true", help="print the results only")
    parser.add_argument("--keep", action="store_true", help="keep the logs and the clients' records")
    args = parser.parse_args()
    missing = cluster.pg_autoctl_missing()
    if missing:
        sys.exit(f"cannot build the formation: {missing}")
    results = run(args.scenarios.split(","), args.replicas, args.clients_per_replica, director=True, keep=args.keep)
    print(json.dumps(results, indent=1))
    if not args.no_docs:
        write_docs(results)
