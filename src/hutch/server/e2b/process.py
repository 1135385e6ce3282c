"""envd's ``process.Process`` service over hutch runs.

Each E2B process is one interactive hutch run (``Runs.stream`` with an
:class:`~hutch.provider.Interactive` inbox: stdin, a terminal, resizes), driven by a task of
its own so that it outlives the stream that started it (``background`` commands, a client
that disconnects): its output goes to whoever is connected at the time (``Start``,
``Connect``), as envd does. A process is known by a pid the adapter hands out (not the pid
inside the sandbox) and by its tag; the table lives in the daemon's memory and in the store
(``e2b_processes``): after a daemon restart a process is found again by its pid or tag and
followed through its hutch run (its output from then on and its end; its input and
terminal were the previous daemon's and are gone).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import signal as signals
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from hutch.errors import HutchError
from hutch.models import ExecRequest
from hutch.provider import Interactive
from hutch.server.e2b.connect import ConnectError, invalid
from hutch.server.e2b.users import Users
from hutch.service import Service
from hutch.store.e2b import ProcessRow

INBOX = 64
MAX_PROCS = 64  # running processes per sandbox through this API
KEEP_ENDED = 32  # ended processes per sandbox still answered by Connect
SUBSCRIBER_QUEUE = 256
REVIVED_POLL = 0.25  # seconds between reads of a previous daemon's process's output
SIGNALS = {"SIGNAL_SIGKILL": signals.SIGKILL, "SIGNAL_SIGTERM": signals.SIGTERM, 9: signals.SIGKILL, 15: signals.SIGTERM}


@dataclass
class Proc:
    pid: int
    sandbox_id: str
    config: dict[str, Any]
    tag: str | None
    pty: bool
    inbox: asyncio.Queue[dict[str, Any]]
    run_id: str = ""
    subscribers: set[asyncio.Queue[dict[str, Any] | None]] = field(default_factory=set)
    end: dict[str, Any] | None = None
    error: ConnectError | None = None
    task: asyncio.Task[None] | None = None
    revived: bool = False  # a previous daemon's: output and end followed, no input

    def publish(self, message: dict[str, Any] | None) -> None:
        for q in list(self.subscribers):
            try:
                q.put_nowait(message)
            except asyncio.QueueFull:  # a subscriber that does not read is dropped, not waited for
                self.subscribers.discard(q)
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
                q.put_nowait(None)


def _bytes(event: dict[str, Any]) -> bytes:
    data = event.get("data", "")
    return base64.b64decode(data) if event.get("base64") else str(data).encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def selector(msg: dict[str, Any]) -> tuple[int | None, str | None]:
    sel = msg.get("process")
    if not isinstance(sel, dict):
        raise invalid("process selector missing: give process.pid or process.tag")
    pid, tag = sel.get("pid"), sel.get("tag")
    if isinstance(pid, str) and pid.isdigit():
        pid = int(pid)
    if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 1 << 32:
        return pid, None
    if isinstance(tag, str) and tag:
        return None, tag
    raise invalid("process selector must name a pid (a positive number) or a tag")


class Processes:
    def __init__(self, service: Service) -> None:
        self.svc = service
        self.users = Users(service)
        self.procs: dict[str, dict[int, Proc]] = {}
        self._pids: Iterator[int] | None = None

    def next_pid(self) -> int:
        if self._pids is None:  # after the pids a previous daemon handed out (the store keeps them)
            self._pids = itertools.count(self.svc.e2b_processes.next_pid())
        return next(self._pids)

    def find(self, sandbox_id: str, msg: dict[str, Any]) -> Proc:
        pid, tag = selector(msg)
        for proc in self.procs.get(sandbox_id, {}).values():
            if (pid is not None and proc.pid == pid) or (tag is not None and proc.tag == tag):
                return proc
        row = self.svc.e2b_processes.find(sandbox_id, pid, tag)
        if row is not None:  # started before a daemon restart: followed again through its run
            return self._revive(row)
        raise ConnectError("not_found", f"process with {'pid ' + str(pid) if pid else 'tag ' + repr(tag)} not found")

    def _revive(self, row: ProcessRow) -> Proc:
        proc = Proc(row.pid, row.sandbox_id, row.config, row.tag, row.pty, asyncio.Queue(1), row.run_id, revived=True)
        self.procs.setdefault(row.sandbox_id, {})[row.pid] = proc
        proc.task = asyncio.get_running_loop().create_task(self._follow_run(proc))
        return proc

    async def _follow_run(self, proc: Proc) -> None:
        """A process of a previous daemon: its new output (from now on, as envd's Connect
        gives) and its end, read from hutch's own record of the run."""
        runs = self.svc.runs
        try:
            offsets = {n: int(v["size"]) for n, v in (await runs.poll(proc.run_id, {}, 0)).items() if n in ("stdout", "stderr")}
            while True:
                got = await runs.poll(proc.run_id, offsets, 1 << 20)
                for name in ("stdout", "stderr"):
                    part = got[name]
                    data = base64.b64decode(part["data"]) if part["base64"] else str(part["data"]).encode()
                    if data:
                        proc.publish({"event": {"data": {"pty" if proc.pty else name: _b64(data)}}})
                    offsets[name] = int(part["next_offset"])
                if got["done"]:
                    run = got["run"]
                    code = int(run.get("exit_code") if run.get("exit_code") is not None else -1)
                    end = {"exitCode": code, "exited": run["status"] == "completed", "status": f"exit status {code}"}
                    if run["status"] != "completed":
                        end["error"] = f"the run {run['status']}" + (f": {run['error']}" if run.get("error") else "")
                    proc.end = {"event": {"end": end}}
                    break
                await asyncio.sleep(REVIVED_POLL)
        except HutchError as exc:
            proc.error = ConnectError.of(exc)
        finally:
            if proc.end is None and proc.error is None:
                proc.error = ConnectError("unavailable", "the process's run could not be followed")
            proc.publish(proc.end)
            proc.publish(None)

    def _forget_ended(self, sandbox_id: str) -> None:
        table = self.procs.get(sandbox_id, {})
        ended = [p.pid for p in table.values() if p.task is not None and p.task.done()]
        for pid in ended[:-KEEP_ENDED]:
            table.pop(pid, None)

    async def start(
        self, sandbox_id: str, msg: dict[str, Any], deadline: float | None, user: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        config = msg.get("process")
        if not isinstance(config, dict) or not isinstance(config.get("cmd"), str) or not config["cmd"]:
            raise invalid("process.cmd must be a non-empty string")
        args = config.get("args") or []
        envs = config.get("envs") or {}
        cwd = config.get("cwd") or None
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise invalid("process.args must be a list of strings")
        if not isinstance(envs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in envs.items()):
            raise invalid("process.envs must map strings to strings")
        pty = msg.get("pty")
        rows = cols = 0
        if pty is not None:
            size = pty.get("size") if isinstance(pty, dict) else None
            size = size if isinstance(size, dict) else {}
            rows, cols = int(size.get("rows") or 24), int(size.get("cols") or 80)
            if not (1 <= rows <= 0xFFFF and 1 <= cols <= 0xFFFF):
                raise invalid("pty.size rows and cols must be between 1 and 65535")
        table = self.procs.setdefault(sandbox_id, {})
        self._forget_ended(sandbox_id)
        if sum(1 for p in table.values() if p.end is None and p.error is None) >= MAX_PROCS:
            raise ConnectError("resource_exhausted", f"sandbox {sandbox_id} already runs {MAX_PROCS} processes")
        prefix, as_user = await self.users.command_prefix(sandbox_id, user)  # user=: honoured where hutch can, else refused
        try:
            req = ExecRequest(command=[*prefix, config["cmd"], *args], env=envs, cwd=cwd, timeout=deadline, user=as_user)
        except (HutchError, ValueError) as exc:
            raise invalid(f"invalid process: {exc}") from None
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(INBOX)
        if not msg.get("stdin") and pty is None:
            inbox.put_nowait({"eof": True})  # E2B: no stdin unless asked for
        interactive = Interactive(inbox, tty=pty is not None, rows=rows or 24, cols=cols or 80)
        events = self.svc.runs.stream(sandbox_id, req, interactive)
        first = await anext(events)  # refusals (policy, capacity, a sandbox gone) answer here
        tag = msg.get("tag") if isinstance(msg.get("tag"), str) else None
        shown = {"cmd": config["cmd"], "args": args, "envs": envs, "cwd": cwd}
        proc = Proc(self.next_pid(), sandbox_id, shown, tag, pty is not None, inbox)
        proc.run_id = first.get("run_id", "")
        table[proc.pid] = proc
        self.svc.e2b_processes.add(ProcessRow(sandbox_id, proc.pid, proc.run_id, tag, proc.pty, shown))
        q = self._subscribe(proc)
        proc.task = asyncio.get_running_loop().create_task(self._drive(proc, events, deadline))
        return self._follow(proc, q)

    def _subscribe(self, proc: Proc) -> asyncio.Queue[dict[str, Any] | None]:
        q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        proc.subscribers.add(q)
        return q

    async def _drive(self, proc: Proc, events: AsyncGenerator[dict[str, Any], None], deadline: float | None) -> None:
        stream = "pty" if proc.pty else None
        try:
            async for event in events:
                kind = event.get("type")
                if kind in ("stdout", "stderr"):
                    proc.publish({"event": {"data": {stream or kind: _b64(_bytes(event))}}})
                elif kind == "exit":
                    if event.get("status") == "timeout" and deadline is not None:
                        proc.error = ConnectError("deadline_exceeded", f"the command ran past its timeout of {deadline:g} s")
                        break
                    code = int(event.get("exit_code", 0))
                    status = f"signal: {event['signal']}" if event.get("signal") else f"exit status {code}"
                    end: dict[str, Any] = {"exitCode": code, "exited": event.get("signal") is None, "status": status}
                    if event.get("error"):
                        end["error"] = str(event["error"])
                    proc.end = {"event": {"end": end}}
                elif kind == "error":
                    proc.error = ConnectError("unavailable", str(event.get("message", "the run failed")))
        except HutchError as exc:
            proc.error = ConnectError.of(exc)
        finally:
            if proc.end is None and proc.error is None:
                proc.error = ConnectError("unavailable", "the process's stream ended without an exit")
            proc.publish(proc.end)
            proc.publish(None)
            with contextlib.suppress(Exception):
                await events.aclose()

    async def _follow(
        self, proc: Proc, q: asyncio.Queue[dict[str, Any] | None], keepalive: float = 50.0
    ) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {"event": {"start": {"pid": proc.pid}}}
            while True:
                try:
                    message = await asyncio.wait_for(q.get(), keepalive)
                except TimeoutError:
                    yield {"event": {"keepalive": {}}}
                    continue
                if message is None:
                    break
                yield message
            if proc.end is None and proc.error is not None:
                raise proc.error
        finally:
            proc.subscribers.discard(q)  # a client that leaves stops receiving; the process goes on

    def connect(self, sandbox_id: str, msg: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        proc = self.find(sandbox_id, msg)
        q = self._subscribe(proc)
        if proc.task is not None and proc.task.done():
            proc.subscribers.discard(q)
            q.put_nowait(proc.end)
            q.put_nowait(None)
        return self._follow(proc, q)

    def list(self, sandbox_id: str) -> dict[str, Any]:
        known = self.procs.get(sandbox_id, {})
        for row in self.svc.e2b_processes.live_of(sandbox_id):
            if row.pid not in known:  # a previous daemon's, still running
                self._revive(row)
        live = [p for p in self.procs.get(sandbox_id, {}).values() if p.task is not None and not p.task.done()]
        return {"processes": [{"config": p.config, "pid": p.pid} | ({"tag": p.tag} if p.tag else {}) for p in live]}

    async def send_input(self, sandbox_id: str, msg: dict[str, Any]) -> dict[str, Any]:
        proc = self.find(sandbox_id, msg)
        given = msg.get("input")
        if not isinstance(given, dict):
            raise invalid("input must be {stdin: BASE64} or {pty: BASE64}")
        raw = given.get("pty" if proc.pty else "stdin", given.get("stdin", given.get("pty")))
        try:
            data = base64.b64decode(raw or "", validate=True)
        except (ValueError, TypeError):
            raise invalid("input data must be base64") from None
        await self._put(proc, {"stdin": data})
        return {}

    async def _put(self, proc: Proc, item: dict[str, Any]) -> None:
        if proc.task is None or proc.task.done():
            raise ConnectError("not_found", f"process {proc.pid} has ended")
        if proc.revived:
            raise ConnectError("failed_precondition", f"process {proc.pid} lost its input and terminal in a gateway restart")
        try:
            await asyncio.wait_for(proc.inbox.put(item), 30)
        except TimeoutError:
            raise ConnectError("unavailable", f"process {proc.pid} does not read its input") from None

    async def close_stdin(self, sandbox_id: str, msg: dict[str, Any]) -> dict[str, Any]:
        await self._put(self.find(sandbox_id, msg), {"eof": True})
        return {}

    async def send_signal(self, sandbox_id: str, msg: dict[str, Any]) -> dict[str, Any]:
        proc = self.find(sandbox_id, msg)
        sig = SIGNALS.get(msg.get("signal"))
        if sig is None:
            raise invalid("signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
        if proc.task is not None and not proc.task.done():
            await self.svc.runs.kill(proc.run_id, int(sig))
        return {}

    async def update(self, sandbox_id: str, msg: dict[str, Any]) -> dict[str, Any]:
        proc = self.find(sandbox_id, msg)
        pty = msg.get("pty")
        size = pty.get("size") if isinstance(pty, dict) else None
        if not isinstance(size, dict):
            raise invalid("update carries pty.size {rows, cols}")
        rows, cols = size.get("rows"), size.get("cols")
        if not (isinstance(rows, int) and isinstance(cols, int) and 1 <= rows <= 0xFFFF and 1 <= cols <= 0xFFFF):
            raise invalid("pty.size rows and cols must be between 1 and 65535")
        if not proc.pty:
            raise invalid(f"process {proc.pid} has no terminal")
        await self._put(proc, {"resize": (rows, cols)})
        return {}
