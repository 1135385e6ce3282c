"""Network policies: what a sandbox may reach, and changes to a live sandbox's policy."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import BaseModel, Field, StrictInt, field_validator

from hutch.checks import MAX_ITEMS, check_count
from hutch.errors import InvalidError
from hutch.wire.build import network_policy

HOST_LABEL_RE = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
DEFAULT_PORTS = (80, 443)


def normalize_host(text: str, *, pattern: bool = False) -> str:
    """A host name as the policy compares it: lower case, no trailing dot, ASCII (IDNA).

    With ``pattern``, a leading ``*.`` is kept (it matches every name below the suffix).
    IP literals are refused: addresses are allowed with --allow-cidr.
    """
    raw = text.strip()
    wild = pattern and raw.startswith("*.")
    name = raw[2:] if wild else raw
    name = name.rstrip(".").lower()
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        pass
    else:
        raise InvalidError(f"{text!r} is an IP address, not a host name", hint=f"use --allow-cidr {name.strip('[]')}/32")
    try:
        name = name.encode("idna").decode("ascii") if not name.isascii() else name
    except UnicodeError as exc:
        raise InvalidError(f"invalid host name {text!r}", hint="use a name like example.com or *.example.org") from exc
    labels = name.split(".")
    if not name or len(name) > 253 or not all(HOST_LABEL_RE.fullmatch(label) for label in labels):
        raise InvalidError(f"invalid host name {text!r}", hint="use a name like example.com or *.example.org")
    if wild and len(labels) < 2:
        raise InvalidError(f"{text!r} is too wide a pattern", hint="name at least a domain: *.example.org")
    return ("*." if wild else "") + name


def host_matches(host: str, pattern: str) -> bool:
    """Exact name, or ``*.suffix`` for every name strictly below the suffix."""
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def _cidr_hint(text: str) -> str:
    """What to write instead: a range with bits set past its prefix is refused, not widened
    (``::1/32`` would be ``::/32``, which holds every IPv4-mapped address)."""
    try:
        wide = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return "e.g. --allow-cidr 203.0.113.0/24, or 203.0.113.7/32 (2001:db8::7/128) for one address"
    one = ipaddress.ip_interface(text).ip
    return f"it has bits set past its prefix: {one}/{one.max_prefixlen} is that address alone, {wide} the whole range"


class NetworkPolicy(BaseModel):
    """Egress of one sandbox. ``none``: loopback only. ``allowlist``: named hosts through hutch's
    proxy. ``open``: any public address through the proxy; private ranges only by CIDR."""

    mode: Literal["none", "allowlist", "open"] = "none"
    allow_hosts: list[str] = Field(default_factory=list)
    deny_hosts: list[str] = Field(default_factory=list)
    ports: list[StrictInt] = Field(default_factory=list)  # empty: 80 and 443 (allowlist), any (open)
    cidrs: list[str] = Field(default_factory=list)

    @field_validator("allow_hosts", "deny_hosts")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        check_count(v, MAX_ITEMS, "hosts")
        return sorted({normalize_host(h, pattern=True) for h in v})

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[int]) -> list[int]:
        check_count(v, MAX_ITEMS, "ports")
        for port in v:
            if not 1 <= port <= 65535:
                raise InvalidError(f"invalid port {port}", hint="ports are 1-65535, e.g. --allow-port 443")
        return sorted(set(v))

    @field_validator("cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        check_count(v, MAX_ITEMS, "address ranges")
        out = set()
        for text in v:
            try:
                out.add(str(ipaddress.ip_network(text.strip())))
            except ValueError as exc:
                raise InvalidError(f"invalid CIDR {text!r}", hint=_cidr_hint(text.strip())) from exc
        return sorted(out)

    @classmethod
    def build(
        cls,
        mode: str | None = None,
        allow_hosts: list[str] | tuple[str, ...] = (),
        ports: list[int] | tuple[int, ...] = (),
        cidrs: list[str] | tuple[str, ...] = (),
    ) -> NetworkPolicy:
        """A new sandbox's policy: allow rules without a mode mean an allowlist (built as every
        edge builds it: :func:`hutch.wire.build.network_policy`), then checked."""
        return cls.model_validate(network_policy(mode, allow_hosts, ports, cidrs)).check()

    def check(self) -> NetworkPolicy:
        if self.mode == "none" and (self.allow_hosts or self.ports or self.cidrs):
            raise InvalidError(
                "--allow-host, --allow-port and --allow-cidr need a network",
                hint="add --network allowlist (or drop --network none)",
            )
        return self

    @property
    def effective_ports(self) -> list[int] | None:
        """Allowed ports; None means any."""
        if self.ports:
            return self.ports
        return list(DEFAULT_PORTS) if self.mode == "allowlist" else None


class PolicyChange(BaseModel):
    """``hutch policy``: what to add to (or take from) a live sandbox's network policy."""

    mode: Literal["none", "allowlist", "open"] | None = None
    allow_hosts: list[str] | None = None
    deny_hosts: list[str] | None = None
    remove_hosts: list[str] | None = None
    ports: list[StrictInt] | None = None
    cidrs: list[str] | None = None
    remove_ports: list[StrictInt] | None = None
    remove_cidrs: list[str] | None = None
