"""The local provider's ``changes`` capability: what a sandbox changed (:mod:`.changes`) and
its writable root as an image layer (:mod:`.images.layer`). Mixed into
:class:`hutch.providers.local.LocalProvider`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch.errors import InvalidError
from hutch.models import SandboxRecord
from hutch.providers.local import changes, userns
from hutch.providers.local.images import layer


def _dirs(data: dict[str, Any]) -> tuple[Path, Path]:
    sdir = Path(data["dir"])
    return sdir, Path(data.get("workspace_path") or sdir / "workspace")


def _root(data: dict[str, Any]) -> tuple[Path, Path] | tuple[None, None]:
    """An image sandbox's upper and the image's root filesystem (None, None for a host-/usr one)."""
    image = data.get("image")
    if not image:
        return None, None
    return Path(image["root"]) / "upper", Path(image.get("rootfs") or "/nonexistent")


class ChangesMixin:
    root: bool
    _planned: Callable[[SandboxRecord], dict[str, Any]]

    async def changes(self, rec: SandboxRecord, since: float | None, under: str) -> dict[str, Any]:
        data = self._planned(rec)
        sdir, ws = _dirs(data)
        upper, lower = _root(data)
        return await asyncio.to_thread(changes.diff, sdir=sdir, workspace=ws, upper=upper, lower=lower, since=since, under=under)

    def _id_maps(self, data: dict[str, Any]) -> tuple[layer.IdMap, layer.IdMap]:
        if self.root:
            mapping = userns.root_mapping(int(data["uid"]))
        else:
            mapping = userns.user_mapping()
            if (data.get("user") or {}).get("map") == "single":
                mapping = userns.Mapping(mapping.uids[:1], mapping.gids[:1], "single")
        return layer.inverse(mapping.uids), layer.inverse(mapping.gids)

    async def export_changes(self, rec: SandboxRecord, dest: Path) -> dict[str, Any]:
        data = self._planned(rec)
        upper, _ = _root(data)
        if upper is None:
            raise InvalidError(
                f"sandbox {rec.name or rec.id} has no writable root to commit (it runs on the host's /usr)",
                hint="create it from an image: hutch create --image REF",
            )
        uid_of, gid_of = self._id_maps(data)
        return await asyncio.to_thread(layer.export, upper, dest, uid_of, gid_of)
