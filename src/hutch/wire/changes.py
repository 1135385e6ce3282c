"""What a sandbox changed (``hutch diff``, ``hutch ls --since``), and images made from it (``hutch image commit``)."""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, TypedDict

from hutch.wire.images import ImageRecord

__all__ = ["Change", "ChangeKind", "ChangeList", "CommitChanges", "CommitLayer", "CommitRequest", "ImageCommitted"]

ChangeKind = Literal["added", "modified", "deleted"]


class Change(TypedDict):
    """One path a sandbox changed, as the sandbox sees it (``/etc/x``, ``/workspace/y``)."""

    path: str
    kind: ChangeKind
    type: str  # file, dir, symlink, other (a deletion: what the image had there, else other)
    size: int  # files; 0 otherwise
    mode: int  # permission bits; 0 for a deletion
    ctime: float | None  # when it last changed (a Unix time); None for a deletion in /workspace


class ChangeList(TypedDict):
    """``GET /v1/sandboxes/{ref}/diff``: the changes at or under ``path``, sorted by path."""

    sandbox: str
    path: str  # what was compared: "/" for everything
    since: float | None
    changes: list[Change]
    truncated: bool  # more changes than one answer carries (100,000), or a tree too large to read whole
    notes: list[str]  # what could not be compared, and why


class CommitChanges(TypedDict, total=False):
    """What a commit changes in the new image's config (``hutch image build --env/--workdir``)."""

    env: list[str]  # K=V entries, replacing the image's of the same key
    workdir: str | None
    user: str | None
    cmd: list[str] | None
    entrypoint: list[str] | None


class CommitRequest(TypedDict):
    """``POST /v1/images/commit``: the sandbox's writable root as a new layer on its image, named ``name``."""

    sandbox: str
    name: str  # NAME[:TAG]
    pause: NotRequired[bool]  # freeze the sandbox while its root is read (default true)
    changes: NotRequired[CommitChanges | None]
    comment: NotRequired[str | None]  # the new image's history entry (default: the command)


class CommitLayer(TypedDict):
    diff_id: str  # the layer tar's sha256 (stored uncompressed: also its blob digest)
    size: int
    entries: int


class ImageCommitted(TypedDict):
    """The new image, the layer added, and what was left out of it (devices, files that changed while read)."""

    image: ImageRecord
    layer: CommitLayer
    notes: list[str]
