"""How the clients send a request to the daemon, and what they make of its answer.

:class:`Transport` (the sync client's, standard library only: importing httpx costs about
115 ms, which alone would exceed the CLI's latency budget) keeps a few connections to the
local daemon alive for the next request (:class:`Kept`); :class:`AsyncTransport` keeps a pool
of httpx connections. Both start the local
daemon when its socket does not answer (:mod:`hutch.client.launcher`), send a request
again only as :mod:`hutch.client.retry` allows, bound the answer, and raise the daemon's
``{"error": ...}`` as its :class:`~hutch.errors.HutchError`.
"""

from __future__ import annotations

import os
import time

from hutch import jsonwire
from hutch.client import http1
from hutch.client.endpoint import Endpoint
from hutch.client.paths import PLAIN
from hutch.client.retry import ATTEMPTS, RATE_ATTEMPTS, backoff, dropped, may_retry, rate_wait
from hutch.config import Settings
from hutch.errors import HutchError, InternalError

# typing, collections, contextlib and json (with re) stay out of the CLI's start; the daemon's
# launcher is loaded when no daemon answers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
    from typing import Any

    import httpx

MAX_RESPONSE = 256 << 20


class Response:
    """The part of an HTTP response the client needs."""

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    def json(self) -> Any:
        return jsonwire.loads(self.content)


def raise_for(resp: Response | httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
    except ValueError:  # (json.JSONDecodeError is one)
        text = resp.content[:200].decode(errors="replace")
        raise InternalError(f"daemon answered HTTP {resp.status_code}: {text}", hint="see hutch daemon logs") from None
    raise HutchError.from_dict(body)


def query(params: dict[str, object]) -> str:
    clean = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}
    if not clean:
        return ""
    if all(isinstance(v, (str, int)) and PLAIN.issuperset(k) and PLAIN.issuperset(str(v)) for k, v in clean.items()):
        return "?" + "&".join(f"{k}={v}" for k, v in clean.items())  # what urlencode gives for plain words
    from urllib.parse import urlencode  # here: only another query (urllib.parse pulls in more)

    return "?" + urlencode(clean, doseq=True)


class Kept:
    """Connections to the local daemon kept alive between requests, shared by the process's
    sync clients (an SDK makes one client per sandbox): at most ``LIMIT`` in all, each used
    again only by the process that opened it, within half of ``http_keepalive`` (the daemon
    closes an idle one after all of it), and only while the socket is quiet (not closed by a
    daemon that stopped, nothing unasked on it). A request on a kept connection saves the
    connect and the daemon's accept (about 0.1 ms of a 2 ms exec). A kept connection the
    daemon reset under a request (it closed it with the request unread) is replaced by a new
    one for that request; one it closed after reading the request (it died) is retried only as
    a new one would be (retry.py)."""

    LIMIT = 4

    def __init__(self) -> None:
        self.idle: list[tuple[str, http1.Connection, float, int]] = []  # address, connection, when let go, pid

    def take(self, address: str, within: float) -> http1.Connection | None:
        now, pid = time.monotonic(), os.getpid()
        for entry in list(self.idle):
            try:
                self.idle.remove(entry)  # (atomic: one thread takes an entry)
            except ValueError:
                continue
            where, conn, since, owner = entry
            if owner != pid:
                continue  # a forked child's copy: the parent's connection, never closed here
            if where == address and now - since < within and conn.quiet():
                return conn
            conn.close()
        return None

    def give(self, address: str, conn: http1.Connection) -> None:
        self.idle.append((address, conn, time.monotonic(), os.getpid()))
        while len(self.idle) > self.LIMIT:
            try:
                _, old, _, owner = self.idle.pop(0)
            except IndexError:
                break
            if owner == os.getpid():
                old.close()


KEPT = Kept()


class Transport:
    """The sync client's HTTP: over the endpoint's socket; to the local daemon, on a kept
    connection when one is at hand (:class:`Kept`), else on a new one."""

    def __init__(self, settings: Settings, endpoint: Endpoint, autostart: bool) -> None:
        self.settings = settings
        self.endpoint = endpoint
        self.autostart = autostart
        self.keep = endpoint.scheme == "unix" and not endpoint.remote  # a remote daemon's idle timeout is its own

    def send(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Response:
        kept = self.keep and KEPT.take(self.endpoint.address, self.settings.http_keepalive / 2)
        if kept:
            try:
                return self._send(kept, method, url, body, headers)
            except (BrokenPipeError, ConnectionResetError) as exc:
                if isinstance(exc, http1.RemoteDisconnected):
                    raise  # closed after the daemon read it all (it died): maybe performed, retry.py decides
                # Closed by the daemon with (some of) the request unread (a unix socket closed with
                # data waiting resets its peer): an idle close, or a daemon that stopped, under this
                # request. It was not performed: sent again on a new connection, whatever its method.
        return self._send(self.endpoint.connection(), method, url, body, headers)

    def _send(self, conn: http1.Connection, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Response:
        reuse = unsent = False
        try:
            try:
                conn.request(method, url, body=body, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                if not body:
                    raise  # with a body, the daemon may have answered before reading it all (over its limit)
                unsent = True
            try:
                raw = conn.getresponse(method)
            except ConnectionResetError as exc:
                if unsent:  # no answer, and the request did not all go: the daemon never had it whole
                    raise BrokenPipeError(str(exc)) from exc
                raise
            content = raw.read(MAX_RESPONSE + 1)
            reuse = self.keep and len(content) <= MAX_RESPONSE and conn.done()
        finally:
            if reuse:
                KEPT.give(self.endpoint.address, conn)
            else:
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
            url += query(params)
        headers = self.endpoint.headers() | (headers or {})
        body = content
        if json is not None:
            body = _dumps(json)
            headers["content-type"] = "application/json"
        attempt = limited = 0
        while True:  # see retry.py: which requests are sent again
            try:
                resp = self.send(method, url, body, headers)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if attempt == 0 and self.autostart:
                    attempt += 1
                    _start_daemon(self.settings)
                    continue
                raise self.endpoint.unavailable(exc) from exc
            except (OSError, http1.HTTPException) as exc:
                attempt += 1
                if attempt < ATTEMPTS and dropped(exc) and may_retry(method, headers):
                    continue
                raise self.endpoint.unavailable(exc) from exc
            wait = rate_wait(resp.status_code, resp.headers, resp.content)
            if wait is not None and limited + 1 < RATE_ATTEMPTS:
                time.sleep(backoff(wait, limited))
                limited += 1
                continue
            raise_for(resp)
            return resp

    def stream(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        upload: Iterable[bytes] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Iterator[Any]:
        """An NDJSON response, one parsed line at a time, as the daemon sends them. ``upload``:
        a body sent in chunks as it is produced (a daemon that answers before reading it all is heard)."""
        if params:
            url += query(params)
        body = _dumps(json) if json is not None else None
        headers = self.endpoint.headers() | (headers or {}) | ({"content-type": "application/json"} if json is not None else {})
        if upload is not None:
            headers["transfer-encoding"] = "chunked"
        attempt = limited = 0
        while attempt < 2:
            conn = self.endpoint.connection()
            try:
                if upload is None:
                    conn.request(method, url, body=body, headers=headers)
                else:
                    # a daemon that refused the body closes it early: its answer says why
                    import contextlib  # (here: an upload's request only)

                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        _send_chunked(conn, method, url, headers, upload)
                raw = conn.getresponse(method)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                conn.close()
                if attempt == 0 and self.autostart:
                    attempt += 1
                    _start_daemon(self.settings)
                    continue
                raise self.endpoint.unavailable(exc) from exc
            except (OSError, http1.HTTPException) as exc:
                conn.close()
                raise self.endpoint.unavailable(exc) from exc
            if raw.status == 429:  # refused before anything was done: sent again after Retry-After
                content = raw.read(MAX_RESPONSE)
                conn.close()
                wait = rate_wait(raw.status, {k.lower(): v for k, v in raw.getheaders()}, content)
                if wait is not None and limited + 1 < RATE_ATTEMPTS:
                    time.sleep(backoff(wait, limited))
                    limited += 1
                    continue
                raise_for(Response(raw.status, {}, content))
            try:
                if raw.status >= 400:
                    raise_for(Response(raw.status, {}, raw.read(MAX_RESPONSE)))
                while True:
                    try:
                        line = raw.readline(MAX_RESPONSE)
                    except (OSError, http1.HTTPException) as exc:
                        raise self.endpoint.unavailable(exc) from exc
                    if not line:
                        return
                    yield _loads(line)
            finally:
                conn.close()
        raise AssertionError("unreachable")


class AsyncTransport:
    """The async client's HTTP: a pool of httpx connections over the endpoint's socket."""

    def __init__(self, settings: Settings, endpoint: Endpoint, autostart: bool) -> None:
        import httpx

        self.settings = settings
        self.endpoint = endpoint
        self.autostart = autostart
        self._httpx = httpx
        if endpoint.scheme == "unix":
            transport = httpx.AsyncHTTPTransport(uds=endpoint.address)
        else:
            transport = httpx.AsyncHTTPTransport(verify=endpoint.ssl_context() if endpoint.scheme == "https" else True)
        # idle connections are dropped well before the daemon would close them (it keeps them http_keepalive)
        limits = httpx.Limits(max_keepalive_connections=20, keepalive_expiry=settings.http_keepalive / 2)
        self.http = httpx.AsyncClient(
            transport=transport,
            base_url=endpoint.base_url,
            headers=endpoint.headers(),
            timeout=httpx.Timeout(10.0, read=None),
            limits=limits,
        )

    async def close(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        import asyncio

        h = self._httpx
        attempt = limited = 0
        while True:  # see retry.py: which requests are sent again
            try:
                resp = await self.http.request(method, url, **kw)
            except (h.ConnectError, FileNotFoundError) as exc:
                if attempt == 0 and self.autostart:
                    attempt += 1
                    await asyncio.to_thread(_start_daemon, self.settings)
                    continue
                raise self.endpoint.unavailable(exc) from exc
            except (h.RemoteProtocolError, h.ReadError, h.WriteError) as exc:  # the daemon dropped the connection
                attempt += 1
                if attempt < ATTEMPTS and may_retry(method, kw.get("headers")):
                    continue
                raise self.endpoint.unavailable(exc) from exc
            except h.TransportError as exc:
                raise self.endpoint.unavailable(exc) from exc
            wait = rate_wait(resp.status_code, resp.headers, resp.content)
            if wait is not None and limited + 1 < RATE_ATTEMPTS:
                await asyncio.sleep(backoff(wait, limited))
                limited += 1
                continue
            raise_for(resp)
            return resp

    async def stream(
        self,
        method: str,
        url: str,
        *,
        content: bytes | AsyncIterable[bytes] | None = None,
        content_type: str | None = None,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> AsyncIterator[Any]:
        """An NDJSON response, one parsed line at a time, as the daemon sends them."""
        h = self._httpx
        headers = dict(headers or {}) | ({"content-type": content_type} if content_type else {})
        if params:
            url += query(params)
        import asyncio

        replayable = content is None or isinstance(content, bytes)  # an async iterable is sent once
        attempt = limited = 0
        while attempt < 2:
            try:
                async with self.http.stream(method, url, content=content, json=json, headers=headers) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        # refused before anything was done: sent again after Retry-After (as the sync stream)
                        wait = rate_wait(resp.status_code, resp.headers, resp.content) if replayable else None
                        if wait is not None and limited + 1 < RATE_ATTEMPTS:
                            limited += 1
                            await asyncio.sleep(backoff(wait, limited - 1))
                            continue
                        raise_for(resp)
                    async for line in resp.aiter_lines():
                        if line:
                            yield jsonwire.loads(line)
                    return
            except (h.ConnectError, FileNotFoundError) as exc:
                if attempt == 0 and self.autostart:
                    attempt += 1
                    await asyncio.to_thread(_start_daemon, self.settings)
                    continue
                raise self.endpoint.unavailable(exc) from exc
            except h.TransportError as exc:
                raise self.endpoint.unavailable(exc) from exc
        raise AssertionError("unreachable")


def _dumps(obj: Any) -> bytes:
    return jsonwire.dumps(obj).encode()


def _loads(data: bytes) -> Any:
    return jsonwire.loads(data)


def _start_daemon(settings: Settings) -> None:
    from hutch.client.launcher import ensure_daemon  # here: only a call that finds no daemon

    ensure_daemon(settings)


def _send_chunked(conn: http1.Connection, method: str, url: str, headers: dict[str, str], upload: Iterable[bytes]) -> None:
    """A request whose body is sent as it is produced (chunked transfer coding)."""
    conn.putrequest(method, url)
    for key, value in headers.items():
        conn.putheader(key, value)
    conn.endheaders()
    assert conn.sock is not None
    for chunk in upload:
        if chunk:
            conn.sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    conn.sock.sendall(b"0\r\n\r\n")
