"""``sbx.policy``: a sandbox's network policy, shown and changed live."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hutch.wire.build import policy_change

if TYPE_CHECKING:
    from hutch import wire
    from hutch.sdk import AsyncSandbox, Sandbox


class Policy:
    """``sbx.policy.get()``, ``sbx.policy.update(...)``; ``sbx.policy(...)`` is ``update``."""

    def __init__(self, sbx: Sandbox) -> None:
        self._sbx = sbx

    def get(self) -> wire.NetworkPolicy:
        """The policy in force now: mode, allow_hosts, deny_hosts, ports, cidrs."""
        self._sbx.refresh()
        return self._sbx.network

    def update(
        self,
        *,
        network: str | None = None,
        allow_hosts: list[str] | None = None,
        deny_hosts: list[str] | None = None,
        remove_hosts: list[str] | None = None,
        allow_ports: list[int] | None = None,
        allow_cidrs: list[str] | None = None,
        remove_ports: list[int] | None = None,
        remove_cidrs: list[str] | None = None,
        approval: str | None = None,
    ) -> wire.NetworkPolicy:
        """Change the policy; new connections follow it at once (a ``policy_changed`` event).

        ``approval``: the id of an approved request, when the sandbox requires one for
        ``network.change``. Returns the policy now in force.
        """
        removed = (remove_ports, remove_cidrs)
        change = policy_change(network, allow_hosts, deny_hosts, remove_hosts, allow_ports, allow_cidrs, *removed)
        sbx = self._sbx
        sbx.info = sbx.client.policy(sbx.id, change, approval) if change else sbx.client.get(sbx.id)
        return sbx.network

    __call__ = update

    def __repr__(self) -> str:
        return f"Policy({self._sbx.network!r})"


class AsyncPolicy:
    """``await sbx.policy.get()``, ``await sbx.policy.update(...)``; ``await sbx.policy(...)`` is ``update``."""

    def __init__(self, sbx: AsyncSandbox) -> None:
        self._sbx = sbx

    async def get(self) -> wire.NetworkPolicy:
        """The policy in force now: mode, allow_hosts, deny_hosts, ports, cidrs."""
        await self._sbx.refresh()
        return self._sbx.network

    async def update(
        self,
        *,
        network: str | None = None,
        allow_hosts: list[str] | None = None,
        deny_hosts: list[str] | None = None,
        remove_hosts: list[str] | None = None,
        allow_ports: list[int] | None = None,
        allow_cidrs: list[str] | None = None,
        remove_ports: list[int] | None = None,
        remove_cidrs: list[str] | None = None,
        approval: str | None = None,
    ) -> wire.NetworkPolicy:
        """Change the policy; new connections follow it at once (a ``policy_changed`` event).

        ``approval``: the id of an approved request, when the sandbox requires one for
        ``network.change``. Returns the policy now in force.
        """
        removed = (remove_ports, remove_cidrs)
        change = policy_change(network, allow_hosts, deny_hosts, remove_hosts, allow_ports, allow_cidrs, *removed)
        sbx = self._sbx
        sbx.info = await sbx.client.policy(sbx.id, change, approval) if change else await sbx.client.get(sbx.id)
        return sbx.network

    __call__ = update

    def __repr__(self) -> str:
        return f"AsyncPolicy({self._sbx.network!r})"
