"""The egress proxy: the only way out of a sandbox that has a network.

Each sandbox with a network gets its own listener, 127.0.0.1:3128 *inside its own empty
network namespace*: the sandbox's agent creates the listening socket there and hands the
descriptor to the daemon, which accepts on it from the host's namespace. Nothing inside
can route anywhere else, so a program that ignores the proxy settings has no network at
all. The listener identifies the sandbox; nothing the client says can change which
policy applies.

One port speaks HTTP (CONNECT and absolute-form requests) and SOCKS5 (CONNECT, names
resolved here). Names are resolved by the proxy, every address is checked, and the proxy
connects to the address it checked. Every decision is reported through ``on_event``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import re
import socket
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hutch.models import NetworkPolicy
from hutch.policy import Decision, IPAddress, check_address, check_target, judged, parse_ip
from hutch.providers.local import intercept, splice
from hutch.providers.local.placeholders import Vault
from hutch.providers.local.resolve import Hosts, Resolver, own_addresses
from hutch.providers.local.sandboxca import upstream_context

PORT = 3128
MAX_HEAD = 64 << 10
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
RESOLVE_TIMEOUT = 10.0
CHUNK = 256 << 10
MAX_CONNECTIONS = 256  # per sandbox: a sandbox cannot exhaust the daemon's descriptors
RUN_RE = re.compile(r"run_[0-9a-f]{8,40}")
log = logging.getLogger("hutch.egress")

OnEvent = Callable[[str, str, str | None, dict[str, Any]], None]

FIX = {
    "host_not_allowed": "hutch policy {sbx} --allow-host {host}",
    "denied_host": "hutch policy {sbx} --allow-host {host}",
    "port_not_allowed": "hutch policy {sbx} --allow-port {port}",
    "ip_literal": "use the host's name, or hutch policy {sbx} --allow-cidr {one} if you trust that address",
    "invalid_port": "ask for a port between 1 and 65535",
    "invalid_host": "check the name: letters, digits and hyphens, labels of at most 63 characters",
}


def proxy_env(run_id: str | None) -> dict[str, str]:
    """What a run needs to use the proxy; the run id rides in the proxy user name (attribution only)."""
    who = f"{run_id}@" if run_id else ""
    http = f"http://{who}127.0.0.1:{PORT}"
    env = {"HTTP_PROXY": http, "HTTPS_PROXY": http, "ALL_PROXY": f"socks5h://{who}127.0.0.1:{PORT}"}
    env["NO_PROXY"] = "localhost,127.0.0.1,::1"
    return env | {k.lower(): v for k, v in env.items()}


@dataclass
class Listener:
    sandbox_id: str
    policy: NetworkPolicy
    server: asyncio.Server
    clients: set[asyncio.Task[Any]] = field(default_factory=set)  # its connections, ended with it


class DeniedError(Exception):
    def __init__(self, decision: Decision, host: str, port: int, address: str | None = None) -> None:
        super().__init__(decision.reason)
        self.decision, self.host, self.port, self.address = decision, host, port, address


class Egress:
    def __init__(self, hosts_file: str, on_event: OnEvent | None = None, upstream_ca: str = "") -> None:
        self.hosts = Hosts(hosts_file)
        self.resolver = Resolver()
        self.on_event = on_event
        self.listeners: dict[str, Listener] = {}
        self.vaults: dict[str, Vault] = {}  # sandboxes holding placeholder secrets: their traffic is opened
        self.upstream_ca = upstream_ca
        self._upstream_ctx: ssl.SSLContext | None = None

    def arm(self, sandbox_id: str, vault: Vault | None) -> None:
        """Open this sandbox's traffic with ``vault`` (None: relay it as it is)."""
        if vault is None:
            self.vaults.pop(sandbox_id, None)
        else:
            self.vaults[sandbox_id] = vault

    # -- listeners ---------------------------------------------------------------------

    async def open(self, sandbox_id: str, sock: socket.socket, policy: NetworkPolicy) -> None:
        await self.close(sandbox_id)
        sock.setblocking(False)

        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            listener, me = self.listeners.get(sandbox_id), asyncio.current_task()
            if listener is None or len(listener.clients) >= MAX_CONNECTIONS or me is None:
                writer.close()  # over the cap: refused at once, nothing is read
                return
            listener.clients.add(me)
            try:
                await self._client(sandbox_id, reader, writer)
            finally:
                listener.clients.discard(me)

        server = await asyncio.start_server(client, sock=sock, limit=MAX_HEAD)
        self.listeners[sandbox_id] = Listener(sandbox_id, policy, server)

    def update(self, sandbox_id: str, policy: NetworkPolicy) -> bool:
        listener = self.listeners.get(sandbox_id)
        if listener is None:
            return False
        listener.policy = policy
        return True

    async def close(self, sandbox_id: str) -> None:
        listener = self.listeners.pop(sandbox_id, None)
        if listener is not None:  # no new connection, and none of its own outlives it (a tunnel held open upstream)
            listener.server.close()
            for task in listener.clients:
                task.cancel()
            ending = [asyncio.ensure_future(listener.server.wait_closed()), *listener.clients]
            await asyncio.wait(ending, timeout=1.0)

    async def close_all(self) -> None:
        for sandbox_id in list(self.listeners):
            await self.close(sandbox_id)

    # -- one client connection -----------------------------------------------------------

    def _event(self, sandbox_id: str, run_id: str | None, allowed: bool, data: dict[str, Any]) -> None:
        """A decision's event (one SQLite transaction), at the loop's next turn: after the
        decision's bytes are on their way, before anything more of the connection is read."""
        type_ = "egress_allowed" if allowed else "egress_denied"
        asyncio.get_running_loop().call_soon(self._emit, sandbox_id, run_id, type_, data)

    def _emit(self, sandbox_id: str, run_id: str | None, type_: str, data: dict[str, Any]) -> None:
        if self.on_event is not None:
            try:
                self.on_event(type_, sandbox_id, run_id, data)
            except Exception:  # recording never breaks the connection
                log.exception("cannot record an egress event")

    async def _tunnel(
        self,
        sandbox_id: str,
        run_id: str | None,
        host: str,
        port: int,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        up: socket.socket,
    ) -> None:
        """An allowed tunnel (``up`` is its own from here): relayed as it is, or opened when the
        sandbox holds placeholders."""
        vault = self.vaults.get(sandbox_id)
        if vault is None or vault.exempt(host):
            await self._relay(*client, up, b"")
            return
        up_reader, up_writer = await splice.streams(up)
        try:
            if self._upstream_ctx is None:
                self._upstream_ctx = upstream_context(self.upstream_ca)
            report = functools.partial(self._emit, sandbox_id, run_id)
            await intercept.tunnel(vault, host, port, intercept.Plain(*client), up_writer, up_reader, self._upstream_ctx, report)
        finally:
            up_writer.close()

    async def _client(self, sandbox_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:  # one deadline for all a client says before its connection is decided (HTTP head or SOCKS)
            deadline = asyncio.get_running_loop().time() + HEAD_TIMEOUT
            async with asyncio.timeout_at(deadline):  # no task per read, as wait_for makes one
                first = await reader.readexactly(1)
            if first == b"\x05":
                await self._socks(sandbox_id, reader, writer, deadline)
            else:
                await self._http(sandbox_id, first, reader, writer, deadline)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError, asyncio.LimitOverrunError, ValueError):
            pass
        except Exception:  # one bad client never hurts the daemon
            log.exception("egress proxy client failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _connect(self, sandbox_id: str, run_id: str | None, host: str, port: int, protocol: str) -> socket.socket:
        """Decide, resolve, check every address, connect to a checked one (a plain socket, the
        caller's to close); one event either way."""
        listener = self.listeners.get(sandbox_id)
        policy = listener.policy if listener else NetworkPolicy()
        base = {"host": host, "port": port, "protocol": protocol}
        decision, name = check_target(policy, host, port)
        if not decision.allowed:
            self._event(sandbox_id, run_id, False, base | decision.to_dict() | {"address": None})
            raise DeniedError(decision, name, port)
        ip = parse_ip(name)
        addresses: list[IPAddress] = [ip] if ip is not None else await self._resolve(sandbox_id, run_id, name, port, base)
        own = own_addresses()
        refused: tuple[Decision, IPAddress] | None = None
        last_error, tried = "no address", None
        for address in addresses:
            verdict = check_address(policy, address, own) if decision.reason != "allowed_cidr" or ip is None else decision
            if not verdict.allowed:
                refused = refused or (verdict, address)
                continue
            try:
                family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
                sock = await splice.dial(str(address), port, family, CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                last_error = f"{exc.__class__.__name__}: {str(exc) or f'no answer within {CONNECT_TIMEOUT:g} s'}"
                tried = str(address)
                continue
            self._event(sandbox_id, run_id, True, base | decision.to_dict() | {"address": str(address)})
            return sock
        if refused is not None:
            verdict, address = refused
            self._event(sandbox_id, run_id, False, base | verdict.to_dict() | {"address": str(address)})
            raise DeniedError(verdict, name, port, str(address))
        failed = Decision(False, "connect_failed", last_error)
        self._event(sandbox_id, run_id, False, base | failed.to_dict() | {"address": tried})
        raise DeniedError(failed, name, port)

    async def _resolve(self, sandbox_id: str, run_id: str | None, name: str, port: int, base: dict[str, Any]) -> list[IPAddress]:
        fixed = self.hosts.lookup(name)
        if fixed is not None:
            return list(fixed)
        try:
            return await self.resolver.lookup(sandbox_id, name, port, RESOLVE_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            failed = Decision(False, "resolve_failed", f"cannot resolve {name}: {exc}")
            self._event(sandbox_id, run_id, False, base | failed.to_dict() | {"address": None})
            raise DeniedError(failed, name, port) from exc

    # -- HTTP ----------------------------------------------------------------------------

    async def _http(
        self, sandbox_id: str, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline: float
    ) -> None:
        async with asyncio.timeout_at(deadline):
            head = first + await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            await self._reply(writer, 400, "not an HTTP proxy request")
            return
        method, target, version = parts
        headers = [line for line in lines[1:] if line]
        run_id = self._run_of(headers)
        if method.upper() == "CONNECT":
            host, port = self._split_host_port(target, None)
            if host is None or port is None:
                await self._reply(writer, 400, f"CONNECT needs host:port, got {target!r}")
                return
            try:
                up = await self._connect(sandbox_id, run_id, host, port, "connect")
            except DeniedError as denied:
                await self._deny(writer, sandbox_id, denied)
                return
            with splice.closing_on_error(up):
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            await self._tunnel(sandbox_id, run_id, host, port, (reader, writer), up)
            return
        if not target.lower().startswith("http://"):
            await self._reply(writer, 400, "this is hutch's egress proxy: send CONNECT host:port or an absolute http:// URL")
            return
        rest = target[7:]
        authority, _, path = rest.partition("/")
        host, port = self._split_host_port(authority.rsplit("@", 1)[-1], 80)
        if host is None or port is None:
            await self._reply(writer, 400, f"bad URL {target!r}")
            return
        try:
            up = await self._connect(sandbox_id, run_id, host, port, "http")
        except DeniedError as denied:
            await self._deny(writer, sandbox_id, denied)
            return
        # One request per connection: the next request is decided afresh on a new connection.
        kept = [
            h
            for h in headers
            if h.split(":", 1)[0].strip().lower() not in ("proxy-authorization", "proxy-connection", "connection", "keep-alive")
        ]
        request = f"{method} /{path} {version}\r\n" + "".join(f"{h}\r\n" for h in kept) + "Connection: close\r\n\r\n"
        vault = self.vaults.get(sandbox_id)
        if vault is None:
            await self._relay(reader, writer, up, request.encode("latin-1"))
            return
        up_reader, up_writer = await splice.streams(up)  # a sandbox holding placeholders: the request is read and rewritten
        try:
            report = functools.partial(self._emit, sandbox_id, run_id)
            client, server = intercept.Plain(reader, writer), intercept.Plain(up_reader, up_writer)
            await intercept.relay(vault, host, port, client, server, report, request.encode("latin-1"), once=True)
        finally:
            up_writer.close()

    @staticmethod
    def _split_host_port(text: str, default: int | None) -> tuple[str | None, int | None]:
        if text.startswith("["):
            host, _, tail = text[1:].partition("]")
            port_text = tail[1:] if tail.startswith(":") else ""
        elif text.count(":") == 1:
            host, _, port_text = text.partition(":")
        else:
            host, port_text = text, ""
        if not host:
            return None, None
        if not port_text:
            return host, default
        if not port_text.isdigit():
            return None, None
        return host, int(port_text)

    @staticmethod
    def _run_of(headers: list[str]) -> str | None:
        for header in headers:
            key, _, value = header.partition(":")
            if key.strip().lower() == "proxy-authorization":
                scheme, _, token = value.strip().partition(" ")
                if scheme.lower() == "basic":
                    with contextlib.suppress(ValueError):
                        user = base64.b64decode(token, validate=True).decode().partition(":")[0]
                        return user if RUN_RE.fullmatch(user) else None
        return None

    async def _reply(self, writer: asyncio.StreamWriter, status: int, text: str, extra: str = "") -> None:
        body = text.encode() + b"\n"
        reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _deny(self, writer: asyncio.StreamWriter, sandbox_id: str, denied: DeniedError) -> None:
        d = denied.decision
        where = f"{denied.host}:{denied.port}" + (f" ({denied.address})" if denied.address else "")
        if d.reason in ("resolve_failed", "connect_failed"):
            await self._reply(writer, 502, f"hutch: cannot reach {where}: {d.rule}")
            return
        fix = FIX.get(d.reason, "hutch policy {sbx} --allow-cidr {one}, only if you trust that address")
        ip = parse_ip(denied.address or denied.host)
        one = f"{judged(ip)}/{judged(ip).max_prefixlen}" if ip is not None else "ADDRESS/32"
        text = (
            f"hutch: egress to {where} denied ({d.reason}): {d.rule}\n"
            f"Fix: {fix.format(sbx=sandbox_id, host=denied.host, port=denied.port, one=one)}\n"
            f"Why: hutch events {sandbox_id} --type egress_denied"
        )
        await self._reply(writer, 403, text, f"X-Hutch-Egress: denied; reason={d.reason}\r\n")

    # -- SOCKS5 --------------------------------------------------------------------------

    async def _socks(self, sandbox_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline: float) -> None:
        async with asyncio.timeout_at(deadline):
            asked = await self._socks_ask(reader, writer)
        if asked is None:  # refused, and answered
            return
        run_id, host, port = asked
        try:
            up = await self._connect(sandbox_id, run_id, host, port, "socks5")
        except DeniedError as denied:
            code = {"resolve_failed": 4, "connect_failed": 5}.get(denied.decision.reason, 2)
            writer.write(b"\x05" + bytes([code]) + b"\x00\x01" + bytes(6))
            await writer.drain()
            return
        with splice.closing_on_error(up):
            writer.write(b"\x05\x00\x00\x01" + bytes(6))
            await writer.drain()
        await self._tunnel(sandbox_id, run_id, host, port, (reader, writer), up)

    async def _socks_ask(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[str | None, str, int] | None:
        """The greeting and the request: (run id, host, port), or None once refused."""
        count = (await reader.readexactly(1))[0]
        methods = await reader.readexactly(count)
        run_id = None
        if 2 in methods:  # user name / password: the user name carries the run id
            writer.write(b"\x05\x02")
            await writer.drain()
            ver, ulen = await reader.readexactly(2)
            user = (await reader.readexactly(ulen)).decode("utf-8", "replace")
            plen = (await reader.readexactly(1))[0]
            await reader.readexactly(plen)
            if ver != 1:  # not the user name / password sub-negotiation (RFC 1929)
                return None
            writer.write(b"\x01\x00")
            run_id = user if RUN_RE.fullmatch(user) else None
        elif 0 in methods:
            writer.write(b"\x05\x00")
        else:
            writer.write(b"\x05\xff")
            await writer.drain()
            return None
        ver, cmd, _, atyp = await reader.readexactly(4)
        if ver != 5:
            return None
        if atyp == 1:
            host = socket.inet_ntop(socket.AF_INET, await reader.readexactly(4))
        elif atyp == 4:
            host = socket.inet_ntop(socket.AF_INET6, await reader.readexactly(16))
        elif atyp == 3:
            host = (await reader.readexactly((await reader.readexactly(1))[0])).decode("utf-8", "replace")
        else:
            writer.write(b"\x05\x08\x00\x01" + bytes(6))
            await writer.drain()
            return None
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if cmd != 1:  # BIND and UDP ASSOCIATE: the sandbox gets TCP connections out, nothing else
            writer.write(b"\x05\x07\x00\x01" + bytes(6))
            await writer.drain()
            return None
        return run_id, host, port

    # -- relay ---------------------------------------------------------------------------

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: socket.socket, first: bytes) -> None:
        """Both ways between the client and ``up`` (closed here), ``first`` sent up before the rest."""
        a = splice.spliceable(reader, writer)
        if a is not None:  # the kernel moves the bytes
            await splice.relay(a, first + splice.buffered(reader), up.detach(), b"")
            return
        up_reader, up_writer = await splice.streams(up)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(CHUNK):
                    dst.write(data)
                    await dst.drain()
                if dst.can_write_eof():
                    dst.write_eof()
            except (ConnectionError, OSError):
                pass

        try:
            up_writer.write(first)
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        finally:
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()
