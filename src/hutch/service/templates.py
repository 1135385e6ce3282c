"""Images made from sandboxes (E2B calls them templates): ``hutch image commit``.

A commit reads the sandbox's writable root (the provider's ``export_changes``: its overlay
upper as an OCI layer tar, whiteouts as ``.wh.`` entries, owners as the image sees them)
while the sandbox is frozen, and records it as a new image: the sandbox's image plus that
layer (providers/local/images/commit.py). Whatever fails, nothing half-stored stays.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from hutch import imageref as refs
from hutch.errors import InvalidError
from hutch.provider import changes_provider, pause_provider
from hutch.providers.local.images import commit as commits

if TYPE_CHECKING:
    from hutch.service import Service


class Templates:
    def __init__(self, service: Service) -> None:
        self.svc = service

    async def commit(
        self, ref: str, name: str, *, pause: bool = True, changes: dict[str, Any] | None = None, comment: str | None = None
    ) -> dict[str, Any]:
        """The sandbox ``ref``'s writable root as a new layer on its image, named ``name``."""
        svc = self.svc
        target = refs.parse_registry(name)
        rec = svc.live(ref)
        provider = svc.provider(rec.provider)
        changer = changes_provider(provider)
        parent = (rec.data.get("image") or {}).get("id")
        if not parent:
            raise InvalidError(
                f"sandbox {rec.name or rec.id} was not made from a stored image: it has no writable root to commit",
                hint="create it from an image: hutch create --image REF (hutch image pull REF first)",
            )
        store = svc.images.store
        tar = commits.scratch(store, "commit")
        freeze = pause and provider.capabilities.pause
        try:
            if freeze:
                await svc._guarded(rec, pause_provider(provider).pause(rec))
            try:
                layer = await svc._guarded(rec, changer.export_changes(rec, tar))
            finally:
                if freeze:
                    await pause_provider(provider).resume(rec)
            what = comment or f"hutch image commit {rec.name or rec.id}"

            def record() -> dict[str, Any]:
                with store.shared():
                    return commits.commit(
                        store, parent, tar, layer["diff_id"], [target.name], what, changes or {}, lambda e: None
                    )

            row = await asyncio.to_thread(record)
        except BaseException:
            with contextlib.suppress(Exception):
                await svc.images._cleanup()
            raise
        finally:
            tar.unlink(missing_ok=True)
        svc.store.events.append("image_committed", rec.id, image=row["id"], name=target.name, layer=layer["diff_id"])
        summary = {k: layer[k] for k in ("diff_id", "size", "entries")}
        return {"image": svc.images.describe(row), "layer": summary, "notes": list(layer.get("notes", []))}
