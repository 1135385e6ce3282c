"""The single calls the Service's claim workflow makes (``hutch.service.claims``): the
unikraft provider's :class:`~hutch.provider.ClaimsProvider`, mixed into it, with its
provider options (``metro``, ``ssh``) and its SSH endpoint.

Each call names the endpoint and the account; the token comes from the Service's keyring
(:meth:`ConnectionMixin.api`).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Literal, cast

from hutch.errors import UnavailableError
from hutch.models import SandboxRecord, SandboxSpec
from hutch.provider import AccountScope, CreatePlan, Instance
from hutch.providers.unikraft import ssh
from hutch.providers.unikraft.api import Api, resolve_endpoint
from hutch.providers.unikraft.settings import UnikraftSettings

if TYPE_CHECKING:
    from hutch.credentials import Credential
    from hutch.wire import SshEndpoint

PLUGIN = {"name": "sandbox", "image": "plugins/sandbox:latest", "config": {}}
OPTION_FLAGS = {"metro": "--unikraft-metro", "ssh": "--ssh"}  # the provider options, as a user gives them
OPTIONS = frozenset(OPTION_FLAGS)


class ClaimsMixin:
    config: UnikraftSettings
    platform = "Unikraft Cloud"
    option_flags = OPTION_FLAGS

    async def api(self, endpoint: str, account: str) -> Api:
        raise NotImplementedError  # the provider's own (ConnectionMixin)

    async def account(self, endpoint: str, token: str) -> AccountScope:
        raise NotImplementedError  # the provider's own (ConnectionMixin)

    # -- options and where -------------------------------------------------------------------

    def validate_options(self, spec: SandboxSpec) -> None:
        """``metro``: a metro name or an endpoint root URL (checked here, before anything is
        made); ``ssh``: any value turns SSH on."""
        metro = spec.provider_options.get("metro")
        if metro:
            resolve_endpoint(metro)

    def location(self, spec: SandboxSpec) -> str | None:
        return spec.provider_options.get("metro")

    def endpoint(self, where: str | None, caller: Credential | None) -> str:
        """``where`` (``--unikraft-metro``), else the caller's ``UKC_METRO``, else the daemon's
        own (its environment or config file), else ``fra``."""
        return resolve_endpoint(where or (caller.metro if caller is not None and caller.metro else None))

    def ssh_endpoint(self, rec: SandboxRecord) -> SshEndpoint | None:
        found = rec.data.get("ssh")
        return cast("SshEndpoint", dict(found)) if isinstance(found, dict) else None

    # -- create ------------------------------------------------------------------------------

    def plan(self, rec: SandboxRecord, name: str) -> CreatePlan:
        image = rec.spec.image or self.config.default_image()[0]
        env = dict(rec.spec.env)
        extra: dict[str, Any] = {}
        if rec.spec.provider_options.get("ssh"):  # a fresh key: its public half goes to the image
            env[ssh.KEY_ENV] = ssh.make_key(self.config.home, rec.id)
            extra["service_group"] = ssh.service_group()
        body = {
            "name": name,
            "image": image,
            "memory_mb": max(16, rec.spec.limits.memory >> 20),
            "env": env,
            **extra,
            "autostart": True,
            "plugins": [PLUGIN],
            "scale_to_zero": {"policy": "idle", "stateful": True, "cooldown_time_ms": 60000},
            "tags": ["hutch", f"hutch-sandbox={rec.id}"],
        }
        return CreatePlan(body, {"memory": f"instance memory {body['memory_mb']} MiB (Unikraft Cloud)"})

    async def create_instance(self, endpoint: str, body: dict[str, Any], *, account: str) -> Instance:
        api = await self.api(endpoint, account)
        reply = await api.request("POST", "/v1/instances", body=body)
        if reply.status >= 400 or not isinstance(reply.body, dict):
            raise api.fail(reply, f"creating instance {body['name']}")
        items = reply.data.get("instances") or []
        if len(items) != 1 or items[0].get("status", "success") != "success" or not items[0].get("uuid"):
            raise api.fail(reply, f"creating instance {body['name']}")
        return dict(items[0])

    async def ready(self, endpoint: str, inst: Instance, rec: SandboxRecord, *, account: str) -> dict[str, Any]:
        """The SSH endpoint (with ``ssh``), then until the plugin answers (:meth:`wait_ready`)."""
        data: dict[str, Any] = {}
        if rec.spec.provider_options.get("ssh"):
            uuid = str(inst["uuid"])
            data["ssh"] = await ssh.ssh_endpoint(inst, lambda: self.lookup(endpoint, uuid, account=account))
        await self.wait_ready(endpoint, str(inst["uuid"]), rec.spec.workdir, account=account)
        return data

    async def wait_ready(self, endpoint: str, uuid: str, workdir: str | None = None, *, account: str) -> None:
        """Until the plugin answers its readiness probe (``GET /commands``), at most
        ``unikraft_ready_timeout`` seconds (HUTCH_UNIKRAFT_READY_TIMEOUT); then make sure the
        sandbox's workdir exists (images need not have ``/workspace``)."""
        api = await self.api(endpoint, account)
        end = time.monotonic() + self.config.ready_timeout
        last = "no answer"
        while time.monotonic() < end:
            try:
                left = max(0.1, end - time.monotonic())
                reply = await api.plugin(uuid, "GET", "/commands", "probing the sandbox plugin", idempotent=True, wake=left)
            except UnavailableError as exc:
                last = exc.message
            else:
                if reply.status == 200:
                    if workdir:
                        body = {"path": workdir, "parents": True}
                        made = await api.plugin(uuid, "POST", "/fs/mkdir", "creating the workdir", idempotent=True, body=body)
                        if made.status != 200:
                            raise api.fail(made, f"creating {workdir}")
                    return
                last = f"HTTP {reply.status}" + (f": {reply.message}" if reply.message else "")
                if reply.status in (401, 403, 404):
                    break
            await asyncio.sleep(0.2)
        raise UnavailableError(f"the sandbox plugin of instance {uuid} never became ready ({last})", hint="check the image")

    # -- look up, list, delete -----------------------------------------------------------------

    async def lookup(self, endpoint: str, uuid: str, *, account: str) -> Instance | None:
        api = await self.api(endpoint, account)
        reply = await api.request("GET", f"/v1/instances/{uuid}")
        if reply.status == 404:
            return None
        if reply.status >= 400:
            raise api.fail(reply, f"looking up instance {uuid}")
        items = reply.data.get("instances") or []
        if items and isinstance(items[0], dict) and items[0].get("status", "success") != "success":
            if items[0].get("error") == 404 or "not found" in str(items[0].get("message", "")).lower():
                return None
            raise api.fail(reply, f"looking up instance {uuid}")
        return dict(items[0]) if items else None

    async def inventory(self, endpoint: str, *, account: str) -> list[Instance]:
        """The account's complete instance listing."""
        api = await self.api(endpoint, account)
        reply = await api.call("GET", "/v1/instances", "listing instances", params={"details": "false"})
        return [dict(i) for i in reply.data.get("instances") or [] if isinstance(i, dict)]

    async def delete_instance(self, endpoint: str, uuid: str, *, account: str) -> Literal["accepted", "absent"]:
        """One-item, UUID-only batch delete: 'accepted', or 'absent' when it was already gone."""
        api = await self.api(endpoint, account)
        reply = await api.request("DELETE", "/v1/instances", body=[{"uuid": uuid}])
        items = reply.data.get("instances") or []
        mine = [i for i in items if isinstance(i, dict) and i.get("uuid") == uuid]
        if reply.status < 400 and len(items) == 1 and len(mine) == 1 and mine[0].get("status") == "success":
            return "accepted"
        if len(mine) == 1 and (mine[0].get("error") == 404 or "not found" in str(mine[0].get("message", "")).lower()):
            return "absent"
        if reply.status == 404:
            return "absent"
        detail = mine[0].get("message") if len(mine) == 1 else f"{len(items)} items answered"
        raise UnavailableError(
            api.redact(f"deleting instance {uuid} was not accepted (HTTP {reply.status}: {detail})"),
            hint="the claim is kept; retry with hutch destroy or hutch cleanup",
        )

    def forget(self, rec: SandboxRecord) -> None:
        """hutch ssh's key and host key pin go with the instance."""
        ssh.remove_keys(self.config.home, rec.id)
