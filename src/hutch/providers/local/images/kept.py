"""A tenant's writable root, kept across its sandboxes like its ``/workspace``.

A tenant sandbox made from an image keeps its root under ``tenants/NAME/root`` (upper and
work), not in the sandbox's directory, so ``hutch destroy`` leaves it and the tenant's next
sandbox starts with what the last one installed; ``hutch tenant delete`` removes it. The
image it was made over is recorded beside it: a later sandbox of the tenant from another
image is refused (an upper only means something over its own lower). As root each sandbox
has its own host uids, so the kept files are given to the new sandbox's range first: uid
``old + k`` becomes ``new + k`` (no symlink is followed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hutch.errors import InvalidError
from hutch.providers.local.images.types import ResolvedImage
from hutch.providers.local.userns import RANGE

RECORD = "kept.json"


def shift(tree: Path, old: int, new: int, count: int = RANGE) -> None:
    """Move every owner and group in ``[old, old + count)`` to the same place in ``[new, ...)``."""

    def moved(i: int) -> int:
        return new + (i - old) if old <= i < old + count else i

    for top, dirs, files in os.walk(tree):
        for name in [".", *dirs, *files] if top == str(tree) else [*dirs, *files]:
            p = os.path.join(top, name)
            st = os.lstat(p)
            uid, gid = moved(st.st_uid), moved(st.st_gid)
            if (uid, gid) != (st.st_uid, st.st_gid):
                os.lchown(p, uid, gid)


def prepare(root: Path, tenant: str, image: ResolvedImage, uid: int | None) -> None:
    """Check (and as root re-own) a tenant's kept root before its new sandbox uses it."""
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    os.chmod(root, 0o711)
    record = root / RECORD
    try:
        kept = json.loads(record.read_text())
    except (OSError, ValueError):
        kept = None
    if kept is not None and kept.get("image") != image.id:
        raise InvalidError(
            f"tenant {tenant!r} keeps a writable root made over image {kept.get('ref')} ({kept.get('image')}), not {image.ref}",
            hint=f"use --image {kept.get('ref')}, or hutch tenant delete {tenant} to start over",
        )
    if kept is not None and uid is not None and kept.get("uid") not in (None, uid) and (root / "upper").exists():
        shift(root / "upper", int(kept["uid"]), uid)
    record.write_text(json.dumps({"image": image.id, "ref": image.ref, "uid": uid}))
