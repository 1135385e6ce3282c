"""Manifests, indexes and configs (OCI image spec and Docker schema 2): checked, then read.

Everything here is input from outside (a registry, an archive): sizes are bounded, digests are
checked before they are used as file names, and only what hutch uses is read. An index (or a
Docker manifest list) is resolved to the host's platform; a manifest for another architecture
is a clear error.
"""

from __future__ import annotations

import json
import platform as _platform
from dataclasses import dataclass
from typing import Any

from hutch.errors import InvalidError, NotFoundError
from hutch.imageref import check_digest
from hutch.providers.local.images.types import ImageConfig

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
INDEXES = (OCI_INDEX, DOCKER_LIST)
MANIFESTS = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((*MANIFESTS, *INDEXES))

OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
LAYER_TYPES = {
    OCI_LAYER: OCI_LAYER,
    OCI_LAYER + "+gzip": OCI_LAYER + "+gzip",
    OCI_LAYER + "+zstd": OCI_LAYER + "+zstd",
    "application/vnd.docker.image.rootfs.diff.tar": OCI_LAYER,
    "application/vnd.docker.image.rootfs.diff.tar.gzip": OCI_LAYER + "+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.zstd": OCI_LAYER + "+zstd",
}  # what a layer's media type means for unpacking (the OCI name)

MAX_MANIFEST = 4 << 20  # bytes of a manifest or an index
MAX_CONFIG = 16 << 20  # bytes of an image config
MAX_LAYERS = 256
MAX_BLOB = 64 << 30  # bytes of one layer
MAX_INDEX_ENTRIES = 1024

ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm", "armv6l": "arm",
          "i686": "386", "i386": "386", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}  # fmt: skip


def host_platform() -> str:
    """``linux/amd64``, ``linux/arm64`` ...: what images must be built for to run here."""
    machine = _platform.machine().lower()
    return f"linux/{ARCHES.get(machine, machine)}"


@dataclass(frozen=True)
class Layer:
    digest: str
    size: int
    media_type: str  # the OCI name (LAYER_TYPES' values)


@dataclass(frozen=True)
class Manifest:
    config_digest: str
    config_size: int
    layers: tuple[Layer, ...]


def load(data: bytes, what: str) -> dict[str, Any]:
    if len(data) > MAX_MANIFEST:
        raise InvalidError(f"the {what} is larger than {MAX_MANIFEST} bytes", hint="such a manifest is refused")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidError(f"the {what} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidError(f"the {what} is not a JSON object")
    return doc


def media_type(doc: dict[str, Any], header: str | None = None) -> str:
    """A manifest's media type: its ``mediaType``, else the HTTP ``Content-Type``, else guessed from its shape."""
    mt = doc.get("mediaType") or (header or "").split(";")[0].strip()
    if not mt or mt in ("application/json", "application/octet-stream"):
        mt = OCI_INDEX if "manifests" in doc else OCI_MANIFEST
    return str(mt)


def _size(value: object, limit: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise InvalidError(f"{what} has an invalid size {str(value)[:40]!r}", hint=f"at most {limit} bytes")
    return value


def parse_manifest(doc: dict[str, Any], what: str = "manifest") -> Manifest:
    if doc.get("schemaVersion") != 2:
        raise InvalidError(f"the {what} is not schema version 2", hint="only OCI and Docker schema 2 images are supported")
    config = doc.get("config")
    layers = doc.get("layers")
    if not isinstance(config, dict) or not isinstance(layers, list):
        raise InvalidError(f"the {what} has no config or no layers")
    if len(layers) > MAX_LAYERS:
        raise InvalidError(f"the {what} has {len(layers)} layers; at most {MAX_LAYERS} are supported")
    out = []
    for layer in layers:
        if not isinstance(layer, dict):
            raise InvalidError(f"the {what} has a layer that is not an object")
        mt = str(layer.get("mediaType", ""))
        if mt not in LAYER_TYPES:
            raise InvalidError(f"the {what} has a layer of type {mt[:100]!r}", hint="supported: tar, tar+gzip, tar+zstd layers")
        if layer.get("urls"):
            raise InvalidError(f"the {what} has a foreign layer (urls)", hint="foreign layers are not fetched")
        digest = check_digest(layer.get("digest", ""), "layer digest")
        out.append(Layer(digest, _size(layer.get("size"), MAX_BLOB, f"layer {digest}"), LAYER_TYPES[mt]))
    cdigest = check_digest(config.get("digest", ""), "config digest")
    return Manifest(cdigest, _size(config.get("size"), MAX_CONFIG, "the config"), tuple(out))


def _platform_of(entry: dict[str, Any]) -> str:
    p = entry.get("platform") or {}
    if not isinstance(p, dict):
        return "?"
    text = f"{p.get('os', '?')}/{p.get('architecture', '?')}"
    return text + (f"/{p['variant']}" if p.get("variant") else "")


def choose(index: dict[str, Any], want: str, ref: str) -> tuple[str, str | None]:
    """The digest (and media type) of the index entry for platform ``want`` (``os/arch[/variant]``)."""
    entries = index.get("manifests")
    if not isinstance(entries, list) or len(entries) > MAX_INDEX_ENTRIES:
        raise InvalidError(f"the index of {ref} has no valid manifest list")
    w_os, w_arch, *w_variant = want.split("/")
    found: list[str] = []
    fallback = None
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        plat = _platform_of(entry)
        if plat.startswith("unknown/"):  # attestations and signatures
            continue
        found.append(plat)
        p_os, p_arch, *p_variant = plat.split("/")
        if (p_os, p_arch) != (w_os, w_arch):
            continue
        if not w_variant or p_variant == w_variant:
            return check_digest(entry.get("digest", ""), "manifest digest"), entry.get("mediaType")
        fallback = fallback or entry
    if fallback is not None:
        return check_digest(fallback.get("digest", ""), "manifest digest"), fallback.get("mediaType")
    have = ", ".join(sorted(set(found))[:20]) or "none"
    raise NotFoundError(
        f"{ref} has no image for {want} (it has: {have})",
        hint="this machine runs only images built for its own architecture; use an image published for it",
    )


def parse_config(data: bytes, want: str | None, ref: str) -> tuple[dict[str, Any], ImageConfig, list[str], str]:
    """An image config: the document, what sandboxes take from it, its diff_ids and its platform.
    With ``want``, a config for another platform is refused."""
    if len(data) > MAX_CONFIG:
        raise InvalidError(f"the config of {ref} is larger than {MAX_CONFIG} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidError(f"the config of {ref} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidError(f"the config of {ref} is not a JSON object")
    plat = f"{doc.get('os', 'linux')}/{doc.get('architecture', '?')}" + (f"/{doc['variant']}" if doc.get("variant") else "")
    if want is not None and plat.split("/")[:2] != want.split("/")[:2]:
        raise InvalidError(
            f"{ref} is an image for {plat}; this machine runs {want}",
            hint="use an image (or a tag of a multi-platform image) built for this machine's architecture",
        )
    rootfs = doc.get("rootfs") or {}
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list):
        raise InvalidError(f"the config of {ref} has no rootfs.diff_ids")
    diff_ids = [check_digest(d, "diff_id") for d in diff_ids]
    return doc, image_config(doc), diff_ids, plat


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def image_config(doc: dict[str, Any]) -> ImageConfig:
    """The parts of a config document applied as sandbox defaults."""
    cfg = doc.get("config") or {}
    if not isinstance(cfg, dict):
        cfg = {}
    labels = cfg.get("Labels") or {}
    return ImageConfig(
        env=_strings(cfg.get("Env")),
        entrypoint=_strings(cfg.get("Entrypoint")),
        cmd=_strings(cfg.get("Cmd")),
        workdir=str(cfg["WorkingDir"]) if cfg.get("WorkingDir") else None,
        user=str(cfg["User"]) if cfg.get("User") else None,
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
    )
