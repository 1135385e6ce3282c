"""Placeholder secrets: the sandbox holds ``hutch-secret-NAME-<random>``, the egress proxy
holds the value and puts it in requests to the hosts the secret is bound to.

A :class:`Vault` is one sandbox's: its placeholders, their values (in the daemon's memory
only: after a daemon restart they are gone, and a request that needs one is refused), the
hosts each is bound to, which may be replaced in bodies, the hosts exempt from interception,
and the sandbox's CA. :meth:`Vault.rewrite` decides one piece of a request (its target, a
header, its body): a placeholder bound to the request's host becomes the value; a
placeholder going anywhere else blocks the request.
"""

from __future__ import annotations

import base64
import secrets as random
from dataclasses import dataclass, field
from pathlib import Path

from hutch.config import Settings
from hutch.models import SandboxSpec
from hutch.policy import host_matches
from hutch.providers.local import sandboxca
from hutch.providers.local.sandboxca import SandboxCA

Echo = list[tuple[bytes, bytes]]
MARK = b"hutch-secret-"  # every placeholder starts with it: the fast test of a piece of a request


def placeholder(name: str) -> str:
    return f"hutch-secret-{name}-{random.token_hex(16)}"


@dataclass(frozen=True)
class Secret:
    name: str
    placeholder: bytes
    value: bytes | None  # None: the daemon restarted since the sandbox was made
    hosts: tuple[str, ...]
    body: bool  # replaced in request bodies too


@dataclass
class Outcome:
    """What :meth:`Vault.rewrite` did to a piece of a request."""

    data: bytes
    replaced: list[str] = field(default_factory=list)  # secret names put in
    blocked: list[str] = field(default_factory=list)  # secret names sent where they are not bound
    missing: list[str] = field(default_factory=list)  # bound, but the value is not held any more
    echo: Echo = field(default_factory=list)  # (what was sent, what the sandbox had): undone in the response


class Vault:
    def __init__(self, items: list[Secret], no_intercept: list[str], ca: SandboxCA) -> None:
        self.items, self.no_intercept, self.ca = items, no_intercept, ca
        self.longest = max((len(s.placeholder) for s in items), default=0)

    @classmethod
    def of(cls, spec: SandboxSpec, placeholders: dict[str, str], ca: SandboxCA) -> Vault:
        """From a spec (``secrets`` hold the values at create; empty after a restart)."""
        items = [
            Secret(
                name,
                placeholders[name].encode(),
                spec.secrets[name].encode() if name in spec.secrets else None,
                tuple(hosts),
                name in spec.secret_body,
            )
            for name, hosts in spec.secret_hosts.items()
            if name in placeholders
        ]
        return cls(items, list(spec.no_intercept), ca)

    @classmethod
    def restore(cls, spec: SandboxSpec, placeholders: dict[str, str], sdir: Path) -> Vault:
        """After a daemon restart: the same placeholders and CA, no values (a CA gone: a new one the
        sandbox does not trust, so its HTTPS fails closed)."""
        ca = SandboxCA.load(sdir) or SandboxCA.new("lost")
        return cls.of(spec.model_copy(update={"secrets": {}}), placeholders, ca)

    def exempt(self, host: str) -> bool:
        """``--no-intercept``: relayed unopened (placeholders to it cannot be checked)."""
        return any(host_matches(host, pattern) for pattern in self.no_intercept)

    def bound(self, secret: Secret, host: str) -> bool:
        return any(host_matches(host, pattern) for pattern in secret.hosts)

    def replaces_body(self, host: str) -> bool:
        return any(s.body and self.bound(s, host) for s in self.items)

    def rewrite(self, data: bytes, host: str, *, body: bool = False) -> Outcome:
        out = Outcome(data)
        if MARK not in data:
            return out
        for secret in self.items:
            if secret.placeholder not in out.data:
                continue
            if not self.bound(secret, host):
                out.blocked.append(secret.name)
            elif body and not secret.body:
                continue  # to its own host, in a body it is not replaced in: the placeholder goes as it is
            elif secret.value is None:
                out.missing.append(secret.name)
            else:
                out.data = out.data.replace(secret.placeholder, secret.value)
                out.replaced.append(secret.name)
                out.echo.append((secret.value, secret.placeholder))
        return out

    def rewrite_header(self, value: bytes, host: str) -> Outcome:
        """A header value; in ``Basic`` credentials (git, package indexes: ``user:token`` in
        base64) the placeholder is found and replaced inside the encoding too."""
        if value[:6].lower() != b"basic ":
            return self.rewrite(value, host)
        try:
            raw = base64.b64decode(value[6:].strip(), validate=True)
        except ValueError:
            return self.rewrite(value, host)
        inner = self.rewrite(raw, host)
        if not (inner.replaced or inner.blocked or inner.missing):
            return self.rewrite(value, host)
        sent = base64.b64encode(inner.data)
        echo = [(sent, value[6:].strip()), *inner.echo]
        return Outcome(value[:6] + sent, inner.replaced, inner.blocked, inner.missing, echo)


def scrub(data: bytes, echo: Echo) -> bytes:
    """A response: what was sent in place of placeholders, echoed back, becomes what the sandbox had."""
    for sent, had in echo:
        if sent in data:
            data = data.replace(sent, had)
    return data


@dataclass
class Armed:
    """What create adds for a sandbox's placeholder secrets (nothing when it has none)."""

    vault: Vault | None = None
    placeholders: dict[str, str] = field(default_factory=dict)  # what the sandbox holds instead of values
    args: list[str] = field(default_factory=list)  # bwrap's: its CA in its trust
    env: dict[str, str] = field(default_factory=dict)


def prepare(spec: SandboxSpec, sandbox_id: str, sdir: Path, settings: Settings, rootfs: Path | None, fds: list[int]) -> Armed:
    """A new sandbox's placeholders and CA (its key saved in ``sdir``, on the host)."""
    if not spec.secret_hosts:
        return Armed()
    ca = SandboxCA.new(sandbox_id)
    ca.save(sdir)
    made = {name: placeholder(name) for name in spec.secret_hosts}
    args, env = sandboxca.bind(ca, settings, rootfs, fds)
    return Armed(Vault.of(spec, made, ca), made, args, env)
