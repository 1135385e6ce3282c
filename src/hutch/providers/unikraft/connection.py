"""The provider's connections to Unikraft Cloud: one pool per endpoint, one :class:`Api` per
endpoint and token. Which token an operation uses is not decided here: the Service binds
``tokens`` (:meth:`bind_claims`; ``hutch.service.keyring``: the caller's, then what the
daemon holds for the account, then the daemon's own); unbound (direct use), this process's
own is used.
"""

from __future__ import annotations

import httpx

from hutch.credentials import fingerprint
from hutch.errors import UnavailableError
from hutch.models import SandboxRecord
from hutch.provider import AccountScope, StepHook, TokenSource
from hutch.providers.unikraft.api import Api, client, resolve_endpoint, resolve_token

MAX_APIS = 64


class ConnectionMixin:
    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._pools: dict[str, httpx.AsyncClient] = {}  # one connection pool per endpoint
        self._apis: dict[tuple[str, str], Api] = {}  # per endpoint and token fingerprint
        self.on_step: StepHook = lambda step: None
        self.tokens: TokenSource | None = None

    def bind_claims(self, tokens: TokenSource, on_step: StepHook) -> None:
        """The Service's keyring answers which token to use; ``on_step`` hears ``create_sent``."""
        self.tokens, self.on_step = tokens, on_step

    def api_with(self, endpoint: str, token: str) -> Api:
        key = (endpoint, fingerprint(token))
        api = self._apis.get(key)
        if api is None:
            if len(self._apis) >= MAX_APIS:  # cheap objects over a shared pool: just forget the oldest
                self._apis.pop(next(iter(self._apis)))
            pool = self._pools.get(endpoint)
            if pool is None:
                pool = self._pools[endpoint] = client(self._timeout)

            async def on_response(method: str, path: str) -> None:
                if method == "POST" and path == "/v1/instances":
                    self.on_step("create_sent")  # a step of the claim's lifecycle

            api = Api(endpoint, token, timeout=self._timeout, on_response=on_response, http=pool)
            self._apis[key] = api
        return api

    async def api(self, endpoint: str, account: str) -> Api:
        """The connection for ``account``'s resources at ``endpoint``, with its credential."""
        token = resolve_token()[0] if self.tokens is None else await self.tokens(endpoint, account)
        return self.api_with(endpoint, token)

    def endpoint_for(self, rec: SandboxRecord) -> str:
        return str(rec.data.get("endpoint") or resolve_endpoint(rec.spec.provider_options.get("metro")))

    async def account(self, endpoint: str, token: str | None = None) -> AccountScope:
        """The account of ``token`` (default: this process's own), from ``/v1/users/quotas``
        (read-only; validates the token)."""
        api = self.api_with(endpoint, resolve_token()[0] if token is None else token)
        reply = await api.call("GET", "/v1/users/quotas", "reading the account's quotas")
        quotas = reply.data.get("quotas") or []
        uuids = {q.get("uuid") for q in quotas if isinstance(q, dict) and q.get("uuid")}
        if len(uuids) != 1:
            raise UnavailableError(
                f"the quotas endpoint named {len(uuids)} accounts (expected exactly one)", hint="check the token"
            )
        q = quotas[0]
        used, hard = q.get("used") or {}, q.get("hard") or {}
        account = str(uuids.pop())
        return {"account": account, "used": used.get("instances"), "hard": hard.get("instances"), "limits": q.get("limits")}

    async def close(self) -> None:
        self._apis.clear()
        for pool in self._pools.values():
            await pool.aclose()
        self._pools.clear()

    @staticmethod
    def account_of(rec: SandboxRecord) -> str:
        return str(rec.data.get("account") or "")
