"""Provider credentials in the daemon's memory, per provider, endpoint and account.

Which token an operation on an account's resources uses, in order: the one the current
request's caller brought (``hutch.credentials.CALLER``) when it is that account's; the one
this daemon holds for the account (brought by an earlier caller); the daemon's own (its
owner-only ``--credentials-file``, its environment or config file) when it is that
account's. A token's account is learned once per endpoint from the provider (a read-only
call) and remembered by fingerprint. Nothing here is written anywhere, and only
fingerprints are ever shown.

After a restart the memory is empty: accounts whose sandboxes or claims need a credential
are ``missing`` (``list``, ``get``, ``doctor``), their expiry waits (an event says so), and
as soon as any caller of the account brings its token again (any command), the daemon holds
it, the reaper expires what is due and the account's leftover claims are settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from hutch.credentials import BRING, CALLER, HOLD_HINT, MISSING, TOKEN_HINT, Credential, describe, gather
from hutch.errors import HutchError, UnauthorizedError
from hutch.models import SandboxRecord, SandboxState
from hutch.provider import AccountScope, CheckResult, ClaimsProvider, claims_provider

if TYPE_CHECKING:
    from hutch import wire
    from hutch.service import Service

log = logging.getLogger("hutch.service")
Scope = tuple[str, str, str]  # provider, endpoint, account
MAX_ACCOUNTS = 1024  # remembered token -> account answers
OFFER_EVERY = 30.0  # a caller's token is checked against the accounts waiting at most this often
RETRY_OWN = 30.0  # after a failed look-up of one of the daemon's own tokens
SETTLE_WAIT = 15.0
NEEDS = (SandboxState.creating, SandboxState.running, SandboxState.paused, SandboxState.destroying, SandboxState.lost)


@dataclass
class Held:
    cred: Credential = field(repr=False)
    origin: str  # caller | credentials file | daemon environment
    since: float

    def describe(self) -> dict[str, Any]:
        return {
            "state": "in_memory",
            "origin": self.origin,
            "source": self.cred.source,
            "fingerprint": self.cred.fingerprint,
            "since": self.since,
        }


class Keyring:
    def __init__(self, service: Service) -> None:
        self.svc = service
        self._held: dict[Scope, Held] = {}
        self._accounts: dict[tuple[str, str, str], str] = {}  # (provider, endpoint, fingerprint) -> account
        self._retry: dict[tuple[str, str, str], float] = {}  # the daemon's own tokens whose look-up failed
        self._offered: dict[tuple[str, str], float] = {}
        self._pending: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._file: list[Credential] = []
        self.background = False  # the daemon's: absorb callers' tokens, settle accounts once armed

    # -- the daemon's own credentials --------------------------------------------------

    def use_file(self, creds: list[Credential]) -> None:
        """The credentials of the daemon's owner-only ``--credentials-file`` (``hutch.credentials.load_file``)."""
        self._file = list(creds)

    def own(self, provider: str) -> list[tuple[Credential, str]]:
        """The daemon's own credentials for ``provider``: its credentials file, then its environment."""
        out = [(c, "credentials file") for c in self._file if c.provider == provider]
        env = gather(os.environ, self.svc.settings.home).get(provider)
        if env is not None and env.token:
            out.append((env, "daemon environment"))
        return out

    def start(self) -> None:
        """In the daemon: from now on callers' tokens are absorbed and armed accounts settled;
        the daemon's own credentials are tried at once for the accounts that need one."""
        self.background = True
        self._spawn(self._arm_own())

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._held.clear()

    # -- the caller --------------------------------------------------------------------

    @staticmethod
    def caller(provider: str) -> Credential | None:
        return CALLER.get().get(provider)

    def offer(self, creds: dict[str, Credential]) -> None:
        """A request brought these credentials: check them (in the background) against the
        accounts that wait for one. Cheap: each token at most once per OFFER_EVERY."""
        if not self.background:
            return
        now = time.monotonic()
        for name, cred in creds.items():
            if not cred.token:
                continue
            key = (name, cred.fingerprint)
            if now - self._offered.get(key, -OFFER_EVERY) < OFFER_EVERY:
                continue
            if len(self._offered) >= MAX_ACCOUNTS:
                self._offered.clear()
            self._offered[key] = now
            self._pending[key] = self._spawn(self._absorb(name, cred))

    async def settle(self) -> None:
        """Wait (bounded) until the current request's credentials have been checked."""
        waits = [t for (name, fp), t in self._pending.items() if (c := self.caller(name)) and c.fingerprint == fp]
        if waits:
            await asyncio.wait(waits, timeout=SETTLE_WAIT)

    async def _absorb(self, provider: str, cred: Credential) -> None:
        wanted = self.wanted()
        for endpoint in sorted({ep for (name, ep, _) in wanted if name == provider}):
            try:
                account = await self.account_of(provider, endpoint, cred)
            except HutchError as exc:
                log.info("a caller's %s token (%s) was not accepted at %s: %s", provider, cred.fingerprint, endpoint, exc.message)
                continue
            if (provider, endpoint, account) in wanted:
                self.hold((provider, endpoint, account), cred, "caller")

    # -- accounts ----------------------------------------------------------------------

    async def account_of(self, provider: str, endpoint: str, cred: Credential) -> str:
        """The account ``cred`` belongs to at ``endpoint`` (asked once, then remembered)."""
        key = (provider, endpoint, cred.fingerprint)
        if key not in self._accounts:
            scope = await self._claims(provider).account(endpoint, cred.token)
            self._remember(key, scope["account"])
        return self._accounts[key]

    def _remember(self, key: tuple[str, str, str], account: str) -> None:
        if key not in self._accounts and len(self._accounts) >= MAX_ACCOUNTS:
            self._accounts.pop(next(iter(self._accounts)))
        self._accounts[key] = account

    def hold(self, scope: Scope, cred: Credential, origin: str) -> None:
        old = self._held.get(scope)
        if old is not None and old.cred.token == cred.token:
            return
        if old is not None and origin != "caller" and old.origin == "caller":
            return  # a caller's (fresher) token is not replaced by the daemon's own
        self._held[scope] = Held(cred, origin, time.time())
        if old is None:
            provider, endpoint, account = scope
            fp = cred.fingerprint
            log.info("holding a %s credential for account %s at %s (%s, %s)", provider, account, endpoint, origin, fp)
            if self.background:
                self._spawn(self.svc.rearm(scope))

    def _claims(self, provider: str) -> ClaimsProvider:
        return claims_provider(self.svc.provider(provider))

    async def scope(self, provider: str, endpoint: str) -> AccountScope:
        """The account (and its quota) of the credential a new resource is made with: the
        caller's, else the daemon's own. Validates it; the daemon holds it from then on."""
        caller = self.caller(provider)
        choices = [(caller, "caller")] if caller is not None and caller.token else self.own(provider)
        claimed = self._claims(provider)
        if not choices:
            raise UnauthorizedError(f"no {claimed.platform} token", hint=TOKEN_HINT)
        cred, origin = choices[0]
        scope = await claimed.account(endpoint, cred.token)
        self._remember((provider, endpoint, cred.fingerprint), scope["account"])
        self.hold((provider, endpoint, scope["account"]), cred, origin)
        return scope

    async def token(self, provider: str, endpoint: str, account: str) -> str:
        """The token for ``account``'s resources at ``endpoint`` (see the module's order)."""
        caller, theirs, failure = self.caller(provider), None, None
        if caller is not None and caller.token:
            try:
                theirs = await self.account_of(provider, endpoint, caller)
            except HutchError as exc:
                failure = exc
            else:
                if theirs == account:
                    self.hold((provider, endpoint, account), caller, "caller")
                    return caller.token
        if await self.available((provider, endpoint, account)):
            return self._held[(provider, endpoint, account)].cred.token
        platform = self._claims(provider).platform
        if theirs is not None:
            raise UnauthorizedError(
                f"this belongs to {platform} account {account}, another account than the token you sent ({theirs}), "
                "and the daemon holds no credential for it",
                hint="use the token of the account that created it; hutch never touches another account's resources",
            )
        if failure is not None:
            raise failure
        raise UnauthorizedError(f"no credential for {platform} account {account} at {endpoint} in the daemon's memory", HOLD_HINT)

    async def available(self, scope: Scope) -> bool:
        """Whether the daemon holds (or can take from its own) a credential for ``scope``; no caller needed."""
        if scope in self._held:
            return True
        provider, endpoint, account = scope
        for cred, origin in self.own(provider):
            key = (provider, endpoint, cred.fingerprint)
            if self._retry.get(key, 0.0) > time.monotonic():
                continue
            try:
                mine = await self.account_of(provider, endpoint, cred)
            except HutchError as exc:
                self._retry[key] = time.monotonic() + RETRY_OWN
                fp, why = cred.fingerprint, exc.message
                log.warning("the daemon's own %s token (%s, %s) failed at %s: %s", provider, origin, fp, endpoint, why)
                continue
            if mine == account:
                self.hold(scope, cred, origin)
                return True
        return False

    async def _arm_own(self) -> None:
        for scope in sorted(self.wanted()):
            if scope in self._held:  # taken while the daemon started (before it was armed)
                await self.svc.rearm(scope)
            elif self.own(scope[0]):
                await self.available(scope)

    # -- what needs a credential, and what to show -------------------------------------

    @staticmethod
    def scope_of(rec: SandboxRecord) -> Scope | None:
        endpoint, account = rec.data.get("endpoint"), rec.data.get("account")
        return (rec.provider, str(endpoint), str(account)) if endpoint and account else None

    def wanted(self) -> dict[Scope, list[str]]:
        """The accounts whose sandboxes or claims may need a credential, with those sandboxes."""
        out: dict[Scope, list[str]] = {}
        for rec in self.svc.store.sandboxes.all(NEEDS):
            scope = self.scope_of(rec)
            if scope is not None:
                out.setdefault(scope, []).append(rec.id)
        for claim in self.svc.store.claims.all():
            ids = out.setdefault((claim["provider"], claim["endpoint"], claim["account"]), [])
            if claim["sandbox_id"] and claim["sandbox_id"] not in ids:
                ids.append(claim["sandbox_id"])
        return out

    def status(self, scope: Scope) -> wire.CredentialStatus:
        held = self._held.get(scope)
        base = {"provider": scope[0], "endpoint": scope[1], "account": scope[2]}
        return cast("wire.CredentialStatus", base | (held.describe() if held is not None else {"state": "missing"}))

    def describe(self, rec: SandboxRecord) -> wire.CredentialStatus | None:
        """What a sandbox's account has in memory (None for sandboxes that need no credential)."""
        scope = self.scope_of(rec)
        return self.status(scope) if scope is not None and rec.state in NEEDS else None

    def report(self) -> list[wire.AccountCredential]:
        wanted = self.wanted()
        scopes = sorted(set(wanted) | set(self._held))
        return [{**self.status(s), "sandboxes": sorted(wanted.get(s, []))} for s in scopes]

    # -- tasks -------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        for key, pending in list(self._pending.items()):
            if pending is task:
                del self._pending[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("credential task failed", exc_info=task.exception())


def credential_checks(report: list[wire.AccountCredential]) -> list[CheckResult]:
    """One doctor check per account: its credential in memory, or missing (a failure:
    expiry and cleanup of its sandboxes wait)."""
    out = []
    for entry in report:
        where = f"account {entry['account']} at {entry['endpoint']}"
        ids = entry["sandboxes"]
        waiting = f"; {len(ids)} sandbox(es): {', '.join(ids[:5])}" + (" ..." if len(ids) > 5 else "") if ids else ""
        ok = entry["state"] == "in_memory"
        detail = f"{where}: {describe(entry)}{waiting}" if ok else f"{where}: {MISSING}{waiting}; their expiry and cleanup wait"
        out.append(CheckResult(f"{entry['provider']} credential", ok, detail, None if ok else BRING))
    return out
