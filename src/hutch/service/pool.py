"""The warm pool: sandboxes started ahead of time, per shape, handed out on create.

A *shape* is what a sandbox needs at start: its provider and its image (the host's
``/usr`` without one). The default shape's size is the ``pool_size`` setting; ``hutch pool
set [IMAGE] --size N`` stores a size per shape. A member is started with the ordinary
``Provider.create`` from its shape's spec under a fresh sandbox id, recorded in the store
before it starts (a daemon killed at any point finds what to clean or adopt again).

On create, a request whose start-time settings are its shape's (no mounts, tenant, parent,
provider options ...; only what :data:`AFTER_START` names differs) takes the oldest member:
it leaves the pool in the transaction that records its sandbox (so never twice), then the
provider gives it the request's environment, secrets, limits and network
(``PoolProvider.adopt_member``). Anything else is created cold. A member that does not
answer is destroyed and the next one (or a cold create) is used.

The pool refills in the background after a create returns, a few members at a time and only
while no create is in progress; its size is capped by the memory the machine has (a share of
it), and ``hutch doctor`` says when it is. A refill waits :data:`REFILL_QUIET` after a create
(the new sandbox's first runs go first), but only while a ``hutch run`` (:meth:`Pool.job`)
lasts for the sandbox a one-shot run made: its end lets the refill start at once, in the gap
before the next run of a script that runs them one after another. A create that finds no
member ready is created cold at once: it does not wait for a member that is starting (that
one starts at the lowest cpu priority, and on a busy machine a create waiting for it waited
longer than a cold create takes).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from hutch.actors import OWNER_ID
from hutch.errors import ConflictError, HutchError, InvalidError, NotFoundError
from hutch.models import SandboxRecord, SandboxSpec, SandboxState, new_id
from hutch.provider import CheckResult, Death, Provider, pool_provider, watching_provider
from hutch.service.poolsizes import MAX_SIZE, PoolSizes, Shape, member_record, pool_check
from hutch.store.pool import MemberRow

if TYPE_CHECKING:
    from hutch.service import Service

log = logging.getLogger("hutch.service.pool")

REFILL_AT_ONCE = 2  # members started at the same time, over every shape
REFILL_QUIET = 0.25  # seconds after the last create before a refill starts a member (its first runs go first)
JOB_HOLD = 2.0  # seconds a hutch run in progress holds refills at most (a long command does not starve the pool)
_IN_JOB: contextvars.ContextVar[bool] = contextvars.ContextVar("hutch_pool_in_job", default=False)
RETRY_MAX = 60.0  # seconds between attempts at a shape whose members fail to start
# what a started member can take from a request (the rest of a spec must be its shape's)
AFTER_START = (
    "name",
    "labels",
    "env",
    "secrets",
    "secret_names",
    "secret_sources",
    "files",
    "setup",
    "git",
    "limits",
    "network",
    "workdir",
    "ttl",
    "idle_timeout",
    "on_expire",
    "require_approval",
    "reuse_key",
)


class Pool(PoolSizes):
    def __init__(self, svc: Service) -> None:
        super().__init__(svc)
        self._fillers: dict[Shape, asyncio.Task[None]] = {}
        self._handouts: set[asyncio.Task[Any]] = set()  # destroys of members gone bad
        self._foreground = 0  # creates in progress: refills wait for none
        self._last_create = 0.0  # when the last one ended (monotonic)
        self._quiet: asyncio.Event | None = None
        self._jobs: dict[object, float] = {}  # hutch runs in progress: when each began (monotonic)
        self._starting_ids: dict[str, Shape] = {}  # members whose create is in progress
        self._gate: asyncio.Semaphore | None = None
        self._failures: dict[Shape, int] = {}
        self.recovered: dict[str, list[str]] = {"adopted": [], "cleaned": []}  # members a previous daemon left

    # -- shapes and sizes ---------------------------------------------------------------------

    # -- hand-out ------------------------------------------------------------------------------

    def refusal(self, spec: SandboxSpec, provider: Provider) -> str | None:
        """Why a member cannot take ``spec`` (it is then created cold), or None."""
        if not provider.capabilities.pool:
            return "the provider keeps no pool"
        if spec.secret_hosts:  # its CA is made at its start, and only it trusts it
            return "placeholder secrets need a sandbox of their own from its start"
        defaults = {k: SandboxSpec.model_fields[k].get_default(call_default_factory=True) for k in AFTER_START}
        shape = Shape.of(spec).spec()
        if spec.model_copy(update=defaults).model_dump() != shape.model_dump():
            return "it needs a different start"
        if spec.image and self.svc.access.owner() != OWNER_ID:  # a key's names are its own: its image may be another
            return "image pools serve the local owner only"
        if spec.limits.disk != shape.limits.disk:  # limits are set after start, but a disk cap is made at start
            return "its --disk needs a different start"
        return pool_provider(provider).pool_refusal(spec)

    @contextlib.contextmanager
    def foreground(self) -> Iterator[None]:
        """A create in progress: refills wait until none is (and :data:`REFILL_QUIET` after
        it, unless the create is a ``hutch run``'s: :meth:`job` holds them then)."""
        self._foreground += 1
        try:
            yield
        finally:
            self._foreground -= 1
            if not _IN_JOB.get():
                self._last_create = time.monotonic()
            self._wake()

    @contextlib.contextmanager
    def job(self) -> Iterator[None]:
        """A ``hutch run`` in progress: refills wait for its end (at most :data:`JOB_HOLD`),
        then start at once: its sandbox's one run is over."""
        token = object()
        self._jobs[token] = time.monotonic()
        mark = _IN_JOB.set(True)
        try:
            yield
        finally:
            _IN_JOB.reset(mark)
            del self._jobs[token]
            self._hurry()
            self._wake()

    def _hurry(self) -> None:
        """A hutch run ended: the next one of a script comes in a few ms; members still
        starting (at the lowest cpu priority) get the normal one, so that the cold runs of a
        busy loop do not starve them."""
        for member_id, shape in list(self._starting_ids.items()):
            with contextlib.suppress(HutchError, OSError):
                pool_provider(self.svc.provider(shape.provider)).hurry_member(member_id)

    def _wake(self) -> None:
        if self._foreground == 0 and self._quiet is not None:
            self._quiet.set()

    async def take(self, spec: SandboxSpec, provider: Provider) -> SandboxRecord | None:
        """A member made into the sandbox ``spec`` asks for, or None (create it cold)."""
        shape = Shape.of(spec)
        if not self.idle.get(shape):
            if shape in self._fillers:  # a pooled shape with none ready: its filler goes on (or again, if it ended)
                self._refill(shape)
            return None
        if self.refusal(spec, provider) is not None:
            return None
        try:
            return await self._take(spec, provider, shape)
        finally:
            self._refill(shape)

    async def _take(self, spec: SandboxSpec, provider: Provider, shape: Shape) -> SandboxRecord | None:
        idle = self.idle.get(shape, [])
        while idle:
            member = idle.pop(0)
            rec = self.svc.new_record(member.id, spec)
            rec.data, rec.enforcement = member.data, member.enforcement
            try:
                await self.svc.record(rec, self.store.pool.leave(member.id))  # the key's quotas; leaves the pool
            except NotFoundError:
                continue  # drained as we took it
            except HutchError:
                idle.insert(0, member)  # a name taken, a quota reached: the member stays a member
                raise
            try:
                data, enforcement = await pool_provider(provider).adopt_member(rec, member_record(member))
            except HutchError as exc:
                log.warning("pool member %s did not take the request, destroyed: %s", member.id, exc.message)
                self.store.sandboxes.forget(rec.id)
                await self._destroy(member_record(member), "it did not answer when handed out")
                continue
            except BaseException:
                self.store.sandboxes.update(rec.id, state=SandboxState.failed, error="interrupted while it was handed out")
                self._background(self._destroy(member_record(member), "its hand-out was interrupted", event=False))
                raise
            if self.store.sandboxes.get(rec.id).state != SandboxState.creating:
                await provider.destroy(rec)  # destroyed while it was being made (hutch destroy --all)
                raise ConflictError(f"sandbox {rec.id} was destroyed while it was being created", hint="create it again")
            return self.svc.created(rec, data, enforcement, pooled=True)
        return None

    # -- members -------------------------------------------------------------------------------

    async def _start_member(self, shape: Shape) -> None:
        provider = self.svc.provider(shape.provider)
        spec = shape.spec()
        member_id = new_id("sbx")
        self.store.pool.add(member_id, shape.provider, shape.image, spec)  # first: a crash leaves it to clean
        now = time.time()
        rec = SandboxRecord(
            id=member_id,
            provider=provider.name,
            state=SandboxState.creating,
            spec=spec,
            data={"pool_member": True},
            created_at=now,
            updated_at=now,
        )
        self.starting[shape] = self.starting.get(shape, 0) + 1
        self._starting_ids[member_id] = shape
        try:
            data, enforcement = await provider.create(rec)
        except BaseException:
            self.store.pool.remove(member_id)  # the provider removed what it made
            raise
        finally:
            self.starting[shape] -= 1
            del self._starting_ids[member_id]
        member = MemberRow(member_id, shape.provider, shape.image, "ready", spec, data, enforcement, now)
        wanted = self._running and self.count(shape) < self.target(shape)
        if not wanted or not self.store.pool.ready(member_id, data, enforcement):
            await self._destroy(member_record(member), "not wanted any more", event=False)
            return
        self.idle.setdefault(shape, []).append(member)
        if provider.capabilities.watch:
            watching_provider(provider).watch(member_record(member), self._died)
        measured = await pool_provider(provider).member_memory(member_record(member))
        if measured:
            self._per_member = max(1 << 20, (self._per_member + measured) // 2 if self._per_member else measured)

    async def _died(self, member_id: str, death: Death) -> None:
        """A member died while idle: never handed out, replaced."""
        for shape, members in self.idle.items():
            for member in members:
                if member.id == member_id:
                    members.remove(member)
                    await self._destroy(member_record(member), f"it died while idle ({death.reason})")
                    self._refill(shape)
                    return

    async def _destroy(self, rec: SandboxRecord, why: str, event: bool = True) -> None:
        try:
            await self.svc.provider(rec.provider).destroy(rec)
        finally:
            self.store.pool.remove(rec.id)
        if event:
            self.store.events.append("pool_member_destroyed", None, member=rec.id, shape=Shape.of(rec.spec).label, why=why)

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._handouts.add(task)
        task.add_done_callback(self._handouts.discard)

    # -- refill --------------------------------------------------------------------------------

    def start(self) -> None:
        """Fill every shape to its target from now on (the daemon's; in-process users opt in)."""
        self._running = True
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._gate = asyncio.Semaphore(REFILL_AT_ONCE)
        for shape in self.sizes():
            self._refill(shape)

    def _refill(self, shape: Shape) -> None:
        if not self._running or (shape in self._fillers and not self._fillers[shape].done()):
            return
        task = asyncio.get_running_loop().create_task(self._fill(shape))
        task.add_done_callback(_said)
        self._fillers[shape] = task

    async def _fill(self, shape: Shape) -> None:
        assert self._quiet is not None and self._gate is not None
        while self._running:
            missing = self.target(shape) - self.count(shape)
            if missing <= 0:
                extra = self.idle.get(shape, [])[self.target(shape) :]  # a size lowered: the newest go
                for member in reversed(extra):
                    self.idle[shape].remove(member)
                    await self._destroy(member_record(member), "the pool was made smaller", event=False)
                return
            await self._wait_quiet()
            async with self._gate:
                batch = min(missing, REFILL_AT_ONCE)
                results = await asyncio.gather(*(self._start_member(shape) for _ in range(batch)), return_exceptions=True)
            failed = [r for r in results if isinstance(r, BaseException)]
            for exc in failed:
                if isinstance(exc, asyncio.CancelledError):
                    raise exc
            if not failed:
                self._failures.pop(shape, None)
                continue
            exc = failed[0]
            if isinstance(exc, NotFoundError) and shape.image:  # its image is gone
                await self._drain_gone(shape, exc)
                return
            tries = self._failures[shape] = self._failures.get(shape, 0) + 1
            message = exc.message if isinstance(exc, HutchError) else f"{exc.__class__.__name__}: {exc}"
            if tries == 1:
                self.store.events.append("pool_refill_failed", None, shape=shape.label, provider=shape.provider, error=message)
            log.warning("pool %s: a member failed to start (%d in a row): %s", shape.label, tries, message)
            await asyncio.sleep(min(RETRY_MAX, 0.5 * 2**tries))

    async def _wait_quiet(self) -> None:
        """Until no create is in progress, none ended in the last REFILL_QUIET seconds and no
        hutch run began in the last JOB_HOLD seconds is still going."""
        assert self._quiet is not None
        while True:
            if self._foreground:
                self._quiet.clear()
                await self._quiet.wait()
                continue
            until = max([self._last_create + REFILL_QUIET, *(began + JOB_HOLD for began in self._jobs.values())])
            left = until - time.monotonic()
            if left <= 0:
                return
            self._quiet.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), left)

    async def _drain_gone(self, shape: Shape, exc: NotFoundError) -> None:
        self.store.pool.set_size(shape.provider, shape.image, None)
        count = await self._drain_members(shape)
        why = f"image {shape.image} is gone: {exc.message}"
        self.store.events.append("pool_drained", None, shape=shape.label, provider=shape.provider, members=count, why=why)
        log.warning("pool %s drained: %s", shape.label, why)

    def image_ids(self, find: Callable[[str], dict[str, Any] | None]) -> dict[str, list[Shape]]:
        """The images the pools start from (by id, as ``find`` resolves each shape's image):
        kept by the image store's collection while their pools are."""
        out: dict[str, list[Shape]] = {}
        for shape in sorted(set(self.sizes()) | set(self.idle)):
            if shape.image:
                with contextlib.suppress(HutchError):
                    if (row := find(shape.image)) is not None:
                        out.setdefault(str(row["id"]), []).append(shape)
        return out

    async def image_removed(self, image_id: str, shapes: list[Shape], ref: str, find: Callable[[str], Any]) -> None:
        """``ref`` was removed from the image store: each of ``shapes`` (the pools that started
        from ``image_id``) whose image no longer names it is drained, with an event saying why."""
        still = self.image_ids(find).get(image_id, [])
        for shape in shapes:
            if shape not in still:
                await self._drain_gone(shape, NotFoundError(f"image {ref} was removed"))

    async def _drain_members(self, shape: Shape) -> int:
        filler = self._fillers.pop(shape, None)
        if filler is not None and not filler.done():
            filler.cancel()
            with contextlib.suppress(asyncio.CancelledError, HutchError):
                await filler
        members = self.idle.pop(shape, [])
        await asyncio.gather(*(self._destroy(member_record(m), "drained", event=False) for m in members), return_exceptions=True)
        return len(members)

    # -- the edges' use-cases ------------------------------------------------------------------

    async def set(self, image: str | None, size: int) -> dict[str, Any]:
        if not 0 <= size <= MAX_SIZE:
            raise InvalidError(f"a pool's size must be between 0 and {MAX_SIZE}, got {size}", hint="e.g. --size 4")
        shape = self._shape_for(image)
        before = self.store.pool.sizes().get((shape.provider, shape.image))
        self.store.pool.set_size(shape.provider, shape.image, size)
        if size and shape.image and self._running and not self.count(shape):
            try:  # the first member now: an image that cannot start fails this command, not a refill later
                await self._start_member(shape)
            except HutchError:
                self.store.pool.set_size(shape.provider, shape.image, before)
                raise
        self.store.events.append("pool_set", None, shape=shape.label, provider=shape.provider, size=size)
        self._refill(shape)
        return await self.status()

    async def drain(self, image: str | None = None, all_shapes: bool = False) -> dict[str, Any]:
        """Destroy the members (of one shape, or every one) and keep the pool empty (size 0)
        until ``hutch pool set`` gives it a size again."""
        shapes = list(self.sizes()) if all_shapes else [self._shape_for(image)]
        drained = {}
        for shape in shapes:
            self.store.pool.set_size(shape.provider, shape.image, 0)
            drained[shape.label] = await self._drain_members(shape)
            self.store.events.append(
                "pool_drained", None, shape=shape.label, provider=shape.provider, members=drained[shape.label]
            )
        return {"drained": drained} | await self.status()

    async def checks(self) -> list[CheckResult]:
        """``hutch doctor``'s line, where this service keeps the pool (the daemon's)."""
        if not self._running:
            return []
        try:
            status = await self.status()
        except HutchError as exc:
            return [CheckResult("pool", False, exc.message, exc.hint)]
        check = pool_check(status)
        return [] if check is None else [check]

    # -- a daemon's start and stop -------------------------------------------------------------

    async def recover(self) -> dict[str, list[str]]:
        """Members a previous daemon left: live ready ones are members again, the rest destroyed."""
        report: dict[str, list[str]] = {"adopted": [], "cleaned": []}
        for member in self.store.pool.members():
            rec = member_record(member)
            provider = self.svc.provider(member.provider)
            shape = Shape(member.provider, member.image)
            try:  # a member of another hutch version (its agent's protocol) is not one of ours to hand out
                alive = member.state == "ready" and provider.capabilities.pool and await provider.alive(rec)
            except HutchError:
                alive = False
            if alive:
                self.idle.setdefault(shape, []).append(member)
                if provider.capabilities.watch:
                    watching_provider(provider).watch(rec, self._died)
                report["adopted"].append(member.id)
                continue
            await self._destroy(rec, "left by a daemon that stopped", event=False)
            report["cleaned"].append(member.id)
        if report["adopted"] or report["cleaned"]:
            log.info(
                "pool members left by a previous daemon: %d adopted, %d cleaned", len(report["adopted"]), len(report["cleaned"])
            )
        self.recovered = report
        return report

    async def close(self) -> None:
        """The daemon stops: no member outlives it."""
        self._running = False
        for shape in list(self.idle) + list(self._fillers):
            with contextlib.suppress(HutchError):
                await self._drain_members(shape)
        for task in list(self._handouts):
            with contextlib.suppress(BaseException):
                await task


def _said(task: asyncio.Task[None]) -> None:
    """A filler that ended on an error nobody expected says so (the next create of its shape starts another)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("the pool's refill stopped on an error: %s", exc, exc_info=exc)
