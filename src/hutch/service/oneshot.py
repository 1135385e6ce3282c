"""``hutch run`` as one use-case: make (or reuse) a sandbox, push a tree into it, run one
command in the foreground, pull the tree back, destroy the sandbox.

The work is a task of its own (a :class:`Job`), apart from the request that asked for it:
its frames go out through the job, and a client that goes away (killed, a dropped
connection) *leaves* the job, which then destroys the sandbox it made at once. The destroy
comes on every other way out too (a failed push, a run hutch could not start, a bug) before
the last frame is sent, and when the daemon stops (:meth:`OneShot.settle` leaves every job
and waits for it). A sandbox that stays (one given by id, ``keep``, a tenant's or a reuse
key's) keeps its run going when the client leaves, as a plain exec does.

The tree's bytes cross the client's machine and the daemon in the request and the answer
(the HTTP edge spools the push and sends the pull's tar in frames): the files are the
caller's, so the client packs and unpacks them; everything between is here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hutch.errors import HutchError, InternalError, InvalidError
from hutch.models import ExecRequest, SandboxRecord, SandboxSpec
from hutch.provider import Interactive

if TYPE_CHECKING:
    from hutch.service import Service

log = logging.getLogger("hutch.service")
T = TypeVar("T")
FRAMES = 16  # frames waiting for a slow client; past it the job (and the run's output) waits
PULL_PIECE = 1 << 20  # bytes of the pulled tar per frame
MAX_WHOLE_INPUT = 64 << 20  # input taken whole, for a provider without live input
SETTLE_WAIT = 30.0
Frame = dict[str, Any]


@dataclass
class Push:
    """A spooled push: the client's manifest and the tar of the entries it sent (None: none)."""

    manifest: dict[str, Any]
    tar: Path | None


@dataclass
class RunOnce:
    """What to do: where (``spec`` for a new sandbox, or an existing ``sandbox``), the command,
    what to bring in (``push``, ``files``: (path, bytes, mode)) and take back (``pull``).
    ``input`` carries the command's input as it comes (``{"stdin": bytes}``, then ``{"eof": True}``)."""

    exec: ExecRequest
    spec: SandboxSpec | None = None
    sandbox: str | None = None
    keep: bool = False
    push: Push | None = None
    files: list[tuple[str, bytes, int]] = field(default_factory=list)
    pull: bool = False
    input: asyncio.Queue[dict[str, Any]] | None = None


async def unless(event: asyncio.Event, work: Awaitable[T]) -> tuple[bool, T | None]:
    """``(True, result)`` of ``work``, or ``(False, None)`` when ``event`` is set first
    (``work`` is then cancelled)."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task.done():
        return True, task.result()
    task.cancel()
    with contextlib.suppress(BaseException):  # its own ending (cancelled, or what it raised meanwhile) is moot
        await task
    return False, None


class Job:
    """One ``hutch run`` in progress. ``ready`` resolves once the sandbox exists (or fails
    with what stopped it before); frames come from :meth:`next` until it returns None."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Frame | None] = asyncio.Queue(FRAMES)
        self.left = asyncio.Event()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    def leave(self) -> None:
        """The client is gone: nothing it asked for is sent any more, and what the job made goes."""
        self.left.set()

    async def send(self, frame: Frame | None) -> bool:
        """Hand a frame to the client (waiting while it is slow); False once it left."""
        if self.left.is_set():
            return False
        sent, _ = await unless(self.left, self.queue.put(frame))
        return sent

    async def next(self) -> Frame | None:
        return await self.queue.get()


class OneShot:
    """The ``hutch run`` use-case of :class:`hutch.service.Service` (one instance per Service)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.jobs: set[Job] = set()

    def start(self, req: RunOnce) -> Job:
        job = Job()
        job.task = asyncio.get_running_loop().create_task(self._run(job, req))
        self.jobs.add(job)
        job.task.add_done_callback(lambda _: self.jobs.discard(job))
        return job

    async def settle(self, timeout: float = SETTLE_WAIT) -> None:
        """The daemon is stopping: its clients are gone; wait (bounded) for the jobs to clean up."""
        tasks = set()
        for job in self.jobs:
            job.leave()
            if job.task is not None:
                tasks.add(job.task)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def _run(self, job: Job, req: RunOnce) -> None:
        with self.service.pool.job():  # the pool refills once this run is over (its sandbox gone)
            await self._run_job(job, req)

    async def _run_job(self, job: Job, req: RunOnce) -> None:
        svc = self.service
        rec: SandboxRecord | None = None
        kept = True
        failure: BaseException | None = None
        destroyed = False
        try:
            rec, made = await self._sandbox(req)
            kept = not made or req.keep or bool(req.spec and (req.spec.tenant or req.spec.reuse_key))
            if not kept:  # a daemon that dies under this run leaves it to the next one to destroy
                rec = svc.store.sandboxes.update(rec.id, data=rec.data | {"oneshot": True})
            job.ready.set_result(None)
            frame = {"type": "sandbox", "sandbox_id": rec.id, "name": rec.name, "created": made, "kept": kept}
            if await job.send(frame):
                await self._work(job, rec, req)
        except Exception as exc:  # a HutchError, or a bug: said in the last frame (or the request's error)
            failure = exc
            if not isinstance(exc, HutchError):
                log.error("internal error in hutch run: %s", exc, exc_info=exc)
        finally:
            if req.push is not None and req.push.tar is not None:
                req.push.tar.unlink(missing_ok=True)
            if rec is not None and not kept:
                cause = "its client left" if job.left.is_set() else None
                try:
                    await svc.destroy(rec.id, cause=cause, checked=True)
                    destroyed = True
                except Exception as exc:
                    log.warning("hutch run could not destroy %s: %s", rec.id, exc, exc_info=exc)
                    failure = failure or exc
        if not job.ready.done():  # nothing was made: the request itself fails
            job.ready.set_exception(failure or InternalError("hutch run ended before its sandbox existed"))
            return
        if failure is not None:
            err = failure if isinstance(failure, HutchError) else InternalError(f"{failure.__class__.__name__}: {failure}")
            await job.send({"type": "error"} | err.to_dict())
        elif rec is not None:
            await job.send({"type": "done", "sandbox_id": rec.id, "destroyed": destroyed})
        await job.send(None)

    async def _sandbox(self, req: RunOnce) -> tuple[SandboxRecord, bool]:
        """The sandbox to run in, and whether this run made it."""
        svc = self.service
        if req.sandbox is not None and req.spec is not None:
            raise InvalidError("give a spec for a new sandbox, or a sandbox, not both", hint="hutch run --session-id ID -- CMD")
        if req.sandbox is not None:
            return svc.live(req.sandbox), False
        if req.spec is None:
            raise InvalidError("give a spec for a new sandbox, or a sandbox to run in", hint="hutch run -- CMD")
        if req.spec.tenant or req.spec.reuse_key:
            return await svc.workspaces.ensure(req.spec)
        return await svc.create(req.spec), True

    async def _work(self, job: Job, rec: SandboxRecord, req: RunOnce) -> None:
        svc = self.service
        if req.push is not None:
            summary = await svc.workspaces.push(rec.id, req.push.manifest, req.push.tar)
            if not await job.send({"type": "pushed"} | summary):
                return
        for path, data, mode in req.files:
            await svc.write_file(rec.id, path, data, mode)
        if await self._exec(job, rec, req) and req.pull:
            await self._pull(job, rec)

    async def _exec(self, job: Job, rec: SandboxRecord, req: RunOnce) -> bool:
        """Run the command, its frames to the client; True when it ran to its exit frame
        with the client still there (then the workspace may be pulled)."""
        exec_req, interactive = req.exec, None
        if exec_req.command == []:  # no command: the image's (ENTRYPOINT + CMD)
            argv = rec.data.get("defaults", {}).get("argv")
            if not argv:
                raise InvalidError(
                    "no command given, and the sandbox's image names none (no ENTRYPOINT or CMD)",
                    hint="put the command after --, e.g. hutch run --image IMAGE -- sh -c 'echo hi'",
                )
            exec_req = exec_req.model_copy(update={"command": list(argv)})
        if req.input is not None:
            if self.service.provider(rec.provider).capabilities.interactive:
                interactive = Interactive(req.input)
            else:  # no live input there: the input goes whole with the run
                if not await job.send({"type": "input"}):
                    return False
                data = await self._whole_input(job, rec, req.input)
                if data is None:
                    return False
                stdin = base64.b64encode(data).decode()
                exec_req = exec_req.model_copy(update={"stdin": stdin, "stdin_base64": True})
        frames = self.service.runs.stream(rec.id, exec_req, interactive)
        last = ""
        try:
            while True:
                here, frame = await unless(job.left, anext(frames, None))
                if here and frame is None:
                    return last == "exit"
                if not here or frame is None or not await job.send(frame):
                    break
                last = frame["type"]
                if frame["type"] == "run" and interactive is not None and not await job.send({"type": "input"}):
                    break
        finally:
            await frames.aclose()  # the stream, not the run: a kept sandbox's run goes on
        if interactive is not None:  # the client left: hang the run up, as the attach route does
            while not interactive.inbox.empty():
                interactive.inbox.get_nowait()
            interactive.inbox.put_nowait({"hangup": True})
        return False

    async def _whole_input(self, job: Job, rec: SandboxRecord, inbox: asyncio.Queue[dict[str, Any]]) -> bytes | None:
        data = bytearray()
        while True:
            here, item = await unless(job.left, inbox.get())
            if not here or item is None:
                return None
            if item.get("eof"):
                return bytes(data)
            data += item.get("stdin", b"")
            if len(data) > MAX_WHOLE_INPUT:
                raise InvalidError(
                    f"stdin is over 64 MiB, and {rec.id}'s provider takes a command's input only whole",
                    hint="put the data in the sandbox first (hutch run --sync DIR, or hutch write) and read it from there",
                )

    async def _pull(self, job: Job, rec: SandboxRecord) -> None:
        path = await self.service.workspaces.pull(rec.id)
        try:
            with path.open("rb") as tar:
                while piece := await asyncio.to_thread(tar.read, PULL_PIECE):
                    if not await job.send({"type": "pull", "data": base64.b64encode(piece).decode("ascii")}):
                        return
        finally:
            path.unlink(missing_ok=True)
