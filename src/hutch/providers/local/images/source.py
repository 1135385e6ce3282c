"""Where the local provider resolves ``--image`` references: the daemon's image store."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from hutch.errors import NotFoundError
from hutch.providers.local.images.types import ResolvedImage

if TYPE_CHECKING:
    from hutch.config import Settings
    from hutch.models import SandboxRecord
    from hutch.providers.local.images.types import ImageSource


class EmptySource:
    """No image is stored: every reference is ``not_found``, with the command that gets it."""

    def resolve(self, ref: str, owner: str | None = None) -> ResolvedImage:
        raise NotFoundError(f"image {ref!r} is not in the image store", hint=f"hutch image pull {ref}")


class StoreSource:
    """The image store of a state directory, opened at the first ``--image`` (a provider is
    made before its state directory need exist, and most sandboxes name no image)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: ImageSource | None = None

    def resolve(self, ref: str, owner: str | None = None) -> ResolvedImage:
        if self._store is None:
            from hutch.providers.local.images.store import ImageStore
            from hutch.store import Store

            self._store = ImageStore(self.settings.home / "images", Store(self.settings.db_path).images)
        return self._store.resolve(ref, owner)


def default_images(settings: Settings) -> ImageSource:
    """The image store of ``settings.home`` (``hutch image pull`` and ``import`` fill it)."""
    return StoreSource(settings)


def resolve_image(images: ImageSource, rec: SandboxRecord) -> ResolvedImage:
    """The image a sandbox starts from: the one the Service admitted for its key, by id
    (``image_pin``: never another owner's image that has the same name, were the key's name
    removed meanwhile), else its reference, as the sandbox's owner sees it."""
    assert rec.spec.image
    pin = rec.data.get("image_pin")
    found = images.resolve(pin if isinstance(pin, str) else rec.spec.image, rec.owner)
    return dataclasses.replace(found, ref=rec.spec.image)
