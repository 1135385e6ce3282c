"""The unikraft provider's settings, typed, read from hutch's :class:`~hutch.config.Settings`
when the provider loads (they are resolved there: flag > ``HUTCH_UNIKRAFT_*`` > profile >
config file > default). The Service reads none of them.

The token and the metro are not settings of the daemon: each request's caller brings its
own (``hutch.credentials``), and the daemon's own environment or config file serves only
when none is brought; :mod:`hutch.providers.unikraft.api` reads those per call
(``resolve_token``, ``resolve_endpoint``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hutch.config import Settings

DEFAULT_IMAGE = "debian-slim:latest"
IMAGE_ENV = "UKC_SANDBOX_IMAGE"  # the image of the Unikraft sandbox skill's environment; wins over unikraft_image


@dataclass(frozen=True)
class UnikraftSettings:
    home: Path  # where run output (unikraft/<sandbox>/) and SSH keys (ssh/<sandbox>/) are kept
    image: str | None  # unikraft_image: the default image of a create without --image
    timeout: float  # unikraft_timeout: each platform request
    ready_timeout: float  # unikraft_ready_timeout: until a new instance's plugin answers
    output_cap: int  # output_cap: what is read back of a run that ended while the daemon was away
    ssh_connect: str  # unikraft_ssh_connect: HOST:PORT to dial for SSH instead of the fqdn
    ca_file: str  # unikraft_ca_file: a CA bundle for the TLS of SSH only

    @classmethod
    def of(cls, settings: Settings) -> UnikraftSettings:
        return cls(
            home=settings.home,
            image=settings.unikraft_image,
            timeout=settings.unikraft_timeout,
            ready_timeout=settings.unikraft_ready_timeout,
            output_cap=settings.output_cap,
            ssh_connect=settings.unikraft_ssh_connect,
            ca_file=settings.unikraft_ca_file,
        )

    def default_image(self) -> tuple[str, bool]:
        """The image of a create without ``--image``, and whether it is the built-in default."""
        chosen = os.environ.get(IMAGE_ENV) or self.image
        return (chosen, False) if chosen else (DEFAULT_IMAGE, True)
