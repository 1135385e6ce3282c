"""Waiting for processes to end on their pidfds: woken by the kernel when they go, instead of
looking again every few milliseconds (a destroy used to poll at 5-10 ms, more CPU the busier
the machine). Kernels without ``pidfd_open`` (before 5.3) get the old polling."""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Iterable

FALLBACK_TICK = 0.005


def _open(pid: int) -> int | None:
    """A pidfd of ``pid``; None when it is gone already. OSError when the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def wait_exit(pids: Iterable[int], timeout: float, same: Callable[[int], bool] | None = None) -> bool:
    """Wait until every process of ``pids`` has ended (a zombie has), at most ``timeout``
    seconds. ``same(pid)``, asked once its pidfd is open, says whether the pid is still the
    process meant (not a reused one). True when all are gone."""
    end = time.monotonic() + timeout
    pids = list(pids)
    fds: list[int] = []
    try:
        for pid in pids:
            try:
                fd = _open(pid)
            except OSError:  # no pidfds here
                return _poll(pids, end, same)
            if fd is None:
                continue
            if same is not None and not same(pid):
                os.close(fd)
                continue
            fds.append(fd)
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        left = len(fds)
        while left:
            ms = max(0.0, end - time.monotonic()) * 1000
            ready = poller.poll(ms)
            if not ready:
                return False
            for fd, _ in ready:
                poller.unregister(fd)
                left -= 1
        return True
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _poll(pids: list[int], end: float, same: Callable[[int], bool] | None) -> bool:
    """The fallback: look every few milliseconds."""
    while True:
        if not any(_alive(pid) and (same is None or same(pid)) for pid in pids):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(FALLBACK_TICK)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 :][:1] not in (b"Z", b"X")
