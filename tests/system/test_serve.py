"""`baton serve` as a real subprocess: a user's first five minutes, on each HTTP server it can run on
(BATON_HTTP_SERVER)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harness.waiting import free_port, wait_until


@pytest.mark.parametrize(
    ("server", "workers"),
    [("uvicorn", 1), ("granian", 1), ("granian", 2)],
    ids=["uvicorn", "granian", "granian-2-workers"],
)
def test_baton_serve_subprocess_push_and_pop(tmp_path: Path, server: str, workers: int) -> None:
    port = free_port()
    env = {
        **os.environ,
        "BATON_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}",
        "BATON_HTTP_SERVER": server,
        "BATON_WORKERS": str(workers),
        "BATON_LOG_LEVEL": "info",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(healthy, timeout=120), "baton serve did not come up"  # a loaded machine's start
        assert httpx.post(f"{base}/organisations", json={"id": "acme", "name": "Acme"}).status_code == 201
        pushed = httpx.post(f"{base}/queues/boefje-acme/push", json={"priority": 1, "data": {"k": "v"}})
        assert pushed.status_code == 201
        popped = httpx.post(f"{base}/queues/boefje-acme/pop").json()
        assert popped["id"] == pushed.json()["id"] and popped["status"] == "dispatched"
        assert httpx.post(f"{base}/queues/boefje-acme/pop").json() is None  # the fast path's empty answer
        # A body the fast path has read and not taken reaches the route whole: its 422 names the field.
        refused = httpx.post(f"{base}/queues/boefje-acme/push", json={"priority": "high", "data": {}})
        assert refused.status_code == 422 and "priority" in refused.text
        for n in range(2):
            assert httpx.post(f"{base}/queues/boefje-acme/push", json={"priority": 1, "data": {"n": n}}).is_success
        batch = httpx.post(f"{base}/schedulers/boefje/pop", params={"limit": 5}).json()  # OpenKAT's dialect
        assert sorted(task["data"]["n"] for task in batch["results"]) == [0, 1]
        assert (tmp_path / "serve.db").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    log = output.decode()
    # uvicorn re-raises SIGTERM after its graceful shutdown, so -SIGTERM is a clean exit there.
    assert process.returncode in ((0, -signal.SIGTERM) if server == "uvicorn" else (0,)), log
    assert "Traceback" not in log
    # Each API process ran the app's lifespan to its end: started, and stopped on SIGTERM.
    assert log.count("api started") == workers and log.count("api stopped") == workers, log
    assert "director running" in log  # in the process itself, or in granian's parent
    assert "path=/queues/boefje-acme/push status=201" in log  # Baton's own line for each request
    if server == "granian":
        assert "component=_granian" in log  # granian's own lines, in Baton's format
        assert log.index("Granian shutdown completed") > log.rindex("api stopped")
        assert '"GET /health' not in log  # no access log: Baton logs one line per request itself
    else:
        assert "Application shutdown complete" in log
