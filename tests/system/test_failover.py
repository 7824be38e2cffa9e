"""One planned failover of a real pg_auto_failover formation under light load (bench/failover/).

Baton is given the URI `pg_autoctl show uri` prints. The harness raises if the API replica does not
serve again; the test asserts that no acknowledged task was lost and none handed out or stored twice.
Skipped where pg_autoctl is missing, failing under CI (scripts/test.sh installs it as root).
"""

from __future__ import annotations

import os

import pytest

from baton.storage.urls import libpq_conninfo
from harness.failover import cluster
from harness.failover.load import Baton
from harness.failover.scenarios import SCENARIOS, run_scenario


def test_a_planned_failover_loses_and_duplicates_nothing() -> None:
    missing = cluster.pg_autoctl_missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing} under CI: run the suite with scripts/test.sh")
        pytest.skip(missing)
    formation = cluster.Formation()
    try:
        formation.create()
        baton = Baton(formation.uri, formation.directory, 1, False, {"PGUSER": cluster.USER})
        try:
            conninfo = libpq_conninfo(formation.uri, user=cluster.USER)
            outcome = run_scenario(SCENARIOS["planned"], formation, baton, conninfo, 1, False, pause=0.05)
        finally:
            baton.stop()
    finally:
        formation.stop()
        formation.remove()
    print(outcome)
    tasks = outcome["tasks"]
    assert outcome["primary_after"] != outcome["victim"], "no failover happened"
    assert tasks["pushed_acknowledged"] > 0 and tasks["popped"] > 0
    assert tasks["lost"] == 0 and tasks["duplicated_handouts"] == 0 and tasks["duplicated_pushes"] == 0, tasks
    assert outcome["replicas"]["api1"]["outage_seconds"] is not None, "the replica did not serve again"
