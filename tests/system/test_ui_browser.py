"""The status page in a real browser: Debian's chromium, driven by Playwright, against a real
`baton serve` and a real `baton director` (process runner) on one SQLite file.

Every wait is for a condition with a deadline (Playwright's `expect`, `wait_until`), never a fixed
sleep. Without chromium or Playwright the tests are skipped locally and fail under CI (env CI).
`BATON_UI_SCREENSHOTS=docs` also writes the screenshots the README shows.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from baton.core.model import utcnow
from baton.service.tokens import Scope, create_token
from baton.storage.engine import Store
from baton.storage.tables import Scheduler
from harness.factories import add_organisations
from harness.waiting import free_port, wait_until

CHROMIUM = os.environ.get("BATON_CHROMIUM", "/usr/bin/chromium")
# Headless, and nothing that reaches out of the machine by itself.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = os.environ.get("BATON_UI_SCREENSHOTS")
# One pytest-xdist worker runs them one after another: a browser each at once is the suite's heaviest moment.
pytestmark = pytest.mark.xdist_group("browser")
TIMINGS = {
    "BATON_LOG_LEVEL": "warning",
    "BATON_RETRY_PERIOD_SECONDS": "0.5",
    "BATON_HEARTBEAT_TIMEOUT_SECONDS": "5",
    "BATON_POLL_INTERVAL_SECONDS": "0.2",
    # The director reconciles once when it starts, and not again during the test: a scheduler whose
    # heartbeat stops stays stale instead of being restarted.
    "BATON_RECONCILE_INTERVAL_SECONDS": "3600",
}


def require_browser() -> Any:
    problems = []
    if not os.access(CHROMIUM, os.X_OK):
        problems.append(f"no chromium at {CHROMIUM} (apt-get install chromium chromium-driver)")
    try:
        from playwright import sync_api
    except ImportError:
        problems.append("no playwright (pip install -e '.[dev]')")
    if problems:
        if os.environ.get("CI"):
            pytest.fail("; ".join(problems) + " under CI: scripts/test.sh installs chromium")
        pytest.skip("; ".join(problems))
    return sync_api


@contextmanager
def process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as output:
        child = subprocess.Popen([sys.executable, "-m", "baton", *args], env=env, stdout=output, stderr=output)
    try:
        yield child
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)


@contextmanager
def serve(env: dict[str, str], log: Path) -> Iterator[str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with process(["serve", "--no-director", "--port", str(port)], env, log):

        def ready() -> bool:
            with suppress(httpx.HTTPError):
                return httpx.get(f"{base}/ready", timeout=1).status_code == 200
            return False

        assert wait_until(ready, timeout=60), log.read_text()
        yield base


@contextmanager
def chromium(sync_api: Any) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Watched:
    """A page whose script errors, console errors and requests elsewhere are collected."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("pageerror", lambda error: self.problems.append(f"script error: {error}"))
        page.on("console", lambda message: message.type == "error" and self.problems.append(message.text))
        page.on("request", lambda request: request.url.startswith(base) or self.problems.append(request.url))
        page.on("dialog", lambda dialog: dialog.accept())
        page.set_default_timeout(15_000)


def screenshot(page: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"ui-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(SCREENSHOTS) / path.name)


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, **TIMINGS, "BATON_DATABASE_URL": f"sqlite:///{tmp_path / 'ui.db'}", **extra}


def push(client: httpx.Client, queue: str, index: int, **body: Any) -> str:
    data = {"boefje": {"id": "dns-records"}, "input_ooi": f"Hostname|internet|host{index}.example.com"}
    answer = client.post(f"/queues/{queue}/push", json={"priority": 1 + index % 5, "data": data, **body})
    assert answer.status_code == 201, answer.text
    task_id: str = answer.json()["id"]
    return task_id


def status_of(client: httpx.Client, task_id: str) -> str:
    status: str = client.get(f"/tasks/{task_id}").json()["status"]
    return status


def test_every_view_live_in_a_browser(tmp_path: Path) -> None:
    sync_api = require_browser()
    expect = sync_api.expect
    env = env_for(tmp_path)
    with serve(env, tmp_path / "serve.log") as base, httpx.Client(base_url=base, timeout=10) as api:
        for org, name in (("acme", "Acme Corp"), ("globex", "Globex")):
            assert api.post("/organisations", json={"id": org, "name": name}).status_code == 201
        for index in range(12):
            push(api, "boefje-acme" if index % 3 else "normalizer-globex", index, hash=f"scan-{index}")
        failed = api.post("/queues/boefje-acme/pop").json()["id"]
        assert api.patch(f"/tasks/{failed}", json={"status": "failed"}).status_code == 200
        running = api.post("/queues/boefje-acme/pop").json()["id"]
        assert api.patch(f"/tasks/{running}", json={"status": "running"}).status_code == 200

        with process(["director", "--runner", "process"], env, tmp_path / "director.log") as director:

            def schedulers_running() -> bool:
                rows = api.get("/schedulers").json()
                return len(rows) == 6 and all(row["state"] == "running" for row in rows)

            assert wait_until(schedulers_running, timeout=90), (tmp_path / "director.log").read_text()
            victim = next(row for row in api.get("/schedulers").json() if row["id"] == "boefje-globex")
            victim_pid = int(victim["location"].rpartition(":")[2])

            with chromium(sync_api) as browser:
                watched = Watched(browser.new_page(viewport={"width": 1280, "height": 900}), base)
                page = watched.page
                try:
                    # Overview: a push through the API shows on the page without a reload.
                    page.goto(f"{base}/ui")
                    queued = page.locator('[data-queue="boefje-acme"] [data-field="queued"]')
                    expect(queued).to_have_text("6")
                    push(api, "boefje-acme", 100)
                    expect(queued).to_have_text("7", timeout=6_000)
                    expect(page.locator('[data-type="boefje"] [data-field="failed"]')).to_have_text("1")

                    # Schedulers: kill one scheduler process; its heartbeat stops; it is flagged stale (the
                    # director, reconciling once an hour here, does not restart it during the test).
                    page.click('nav a[data-nav="schedulers"]')
                    expect(page.locator("tr[data-scheduler]")).to_have_count(6)
                    row = page.locator('tr[data-scheduler="boefje-globex"]')
                    expect(row.locator('[data-field="runs-on"]')).to_contain_text(f"pid {victim_pid}")
                    expect(row.locator('[data-field="lease"]')).to_contain_text("expires in")
                    headings = page.locator("table.schedulers thead th").all_inner_texts()
                    assert "Lease holder" in headings and not {"owner", "term", "lease_expires_at"} & set(headings)
                    assert fits_the_width(page)
                    expect(row).not_to_have_class(re.compile(r"\bstale\b"))
                    os.kill(victim_pid, signal.SIGKILL)
                    expect(row).to_have_class(re.compile(r"\bstale\b"), timeout=20_000)
                    expect(row.locator('[data-field="state"]')).to_contain_text("says running")
                    screenshot(page, tmp_path, "schedulers")

                    # Control plane: the director leads and its process holds the schedulers' leases; no
                    # RabbitMQ, no workers.
                    page.click('nav a[data-nav="control"]')
                    holder = f"{os.uname().nodename}:{director.pid}"
                    expect(page.locator('tr[data-role="director"] [data-field="holder"]')).to_have_text(holder)
                    expect(page.locator('tr[data-role="director"]')).not_to_have_class(re.compile(r"\bstale\b"))
                    expect(page.locator('[data-broker="off"]')).to_contain_text("RabbitMQ not configured")
                    expect(page.locator('[data-workers="none"]')).to_be_visible()
                    expect(page.locator('table[data-table="lease-owners"]')).to_be_visible()
                    assert fits_the_width(page)
                    screenshot(page, tmp_path, "control-plane")

                    # Tasks: filter, cancel one from the page; open a failed one, requeue it, reprioritise it.
                    page.click('nav a[data-nav="tasks"]')
                    page.fill('#task-filters input[name="organisation"]', "acme")
                    page.select_option('#task-filters select[name="status"]', "queued")
                    page.click('#task-filters button[type="submit"]')
                    expect(page.locator("tr[data-task]")).to_have_count(7)
                    expect(page.locator('[data-field="known_total"]')).to_have_text("7")
                    victim_task = page.locator("tr[data-task]").first.get_attribute("data-task")
                    assert victim_task
                    page.click(f'tr[data-task="{victim_task}"] button[data-action="cancel"]')
                    expect(page.locator("#flash")).to_contain_text("cancelled")
                    assert wait_until(lambda: status_of(api, victim_task) == "cancelled", timeout=10)
                    expect(page.locator("tr[data-task]")).to_have_count(6)

                    page.goto(f"{base}/ui#tasks?organisation=acme&task={failed}")
                    detail = page.locator(f'[data-detail="{failed}"]')
                    expect(detail.locator('[data-field="status"]')).to_have_text("failed")
                    detail.locator('button[data-action="requeue"]').click()
                    expect(detail.locator('[data-field="status"]')).to_have_text("queued")
                    assert status_of(api, failed) == "queued"
                    detail.locator('input[name="priority"]').fill("0")
                    detail.locator('form[data-action="priority"] button').click()
                    expect(detail.locator('[data-field="priority"]')).to_have_text("0")
                    assert api.get(f"/tasks/{failed}").json()["priority"] == 0
                    assert fits_the_width(page)
                    screenshot(page, tmp_path, "tasks")

                    # Back to the overview, with a little traffic for the rate charts.
                    for index in range(3):
                        assert api.post("/queues/normalizer-globex/pop").status_code == 200
                        push(api, "report-globex", 200 + index)
                    page.click('nav a[data-nav="overview"]')
                    expect(page.locator('[data-queue="report-globex"] [data-field="queued"]')).to_have_text("3")
                    expect(page.locator('[data-estate="running"]')).to_have_text("5")  # one was killed: stale
                    assert fits_the_width(page)
                    screenshot(page, tmp_path, "overview")
                    assert page.context.cookies() == []
                    assert watched.problems == []
                except Exception:
                    screenshot(page, tmp_path, "failure")
                    raise


def fits_the_width(page: Any) -> bool:
    """No sideways scroll: the document is no wider than the window."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


def first_shown(page: Any, selector: str, attribute: str) -> str:
    value: str = page.locator(selector).first.get_attribute(attribute)
    return value


def test_ten_thousand_organisations_page_by_page_at_1280_pixels(tmp_path: Path) -> None:
    """Issue #32/#33: with 10,000 organisations (30,000 schedulers) each view shows a page, pages
    forwards and back, finds organisations by the search box, and fits 1280 px without sideways
    scroll, long lease holders included."""
    sync_api = require_browser()
    expect = sync_api.expect
    env = env_for(tmp_path, BATON_HEARTBEAT_TIMEOUT_SECONDS="3600")
    store = Store(env["BATON_DATABASE_URL"])
    store.migrate()
    add_organisations(store, [f"org-{n:05d}" for n in range(10_000)])
    holder = "worker-on-a-host-with-a-rather-long-name.cluster.example.internal:4194304#0123456789abcdef"
    with store.session() as session:
        session.execute(
            update(Scheduler)
            .where(Scheduler.organisation.in_(["org-00000", "org-00001"]))
            .values(
                owner=holder,
                term=12,
                written_lease_expires_at=utcnow() + timedelta(hours=5),  # shown as 4 h for an hour
                written_heartbeat_at=utcnow(),
                state="running",
                runner="thread",
                location="worker-on-a-host-with-a-rather-long-name.cluster.example.internal:4194304",
            )
        )
    store.dispose()
    with serve(env, tmp_path / "serve.log") as base, chromium(sync_api) as browser:
        watched = Watched(browser.new_page(viewport={"width": 1280, "height": 900}), base)
        page = watched.page
        organisations = "tbody[data-organisation]"
        try:
            page.goto(f"{base}/ui")
            expect(page.locator('[data-estate="organisations"]')).to_have_text("10000")
            expect(page.locator('[data-estate="running"]')).to_have_text("6")
            expect(page.locator(organisations)).to_have_count(50)
            assert first_shown(page, organisations, "data-organisation") == "org-00000"
            assert fits_the_width(page)
            page.click('[data-pager="overview"] a[data-page="next"]')
            expect(page.locator(organisations).first).to_have_attribute("data-organisation", "org-00050")
            page.click('[data-pager="overview"] a[data-page="next"]')
            expect(page.locator(organisations).first).to_have_attribute("data-organisation", "org-00100")
            page.click('[data-pager="overview"] a[data-page="previous"]')
            expect(page.locator(organisations).first).to_have_attribute("data-organisation", "org-00050")
            page.fill('form[data-filters="overview"] input[name="q"]', "org-0999")
            page.press('form[data-filters="overview"] input[name="q"]', "Enter")
            expect(page.locator(organisations)).to_have_count(10)
            expect(page.locator(organisations).first).to_have_attribute("data-organisation", "org-09990")
            expect(page.locator('[data-pager="overview"]')).to_have_count(0)  # one page: no pager

            page.click('nav a[data-nav="schedulers"]')
            rows = page.locator("tr[data-scheduler]")
            expect(rows).to_have_count(50)
            assert first_shown(page, "tr[data-scheduler]", "data-scheduler") == "boefje-org-00000"
            expect(page.locator('tr[data-scheduler="boefje-org-00000"] [data-field="owner"]')).to_have_text(holder)
            expect(page.locator('tr[data-scheduler="boefje-org-00000"] [data-field="term"]')).to_have_text("12")
            expect(page.locator('tr[data-scheduler="boefje-org-00000"] [data-field="lease"]')).to_contain_text(
                "expires in 4 h"
            )
            assert fits_the_width(page)
            screenshot(page, tmp_path, "schedulers-estate")
            page.click('[data-pager="schedulers"] a[data-page="next"]')
            expect(rows.first).to_have_attribute("data-scheduler", "report-org-00016")
            page.click('[data-pager="schedulers"] a[data-page="previous"]')
            expect(rows.first).to_have_attribute("data-scheduler", "boefje-org-00000")
            page.fill('form[data-filters="schedulers"] input[name="q"]', "org-04242")
            page.press('form[data-filters="schedulers"] input[name="q"]', "Enter")
            expect(rows).to_have_count(3)
            expect(rows.first).to_have_attribute("data-scheduler", "boefje-org-04242")
            assert fits_the_width(page)
            assert watched.problems == []
        except Exception:
            screenshot(page, tmp_path, "failure")
            raise


def test_tokens_in_a_browser(tmp_path: Path) -> None:
    sync_api = require_browser()
    expect = sync_api.expect
    env = env_for(tmp_path, BATON_AUTH="on")
    store = Store(env["BATON_DATABASE_URL"])
    store.migrate()
    with store.session() as session:
        tokens = {
            "viewer": create_token(session, "viewer", [Scope.READ]),
            "operator": create_token(session, "operator", [Scope.ADMIN]),
        }
    store.dispose()
    admin = {"Authorization": f"Bearer {tokens['operator']}"}
    with (
        serve(env, tmp_path / "serve.log") as base,
        httpx.Client(base_url=base, timeout=10, headers=admin) as api,
        chromium(sync_api) as browser,
    ):
        assert api.post("/organisations", json={"id": "acme", "name": "Acme Corp"}).status_code == 201
        failed = push(api, "boefje-acme", 1)  # priority 2: popped first
        queued = push(api, "boefje-acme", 2)  # priority 3: stays queued
        assert api.post("/queues/boefje-acme/pop").json()["id"] == failed
        assert api.patch(f"/tasks/{failed}", json={"status": "failed"}).status_code == 200
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        watched = Watched(context.new_page(), base)
        page = watched.page
        try:
            page.goto(f"{base}/ui#tasks?task={queued}")
            expect(page.locator("#login")).to_be_visible()
            expect(page.locator("main")).to_be_hidden()
            screenshot(page, tmp_path, "token")

            page.fill('#login input[name="token"]', "baton_not-a-token")
            page.click('#login button[type="submit"]')
            expect(page.locator("#login-error")).to_contain_text("unknown token")

            # A read-only token: every view, no action buttons; the server refuses the actions anyway.
            page.fill('#login input[name="token"]', tokens["viewer"])
            page.click('#login button[type="submit"]')
            expect(page.locator("#who")).to_contain_text("token viewer (read)")
            expect(page.locator(f'[data-detail="{queued}"]')).to_be_visible()
            expect(page.locator(f'tr[data-task="{failed}"]')).to_be_visible()
            expect(page.locator("[data-action]")).to_have_count(0)
            page.goto(f"{base}/ui#tasks?task={failed}")
            expect(page.locator(f'[data-detail="{failed}"]')).to_be_visible()
            expect(page.locator("[data-action]")).to_have_count(0)
            for view in ("overview", "schedulers", "control"):
                page.click(f'nav a[data-nav="{view}"]')
                expect(page.locator(f'section[data-view="{view}"] h2')).to_be_visible()
            refused = page.evaluate(
                """async ([task, failed]) => {
                    const headers = {Authorization: "Bearer " + sessionStorage.getItem("baton.token"),
                                     "Content-Type": "application/json"};
                    const cancel = await fetch("/tasks/" + task, {method: "PATCH", headers,
                                               body: JSON.stringify({status: "cancelled"})});
                    const requeue = await fetch("/ui/api/tasks/" + failed + "/requeue", {method: "POST", headers});
                    return [cancel.status, requeue.status];
                }""",
                [queued, failed],
            )
            assert refused == [403, 403]
            assert status_of(api, queued) == "queued"

            # The token is this tab's only: no cookie, and another tab asks again.
            assert context.cookies() == []
            other = context.new_page()
            other.goto(f"{base}/ui")
            expect(other.locator("#login")).to_be_visible()
            other.close()

            # Forget it; an admin token gets the buttons.
            page.click("#forget")
            expect(page.locator("#login")).to_be_visible()
            page.fill('#login input[name="token"]', tokens["operator"])
            page.click('#login button[type="submit"]')
            page.goto(f"{base}/ui#tasks?task={queued}")
            expect(page.locator(f'[data-detail="{queued}"] button[data-action="cancel"]')).to_be_visible()
            expect(page.locator(f'[data-detail="{queued}"] form[data-action="priority"]')).to_be_visible()
            assert watched.problems == [] or all("401" in problem or "403" in problem for problem in watched.problems)
        except Exception:
            screenshot(page, tmp_path, "failure")
            raise
