"""The E2B control plane (``/e2b/api``): sandboxes made, listed, read, timed, paused,
resumed and killed, as ordinary hutch sandboxes through the same Service.

Errors are E2B's shape, ``{"code": HTTP status, "message": ...}``, which the SDK turns into
its own exceptions (404: ``SandboxNotFoundException``/``NotFoundException``, 401:
``AuthenticationException``, 429: ``RateLimitException``, 400: ``InvalidArgumentException``).
"""

from __future__ import annotations

import asyncio
import builtins
import datetime
import time
import urllib.parse
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from hutch.errors import HutchError, InvalidError, NotFoundError
from hutch.models import LIVE_STATES, NetworkPolicy, SandboxRecord, SandboxSpec, SandboxState
from hutch.server.e2b.auth import Tokens, e2b_id, hutch_id, sandbox_of
from hutch.server.e2b.copies import Copies
from hutch.service import Service

ENVD_VERSION = "0.5.7"  # the envd features the adapter serves (the SDK gates features on it)
DEFAULT_TIMEOUT = 300  # E2B's: seconds a sandbox lives unless told
MAX_TIMEOUT = 86400
MAX_LIST = 1000
CPU_WINDOW = 0.5  # seconds between the two CPU readings of get_metrics
UNSUPPORTED = ("mcp", "volumeMounts", "iam", "network", "autoResume")
UNSUPPORTED_WHY = {"network": "create it, then call update_network (hutch applies it as the sandbox's policy)"}


def e2b_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def from_hutch(exc: HutchError) -> JSONResponse:
    status = exc.status if exc.status < 500 else 503  # the SDK retries 503; never a 500
    return e2b_error(status, exc.message + (f" ({exc.hint})" if exc.hint else ""))


def rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat().replace("+00:00", "Z")


class Control:
    def __init__(self, service: Service, tokens: Tokens) -> None:
        self.svc = service
        self.tokens = tokens
        self.copies = Copies(self)

    def template_of(self, rec: SandboxRecord) -> str:
        image = rec.spec.image
        return "base" if image is None or image == (self.svc.settings.e2b_base_image or None) else image

    def has_image(self, template: str) -> bool:
        try:
            self.svc.images.inspect(template)
        except HutchError:
            return False
        return True

    def image_of(self, template: str) -> str | None:
        if template == "base":
            return self.svc.settings.e2b_base_image or None
        try:
            self.svc.images.inspect(template)
        except HutchError:
            raise NotFoundError(
                f"template {template!r} not found: no image of that name in this gateway's store",
                hint="use base, or an image of hutch image list (hutch image pull / import)",
            ) from None
        return template

    def created(self, rec: SandboxRecord) -> dict[str, Any]:
        return {
            "templateID": self.template_of(rec),
            "sandboxID": e2b_id(rec.id),
            "clientID": "hutch",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.tokens.token(rec.id),
            "trafficAccessToken": self.tokens.traffic(rec.id),
            "domain": None,
            "alias": self.template_of(rec),
        }

    def listed(self, rec: SandboxRecord) -> dict[str, Any]:
        limits = rec.spec.limits
        end = rec.expires_at if rec.expires_at is not None else rec.created_at + MAX_TIMEOUT
        return {
            "templateID": self.template_of(rec),
            "alias": self.template_of(rec),
            "sandboxID": e2b_id(rec.id),
            "clientID": "hutch",
            "startedAt": rfc3339(rec.created_at),
            "endAt": rfc3339(end),  # always present: older SDKs fail without it
            "cpuCount": max(1, int(limits.cpus or 1)),
            "memoryMB": limits.memory >> 20,
            "diskSizeMB": (limits.disk or 0) >> 20,
            "state": "paused" if rec.state == SandboxState.paused else "running",
            "envdVersion": ENVD_VERSION,
            "metadata": dict(rec.spec.labels),
        }

    def mine(self, sandbox_id: str) -> SandboxRecord:
        """A live sandbox of the request's actor (another key's does not exist for it)."""
        rec = self.svc.access.sandbox(sandbox_of(self.svc, sandbox_id), sandbox_id)
        if rec.state not in LIVE_STATES:
            raise NotFoundError(f"sandbox {sandbox_id!r} not found ({rec.state.value})")
        return rec

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        template = body.get("templateID")
        if not isinstance(template, str) or not template or len(template) > 256:
            raise InvalidError("templateID must be a non-empty string")
        for name in UNSUPPORTED:
            if body.get(name) not in (None, {}, [], False):
                why = UNSUPPORTED_WHY.get(name, "see docs/e2b.md")
                raise InvalidError(f"{name} is not supported by hutch's E2B API at create", hint=why)
        timeout = body.get("timeout", DEFAULT_TIMEOUT)
        if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= MAX_TIMEOUT:
            raise InvalidError(f"timeout must be a whole number of seconds between 1 and {MAX_TIMEOUT}")
        restore = template != "base" and self.copies.is_snapshot(template) and not self.has_image(template)
        fields: dict[str, Any] = {
            "image": None if restore else self.image_of(template),
            "ttl": float(timeout),
            "labels": body.get("metadata") or {},
            "env": body.get("envVars") or {},
            "on_expire": "pause" if body.get("autoPause") is True else "destroy",
        }
        internet = body.get("allow_internet_access")
        if internet is False:
            fields["network"] = NetworkPolicy(mode="none")
        elif internet is True:
            fields["network"] = NetworkPolicy(mode="open")
        try:
            spec = SandboxSpec.model_validate(fields)
        except ValidationError as exc:
            raise InvalidError(f"invalid sandbox: {exc.errors()[0]['msg']}") from None
        if restore:  # Sandbox.create(snapshot_id)
            return await self.copies.restore(template, fields)
        rec = await self.svc.create(spec)
        return self.created(rec)

    def list(self, query: dict[str, str]) -> tuple[list[dict[str, Any]], str | None]:
        labels: dict[str, str] = {}
        for key, value in urllib.parse.parse_qsl(query.get("metadata", ""), keep_blank_values=True):
            labels[urllib.parse.unquote(key)] = urllib.parse.unquote(value)
        states = {s for s in query.get("state", "running,paused").split(",") if s}
        if not states <= {"running", "paused"}:
            raise InvalidError(f"state must be running or paused, got {query.get('state')!r}")
        try:
            limit = int(query.get("limit", "100"))
            offset = int(query.get("nextToken") or "0")
        except ValueError:
            raise InvalidError("limit and nextToken must be whole numbers") from None
        if not 1 <= limit <= MAX_LIST or offset < 0:
            raise InvalidError(f"limit must be between 1 and {MAX_LIST}")
        found = [r for r in self.svc.list(False, labels, None) if r.state.value in states]
        page = found[offset : offset + limit]
        more = str(offset + limit) if offset + limit < len(found) else None
        return [self.listed(r) for r in page], more

    def detail(self, sandbox_id: str) -> dict[str, Any]:
        rec = self.mine(sandbox_id)
        return self.listed(rec) | {"envdAccessToken": self.tokens.token(rec.id)}

    async def kill(self, sandbox_id: str) -> None:
        rec = self.mine(sandbox_id)
        await self.svc.destroy(rec.id)

    def timeout(self, sandbox_id: str, body: dict[str, Any]) -> None:
        seconds = body.get("timeout")
        if not isinstance(seconds, int) or isinstance(seconds, bool) or not 0 <= seconds <= MAX_TIMEOUT:
            raise InvalidError(f"timeout must be a whole number of seconds between 0 and {MAX_TIMEOUT}")
        rec = self.mine(sandbox_id)
        self.svc.lifecycle.keepalive(rec.id, float(max(seconds, 1)))

    async def pause(self, sandbox_id: str) -> bool:
        rec = self.mine(sandbox_id)
        return bool((await self.svc.lifecycle.pause(rec.id))["changed"])

    async def metrics(self, sandbox_id: str) -> builtins.list[dict[str, Any]]:
        """One sample, now, from the provider's ``usage`` capability (none when it does not
        measure): memory in use, and CPU as the share of the sandbox's cores used over
        CPU_WINDOW seconds (two readings of its CPU time)."""
        rec = self.mine(sandbox_id)
        first = self.svc.sessions.usage([rec]).get(rec.id, {})
        start = time.monotonic()
        await asyncio.sleep(CPU_WINDOW)
        second = self.svc.sessions.usage([rec]).get(rec.id, {})
        if not second:
            return []
        cpus = max(1, int(rec.spec.limits.cpus or 1))
        used = second.get("cpu_seconds", 0.0) - first.get("cpu_seconds", 0.0)
        now = time.time()
        return [
            {
                "timestamp": rfc3339(now),
                "timestampUnix": int(now),
                "cpuCount": cpus,
                "cpuUsedPct": round(max(0.0, used) / (time.monotonic() - start) / cpus * 100, 2),
                "memUsed": int(second.get("memory", 0)),
                "memTotal": rec.spec.limits.memory,
                "memCache": 0,
                "diskUsed": 0,  # not measured by hutch
                "diskTotal": rec.spec.limits.disk or 0,
            }
        ]

    async def connect(self, sandbox_id: str, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        rec = self.mine(sandbox_id)
        resumed = False
        if rec.state == SandboxState.paused:
            await self.svc.lifecycle.resume(rec.id)
            resumed = True
        seconds = body.get("timeout")
        if seconds is not None:
            self.timeout(rec.id, {"timeout": seconds})
        return self.created(self.svc.get(rec.id)), 201 if resumed else 200


async def _json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    import json

    try:
        body = json.loads(raw)
    except ValueError:
        raise InvalidError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise InvalidError("the request body must be a JSON object")
    return body


def router(service: Service, tokens: Tokens) -> APIRouter:
    r = APIRouter(prefix="/e2b/api")
    c = Control(service, tokens)

    @r.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"], include_in_schema=False)
    async def dispatch(path: str, request: Request) -> Response:
        try:
            return await route(c, request.method, path.strip("/").split("/"), request)
        except HutchError as exc:
            return from_hutch(exc)

    return r


async def route(c: Control, method: str, parts: list[str], request: Request) -> Response:
    if parts and parts[0] == "v2":
        parts = parts[1:]
    if parts == ["snapshots"] and method == "GET":
        return JSONResponse(c.copies.snapshots(dict(request.query_params)))
    if len(parts) == 2 and parts[0] == "templates" and method == "DELETE":  # delete_snapshot
        if not await c.copies.delete_snapshot(urllib.parse.unquote(parts[1])):
            return e2b_error(404, f"snapshot {parts[1]!r} not found (hutch's E2B API deletes only snapshots)")
        return Response(status_code=204)
    if not parts or parts[0] != "sandboxes":
        return e2b_error(
            404,
            f"{method} /{'/'.join(parts)} is not part of hutch's E2B API (templates, volumes and "
            "secrets are not supported: templates are hutch images, hutch image pull/import; see docs/e2b.md)",
        )
    if len(parts) == 1 and method == "POST":
        return JSONResponse(await c.create(await _json(request)), status_code=201)
    if len(parts) == 1 and method == "GET":
        items, more = c.list(dict(request.query_params))
        return JSONResponse(items, headers={"x-next-token": more} if more else None)
    sandbox_id = hutch_id(parts[1]) if len(parts) > 1 else ""
    action = parts[2] if len(parts) == 3 else None
    if len(parts) == 2 and method == "GET":
        return JSONResponse(c.detail(sandbox_id))
    if len(parts) == 2 and method == "DELETE":
        await c.kill(sandbox_id)
        return Response(status_code=204)
    if action == "timeout" and method == "POST":
        c.timeout(sandbox_id, await _json(request))
        return Response(status_code=204)
    if action == "pause" and method == "POST":
        if not await c.pause(sandbox_id):
            return e2b_error(409, f"sandbox {sandbox_id} is already paused")
        return Response(status_code=204)
    if action in ("resume", "connect") and method == "POST":
        body, status = await c.connect(sandbox_id, await _json(request))
        return JSONResponse(body, status_code=status)
    if action == "refreshes" and method == "POST":
        c.mine(sandbox_id)
        return Response(status_code=204)
    if action == "metrics" and method == "GET":
        return JSONResponse(await c.metrics(sandbox_id))
    if action == "logs" and method == "GET":
        c.mine(sandbox_id)
        return JSONResponse({"logs": [], "logEntries": []})
    if action == "fork" and method == "POST":
        return JSONResponse(await c.copies.fork(sandbox_id, await _json(request)), status_code=201)
    if action == "snapshots" and method == "POST":
        return JSONResponse(await c.copies.snapshot(sandbox_id, await _json(request)), status_code=201)
    if action == "network" and method == "PUT":
        await c.copies.network(sandbox_id, await _json(request))
        return Response(status_code=204)
    return e2b_error(404, f"{method} /sandboxes/{'/'.join(parts[1:])} is not part of hutch's E2B API")
