"""Noticing at once when a local sandbox dies on its own.

Each sandbox's init (PID 1 inside, a host pid bwrap reports at start) is followed through a
pidfd on the daemon's event loop, which works for the sandboxes this daemon started and
for those it adopted after a restart (which are not its children). When the init ends,
:func:`cause` gathers what is known: the exit code the outer bwrap wrote to the sandbox's
status file (``--json-status-fd``; 128+N when a signal ended it) and the out-of-memory
kills its cgroup counted; :func:`release` frees what only the kernel held for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from hutch.provider import Death
from hutch.providers.local import pidwait
from hutch.providers.local.cgroups import SandboxCgroup
from hutch.providers.local.host import start_time

log = logging.getLogger("hutch.local")
STATUS_FILE = "status.json"  # in the sandbox's own directory, outside its view
POLL = 1.0  # only without pidfds (kernels before 5.3)
OUTER_GRACE = 5.0  # how long the outer bwrap gets to write the exit code once the init is gone

OnExit = Callable[[], Coroutine[Any, Any, None]]


class Watcher:
    """One pidfd (or, without pidfds, one polling task) per followed sandbox."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._polls: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def follow(self, sandbox_id: str, pid: int, start: int | None, on_exit: OnExit) -> None:
        """Call ``on_exit`` once the process ``pid`` that started at ``start`` has ended."""
        self.forget(sandbox_id)
        self._loop = loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._fire(on_exit)
            return
        except OSError as exc:  # no pidfds here: look every POLL seconds
            log.info("no pidfd for sandbox %s (%s): polling its init", sandbox_id, exc)
            self._polls[sandbox_id] = loop.create_task(self._poll(sandbox_id, pid, start, on_exit))
            return
        if start_time(pid) != start:  # a reused pid, or already a zombie: ours is gone
            os.close(fd)
            self._fire(on_exit)
            return
        self._fds[sandbox_id] = fd
        loop.add_reader(fd, self._ended, sandbox_id, on_exit)

    def _ended(self, sandbox_id: str, on_exit: OnExit) -> None:
        self.forget(sandbox_id)
        self._fire(on_exit)

    async def _poll(self, sandbox_id: str, pid: int, start: int | None, on_exit: OnExit) -> None:
        while start_time(pid) == start:
            await asyncio.sleep(POLL)
        self._polls.pop(sandbox_id, None)
        self._fire(on_exit)

    def _fire(self, on_exit: OnExit) -> None:
        task = asyncio.get_running_loop().create_task(on_exit())
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("reporting a sandbox's death failed", exc_info=task.exception())

    def forget(self, sandbox_id: str) -> None:
        """Stop following (a destroy is about to end the sandbox on purpose)."""
        fd = self._fds.pop(sandbox_id, None)
        if fd is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(fd)
            os.close(fd)
        poll = self._polls.pop(sandbox_id, None)
        if poll is not None:
            poll.cancel()

    async def close(self) -> None:
        for sandbox_id in [*self._fds, *self._polls]:
            self.forget(sandbox_id)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _exit_code(sdir: Path) -> int | None:
    """The init's exit code, from the outer bwrap's status lines (once it wrote it)."""
    with contextlib.suppress(OSError):
        for line in (sdir / STATUS_FILE).read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                status = json.loads(line)
                if isinstance(status, dict) and isinstance(status.get("exit-code"), int):
                    return int(status["exit-code"])
    return None


def cause(data: dict[str, Any], ooms_before: int, child: subprocess.Popen[bytes] | None) -> Death:
    """What is known of how the sandbox ended (blocking: waits a little for the outer bwrap)."""
    sdir = Path(data["dir"])
    pid, start = data.get("bwrap_pid"), data.get("bwrap_start")
    deadline = time.monotonic() + OUTER_GRACE
    code = _exit_code(sdir)
    outer = child.pid if child is not None else int(pid) if pid and start else None
    if code is None and outer is not None:  # it writes the code, then ends: woken when it ends
        same = None if child is not None else (lambda p: start_time(p) == start)
        pidwait.wait_exit([outer], max(0.0, deadline - time.monotonic()), same=same)
        code = _exit_code(sdir)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=OUTER_GRACE)  # reap it: no zombie left behind
        if code is None and child.returncode is not None and child.returncode >= 0:
            code = child.returncode  # the same code bwrap would have written
    ooms = SandboxCgroup([Path(d) for d in data.get("cgroups", [])], v2=False).oom_kills() - ooms_before
    sig = code - 128 if code is not None and 128 < code < 160 else None
    return Death(exit_code=code, signal=sig, oom_kills=max(0, ooms))


def release(data: dict[str, Any]) -> None:
    """Free the dead sandbox's cgroups (its files stay until it is destroyed)."""
    cg = SandboxCgroup([Path(d) for d in data.get("cgroups", [])], v2=False)
    try:
        cg.kill_all()
        cg.remove()
    except OSError as exc:
        log.warning("could not remove the cgroups of a dead sandbox (%s): %s", data.get("dir"), exc)
