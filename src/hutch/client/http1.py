"""A small HTTP/1.1 client connection: what the sync client needs of ``http.client``, and no more.

``http.client`` parses every answer's head with the ``email`` package; importing the two
costs a CLI process more than the rest of ``hutch exec``'s client does, and parsing a head
with them costs more than the request itself over a unix socket. This module speaks to the
daemon over its unix socket, plain TCP (loopback) or TLS (``ssl`` is imported only then):
bodies by length, chunked or up to the close; a connection whose answer ended cleanly may carry
the next request (:meth:`Connection.quiet` says whether it still can). The names follow
``http.client`` (``HTTPException``, ``RemoteDisconnected``, ``request``/``getresponse``,
``putrequest``/``putheader``/``endheaders``) so the callers read the same.
"""

from __future__ import annotations

import os
from _socket import AF_UNIX, IPPROTO_TCP, MSG_DONTWAIT, MSG_PEEK, SOCK_STREAM, TCP_NODELAY
from _socket import socket as _Socket  # noqa: N812 - the C type, beside socket.socket

# socket.py (its enums import enum) is loaded only for TCP; the unix socket is the C type's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from io import BufferedReader

MAX_LINE = 65536  # a status line, a header line or a chunk-size line
MAX_HEADERS = 100
CONNECT_TIMEOUT = 10.0


class HTTPException(Exception):  # noqa: N818 - http.client's name
    """The daemon's answer is not HTTP as expected (like ``http.client.HTTPException``)."""


class RemoteDisconnected(ConnectionResetError, HTTPException):  # noqa: N818 - http.client's name
    """The connection closed before an answer's head (like ``http.client.RemoteDisconnected``)."""


class IncompleteRead(HTTPException):
    """The connection closed inside an answer's body."""


class Connection:
    """One connection: ``unix`` (``address`` is the socket's path), ``http`` or ``https``."""

    def __init__(self, scheme: str, address: str, port: int = 0, context: ssl.SSLContext | None = None) -> None:
        self.scheme = scheme
        self.address = address
        self.port = port
        self.context = context
        self.sock: _Socket | None = None
        self.response: Response | None = None
        self._head: list[bytes] = []
        host = "hutch" if scheme == "unix" else (f"[{address}]" if ":" in address else address)
        self.host = host if scheme == "unix" or port in (80, 443) else f"{host}:{port}"
        # an ASCII name is its own IDNA form: the idna codec (and unicodedata) is loaded only for another
        self._host = self.host.encode("ascii") if self.host.isascii() else self.host.encode("idna")

    def connect(self) -> None:
        """Within 10 s; then without a timeout (an exec may run for an hour)."""
        if self.sock is not None:
            return
        if self.scheme == "unix":
            sock = _Socket(AF_UNIX, SOCK_STREAM)
            sock.settimeout(CONNECT_TIMEOUT)
            try:
                sock.connect(self.address)
            except OSError:
                sock.close()
                raise
        else:
            import socket

            sock = socket.create_connection((self.address, self.port), timeout=CONNECT_TIMEOUT)
            sock.setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)
            if self.scheme == "https":
                assert self.context is not None
                try:
                    sock = self.context.wrap_socket(sock, server_hostname=self.address)
                except BaseException:
                    sock.close()
                    raise
        sock.settimeout(None)
        self.sock = sock

    def putrequest(self, method: str, url: str, skip_accept_encoding: bool = True) -> None:
        self._head = [f"{method} {url} HTTP/1.1".encode("ascii"), b"Host: " + self._host]
        if not skip_accept_encoding:
            self._head.append(b"Accept-Encoding: identity")

    def putheader(self, key: str, value: str) -> None:
        if any(c in value for c in "\r\n") or any(c in key for c in "\r\n:"):
            raise ValueError(f"invalid header {key!r}")
        self._head.append(f"{key}: {value}".encode("latin-1"))

    def endheaders(self, body: bytes | None = None) -> None:
        """Send the head (and ``body`` in the same write: one packet for a small request)."""
        self.connect()
        assert self.sock is not None
        head = b"\r\n".join(self._head) + b"\r\n\r\n"
        self._head = []
        self.sock.sendall(head + body if body and len(body) < 65536 else head)
        if body and len(body) >= 65536:
            self.sock.sendall(body)

    def request(self, method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> None:
        self.putrequest(method, url)
        given = {k.lower() for k in headers or {}}
        for key, value in (headers or {}).items():
            self.putheader(key, value)
        if "content-length" not in given and "transfer-encoding" not in given and (body is not None or method in ("POST", "PUT")):
            self.putheader("Content-Length", str(len(body or b"")))
        self.endheaders(body)

    def getresponse(self, method: str = "GET", begin: bool = True) -> Response:
        """The answer (its head read, unless ``begin`` is false); closed with the connection."""
        assert self.sock is not None
        resp = self.response = Response(self.sock, method)
        if begin:
            resp.begin()
        return resp

    def quiet(self) -> bool:
        """Connected, the last answer read to its end, and nothing waiting on the socket: the
        peer neither closed it nor sent anything unasked (such a connection is not used again)."""
        if self.sock is None or self.response is not None:
            return False
        try:
            self.sock.recv(1, MSG_PEEK | MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    def done(self) -> bool:
        """The answer was read to its end and the connection may carry another request (its
        answer's reader is let go); False: it is to be closed."""
        response = self.response
        if response is None or not response.reusable():
            return False
        self.response = None
        response.close()
        return True

    def close(self) -> None:
        sock, self.sock = self.sock, None
        response, self.response = self.response, None
        if response is not None:
            response.close()
        if sock is not None:
            sock.close()


class Response:
    """An answer: ``status``, its headers, and its body through ``read``/``readline``."""

    def __init__(self, sock: _Socket, method: str = "GET") -> None:
        make = getattr(sock, "makefile", None)  # socket.py's (TCP, TLS); the C socket reads through its own descriptor
        self.fp: BufferedReader = make("rb") if make is not None else open(os.dup(sock.fileno()), "rb")  # noqa: SIM115
        self.method = method
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self._length: int | None = None  # bytes left of a body of known length
        self._chunked = False
        self._chunk_left = 0  # bytes left in the current chunk
        self._done = False
        self._last = True  # the connection ends with this answer (HTTP/1.0, "connection: close", a body up to the close)

    def begin(self) -> None:
        line = self.fp.readline(MAX_LINE + 1)
        if not line:
            raise RemoteDisconnected("the daemon closed the connection without an answer")
        parts = line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HTTPException(f"not an HTTP answer: {line[:80]!r}")
        self.status = int(parts[1])
        while True:
            line = self.fp.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                raise HTTPException("an answer's header line is too long")
            if line in (b"\r\n", b"\n", b""):
                break
            if len(self.headers) >= MAX_HEADERS:
                raise HTTPException("too many headers in an answer")
            key, sep, value = line.decode("latin-1").partition(":")
            if sep:
                self.headers.append((key.strip(), value.strip()))
        names = {k.lower(): v for k, v in self.headers}
        self._last = parts[0] != "HTTP/1.1" or "close" in names.get("connection", "").lower() or self.status < 200
        if self.method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200:
            self._done = True
        elif "chunked" in names.get("transfer-encoding", "").lower():
            self._chunked = True
        elif names.get("content-length", "").isdigit():
            self._length = int(names["content-length"])
            self._done = self._length == 0
        else:
            self._last = True  # a body up to the close

    def reusable(self) -> bool:
        """Read to its end, and its connection not ending with it."""
        return self._done and not self._last

    def getheaders(self) -> list[tuple[str, str]]:
        return list(self.headers)

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), default)

    def _left(self) -> int:
        """Bytes that may be read at once now: of the body's length, or of the current chunk
        (reading the next chunk's size when this one is used up); 0 at the body's end; -1 up to the close."""
        if self._done:
            return 0
        if self._length is not None:
            return self._length
        if not self._chunked:
            return -1
        if self._chunk_left == 0:
            line = self.fp.readline(MAX_LINE + 1)
            if not line:
                raise IncompleteRead("the connection closed inside a chunked answer")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise HTTPException(f"bad chunk size {line[:40]!r}") from None
            if size == 0:
                while self.fp.readline(MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self._done = True
                return 0
            self._chunk_left = size
        return self._chunk_left

    def _took(self, data: bytes, asked: int) -> None:
        if self._length is not None:
            if not data and asked:
                raise IncompleteRead(f"the connection closed {self._length} bytes before the answer's end")
            self._length -= len(data)
            self._done = self._length == 0
        elif self._chunked:
            if not data and asked:
                raise IncompleteRead("the connection closed inside a chunk")
            self._chunk_left -= len(data)
            if self._chunk_left == 0 and self.fp.readline(MAX_LINE + 1) not in (b"\r\n", b"\n"):
                raise HTTPException("a chunk does not end with CRLF")
        elif asked and not data:
            self._done = True

    def read(self, limit: int = -1) -> bytes:
        """Up to ``limit`` bytes of the body (all of it when -1)."""
        out = bytearray()
        while limit < 0 or len(out) < limit:
            left = self._left()
            if left == 0:
                break
            want = left if limit < 0 else min(limit - len(out), left) if left > 0 else limit - len(out)
            data = self.fp.read(want) if want > 0 else self.fp.read()
            self._took(data, want if want > 0 else 1)
            out += data
            if not data:
                break
        return bytes(out)

    def readline(self, limit: int = -1) -> bytes:
        """One line of the body, with its newline (at most ``limit`` bytes); b"" at the end."""
        out = bytearray()
        while not out.endswith(b"\n") and (limit < 0 or len(out) < limit):
            left = self._left()
            if left == 0:
                break
            room = -1 if limit < 0 else limit - len(out)
            want = left if room < 0 else room if left < 0 else min(left, room)
            data = self.fp.readline(want)
            self._took(data, max(want, 1) if want != 0 else 0)
            out += data
            if not data:
                break
        return bytes(out)

    def close(self) -> None:
        self.fp.close()
