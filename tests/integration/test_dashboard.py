"""The dashboard in a real browser: Debian's chromium (``/usr/bin/chromium``, no browser
downloaded) driven by playwright against a real daemon with real sandboxes. ``hutch ui``
prints a one-time link to the daemon's loopback listener; the browser logs in with it, sees a
sandbox made after the page is open, follows a live log line on the sandbox's page, and
approves a pending request. Hostile text (a label, a log line, a reason) shows as text and
runs nothing. A screenshot of each page is kept under the test's tmp dir (the path printed).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from tests.conftest import Daemon, hutch_env

from hutch.wire.build import exec_request, sandbox_spec

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
WAIT_MS = 60_000  # generous: the machine is loaded
XSS = "<img src=x onerror=\"window.__xss='label'\">"
XSS_LINE = "<script>window.__xss=1</script>"


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh user-data dir
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            context.close()


def _link(daemon: Daemon) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "ui", "--json"], env=hutch_env(daemon.home), capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(json.loads(r.stdout))


def _shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")  # kept with the test's tmp dir
    return path


def test_the_dashboard_in_a_browser(daemon: Daemon, browser_page: Any, tmp_path: Path) -> None:
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # log in with the one-time link of hutch ui
    link = _link(daemon)
    assert link["loopback"] and link["url"].startswith("http://127.0.0.1:")
    page.goto(link["url"])
    page.wait_for_url(link["url"].split("/ui/")[0] + "/")
    assert page.locator("h1").inner_text() == "Sandboxes"
    assert "owner" in page.locator("nav .who").inner_text()

    # a sandbox made after the page is open appears by itself
    c = daemon.client()
    rec = c.create(sandbox_spec(daemon.settings, name="dash-1", labels={"note": XSS}))
    sid = rec["id"]
    row = page.locator(f'tr[data-sandbox="{sid}"]')
    row.wait_for()  # seen as it is made (creating), then running
    expect(row).to_contain_text("running", timeout=WAIT_MS)
    assert "dash-1" in row.inner_text()

    # its page: a live log line, followed as it is written, hostile text shown as text
    script = f"echo {shlex.quote(XSS_LINE)}; for i in 1 2 3 4 5 6 7 8; do echo dash-line-$i; sleep 1; done"
    run = c.start(sid, exec_request(script, background=True))
    row.locator("a").click()
    page.wait_for_url(f"**/ui/sandboxes/{sid}")
    logs = page.locator("#logs")
    expect(logs).to_contain_text("dash-line-2", timeout=WAIT_MS)  # (the page's CSP forbids eval: no wait_for_function)
    expect(logs).to_contain_text("dash-line-6", timeout=WAIT_MS)  # written after the page was open
    assert XSS_LINE in logs.inner_text()
    assert XSS in page.locator("#facts").inner_text()
    page.locator("#events tr.event-run_started").first.wait_for()
    assert page.evaluate("window.__xss") is None
    _shot(page, tmp_path, "sandbox")
    c.wait(run["id"], timeout=120)

    # a pending approval, approved from the overview
    apr = c.request_approval({"action": "deploy", "sandbox": sid, "reason": "<b>ship it</b>", "timeout": 600})
    page.goto(link["url"].split("/ui/")[0] + "/")
    approval = page.locator(f'tr[data-approval="{apr["id"]}"]')
    approval.wait_for()
    assert "<b>ship it</b>" in approval.inner_text()
    _shot(page, tmp_path, "overview")
    approval.locator("button.approve").click()
    page.wait_for_url("**/")
    decided = c.approval(apr["id"])
    assert decided["status"] == "approved" and decided["decided_by"] == "owner"
    assert page.evaluate("window.__xss") is None
    assert errors == []


def test_a_spent_link_and_no_cookie_get_the_login_page(daemon: Daemon, browser_page: Any) -> None:
    page = browser_page
    link = _link(daemon)
    page.goto(link["url"])
    base = link["url"].split("/ui/")[0]
    page.wait_for_url(base + "/")
    page.context.clear_cookies()
    page.goto(base + "/")  # no session: the login page
    page.wait_for_url("**/ui/login")
    page.goto(link["url"])  # spent
    page.locator("p.error").wait_for()
    assert "spent" in page.locator("p.error").inner_text()
