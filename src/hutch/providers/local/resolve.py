"""Names and addresses for the egress proxy: its hosts file, this host's own addresses, and a
resolver no sandbox can use to stall the others.

``getaddrinfo`` blocks, cannot be cancelled, and a name whose servers never answer holds its
thread for the resolver's whole timeout (``resolv.conf``'s, not the proxy's). Run on the
event loop's default pool (uvloop's four libuv threads), thirty such lookups from one sandbox
left every other sandbox unable to resolve anything for minutes (and held the daemon's exit
back). So each lookup runs on a daemon thread of its own, at most :data:`THREADS` at once,
and a sandbox has at most :data:`PER_SANDBOX` of them *running*, counted until
``getaddrinfo`` really returns, not until the proxy stopped waiting: a sandbox can occupy a
few threads, never all. One over its share is refused at once (``resolve_failed``, "too many
lookups in flight"), which the client sees as a 502.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import socket
import threading
import time
from pathlib import Path
from typing import Any

from hutch.policy import IPAddress, parse_ip

THREADS = 256  # lookups running at once, all sandboxes together (a thread blocked in a lookup costs little)
PER_SANDBOX = 4


class BusyError(OSError):
    """This sandbox already has its share of lookups running (or the proxy has all it runs)."""


class Resolver:
    """Each lookup on a daemon thread of its own (a stalled one never holds the daemon's exit
    back, as a pool's joined threads would), at most ``threads`` at once, ``per_sandbox`` each."""

    def __init__(self, threads: int = THREADS, per_sandbox: int = PER_SANDBOX) -> None:
        self.threads, self.per_sandbox = threads, per_sandbox
        self.running: dict[str, int] = {}

    async def lookup(self, sandbox_id: str, name: str, port: int, timeout: float) -> list[IPAddress]:
        """The addresses of ``name``, in the resolver's order, each once; OSError or TimeoutError."""
        if self.running.get(sandbox_id, 0) >= self.per_sandbox:
            raise BusyError(f"too many lookups in flight for this sandbox ({self.per_sandbox}); try again")
        if sum(self.running.values()) >= self.threads:
            raise BusyError(f"too many lookups in flight ({self.threads}); try again")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Any]] = loop.create_future()

        def work() -> None:
            try:
                got: tuple[list[Any] | None, BaseException | None] = (socket.getaddrinfo(name, port, 0, socket.SOCK_STREAM), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                got = (None, exc)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._settle, sandbox_id, answer, *got)

        self.running[sandbox_id] = self.running.get(sandbox_id, 0) + 1
        threading.Thread(target=work, name="hutch-resolve", daemon=True).start()
        done, _ = await asyncio.wait({answer}, timeout=timeout)
        if not done:
            answer.cancel()  # nobody waits any more; the thread still counts until it returns
            raise TimeoutError(f"no answer within {timeout:g} s")
        out: list[IPAddress] = []
        for info in answer.result():
            address = parse_ip(str(info[4][0]))
            if address is not None and address not in out:
                out.append(address)
        return out

    def _settle(
        self, sandbox_id: str, answer: asyncio.Future[list[Any]], result: list[Any] | None, exc: BaseException | None
    ) -> None:
        left = self.running.get(sandbox_id, 0) - 1
        if left > 0:
            self.running[sandbox_id] = left
        else:
            self.running.pop(sandbox_id, None)
        if answer.done():
            return
        if exc is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(result or [])


class Hosts:
    """A hosts-format file consulted before DNS (re-read when it changes)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path) if path else None
        self.mtime = -1.0
        self.table: dict[str, list[str]] = {}
        self.parsed: dict[str, list[IPAddress]] = {}  # the table's addresses, parsed once per change

    def lookup(self, name: str) -> list[IPAddress] | None:
        if self.path is None:
            return None
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return None
        if mtime != self.mtime:
            table: dict[str, list[str]] = {}
            for line in self.path.read_text().splitlines():
                parts = line.split("#", 1)[0].split()
                if len(parts) >= 2 and parse_ip(parts[0]) is not None:
                    for host in parts[1:]:
                        table.setdefault(host.lower().rstrip("."), []).append(parts[0])
            self.table, self.mtime = table, mtime
            self.parsed = {host: [a for a in map(parse_ip, found) if a is not None] for host, found in table.items()}
        return self.parsed.get(name)


_own_cache: tuple[float, frozenset[str]] = (0.0, frozenset())


def own_addresses() -> frozenset[str]:
    """This host's own addresses (its services are off limits), from /proc, cached briefly."""
    global _own_cache
    now = time.monotonic()
    if now - _own_cache[0] < 5:
        return _own_cache[1]
    found: set[str] = set()
    with contextlib.suppress(OSError):
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for prev, line in itertools.pairwise(lines):
            if "/32 host LOCAL" in line:
                found.add(prev.split()[-1])
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            raw = line.split()[0]
            found.add(str(ipaddress.IPv6Address(bytes.fromhex(raw))))
    _own_cache = (now, frozenset(found))
    return _own_cache[1]
