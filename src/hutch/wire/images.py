"""Image bodies: stored images, pull and import requests and their event frames, rm and prune."""

# No "from __future__ import annotations": Python 3.11 sees NotRequired/Required only in evaluated annotations.
from typing import Literal, NotRequired, TypedDict

from hutch.wire.system import ErrorDetail

__all__ = [
    "ImageConfigBody",
    "ImageDoneFrame",
    "ImageErrorFrame",
    "ImageLayer",
    "ImageLayerFrame",
    "ImageProgressFrame",
    "ImagePruned",
    "ImagePullFrame",
    "ImagePullRequest",
    "ImageReceivedFrame",
    "ImageRecord",
    "ImageRemoved",
    "ImageResolvedFrame",
]


class ImageLayer(TypedDict):
    digest: str  # the blob as stored (compressed as it came)
    diff_id: str  # the uncompressed tar's digest: the unpacked layer's name, shared between images
    size: int
    media_type: str


class ImageConfigBody(TypedDict):
    """What sandboxes made from the image take as defaults (a request's own values win)."""

    env: list[str]
    entrypoint: list[str]
    cmd: list[str]
    workdir: str | None
    user: str | None
    labels: dict[str, str]


class ImageRecord(TypedDict):
    """One stored image (``GET /v1/images``, ``GET /v1/images/inspect``)."""

    id: str  # sha256 of its config
    names: list[str]  # NAME:TAG, short for docker.io (python:3.12)
    digests: list[str]  # NAME@sha256:... (the registry's manifest or index digests it was pulled by)
    digest: str  # its manifest's digest
    platform: str  # linux/amd64 ...
    size: int  # bytes of its layers as stored
    created: str  # when it was built (its config's created; may be empty)
    stored_at: float
    source: str  # "pull REF", "import oci", "import docker-archive", "import rootfs"
    layers: list[ImageLayer]
    config: ImageConfigBody
    rootfs: str  # its flattened root filesystem on the daemon's machine (empty for an API key: admins only)
    sandboxes: list[str]  # live sandboxes made from it


class ImagePullRequest(TypedDict):
    """``POST /v1/images/pull``. Registry credentials travel in the ``x-hutch-registry-auth`` header."""

    ref: str
    insecure: NotRequired[bool]  # plain http to a registry not on this machine
    platform: NotRequired[str | None]  # os/arch[/variant]; only the host's own is accepted


class ImageResolvedFrame(TypedDict):
    type: Literal["resolved"]
    ref: str
    digest: str  # the platform manifest's digest
    platform: str
    layers: int
    size: int  # bytes of all its layers
    missing: int  # bytes of the layers the store does not have (what will be downloaded)


class ImageLayerFrame(TypedDict):
    type: Literal["layer"]
    digest: str
    size: int
    status: Literal["exists", "downloading", "downloaded", "unpacked"]


class ImageProgressFrame(TypedDict):
    type: Literal["progress"]
    digest: str
    bytes: int
    size: int


class ImageReceivedFrame(TypedDict):
    """An import: bytes of the upload received so far."""

    type: Literal["received"]
    bytes: int


class ImageDoneFrame(TypedDict):
    type: Literal["done"]
    image: ImageRecord
    transferred: int  # blob bytes downloaded from the registry (0 for an import, and for a pull of stored layers)


class ImageErrorFrame(TypedDict):
    """The last frame when the pull or import failed after its first frame (nothing half-stored stays)."""

    type: Literal["error"]
    error: ErrorDetail


ImagePullFrame = ImageResolvedFrame | ImageLayerFrame | ImageProgressFrame | ImageReceivedFrame | ImageDoneFrame | ImageErrorFrame


class ImageRemoved(TypedDict):
    """``DELETE /v1/images?ref=``: a name removed, the image deleted when it was its last name (or ref is its id)."""

    image: str
    untagged: list[str]
    deleted: bool
    sandboxes: list[str]  # live sandboxes still using it (only with force)
    freed: int  # bytes of files removed at once (shared layers go when no image uses them)


class ImagePruned(TypedDict):
    """``POST /v1/images/prune``: what went (files no image nor live sandbox uses) and the bytes freed."""

    rootfs: int
    layers: int
    blobs: int
    partials: int
    temporaries: int  # directories an interrupted unpack, flatten or upload left under the store
    freed: int
