"""Claims: the durable local record that we own a remote resource, written before it exists.

The workflow for providers whose resources outlive us (``capabilities.claims``: the
provider is a :class:`~hutch.provider.ClaimsProvider`, whose single calls this drives),
after Crabbox:

- create: read the account scope (validates the token), record the *intent* (generated
  unique name, request hash, endpoint, account), then send one create. An ambiguous answer
  (lost, 5xx, timeout) is settled by searching the full inventory for the exact name:
  exactly one match is adopted, zero or several leave the claim for recovery. A create is
  never sent twice for a claim. A definite rejection drops the intent once the name is
  proven absent.
- destroy: ``delete_attempt`` is recorded, the UUID is deleted (one-item batch, explicit
  per-item success), ``delete_accepted`` is recorded, and the claim is dropped only after
  absence is proven: lookup 404, a full listing without the UUID or name, lookup 404 again.
  A retried destroy resumes where the last one stopped.
- every step holds the claim's cross-process lock, and every update checks its revision.

The Service's ``on_step`` hook is called with the name of each of :data:`STEPS` as it is
reached (``create_sent`` by the provider, once a create's answer begins to arrive). It does
nothing in production; the crash tests install one that kills the process there
(``hutch.testing.crash``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from hutch.errors import (
    CapacityError,
    ConflictError,
    HutchError,
    InvalidError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
)
from hutch.models import SandboxRecord, SandboxState, new_id
from hutch.provider import AccountScope, ClaimsProvider, Instance, StepHook, claims_provider

if TYPE_CHECKING:
    from hutch.service import Service

__all__ = ["STEPS", "Claims", "StepHook", "no_step", "request_hash"]

STEPS = ("after_intent", "create_sent", "create_answered", "delete_attempt", "delete_accepted", "mid_proof")
LIVE = (SandboxState.creating, SandboxState.running, SandboxState.paused)
log = logging.getLogger("hutch.service")
LOCK_WAIT = 60.0
PROOF_DEADLINE = 60.0


def no_step(step: str) -> None:
    """The ``on_step`` hook of production: nothing happens at a step."""


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class Claims:
    def __init__(self, service: Service) -> None:
        self.svc = service
        self.store = service.store
        self.lock_dir = service.settings.home / "claims"

    @contextlib.asynccontextmanager
    async def lock(self, claim_id: str) -> AsyncIterator[None]:
        """The claim's lock, across processes (flock on a file per claim)."""
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.lock_dir / f"{claim_id}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            deadline = time.monotonic() + LOCK_WAIT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ConflictError(f"claim {claim_id} is busy in another process", hint="retry later") from None
                    await asyncio.sleep(0.05)
            yield
        finally:
            os.close(fd)

    async def _scope(self, provider: ClaimsProvider, endpoint: str) -> AccountScope:
        """The account of the credential new work uses (the caller's, else the daemon's own)."""
        return await self.svc.keyring.scope(provider.name, endpoint)

    # -- create ------------------------------------------------------------------------

    async def create(self, rec: SandboxRecord, provider: ClaimsProvider) -> tuple[dict[str, Any], dict[str, str]]:
        name = rec.provider
        endpoint = provider.endpoint(provider.location(rec.spec), self.svc.keyring.caller(name))
        scope = await self._scope(provider, endpoint)
        used, hard = scope["used"], scope["hard"]
        if used is not None and hard is not None and used >= hard:
            raise CapacityError(
                f"the account's instance quota is used up ({used} of {hard})",
                hint=f"destroy sandboxes (hutch cleanup --provider {name}) or raise the quota",
            )
        instance = "hutch-" + rec.id.removeprefix("sbx_").replace("_", "-").lower()
        plan = provider.plan(rec, instance)
        body = plan.body
        claim = self.store.claims.insert(
            {
                "id": new_id("clm"),
                "provider": name,
                "sandbox_id": rec.id,
                "name": instance,
                "endpoint": endpoint,
                "account": scope["account"],
                "request_hash": request_hash(body),
                "state": "intent",
            }
        )
        self.store.events.append("claim_intent", rec.id, claim=claim["id"], name=instance)
        self.svc.on_step("after_intent")
        async with self.lock(claim["id"]):
            inst = await self._send_create(claim, provider, body)
            self.svc.on_step("create_answered")
            claim = self.store.claims.update(claim["id"], claim["revision"], state="ready", resource_id=inst["uuid"])
        self.store.events.append("claim_ready", rec.id, claim=claim["id"], resource=inst["uuid"])
        account = scope["account"]
        data = {"endpoint": endpoint, "uuid": inst["uuid"], "instance": instance, "account": account, "claim": claim["id"]}
        try:
            data |= await provider.ready(endpoint, inst, rec, account=account)
        except HutchError as exc:
            result = await self.destroy_claim(claim["id"], provider)
            raise UnavailableError(
                f"{exc.message}; the instance was deleted ({result['message']})", hint=exc.hint or "check the image"
            ) from exc
        return data, plan.enforcement

    async def _send_create(self, claim: dict[str, Any], provider: ClaimsProvider, body: dict[str, Any]) -> Instance:
        try:
            return dict(await provider.create_instance(claim["endpoint"], body, account=claim["account"]))
        except (InvalidError, CapacityError, UnauthorizedError, NotFoundError, ConflictError):
            # a definite rejection: the intent goes only once the name is proven absent
            matches = await self._matches(claim, provider)
            if not matches:
                self.store.claims.delete(claim["id"], claim["revision"])
                raise
            if len(matches) == 1:
                return matches[0]
            self.store.claims.update(claim["id"], claim["revision"], error=f"rejected, yet {len(matches)} instances named so")
            raise
        except HutchError as exc:
            found = await self._safe_matches(claim, provider)
            if found is not None and len(found) == 1:
                return found[0]  # the create happened: adopt it
            why = "no instance by that name yet" if found == [] else f"{len(found or [])} matches"
            if found is None:
                why = "the inventory could not be read"
            self.store.claims.update(claim["id"], claim["revision"], error=f"ambiguous create ({exc.message}); {why}")
            raise UnavailableError(
                f"the create of {claim['name']} got no clear answer ({exc.message}); {why}. The claim is kept",
                hint=f"hutch cleanup --provider {claim['provider']} settles it (adopts and deletes, or proves it absent)",
            ) from exc

    async def _matches(self, claim: dict[str, Any], provider: ClaimsProvider) -> list[Instance]:
        listing = await provider.inventory(claim["endpoint"], account=claim["account"])
        return [i for i in listing if i.get("name") == claim["name"]]

    async def _safe_matches(self, claim: dict[str, Any], provider: ClaimsProvider) -> list[Instance] | None:
        try:
            return await self._matches(claim, provider)
        except HutchError:
            return None

    # -- destroy -----------------------------------------------------------------------

    async def destroy_claim(self, claim_id: str, provider: ClaimsProvider) -> dict[str, Any]:
        """Drive a claim to its end (resuming whatever step it is in); idempotent."""
        try:
            claim = self.store.claims.get(claim_id)
        except NotFoundError:
            return {"claim": claim_id, "existed": False, "message": "no claim (already gone)"}
        # the account's credential (the caller's, or the one the daemon holds), or a clear refusal
        await self.svc.keyring.token(claim["provider"], claim["endpoint"], claim["account"])
        async with self.lock(claim["id"]):
            try:
                claim = self.store.claims.get(claim["id"])  # what another process may have done meanwhile
            except NotFoundError:
                return {"claim": claim_id, "existed": False, "message": "no claim (already gone)"}
            existed = True
            if claim["state"] == "intent":
                matches = await self._matches(claim, provider)
                if len(matches) > 1:
                    raise ConflictError(
                        f"{len(matches)} instances are named {claim['name']}; the claim is kept",
                        hint=f"inspect them with hutch list --provider {claim['provider']} --all",
                    )
                if not matches:
                    if await self._matches(claim, provider):  # a second look before the intent goes
                        raise ConflictError(f"instance {claim['name']} appeared while checking", hint="retry")
                    self.store.claims.delete(claim["id"], claim["revision"])
                    self.store.events.append("claim_dropped", claim["sandbox_id"], claim=claim["id"], why="never created")
                    return {"claim": claim["id"], "existed": False, "message": "the create never happened; intent dropped"}
                claim = self.store.claims.update(claim["id"], claim["revision"], state="ready", resource_id=matches[0]["uuid"])
            if claim["state"] in ("ready", "delete_attempt"):
                if claim["state"] == "ready":
                    claim = self.store.claims.update(claim["id"], claim["revision"], state="delete_attempt")
                    self.svc.on_step("delete_attempt")
                outcome = await provider.delete_instance(claim["endpoint"], claim["resource_id"], account=claim["account"])
                existed = outcome == "accepted"
                claim = self.store.claims.update(claim["id"], claim["revision"], state="delete_accepted")
                self.store.events.append("claim_delete_accepted", claim["sandbox_id"], claim=claim["id"], outcome=outcome)
                self.svc.on_step("delete_accepted")
            await self._prove_absent(claim, provider)
            self.store.claims.delete(claim["id"], claim["revision"])
        self.store.events.append("claim_dropped", claim["sandbox_id"], claim=claim["id"], why="absence proven")
        return {"claim": claim["id"], "existed": existed, "message": "deleted, absence proven" if existed else "already gone"}

    async def _prove_absent(self, claim: dict[str, Any], provider: ClaimsProvider) -> None:
        uuid, name, account = claim["resource_id"], claim["name"], claim["account"]
        deadline = time.monotonic() + PROOF_DEADLINE
        while await provider.lookup(claim["endpoint"], uuid, account=account) is not None:
            if time.monotonic() > deadline:
                raise UnavailableError(f"instance {uuid} is still there after its delete was accepted", hint="retry later")
            await asyncio.sleep(0.5)
        self.svc.on_step("mid_proof")
        listing = await provider.inventory(claim["endpoint"], account=account)
        if any(i.get("uuid") == uuid or i.get("name") == name for i in listing):
            raise UnavailableError(f"instance {uuid} is still listed after its delete", hint="retry hutch destroy / cleanup")
        if await provider.lookup(claim["endpoint"], uuid, account=account) is not None:
            raise UnavailableError(f"instance {uuid} reappeared during the absence proof", hint="retry")

    # -- inventory and cleanup ---------------------------------------------------------

    async def inventory(self, provider: ClaimsProvider, endpoint: str, include_all: bool) -> dict[str, Any]:
        scope = await self._scope(provider, endpoint)
        listing = await provider.inventory(endpoint, account=scope["account"])
        by_uuid = {i.get("uuid"): i for i in listing}
        by_name = {i.get("name"): i for i in listing}
        claims = [c for c in self.store.claims.all(provider.name, endpoint) if c["account"] == scope["account"]]
        items = []
        seen: set[str] = set()
        for c in claims:
            inst = by_uuid.get(c["resource_id"]) or by_name.get(c["name"])
            if inst:
                seen.add(str(inst.get("uuid")))
            items.append(
                {
                    "claimed": True,
                    "claim": c["id"],
                    "claim_state": c["state"],
                    "sandbox": c["sandbox_id"],
                    "name": c["name"],
                    "uuid": c["resource_id"] or (inst or {}).get("uuid"),
                    "instance_state": (inst or {}).get("state", "missing"),
                    "missing": inst is None,
                    "error": c["error"],
                }
            )
        if include_all:
            for inst in listing:
                if str(inst.get("uuid")) not in seen:
                    items.append(
                        {
                            "claimed": False,
                            "name": inst.get("name"),
                            "uuid": inst.get("uuid"),
                            "instance_state": inst.get("state"),
                            "missing": False,
                        }
                    )
        return {"endpoint": endpoint, "account": scope["account"], "items": items}

    async def cleanup(
        self, provider: ClaimsProvider, endpoint: str, *, dry_run: bool, keep: list[str], forget_missing: bool
    ) -> dict[str, Any]:
        view = await self.inventory(provider, endpoint, include_all=False)
        actions = []
        for item in view["items"]:
            try:
                claim = self.store.claims.get(item["claim"])
            except NotFoundError:
                continue  # settled meanwhile (the daemon settles an account's claims once it holds its credential)
            rec = self._sandbox(claim["sandbox_id"])
            kept = bool(keep) and any(k in (claim["id"], claim["name"], claim["sandbox_id"], rec and rec.name) for k in keep)
            started = claim["state"] in ("delete_attempt", "delete_accepted")
            live = rec is not None and rec.state == SandboxState.running
            deadline = claim["expires_at"] or (rec.expires_at if rec is not None else None)  # hutch create --ttl
            expired = deadline is not None and deadline < time.time()
            creating = rec is not None and rec.state == SandboxState.creating
            if item["missing"] and claim["state"] == "ready":
                action = "forget" if forget_missing else "report-missing"
            elif creating and not started:
                action = "skip-creating"  # its create is in progress in the daemon right now
            elif started or claim["state"] == "intent":
                action = "destroy"  # resumed whatever keep says: deletion (or the create) already started
            elif kept:
                action = "keep"
            elif live and not expired:
                action = "skip-live"
            else:
                action = "destroy"
            entry = {"claim": claim["id"], "name": claim["name"], "sandbox": claim["sandbox_id"], "state": claim["state"]}
            entry["action"] = action
            if not dry_run and action in ("destroy", "forget"):
                try:
                    if action == "destroy":
                        entry["result"] = (await self.destroy_claim(claim["id"], provider))["message"]
                    else:
                        async with self.lock(claim["id"]):
                            self.store.claims.delete(claim["id"], self.store.claims.get(claim["id"])["revision"])
                        entry["result"] = "claim dropped (the instance was already deleted by the provider)"
                    self._settle(rec, SandboxState.destroyed if action == "destroy" else SandboxState.lost)
                except HutchError as exc:
                    entry["error"] = exc.to_dict()["error"]
            actions.append(entry)
        ok = all("error" not in a for a in actions)
        return {"endpoint": endpoint, "account": view["account"], "dry_run": dry_run, "ok": ok, "actions": actions}

    async def cleanup_all(
        self, provider: str | None, where: str | None, dry_run: bool, keep: list[str], forget_missing: bool
    ) -> dict[str, Any]:
        """hutch cleanup: every claimed provider's (or ``provider``'s) leftovers, settled."""
        svc = self.svc
        names = [provider] if provider else sorted({c["provider"] for c in svc.store.claims.all()})
        reports = []
        for name in names:
            prov = claims_provider(svc.provider(name))
            endpoint = prov.endpoint(where, svc.keyring.caller(name))
            report = await self.cleanup(prov, endpoint, dry_run=dry_run, keep=keep, forget_missing=forget_missing)
            reports.append({"provider": name} | report)
        return {"ok": all(r["ok"] for r in reports), "dry_run": dry_run, "providers": reports}

    async def reconcile(self, provider: ClaimsProvider, endpoint: str, account: str) -> list[dict[str, Any]]:
        """Once the daemon holds the account's credential again: settle the claims no live
        sandbox owns (deletes that were started, creates or destroys a restart interrupted).
        Live sandboxes are left to their owner and the reaper; nothing unclaimed is touched."""
        done = []
        for claim in self.store.claims.all(provider.name, endpoint):
            rec = self._sandbox(claim["sandbox_id"])
            if claim["account"] != account or claim["keep"] or (rec is not None and rec.state in LIVE):
                continue
            try:
                result = await self.destroy_claim(claim["id"], provider)
            except HutchError as exc:
                log.warning("could not settle claim %s: %s", claim["id"], exc.message)
                continue
            self._settle(rec, SandboxState.destroyed)
            done.append({"claim": claim["id"], "sandbox": claim["sandbox_id"], "result": result["message"]})
        return done

    def _sandbox(self, sandbox_id: str | None) -> SandboxRecord | None:
        if not sandbox_id:
            return None
        try:
            return self.store.sandboxes.get(sandbox_id)
        except NotFoundError:
            return None

    def _settle(self, rec: SandboxRecord | None, state: SandboxState) -> None:
        if rec is not None and rec.state not in (SandboxState.destroyed, SandboxState.failed):
            self.store.runs.mark_lost(rec.id)
            self.store.sandboxes.update(
                rec.id, state=state, error=None if state == SandboxState.destroyed else "deleted outside hutch"
            )
            self.store.events.append("sandbox_destroyed" if state == SandboxState.destroyed else "sandbox_lost", rec.id)
