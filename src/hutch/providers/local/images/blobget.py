"""A blob's body over a plain blocking HTTP/1.1 connection, read in a worker thread.

httpx reads a response 64 KiB at a time through h11 and anyio, each read a few Python calls
and buffer copies: on a 48 MiB blob that was ~0.16 s of CPU and ~0.5 s of wall time here,
against ~0.01 s and ~0.05 s for ``http.client`` reading 1 MiB at a time into one buffer
(``readinto``: the socket writes straight into it). So the registry client
(:mod:`.registry`) keeps httpx for manifests, tokens and errors, and fetches blob bodies
here: one GET (with ``Range`` when resuming), redirects followed (at most
:data:`MAX_REDIRECTS`; the ``Authorization`` header is dropped when the host changes, and an
https address never redirects to plain http), TLS with the registry client's own context.
Where a proxy applies to the registry (``https_proxy`` and the like, unless ``no_proxy``
names it) the registry client keeps httpx, which speaks to proxies.

Each chunk goes to the :class:`~.blobs.BlobWriter` (hashed and written) from the worker
thread; :meth:`Transfer.abort` (from the event loop) shuts the socket down, so a cancelled
pull does not leave a thread reading.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from hutch.providers.local.images.blobs import BlobWriter

CHUNK = 1 << 20
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)


def proxied(url: str) -> bool:
    """Whether the environment sends requests for ``url`` through a proxy (then httpx fetches it)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


@dataclass(frozen=True)
class Answer:
    """What the server answered: its status, and what a caller needs of its headers."""

    status: int
    challenge: str = ""  # WWW-Authenticate of a 401
    complete: bool = False  # the body was read to its end into the writer


class Transfer:
    """One blob GET (redirects included) run by :meth:`get` in a worker thread."""

    def __init__(self, tls: ssl.SSLContext, timeout: float) -> None:
        self.tls = tls
        self.timeout = timeout
        self.conn: http.client.HTTPConnection | None = None
        self.aborted = False

    def abort(self) -> None:
        """Stop a transfer from another thread: its socket is shut down, its read fails at once."""
        self.aborted = True
        conn = self.conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def _connect(self, parts: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        host = parts.hostname or ""
        if parts.scheme == "https":
            return http.client.HTTPSConnection(host, parts.port, timeout=self.timeout, context=self.tls)
        return http.client.HTTPConnection(host, parts.port, timeout=self.timeout)

    def get(self, url: str, headers: dict[str, str], writer: BlobWriter, on_bytes: Callable[[int], None]) -> Answer:
        """GET ``url`` into ``writer`` (a 200 restarts it if it held a start); raises OSError or
        http.client.HTTPException when the connection fails or is cut (the writer keeps what came)."""
        headers = dict(headers)
        origin = urllib.parse.urlsplit(url)
        for _ in range(MAX_REDIRECTS + 1):
            parts = urllib.parse.urlsplit(url)
            conn = self.conn = self._connect(parts)
            try:
                if self.aborted:
                    raise ConnectionAbortedError("the pull was stopped")
                conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers)
                resp = conn.getresponse()
                location = resp.getheader("location")
                if resp.status in REDIRECTS and location:
                    nxt = urllib.parse.urlsplit(urllib.parse.urljoin(url, location))
                    if nxt.scheme not in ("http", "https") or (parts.scheme == "https" and nxt.scheme == "http"):
                        raise http.client.HTTPException(f"the registry redirected a blob to {nxt.scheme}://{nxt.hostname}")
                    if (nxt.scheme, nxt.netloc) != (origin.scheme, origin.netloc):
                        headers.pop("authorization", None)  # credentials stay with the registry
                    url = nxt.geturl()
                    continue
                if resp.status not in (200, 206):
                    return Answer(resp.status, resp.getheader("www-authenticate") or "")
                if resp.status == 200 and writer.offset:
                    writer.reset()  # the server ignored the range: the whole blob again
                buf = bytearray(CHUNK)
                view = memoryview(buf)
                while n := resp.readinto(buf):
                    writer.write(view[:n])
                    on_bytes(n)
                if resp.length:  # http.client ends quietly when a sized body is cut short
                    raise http.client.IncompleteRead(b"", resp.length)
                return Answer(resp.status, complete=True)
            finally:
                self.conn = None
                conn.close()
        raise http.client.HTTPException(f"more than {MAX_REDIRECTS} redirects for a blob")
