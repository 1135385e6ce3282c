"""A hutch daemon whose local provider resolves images from plain directories.

``python -m hutch.testing.images`` serves like ``hutch serve`` (settings from the
environment), with ``HUTCH_TEST_IMAGES`` naming a JSON file of ``{"REF": {"rootfs": DIR,
"env": [...], "workdir": ..., "user": ..., "entrypoint": [...], "cmd": [...]}}``: the
sandbox tests start image sandboxes from root filesystems they build, without a store.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from hutch.config import Settings
from hutch.errors import NotFoundError
from hutch.provider import registry
from hutch.providers.local import LocalProvider
from hutch.providers.local.images.types import ImageConfig, ResolvedImage

ENV = "HUTCH_TEST_IMAGES"


class DirectorySource:
    """Images as directories named in a JSON file (read at each resolve)."""

    def __init__(self, table: Path) -> None:
        self.table = table

    def resolve(self, ref: str, owner: str | None = None) -> ResolvedImage:
        entries: dict[str, Any] = json.loads(self.table.read_text()) if self.table.is_file() else {}
        entry = entries.get(ref)
        if entry is None:
            raise NotFoundError(f"image {ref!r} is not in the image store", hint=f"hutch image pull {ref}")
        config = ImageConfig(
            env=tuple(entry.get("env", ())),
            entrypoint=tuple(entry.get("entrypoint", ())),
            cmd=tuple(entry.get("cmd", ())),
            workdir=entry.get("workdir"),
            user=entry.get("user"),
        )
        digest = "sha256:" + hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()
        return ResolvedImage(id=digest, ref=ref, rootfs=Path(entry["rootfs"]), config=config)


def provider(settings: Settings) -> LocalProvider:
    return LocalProvider(settings, images=DirectorySource(Path(os.environ[ENV])))


def main() -> int:
    from hutch.server.daemon import serve

    registry.BUILTINS["local"] = "hutch.testing.images:provider"
    return serve(Settings.load())


if __name__ == "__main__":
    sys.exit(main())
