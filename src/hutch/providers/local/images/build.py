"""From verified blobs to a stored image: each layer unpacked once (by diff_id), the root filesystem
flattened, the row recorded. Shared by pulls and imports; blocking (run it in a worker thread).

A layer is unpacked by ``unpack.unpack_layer`` into ``tmp/``, which hashes its whole uncompressed
stream as it goes; it is moved to ``layers/<diff_id>`` only when that hash is the diff_id the
image's config claims, so a layer directory is always exactly the content its name says (another
image naming the same diff_id may share it safely). The root filesystem is built by
``flatten.flatten`` (hardlinks into the layers: no data is copied) and moved into place the same way.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hutch.errors import HutchError, InvalidError
from hutch.providers.local.images.blobs import disk_full
from hutch.providers.local.images.manifests import Layer
from hutch.providers.local.images.store import ImageStore, remove_tree

Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Parts:
    """Everything an image is made of, its blobs already in the store."""

    manifest: dict[str, Any]
    manifest_digest: str
    config: dict[str, Any]
    config_digest: str
    layers: Sequence[Layer]
    diff_ids: Sequence[str]
    platform: str
    source: str  # "pull docker.io/library/python:3.12", "import oci-archive" ...


def _scratch(store: ImageStore, kind: str) -> Path:
    store.tmp.mkdir(parents=True, exist_ok=True)
    return store.tmp / f"{kind}-{secrets.token_hex(8)}"


def ensure_layer(
    store: ImageStore, layer: Layer, diff_id: str | None, keep_owners: bool, source: IO[bytes] | None = None
) -> tuple[str, bool]:
    """Unpack one layer unless it already is (``diff_id`` None: not known beforehand, as for an
    imported root filesystem); its diff_id, and whether it was unpacked now. ``source``: read the
    blob from there (a download being followed, ``BlobWriter.follow``) rather than from the store."""
    if diff_id is not None and store.layer_path(diff_id).is_dir():
        return diff_id, False
    with contextlib.ExitStack() as held:
        if diff_id is not None:  # one unpacking of a layer at a time
            held.enter_context(store.lock("layer-" + diff_id[7:]))
            if store.layer_path(diff_id).is_dir():
                return diff_id, False
        from hutch.providers.local.images.unpack import unpack_layer

        work = _scratch(store, "layer")
        try:
            blob = store.blobs.path(layer.digest)
            stats = unpack_layer(blob, work, media_type=layer.media_type, keep_owners=keep_owners, source=source)
            got = stats.diff_id  # the sha256 of the whole uncompressed stream, computed while unpacking
            if diff_id is not None and got != diff_id:
                raise InvalidError(
                    f"layer {layer.digest} unpacks to {got}, not the diff_id {diff_id} its config names",
                    hint="the image is corrupted or forged; nothing was kept",
                )
            dest = store.layer_path(got)
            with store.lock("layer-" + got[7:]) if diff_id is None else contextlib.nullcontext():
                if dest.is_dir():
                    return got, False
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.rename(work, dest)
        except OSError as exc:
            raise disk_full(exc, f"layer {layer.digest}") or exc from None
        finally:
            if os.path.lexists(work):
                remove_tree(work)
    return got, True


def ensure_rootfs(store: ImageStore, image_id: str, diff_ids: Sequence[str]) -> bool:
    """Flatten an image's layers into its root filesystem unless it is there; whether it was built now."""
    dest = store.rootfs_path(image_id)
    if dest.is_dir():
        return False
    with store.lock("rootfs-" + image_id[7:]):
        if dest.is_dir():
            return False
        from hutch.providers.local.images.flatten import flatten

        work = _scratch(store, "rootfs")
        try:
            flatten([store.layer_path(d) for d in diff_ids], work)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(work, dest)
        except OSError as exc:
            raise disk_full(exc, f"the root filesystem of {image_id}") or exc from None
        finally:
            if work.exists():
                remove_tree(work)
    return True


def build(store: ImageStore, parts: Parts, names: list[str], emit: Emit, *, keep_owners: bool) -> dict[str, Any]:
    """Unpack, flatten and record an image whose blobs are stored; its row (with ``names``)."""
    if len(parts.diff_ids) != len(parts.layers):
        raise InvalidError(
            f"the image has {len(parts.layers)} layers but its config names {len(parts.diff_ids)} diff_ids",
            hint="the image is malformed",
        )
    try:
        for layer, diff_id in zip(parts.layers, parts.diff_ids, strict=True):
            _, fresh = ensure_layer(store, layer, diff_id, keep_owners)
            if fresh:
                emit({"type": "layer", "digest": layer.digest, "size": layer.size, "status": "unpacked"})
        ensure_rootfs(store, parts.config_digest, parts.diff_ids)
    except (HutchError, OSError) as exc:
        if isinstance(exc, OSError) and (full := disk_full(exc, "the image")) is not None:
            raise full from None
        raise
    row = {
        "id": parts.config_digest,
        "manifest_digest": parts.manifest_digest,
        "manifest": parts.manifest,
        "config": parts.config,
        "layers": [
            {"digest": layer.digest, "diff_id": d, "size": layer.size, "media_type": layer.media_type}
            for layer, d in zip(parts.layers, parts.diff_ids, strict=True)
        ],
        "size": sum(layer.size for layer in parts.layers),
        "platform": parts.platform,
        "source": parts.source,
    }
    store.rows.put(row, names)
    got = store.rows.get(parts.config_digest)
    assert got is not None
    return got
