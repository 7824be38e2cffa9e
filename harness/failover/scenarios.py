"""One fault of a PostgreSQL failover under load, run and measured: what the failover benchmark
(bench/failover/) repeats per scenario and the test suite runs once (tests/system/test_failover.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from harness.failover import analysis, cluster
from harness.failover.cluster import Formation
from harness.failover.load import Baton, Clients, WriteProbe

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
