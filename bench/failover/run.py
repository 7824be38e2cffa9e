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
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx

from baton.storage.urls import libpq_conninfo
from bench.failover import analysis, cluster
from bench.failover.cluster import Formation
from bench.failover.load import Baton, Clients, WriteProbe
from bench.failover.report import write_docs

RECOVERY_TIMEOUT = 240.0  # pg_auto_failover's own detection of a dead primary takes 30-50 s
WARM_UP = 3.0  # load before the fault
AFTER = 3.0  # load after everything serves again


@dataclass
class Scenario:
    name: str
    title: str
    fault: Callable[[Formation], cluster.Node]
    settles: bool = True  # the formation gets back to a primary and a secondary (not after a kill)


SCENARIOS = {
    "restart": Scenario("restart", "Plain restart of the primary's PostgreSQL", Formation.restart_primary),
    "planned": Scenario("planned", "Planned failover (pg_autoctl perform failover)", Formation.planned_failover),
    "unplanned": Scenario(
        "unplanned",
        "Unplanned failover (SIGKILL of the primary's keeper and PostgreSQL)",
        Formation.kill_primary,
        settles=False,
    ),
}


def add_organisation(api: str, org: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            response = httpx.post(f"{api}/organisations", json={"id": org, "name": org.title()}, timeout=10)
            if response.status_code in (201, 409):
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"could not create organisation {org}")
        time.sleep(0.5)


def recovered(clients: Clients, probe: WriteProbe, fault_at: float, replicas: list[str], director: bool) -> bool:
    outage = analysis.database_outage(probe.record, fault_at)
    back = outage["writes_back"]
    if back is None:
        return False
    answers = list(clients.answers)
    for replica in replicas:
        mine = [a for a in answers if a.replica == replica and a.started >= fault_at]
        failures = [a.started for a in mine if a.failed]
        last = max(failures, default=fault_at)
        if not any(not a.failed and a.started >= last and a.ended >= back for a in mine):
            return False
    return not director or any(at >= back for at, _ in probe.record.renewals)


def run_scenario(
    scenario: Scenario,
    formation: Formation,
    baton: Baton,
    conninfo: str,
    per_replica: int,
    director: bool,
    pause: float = 0.02,
) -> dict[str, Any]:
    queue = f"boefje-{scenario.name}"
    add_organisation(next(iter(baton.urls.values())), scenario.name)
    logs_from = baton.log_sizes()
    with WriteProbe(conninfo) as probe, Clients(baton.urls, queue, per_replica, pause) as clients:
        time.sleep(WARM_UP)
        fault_at = time.time()
        victim = scenario.fault(formation)
        deadline = time.monotonic() + RECOVERY_TIMEOUT

        def wait_recovered() -> None:
            while not recovered(clients, probe, fault_at, list(baton.urls), director):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{scenario.name}: not every process served again in {RECOVERY_TIMEOUT:.0f} s")
                time.sleep(0.2)

        wait_recovered()
        if scenario.settles:  # a restart the monitor answers with a failover: measure that too
            formation.wait_healthy()
            wait_recovered()
        time.sleep(AFTER)
    time.sleep(1)  # answers in flight when the clients stopped have been recorded
    outage = analysis.database_outage(probe.record, fault_at)
    answers = list(clients.answers)
    records = {"fault_at": fault_at, "answers": [a.__dict__ for a in answers], "writes": probe.record.writes}
    (baton.log_dir / f"{scenario.name}-records.json").write_text(json.dumps(records))
    return {
        "scenario": scenario.name,
        "title": scenario.title,
        "victim": victim.name,
        "primary_after": formation.primary_name(),
        "database_outage_seconds": _round(outage["seconds"]),
        "replicas": {
            replica: analysis.replica_outage(
                [a for a in answers if a.replica == replica], fault_at, outage["writes_back"]
            )
            for replica in baton.urls
        },
        "director": analysis.director_back(probe.record, outage["writes_back"]) if director else None,
        "tasks": analysis.task_audit(answers, conninfo, queue),
        "answers": len(answers),
        "logs": analysis.log_audit(baton.log_lines(logs_from)),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


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
