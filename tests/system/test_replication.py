"""The replication harness at small scale: real API replicas and directors, real SIGKILLs."""

from __future__ import annotations

import pytest

from harness.chaos import run_chaos


@pytest.mark.timeout(600)  # about a minute; its own waits (recovery, the feeder) are generous for a loaded machine
def test_two_api_replicas_two_directors_one_kill_each(pg_url: str) -> None:
    report = run_chaos(
        pg_url, api_replicas=2, clients=4, events=150, organisations=2, kills=("api", "leader", "scheduler")
    )
    assert len(report["kills"]) == 3, report["kills"]
    assert report["events_sent"] == 150
    assert report["duplicated_events"] == 0, report
    assert report["missing_events"] == 0, report
    assert report["unexpected_tasks"] == 0, report
    assert report["handed_out_twice_at_once"] == 0, report
    assert report["all_completed"], report
    assert report["failover_seconds"] > 0
