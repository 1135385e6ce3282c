"""The HTTP client of the hutch API, used by the CLI, the SDK and the MCP server.

Speaks JSON over the daemon's unix socket (starting the daemon on demand) or over TCP
to a gateway. Returns plain dicts: the edges never import the Service or providers.
"""

from __future__ import annotations

import builtins
import http.client
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Unpack, cast
from urllib.parse import quote, urlencode

from hutch.client.endpoint import Endpoint
from hutch.client.lifecycle import AsyncLifecycleAPI, LifecycleAPI
from hutch.client.retry import ATTEMPTS, dropped, may_retry, new_key
from hutch.client.workspaces import AsyncWorkspaceAPI, WorkspaceAPI
from hutch.config import Settings
from hutch.errors import HutchError, InternalError, UnavailableError
from hutch.server.launcher import ensure_daemon

if TYPE_CHECKING:
    import httpx

    from hutch import wire

MAX_RESPONSE = 256 << 20


class Response:
    """The part of an HTTP response the client needs."""

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)


def _raise_for(resp: Response | httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
    except (json.JSONDecodeError, ValueError):
        text = resp.content[:200].decode(errors="replace")
        raise InternalError(f"daemon answered HTTP {resp.status_code}: {text}", hint="see hutch daemon logs") from None
    raise HutchError.from_dict(body)


def _page(resp: Response | httpx.Response) -> tuple[bytes, bool, int | None]:
    size = resp.headers.get("x-hutch-size")
    return resp.content, resp.headers.get("x-hutch-truncated") == "1", int(size) if size else None


def _event_params(
    ref: str | None, types: list[str] | None, since: float | None, after: int, limit: int, run: str | None
) -> dict[str, object]:
    params: dict[str, object] = {"after": after, "limit": limit}
    for key, value in (("sandbox", ref), ("type", types), ("since", since), ("run", run)):
        if value:
            params[key] = value
    return params


def _path(ref: str) -> str:
    return "/v1/sandboxes/" + quote(ref, safe="")


class _Base:
    def __init__(self, settings: Settings | None = None, autostart: bool = True) -> None:
        self.settings = settings or Settings.load()
        self.endpoint = Endpoint.from_settings(self.settings)
        self.autostart = autostart and not self.endpoint.remote  # never start a daemon for HUTCH_HOST

    def _unavailable(self, exc: Exception) -> UnavailableError:
        return self.endpoint.unavailable(exc)


class Client(_Base, LifecycleAPI, WorkspaceAPI):
    """Synchronous client over the daemon's unix socket, or over TCP to ``HUTCH_HOST``.

    Built on the standard library's http.client: importing httpx costs about 115 ms,
    which alone would exceed the CLI's latency budget. The async client uses httpx.
    """

    def __init__(self, settings: Settings | None = None, autostart: bool = True) -> None:
        super().__init__(settings, autostart)

    def close(self) -> None:
        """Nothing to release: each request uses its own connection."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Response:
        # One connection per request: a kept-alive connection the daemon closed while idle
        # would fail a POST in a way that cannot be retried safely. Connecting costs ~50 us.
        conn = self.endpoint.connection()
        try:
            try:
                conn.request(method, url, body=body, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                if not body:
                    raise  # with a body, the daemon may have answered before reading it all (over its limit)
            raw = conn.getresponse()
            content = raw.read(MAX_RESPONSE + 1)
        finally:
            conn.close()
        if len(content) > MAX_RESPONSE:
            raise InternalError("response from the daemon is larger than 256 MiB")
        return Response(raw.status, {k.lower(): v for k, v in raw.getheaders()}, content)

    def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        if params:
            url += _query(params)
        headers = self.endpoint.headers() | (headers or {})
        body = content
        if json is not None:
            body = _dumps(json)
            headers["content-type"] = "application/json"
        for attempt in range(ATTEMPTS):  # see client_retry: which requests are sent again
            try:
                resp = self._send(method, url, body, headers)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if attempt == 0 and self.autostart:
                    ensure_daemon(self.settings)
                    continue
                raise self._unavailable(exc) from exc
            except (OSError, http.client.HTTPException) as exc:
                if attempt + 1 < ATTEMPTS and dropped(exc) and may_retry(method, headers):
                    continue
                raise self._unavailable(exc) from exc
            _raise_for(resp)
            return resp
        raise AssertionError("unreachable")

    def stream(self, method: str, url: str, *, params: dict[str, Any] | None = None, json: Any = None) -> Iterator[Any]:
        """An NDJSON response, one parsed line at a time, as the daemon sends them."""
        if params:
            url += _query(params)
        body = _dumps(json) if json is not None else None
        headers = self.endpoint.headers() | ({"content-type": "application/json"} if json is not None else {})
        for attempt in (0, 1):
            conn = self.endpoint.connection()
            try:
                conn.request(method, url, body=body, headers=headers)
                raw = conn.getresponse()
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                conn.close()
                if attempt == 0 and self.autostart:
                    ensure_daemon(self.settings)
                    continue
                raise self._unavailable(exc) from exc
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise self._unavailable(exc) from exc
            try:
                if raw.status >= 400:
                    _raise_for(Response(raw.status, {}, raw.read(MAX_RESPONSE)))
                while True:
                    try:
                        line = raw.readline(MAX_RESPONSE)
                    except (OSError, http.client.HTTPException) as exc:
                        raise self._unavailable(exc) from exc
                    if not line:
                        return
                    yield _loads(line)
            finally:
                conn.close()
        raise AssertionError("unreachable")

    def json(self, method: str, url: str, **kw: Any) -> Any:
        return self.request(method, url, **kw).json()

    # -- API -------------------------------------------------------------------------
    def health(self) -> wire.Health:
        return cast("wire.Health", self.json("GET", "/v1/health"))

    def doctor(self) -> wire.Doctor:
        return cast("wire.Doctor", self.json("GET", "/v1/doctor"))

    def shutdown(self) -> wire.Shutdown:
        return cast("wire.Shutdown", self.json("POST", "/v1/shutdown"))

    def create(self, spec: wire.SandboxSpec) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("POST", "/v1/sandboxes", json=spec, headers=new_key()))

    def list(
        self, include_all: bool = False, labels: dict[str, str] | None = None, state: str | None = None
    ) -> builtins.list[wire.SandboxRecord]:
        return cast(
            "builtins.list[wire.SandboxRecord]",
            self.json("GET", "/v1/sandboxes", params=_list_params(include_all, labels, state)),
        )

    def get(self, ref: str) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("GET", _path(ref)))

    def destroy(self, ref: str, approval: str | None = None) -> wire.DestroyResult:
        return cast("wire.DestroyResult", self.json("DELETE", _path(ref), params={"approval": approval}))

    def status(self, ref: str, wait: bool = False, timeout: float = 300.0) -> wire.SandboxStatus:
        return cast("wire.SandboxStatus", self.json("GET", _path(ref) + "/status", params={"wait": wait, "timeout": timeout}))

    def inventory(self, provider: str, metro: str | None = None, include_all: bool = False) -> wire.Inventory:
        params: dict[str, Any] = {"all": include_all} | ({"metro": metro} if metro else {})
        return cast("wire.Inventory", self.json("GET", f"/v1/providers/{quote(provider, safe='')}/inventory", params=params))

    def cleanup(self, **req: Unpack[wire.CleanupRequest]) -> wire.CleanupReport:
        return cast("wire.CleanupReport", self.json("POST", "/v1/cleanup", json=req))

    def exec(self, ref: str, req: wire.ExecRequest) -> wire.ExecResult:
        """Run in the foreground: the result (a background run: :meth:`start`)."""
        return cast(
            "wire.ExecResult",
            self.json("POST", _path(ref) + "/exec", json=req, headers=new_key() if req.get("background") else None),
        )

    def start(self, ref: str, req: wire.ExecRequest) -> wire.RunRecord:
        """Start in the background: the run's record at once (the request is sent once per key)."""
        body = {**req, "background": True}
        return cast("wire.RunRecord", self.json("POST", _path(ref) + "/exec", json=body, headers=new_key()))

    def policy(self, ref: str, change: wire.PolicyChange, approval: str | None = None) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("POST", _path(ref) + "/policy", json=change, params={"approval": approval}))

    def exec_stream(self, ref: str, req: wire.ExecRequest) -> Iterator[wire.ExecFrame]:
        return self.stream("POST", _path(ref) + "/exec", params={"stream": True}, json=req)

    def runs(self, ref: str, status: str | None = None) -> builtins.list[wire.RunRecord]:
        return cast(
            "builtins.list[wire.RunRecord]", self.json("GET", _path(ref) + "/runs", params={"status": status} if status else None)
        )

    def run(self, run_id: str) -> wire.RunRecord:
        return cast("wire.RunRecord", self.json("GET", "/v1/runs/" + quote(run_id, safe="")))

    def wait(self, run_id: str, timeout: float | None = None) -> wire.RunRecord:
        params = {"timeout": timeout} if timeout is not None else None
        return cast("wire.RunRecord", self.json("POST", "/v1/runs/" + quote(run_id, safe="") + "/wait", params=params))

    def kill(self, run_id: str, signal: str | int = "TERM") -> wire.KillResult:
        return cast("wire.KillResult", self.json("POST", "/v1/runs/" + quote(run_id, safe="") + "/kill", json={"signal": signal}))

    def output(self, run_id: str, stdout_offset: int = 0, stderr_offset: int = 0, limit: int = 1 << 20) -> wire.OutputPage:
        params = {"stdout_offset": stdout_offset, "stderr_offset": stderr_offset, "limit": limit}
        return cast("wire.OutputPage", self.json("GET", "/v1/runs/" + quote(run_id, safe="") + "/output", params=params))

    def logs(self, ref: str, run: str | None = None, offset: int = 0, limit: int = 1 << 20) -> wire.Transcript:
        params: dict[str, Any] = {"offset": offset, "limit": limit} | ({"run": run} if run else {})
        return cast("wire.Transcript", self.json("GET", _path(ref) + "/logs", params=params))

    def events(
        self,
        ref: str | None = None,
        *,
        types: builtins.list[str] | None = None,
        since: float | None = None,
        after: int = 0,
        limit: int = 1000,
        run: str | None = None,
    ) -> builtins.list[wire.Event]:
        params = _event_params(ref, types, since, after, limit, run)
        return cast("builtins.list[wire.Event]", self.json("GET", "/v1/events", params=params))

    def ps(self, ref: str) -> builtins.list[wire.Process]:
        return cast("builtins.list[wire.Process]", self.json("GET", _path(ref) + "/ps"))

    def read_file(self, ref: str, path: str) -> tuple[bytes, bool]:
        resp = self.request("GET", _path(ref) + "/files", params={"path": path})
        return resp.content, resp.headers.get("x-hutch-truncated") == "1"

    def read_page(self, ref: str, path: str, offset: int, limit: int) -> tuple[bytes, bool, int | None]:
        """``limit`` bytes from ``offset``; whether more follow; the file's size when known."""
        resp = self.request("GET", _path(ref) + "/files", params={"path": path, "offset": offset, "limit": limit})
        return _page(resp)

    def write_file(self, ref: str, path: str, data: bytes, mode: int = 0o644) -> wire.FileWritten:
        return cast(
            "wire.FileWritten", self.json("PUT", _path(ref) + "/files", params={"path": path, "mode": f"{mode:o}"}, content=data)
        )

    def list_files(self, ref: str, path: str | None = None) -> builtins.list[wire.FileEntry]:
        return cast("builtins.list[wire.FileEntry]", self.json("GET", _path(ref) + "/ls", params={"path": path} if path else {}))


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _loads(data: bytes) -> Any:
    return json.loads(data)


def _list_params(include_all: bool, labels: dict[str, str] | None, state: str | None) -> dict[str, object]:
    return {"all": include_all, "label": [f"{k}={v}" for k, v in (labels or {}).items()] or None, "state": state}


def _query(params: dict[str, object]) -> str:
    clean = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}
    return "?" + urlencode(clean, doseq=True) if clean else ""


class AsyncClient(_Base, AsyncLifecycleAPI, AsyncWorkspaceAPI):
    """Asynchronous client with the same methods as :class:`Client`."""

    def __init__(self, settings: Settings | None = None, autostart: bool = True) -> None:
        import httpx

        super().__init__(settings, autostart)
        self._httpx = httpx
        ep = self.endpoint
        if ep.scheme == "unix":
            transport = httpx.AsyncHTTPTransport(uds=ep.address)
        else:
            transport = httpx.AsyncHTTPTransport(verify=ep.ssl_context() if ep.scheme == "https" else True)
        # idle connections are dropped well before the daemon would close them (it keeps them http_keepalive)
        limits = httpx.Limits(max_keepalive_connections=20, keepalive_expiry=self.settings.http_keepalive / 2)
        self.http = httpx.AsyncClient(
            transport=transport, base_url=ep.base_url, headers=ep.headers(), timeout=httpx.Timeout(10.0, read=None), limits=limits
        )

    async def close(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        h = self._httpx
        for attempt in range(ATTEMPTS):  # see client_retry: which requests are sent again
            try:
                resp = await self.http.request(method, url, **kw)
            except (h.ConnectError, FileNotFoundError) as exc:
                if attempt == 0 and self.autostart:
                    import asyncio

                    await asyncio.to_thread(ensure_daemon, self.settings)
                    continue
                raise self._unavailable(exc) from exc
            except (h.RemoteProtocolError, h.ReadError, h.WriteError) as exc:  # the daemon dropped the connection
                if attempt + 1 < ATTEMPTS and may_retry(method, kw.get("headers")):
                    continue
                raise self._unavailable(exc) from exc
            except h.TransportError as exc:
                raise self._unavailable(exc) from exc
            _raise_for(resp)
            return resp
        raise AssertionError("unreachable")

    async def json(self, method: str, url: str, **kw: Any) -> Any:
        return (await self.request(method, url, **kw)).json()

    async def create(self, spec: wire.SandboxSpec) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", await self.json("POST", "/v1/sandboxes", json=spec, headers=new_key()))

    async def list(
        self, include_all: bool = False, labels: dict[str, str] | None = None, state: str | None = None
    ) -> builtins.list[wire.SandboxRecord]:
        params = {k: v for k, v in _list_params(include_all, labels, state).items() if v is not None}
        return cast("builtins.list[wire.SandboxRecord]", await self.json("GET", "/v1/sandboxes", params=params))

    async def get(self, ref: str) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", await self.json("GET", _path(ref)))

    async def destroy(self, ref: str, approval: str | None = None) -> wire.DestroyResult:
        return cast(
            "wire.DestroyResult", await self.json("DELETE", _path(ref), params={"approval": approval} if approval else None)
        )

    async def exec(self, ref: str, req: wire.ExecRequest) -> wire.ExecResult:
        """Run in the foreground: the result (a background run: :meth:`start`)."""
        headers = new_key() if req.get("background") else None
        return cast("wire.ExecResult", await self.json("POST", _path(ref) + "/exec", json=req, headers=headers))

    async def start(self, ref: str, req: wire.ExecRequest) -> wire.RunRecord:
        """Start in the background: the run's record at once (the request is sent once per key)."""
        body = {**req, "background": True}
        return cast("wire.RunRecord", await self.json("POST", _path(ref) + "/exec", json=body, headers=new_key()))

    async def policy(self, ref: str, change: wire.PolicyChange, approval: str | None = None) -> wire.SandboxRecord:
        params = {"approval": approval} if approval else None
        return cast("wire.SandboxRecord", await self.json("POST", _path(ref) + "/policy", json=change, params=params))

    async def read_file(self, ref: str, path: str) -> tuple[bytes, bool]:
        resp = await self.request("GET", _path(ref) + "/files", params={"path": path})
        return resp.content, resp.headers.get("x-hutch-truncated") == "1"

    async def read_page(self, ref: str, path: str, offset: int, limit: int) -> tuple[bytes, bool, int | None]:
        """``limit`` bytes from ``offset``; whether more follow; the file's size when known."""
        resp = await self.request("GET", _path(ref) + "/files", params={"path": path, "offset": offset, "limit": limit})
        return _page(resp)

    async def write_file(self, ref: str, path: str, data: bytes, mode: int = 0o644) -> wire.FileWritten:
        params = {"path": path, "mode": f"{mode:o}"}
        return cast("wire.FileWritten", await self.json("PUT", _path(ref) + "/files", params=params, content=data))

    async def list_files(self, ref: str, path: str | None = None) -> builtins.list[wire.FileEntry]:
        return cast(
            "builtins.list[wire.FileEntry]", await self.json("GET", _path(ref) + "/ls", params={"path": path} if path else {})
        )

    async def runs(self, ref: str, status: str | None = None) -> builtins.list[wire.RunRecord]:
        return cast(
            "builtins.list[wire.RunRecord]",
            await self.json("GET", _path(ref) + "/runs", params={"status": status} if status else None),
        )

    async def run(self, run_id: str) -> wire.RunRecord:
        return cast("wire.RunRecord", await self.json("GET", "/v1/runs/" + quote(run_id, safe="")))

    async def wait(self, run_id: str, timeout: float | None = None) -> wire.RunRecord:
        params = {"timeout": timeout} if timeout is not None else None
        return cast("wire.RunRecord", await self.json("POST", "/v1/runs/" + quote(run_id, safe="") + "/wait", params=params))

    async def kill(self, run_id: str, signal: str | int = "TERM") -> wire.KillResult:
        return cast(
            "wire.KillResult", await self.json("POST", "/v1/runs/" + quote(run_id, safe="") + "/kill", json={"signal": signal})
        )

    async def output(self, run_id: str, stdout_offset: int = 0, stderr_offset: int = 0, limit: int = 1 << 20) -> wire.OutputPage:
        params = {"stdout_offset": stdout_offset, "stderr_offset": stderr_offset, "limit": limit}
        return cast("wire.OutputPage", await self.json("GET", "/v1/runs/" + quote(run_id, safe="") + "/output", params=params))

    async def logs(self, ref: str, run: str | None = None, offset: int = 0, limit: int = 1 << 20) -> wire.Transcript:
        params: dict[str, Any] = {"offset": offset, "limit": limit} | ({"run": run} if run else {})
        return cast("wire.Transcript", await self.json("GET", _path(ref) + "/logs", params=params))

    async def ps(self, ref: str) -> builtins.list[wire.Process]:
        return cast("builtins.list[wire.Process]", await self.json("GET", _path(ref) + "/ps"))

    async def events(
        self,
        ref: str | None = None,
        *,
        types: builtins.list[str] | None = None,
        since: float | None = None,
        after: int = 0,
        limit: int = 1000,
        run: str | None = None,
    ) -> builtins.list[wire.Event]:
        params = _event_params(ref, types, since, after, limit, run)
        return cast("builtins.list[wire.Event]", await self.json("GET", "/v1/events", params=params))
