"""The egress proxy's resolver (providers/local/resolve.py): a sandbox whose names never
resolve holds at most its share of lookup threads, counted until getaddrinfo really
returns, so the other sandboxes keep resolving. The system resolver is replaced by one that
blocks on chosen names until released (a name server that never answers, without one)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest

from hutch.providers.local import resolve


@pytest.fixture
def stalled(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    release = threading.Event()
    real = socket.getaddrinfo

    def getaddrinfo(host: str, *args: Any) -> Any:
        if host.endswith(".slow.test"):
            release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args)

    monkeypatch.setattr(resolve.socket, "getaddrinfo", getaddrinfo)
    yield release
    release.set()


def test_a_sandbox_that_stalls_its_lookups_does_not_stall_the_others(stalled: threading.Event) -> None:
    async def main() -> None:
        r = resolve.Resolver(threads=4, per_sandbox=2)
        tries = [r.lookup("sbx_a", f"h{i}.slow.test", 80, 0.2) for i in range(5)]
        outcomes = await asyncio.gather(*tries, return_exceptions=True)
        kinds = sorted(type(o).__name__ for o in outcomes)
        assert kinds == ["BusyError"] * 3 + ["TimeoutError"] * 2, outcomes
        assert "no answer within 0.2 s" in str(next(o for o in outcomes if isinstance(o, TimeoutError)))
        # its two lookups still run (nobody waits for them): still its whole share
        assert r.running == {"sbx_a": 2}
        with pytest.raises(resolve.BusyError):
            await r.lookup("sbx_a", "again.slow.test", 80, 0.2)
        for _ in range(3):  # another sandbox resolves at once, again and again
            assert any(str(a) == "127.0.0.1" for a in await r.lookup("sbx_b", "localhost", 80, 5))
        stalled.set()  # the name server answers at last: the share comes back
        for _ in range(100):
            if not r.running:
                break
            await asyncio.sleep(0.05)
        assert r.running == {}
        assert await r.lookup("sbx_a", "localhost", 80, 5)
        # and all of them together hold at most the proxy's own cap
        stalled.clear()
        for sbx in ("sbx_c", "sbx_d"):
            for i in range(2):
                with pytest.raises(TimeoutError):
                    await r.lookup(sbx, f"{sbx}{i}.slow.test", 80, 0.1)
        with pytest.raises(resolve.BusyError, match=r"in flight \(4\)"):
            await r.lookup("sbx_e", "localhost", 80, 5)
        stalled.set()

    asyncio.run(main())
