"""Importing an image the caller uploaded: an OCI layout (``oci-archive:``, ``oci:DIR``), a
``docker save`` archive (``docker-archive:``), or a root filesystem tar (``rootfs:``, ``-``).

The upload is read as a stream (never held whole): the entries of an archive go straight into
the blob store, each ``blobs/sha256/<hex>`` verified against its name as it is written, every
other file hashed and stored by its digest, small JSON documents (``index.json``,
``manifest.json``, configs) kept in memory (bounded). Then the image is found in what arrived
(by ``REF`` when the layout holds several, else the host's platform) and built like a pulled
one. A root filesystem becomes a one-layer image with a minimal config (``PATH`` set).
Blocking: run in a worker thread.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tarfile
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from hutch.errors import InvalidError, NotFoundError
from hutch.imageref import check_digest
from hutch.providers.local.images import manifests as m
from hutch.providers.local.images.blobs import CHUNK, put_stream
from hutch.providers.local.images.build import Emit, Parts, ensure_layer
from hutch.providers.local.images.commit import apply_changes
from hutch.providers.local.images.store import ImageStore

Format = Literal["oci", "docker", "rootfs"]
MAX_ENTRIES = 100_000  # entries of an uploaded archive
MAX_DOCS = 64 << 20  # bytes of the JSON documents kept in memory, together
REF_NAME = "org.opencontainers.image.ref.name"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_BLOB_RE = re.compile(r"(?:\./)?blobs/sha256/([0-9a-f]{64})")
MAGIC = {b"\x1f\x8b": m.OCI_LAYER + "+gzip", b"\x28\xb5\x2f\xfd": m.OCI_LAYER + "+zstd"}
REFUSED_MAGIC = {b"\xfd7zXZ\x00": "xz", b"BZh": "bzip2"}


@dataclass
class Received:
    """What an uploaded archive held: blobs by path, small documents by path."""

    blobs: dict[str, str] = field(default_factory=dict)  # member path -> digest
    docs: dict[str, bytes] = field(default_factory=dict)
    size: int = 0


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise InvalidError(f"{what} is not JSON", hint="the archive is damaged or not an image") from None


def receive(store: ImageStore, stream: IO[bytes], limit: int, emit: Emit) -> Received:
    """Read an uploaded tar (an OCI layout or a docker save archive) into the blob store."""
    got = Received()
    docs_size = 0
    try:
        tar = tarfile.open(fileobj=stream, mode="r|*")  # noqa: SIM115 - closed below
    except tarfile.TarError as exc:
        raise InvalidError(
            f"the upload is not a tar archive: {exc}", hint="oci-archive:, docker-archive: take tar files"
        ) from None
    with tar:
        try:
            for count, member in enumerate(tar, 1):
                if count > MAX_ENTRIES:
                    raise InvalidError(f"the archive has more than {MAX_ENTRIES} entries")
                if not member.isfile():
                    continue
                got.size += member.size
                if got.size > limit:
                    raise InvalidError(f"the archive is larger than {limit} bytes", hint="nothing was kept")
                f = tar.extractfile(member)
                if f is None:
                    continue
                name = member.name.removeprefix("./")
                found = _BLOB_RE.fullmatch(name)
                if found is None and name.endswith((".json", "oci-layout", "repositories")) and member.size <= MAX_DOCS:
                    docs_size += member.size
                    if docs_size > MAX_DOCS:
                        raise InvalidError(f"the archive's JSON documents are larger than {MAX_DOCS} bytes together")
                    got.docs[name] = f.read()
                    continue
                digest, _ = put_stream(store.blobs, f.read, m.MAX_BLOB, f"archive entry {name[:100]}")
                if found is not None and digest[7:] != found.group(1):
                    raise InvalidError(
                        f"archive entry {name} has digest {digest}",
                        hint="the archive is corrupted (a blob's content does not match its name); nothing was kept",
                    )
                got.blobs[name] = digest
        except tarfile.TarError as exc:
            raise InvalidError(f"the archive is damaged: {exc}", hint="nothing was kept") from None
    return got


def _layer_type(store: ImageStore, digest: str) -> str:
    with store.blobs.path(digest).open("rb") as f:
        head = f.read(8)
    for magic, name in REFUSED_MAGIC.items():
        if head.startswith(magic):
            raise InvalidError(
                f"a {name}-compressed layer or root filesystem is not supported",
                hint="use an uncompressed, gzip or zstd tar (decompress it first: xz -dc FILE | hutch image import - NAME)",
            )
    return next((name for magic, name in MAGIC.items() if head.startswith(magic)), m.OCI_LAYER)


def _blob_doc(store: ImageStore, digest: str, what: str) -> dict[str, Any]:
    if not store.blobs.has(digest):
        raise InvalidError(f"the archive lacks {what} {digest}", hint="the layout is incomplete")
    doc = m.load(store.blobs.read(digest, m.MAX_CONFIG), what)
    return doc


def oci_parts(store: ImageStore, got: Received, ref: str | None, platform: str) -> tuple[Parts, list[str]]:
    """The image of an OCI layout (by ``ref`` when several), and the ref names it carries."""
    if "index.json" not in got.docs:
        raise InvalidError("the archive has no index.json", hint="oci-archive: and oci: take an OCI image layout")
    index = m.load(got.docs["index.json"], "index.json")
    entries = [e for e in index.get("manifests") or [] if isinstance(e, dict)]
    if ref is not None:
        named = [e for e in entries if (e.get("annotations") or {}).get(REF_NAME) == ref]
        if not named:
            have = sorted({str((e.get("annotations") or {}).get(REF_NAME)) for e in entries} - {"None"})
            raise NotFoundError(f"the layout has no image named {ref!r} (it has: {', '.join(have) or 'no names'})")
        entries = named
    if not entries:
        raise InvalidError("the layout's index.json lists no image")
    names = sorted({str((e.get("annotations") or {}).get(REF_NAME)) for e in entries} - {"None"})
    if ref is None and len(entries) > 1 and not any(e.get("platform") for e in entries):
        raise InvalidError(
            f"the layout holds {len(entries)} images ({', '.join(names[:10]) or 'unnamed'})",
            hint="name one: oci:DIR:REF or oci-archive:PATH:REF",
        )
    if len(entries) == 1 and not entries[0].get("platform"):
        entry = entries[0]
    else:
        digest, _ = m.choose({"manifests": entries}, platform, "the layout")
        entry = next(e for e in entries if e.get("digest") == digest)
    digest = check_digest(entry.get("digest", ""), "manifest digest")
    doc = _blob_doc(store, digest, "manifest")
    if m.media_type(doc, entry.get("mediaType")) in m.INDEXES:
        digest, _ = m.choose(doc, platform, "the layout")
        doc = _blob_doc(store, digest, "manifest")
    man = m.parse_manifest(doc)
    for layer in man.layers:
        if not store.blobs.has(layer.digest):
            raise InvalidError(f"the archive lacks layer {layer.digest}", hint="the layout is incomplete")
    config, _c, diff_ids, plat = m.parse_config(_blob_doc_bytes(store, man.config_digest), platform, "the image")
    names = [str(e["annotations"][REF_NAME]) for e in entries if (e.get("annotations") or {}).get(REF_NAME)]
    return Parts(doc, digest, config, man.config_digest, man.layers, diff_ids, plat, "import oci"), names


def _blob_doc_bytes(store: ImageStore, digest: str) -> bytes:
    if not store.blobs.has(digest):
        raise InvalidError(f"the archive lacks the config {digest}", hint="the archive is incomplete")
    return store.blobs.read(digest, m.MAX_CONFIG)


def docker_parts(store: ImageStore, got: Received, platform: str) -> tuple[Parts, list[str]]:
    """The (first) image of a ``docker save`` archive, and its RepoTags."""
    if "manifest.json" not in got.docs:
        raise InvalidError("the archive has no manifest.json", hint="docker-archive: takes what docker save writes")
    doc = _json(got.docs["manifest.json"], "manifest.json")
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict):
        raise InvalidError("manifest.json lists no image")
    entry = doc[0]
    config_name = str(entry.get("Config", ""))
    layer_names = entry.get("Layers")
    if not isinstance(layer_names, list):
        raise InvalidError("manifest.json has no Layers")
    config_bytes = got.docs.get(config_name)
    if config_bytes is None and config_name in got.blobs:
        config_bytes = store.blobs.read(got.blobs[config_name], m.MAX_CONFIG)
    if config_bytes is None:
        raise InvalidError(f"the archive lacks its config {config_name[:100]!r}")
    config_digest = store.blobs.put_bytes(config_bytes)
    config, _c, diff_ids, plat = m.parse_config(config_bytes, platform, "the image")
    layers = []
    for name in layer_names:
        digest = got.blobs.get(str(name).removeprefix("./"))
        if digest is None:
            raise InvalidError(f"the archive lacks layer {str(name)[:100]!r}")
        size = store.blobs.path(digest).stat().st_size
        layers.append(m.Layer(digest, size, _layer_type(store, digest)))
    manifest, manifest_digest = synth_manifest(config_digest, len(config_bytes), layers)
    tags = [str(t) for t in entry.get("RepoTags") or [] if isinstance(t, str)]
    return Parts(manifest, manifest_digest, config, config_digest, layers, diff_ids, plat, "import docker-archive"), tags


def synth_manifest(config_digest: str, config_size: int, layers: list[m.Layer]) -> tuple[dict[str, Any], str]:
    """An OCI manifest for an image that arrived without one."""
    doc = {
        "schemaVersion": 2,
        "mediaType": m.OCI_MANIFEST,
        "config": {"mediaType": m.OCI_CONFIG, "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size} for layer in layers],
    }
    data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return doc, "sha256:" + hashlib.sha256(data).hexdigest()


def with_changes(store: ImageStore, parts: Parts, changes: dict[str, Any] | None) -> Parts:
    """``parts`` with its config changed (``hutch image import --env/--workdir/--user/--cmd/--entrypoint``):
    a new config blob and manifest; the layers are the same."""
    if not changes:
        return parts
    config = apply_changes(parts.config, changes)
    config_bytes = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
    config_digest = store.blobs.put_bytes(config_bytes)
    manifest, manifest_digest = synth_manifest(config_digest, len(config_bytes), list(parts.layers))
    return dataclasses.replace(
        parts, manifest=manifest, manifest_digest=manifest_digest, config=config, config_digest=config_digest
    )


def rootfs_parts(store: ImageStore, stream: IO[bytes], limit: int, platform: str, emit: Emit, *, keep_owners: bool) -> Parts:
    """A root filesystem tar (plain, gzip or zstd) as a one-layer image."""
    digest, size = put_stream(store.blobs, stream.read, limit, "the root filesystem")
    if size == 0:
        raise InvalidError("the root filesystem upload is empty", hint="hutch image import rootfs:DIR NAME, or pipe a tar to -")
    media_type = _layer_type(store, digest)
    layer = m.Layer(digest, size, media_type)
    diff_id, _ = ensure_layer(store, layer, None, keep_owners)  # unpacking tells its diff_id
    os_name, arch, *variant = platform.split("/")
    config: dict[str, Any] = {
        "architecture": arch,
        "os": os_name,
        **({"variant": variant[0]} if variant else {}),
        "config": {"Env": [DEFAULT_PATH]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_bytes = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
    config_digest = store.blobs.put_bytes(config_bytes)
    layers = [layer]
    manifest, manifest_digest = synth_manifest(config_digest, len(config_bytes), layers)
    return Parts(manifest, manifest_digest, config, config_digest, layers, [diff_id], platform, "import rootfs")


__all__ = ["CHUNK", "Format", "docker_parts", "oci_parts", "receive", "rootfs_parts", "with_changes"]
