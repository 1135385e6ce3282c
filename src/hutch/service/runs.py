"""Runs: foreground, streamed and background execution, and everything that follows a run.

A run's output is written to disk inside the sandbox by its supervisor, so a run outlives
the HTTP request that started it, the client that asked and the daemon itself. The
Service records each run before it starts and finalizes it exactly once: from the
supervisor's reply, from its status file (after a daemon restart), or as ``lost``.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import collections
import logging
import signal as signals
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from hutch.errors import CapacityError, HutchError, InvalidError, NotFoundError, TimeoutError_, UnavailableError
from hutch.models import ExecRequest, ExecResult, RawOutput, RunStatus, SandboxRecord, SandboxState, new_id
from hutch.provider import ExecSpec, Interactive, exec_users_provider
from hutch.service.adoption import WATCH_INTERVAL, Adoption
from hutch.service.approvals import command_text
from hutch.service.hints import no_terminal

if TYPE_CHECKING:
    from hutch.service import Service

log = logging.getLogger("hutch.service")
FEED_LIMIT = 1 << 20  # live output held for one streaming client; past it the run waits for the client
OUTPUT_PAGE = 1 << 20
SIGNALS = {
    "TERM": signals.SIGTERM,
    "KILL": signals.SIGKILL,
    "INT": signals.SIGINT,
    "HUP": signals.SIGHUP,
    "QUIT": signals.SIGQUIT,
    "USR1": signals.SIGUSR1,
    "USR2": signals.SIGUSR2,
}


def text(data: bytes) -> tuple[str, bool]:
    """UTF-8 text as is; anything else, or text with NULs (six bytes each in JSON), as base64."""
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True
    if "\x00" in decoded:
        return base64.b64encode(data).decode("ascii"), True
    return decoded, False


def parse_signal(value: str | int) -> int:
    if isinstance(value, int) or str(value).isdigit():
        number = int(value)
        if not 1 <= number <= signals.SIGRTMAX:
            raise InvalidError(f"invalid signal number {number}", hint=f"signals are 1-{int(signals.SIGRTMAX)}, e.g. 15 or TERM")
        return number
    name = str(value).upper().removeprefix("SIG")
    if name not in SIGNALS:
        raise InvalidError(f"unknown signal {value!r}", hint=f"use one of {', '.join(SIGNALS)} or a number")
    return int(SIGNALS[name])


def outcome(raw: RawOutput) -> tuple[RunStatus, int]:
    if raw.timed_out:
        return RunStatus.timed_out, 124
    if raw.oom_killed:
        return RunStatus.oom_killed, raw.exit_code
    if raw.killed or raw.signal:
        return RunStatus.killed, raw.exit_code
    return (RunStatus.completed if raw.exit_code == 0 else RunStatus.failed), raw.exit_code


def _resolve(started: asyncio.Future[None]) -> None:
    if not started.done():
        started.set_result(None)


class Feed:
    """Live output for one streaming client, with backpressure: past FEED_LIMIT bytes
    waiting for the client, ``put`` waits, so the provider stops reading the run's output
    and the run itself waits (like a pipe). Every byte reaches a client that keeps
    reading; once the client is gone (``close``), chunks are dropped and the run goes on
    (its output still goes to disk)."""

    def __init__(self, limit: int = FEED_LIMIT) -> None:
        self.limit = limit
        self.items: collections.deque[tuple[str, bytes]] = collections.deque()
        self.queued = 0
        self.closed = False
        self.changed = asyncio.Event()  # set whenever an item is added or taken, or the feed closes

    def _kick(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def put(self, item: tuple[str, bytes]) -> None:
        while not self.closed and self.queued and self.queued + len(item[1]) > self.limit:
            await self.changed.wait()
        if self.closed:
            return
        self.items.append(item)
        self.queued += len(item[1])
        self._kick()

    async def get(self) -> tuple[str, bytes]:
        while not self.items:
            await self.changed.wait()
        return self.take()

    def take(self) -> tuple[str, bytes]:
        item = self.items.popleft()
        self.queued -= len(item[1])
        self._kick()
        return item

    def empty(self) -> bool:
        return not self.items

    def close(self) -> None:
        self.closed = True
        self.items.clear()
        self.queued = 0
        self._kick()


class Runs(Adoption):
    """The run use-cases of :class:`hutch.service.Service` (one instance per Service)."""

    def __init__(self, service: Service) -> None:
        self.svc = service
        self.store = service.store
        self.tasks: dict[str, asyncio.Task[ExecResult]] = {}

    # -- starting --------------------------------------------------------------------

    def _check_user(self, rec: SandboxRecord, user: str) -> None:
        """exec --user: the provider (and the sandbox's runtime) must switch users, and this sandbox must allow it."""
        provider = self.svc.provider(rec.provider)
        switching = exec_users_provider(provider)
        caps = provider.capabilities.of_runtime(rec.spec.runtime)
        if caps is None or not caps.exec_users:
            raise InvalidError(
                f"sandboxes of the {rec.spec.runtime} runtime cannot run a command as another user",
                hint="drop --user, or switch inside the command (runuser -u NAME -- CMD, where the sandbox runs as root)",
            )
        switching.check_exec_user(rec, user)

    def _prepare(self, rec: SandboxRecord, req: ExecRequest, background: bool) -> tuple[str, list[str], bytes | None]:
        argv = req.argv()
        self.svc.access.run_started()  # the key's runs per minute
        if rec.spec.require_approval:  # (no rule: nothing to approve, the command's text is not needed)
            self.svc.approvals.require(rec, "exec", req.approval, command_text(req.command))
        if req.idle_timeout is not None and req.idle_timeout <= 0:
            raise InvalidError("--idle-output-timeout must be positive")
        if req.user is not None:
            self._check_user(rec, req.user)
        stdin: bytes | None = None
        if req.stdin is not None:
            stdin = base64.b64decode(req.stdin) if req.stdin_base64 else req.stdin.encode()
        if background:
            running = [r for r in self.store.runs.all(rec.id, "running") if r["background"]]
            limit = self.svc.settings.max_background_runs
            if len(running) >= limit:
                raise CapacityError(
                    f"sandbox {rec.id} already has {len(running)} background runs (limit {limit})",
                    hint="wait for one (hutch wait RUN), kill one (hutch kill RUN), or raise HUTCH_MAX_BACKGROUND_RUNS",
                )
        run_id = new_id("run")
        self.store.runs.insert(
            run_id,
            rec.id,
            argv,
            time.time(),
            background=background,
            cwd=req.cwd or rec.spec.workdir,
            env_keys=sorted(set(req.env) | set(req.secrets)),
            timeout=req.timeout,
            idle_timeout=req.idle_timeout,
        )
        return run_id, argv, stdin

    async def _execute(
        self,
        rec: SandboxRecord,
        run_id: str,
        argv: list[str],
        stdin: bytes | None,
        req: ExecRequest,
        *,
        stream: bool,
        queue: Feed | None = None,
        interactive: Interactive | None = None,
        started: asyncio.Future[None] | None = None,
        early: asyncio.Future[ExecResult] | None = None,
    ) -> ExecResult:
        """Run to the end and record the outcome; never leaves the run 'running'.

        ``started`` is resolved once the run lives in the sandbox on its own (it then
        outlives this daemon)."""
        t0 = time.perf_counter()

        async def on_output(name: str, chunk: bytes) -> None:
            if queue is not None:
                await queue.put((name, chunk))

        try:
            spec = ExecSpec(
                run_id=run_id,
                argv=argv,
                env=req.env | req.secrets,
                cwd=req.cwd or rec.spec.workdir,
                stdin=stdin,
                timeout=req.timeout or self.svc.settings.exec_timeout,
                idle_timeout=req.idle_timeout,
                max_output=req.max_output,
                stream=stream,
                on_output=on_output if queue is not None else None,
                interactive=interactive,
                redact=req.secrets if req.redact else None,
                user=req.user,
                on_start=None if started is None else (lambda: _resolve(started)),
            )
            raw = await self.svc.provider(rec.provider).exec(rec, spec)
        except asyncio.CancelledError:
            if early is not None:
                early.cancel()
            raise  # the daemon is stopping: the run goes on in the sandbox; the next daemon adopts it
        except BaseException as exc:
            message = exc.message if isinstance(exc, HutchError) else f"{exc.__class__.__name__}: {exc}"
            gone: HutchError | None = None
            if isinstance(exc, UnavailableError):
                await self.svc._check_lost(rec, message, run_id)
                gone = self.svc._gone(rec, exc)  # destroyed under the run: a conflict
            # invalid: the provider refused the run before it started (a cluster node's own check): it did
            # not run, nothing of it was lost; the caller gets the refusal as it came, with its hint
            refused = isinstance(exc, InvalidError)
            ended = ExecResult(
                run_id=run_id,
                sandbox_id=rec.id,
                exit_code=126 if refused else 125,
                status=RunStatus.failed if refused else RunStatus.lost,
                stdout="",
                stderr="",
                duration_ms=(time.perf_counter() - t0) * 1000,
                error=gone.message if gone is not None else message,
            )
            self._record(ended, oom=False)
            if early is not None and not early.done():
                early.set_exception(gone if gone is not None else exc)
            if gone is not None and gone is not exc:
                raise gone from exc
            raise
        result = self.result(rec.id, run_id, raw, (time.perf_counter() - t0) * 1000, req.max_output)
        if early is not None and not early.done():
            early.set_result(result)
            await asyncio.sleep(0)  # the caller's turn comes first: then this, before the loop reads again
        self._record(result, oom=raw.oom_killed)
        return result

    def _record(self, result: ExecResult, oom: bool) -> None:
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "run_finished",
                {
                    "exit_code": result.exit_code,
                    "status": result.status.value,
                    "duration_ms": result.duration_ms,
                    "error": result.error,
                },
            )
        ]
        if oom:
            events.append(("limit_hit", {"limit": "memory"}))
        self.svc.metrics.run_finished(result.status.value, result.duration_ms / 1000)
        try:
            self.store.runs.finish(result, events)
        except HutchError as exc:
            # The workload ran: its result is returned even when it cannot be recorded
            # (a full disk). The run stays 'running' and is settled by the next daemon.
            log.warning("could not record run %s: %s", result.run_id, exc.message)
            result.error = f"the run could not be recorded: {exc.message}"

    @staticmethod
    def result(sandbox_id: str, run_id: str, raw: RawOutput, duration_ms: float, cap: int) -> ExecResult:
        status, code = outcome(raw)
        out, out_b64 = text(raw.stdout)
        err, err_b64 = text(raw.stderr)
        return ExecResult(
            run_id=run_id,
            sandbox_id=sandbox_id,
            exit_code=code,
            status=status,
            stdout=out,
            stderr=err,
            stdout_base64=out_b64,
            stderr_base64=err_b64,
            stdout_bytes=raw.stdout_bytes,
            stderr_bytes=raw.stderr_bytes,
            truncated=raw.stdout_bytes > cap or raw.stderr_bytes > cap,
            stored_truncated=raw.truncated_on_disk,
            duration_ms=round(duration_ms, 3),
            signal=raw.signal or None,
            error=raw.spawn_error,
        )

    def _spawn(self, coro: Any, run_id: str) -> asyncio.Task[ExecResult]:
        task: asyncio.Task[ExecResult] = asyncio.get_running_loop().create_task(coro)
        self.tasks[run_id] = task
        task.add_done_callback(lambda t: self._done(run_id, t))
        return task

    def _done(self, run_id: str, task: asyncio.Task[ExecResult]) -> None:
        self.tasks.pop(run_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.info("run %s ended with %s", run_id, task.exception())

    async def exec(self, ref: str, req: ExecRequest, *, early: bool = False) -> ExecResult:
        """Foreground: run to the end. A client that goes away does not stop the run.

        ``early``: the result as soon as it is known, and its record right after, in the same
        turn of the loop, before another request is read (for a caller that only sends the
        result on: its answer goes out while the record is written). A daemon killed in between
        settles the run from its status file, like any run it did not see end."""
        rec = self.svc.live(ref)
        run_id, argv, stdin = self._prepare(rec, req, background=False)
        if early:
            result: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
            self._spawn(self._execute(rec, run_id, argv, stdin, req, stream=True, early=result), run_id)
            return await result  # (cancelled with the caller: the run goes on, and is recorded)
        task = self._spawn(self._execute(rec, run_id, argv, stdin, req, stream=True), run_id)
        return await asyncio.shield(task)

    async def stream(
        self, ref: str, req: ExecRequest, interactive: Interactive | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Foreground, streamed: ``run``, then ``stdout``/``stderr`` chunks, then ``exit``.

        With ``interactive``, the client's input reaches the run while it runs (and a
        terminal when ``interactive.tty``)."""
        rec = self.svc.live(ref)
        provider = self.svc.provider(rec.provider)
        if interactive is not None and not provider.capabilities.interactive:
            raise no_terminal(provider, rec, ref)
        run_id, argv, stdin = self._prepare(rec, req, background=False)
        queue = Feed()
        job = self._execute(rec, run_id, argv, stdin, req, stream=True, queue=queue, interactive=interactive)
        task = self._spawn(job, run_id)
        sent = {"stdout": 0, "stderr": 0}

        def event(name: str, chunk: bytes) -> dict[str, Any]:
            sent[name] += len(chunk)
            data, b64 = text(chunk)
            return {"type": name, "data": data, "base64": b64}

        try:
            yield {"type": "run", "run_id": run_id, "sandbox_id": rec.id}
            while True:
                if not queue.empty():
                    yield event(*queue.take())
                    continue
                if task.done():
                    break
                getter = asyncio.ensure_future(queue.get())
                try:
                    done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                finally:  # also when the client left while we waited: no task may be left pending
                    if not getter.done():
                        getter.cancel()
                if getter in done:
                    yield event(*getter.result())
            try:
                result = task.result()
            except HutchError as exc:
                yield {"type": "error"} | exc.to_dict()
                return
            # every byte the run wrote was passed on, unless a provider could not deliver it all
            result.truncated = sent["stdout"] < result.stdout_bytes or sent["stderr"] < result.stderr_bytes
            summary = result.model_dump(mode="json", exclude={"stdout", "stderr", "stdout_base64", "stderr_base64"})
            yield {"type": "exit"} | summary
        finally:
            queue.close()  # the client went away (or we are done): the run goes on, on disk

    async def start(self, ref: str, req: ExecRequest) -> dict[str, Any]:
        """Background: record and start the run; return once it lives in the sandbox.

        The acknowledgement waits for the provider to say the run started (for the local
        provider, the supervisor's pid): an acknowledged run survives a daemon killed the
        next instant. A run that cannot start is an error here, not a later 'lost'."""
        rec = self.svc.live(ref)
        run_id, argv, stdin = self._prepare(rec, req, background=True)
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = self._spawn(self._execute(rec, run_id, argv, stdin, req, stream=False, started=started), run_id)
        waits: set[asyncio.Future[Any]] = {started, task}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)  # the run goes on if our caller leaves
        failed = task.exception() if task.done() and not task.cancelled() and not started.done() else None
        if failed is not None:
            raise failed
        return self.store.runs.get(run_id)

    # -- following and controlling ---------------------------------------------------

    def get(self, run_id: str) -> dict[str, Any]:
        """A run of a sandbox the request's actor may see (another key's does not exist for it)."""
        run = self.store.runs.get(run_id)
        if not self.svc.access.visible(self.store.sandboxes.get(run["sandbox_id"]).owner):
            raise NotFoundError(f"no run {run_id!r}", hint="list runs with: hutch runs SANDBOX")
        return run

    def list(self, ref: str, status: str | None = None) -> builtins.list[dict[str, Any]]:
        return self.store.runs.all(self.svc.get(ref).id, status)

    async def wait(self, run_id: str, timeout: float | None) -> dict[str, Any]:
        run = self.get(run_id)
        run_id = run["id"]  # the whole id, when given a short one
        deadline = None if timeout is None else time.monotonic() + timeout
        while run["status"] == "running":
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError_(f"run {run_id} is still running", hint=f"follow it with: hutch poll {run_id} --follow")
            task = self.tasks.get(run_id)
            if task is not None:
                await asyncio.wait({task}, timeout=left)
            else:
                await asyncio.sleep(min(WATCH_INTERVAL, left) if left is not None else WATCH_INTERVAL)
            run = self.store.runs.get(run_id)
        return run

    async def kill(self, run_id: str, sig: str | int) -> dict[str, Any]:
        signum = parse_signal(sig)
        run = self.get(run_id)
        run_id = run["id"]
        if run["status"] != "running":
            return {"run_id": run_id, "signalled": False, "status": run["status"], "message": f"already {run['status']}"}
        rec = self.svc.get(run["sandbox_id"])
        try:
            sent = await self.svc.provider(rec.provider).kill_run(rec, run_id, signum)
        except UnavailableError:
            # its sandbox was destroyed under the call (hutch run destroys it once the run ended): the run is over
            if self.store.sandboxes.get(rec.id).state not in (SandboxState.destroying, SandboxState.destroyed):
                raise
            status = self.store.runs.get(run_id)["status"]
            return {"run_id": run_id, "signalled": False, "status": status, "message": "its sandbox was destroyed meanwhile"}
        self.store.events.append("run_signalled", rec.id, run_id, signal=signum)
        message = f"sent signal {signum} to the run's process tree" if sent else "the run had already ended"
        return {"run_id": run_id, "signalled": sent, "status": run["status"], "message": message}

    async def poll(self, run_id: str, offsets: dict[str, int], limit: int) -> dict[str, Any]:
        """Status and the output written so far, from the given offsets."""
        run = self.get(run_id)
        run_id, rec = run["id"], self.svc.get(run["sandbox_id"])
        provider = self.svc.provider(rec.provider)
        out: dict[str, Any] = {"run": run}
        for name in ("stdout", "stderr"):
            offset = max(0, offsets.get(name, 0))
            data, size = await provider.read_output(rec, run_id, name, offset, min(limit, OUTPUT_PAGE))
            body, b64 = text(data)
            out[name] = {"data": body, "base64": b64, "offset": offset, "next_offset": offset + len(data), "size": size}
        out["done"] = run["status"] != "running" and all(out[n]["next_offset"] >= out[n]["size"] for n in ("stdout", "stderr"))
        return out

    async def logs(self, ref: str, run_id: str | None, offset: int, limit: int) -> dict[str, Any]:
        """The sandbox's transcript (all runs, in the order output arrived) from ``offset``."""
        rec = self.svc.get(ref)
        if run_id is not None:
            run = self.get(run_id)
            if run["sandbox_id"] != rec.id:
                raise InvalidError(f"run {run_id} is not a run of {ref}", hint=f"list them with: hutch runs {ref}")
            run_id = run["id"]
        provider = self.svc.provider(rec.provider)
        records, next_offset, size = await provider.read_transcript(rec, max(0, offset), min(limit, OUTPUT_PAGE))
        entries = []
        for r in records:
            if run_id is None or r["run_id"] == run_id:
                body, b64 = text(r["data"])
                entries.append({"offset": r["offset"], "run_id": r["run_id"], "stream": r["stream"], "data": body, "base64": b64})
        active = self.store.runs.all(rec.id, "running")
        if run_id is not None:
            active = [r for r in active if r["id"] == run_id]
        return {
            "sandbox_id": rec.id,
            "records": entries,
            "offset": offset,
            "next_offset": next_offset,
            "size": size,
            "eof": next_offset >= size and not active,
        }

    async def ps(self, ref: str) -> builtins.list[dict[str, Any]]:
        rec = self.svc.live(ref)
        return await self.svc._guarded(rec, self.svc.provider(rec.provider).ps(rec))
