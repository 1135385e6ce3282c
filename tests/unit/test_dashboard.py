"""The dashboard behind the gateway's auth, in process on the fake provider: who gets in
(keys, sessions, one-time links; revocation ends a session at once), CSRF refusals, hostile
text escaped on every page, the headers every page carries, scopes, and the live streams."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from hutch.actors import OWNER, acting
from hutch.server.app import create_app
from hutch.server.auth import Auth
from hutch.service import Service

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

HOSTILE = "<script>alert('x')</script>\"'><img src=x onerror=alert(1)>"
BASE = "https://gw.test"


@pytest.fixture
def gw(service: Service) -> Iterator[TestClient]:
    """The app as the gateway's TCP listener serves it (Auth of keys and sessions), over https."""
    with TestClient(Auth(create_app(service), service), base_url=BASE) as client:
        yield client


def key(service: Service, name: str, *scopes: str, admin: bool = False) -> str:
    with acting(OWNER):
        return str(service.keys.create(name, scopes=list(scopes), admin=admin)["key"])


def bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def form_token(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def login(c: TestClient, secret: str) -> str:
    """Log in with a key on the login page; the session's CSRF token (from the page it lands on)."""
    page = c.get("/ui/login")
    r = c.post("/ui/login", data={"csrf": form_token(page.text), "key": secret, "next": "/"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    cookies = r.headers.get_list("set-cookie")
    session = next(h for h in cookies if h.startswith("hutch_session="))
    assert {"HttpOnly", "SameSite=Strict", "Secure", "Path=/"} <= set(session.split("; "))
    return form_token(c.get("/").text)


def test_without_credentials_pages_go_to_login_and_the_api_says_401(gw: TestClient) -> None:
    r = gw.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    r = gw.get("/ui/sandboxes/sbx_x", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=/ui/sandboxes/sbx_x"
    assert gw.get("/ui/fragments/sandboxes", follow_redirects=False).status_code == 303
    assert gw.get("/ui/login").status_code == 200 and gw.get("/ui/static/app.js").status_code == 200
    assert gw.get("/v1/sandboxes").status_code == 401
    assert gw.post("/ui/approvals/apr_x", data={"decision": "approve"}).status_code == 401


def test_a_wrong_key_a_spent_link_and_a_forged_cookie_are_refused(gw: TestClient, service: Service) -> None:
    page = gw.get("/ui/login")
    r = gw.post("/ui/login", data={"csrf": form_token(page.text), "key": "hk_0123456789abcdef_" + "x" * 43})
    assert r.status_code == 401 and "unknown API key" in r.text and "hutch_session" not in r.headers.get("set-cookie", "")
    with acting(OWNER):
        token, _ = service.sessions.link()
    page = gw.get("/ui/login", params={"token": token})
    assert "data-autosubmit" in page.text
    r = gw.post("/ui/login", data={"csrf": form_token(page.text), "token": token}, follow_redirects=False)
    assert r.status_code == 303
    gw.cookies.clear()
    page = gw.get("/ui/login")
    r = gw.post("/ui/login", data={"csrf": form_token(page.text), "token": token}, follow_redirects=False)
    assert r.status_code == 401 and "spent" in r.text
    gw.cookies.set("hutch_session", "forged", domain="gw.test")
    assert gw.get("/", follow_redirects=False).status_code == 303


def test_the_session_cookie_opens_the_dashboard_not_the_api(gw: TestClient, service: Service) -> None:
    login(gw, key(service, "alice"))
    assert gw.get("/").status_code == 200
    assert gw.get("/v1/sandboxes").status_code == 401  # the API takes keys only
    assert gw.post("/v1/sandboxes", json={"provider": "fake"}).status_code == 401


def test_csrf_refusals(gw: TestClient, service: Service) -> None:
    secret = key(service, "alice", "read", "write", "approve")
    csrf = login(gw, secret)
    with acting(service.keys.authenticate(secret)):
        apr = service.approvals.request("deploy", None, "why", 600)
    url = f"/ui/approvals/{apr.id}"
    # no token, a wrong one, another site's request: refused before the route, nothing decided
    assert gw.post(url, data={"decision": "approve"}).status_code == 403
    assert gw.post(url, data={"decision": "approve", "csrf": "x" * 43}).status_code == 403
    r = gw.post(url, data={"decision": "approve", "csrf": csrf}, headers={"origin": "https://evil.test"})
    assert r.status_code == 403 and "another site" in r.text
    r = gw.post(url, data={"decision": "approve", "csrf": csrf}, headers={"sec-fetch-site": "cross-site"})
    assert r.status_code == 403
    assert service.approvals.get(apr.id).status.value == "pending"
    # the login form: its token must match its cookie
    assert gw.post("/ui/login", data={"csrf": "nope", "key": secret}).status_code == 403
    # a GET changes nothing
    assert gw.get(url).status_code in (404, 405)
    assert service.approvals.get(apr.id).status.value == "pending"
    # with the token (a form field, or the header the script sends), from this site
    r = gw.post(url, data={"decision": "approve", "csrf": csrf}, headers={"origin": BASE}, follow_redirects=False)
    assert r.status_code == 303
    decided = service.approvals.get(apr.id)
    assert decided.status.value == "approved" and decided.decided_by == "alice"
    with acting(service.keys.authenticate(secret)):
        other = service.approvals.request("deploy", None, None, 600)
    r = gw.post(f"/ui/approvals/{other.id}", data={"decision": "reject"}, headers={"x-csrf-token": csrf}, follow_redirects=False)
    assert r.status_code == 303 and service.approvals.get(other.id).status.value == "rejected"


def test_scopes_and_revocation(gw: TestClient, service: Service) -> None:
    reader = key(service, "reader", "read")
    csrf = login(gw, reader)
    with acting(OWNER):
        apr = service.approvals.request("deploy", None, None, 600)
    page = gw.get("/")
    assert "Approve" not in page.text  # no approve scope: no buttons (and an owner's request is not its own)
    r = gw.post(f"/ui/approvals/{apr.id}", data={"decision": "approve", "csrf": csrf})
    assert r.status_code == 403 and "approve scope" in r.text  # a valid login without the scope: forbidden
    assert gw.get("/ui/keys").status_code == 403  # admins only
    assert ">Keys<" not in page.text
    with acting(OWNER):
        service.keys.revoke("reader")
    r = gw.get("/", follow_redirects=False)  # the session ends with its key, at once
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"


def test_a_key_sees_only_its_own_sandboxes(gw: TestClient, service: Service, settings: Any) -> None:
    alice, bob = key(service, "alice"), key(service, "bob")
    mine = gw.post("/v1/sandboxes", json={"provider": "fake", "name": "alices"}, headers=bearer(alice)).json()
    theirs = gw.post("/v1/sandboxes", json={"provider": "fake", "name": "bobs"}, headers=bearer(bob)).json()
    login(gw, alice)
    page = gw.get("/").text
    assert mine["id"] in page and theirs["id"] not in page
    assert gw.get(f"/ui/sandboxes/{theirs['id']}").status_code == 404
    assert gw.get(f"/ui/sandboxes/{mine['id']}").status_code == 200


def test_hostile_text_is_escaped_everywhere(gw: TestClient, service: Service) -> None:
    admin = key(service, "root", admin=True)
    labels = {"note": HOSTILE}
    rec = gw.post("/v1/sandboxes", json={"provider": "fake", "labels": labels}, headers=bearer(admin)).json()
    sid = rec["id"]
    gw.put(f"/v1/sandboxes/{sid}/files", params={"path": "evil.txt"}, content=HOSTILE.encode(), headers=bearer(admin))
    r = gw.post(f"/v1/sandboxes/{sid}/exec", json={"command": ["echo", HOSTILE]}, headers=bearer(admin))
    assert r.status_code == 200, r.text
    gw.post("/v1/approvals", json={"action": HOSTILE, "sandbox": sid, "reason": HOSTILE}, headers=bearer(admin))
    login(gw, admin)
    pages = [
        gw.get("/").text,
        gw.get("/ui/approvals").text,
        gw.get("/ui/fragments/approvals").text,
        gw.get(f"/ui/sandboxes/{sid}").text,
        gw.get(f"/ui/sandboxes/{sid}/file", params={"path": "evil.txt"}).text,
        gw.get("/ui/login", params={"next": HOSTILE, "token": HOSTILE}).text,
        gw.get(f"/ui/sandboxes/{sid}", params={"path": HOSTILE}).text,
    ]
    for text in pages:
        assert "<script>alert" not in text and "<img src=x" not in text and "onerror=alert(1)>" not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in pages[3]  # the label, as text
    assert "&lt;script&gt;" in pages[4]  # the file
    assert pages[0].count("&lt;img src=x") >= 2  # the request's action and reason
    # an error page quotes what it was given, escaped too
    missing = gw.get("/ui/sandboxes/" + HOSTILE.replace("/", "%2F"))
    assert missing.status_code == 404 and "<script>alert" not in missing.text


def test_every_page_forbids_other_origins_and_is_not_cached(gw: TestClient, service: Service) -> None:
    login(gw, key(service, "alice"))
    for path in ("/", "/ui/login", "/ui/approvals", "/ui/static/app.js"):
        r = gw.get(path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-store"
    for path in ("/", "/ui/login"):
        assert "http://" not in gw.get(path).text.replace("http://www.w3.org", "")  # nothing from elsewhere
        assert "https://" not in gw.get(path).text


def test_logs_and_events_stream_as_server_sent_events(gw: TestClient, service: Service) -> None:
    admin = key(service, "root", admin=True)
    sid = gw.post("/v1/sandboxes", json={"provider": "fake"}, headers=bearer(admin)).json()["id"]
    gw.post(f"/v1/sandboxes/{sid}/exec", json={"command": ["echo", "streamed-line"]}, headers=bearer(admin))
    login(gw, admin)
    with gw.stream("GET", f"/ui/sandboxes/{sid}/logs") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        seen = ""
        for line in r.iter_lines():
            seen += line + "\n"
            if "streamed-line" in line:
                break
    assert "event: log" in seen and '"stream": "stdout"' in seen
    with gw.stream("GET", f"/ui/sandboxes/{sid}/events", headers={"last-event-id": "0"}) as r:
        for line in r.iter_lines():
            if "run_finished" in line:
                break
    gw.delete(f"/v1/sandboxes/{sid}", headers=bearer(admin))
    with gw.stream("GET", f"/ui/sandboxes/{sid}/events") as r:  # over: the stream says so and ends
        text = "".join(r.iter_text())
    assert "event: gone" in text and "destroyed" in text


def test_usage_of_live_sandboxes(gw: TestClient, service: Service) -> None:
    admin = key(service, "root", admin=True)
    sid = gw.post("/v1/sandboxes", json={"provider": "fake"}, headers=bearer(admin)).json()["id"]
    gw.put(f"/v1/sandboxes/{sid}/files", params={"path": "f"}, content=b"x" * 3000, headers=bearer(admin))
    assert service.sessions.usage(service.list()) == {sid: {"memory": 3000, "cpu_seconds": 0.0, "pids": 1}}
    login(gw, admin)
    row = re.search(rf'<tr data-sandbox="{sid}">.*?</tr>', gw.get("/ui/fragments/sandboxes").text)
    assert row is not None and "<td>3000</td>" in row.group(0) and "<td>0.0 s</td>" in row.group(0), row


def test_an_ambient_credential_alone_changes_nothing(service: Service) -> None:
    """A request let in by something a browser sends by itself (a client certificate) but no
    session is refused a change: only a session's token, a key in Authorization or the unix
    socket may change things through the dashboard."""
    from hutch.actors import reset_current, set_current

    secret = key(service, "alice", "read", "write", "approve")
    actor = service.keys.authenticate(secret)
    app = create_app(service)

    async def as_certificate(scope: Any, receive: Any, send: Any) -> None:  # what Auth does for a client certificate
        token = set_current(actor)
        try:
            await app(scope, receive, send)
        finally:
            reset_current(token)

    with acting(actor):
        apr = service.approvals.request("deploy", None, None, 600)
    with TestClient(as_certificate, base_url=BASE) as c:
        assert c.get("/").status_code == 200
        r = c.post(f"/ui/approvals/{apr.id}", data={"decision": "approve"})
        assert r.status_code == 403 and "needs its session" in r.text
        assert service.approvals.get(apr.id).status.value == "pending"
        r = c.post(f"/ui/approvals/{apr.id}", data={"decision": "approve"}, headers=bearer(secret), follow_redirects=False)
        assert r.status_code == 303 and service.approvals.get(apr.id).status.value == "approved"
