"""Helper processes of the local provider (the tar jails that copy workspaces).

Every group of helper processes (a *job*: one tar, or the two ends of a tar pipe) runs

- in a cgroup of its own, ``helper-<home>-<daemon pid>-<n>`` beside the sandboxes' (pids and
  memory bounded), so that it can be killed whole, whatever it forked;
- on the provider's own small thread pool, never the event loop's default one: a stuck
  copy can delay other copies, never a create, an exec or a list;
- with a deadline, and cancellable: the caller going away, a destroy of a sandbox the job
  works on, or the daemon stopping kills the cgroup and reaps every process before the
  job returns. Nothing is left behind; a daemon killed with -9 leaves cgroups that the next
  daemon of the same home kills on its first job and when it stops.

Each process's stderr is drained while it runs (a full pipe would stop it) into a bounded
summary: the line count, the first lines and the last bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from hutch.errors import HutchError, UnavailableError
from hutch.providers.local import cgroups
from hutch.providers.local.freeze import tree
from hutch.providers.local.host import launcher, readable

T = TypeVar("T")
THREADS = 8  # jobs at once; more wait their turn (a create never does)
PIDS = 256
V1_CONTROLLERS = ("pids", "memory", "freezer")  # bounded, and killed or frozen whole
MEMORY = 1 << 30
HEAD_LINES = 20
LINE_MAX = 1000
TAIL_BYTES = 2000
REAP_WAIT = 30.0
DRAIN_WAIT = 5.0

Drop = Callable[[int | None, list[str]], Callable[[], None]]


@dataclass
class Stderr:
    """One process's stderr, bounded: how many lines, the first ones, the last bytes."""

    lines: int = 0
    head: list[str] = field(default_factory=list)
    tail: bytes = b""
    _partial: bytes = b""

    def feed(self, chunk: bytes) -> None:
        self.tail = (self.tail + chunk)[-TAIL_BYTES:]
        data = self._partial + chunk
        *complete, rest = data.split(b"\n")
        self._partial = rest[:LINE_MAX]
        for line in complete:
            self._line(line)

    def end(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = b""

    def _line(self, raw: bytes) -> None:
        self.lines += 1
        if len(self.head) < HEAD_LINES:
            self.head.append(raw[:LINE_MAX].decode(errors="replace").rstrip())

    def text(self) -> str:
        return self.tail.decode(errors="replace").strip()


@dataclass
class Finished:
    returncode: int
    stderr: Stderr


class Job:
    """One group of helper processes in one cgroup; ends killed and reaped, always."""

    def __init__(self, helpers: Helpers, what: str, sandboxes: frozenset[str], timeout: float) -> None:
        self.helpers = helpers
        self.what = what
        self.sandboxes = sandboxes
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.stop: HutchError | None = None  # set by cancel(): why the job must end
        self.cgroup: cgroups.SandboxCgroup | None = None
        self.procs: list[tuple[subprocess.Popen[bytes], Stderr]] = []
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._lock = threading.Lock()

    # -- from any thread -----------------------------------------------------------------

    def cancel(self, why: HutchError) -> None:
        with self._lock:
            if self.stop is None:
                self.stop = why
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")

    def stopped(self) -> HutchError:
        """Why the job was stopped, as a fresh error (one job's traceback is its own)."""
        assert self.stop is not None
        return type(self.stop)(self.stop.message, self.stop.hint)

    # -- from the job's own thread --------------------------------------------------------

    def execute(self, work: Callable[[Job], T]) -> T:
        try:
            if self.stop is not None:
                raise self.stopped()
            self.cgroup = self.helpers.make_cgroup()
            return work(self)
        finally:
            self.close()

    def spawn(
        self, argv: list[str], *, uid: int | None, stdin: int | IO[bytes], stdout: int | IO[bytes], pass_fds: Sequence[int]
    ) -> subprocess.Popen[bytes]:
        """Start one helper in the job's cgroup, as ``uid`` (root only), stderr captured."""
        if self.stop is not None:
            raise self.stopped()
        procs = self.cgroup.join_files() if self.cgroup else []
        prefix = launcher(uid, procs, {})
        proc = subprocess.Popen(
            argv if prefix is None else prefix + argv,
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            pass_fds=pass_fds,
            start_new_session=True,
            preexec_fn=self.helpers.drop(uid, procs) if prefix is None else None,
        )
        self.procs.append((proc, Stderr()))
        return proc

    def wait(self) -> list[Finished]:
        """Wait for every process, draining their stderr as they run; raise if the job was
        cancelled or ran out of time (its processes killed and reaped first)."""
        streams: dict[int, tuple[IO[bytes], Stderr]] = {}
        pidfds: dict[int, subprocess.Popen[bytes]] = {}
        for proc, err in self.procs:
            assert proc.stderr is not None
            streams[proc.stderr.fileno()] = (proc.stderr, err)
            try:
                pidfds[os.pidfd_open(proc.pid)] = proc
            except ProcessLookupError:  # already gone (not reaped yet: the pid is still ours)
                proc.wait()
        drained_by: float | None = None
        try:
            while streams or pidfds:
                if self.stop is not None:
                    self.kill()
                    raise self.stopped()
                left = self.deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise UnavailableError(
                        f"{self.what} took longer than {self.timeout:.0f} s (stopped)", hint="try a smaller workspace"
                    )
                if not pidfds:  # every process has exited: what still holds a pipe is killed, then let go
                    if drained_by is None:
                        self.kill()
                        drained_by = time.monotonic() + DRAIN_WAIT
                    elif time.monotonic() > drained_by:
                        for _, err in streams.values():
                            err.end()
                        break
                ready = readable([*streams, *pidfds, self._wake_r], min(left, 1.0))
                for fd in ready:
                    if fd in streams:
                        chunk = os.read(fd, 65536)
                        if chunk:
                            streams[fd][1].feed(chunk)
                        else:
                            streams.pop(fd)[1].end()
                    elif fd in pidfds:
                        pidfds.pop(fd).wait()
                        os.close(fd)
        finally:
            for fd in pidfds:
                os.close(fd)
        return [Finished(proc.returncode, err) for proc, err in self.procs]

    def kill(self) -> None:
        """SIGKILL every process of the job (its whole cgroup, or each process tree)."""
        if self.cgroup is not None:
            self.cgroup.kill_all()
        for proc, _ in self.procs:
            if proc.returncode is None:
                for pid in tree(proc.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self.kill()
        for proc, err in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=REAP_WAIT)
            if proc.stderr is not None:
                proc.stderr.close()
            err.end()
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.remove()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class Helpers:
    """The provider's helper jobs: their thread pool, their cgroups, and who to stop."""

    def __init__(self, home: Path, layout: Callable[[], cgroups.Layout], drop: Drop) -> None:
        self.tag = "helper-" + hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:10]
        self._layout = layout
        self.drop = drop
        self._executor: ThreadPoolExecutor | None = None
        self._jobs: dict[Job, asyncio.Future[Any]] = {}
        self._counter = itertools.count(1)
        self._swept = False

    # -- cgroups -------------------------------------------------------------------------

    def _parents(self) -> list[Path]:
        layout = self._layout()
        return [*layout.v1.values(), *([layout.v2 / cgroups.GROUP] if layout.v2 else [])]

    def make_cgroup(self) -> cgroups.SandboxCgroup | None:
        if self._layout().mode == "none":
            return None
        if not self._swept:
            self._swept = True
            self.sweep(mine=False)
        name = f"{self.tag}-{os.getpid()}-{next(self._counter)}"
        group, _ = cgroups.create(self.layout(), name, MEMORY, PIDS, None)
        return group

    def layout(self) -> cgroups.Layout:
        """Where helper cgroups go: not the v1 cpu controller (joining it costs a process
        ~4 ms here, and a copy has no cpu limit)."""
        layout = self._layout()
        return dataclasses.replace(layout, v1={c: p for c, p in layout.v1.items() if c in V1_CONTROLLERS})

    def groups(self) -> list[cgroups.SandboxCgroup]:
        """The helper cgroups of this home (of any daemon of it, live or gone)."""
        by_name: dict[str, list[Path]] = {}
        for parent in self._parents():
            with contextlib.suppress(OSError):
                for d in parent.iterdir():
                    if d.name.startswith(self.tag + "-") and d.is_dir():
                        by_name.setdefault(d.name, []).append(d)
        return [cgroups.SandboxCgroup(dirs, v2=False) for _, dirs in sorted(by_name.items())]

    def sweep(self, mine: bool) -> None:
        """Kill and remove the helper cgroups left by this home's daemons that are gone (and,
        with ``mine``, this process's own)."""
        for group in self.groups():
            owner = group.dirs[0].name.removeprefix(self.tag + "-").split("-")[0]
            if (mine and owner == str(os.getpid())) or not owner.isdigit():
                pass
            elif Path(f"/proc/{owner}").exists():
                continue
            group.kill_all()
            with contextlib.suppress(OSError):
                group.remove()

    # -- jobs ----------------------------------------------------------------------------

    async def run(self, what: str, sandboxes: Iterable[str], work: Callable[[Job], T], timeout: float) -> T:
        """Run ``work`` on the helper pool as one job; a cancel of the caller stops the job."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(THREADS, thread_name_prefix="hutch-helper")
        job = Job(self, what, frozenset(sandboxes), timeout)
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._executor, job.execute, work)
        self._jobs[job] = fut
        fut.add_done_callback(lambda _: self._jobs.pop(job, None))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            job.cancel(UnavailableError(f"{what} was cancelled"))
            with contextlib.suppress(BaseException):  # the job kills and reaps, then returns
                await asyncio.wait_for(asyncio.shield(fut), REAP_WAIT)
            raise

    async def stop(self, why: HutchError, sandbox: str | None = None) -> None:
        """Stop the jobs working on ``sandbox`` (all with None) and wait until they are reaped."""
        stopping = [(job, fut) for job, fut in list(self._jobs.items()) if sandbox is None or sandbox in job.sandboxes]
        for job, _ in stopping:
            job.cancel(why)
        if stopping:
            await asyncio.wait([fut for _, fut in stopping], timeout=REAP_WAIT)

    async def close(self, why: HutchError) -> None:
        await self.stop(why)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._layout().mode != "none":
            await asyncio.to_thread(self.sweep, True)
