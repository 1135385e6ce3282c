"""The dashboard's routes (not in the API's OpenAPI document). Each calls the Service as the
request's actor and answers HTML; a failure is an HTML page with the error's status."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from hutch.actors import OWNER_ID, TOKEN_ID, Actor, current
from hutch.errors import HutchError, InvalidError, NotFoundError
from hutch.models import SandboxRecord
from hutch.server.ui import gate, live, pages, sandbox
from hutch.service import Service
from hutch.service.sessions import SESSION_TTL
from hutch.units import parse_duration

STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
Handler = Callable[..., Awaitable[Response]]


def _csrf(request: Request) -> str:
    session = request.scope.get("hutch.ui_session")
    return session.csrf if session is not None else ""


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status)


def html_errors(fn: Handler) -> Handler:
    """A HutchError of the route becomes an HTML page with its status."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Response:
        try:
            return await fn(*args, **kwargs)
        except HutchError as exc:
            request = kwargs.get("request")
            csrf = _csrf(request) if isinstance(request, Request) else ""
            return _html(pages.error_page(exc.status, exc.kind, exc.message, exc.hint, current(), csrf), exc.status)

    return wrapper


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()  # at most gate.MAX_FORM: the guard read it first
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def _back(target: str | None) -> str:
    """A local path to go back to (never another site: ``//host`` and ``\\`` are refused)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def owner_names(service: Service) -> dict[str, str]:
    names = {OWNER_ID: "owner", TOKEN_ID: "token"}
    names.update({k["id"]: k["name"] for k in service.keys.list()})
    return names


def usage(service: Service, records: list[SandboxRecord]) -> Mapping[str, Mapping[str, Any]]:
    """Live resource use of each sandbox (none when its provider does not measure it)."""
    return service.sessions.usage(records)


def router(service: Service) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    approvals = service.approvals

    def sandbox_fragment(page: int) -> tuple[str, int]:
        """One page of the overview's rows (server-side: thousands of sandboxes are never all read)."""
        records, total = service.sessions.sandboxes_page(page, pages.PER_PAGE)
        return pages.sandbox_rows(records, owner_names(service), usage(service, records)), total

    def approval_fragment(actor: Actor, csrf: str) -> str:
        return pages.approval_rows(approvals.list(pending=True), actor, csrf)

    @r.get("/")
    @html_errors
    async def overview(request: Request, page: int = 1) -> Response:
        actor, csrf = current(), _csrf(request)
        page = max(1, page)
        rows, count = sandbox_fragment(page)
        return _html(pages.overview(rows, approval_fragment(actor, csrf), count, actor, csrf, page))

    @r.get("/ui/fragments/sandboxes")
    @html_errors
    async def sandboxes_fragment(request: Request, page: int = 1) -> Response:
        rows, count = sandbox_fragment(max(1, page))
        return HTMLResponse(rows, headers={"x-hutch-count": str(count)})

    @r.get("/ui/fragments/approvals")
    @html_errors
    async def approvals_fragment(request: Request) -> Response:
        return _html(approval_fragment(current(), _csrf(request)))

    @r.get("/ui/approvals")
    @html_errors
    async def approvals_page(request: Request) -> Response:
        actor, csrf = current(), _csrf(request)
        return _html(pages.approvals_page(pages.approval_rows(approvals.list()[-500:][::-1], actor, csrf), actor, csrf))

    @r.post("/ui/approvals/{approval_id}")
    @html_errors
    async def decide(request: Request, approval_id: str) -> Response:
        form = await _form(request)
        decision = form.get("decision")
        if decision not in ("approve", "reject"):
            raise InvalidError("decision must be approve or reject", hint="use the page's buttons")
        approvals.decide(approval_id, decision == "approve", form.get("reason") or None, current().name)
        return RedirectResponse(_back(form.get("next") or request.headers.get("x-hutch-back")), 303)

    @r.get("/ui/keys")
    @html_errors
    async def keys_page(request: Request) -> Response:
        return _html(pages.keys_page(service.keys.list(), current(), _csrf(request)))

    @r.post("/ui/keys")
    @html_errors
    async def create_key(request: Request) -> Response:
        """A new key from the keys page (admins; the guard checked the CSRF token): its secret is
        shown on the answer to this POST only (never in a URL, never again; the page is no-store)."""
        body = await request.body()  # at most gate.MAX_FORM: the guard read it first
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        name = (form.get("name") or [""])[0].strip()
        ttl_text = (form.get("ttl") or [""])[0].strip()
        ttl = parse_duration(ttl_text) if ttl_text else None
        scopes = [s for s in form.get("scope", []) if s != "admin"]
        made = service.keys.create(name, ttl=ttl, scopes=scopes or None, admin="admin" in form.get("scope", []))
        return _html(pages.key_created(made, current(), _csrf(request)))

    @r.post("/ui/keys/{ref}/revoke")
    @html_errors
    async def revoke(request: Request, ref: str) -> Response:
        service.keys.revoke(ref)
        return RedirectResponse("/ui/keys", 303)

    @r.get("/ui/sandboxes/{ref}")
    @html_errors
    async def sandbox_page(request: Request, ref: str, run: str | None = None, path: str | None = None) -> Response:
        rec = service.get(ref)
        if run is not None:
            service.runs.get(run)  # not_found for a run the actor may not see
        where = path or rec.spec.workdir
        files: Any
        try:
            files = await service.list_files(rec.id, where)
        except HutchError as exc:
            files = f"{exc.message}"
        body = sandbox.page(
            rec,
            owner=owner_names(service).get(rec.owner or "", rec.owner or ""),
            use=usage(service, [rec]).get(rec.id, {}),
            runs=service.runs.list(rec.id),
            chosen=run,
            where=where,
            files=files,
            actor=current(),
            csrf=_csrf(request),
        )
        return _html(body)

    @r.get("/ui/sandboxes/{ref}/file")
    @html_errors
    async def file_page(request: Request, ref: str, path: str) -> Response:
        rec = service.get(ref)
        data, truncated = await service.read_file(rec.id, path, sandbox.FILE_VIEW)
        return _html(sandbox.file_page(rec, path, data, truncated, current(), _csrf(request)))

    @r.get("/ui/sandboxes/{ref}/logs")
    @html_errors
    async def logs(request: Request, ref: str, run: str | None = None) -> Response:
        return live.respond(live.logs(service, ref, run, live.resume_at(request)))

    @r.get("/ui/sandboxes/{ref}/events")
    @html_errors
    async def events(request: Request, ref: str) -> Response:
        return live.respond(live.events(service, ref, live.resume_at(request)))

    login_routes(r, service)
    return r


def login_routes(r: APIRouter, service: Service) -> None:
    @r.get("/ui/login")
    async def login_form(request: Request, token: str = "", next: str = "/") -> Response:  # noqa: A002 - the query's name
        csrf = secrets.token_urlsafe(32)
        page = _html(pages.login_page(csrf, token=token, next_=_back(next)))
        secure = request.url.scheme == "https"
        page.headers.append("set-cookie", gate.cookie(gate.LOGIN_COOKIE, csrf, secure=secure, max_age=900, path="/ui/login"))
        return page

    @r.post("/ui/login")
    async def login(request: Request) -> Response:
        form = await _form(request)
        try:
            if form.get("token"):
                sid, _ = service.sessions.exchange(form["token"])
            else:
                sid, _ = service.sessions.login(form.get("key", "").strip())
        except HutchError as exc:
            csrf = secrets.token_urlsafe(32)
            page = _html(pages.login_page(csrf, next_=_back(form.get("next")), message=exc.message), 401)
            again = gate.cookie(gate.LOGIN_COOKIE, csrf, secure=request.url.scheme == "https", max_age=900, path="/ui/login")
            page.headers.append("set-cookie", again)
            return page
        done = RedirectResponse(_back(form.get("next")), 303)
        secure = request.url.scheme == "https"
        done.headers.append("set-cookie", gate.cookie(gate.SESSION_COOKIE, sid, secure=secure, max_age=int(SESSION_TTL)))
        done.headers.append("set-cookie", gate.cookie(gate.LOGIN_COOKIE, "", secure=secure, max_age=0, path="/ui/login"))
        return done

    @r.post("/ui/logout")
    async def logout(request: Request) -> Response:
        sid = request.cookies.get(gate.SESSION_COOKIE)
        if sid:
            service.sessions.logout(sid)
        done = RedirectResponse("/ui/login", 303)
        done.headers.append("set-cookie", gate.cookie(gate.SESSION_COOKIE, "", secure=request.url.scheme == "https", max_age=0))
        return done

    @r.get("/ui/static/{name}")
    async def static(name: str) -> Response:
        if name not in STATIC:
            raise NotFoundError(f"no static file {name!r}")
        data = resources.files("hutch.server.ui").joinpath("static", name).read_bytes()
        return Response(data, media_type=STATIC[name])
