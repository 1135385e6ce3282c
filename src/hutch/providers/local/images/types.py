"""What the local provider sees of an image: its read-only root filesystem and its configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config applied as sandbox defaults (a request's own values win)."""

    env: tuple[str, ...] = ()  # "KEY=VALUE" entries, in the image's order
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str | None = None
    user: str | None = None  # "name", "uid", "uid:gid" as the image says it
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedImage:
    """An image ready to start sandboxes from."""

    id: str  # "sha256:..." digest of the image's config (stable, content-addressed)
    ref: str  # the reference it was resolved from, as the user wrote it
    rootfs: Path  # the flattened read-only root filesystem (never written to)
    config: ImageConfig


class ImageSource(Protocol):
    """Resolves a reference to a stored image; raises NotFoundError (hint: ``hutch image pull REF``) when absent."""

    def resolve(self, ref: str, owner: str | None = None) -> ResolvedImage:
        """``owner``: the sandbox's owner (hutch.actors), whose own names and images come first."""
        ...
