"""The dashboard over the TLS gateway in a real browser: Debian's chromium (driven by
playwright, no browser downloaded) trusts the gateway's CA of ``hutch gateway init`` through
an NSS database of its own (``certutil``: nothing like ``--ignore-certificate-errors``), so
the page is reached as a person's browser reaches it. Without that CA the browser refuses the
gateway. An admin logs in with a key, sees a sandbox appear, walks the server-side pages of
the overview (more sandboxes than one page), and makes a key whose secret is shown once.
Screenshots are kept under the test's tmp dir (the paths printed).
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect
from tests.integration.test_dashboard import ARGS, CHROMIUM, WAIT_MS, _shot
from tests.integration.test_gateway_tls import _gateway
from tests.integration.test_remote import RemoteDaemon, cli

from hutch.server.ui.pages import PER_PAGE


def _browser(home: Path, tmp: Path, name: str) -> Iterator[Any]:
    """A chromium whose HOME (and so its NSS database of trusted CAs) is ``home``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp / f"profile-{name}"),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
            viewport={"width": 1400, "height": 1000},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            context.close()


def _trusting(home: Path, ca: Path) -> Path:
    """An NSS database under ``home`` that trusts ``ca`` for servers (as a person would import it)."""
    assert shutil.which("certutil"), "certutil (libnss3-tools) is needed to give chromium the test CA (.ci/run installs it)"
    db = home / ".pki" / "nssdb"
    db.mkdir(parents=True)
    subprocess.run(["certutil", "-d", f"sql:{db}", "-N", "--empty-password"], check=True, capture_output=True)
    subprocess.run(["certutil", "-d", f"sql:{db}", "-A", "-t", "C,,", "-n", "hutch-test", "-i", str(ca)], check=True)
    return home


@pytest.fixture
def tls_gateway(hutch_home: Path) -> Iterator[RemoteDaemon]:
    r = cli(hutch_home, "gateway", "init", "--name", "127.0.0.1", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    yield from _gateway(hutch_home)


def test_the_dashboard_over_the_tls_gateway(tls_gateway: RemoteDaemon, hutch_home: Path, tmp_path: Path) -> None:
    d = tls_gateway
    ca = hutch_home / "gateway" / "ca.pem"
    made = json.loads(cli(hutch_home, "key", "create", "--name", "admin", "--admin", "--json").stdout)

    # a browser that does not know the gateway's CA refuses it
    bare = tmp_path / "bare-home"
    bare.mkdir()
    for page in _browser(bare, tmp_path, "bare"):
        with pytest.raises(PlaywrightError, match="ERR_CERT_AUTHORITY_INVALID"):
            page.goto(d.url + "/ui/login")

    errors: list[str] = []
    for page in _browser(_trusting(tmp_path / "home", ca), tmp_path, "trusting"):
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(d.url + "/")
        page.wait_for_url("**/ui/login")
        page.fill('input[name="key"]', made["key"])
        page.click('form[action="/ui/login"] button[type="submit"]')
        page.wait_for_url(d.url + "/")
        assert "admin" in page.locator("nav .who").inner_text()
        cookies = {c["name"]: c for c in page.context.cookies()}
        assert cookies["hutch_session"]["secure"] and cookies["hutch_session"]["httpOnly"]

        # a sandbox made after the page is open appears by itself
        c = d.client()
        first = c.create({"provider": "fake", "name": "tls-first"})
        expect(page.locator(f'tr[data-sandbox="{first["id"]}"]')).to_contain_text("running", timeout=WAIT_MS)

        # more than a page: the server sends one page, the browser walks to the next
        for i in range(PER_PAGE + 5):
            c.create({"provider": "fake", "name": f"tls-{i:03d}"})
        page.goto(d.url + "/")
        expect(page.locator("#sandbox-count")).to_have_text(str(PER_PAGE + 6))
        assert page.locator("#sandboxes tr[data-sandbox]").count() == PER_PAGE
        assert f"tls-{PER_PAGE + 4:03d}" in page.locator("#sandboxes tr").first.inner_text()  # newest first
        _shot(page, tmp_path, "tls-overview")
        page.click("#pager a[rel=next]")
        page.wait_for_url("**/?page=2")
        expect(page.locator("#sandboxes tr[data-sandbox]")).to_have_count(6)
        assert page.locator(f'tr[data-sandbox="{first["id"]}"]').count() == 1  # the oldest, on the last page

        # a key made from the keys page, its secret shown once
        page.goto(d.url + "/ui/keys")
        page.fill('#new-key-form input[name="name"]', "from-the-browser")
        page.fill('#new-key-form input[name="ttl"]', "7d")
        page.click("#new-key-form button[type=submit]")
        secret = page.locator("#new-key").inner_text().strip()
        assert secret.startswith("hk_")
        _shot(page, tmp_path, "tls-key-created")
        ctx = ssl.create_default_context(cafile=str(ca))
        with httpx.Client(verify=ctx, timeout=60) as h:
            r = h.get(d.url + "/v1/sandboxes", headers={"authorization": f"Bearer {secret}"})
            assert r.status_code == 200 and r.json() == []  # a key of its own: none of the admin's sandboxes
        page.goto(d.url + "/ui/keys")
        assert "from-the-browser" in page.locator("#keys").inner_text() and secret not in page.content()
        assert errors == []
