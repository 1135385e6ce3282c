"""Lifecycle use-cases: pause/resume, lifetimes (TTL, idle, keepalive, the reaper),
sub-agents and labels.

Deadlines live in the store (``expires_at``, ``last_active_at``), never only in memory:
the daemon's reaper task enforces them whether or not a CLI is running, and a daemon
started after a restart enforces what the previous one left.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import time
from typing import TYPE_CHECKING, Any

from hutch.checks import MAX_LABELS, check_count, check_labels
from hutch.credentials import HOLD_HINT
from hutch.errors import ConflictError, HutchError, InvalidError, PolicyError
from hutch.models import NetworkPolicy, SandboxRecord, SandboxSpec, SandboxState
from hutch.provider import Death, pause_provider, watching_provider
from hutch.units import format_size

if TYPE_CHECKING:
    from hutch.service import Service

log = logging.getLogger("hutch.service")
TOUCH_EVERY = 1.0  # activity is written to the store at most once a second per sandbox
RETRY_MAX = 300.0  # at most this long between tries of an expiry whose destroy failed


MODES = {"none": 0, "allowlist": 1, "open": 2}
NOTICE_GRACE = 15.0  # how long a failed call waits for the watcher to say how a sandbox died


def death_message(death: Death, memory: int) -> str:
    """What is known of a death, in words (the event carries the same facts as fields)."""
    sig = ""
    if death.signal:
        try:
            sig = f"signal {death.signal} ({signal.Signals(death.signal).name})"
        except ValueError:
            sig = f"signal {death.signal}"
    if death.oom_kills:
        kills = f"{death.oom_kills} kill{'s' if death.oom_kills > 1 else ''}"
        text = f"out of memory: the kernel's OOM killer ended it ({kills} in its cgroup, memory limit {format_size(memory)})"
        text += f", {sig}" if sig else ""
    elif sig:
        text = f"its processes were killed by {sig}"
    elif death.exit_code is not None:
        text = f"its init exited with code {death.exit_code}"
    else:
        text = "its init process ended (how is not known)"
    return text + (f"; {death.detail}" if death.detail else "")


def _host_covered(host: str, allowed: list[str]) -> bool:
    if host in allowed:
        return True
    bare = host.removeprefix("*.")
    return any(p.startswith("*.") and bare.endswith("." + p.removeprefix("*.")) for p in allowed)


def _ports(net: NetworkPolicy) -> set[int] | None:
    """The ports a policy lets through; None for any."""
    if net.ports:
        return set(net.ports)
    return {80, 443} if net.mode == "allowlist" else None if net.mode == "open" else set()


def network_wider(parent: NetworkPolicy, child: NetworkPolicy) -> str | None:
    """Why ``child`` would reach something ``parent`` cannot; None when it is not wider."""
    if child.mode == "none":
        return None
    if MODES[child.mode] > MODES[parent.mode]:
        return f"network mode {child.mode} is wider than the parent's {parent.mode}"
    if parent.mode == "allowlist":
        extra = [h for h in child.allow_hosts if not _host_covered(h, parent.allow_hosts)]
        if extra:
            return f"host {extra[0]} is not allowed for the parent"
    missing = set(parent.deny_hosts) - set(child.deny_hosts)
    if missing:
        return f"the parent denies {sorted(missing)[0]}"
    parent_ports, child_ports = _ports(parent), _ports(child)
    if parent_ports is not None and (child_ports is None or not child_ports <= parent_ports):
        return f"ports {sorted(child_ports or [])} or any are wider than the parent's {sorted(parent_ports)}"
    for text in child.cidrs:
        net = ipaddress.ip_network(text)
        if not any(
            net.version == p.version and net.subnet_of(p)  # type: ignore[arg-type]
            for p in map(ipaddress.ip_network, parent.cidrs)
        ):
            return f"address range {text} is not allowed for the parent"
    return None


def check_network(parent: SandboxRecord, child: NetworkPolicy) -> None:
    why = network_wider(parent.spec.network, child)
    if why:
        raise PolicyError(
            f"a sub-agent's network may not be wider than its parent's ({parent.id}): {why}",
            hint=f"see the parent's policy with: hutch policy {parent.id}",
        )


def check_not_wider(parent: SandboxRecord, child: SandboxSpec) -> SandboxSpec:
    """A sub-agent may not get more than its parent: the one place to extend when a new
    kind of policy lands.

    The network policy (none < allowlist < open; hosts, ports and address ranges within the
    parent's; the parent's denied hosts kept), the parent's approval requirements (the
    child's are added to them), a read-only view stays read-only below, and the child lives
    on the parent's provider.
    """
    if parent.spec.workspace == "ro" and child.workspace == "rw":
        raise PolicyError(
            f"sandbox {parent.id} sees its workspace read-only: its sub-agents cannot write it",
            hint="use --workspace ro",
        )
    if child.provider != parent.provider:
        raise InvalidError(f"a sub-agent lives on its parent's provider ({parent.provider})", hint="drop --provider")
    required = sorted(set(parent.spec.require_approval) | set(child.require_approval))
    net = child.network
    if "network" not in child.model_fields_set:  # not asked for: the parent's own
        net = parent.spec.network
    net = net.model_copy(update={"deny_hosts": sorted(set(net.deny_hosts) | set(parent.spec.network.deny_hosts))})
    check_network(parent, net)
    return child.model_copy(update={"require_approval": required, "network": net})


class Lifecycle:
    """The lifecycle use-cases of :class:`hutch.service.Service` (one instance per Service)."""

    def __init__(self, service: Service) -> None:
        self.svc = service
        self.store = service.store
        self._touched: dict[str, float] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._watched: dict[str, asyncio.Future[None]] = {}  # resolved once a death was recorded
        self._expired: dict[str, tuple[Any, ...]] = {}  # the deadline whose expiry was recorded, per sandbox
        self._waiting: dict[str, tuple[int, float]] = {}  # pending expiries: tries, next try (monotonic)

    # -- deaths ----------------------------------------------------------------------

    def watch(self, rec: SandboxRecord) -> None:
        """Have the provider say at once when the sandbox dies on its own (if it can)."""
        provider = self.svc.provider(rec.provider)
        if not provider.capabilities.watch:
            return
        self._watched[rec.id] = asyncio.get_running_loop().create_future()
        try:
            following = watching_provider(provider).watch(rec, self.gone)
        except Exception:  # the sandbox runs all the same: its death is then found by alive()
            log.exception("cannot watch sandbox %s", rec.id)
            following = False
        if not following:
            self.unwatch(rec.id)

    def unwatch(self, sandbox_id: str) -> None:
        notice = self._watched.pop(sandbox_id, None)
        if notice is not None and not notice.done():
            notice.cancel()

    async def gone(self, sandbox_id: str, death: Death) -> None:
        """A watched sandbox died on its own: ``lost``, with an event saying what is known,
        and its runs settled (from their status files) or ``lost``."""
        try:
            rec = self.store.sandboxes.get(sandbox_id)
            if rec.state not in (SandboxState.running, SandboxState.paused):
                return  # ended on purpose (destroyed), or already found dead
            message = death_message(death, rec.spec.limits.memory)
            why = f"the sandbox died: {message}"
            self.store.sandboxes.update(rec.id, state=SandboxState.lost, error=why)
            facts: dict[str, Any] = {"exit_code": death.exit_code, "signal": death.signal, "oom_kills": death.oom_kills}
            self.store.events.append("sandbox_lost", rec.id, reason=death.reason, message=message, **facts)
            log.warning("sandbox %s died: %s", rec.id, message)
            provider = self.svc.provider(rec.provider)
            for run in self.store.runs.all(rec.id, "running"):
                try:
                    status = await provider.run_status(rec, run["id"])
                except HutchError:
                    status = None
                if status is not None:
                    self.svc.runs.settle(rec, run, status)  # it ended just before its sandbox
                else:
                    self.svc.runs.lose(rec, run, why)
        finally:
            notice = self._watched.pop(sandbox_id, None)
            if notice is not None and not notice.done():
                notice.set_result(None)

    async def watched(self, sandbox_id: str) -> bool:
        """For a sandbox found unreachable: True when its watcher is in charge of its death.

        Waits (a little) for the watcher's report; without one, the sandbox's init still
        lives and the sandbox only failed to answer (a busy machine): it is not lost."""
        notice = self._watched.get(sandbox_id)
        if notice is None:
            return False
        await asyncio.wait({notice}, timeout=NOTICE_GRACE)
        if not notice.done():
            log.warning("sandbox %s does not answer, but it lives: left running", sandbox_id)
        return True

    # -- activity --------------------------------------------------------------------

    def touch(self, rec: SandboxRecord, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if now - self._touched.get(rec.id, 0.0) < TOUCH_EVERY:
            return
        self._touched[rec.id] = now
        try:
            self.store.sandboxes.touch(rec.id, now)
        except HutchError as exc:  # a full disk must not fail the call that was active
            log.warning("could not record activity of %s: %s", rec.id, exc.message)

    # -- pause / resume --------------------------------------------------------------

    async def pause(self, ref: str, reason: str = "requested") -> dict[str, Any]:
        rec = self.svc.get(ref)
        if rec.state == SandboxState.paused:
            return self._state(rec, "already paused", changed=False)
        if rec.state != SandboxState.running:
            raise ConflictError(f"sandbox {rec.id} is {rec.state.value}: only a running sandbox can be paused")
        provider = pause_provider(self.svc.provider(rec.provider))
        method = await self.svc._guarded(rec, provider.pause(rec))
        rec = self.store.sandboxes.update(rec.id, state=SandboxState.paused, data=rec.data | {"paused_by": method})
        self.store.events.append("sandbox_paused", rec.id, method=method, reason=reason)
        return self._state(rec, f"paused ({method})", changed=True)

    async def resume(self, ref: str) -> dict[str, Any]:
        rec = self.svc.get(ref)
        if rec.state == SandboxState.running:
            return self._state(rec, "already running", changed=False)
        if rec.state != SandboxState.paused:
            raise ConflictError(f"sandbox {rec.id} is {rec.state.value}: only a paused sandbox can be resumed")
        await pause_provider(self.svc.provider(rec.provider)).resume(rec)
        now = time.time()
        data = {k: v for k, v in rec.data.items() if k != "paused_by"}
        rec = self.store.sandboxes.update(rec.id, state=SandboxState.running, data=data, last_active_at=now)
        self._touched[rec.id] = now
        self.store.events.append("sandbox_resumed", rec.id)
        return self._state(rec, "resumed", changed=True)

    @staticmethod
    def _state(rec: SandboxRecord, message: str, changed: bool) -> dict[str, Any]:
        return {"sandbox": rec.id, "name": rec.name, "state": rec.state.value, "changed": changed, "message": message}

    # -- lifetimes -------------------------------------------------------------------

    def keepalive(self, ref: str, ttl: float | None = None) -> dict[str, Any]:
        """Reset the idle timer; with ``ttl``, set a new absolute deadline ``ttl`` from now."""
        rec = self.svc.get(ref)
        if rec.state not in (SandboxState.running, SandboxState.paused):
            raise ConflictError(f"sandbox {rec.id} is {rec.state.value}", hint="create a new one with hutch create")
        now = time.time()
        if ttl is not None:
            spec = SandboxSpec.model_validate(rec.spec.model_dump() | {"ttl": ttl})
            rec = self.store.sandboxes.update(rec.id, spec=spec, expires_at=now + (spec.ttl or 0), last_active_at=now)
        else:
            rec = self.store.sandboxes.update(rec.id, last_active_at=now)
        self._touched[rec.id] = now
        self.store.events.append("sandbox_keepalive", rec.id, expires_at=rec.expires_at)
        return self.deadlines(rec)

    @staticmethod
    def deadlines(rec: SandboxRecord) -> dict[str, Any]:
        idle_at = None
        if rec.spec.idle_timeout is not None and rec.state == SandboxState.running:
            idle_at = (rec.last_active_at or rec.created_at) + rec.spec.idle_timeout
        return {
            "sandbox": rec.id,
            "name": rec.name,
            "state": rec.state.value,
            "expires_at": rec.expires_at,
            "idle_expires_at": idle_at,
            "on_expire": rec.spec.on_expire,
        }

    async def expire(self, rec: SandboxRecord, reason: str) -> bool:
        """The deadline passed: record why, then destroy or pause as the sandbox asked.

        A destroy that cannot happen yet (no credential for the sandbox's account in the
        daemon's memory after a restart, or a failed delete) keeps the deadline: an event says
        the expiry is pending, and the reaper tries again (at once when a credential is back,
        else after a growing pause). Returns whether the sandbox was expired."""
        action = rec.spec.on_expire
        if action == "pause" and not self.svc.provider(rec.provider).capabilities.pause:
            action = "destroy"
        scope = self.svc.keyring.scope_of(rec)
        if action == "destroy" and scope is not None and not await self.svc.keyring.available(scope):
            self._postpone(rec, reason, "no credential for its account in the daemon's memory", credential=True)
            return False
        deadline = (reason, rec.expires_at, rec.last_active_at)
        if self._expired.get(rec.id) != deadline:  # once per deadline, also when a failed destroy is retried
            self._expired[rec.id] = deadline
            self.store.events.append("sandbox_expired", rec.id, reason=reason, action=action)
            log.info("sandbox %s expired (%s): %s", rec.id, reason, action)
        if action == "pause":
            self.store.sandboxes.update(rec.id, expires_at=None)  # spent: a paused sandbox is not expired again
            if rec.state == SandboxState.running:
                await self.pause(rec.id, reason=f"expired ({reason})")
            return True
        try:
            await self.svc.destroy(rec.id, cause=f"expired ({reason})", checked=True)
        except HutchError as exc:
            self._postpone(rec, reason, exc.message)
            raise
        return True

    def _postpone(self, rec: SandboxRecord, reason: str, why: str, credential: bool = False) -> None:
        """An expiry that cannot happen now: said once (event and log), retried later."""
        tries = self._waiting.get(rec.id, (0, 0.0))[0] + 1
        retry = 0.0 if credential else time.monotonic() + min(RETRY_MAX, 2.0**tries)
        self._waiting[rec.id] = (tries, retry)
        if tries == 1:
            hint = HOLD_HINT if credential else "the reaper retries; hutch destroy or hutch cleanup settle it by hand"
            self.store.events.append("sandbox_expiry_pending", rec.id, reason=reason, why=why, hint=hint)
            log.warning("sandbox %s is past its deadline (%s) but cannot be expired yet: %s", rec.id, reason, why)

    async def reap_once(self, now: float | None = None) -> list[tuple[str, str]]:
        """Expire every sandbox whose deadline has passed; returns (id, reason) pairs."""
        now = time.time() if now is None else now
        fired: list[tuple[str, str]] = []
        recs = self.store.sandboxes.with_deadlines()
        live = self.store.sandboxes.live_ids()
        self._expired = {k: v for k, v in self._expired.items() if k in live}  # forget the sandboxes that are gone
        self._waiting = {k: v for k, v in self._waiting.items() if k in live}
        for rec in recs:
            reason = None
            if rec.expires_at is not None and rec.expires_at <= now:
                reason = "ttl"
            elif rec.spec.idle_timeout is not None and rec.state == SandboxState.running:
                if self.store.runs.all(rec.id, "running"):
                    self.touch(rec, now)  # a running (background) run is activity
                    continue
                if (rec.last_active_at or rec.created_at) + rec.spec.idle_timeout <= now:
                    reason = "idle"
            if reason is None or self._waiting.get(rec.id, (0, 0.0))[1] > time.monotonic():
                continue
            try:
                if await self.expire(rec, reason):
                    fired.append((rec.id, reason))
            except HutchError as exc:
                log.warning("could not expire %s: %s", rec.id, exc.message)
        self.svc.approvals.expire_due(now)
        return fired

    def start_reaper(self) -> None:
        interval = self.svc.settings.reaper_interval
        if interval <= 0 or self._reaper is not None:
            return

        async def loop() -> None:
            while True:
                try:
                    await self.reap_once()
                except asyncio.CancelledError:
                    raise
                except Exception:  # keep enforcing: one bad pass must not end the reaper
                    log.exception("reaper pass failed")
                await asyncio.sleep(interval)

        self._reaper = asyncio.get_running_loop().create_task(loop())

    async def stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None

    # -- sub-agents ------------------------------------------------------------------

    def depth(self, rec: SandboxRecord) -> int:
        depth = 0
        while rec.spec.parent:
            depth += 1
            rec = self.store.sandboxes.get(rec.spec.parent)
        return depth

    def check_parent(self, spec: SandboxSpec) -> tuple[SandboxSpec, SandboxRecord | None]:
        """For a sub-agent's spec: the live parent, the depth limit and the not-wider rule."""
        if spec.parent is None:
            if spec.workspace is not None:
                raise InvalidError("a workspace mode is only for sub-agents", hint="use hutch subagent PARENT --workspace ro")
            return spec, None
        parent = self.svc.live(spec.parent, touch=False)
        if not self.svc.provider(parent.provider).capabilities.shared_workspace:
            raise InvalidError(
                f"the {parent.provider} provider cannot share a workspace with a sub-agent",
                hint="create the parent with --provider local, or give the worker its own sandbox (hutch create)",
            )
        limit = self.svc.settings.subagent_depth
        depth = self.depth(parent) + 1
        if depth > limit:
            raise PolicyError(
                f"a sub-agent of {parent.id} would be {depth} levels deep; the limit is {limit}",
                hint="create it from a shallower sandbox, or raise the subagent_depth setting (HUTCH_SUBAGENT_DEPTH)",
            )
        mode = spec.workspace or ("ro" if parent.spec.workspace == "ro" else "rw")
        runtime = spec.runtime or parent.spec.runtime  # its parent's: the workspace's owners are the runtime's
        if (runtime or "bwrap") != (parent.spec.runtime or "bwrap"):
            raise InvalidError(
                f"a sub-agent runs in its parent's runtime ({parent.spec.runtime or 'bwrap'}), not {runtime}",
                hint="drop --runtime, or give the worker its own sandbox (hutch create --runtime ...)",
            )
        spec = spec.model_copy(update={"parent": parent.id, "workspace": mode, "runtime": runtime})
        return check_not_wider(parent, spec), parent

    def check_policy_change(self, rec: SandboxRecord, after: NetworkPolicy) -> None:
        """A sub-agent stays within its parent; a parent may not drop below a live child."""
        if rec.spec.parent:
            check_network(self.store.sandboxes.get(rec.spec.parent), after)
        for child in self.store.sandboxes.all((SandboxState.running, SandboxState.paused), parent=rec.id):
            why = network_wider(after, child.spec.network)
            if why:
                raise PolicyError(
                    f"sub-agent {child.id} would then be wider than {rec.id}: {why}",
                    hint=f"narrow the sub-agent first (hutch policy {child.id}), or destroy it",
                )

    async def subagent(self, parent_ref: str, spec: SandboxSpec) -> SandboxRecord:
        parent = self.svc.get(parent_ref)
        return await self.svc.create(spec.model_copy(update={"parent": parent.id}))

    # -- labels ----------------------------------------------------------------------

    def label(self, ref: str, set_: dict[str, str], remove: list[str]) -> SandboxRecord:
        rec = self.svc.get(ref)
        check_labels(set_)
        check_count(remove, MAX_LABELS, "labels to remove")
        clash = set(set_) & set(remove)
        if clash:
            raise InvalidError(f"label {sorted(clash)[0]!r} is both set and removed", hint="give it once")
        labels = {k: v for k, v in rec.spec.labels.items() if k not in remove} | set_
        check_count(labels, MAX_LABELS, "labels on one sandbox")
        rec = self.store.sandboxes.update(rec.id, spec=rec.spec.model_copy(update={"labels": labels}))
        self.store.events.append("labels_changed", rec.id, set=set_, removed=remove)
        return rec
