"""Sandbox.create(tenant=...) and AsyncSandbox.create(tenant=...) make sandboxes of a tenant's
persistent line: /workspace outlives destroy and is the next create(tenant=same)'s."""

from __future__ import annotations

import asyncio

import pytest
from tests.conftest import Daemon

from hutch import AsyncSandbox, HutchError, Sandbox


def test_sync_create_with_a_tenant_keeps_its_workspace(daemon: Daemon) -> None:
    first = Sandbox.create(tenant="sdk-sync", settings=daemon.settings)
    assert first.info["spec"].get("tenant") == "sdk-sync"
    first.files.write("kept.txt", "from the first\n")
    first.destroy()
    with Sandbox.create(tenant="sdk-sync", settings=daemon.settings) as second:
        assert second.id != first.id
        assert second.files.read_text("kept.txt") == "from the first\n"
    with Sandbox.create(settings=daemon.settings) as plain:  # no tenant: a fresh workspace
        assert plain.exec("test -e kept.txt").exit_code == 1
    tenants = {t["name"]: t for t in first.client.tenants()}
    assert "sdk-sync" in tenants


def test_async_create_with_a_tenant_keeps_its_workspace(daemon: Daemon) -> None:
    async def go() -> tuple[str, str]:
        first = await AsyncSandbox.create(tenant="sdk-async", settings=daemon.settings)
        await first.files.write("kept.txt", "async\n")
        await first.destroy()
        async with await AsyncSandbox.create(tenant="sdk-async", settings=daemon.settings) as second:
            return str(second.info["spec"].get("tenant")), await second.files.read_text("kept.txt")

    assert asyncio.run(go()) == ("sdk-async", "async\n")


def test_an_unknown_create_option_is_refused_not_dropped(daemon: Daemon) -> None:
    with pytest.raises(HutchError) as err:
        Sandbox.create(tennant="typo", settings=daemon.settings)  # type: ignore[call-arg]
    assert err.value.kind == "invalid" and "tennant" in err.value.message and "tenant" in (err.value.hint or "")
    with pytest.raises(HutchError, match="tennant"):
        asyncio.run(AsyncSandbox.create(tennant="typo", settings=daemon.settings))  # type: ignore[call-arg]
