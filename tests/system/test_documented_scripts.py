"""Every script the documentation offers runs as written, at a small size, and one that fails leaves
the files it would write untouched (docs/development.md lists them and what CI runs of each).

The full sizes take far longer than the suite may: `bash bench/run.sh --quick` ran for more than
19 minutes on a loaded 2-core machine, so CI runs one scenario of it (`ingest`) at quick size, and
the soak run's smoke run (a minute, a small estate, every fault once) with its end-of-run checks;
`scripts/fuzz.sh` runs a few examples of the SQLite operations. The container scripts need root and
Podman, so CI runs their `--dry-run`, which checks their prerequisites and prints the plan; so for
scripts/debian_package.sh, whose real run tests/system/test_debian_package.py makes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import AMQP_URL, POSTGRES_URL

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (POSTGRES_URL and AMQP_URL) and not os.environ.get("CI"),
    reason="the scripts run against the servers scripts/test.sh starts",
)


def run(*command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(400)
def test_fuzz_script_writes_its_report_after_a_passing_run(tmp_path: Path) -> None:
    output = tmp_path / "fuzzing.md"
    earlier = "| 2026-01-01 00:00 UTC | 0123456789ab | 5 | 300 | 24,000 | 0 | 400 | 214 of 214 tests passed |"
    output.write_text(f"# Fuzzing\n\n<!-- runs -->\n| date | commit |\n|---|---|\n{earlier}\n<!-- /runs -->\n")
    done = run(
        "bash", "scripts/fuzz.sh", "--examples", "2", "--seed", "7", "--output", str(output), "--",
        "-k", "sqlite and (test_api_conforms_to_its_schema or test_any_filter_shape)",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = output.read_text()
    assert "- seed: 7; examples per operation (hypothesis max_examples): 2" in report
    assert "answers with status >= 500: 0" in report
    assert "| `GET /queues` | sqlite |" in report
    runs = report.split("<!-- runs -->")[1].split("<!-- /runs -->")[0].splitlines()
    assert runs[3].split(" | ")[2:4] == ["7", "2"] and runs[4] == earlier  # this run first, then the earlier one


def test_fuzz_script_that_fails_leaves_its_page_as_it_was(tmp_path: Path) -> None:
    output = tmp_path / "fuzzing.md"
    output.write_text("the last good run\n")
    done = run("bash", "scripts/fuzz.sh", "--examples", "1", "--output", str(output), "--", "-k", "no_such_test")
    assert done.returncode != 0
    assert "left as it was" in done.stderr
    assert output.read_text() == "the last good run\n"


@pytest.mark.timeout(400)
def test_benchmark_script_runs_one_scenario_at_quick_size(tmp_path: Path, amqp_url: str, pg_url: str) -> None:
    # bench/run.sh takes the servers from BATON_TEST_AMQP_URL and BATON_TEST_POSTGRES_URL, which the
    # fixtures point at this worker's virtual host and database.
    results = tmp_path / "benchmarks.json"
    done = run("bash", "bench/run.sh", "--quick", "--only", "ingest", "--results", str(results))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert '"ingest"' in results.read_text()
    assert "## RabbitMQ ingest" in (tmp_path / "benchmarks.md").read_text()
    assert (tmp_path / "benchmarks.png").stat().st_size > 0
    assert not list(tmp_path.glob(".bench-staging-*"))


# The soak run's faults (bench/soak/plan.py FAULTS), every one of them once in the smoke run.
SOAK_FAULTS = {"outside_service_down", "worker_sigkill", "api_restart", "rabbitmq_restart", "postgres_restart"}


@pytest.mark.timeout(600)
def test_soak_smoke_run_meets_every_fault_and_passes_its_checks(tmp_path: Path) -> None:
    """A minute of the soak run (issue #42) on a small estate: every fault of the timetable once, then
    the checks at the end (every task accounted for, none handed out twice or stranded, every event
    and due schedule made its tasks, no traceback, each outage logged once each way). The memory,
    p99 and table comparisons need an hour; a smoke run leaves them unjudged."""
    results = tmp_path / "benchmarks.json"
    done = run("bash", "bench/run.sh", "--quick", "--only", "soak", "--results", str(results), timeout=560)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    soak = json.loads(results.read_text())["scenarios"]["soak"]
    assert {fault["kind"] for fault in soak["faults"] if "error" not in fault} == SOAK_FAULTS, soak["faults"]
    failed = [check for check in soak["checks"] if check["passed"] is False]
    assert not failed, json.dumps(failed, indent=1) + f"\nlogs: {soak['logs']}"
    judged = {check["key"] for check in soak["checks"] if check["passed"] is not None}
    assert {"accounted", "handed_out_twice", "stranded", "events", "schedules", "outage_logs"} <= judged
    assert soak["tasks"]["seen"] > 0 and soak["samples"]
    assert "## Soak: a day of OpenKAT" in (tmp_path / "benchmarks.md").read_text()
    assert (tmp_path / "benchmarks-soak.png").stat().st_size > 0


def test_benchmark_that_fails_leaves_results_and_documents_as_they_were(tmp_path: Path, amqp_url: str) -> None:
    results = tmp_path / "benchmarks.json"
    results.write_text('{"meta": {}, "scenarios": {}}\n')
    done = run(
        "python", "-m", "bench.run", "--quick", "--only", "ingest", "--results", str(results),
        "--database-url", "postgresql+psycopg://nobody@127.0.0.1:1/none", "--amqp-url", amqp_url,
    )  # fmt: skip
    assert done.returncode != 0
    assert "are unchanged" in done.stderr
    assert results.read_text() == '{"meta": {}, "scenarios": {}}\n'
    assert sorted(path.name for path in tmp_path.iterdir()) == ["benchmarks.json"]


def test_image_build_dry_run_checks_prerequisites_and_prints_the_plan() -> None:
    done = run("bash", "scripts/containers.sh", "--dry-run")
    can_install = os.geteuid() == 0 and Path("/usr/bin/apt-get").exists()
    has_podman = all(
        run("sh", "-c", f"command -v {tool}").returncode == 0
        for tool in ("podman", "podman-compose", "runc", "debootstrap")
    )
    if can_install or has_podman:
        assert done.returncode == 0, done.stderr
        assert "localhost/baton:0.1.0: would build ./Dockerfile" in done.stdout
    else:
        assert done.returncode == 1
        assert "missing: " in done.stderr
    assert not (ROOT / "build" / "containers-images.json.tmp").exists()


def test_debian_package_dry_run_checks_the_tools_and_prints_the_plan() -> None:
    done = run("bash", "scripts/debian_package.sh", "--dry-run", "--output", "/nonexistent/debian")
    assert done.returncode == 0, done.stderr
    assert "build: dpkg-buildpackage -b with Python 3." in done.stdout
    assert "-> /nonexistent/debian/baton_0.1.0_" in done.stdout
    assert not Path("/nonexistent/debian").exists()


def test_replication_experiment_dry_run_prints_the_plan_without_podman() -> None:
    done = run("bash", "bench/containers.sh", "--dry-run", "--quick")
    assert done.returncode == 0, done.stderr
    assert "split: 3 API replicas + 2 directors, 2 organisations" in done.stdout
    assert "then: write" in done.stdout
