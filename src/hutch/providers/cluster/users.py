"""``exec --user`` on a cluster: the gateway refuses, before a run is recorded, what the
sandbox's node would refuse (in its local provider's words and hint), from what it knows
without asking the node."""

from __future__ import annotations

from hutch.errors import InvalidError
from hutch.models import SandboxRecord


def check(rec: SandboxRecord, user: str, mapping: str | None) -> None:
    """``mapping``: how the sandbox's node maps users (its actor says: range, subuid, single)."""
    from hutch.providers.local import userns  # not at import: the gateway needs no more of the local provider

    userns.check_exec_user(rec.id, own_user(rec, mapping), user)


def own_user(rec: SandboxRecord, mapping: str | None) -> dict[str, object]:
    """What the node's local provider keeps of ``rec``'s own users: the spec's user, resolved as
    the node resolves it (a cluster sandbox has no image, so no /etc of its own at create), and
    how its node maps them. Nothing for a plain sandbox."""
    from hutch.providers.local import userns

    if rec.spec.user is None:
        return {}
    try:
        uid, gid = userns.resolve(rec.spec.user, None)
    except InvalidError:  # the node made it all the same: the node checks the run itself
        uid, gid = 0, 0
    return {"user": {"name": rec.spec.user, "uid": uid, "gid": gid, "map": mapping, "switch": True}}
