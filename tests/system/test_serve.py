"""`baton serve` as a real subprocess: a user's first five minutes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from harness.waiting import free_port, wait_until


def test_baton_serve_subprocess_push_and_pop(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "BATON_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}"}
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
        assert (tmp_path / "serve.db").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    # uvicorn re-raises SIGTERM after its graceful shutdown, so -SIGTERM is a clean exit here.
    assert process.returncode in (0, -signal.SIGTERM), output.decode()
    assert b"Application shutdown complete" in output
