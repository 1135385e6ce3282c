"""Images from the SDK (hutch.Images, hutch.AsyncImages) and the MCP tools image_pull and image_list,
against a real daemon and the session's local registry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon
from tests.imagekit import Registry
from tests.integration.image_roots import busybox_root
from tests.integration.test_mcp import connect, ok, tool_error

import hutch
from hutch.errors import HutchError


def test_the_sdk_pulls_with_progress_imports_a_path_lists_inspects_removes_and_prunes(
    daemon: Daemon, registry: Registry, tmp_path: Path
) -> None:
    ref = f"{registry.host}/tiny:1"
    seen: list[dict[str, Any]] = []
    with hutch.Images(daemon.settings) as images:
        done = images.pull(ref, on_progress=seen.append)
        assert done["type"] == "done" and done["transferred"] > 0 and done["image"]["names"] == [ref]
        kinds = [f["type"] for f in seen]
        assert kinds[0] == "resolved" and "layer" in kinds and "done" not in kinds
        root = busybox_root(tmp_path / "root")
        imported = images.import_(root, "sdk/busy:1")  # a Path: a root filesystem directory
        assert imported["image"]["names"] == ["sdk/busy:1"] and imported["transferred"] == 0
        assert {i["id"] for i in images.list()} == {done["image"]["id"], imported["image"]["id"]}
        assert images.inspect("sdk/busy:1")["id"] == imported["image"]["id"]
        with hutch.Sandbox.create(settings=daemon.settings, image="sdk/busy:1") as sbx:
            assert sbx.exec("cat /etc/marker").exit_code == 0
            with pytest.raises(HutchError) as err:
                images.rm("sdk/busy:1")
            assert err.value.kind == "conflict"
        removed = images.rm("sdk/busy:1")
        assert removed["deleted"] and removed["untagged"] == ["sdk/busy:1"]
        assert images.prune()["freed"] >= 0
        with pytest.raises(HutchError) as err:
            images.inspect("sdk/busy:1")
        assert err.value.kind == "not_found"
        with pytest.raises(HutchError) as err:
            images.import_(f"oci-archive:{tmp_path / 'missing.tar'}")
        assert err.value.kind == "not_found"


def test_the_async_sdk_pulls_and_imports_alike(daemon: Daemon, registry: Registry, image_layout: Path) -> None:
    async def main() -> None:
        seen: list[str] = []
        async with hutch.AsyncImages(daemon.settings) as images:
            done = await images.pull(f"{registry.host}/multi:1", on_progress=lambda f: seen.append(f["type"]))
            assert done["image"]["platform"] == "linux/amd64" and seen[0] == "resolved"
            got = await images.import_(f"oci:{image_layout}:tiny", "from/layout:1")
            assert got["image"]["names"] == ["from/layout:1"]
            assert (await images.inspect("from/layout:1"))["id"] == got["image"]["id"]
            assert len(await images.list()) == 2
            assert (await images.rm("from/layout:1"))["deleted"]
            assert (await images.prune())["rootfs"] >= 0
            with pytest.raises(HutchError) as err:
                await images.pull(f"{registry.host}/nosuch:1")
            assert err.value.kind == "not_found"

    asyncio.run(main())


def test_mcp_image_pull_then_image_list_and_a_sandbox_from_it(daemon: Daemon, registry: Registry) -> None:
    ref = f"{registry.host}/tiny:1"

    async def main() -> None:
        async with connect(daemon) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"image_pull", "image_list"} <= names
            pulled = ok(await client.call_tool("image_pull", {"ref": ref}))
            assert pulled["image"]["names"] == [ref] and pulled["transferred"] > 0 and pulled["image"]["layers"] == 2
            listed = ok(await client.call_tool("image_list", {}))
            assert [i["id"] for i in listed["images"]] == [pulled["image"]["id"]]
            assert "rootfs" not in listed["images"][0]  # no path of the daemon's machine
            ran = ok(await client.call_tool("run", {"command": "cat /etc/hello.txt", "image": ref}))
            assert ran["exit_code"] == 0 and ran["stdout"] == "hello from the image\n"
            err = tool_error(await client.call_tool("image_pull", {"ref": "oci-archive:/x.tar"}))
            assert err["kind"] == "invalid"

    asyncio.run(main())
