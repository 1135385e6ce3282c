"""Image references: what a user may write after ``--image``, ``hutch image pull`` or ``import``.

Two families:

- a **registry reference**, the grammar of the distribution project (``docker pull``'s):
  ``[DOMAIN[:PORT]/]PATH[:TAG][@sha256:HEX]``. A first component with a ``.`` or a ``:``, or
  ``localhost``, is a domain; otherwise the domain is ``docker.io`` and a one-component path
  gets ``library/`` (``python:3.12`` is ``docker.io/library/python:3.12``). No tag and no digest
  means ``:latest``. Names a user gives to imported images are registry references too.
- a **local source**, read on the client side and uploaded: ``oci-archive:PATH[:REF]``,
  ``oci:DIR[:REF]`` (an OCI image layout), ``docker-archive:PATH`` (``docker save``),
  ``rootfs:PATH`` (a root filesystem directory or tarball) and ``-`` (a root filesystem tar on
  standard input).

Standard library only and cheap: the CLI parses references before it talks to the daemon.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from hutch.errors import InvalidError

DEFAULT_DOMAIN = "docker.io"
LEGACY_DOMAIN = "index.docker.io"
DOCKER_HUB_API = "registry-1.docker.io"  # where docker.io's registry API answers
MAX_REF = 512  # characters of a whole reference
MAX_NAME = 255  # characters of DOMAIN/PATH (the distribution project's limit)
LOCAL_TRANSPORTS = ("oci-archive", "oci", "docker-archive", "rootfs")
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH_RE = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]{{1,5}})?")
_TAG_RE = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_ID_RE = re.compile(r"(?:sha256:)?([0-9a-f]{6,64})")
FORMS_HINT = (
    "e.g. python:3.12-slim, docker.io/library/debian:bookworm, localhost:5000/team/img:tag, NAME@sha256:<64 hex>; "
    "or oci-archive:PATH[:REF], oci:DIR[:REF], docker-archive:PATH, rootfs:PATH"
)


@dataclass(frozen=True)
class RegistryRef:
    """A reference to an image in a registry (or a name in the local store)."""

    domain: str  # "docker.io", "localhost:5000"
    path: str  # "library/python", "team/img"
    tag: str | None = None
    digest: str | None = None  # "sha256:..."

    @property
    def repository(self) -> str:
        """``DOMAIN/PATH``: where the image lives, without tag or digest."""
        return f"{self.domain}/{self.path}"

    @property
    def reference(self) -> str:
        """What the registry's manifest endpoint is asked for: the digest, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def name(self) -> str:
        """The canonical name the store records: ``DOMAIN/PATH:TAG`` or ``DOMAIN/PATH@DIGEST``."""
        return f"{self.repository}@{self.digest}" if self.digest else f"{self.repository}:{self.tag or 'latest'}"

    @property
    def api_host(self) -> str:
        """The host (and port) of the registry's HTTP API."""
        return DOCKER_HUB_API if self.domain == DEFAULT_DOMAIN else self.domain

    @property
    def loopback(self) -> bool:
        """A registry on this machine: plain http is allowed for it."""
        host = self.domain[: self.domain.index("]") + 1] if self.domain.startswith("[") else self.domain.split(":")[0]
        return host in LOOPBACK

    def with_tag(self, tag: str) -> RegistryRef:
        return RegistryRef(self.domain, self.path, tag, None)

    def __str__(self) -> str:
        text = f"{self.repository}:{self.tag}" if self.tag else self.repository
        return f"{text}@{self.digest}" if self.digest else (text if self.tag else f"{text}:latest")


Transport = Literal["oci-archive", "oci", "docker-archive", "rootfs", "stdin"]


@dataclass(frozen=True)
class LocalRef:
    """An image (or a root filesystem) on the caller's machine, uploaded to the daemon."""

    transport: Transport
    path: str  # "" for stdin
    ref: str | None = None  # oci:DIR:REF: which image of the layout (its org.opencontainers.image.ref.name)

    def __str__(self) -> str:
        if self.transport == "stdin":
            return "-"
        return f"{self.transport}:{self.path}" + (f":{self.ref}" if self.ref else "")


ImageRef = RegistryRef | LocalRef


def _invalid(text: str, why: str) -> InvalidError:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return InvalidError(f"invalid image reference {shown!r}: {why}", hint=FORMS_HINT)


def parse(text: str) -> ImageRef:
    """Any reference: a local source (``oci-archive:``, ``oci:``, ``docker-archive:``,
    ``rootfs:``, ``-``) or a registry reference."""
    if text == "-":
        return LocalRef("stdin", "")
    transport, sep, rest = text.partition(":")
    if sep and transport in LOCAL_TRANSPORTS:
        if not rest:
            raise _invalid(text, f"{transport}: needs a path")
        if len(text) > 4096 or "\0" in text:
            raise _invalid(text, "the path is too long or has a NUL byte")
        if transport in ("oci", "oci-archive"):
            path, ref = rest, None
            if not os.path.exists(rest) and ":" in rest:
                path, _, ref = rest.rpartition(":")
                if not ref:
                    raise _invalid(text, "the image name after the directory is empty")
            return LocalRef(transport, path, ref)  # type: ignore[arg-type]  # one of the two
        return LocalRef(transport, rest)  # type: ignore[arg-type]  # one of the local transports
    return parse_registry(text)


def parse_registry(text: str) -> RegistryRef:
    """A registry reference (also a name for an imported image), normalised like ``docker pull``'s."""
    if not text or len(text) > MAX_REF:
        raise _invalid(text, "empty" if not text else f"longer than {MAX_REF} characters")
    if any(ch.isspace() for ch in text) or not text.isprintable():
        raise _invalid(text, "it has spaces or control characters")
    rest, digest = text, None
    if "@" in text:
        rest, _, digest = text.partition("@")
        if not _DIGEST_RE.fullmatch(digest):
            raise _invalid(text, "a digest is sha256: and 64 lowercase hex digits")
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG_RE.fullmatch(tag):
            raise _invalid(text, "a tag is up to 128 letters, digits, '_', '.' or '-' (not first)")
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        domain, path = first, remainder
        if not _DOMAIN_RE.fullmatch(domain):
            raise _invalid(text, f"{domain!r} is not a registry host[:port]")
        if domain == LEGACY_DOMAIN:
            domain = DEFAULT_DOMAIN
    else:
        domain, path = DEFAULT_DOMAIN, rest
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = "library/" + path
    if not _PATH_RE.fullmatch(path):
        why = "a repository name is lowercase letters, digits and separators (. _ __ -), in /-separated parts"
        raise _invalid(text, why)
    if len(domain) + 1 + len(path) > MAX_NAME:
        raise _invalid(text, f"the repository name is longer than {MAX_NAME} characters")
    return RegistryRef(domain, path, tag, digest)


def image_id(text: str) -> str | None:
    """The hex prefix ``text`` names when it could be an image id (``sha256:HEX`` or 6-64 hex digits)."""
    m = _ID_RE.fullmatch(text)
    return m.group(1) if m else None


def familiar(name: str) -> str:
    """How a canonical name is shown: ``docker.io/library/python:3.12`` as ``python:3.12``,
    ``docker.io/team/img:1`` as ``team/img:1``; other registries in full."""
    prefix = DEFAULT_DOMAIN + "/"
    if not name.startswith(prefix):
        return name
    short = name[len(prefix) :]
    return short[len("library/") :] if short.startswith("library/") and "/" not in short[len("library/") :] else short


def check_digest(digest: str, what: str = "digest") -> str:
    """A ``sha256:`` digest as manifests carry it, checked (anything else is refused, never used as a path)."""
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise InvalidError(f"invalid {what} {str(digest)[:80]!r}", hint="only sha256 digests (sha256: and 64 hex digits)")
    return digest
