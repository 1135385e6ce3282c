"""A small client of the registry HTTP API v2 (the OCI distribution spec), over httpx (blob
bodies over http.client in threads, :mod:`.blobget`, unless a proxy applies).

Only what pulling needs: manifests (by tag or digest, verified when asked by digest) and blobs
(streamed into a :class:`~hutch.providers.local.images.blobs.BlobWriter`, resumed with
``Range`` after a cut connection). Authentication as registries ask for it in their
``WWW-Authenticate`` answer: anonymous, ``Bearer`` (a token from the realm, with the caller's
username and password when it has some) or ``Basic``. Plain http only for a registry on this
machine (``localhost``, ``127.0.0.1``, ``[::1]``) or when the caller says ``insecure``.

Credentials are the caller's, for this one pull, held in memory only; no error message quotes
them. Failures are hutch's errors: unreachable or overloaded -> ``unavailable``, refused
credentials -> ``unauthorized``, no such image -> ``not_found``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import http.client
import os
import re
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from hutch.credentials import RegistryLogin
from hutch.errors import HutchError, InvalidError, NotFoundError, UnauthorizedError, UnavailableError
from hutch.imageref import RegistryRef
from hutch.providers.local.images import blobget
from hutch.providers.local.images.blobs import BlobWriter
from hutch.providers.local.images.manifests import ACCEPT, MAX_MANIFEST

MAX_TOKEN_ANSWER = 1 << 20
RETRIES = 3  # attempts of one blob when the connection is cut (each resumes where the last stopped)
AUTH_HINT = (
    "set HUTCH_REGISTRY_USER and HUTCH_REGISTRY_PASSWORD in the shell you run hutch from, or log in with "
    "docker login (hutch reads ~/.docker/config.json); see docs/images.md"
)


def _basic(auth: RegistryLogin) -> str:
    return "Basic " + base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}


def _tls() -> ssl.SSLContext:
    """httpx's own verifying context (certifi's bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), made
    once per process and setting: loading a CA bundle took 60-200 ms of CPU at the start of every pull."""
    return _tls_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _tls_for(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context()


class Registry:
    """One registry, one repository, for one pull: ``async with Registry(ref, auth) as reg``."""

    def __init__(
        self, ref: RegistryRef, auth: RegistryLogin | None = None, *, insecure: bool = False, timeout: float = 60.0
    ) -> None:
        self.ref = ref
        self.auth = auth
        self.plain = ref.loopback or insecure
        self.base = f"{'http' if self.plain else 'https'}://{ref.api_host}/v2/{ref.path}"
        self.http = httpx.AsyncClient(
            verify=_tls(), timeout=httpx.Timeout(timeout, connect=15.0), follow_redirects=True, headers={"user-agent": "hutch"}
        )
        self._authz: str | None = None
        self.transferred = 0  # blob bytes received
        self.timeout = timeout
        self._bodies: ThreadPoolExecutor | None = None  # blob bodies are read in threads of their own (blobget)

    async def __aenter__(self) -> Registry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()
        if self._bodies is not None:
            self._bodies.shutdown(wait=False)  # each transfer ended (or was aborted) before its blob() returned

    # -- errors ------------------------------------------------------------------------

    def _unreachable(self, exc: Exception) -> UnavailableError:
        host = self.ref.api_host
        if isinstance(exc, ssl.SSLError) or (
            isinstance(exc, httpx.ConnectError) and isinstance(exc.__cause__ or exc.__context__, ssl.SSLError)
        ):
            return UnavailableError(
                f"TLS to registry {host} failed: {exc}",
                hint="a registry on this machine is reached over plain http; another one over http needs --insecure",
            )
        return UnavailableError(
            f"cannot reach registry {host}: {type(exc).__name__}: {exc}".rstrip(": "),
            hint="check the registry's name and that it is up (and the network); then pull again",
        )

    def _status(self, resp: httpx.Response | int, what: str) -> HutchError:
        host, code = self.ref.api_host, resp if isinstance(resp, int) else resp.status_code
        if code in (401, 403):
            if self.auth is None:
                return UnauthorizedError(f"registry {host} needs credentials for {self.ref.repository} ({code})", AUTH_HINT)
            return UnauthorizedError(
                f"registry {host} refused the credentials from {self.auth.source or 'the caller'} for {self.ref.repository}"
                f" ({code})",
                hint="check the username and password (they are never shown); " + AUTH_HINT,
            )
        if code == 404:
            return NotFoundError(
                f"{what} not found in registry {host}", hint="check the image's name and tag (hutch image pull NAME:TAG)"
            )
        if code == 429 or code >= 500:
            return UnavailableError(f"registry {host} answered HTTP {code} for {what}", hint="try again later")
        return InvalidError(f"registry {host} answered HTTP {code} for {what}", hint="check the image reference")

    # -- requests ----------------------------------------------------------------------

    async def _send(self, method: str, url: str, headers: dict[str, str], stream: bool = False) -> httpx.Response:
        """One request, authenticating once if the registry asks; the response is open when ``stream``."""
        for attempt in (0, 1):
            h = dict(headers) | ({"authorization": self._authz} if self._authz else {})
            try:
                req = self.http.build_request(method, url, headers=h)
                resp = await self.http.send(req, stream=stream)
            except httpx.HTTPError as exc:
                raise self._unreachable(exc) from None
            if resp.status_code != 401 or attempt == 1:
                return resp
            challenge = resp.headers.get("www-authenticate", "")
            await resp.aclose()
            await self._login(challenge)
        raise AssertionError("unreachable")

    async def _login(self, challenge: str) -> None:
        scheme, params = _challenge(challenge)
        if scheme == "basic":
            if self.auth is None:
                raise UnauthorizedError(f"registry {self.ref.api_host} needs credentials for {self.ref.repository}", AUTH_HINT)
            self._authz = _basic(self.auth)
            return
        if scheme != "bearer" or not params.get("realm"):
            raise UnauthorizedError(f"registry {self.ref.api_host} asks for an unsupported authentication ({scheme})")
        realm = httpx.URL(params["realm"])
        if realm.scheme not in ("https", "http") or (realm.scheme == "http" and not self.plain):
            raise UnauthorizedError(
                f"registry {self.ref.api_host} sends its token requests to a non-https address",
                hint="credentials are sent over https only (or to a registry on this machine, or with --insecure)",
            )
        query = {"scope": params.get("scope") or f"repository:{self.ref.path}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        auth = httpx.BasicAuth(self.auth.username, self.auth.password) if self.auth is not None else None
        try:
            resp = await self.http.get(realm, params=query, auth=auth)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if resp.status_code >= 400:
            raise self._status(resp, "a token")
        body = resp.content[:MAX_TOKEN_ANSWER]
        try:
            answer: Any = resp.json() if len(resp.content) <= MAX_TOKEN_ANSWER else None
        except ValueError:
            answer = None
        token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token or not body:
            raise UnauthorizedError(f"registry {self.ref.api_host}'s token service gave no token")
        self._authz = f"Bearer {token}"

    async def manifest(self, reference: str, accept: str = ACCEPT) -> tuple[bytes, str, str]:
        """A manifest or index: its bytes, its Content-Type and its digest (checked when ``reference`` is one)."""
        sep = "@" if reference.startswith("sha256:") else ":"
        what = f"{self.ref.repository}{sep}{reference}"
        resp = await self._send("GET", f"{self.base}/manifests/{reference}", {"accept": accept}, stream=True)
        try:
            if resp.status_code >= 400:
                raise self._status(resp, what)
            data = b""
            try:
                async for chunk in resp.aiter_bytes():
                    data += chunk
                    if len(data) > MAX_MANIFEST:
                        raise InvalidError(f"the manifest of {what} is larger than {MAX_MANIFEST} bytes")
            except httpx.HTTPError as exc:
                raise self._unreachable(exc) from None
        finally:
            await resp.aclose()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise InvalidError(
                f"the manifest the registry sent for {what} has digest {digest}",
                hint="the registry sent corrupted or other data; nothing was kept",
            )
        return data, resp.headers.get("content-type", ""), digest

    async def blob(self, writer: BlobWriter, on_bytes: Callable[[int], None] | None = None) -> None:
        """Stream a blob into ``writer`` (resuming what it already has) and commit it (verified)."""
        url = f"{self.base}/blobs/{writer.digest}"
        direct = not blobget.proxied(url)  # the body read by http.client in a thread (blobget), else by httpx
        last: HutchError | None = None
        for _ in range(RETRIES):
            if writer.size is not None and writer.offset == writer.size:
                break
            headers = {"range": f"bytes={writer.offset}-"} if writer.offset else {}
            try:
                code = await (
                    self._direct(url, headers, writer, on_bytes) if direct else self._streamed(url, headers, writer, on_bytes)
                )
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ReadTimeout, OSError, http.client.HTTPException) as exc:
                last = self._unreachable(exc)  # cut: the partial file stays, the next attempt asks for the rest
                continue
            if code == 416:  # what we hold is not a start of this blob
                writer.reset()
                continue
            if code >= 400:
                writer.discard()
                raise self._status(code, f"blob {writer.digest} of {self.ref.repository}")
            break
        else:
            writer.close()
            assert last is not None
            raise last
        await asyncio.to_thread(writer.commit)  # its fsync must not stall the other downloads

    async def _streamed(
        self, url: str, headers: dict[str, str], writer: BlobWriter, on_bytes: Callable[[int], None] | None
    ) -> int:
        """One GET of a blob through httpx (where a proxy applies); its status."""
        resp = await self._send("GET", url, headers, stream=True)
        try:
            if resp.status_code >= 400:
                return resp.status_code
            if resp.status_code == 200 and writer.offset:
                writer.reset()  # the registry ignored the range: the whole blob again
            async for chunk in resp.aiter_bytes(blobget.CHUNK):
                writer.write(chunk)
                self.transferred += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
        finally:
            await resp.aclose()
        return resp.status_code

    async def _direct(self, url: str, headers: dict[str, str], writer: BlobWriter, on_bytes: Callable[[int], None] | None) -> int:
        """One GET of a blob by :mod:`.blobget` in a thread (logging in once if asked); its status."""
        loop = asyncio.get_running_loop()
        if self._bodies is None:
            self._bodies = ThreadPoolExecutor(4, thread_name_prefix="hutch-blob")

        def arrived(n: int) -> None:  # on the loop
            self.transferred += n
            if on_bytes is not None:
                on_bytes(n)

        def got(n: int) -> None:  # in the thread
            loop.call_soon_threadsafe(arrived, n)

        for attempt in (0, 1):
            h = headers | ({"authorization": self._authz} if self._authz else {})
            transfer = blobget.Transfer(_tls(), self.timeout)
            fut = loop.run_in_executor(self._bodies, transfer.get, url, h, writer, got)
            try:
                answer = await asyncio.shield(fut)
            except BaseException:  # a cancelled pull: the thread's read fails at once, and it is
                transfer.abort()  # done with the writer before anyone closes it
                await asyncio.wait([fut])
                if not fut.cancelled():
                    fut.exception()
                raise
            if answer.status != 401 or attempt == 1:
                return answer.status
            await self._login(answer.challenge)
        raise AssertionError("unreachable")
