"""The use-cases. The only place with workflow: ids, states, runs, events, timeouts.

Edges (HTTP server, in-process embedding) call these methods; providers do the I/O.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
import os
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from hutch import fdlimit
from hutch._version import __version__
from hutch.actors import acting
from hutch.config import Settings, unusable_home
from hutch.errors import (
    ConflictError,
    HutchError,
    IncompatibleError,
    InvalidError,
    NotFoundError,
    TimeoutError_,
    UnavailableError,
)
from hutch.models import (
    LIVE_STATES,
    ExecRequest,
    ExecResult,
    FileEntry,
    NetworkPolicy,
    SandboxRecord,
    SandboxSpec,
    SandboxState,
    new_id,
)
from hutch.policy import apply_change
from hutch.provider import (
    CheckResult,
    Provider,
    claims_provider,
    event_source,
    load_provider,
    network_provider,
)
from hutch.service.access import Access
from hutch.service.approvals import Approvals
from hutch.service.certs import Certificates
from hutch.service.changes import Changes
from hutch.service.claims import Claims, StepHook, no_step
from hutch.service.cluster import Cluster
from hutch.service.e2bprocs import E2bProcesses
from hutch.service.events import Events
from hutch.service.files import MAX_FILE, Files
from hutch.service.hints import check_create, no_egress
from hutch.service.images import Images
from hutch.service.keyring import Keyring, Scope, credential_checks
from hutch.service.keys import Keys
from hutch.service.lifecycle import Lifecycle
from hutch.service.metrics import Metrics
from hutch.service.oneshot import OneShot
from hutch.service.pool import Pool
from hutch.service.ports import Ports
from hutch.service.provision import Provision
from hutch.service.restart import Restart
from hutch.service.runs import Runs
from hutch.service.sessions import Sessions
from hutch.service.templates import Templates
from hutch.service.workspaces import Workspaces
from hutch.store import Store
from hutch.store.sandboxes import Within

T = TypeVar("T")
log = logging.getLogger("hutch.service")


class Service:
    def __init__(self, settings: Settings, store: Store | None = None, *, on_step: StepHook = no_step) -> None:
        """``on_step`` is called at each step of a claim's lifecycle (service/claims.py):
        a seam for tests; production leaves it doing nothing."""
        self.settings = settings
        self.on_step = on_step
        try:
            settings.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unusable_home(settings.home, exc) from exc
        self.store = store or Store(settings.db_path)
        self._providers: dict[str, Provider] = {}
        self._create_lock = asyncio.Lock()
        self.runs = Runs(self)
        self.workspaces = Workspaces(self)
        self.lifecycle = Lifecycle(self)
        self.approvals = Approvals(self)
        self.claims = Claims(self)
        self.events = Events(self)  # the audit stream, read back
        self.oneshot = OneShot(self)  # hutch run: make, push, run, pull, destroy
        self.keyring = Keyring(self)  # provider credentials: in memory only
        self.restart = Restart(self)  # what a previous daemon left: adopted, lost or kept apart
        self.access = Access(self)  # what the request's actor may see and do: ownership, quotas, rates
        self.keys = Keys(self)  # API keys of the gateway
        self.metrics = Metrics(self)  # /metrics
        self.images = Images(self)  # the image store (pull, import, rm, prune) and the ImageSource of --image
        self.changes = Changes(self)  # what a sandbox changed (diff, ls --since)
        self.ports = Ports(self)  # exposed ports (hutch expose)
        self.certificates = Certificates(self)  # the gateway's client certificates
        self.templates = Templates(self)  # images made from sandboxes (commit)
        self.files = Files(self)  # a live sandbox's files: read, write, list
        self.provision = Provision(self)  # a new sandbox's clone, seeded files and setup commands
        self.sessions = Sessions(self)  # the dashboard's logins (in memory only), its sandboxes' resource use
        self.pool = Pool(self)  # started sandboxes handed out on create
        self.cluster = Cluster(self)  # a cluster gateway's nodes (hutch serve --cluster)
        self.e2b_processes = E2bProcesses(self)  # the E2B adapter's pids (kept across restarts)

    def loaded(self) -> builtins.list[str]:
        """The providers made so far (a provider is made at its first use, or at start for what it adopts)."""
        return builtins.list(self._providers)

    def provider(self, name: str) -> Provider:
        if name not in self._providers:
            provider = load_provider(name, self.settings)
            if provider.capabilities.events:
                event_source(provider).bind_events(self._provider_event)
            if provider.capabilities.claims:
                claims_provider(provider).bind_claims(functools.partial(self.keyring.token, name), self.on_step)
            if provider.capabilities.nodes:
                self.cluster.bind(provider)
            self._providers[name] = provider
        return self._providers[name]

    def _provider_event(self, type_: str, sandbox_id: str, run_id: str | None, data: dict[str, Any]) -> None:
        """Events a provider observes on its own (egress decisions): no actor, the sandbox's own doing."""
        with acting(None):
            self.store.events.append(type_, sandbox_id, run_id, **data)
        self.metrics.event(type_, data)

    @staticmethod
    def claimed(provider: Provider) -> bool:
        """Resources that outlive us go through claims (service/claims.py)."""
        return provider.capabilities.claims

    # -- start / adopt (service/restart.py) -------------------------------------------

    async def start(self) -> dict[str, list[str]]:
        """Re-adopt what a previous daemon left: live sandboxes stay, dead ones are marked lost;
        the image store's leftovers of an interrupted unpack are swept."""
        await self.images.sweep()
        await self.pool.recover()  # pool members: adopted again, or destroyed (pool.recovered says which)
        return await self.restart.start()

    async def rearm(self, scope: Scope) -> None:
        """The daemon holds ``scope``'s credential again (see :meth:`Restart.rearm`)."""
        await self.restart.rearm(scope)

    async def close(self) -> None:
        await self.oneshot.settle()  # hutch runs in progress destroy the sandboxes they made
        await self.keyring.close()
        await self.ports.close_all()
        await self.lifecycle.stop_reaper()
        await self.workspaces.settle()  # a fork cancelled by the stop removes its children first
        await self.pool.close()  # no pool member outlives the daemon
        for provider in self._providers.values():
            await provider.close()

    # -- sandboxes -------------------------------------------------------------------

    async def create(
        self, spec: SandboxSpec, root_seed: dict[str, Any] | None = None, *, provision: bool = True
    ) -> SandboxRecord:
        """A new sandbox; ``provision``: its clone, seeded files and setup commands too (not
        for a fork or a restore, whose workspace comes from elsewhere)."""
        provision = provision and Provision.needed(spec)
        if provision:
            self.provision.check(spec)
        with self.pool.foreground():
            rec = await self._create(spec, root_seed)
        return await self.provision.run(rec, spec) if provision else rec

    async def _create(self, spec: SandboxSpec, root_seed: dict[str, Any] | None) -> SandboxRecord:
        if (placed := self.settings.placed_by(spec.provider)) != spec.provider:  # a cluster gateway's nodes
            spec = spec.model_copy(update={"provider": placed})
        spec, parent = self.lifecycle.check_parent(spec)  # a sub-agent: its parent, depth, not wider
        spec = self.access.admit(spec)  # the key's default network and ceiling; host files for admins only
        provider = self.provider(spec.provider)
        check_create(provider, spec)  # what the provider cannot do is refused before anything is made
        pin = None
        if spec.image and provider.capabilities.image_store:
            pin = self.images.admit(spec.image)  # a key starts only from its own images: that one, by id
        if parent is None and root_seed is None and (pooled := await self.pool.take(spec, provider)) is not None:
            return pooled
        rec = self.new_record(new_id("sbx"), spec)
        if parent is not None:
            rec.data |= {"parent": parent.id, "parent_data": parent.data, "workspace_readonly": spec.workspace == "ro"}
        if root_seed is not None:
            rec.data["root_seed"] = root_seed
        if pin is not None:
            rec.data["image_pin"] = pin
        await self.record(rec)
        try:
            if self.claimed(provider):
                data, enforcement = await self.claims.create(rec, claims_provider(provider))
            else:
                data, enforcement = await provider.create(rec)
        except BaseException as exc:
            message = exc.message if isinstance(exc, HutchError) else f"{exc.__class__.__name__}: {exc}"
            if self.claimed(provider):
                claims_provider(provider).forget(rec)  # what the provider keeps here for it (hutch ssh's key)
            if self.store.sandboxes.get(rec.id).state == SandboxState.creating:  # not when a destroy came first
                self.store.sandboxes.update(rec.id, state=SandboxState.failed, error=message)
            raise
        if not self.claimed(provider) and self.store.sandboxes.get(rec.id).state != SandboxState.creating:
            # destroyed while it was being made (hutch destroy --all): what the provider made goes too
            await provider.destroy(rec.model_copy(update={"data": data}))
            raise ConflictError(f"sandbox {rec.id} was destroyed while it was being created", hint="create it again")
        return self.created(rec, data, enforcement)

    def new_record(self, sandbox_id: str, spec: SandboxSpec) -> SandboxRecord:
        now = time.time()
        expires = now + spec.ttl if spec.ttl else None
        return SandboxRecord(
            id=sandbox_id, name=spec.name, provider=spec.provider, state=SandboxState.creating, spec=spec, created_at=now,
            updated_at=now, expires_at=expires, last_active_at=now, owner=self.access.owner(),
        )  # fmt: skip

    async def record(self, rec: SandboxRecord, within: Within | None = None) -> None:
        """Record a new sandbox within quotas; ``within``: more writes in its transaction (a pool member leaving)."""
        async with self._create_lock:
            self.access.check_create(rec.spec)
            storage = self.workspaces.check_tenant(rec.spec)
            if storage is not None:  # where the provider keeps the tenant's workspace (each owner's own)
                rec.data["tenant_storage"] = storage
            self.store.sandboxes.insert(rec, within)

    def created(
        self, rec: SandboxRecord, data: dict[str, Any], enforcement: dict[str, str], pooled: bool = False
    ) -> SandboxRecord:
        """A new sandbox runs (made cold, or a pool member handed out)."""
        spec = rec.spec
        workdir = data.get("defaults", {}).get("workdir")  # an image's WORKDIR, unless the request gave one
        own = spec.model_copy(update={"workdir": workdir}) if workdir and "workdir" not in spec.model_fields_set else None
        rec = self.store.sandboxes.update(rec.id, state=SandboxState.running, data=data, enforcement=enforcement, spec=own)
        extra: dict[str, Any] = {"pool": True} if pooled else {}
        self.store.events.append(
            "sandbox_created", rec.id, None, provider=rec.provider, name=rec.name, parent=spec.parent, **extra
        )
        self.metrics.created(rec.provider, time.time() - rec.created_at)
        self.lifecycle.watch(rec)
        rec.credential = self.keyring.describe(rec)
        return rec

    def get(self, ref: str) -> SandboxRecord:
        """The record as shown: with its egress counts and its account's credential."""
        rec = self.access.sandbox(self.store.sandboxes.get(ref), ref)
        if rec.spec.network.mode != "none" or rec.spec.network.deny_hosts:
            counts = self.store.events.count(rec.id, ["egress_allowed", "egress_denied"])
            rec.egress = {"allowed": counts["egress_allowed"], "denied": counts["egress_denied"]}
        rec.credential = self.keyring.describe(rec)
        return rec

    # -- network policy ----------------------------------------------------------------

    async def _set_network(self, provider: Provider, rec: SandboxRecord) -> None:
        if not provider.capabilities.network:
            raise no_egress(provider, rec.spec.network)
        await network_provider(provider).set_network(rec)

    async def policy(
        self, ref: str, approval: str | None = None, replace: NetworkPolicy | None = None, **changes: Any
    ) -> SandboxRecord:
        """Change a live sandbox's network policy (``replace``: for this whole one); new connections see it at once."""
        rec = self.live(ref)
        before = rec.spec.network
        after = replace if replace is not None else apply_change(before, **changes)
        if after == before:
            return self.get(rec.id)
        self.lifecycle.check_policy_change(rec, after)
        self.access.ceiling(after)
        self.approvals.require(rec, "network.change", approval)
        provider = self.provider(rec.provider)
        if after.mode != "none" and not provider.capabilities.network:
            raise no_egress(provider, after)
        spec = rec.spec.model_copy(update={"network": after})
        await self._guarded(rec, self._set_network(provider, rec.model_copy(update={"spec": spec})))
        self.store.sandboxes.update(rec.id, spec=spec)
        self.store.events.append(
            "policy_changed", rec.id, before=before.model_dump(mode="json"), after=after.model_dump(mode="json")
        )
        return self.get(rec.id)

    def live(self, ref: str, touch: bool = True) -> SandboxRecord:
        """A running sandbox (a call on it counts as activity for --idle-timeout), to act on:
        without what only a display wants (``get``'s egress counts, a count over the sandbox's
        events, and its credential), so an exec costs the same after a million egress events."""
        rec = self.access.sandbox(self.store.sandboxes.get(ref), ref)
        incompatible = rec.data.get("incompatible")
        if incompatible is not None:  # made by another version of hutch (see start)
            raise IncompatibleError(str(incompatible["message"]), incompatible.get("hint"))
        if rec.state == SandboxState.paused:
            raise ConflictError(f"sandbox {ref!r} is paused", hint=f"resume it first: hutch resume {ref}")
        if rec.state != SandboxState.running:
            raise NotFoundError(
                f"sandbox {ref!r} is {rec.state.value}" + (f": {rec.error}" if rec.error else ""),
                hint="create a new one with hutch create, or list live ones with hutch list",
            )
        if touch:
            self.lifecycle.touch(rec)
        return rec

    def list(
        self, include_all: bool = False, labels: dict[str, str] | None = None, state: str | None = None
    ) -> builtins.list[SandboxRecord]:
        """Live (and lost) sandboxes, or all; only those in ``state`` and carrying every one of ``labels``."""
        if state is not None:
            try:
                states: tuple[SandboxState, ...] | None = (SandboxState(state),)
            except ValueError:
                raise InvalidError(
                    f"unknown state {state!r}", hint=f"use one of {', '.join(s.value for s in SandboxState)}"
                ) from None
        else:
            states = None if include_all else (*LIVE_STATES, SandboxState.lost)
        recs = self.store.sandboxes.all(states, owner=self.access.owner_filter())
        want = labels or {}
        recs = [r for r in recs if all(r.spec.labels.get(k) == v for k, v in want.items())]
        for rec in recs:
            rec.credential = self.keyring.describe(rec)
        return recs

    async def destroy(
        self, ref: str, approval: str | None = None, *, cause: str | None = None, checked: bool = False
    ) -> dict[str, Any]:
        """Destroy a sandbox and, first, its sub-agents. ``checked``: the caller is hutch itself
        (an expiry, a parent's destroy), not subject to the sandbox's approval policy."""
        try:
            rec = self.get(ref)
        except NotFoundError:
            return {"sandbox": ref, "destroyed": True, "existed": False, "message": "no such sandbox (nothing to do)"}
        claim = self.store.claims.of_sandbox(rec.id)
        if rec.state in (SandboxState.destroyed, SandboxState.failed) and claim is None:
            return {"sandbox": rec.id, "name": rec.name, "destroyed": True, "existed": False, "message": "already gone"}
        if not checked:
            self.approvals.require(rec, "destroy", approval)
        children = []
        for child in self.store.sandboxes.all(LIVE_STATES, parent=rec.id):
            await self.destroy(child.id, cause=f"parent {rec.id} destroyed", checked=True)
            children.append(child.id)
        previous = rec.state
        self.store.sandboxes.update(rec.id, state=SandboxState.destroying)
        self.lifecycle.unwatch(rec.id)
        provider = self.provider(rec.provider)
        existed, message = True, "destroyed"
        if self.claimed(provider):  # through its claim: delete by UUID, then prove it absent
            try:
                claimed = claims_provider(provider)
                outcome = await self.claims.destroy_claim(claim["id"], claimed) if claim else {"existed": False}
            except HutchError as exc:  # the claim keeps the truth; the sandbox stays as it was
                self.store.sandboxes.update(rec.id, state=previous, error=f"destroy failed: {exc.message}")
                raise
            existed = bool(outcome["existed"])
            message = "destroyed (absence proven)" if existed else "destroyed (the instance was already gone)"
        else:
            await provider.destroy(rec)
        # often before a run's own task learns it: the record says why all the same
        self.store.runs.mark_lost(rec.id, f"sandbox {rec.id} was destroyed during the run")
        self.store.sandboxes.update(rec.id, state=SandboxState.destroyed)
        if self.claimed(provider):
            claims_provider(provider).forget(rec)
        self.store.events.append("sandbox_destroyed", rec.id, cause=cause, children=children)
        self.metrics.destroyed(rec.provider)
        await self.ports.close_sandbox(rec.id)
        self.approvals.close_for(rec.id)
        out = {"sandbox": rec.id, "name": rec.name, "destroyed": True, "existed": existed, "message": message}
        return out | ({"children": children} if children else {})

    # -- inventory, cleanup, status (claims live in service/claims.py) ------------------

    async def inventory(self, provider: str, where: str | None = None, include_all: bool = False) -> dict[str, Any]:
        """Claim-first: claimed instances (pending intents and missing ones too); ``include_all``
        adds the account's unclaimed instances (read-only). ``where``: a location the user
        named (the provider reads it), else the caller's."""
        prov = claims_provider(self.provider(provider))
        endpoint = prov.endpoint(where, self.keyring.caller(provider))
        return await self.claims.inventory(prov, endpoint, include_all)

    async def cleanup(
        self,
        provider: str | None = None,
        where: str | None = None,
        dry_run: bool = False,
        keep: builtins.list[str] | None = None,
        forget_missing: bool = False,
    ) -> dict[str, Any]:
        return await self.claims.cleanup_all(provider, where, dry_run, keep or [], forget_missing)

    async def status(self, ref: str, wait: bool = False, timeout: float = 300.0) -> dict[str, Any]:
        """The sandbox's state (and, for claimed providers, its claim); with ``wait``, poll until
        it runs, failing early on a terminal state."""
        deadline = time.monotonic() + timeout
        while True:
            rec = self.get(ref)
            out: dict[str, Any] = {"sandbox": rec.id, "name": rec.name, "provider": rec.provider, "state": rec.state.value}
            claim = self.store.claims.of_sandbox(rec.id)
            if claim:
                out["claim"] = {k: claim[k] for k in ("id", "name", "state", "resource_id", "error")}
            if rec.state == SandboxState.running and self.claimed(self.provider(rec.provider)):
                alive = await self.provider(rec.provider).alive(rec)
                out["instance"] = "running" if alive else "gone"
            if not wait or rec.state == SandboxState.running:
                return out
            if rec.state in (SandboxState.failed, SandboxState.destroyed, SandboxState.lost):  # it will never run
                why = f"sandbox {ref} is {rec.state.value}" + (f": {rec.error}" if rec.error else "")
                if rec.state == SandboxState.destroyed:
                    raise NotFoundError(why, hint="create a new one with hutch create")
                raise ConflictError(why, hint="destroy it (hutch destroy) and create a new one")
            if time.monotonic() > deadline:
                raise TimeoutError_(f"sandbox {ref} is still {rec.state.value}", hint="retry with a longer --timeout")
            await asyncio.sleep(0.2)

    # -- exec (the run use-cases live in service/runs.py) ------------------------------

    async def exec(self, ref: str, req: ExecRequest) -> ExecResult:
        return await self.runs.exec(ref, req)

    async def _check_lost(self, rec: SandboxRecord, message: str, run_id: str | None = None) -> None:
        """After a failed call: a sandbox that is gone is marked lost, not left 'running'."""
        if self.store.sandboxes.get(rec.id).state != SandboxState.running:
            return  # being destroyed: that is why it went away
        if not await self.provider(rec.provider).alive(rec):
            if await self.lifecycle.watched(rec.id):
                return  # its watcher says whether and how it died
            self.store.sandboxes.update(rec.id, state=SandboxState.lost, error=f"the sandbox died: {message}")
            self.store.events.append("sandbox_lost", rec.id, run_id)

    def _gone(self, rec: SandboxRecord, exc: HutchError) -> HutchError:
        """What to report for a call that lost its sandbox: one destroyed under it is a
        ``conflict`` (the call raced a destroy), not ``unavailable``."""
        if self.store.sandboxes.get(rec.id).state in (SandboxState.destroying, SandboxState.destroyed):
            return ConflictError(
                f"sandbox {rec.id} was destroyed while the call was in progress",
                hint="create a new one with hutch create",
            )
        return exc

    async def _guarded(self, rec: SandboxRecord, call: Awaitable[T]) -> T:
        try:
            return await call
        except UnavailableError as exc:
            await self._check_lost(rec, exc.message)
            gone = self._gone(rec, exc)
            if gone is exc:
                raise
            raise gone from exc

    # -- files (service/files.py) -----------------------------------------------------

    async def read_file(self, ref: str, path: str, limit: int = MAX_FILE) -> tuple[bytes, bool]:
        return await self.files.read(ref, path, limit)

    async def read_file_range(self, ref: str, path: str, offset: int, limit: int) -> tuple[bytes, bool, int | None]:
        return await self.files.read_range(ref, path, offset, limit)

    async def write_file(self, ref: str, path: str, data: bytes, mode: int = 0o644) -> dict[str, Any]:
        return await self.files.write(ref, path, data, mode)

    async def list_files(self, ref: str, path: str | None = None) -> builtins.list[FileEntry]:
        return await self.files.list(ref, path)

    # -- health ----------------------------------------------------------------------

    async def doctor(self, provider: str | None = None, credentials: bool = False) -> dict[str, Any]:
        """The checks; with ``credentials`` (the daemon's own doctor), which credential each
        account that needs one has in memory."""
        checks: list[CheckResult] = []
        home = self.settings.home
        writable = os.access(home, os.W_OK)
        checks.append(CheckResult("state dir", writable, str(home), None if writable else f"chmod u+w {home} or set HUTCH_HOME"))
        stores_images = False
        try:
            chosen = self.provider(provider or self.settings.provider)
            stores_images = chosen.capabilities.image_store
            checks += await chosen.check()
        except HutchError as exc:
            checks.append(CheckResult("provider", False, exc.message, exc.hint))
        if stores_images:  # its sandboxes start from the image store's images
            checks.append(self.images.check())
        if credentials:  # the daemon's own doctor: its process
            checks.append(CheckResult("open files", True, fdlimit.report()))
            checks += credential_checks(self.keyring.report())
        checks += await self.pool.checks()
        return {"ok": all(c.ok for c in checks), "version": __version__, "checks": [c.to_dict() for c in checks]}
