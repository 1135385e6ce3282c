"""The egress proxy's protocol edges, in-process: a listener on the host's loopback stands in
for the one inside a sandbox's namespace (the proxy code is the same)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hutch.models import NetworkPolicy
from hutch.providers.local.egress import MAX_HEAD, Egress


class Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        body = f"hello {self.path} host={self.headers.get('Host')} auth={self.headers.get('Proxy-Authorization')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def run_with_proxy(
    tmp_path: Path, client: Callable[[int, int], Any], policy: NetworkPolicy | None = None
) -> tuple[Any, list[Any]]:
    """Start an upstream and the proxy, run ``client(proxy_port, upstream_port)`` in a thread."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    up = upstream.server_address[1]
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 up.test\n")
    events: list[Any] = []

    async def main() -> Any:
        egress = Egress(str(hosts), lambda *e: events.append(e))
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        chosen = policy or NetworkPolicy(mode="allowlist", allow_hosts=["up.test"], ports=[up], cidrs=["127.0.0.1/32"])
        await egress.open("sbx_test", listener, chosen)
        try:
            return await asyncio.to_thread(client, listener.getsockname()[1], up)
        finally:
            await egress.close_all()

    try:
        return asyncio.run(main()), events
    finally:
        upstream.shutdown()


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_absolute_form_strips_proxy_credentials_and_records_the_run(tmp_path: Path) -> None:
    import base64

    auth = base64.b64encode(b"run_0123456789abcdef:").decode()

    def client(port: int, up: int) -> bytes:
        req = f"GET http://up.test:{up}/x?y=1 HTTP/1.1\r\nHost: up.test:{up}\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
        return exchange(port, req.encode())

    out, events = run_with_proxy(tmp_path, client)
    assert out.endswith(b"auth=None") and b"hello /x?y=1" in out  # the upstream never sees the proxy credentials
    (event,) = events
    assert event[0] == "egress_allowed" and event[2] == "run_0123456789abcdef"


def test_requests_that_are_not_for_a_proxy_get_400(tmp_path: Path) -> None:
    def client(port: int, up: int) -> list[bytes]:
        return [
            exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),  # origin-form: not a proxy request
            exchange(port, b"NONSENSE\r\n\r\n"),
            exchange(port, b"GET https://up.test/ HTTP/1.1\r\n\r\n"),  # https absolute-form: use CONNECT
            exchange(port, b"CONNECT up.test HTTP/1.1\r\n\r\n"),  # no port
        ]

    outs, events = run_with_proxy(tmp_path, client)
    assert all(o.startswith(b"HTTP/1.1 400") for o in outs), outs
    assert events == []


def test_an_oversized_request_head_is_dropped(tmp_path: Path) -> None:
    def client(port: int, up: int) -> bytes:
        head = f"GET http://up.test:{up}/ HTTP/1.1\r\nX: {'a' * (MAX_HEAD + 10)}\r\n\r\n".encode()
        try:
            return exchange(port, head)
        except ConnectionResetError:
            return b""

    out, events = run_with_proxy(tmp_path, client)
    assert out == b"" and events == []


def socks(port: int, greeting: bytes, request: bytes) -> tuple[bytes, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(greeting)
        chosen = s.recv(2)
        if chosen[1:] == b"\xff":
            return chosen, b""
        s.sendall(request)
        return chosen, s.recv(10)


def test_socks5_edges(tmp_path: Path) -> None:
    def client(port: int, up: int) -> list[tuple[bytes, bytes]]:
        name = b"up.test"
        target = b"\x03" + bytes([len(name)]) + name + struct.pack("!H", up)
        return [
            socks(port, b"\x05\x01\x80", b""),  # only an unknown auth method: refused
            socks(port, b"\x05\x01\x00", b"\x05\x02\x00" + target),  # BIND
            socks(port, b"\x05\x01\x00", b"\x05\x03\x00" + target),  # UDP ASSOCIATE
            socks(port, b"\x05\x01\x00", b"\x05\x01\x00\x09" + bytes(6)),  # unknown address type
            socks(port, b"\x05\x01\x00", b"\x05\x01\x00\x03\x08nope.test" + struct.pack("!H", up)),  # not allowed
            socks(port, b"\x05\x01\x00", b"\x05\x01\x00" + target),  # allowed
        ]

    replies, events = run_with_proxy(tmp_path, client)
    assert replies[0] == (b"\x05\xff", b"")
    assert [r[1][:2] for r in replies[1:]] == [b"\x05\x07", b"\x05\x07", b"\x05\x08", b"\x05\x02", b"\x05\x00"]
    assert [(e[0], e[3]["reason"]) for e in events] == [("egress_denied", "host_not_allowed"), ("egress_allowed", "allowed_host")]


@pytest.mark.parametrize("mode", ["allowlist", "open"])
def test_a_name_that_cannot_be_resolved_is_a_502_and_an_event(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The resolver fails the way the system's does for an unknown name, without a query leaving the machine.
    real = socket.getaddrinfo

    def resolver(host: Any, *args: Any, **kw: Any) -> Any:
        if host == "nothing.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    policy = NetworkPolicy.model_validate(
        {"mode": mode, "allow_hosts": ["*.nothing.invalid", "nothing.invalid"] if mode == "allowlist" else []}
    )

    def client(port: int, up: int) -> bytes:
        return exchange(port, b"GET http://nothing.invalid/ HTTP/1.1\r\n\r\n")

    out, events = run_with_proxy(tmp_path, client, policy)
    assert out.startswith(b"HTTP/1.1 502") and b"cannot resolve" in out
    assert [(e[0], e[3]["reason"]) for e in events] == [("egress_denied", "resolve_failed")]


def test_run_id_from_proxy_auth_is_matched_whole() -> None:
    import base64

    from hutch.providers.local.egress import Egress

    def header(user: str) -> list[str]:
        return ["Proxy-Authorization: Basic " + base64.b64encode(f"{user}:x".encode()).decode()]

    assert Egress._run_of(header("run_1a2333cc4e63056d4bd")) == "run_1a2333cc4e63056d4bd"
    assert Egress._run_of(header("run_1a2333cc4e63056d4bd\n")) is None


def test_a_connect_tunnel_is_spliced_with_the_bytes_sent_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CONNECT, then a request sent in the same write as the CONNECT head (it waits in the
    proxy's reader when the tunnel opens): the kernel moves the tunnel's bytes, every one."""
    from hutch.providers.local import splice

    spliced: list[int] = []
    real = splice.relay

    async def counting(a: int, a_first: bytes, b: int, b_first: bytes) -> None:
        spliced.append(len(a_first))
        await real(a, a_first, b, b_first)

    monkeypatch.setattr(splice, "relay", counting)

    def client(port: int, up: int) -> bytes:
        ahead = f"GET /tunnelled HTTP/1.0\r\nHost: up.test:{up}\r\n\r\n"
        return exchange(port, f"CONNECT up.test:{up} HTTP/1.1\r\nHost: up.test:{up}\r\n\r\n{ahead}".encode())

    out, events = run_with_proxy(tmp_path, client)
    head, _, rest = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    port = events[0][3]["port"]
    assert rest.startswith(b"HTTP/1.0 200") and rest.endswith(b"hello /tunnelled host=up.test:%d auth=None" % port)
    assert spliced and spliced[0] > 0  # spliced, starting with what the reader held
    assert [e[0] for e in events] == ["egress_allowed"]


def test_parsed_and_cached_policy_parts_follow_every_change(tmp_path: Path) -> None:
    """The proxy keeps parsed CIDRs, names and hosts-file addresses between requests: each of
    N rapid requests is still decided and recorded, a narrowed policy denies the very next
    one, and a hosts file that now points at a private address is refused."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    up = upstream.server_address[1]
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 up.test\n")
    events: list[Any] = []
    wide = NetworkPolicy(mode="allowlist", allow_hosts=["up.test"], ports=[up], cidrs=["127.0.0.1/32"])

    def get(port: int) -> bytes:
        return exchange(port, f"GET http://UP.test.:{up}/ HTTP/1.1\r\nHost: up.test\r\n\r\n".encode())

    async def main() -> dict[str, Any]:
        egress = Egress(str(hosts), lambda *e: events.append(e))
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        await egress.open("sbx_test", listener, wide)
        port = listener.getsockname()[1]
        out: dict[str, Any] = {}
        try:
            out["rapid"] = [await asyncio.to_thread(get, port) for _ in range(20)]
            egress.update("sbx_test", NetworkPolicy(mode="allowlist", allow_hosts=["up.test"], ports=[up]))
            out["no_cidr"] = await asyncio.to_thread(get, port)
            egress.update(
                "sbx_test", NetworkPolicy(mode="allowlist", allow_hosts=["other.test"], ports=[up], cidrs=["127.0.0.1/32"])
            )
            out["no_host"] = await asyncio.to_thread(get, port)
            egress.update("sbx_test", wide)
            hosts.write_text("10.1.2.3 up.test\n")
            os.utime(hosts, (1, 1))  # a new mtime even within the clock's resolution
            out["moved"] = await asyncio.to_thread(get, port)
        finally:
            await egress.close_all()
        return out

    try:
        out = asyncio.run(main())
    finally:
        upstream.shutdown()
    assert all(b"hello /" in r for r in out["rapid"])
    assert [e[0] for e in events[:20]] == ["egress_allowed"] * 20  # every one of the rapid requests recorded
    assert out["no_cidr"].startswith(b"HTTP/1.1 403") and b"loopback" in out["no_cidr"]
    assert out["no_host"].startswith(b"HTTP/1.1 403") and b"host_not_allowed" in out["no_host"]
    assert out["moved"].startswith(b"HTTP/1.1 403") and b"10.1.2.3" in out["moved"]
    assert [(e[0], e[3]["reason"]) for e in events[20:]] == [
        ("egress_denied", "loopback_address"),
        ("egress_denied", "host_not_allowed"),
        ("egress_denied", "private_address"),
    ]


def test_an_allowed_port_with_nothing_listening_is_a_502_and_an_event(tmp_path: Path) -> None:
    """The upstream connection refused (absolute-form, CONNECT, SOCKS5): a clear answer,
    a ``connect_failed`` event each, and the proxy goes on serving."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    dead = free.getsockname()[1]
    free.close()  # nothing listens there now
    policy = NetworkPolicy(mode="open", cidrs=["127.0.0.1/32"])  # any port: the dead one and the upstream's

    def client(port: int, up: int) -> list[bytes]:
        name = b"up.test"
        return [
            exchange(port, f"GET http://up.test:{dead}/ HTTP/1.1\r\nHost: up.test\r\n\r\n".encode()),
            exchange(port, f"CONNECT up.test:{dead} HTTP/1.1\r\n\r\n".encode()),
            socks(port, b"\x05\x01\x00", b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack("!H", dead))[1],
            exchange(port, f"GET http://up.test:{up}/after HTTP/1.1\r\nHost: up.test\r\n\r\n".encode()),
        ]

    outs, events = run_with_proxy(tmp_path, client, policy)
    for out in outs[:2]:
        assert out.startswith(b"HTTP/1.1 502") and f"cannot reach up.test:{dead}".encode() in out, out
        assert b"ConnectionRefusedError" in out
    assert outs[2][:2] == b"\x05\x05"  # SOCKS5: connection refused
    assert outs[3].startswith(b"HTTP/1.0 200") and b"hello /after" in outs[3]
    assert [(e[0], e[3]["reason"]) for e in events[:3]] == [("egress_denied", "connect_failed")] * 3
    assert [e[0] for e in events[3:]] == ["egress_allowed"]


def test_closing_a_sandboxs_proxy_ends_its_open_tunnels(tmp_path: Path) -> None:
    """A tunnel to an upstream that never closes, whose client has gone: closing the
    sandbox's listener (its destroy) ends it, nothing of it left in the proxy; the half-open
    tunnels no longer count against the next sandbox's connections either."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts (the kernel does), never reads, never closes
    port = silent.getsockname()[1]
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 up.test\n")

    async def main() -> None:
        egress = Egress(str(hosts))
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        policy = NetworkPolicy(mode="allowlist", allow_hosts=["up.test"], ports=[port], cidrs=["127.0.0.1/32"])
        await egress.open("sbx_t", listener, policy)
        proxy_port = listener.getsockname()[1]
        before = len(os.listdir("/proc/self/fd"))

        def open_tunnels() -> list[socket.socket]:
            out = []
            for _ in range(5):
                s = socket.create_connection(("127.0.0.1", proxy_port), timeout=5)
                s.sendall(f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode())
                assert s.recv(100).startswith(b"HTTP/1.1 200")
                out.append(s)
            return out

        clients = await asyncio.to_thread(open_tunnels)
        for s in clients:
            s.close()  # the clients are gone; the upstream holds its side open
        await asyncio.sleep(0.3)
        assert len(egress.listeners["sbx_t"].clients) == 5  # half open: still held (until idle, or the close)
        await egress.close("sbx_t")
        assert "sbx_t" not in egress.listeners
        assert len(os.listdir("/proc/self/fd")) <= before - 1  # the listener and every tunnel's descriptors

    try:
        asyncio.run(main())
    finally:
        silent.close()


def test_a_socks_client_that_stalls_or_speaks_another_version_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SOCKS5 greeting and request have the same deadline as an HTTP head (they had none);
    a request or a sub-negotiation of another version opens nothing."""
    import hutch.providers.local.egress as egress_module

    monkeypatch.setattr(egress_module, "HEAD_TIMEOUT", 0.5)

    def dropped(port: int, data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # (10 s: far past the deadline)
            s.sendall(data)
            out = b""
            while chunk := s.recv(100):
                out += chunk
            return out

    def client(port: int, up: int) -> list[bytes]:
        target = b"\x03\x07up.test" + struct.pack("!H", up)
        return [
            dropped(port, b"\x05"),  # a greeting cut short
            dropped(port, b"\x05\x01\x02"),  # user name and password offered, then nothing
            dropped(port, b"\x05\x01\x00" + b"\x04\x01\x00" + target),  # a request of version 4
            dropped(port, b"\x05\x01\x02" + b"\x07\x01u\x01p"),  # a sub-negotiation of version 7
        ]

    outs, events = run_with_proxy(tmp_path, client)
    assert outs == [b"", b"\x05\x02", b"\x05\x00", b"\x05\x02"], outs  # what was answered before each was dropped
    assert events == []  # nothing was decided, nothing opened
