"""A new image from a stored one and a layer on top (``hutch image commit``, ``hutch image build``):
the layer tar stored as a blob (uncompressed, its digest its diff_id), a config that is the
parent's plus the layer's diff_id, a history line and the given changes (env, workdir, user,
cmd, entrypoint), an OCI manifest naming the parent's layers and the new one; then the same
path as a pull (``build.build``: the layer unpacked under the store's hostile-layer policy,
the root filesystem flattened, the row recorded). Blocking: run it in a worker thread."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

from hutch.errors import NotFoundError
from hutch.providers.local.images.build import Emit, Parts, build
from hutch.providers.local.images.manifests import Layer
from hutch.providers.local.images.pull import keep_owners
from hutch.providers.local.images.store import ImageStore

LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
CONFIG_KEYS = {"env": "Env", "workdir": "WorkingDir", "user": "User", "cmd": "Cmd", "entrypoint": "Entrypoint"}


def apply_changes(config: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of an image config with ``changes`` applied: ``env`` (``K=V`` entries, replacing the
    config's of the same key), ``workdir``, ``user``, ``cmd``, ``entrypoint`` (None: unchanged)."""
    cfg: dict[str, Any] = json.loads(json.dumps(config))  # a deep copy of plain JSON
    inner = cfg.setdefault("config", {}) or {}
    cfg["config"] = inner
    for key, value in changes.items():
        if key == "env":
            names = {item.partition("=")[0] for item in value}
            inner["Env"] = [e for e in inner.get("Env") or [] if e.partition("=")[0] not in names] + list(value)
        elif key in CONFIG_KEYS and value is not None:
            inner[CONFIG_KEYS[key]] = value
    return cfg


def new_config(parent: dict[str, Any], diff_id: str, comment: str, changes: dict[str, Any]) -> dict[str, Any]:
    """The parent's config with the layer on top: ``changes`` ``env`` (``K=V`` entries, replacing
    the parent's of the same key), ``workdir``, ``user``, ``cmd``, ``entrypoint``."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cfg = apply_changes(parent, changes)
    cfg["rootfs"] = {"type": "layers", "diff_ids": [*(cfg.get("rootfs") or {}).get("diff_ids", []), diff_id]}
    cfg["history"] = [*(cfg.get("history") or []), {"created": now, "created_by": comment}]
    cfg["created"] = now
    return cfg


def commit(
    store: ImageStore,
    parent_id: str,
    tar: Path,
    diff_id: str,
    names: list[str],
    comment: str,
    changes: dict[str, Any],
    emit: Emit,
) -> dict[str, Any]:
    """Record ``tar`` (a layer whose sha256 is ``diff_id``) on top of the image ``parent_id`` as a
    new image named ``names``; the new image's row. ``tar`` is moved into the store."""
    parent = store.rows.get(parent_id)
    if parent is None:
        raise NotFoundError(
            f"the sandbox's image {parent_id} is no longer in the image store",
            hint="pull or import it again; a commit adds a layer on top of it",
        )
    size = tar.stat().st_size
    store.blobs.adopt(tar, diff_id)
    config = new_config(parent["config"], diff_id, comment, changes)
    cfg_bytes = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
    config_digest = store.blobs.put_bytes(cfg_bytes)
    layers = [Layer(x["digest"], int(x["size"]), x["media_type"]) for x in parent["layers"]]
    layers.append(Layer(diff_id, size, LAYER_TAR))
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(cfg_bytes)},
        "layers": [{"mediaType": x.media_type, "digest": x.digest, "size": x.size} for x in layers],
    }
    manifest_digest = store.blobs.put_bytes(json.dumps(manifest, separators=(",", ":")).encode())
    diff_ids = [*(x["diff_id"] for x in parent["layers"]), diff_id]
    parts = Parts(manifest, manifest_digest, config, config_digest, layers, diff_ids, parent["platform"], comment)
    return build(store, parts, names, emit, keep_owners=keep_owners())


def scratch(store: ImageStore, name: str) -> Path:
    store.tmp.mkdir(parents=True, exist_ok=True)
    return store.tmp / f"{name}-{os.urandom(8).hex()}.tar"
