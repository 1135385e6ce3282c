"""Where the client's daemon is: the local unix socket, or ``HUTCH_HOST``.

``HUTCH_HOST`` (setting ``host``) is ``unix:///path/to/hutchd.sock``,
``http://127.0.0.1:PORT`` (loopback only: the token would travel in clear) or
``https://host:port``. A TCP daemon wants a bearer token: ``HUTCH_TOKEN`` (env only) or
the file named by ``HUTCH_TOKEN_FILE`` (setting ``token_file``). ``HUTCH_CA_FILE``
(setting ``ca_file``) trusts a self-signed certificate. The token never appears in an
error or a repr.
"""

from __future__ import annotations

import errno
import os
import sys

from hutch import credentials
from hutch.client import http1
from hutch.config import Settings, home_problem, unusable_home
from hutch.errors import InvalidError, UnauthorizedError, UnavailableError
from hutch.tokens import check_token, is_loopback, read_token

TYPE_CHECKING = False  # typing, functools and urllib.parse stay out of the CLI's start
if TYPE_CHECKING:
    import ssl
    from typing import Any

HOST_HINT = "set HUTCH_HOST to unix:///path/to/hutchd.sock, http://127.0.0.1:PORT or https://HOST:PORT"


UNUSABLE_HOME = (errno.ENOTDIR, errno.EACCES, errno.ELOOP, errno.ENAMETOOLONG)  # the state directory is in the way


class Endpoint:
    """Where the daemon is and what goes with each request; a value (equal by its fields).
    A plain class, not a dataclass: every CLI call makes one (see ``hutch.config.Settings``).
    Its repr never shows the token, the key file or the credentials."""

    SHOWN = ("scheme", "address", "port", "ca_file", "cert_file", "remote")

    def __init__(
        self,
        scheme: str,  # unix | http | https
        address: str,  # the socket path, or the host name
        port: int = 0,
        token: str | None = None,
        ca_file: str = "",
        cert_file: str = "",  # a client certificate (hutch login), presented to a gateway that takes them
        key_file: str = "",
        remote: bool = False,  # HUTCH_HOST given: the client never starts a daemon
        credentials: str = "",  # the caller's provider credentials (header value)
    ) -> None:
        self.scheme, self.address, self.port, self.token = scheme, address, port, token
        self.ca_file, self.cert_file, self.key_file = ca_file, cert_file, key_file
        self.remote, self.credentials = remote, credentials
        self._ssl: ssl.SSLContext | None = None  # loading CAs costs milliseconds: once per client

    def _fields(self) -> tuple[str, str, int, str | None, str, str, str]:
        return (self.scheme, self.address, self.port, self.token, self.ca_file, self.cert_file, self.key_file)

    def replace(self, *, credentials: str) -> Endpoint:
        return Endpoint(
            self.scheme,
            self.address,
            self.port,
            self.token,
            self.ca_file,
            self.cert_file,
            self.key_file,
            self.remote,
            credentials,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Endpoint):
            return NotImplemented
        return (*self._fields(), self.remote, self.credentials) == (*other._fields(), other.remote, other.credentials)

    def __hash__(self) -> int:
        return hash((*self._fields(), self.remote, self.credentials))

    def __repr__(self) -> str:
        return f"Endpoint({', '.join(f'{name}={getattr(self, name)!r}' for name in self.SHOWN)})"

    @property
    def label(self) -> str:
        """What errors call the daemon (never with the token)."""
        if self.scheme == "unix":
            return f"unix://{self.address}" if self.remote else self.address
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return "http://hutch" if self.scheme == "unix" else self.label

    @classmethod
    def from_settings(cls, settings: Settings) -> Endpoint:
        ep = cls._from_settings(settings)
        if not credentials.sendable(ep.scheme, ep.address, ep.remote):
            return ep  # never over plain TCP, nor to a socket of another user
        creds = credentials.gather(os.environ, settings.home_dir)
        return ep.replace(credentials=credentials.encode(creds)) if creds else ep

    @classmethod
    def _from_settings(cls, settings: Settings) -> Endpoint:
        host = settings.host.strip()
        if not host:
            return cls("unix", settings.socket_file)
        from urllib.parse import urlsplit  # here: a local daemon's socket needs no URL

        url = urlsplit(host)
        if url.scheme == "unix":
            path = (url.netloc + url.path) if url.netloc else url.path
            if not path:
                raise InvalidError(f"HUTCH_HOST {host!r} names no socket", hint=HOST_HINT)
            return cls("unix", path, remote=True)
        if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/"):
            raise InvalidError(f"HUTCH_HOST {host!r} is not a daemon address", hint=HOST_HINT)
        if url.username or url.password:
            raise InvalidError("HUTCH_HOST must not carry credentials", hint="put the token in HUTCH_TOKEN_FILE")
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError:
            raise InvalidError(f"HUTCH_HOST {host!r} has an invalid port", hint=HOST_HINT) from None
        if url.scheme == "http" and not is_loopback(url.hostname):
            raise InvalidError(
                f"HUTCH_HOST {host}: plain http to a host other than loopback would send the token in clear",
                hint="use https:// (the daemon with --tls-cert/--tls-key), with HUTCH_CA_FILE for a self-signed certificate",
            )
        token = os.environ.get("HUTCH_TOKEN") or None
        if token is not None:
            token = token.strip()
            check_token(token, "HUTCH_TOKEN")
        elif settings.token_file:
            token = read_token(settings.token_file, "token")
        if settings.ca_file and not os.path.isfile(os.path.expanduser(settings.ca_file)):
            raise InvalidError(f"HUTCH_CA_FILE {settings.ca_file}: no such file", hint="point it at a PEM CA bundle")
        cert, key = (os.path.expanduser(p) for p in (settings.cert_file, settings.key_file))
        if bool(cert) != bool(key):
            raise InvalidError("cert_file and key_file go together", hint="set both (hutch login writes both), or neither")
        for what, path in (("cert_file", cert), ("key_file", key)):
            if path and not os.path.isfile(path):
                raise InvalidError(f"{what} {path}: no such file", hint="log in again: hutch login BUNDLE")
        if cert and url.scheme != "https":
            raise InvalidError("a client certificate needs an https:// HUTCH_HOST", hint="use the gateway's https:// URL")
        return cls(url.scheme, url.hostname, port, token, os.path.expanduser(settings.ca_file), cert, key, remote=True)

    def headers(self) -> dict[str, str]:
        out = {"authorization": f"Bearer {self.token}"} if self.token else {}
        if self.credentials:
            out[credentials.HEADER] = self.credentials
        return out

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = self._ssl_context()
        return self._ssl

    def _ssl_context(self) -> ssl.SSLContext:
        import ssl  # here: only https needs it (a CLI process over the unix socket never does)

        ctx = ssl.create_default_context(cafile=self.ca_file or None)
        if self.cert_file:
            try:
                ctx.load_cert_chain(self.cert_file, self.key_file)
            except (ssl.SSLError, OSError) as exc:
                raise InvalidError(
                    f"cannot load the client certificate {self.cert_file}: {exc}", hint="log in again: hutch login BUNDLE"
                ) from None
        return ctx

    def connection(self) -> http1.Connection:
        """A new connection (one request each), not yet connected."""
        return http1.Connection(self.scheme, self.address, self.port, self.ssl_context() if self.scheme == "https" else None)

    def unavailable(self, exc: BaseException) -> UnavailableError:
        if not self.remote and self.scheme == "unix" and isinstance(exc, OSError) and exc.errno in UNUSABLE_HOME:
            home = os.path.dirname(self.address)  # the socket's directory is the state directory
            if home_problem(home) is not None:
                return unusable_home(home, exc)
        if not self.remote:
            hint = "start it with hutch serve, or check hutch daemon status and hutch daemon logs"
        elif "Hostname mismatch" in str(exc) or "IP address mismatch" in str(exc):
            hint = (
                f"the gateway's certificate is for other names than {self.address}: use a name it has,"
                f" or make it again with hutch gateway init --name {self.address}"
            )
        elif "CERTIFICATE_VERIFY_FAILED" in str(exc) or _cert_refused(exc):
            hint = "the daemon's certificate is not trusted: set HUTCH_CA_FILE (setting ca_file) to its CA"
        elif self.cert_file and "without an answer" in str(exc):  # TLS 1.3: the alert comes after the handshake
            hint = "the gateway closed the connection at once: it refused this client certificate (another gateway's, or expired)"
        elif "UNKNOWN_CA" in str(exc) or "BAD_CERTIFICATE" in str(exc) or "CERTIFICATE_EXPIRED" in str(exc):
            hint = "the gateway refused this client certificate (another gateway's, or expired): log in with one of its bundles"
        elif "CERTIFICATE_REQUIRED" in str(exc):
            hint = "the gateway wants a client certificate: hutch login BUNDLE, then --profile NAME"
        else:
            hint = f"check that hutch serve --listen runs there and is reachable, or unset HUTCH_HOST ({self.label})"
        detail = str(exc) or exc.__class__.__name__  # some connection errors carry no message
        return UnavailableError(f"cannot reach the hutch daemon at {self.label}: {detail}", hint=hint)

    # -- the attach WebSocket ----------------------------------------------------------
    def _ws(self, path: str) -> tuple[str, dict[str, Any]]:
        kw: dict[str, Any] = {"max_size": None, "additional_headers": self.headers()}
        if self.scheme == "unix":
            return "ws://hutch" + path, kw
        if self.scheme == "https":
            kw["ssl"] = self.ssl_context()
        return ("wss:" if self.scheme == "https" else "ws:") + self.label.partition(":")[2] + path, kw

    def ws_connect(self, path: str) -> Any:
        """A sync websockets connection to ``path`` (to be closed by the caller)."""
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect, unix_connect

        uri, kw = self._ws(path)
        try:  # entered here: the caller's with (or close) ends it
            return (unix_connect(self.address, uri=uri, **kw) if self.scheme == "unix" else connect(uri, **kw)).__enter__()
        except InvalidStatus as exc:
            raise self._refused(exc.response.status_code) from None
        except OSError as exc:
            raise self.unavailable(exc) from exc

    async def ws_connect_async(self, path: str) -> Any:
        from websockets.asyncio.client import connect, unix_connect
        from websockets.exceptions import InvalidStatus

        uri, kw = self._ws(path)
        try:
            return await (unix_connect(self.address, uri=uri, **kw) if self.scheme == "unix" else connect(uri, **kw))
        except InvalidStatus as exc:
            raise self._refused(exc.response.status_code) from None
        except OSError as exc:
            raise self.unavailable(exc) from exc

    def _refused(self, status: int) -> Exception:
        if status == 401:
            return UnauthorizedError(f"the hutch daemon at {self.label} refused the token", hint=TOKEN_HINT)
        if status == 403:
            return UnauthorizedError(
                f"the hutch daemon at {self.label} refused the attach: the key lacks the write scope",
                hint="use a key with that scope, or ask an admin: hutch key create --scope write",
            )
        return UnavailableError(f"the hutch daemon at {self.label} refused the attach (HTTP {status})", hint="see its logs")


TOKEN_HINT = "set HUTCH_TOKEN_FILE (or HUTCH_TOKEN) to the daemon's token file (hutch serve --token-file)"


def _cert_refused(exc: BaseException) -> bool:
    ssl = sys.modules.get("ssl")  # loaded when a TLS connection was made
    return ssl is not None and isinstance(exc, ssl.SSLCertVerificationError)
