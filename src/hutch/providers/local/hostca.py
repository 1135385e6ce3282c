"""The host's CA bundle in a sandbox (``--host-ca``, setting ``image_host_ca``).

Where outside TLS is intercepted by a proxy with a CA of its own (common in companies),
an image's trust store does not know that CA and every TLS request through hutch's egress
proxy fails to verify. With ``--host-ca`` the bundle this machine trusts is placed
read-only at :data:`PATH` inside the sandbox and the usual variables point at it (OpenSSL
and Python's ``ssl``, requests, pip, curl, git, Node). The image's own store is left as it
is: a program that ignores these variables keeps the image's trust.

The setting ``image_host_ca`` gives it to every image sandbox: ``system`` (the machine's
default bundle) or the path of a bundle; ``--host-ca`` then uses that path too.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from hutch.config import Settings
from hutch.errors import InvalidError, UnavailableError
from hutch.models import SandboxRecord
from hutch.providers.local.host import memfd

PATH = "/.hutch/host-ca.crt"
VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS")
MAX_BYTES = 16 << 20


def source(settings: Settings) -> Path:
    """The bundle to add: the setting's path, else the machine's default bundle."""
    if settings.image_host_ca not in ("", "system"):
        return Path(settings.image_host_ca)
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise UnavailableError(
        "this machine has no CA bundle to add (--host-ca)",
        hint="set image_host_ca (HUTCH_IMAGE_HOST_CA) to the bundle's path",
    )


def wanted(rec: SandboxRecord, settings: Settings) -> bool:
    return bool(rec.spec.host_ca or (rec.spec.image and settings.image_host_ca))


def bind(rec: SandboxRecord, settings: Settings, fds: list[int]) -> tuple[list[str], dict[str, str]]:
    """bwrap's arguments and the environment that put the host's bundle in ``rec``'s sandbox
    (nothing when it does not want it); the descriptor it opens is appended to ``fds``."""
    if not wanted(rec, settings):
        return [], {}
    path = source(settings)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InvalidError(f"cannot read the host CA bundle {path}: {exc}", hint="check image_host_ca") from exc
    if len(data) > MAX_BYTES or b"-----BEGIN CERTIFICATE-----" not in data:
        raise InvalidError(f"{path} is not a CA bundle (PEM certificates, at most 16 MiB)", hint="check image_host_ca")
    fds.append(memfd("host-ca.crt", data))
    return ["--perms", "0444", "--ro-bind-data", str(fds[-1]), PATH], dict.fromkeys(VARIABLES, PATH)
