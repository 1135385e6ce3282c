"""E2B's network update (``PUT /sandboxes/{id}/network``, the SDK's ``update_network``) as a
hutch network policy, which replaces the sandbox's whole policy as E2B's does.

E2B: ``allowOut`` (hosts, IPs, CIDRs) always wins over ``denyOut`` (IPs, CIDRs); denying
``0.0.0.0/0`` (or ``allow_internet_access: false``) closes everything not allowed; with no
deny-all the sandbox has the internet. hutch: ``none``, ``allowlist`` (named hosts, ports 80
and 443 unless told, plus ``cidrs``) or ``open`` (any public address, private ranges only by
``cidrs``), all through its egress proxy, which resolves names itself.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from hutch.errors import InvalidError
from hutch.netpolicy import NetworkPolicy

ALL_TRAFFIC = ("0.0.0.0/0", "::/0")
HINT = "see docs/e2b.md (network updates)"


def _strings(body: dict[str, Any], key: str) -> list[str]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidError(f"{key} must be a list of strings", hint=HINT)
    return [v.strip() for v in value]


def _network(text: str) -> str | None:
    """``text`` as a CIDR, or None when it is a host name."""
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        return None


def policy_of(body: dict[str, Any]) -> NetworkPolicy:
    """The hutch policy an E2B ``SandboxNetworkUpdateConfig`` asks for; what hutch cannot
    enforce is refused (InvalidError: the SDK's ``InvalidArgumentException``), never ignored."""
    unknown = set(body) - {"allowOut", "denyOut", "dnsServers", "egressProxy", "rules", "allow_internet_access"}
    if unknown:
        raise InvalidError(f"unknown network field {sorted(unknown)[0]!r}", hint=HINT)
    if body.get("egressProxy") is not None:
        raise InvalidError(
            "egress_proxy is not supported by hutch: every sandbox's traffic already goes through hutch's own "
            "egress proxy, which enforces the policy",
            hint=HINT,
        )
    if body.get("rules"):
        raise InvalidError(
            "network rules (request transforms) are not supported by hutch; hutch injects credentials "
            "with placeholder secrets instead (hutch create --secret NAME --secret-host NAME=HOST)",
            hint=HINT,
        )
    if _strings(body, "dnsServers"):
        raise InvalidError(
            "dns_servers is not supported by hutch: sandboxes reach no DNS server, hutch's egress proxy "
            "resolves the host names allow_out names",
            hint=HINT,
        )
    internet = body.get("allow_internet_access")
    if internet is not None and not isinstance(internet, bool):
        raise InvalidError("allow_internet_access must be true or false", hint=HINT)
    allow = _strings(body, "allowOut")
    deny = _strings(body, "denyOut")
    hosts = [a for a in allow if _network(a) is None]
    cidrs = [c for a in allow if (c := _network(a)) is not None]
    for d in deny:
        if _network(d) is None:
            raise InvalidError(f"deny_out takes addresses and CIDRs, not host names ({d!r})", hint=HINT)
    closed = internet is False or any(_network(d) in ALL_TRAFFIC for d in deny)
    if any(c in ALL_TRAFFIC for c in cidrs):
        return NetworkPolicy(mode="open", cidrs=[c for c in cidrs if c not in ALL_TRAFFIC]).check()
    if closed:
        if not hosts and not cidrs:
            return NetworkPolicy(mode="none")
        return NetworkPolicy(mode="allowlist", allow_hosts=hosts, cidrs=cidrs).check()
    if deny:
        raise InvalidError(
            "hutch cannot deny single address ranges of an open network; deny all traffic "
            "(deny_out=[ALL_TRAFFIC]) and list what to allow in allow_out instead",
            hint=HINT,
        )
    return NetworkPolicy(mode="open", cidrs=cidrs).check()  # hosts are already open; private ranges by CIDR
