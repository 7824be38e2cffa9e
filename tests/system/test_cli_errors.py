"""The command line fails with one clear line on stderr, exit code 1, never a traceback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from baton.core.model import utcnow
from baton.storage.control.leadership import leadership
from baton.storage.engine import Store
from harness.waiting import wait_until


def baton(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BATON_") or k.startswith("BATON_TEST")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "baton", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def assert_one_line(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("baton: error: ")
    for text in expected:
        assert text in lines[0], lines[0]


def test_unreachable_postgresql_names_host_port_and_setting() -> None:
    port = closed_port()
    result = baton("migrate", env={"BATON_DATABASE_URL": f"postgresql://baton@127.0.0.1:{port}/baton"})
    assert_one_line(result, f"cannot reach PostgreSQL at 127.0.0.1:{port}", "connection refused", "BATON_DATABASE_URL")


def test_a_multi_host_url_that_cannot_work_names_the_part() -> None:
    result = baton("migrate", env={"BATON_DATABASE_URL": "postgres://baton:s3cret@127.0.0.1:6001,127.0.0.1:x/baton"})
    assert_one_line(result, "BATON_DATABASE_URL: port 'x' is not a port number")
    assert "s3cret" not in result.stderr


def test_unwritable_sqlite_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = baton("migrate", env={"BATON_DATABASE_URL": f"sqlite:///{blocker}/sub/baton.db"})
    assert_one_line(result, "cannot open SQLite at", "BATON_DATABASE_URL", "writable")


def test_unsupported_url_scheme() -> None:
    result = baton("migrate", env={"BATON_DATABASE_URL": "mysql://user@host/db"})
    assert_one_line(result, "BATON_DATABASE_URL", "unsupported database URL scheme 'mysql'")


def test_a_bad_setting_names_the_variable_not_the_field(tmp_path: Path) -> None:
    result = baton("serve", env={"BATON_PORT": "abc", "BATON_DATABASE_URL": f"sqlite:///{tmp_path}/b.db"})
    assert_one_line(result, "BATON_PORT", "valid integer", "'abc'")


@pytest.mark.parametrize("value", ["hypercorn", "Granian", ""])
def test_an_unknown_http_server_is_refused_naming_the_variable(tmp_path: Path, value: str) -> None:
    result = baton("serve", env={"BATON_HTTP_SERVER": value, "BATON_DATABASE_URL": f"sqlite:///{tmp_path}/b.db"})
    assert_one_line(result, "BATON_HTTP_SERVER", "'uvicorn' or 'granian'", f"(got {value!r})")
    assert not (tmp_path / "b.db").exists()  # refused before anything was opened


def test_a_port_in_use_on_granian_names_the_setting(tmp_path: Path) -> None:
    """granian's Rust error (with a backtrace under RUST_BACKTRACE=1) becomes the command line's one line."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            "BATON_HTTP_SERVER": "granian",
            "BATON_DATABASE_URL": f"sqlite:///{tmp_path}/b.db",
            "BATON_LOG_LEVEL": "error",
            "RUST_BACKTRACE": "1",
        }
        result = baton("serve", "--no-director", "--port", str(port), env=env)
    assert_one_line(result, "cannot listen: Address already in use", "BATON_PORT")


def test_kubernetes_runner_without_cluster_or_kubeconfig(tmp_path: Path) -> None:
    env = {
        "BATON_DATABASE_URL": f"sqlite:///{tmp_path}/b.db",
        "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"),
        "HOME": str(tmp_path),
    }
    result = baton("director", "--runner", "kubernetes", env=env)
    assert_one_line(result, "not in a pod and no usable kubeconfig", "set KUBECONFIG")


def test_kubeconfig_context_namespace_is_used(tmp_path: Path) -> None:
    from baton.control.kubernetes import load_api_client
    from baton.core.settings import Settings

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts:
  - {name: other, context: {cluster: c, user: u, namespace: elsewhere}}
  - {name: mine, context: {cluster: c, user: u, namespace: scanning}}
current-context: mine
"""
    )
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig)
    try:
        _api, namespace = load_api_client(Settings())
        assert namespace == "scanning"
        _api, namespace = load_api_client(Settings(k8s_namespace="override"))
        assert namespace == "override"
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old


def test_publish_without_a_broker() -> None:
    port = closed_port()
    result = baton("publish", "organisation-created", "acme", env={"BATON_AMQP_URL": f"amqp://g:g@127.0.0.1:{port}/"})
    assert_one_line(result, f"cannot reach RabbitMQ at 127.0.0.1:{port}", "BATON_AMQP_URL")


def test_standalone_on_an_unmigrated_database_says_to_migrate(tmp_path: Path) -> None:
    env = {"BATON_DATABASE_URL": f"sqlite:///{tmp_path}/fresh.db"}
    result = baton("standalone", "--organisation", "acme", "--scheduler", "boefje", env=env)
    assert_one_line(result, "no current schema", "baton migrate")


def test_standalone_for_an_unknown_organisation_exits_non_zero(tmp_path: Path) -> None:
    env = {"BATON_DATABASE_URL": f"sqlite:///{tmp_path}/b.db"}
    assert baton("migrate", env=env).returncode == 0
    result = baton("standalone", "--organisation", "ghost", "--scheduler", "boefje", env=env)
    assert_one_line(result, "organisation 'ghost' not found")


def test_debug_brings_the_traceback_back(tmp_path: Path) -> None:
    env = {"BATON_DATABASE_URL": f"sqlite:///{tmp_path}/fresh.db"}
    for args, extra in ((["--debug"], {}), ([], {"BATON_DEBUG": "1"})):
        result = baton(*args, "standalone", "--organisation", "a", "--scheduler", "boefje", env={**env, **extra})
        assert result.returncode == 1 and "Traceback" in result.stderr


# -- two leaders on one SQLite file ----------------------------------------------------------------


def leader_pid(url: str) -> int | None:
    """The pid of the director holding an unexpired leadership lease (holder is host:pid)."""
    store = Store(url)
    try:
        with store.session() as session:
            lead = leadership(session)
    except Exception:  # not migrated yet
        return None
    finally:
        store.dispose()
    if lead is None or lead.expires_at is None or lead.expires_at < utcnow():
        return None
    return int(lead.holder.rsplit(":", 1)[1])


@pytest.mark.parametrize("first_command", [["director"], ["serve"]])
def test_a_second_director_on_one_sqlite_file_waits_as_follower(tmp_path: Path, first_command: list[str]) -> None:
    url = f"sqlite:///{tmp_path}/baton.db"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BATON_") or k.startswith("BATON_TEST")},
        "BATON_DATABASE_URL": url,
        "BATON_PORT": str(closed_port()),
        "BATON_RECONCILE_INTERVAL_SECONDS": "0.2",
        "BATON_LEASE_SECONDS": "3",
        "BATON_RENEW_DEADLINE_SECONDS": "2",
        "BATON_RETRY_PERIOD_SECONDS": "0.2",
    }
    leader = subprocess.Popen(
        [sys.executable, "-m", "baton", *first_command], env=env, stderr=subprocess.PIPE, text=True
    )
    follower_log = tmp_path / "follower.log"
    try:
        assert wait_until(lambda: leader_pid(url) == leader.pid, 60)
        with follower_log.open("w") as log:
            follower = subprocess.Popen([sys.executable, "-m", "baton", "director"], env=env, stderr=log, text=True)
        try:
            assert wait_until(lambda: "waiting as a follower" in follower_log.read_text(), 60)
            leader.send_signal(signal.SIGKILL)
            leader.wait(30)
            assert wait_until(lambda: leader_pid(url) == follower.pid, 30)  # once the lease ran out
            time.sleep(0.3)
            assert follower.poll() is None
        finally:
            follower.send_signal(signal.SIGTERM)
            follower.wait(30)
    finally:
        if leader.poll() is None:
            leader.kill()
        leader.wait(30)


def test_a_usage_error_is_clicks_usage_message_with_exit_code_2() -> None:
    result = baton("standalone")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Missing option '--organisation'" in result.stderr and "Usage: baton standalone" in result.stderr
