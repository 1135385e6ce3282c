"""Egress policy decisions: pure functions over a :class:`NetworkPolicy` (no I/O).

The proxy asks twice: :func:`check_target` before resolving (name, IP literal, port), and
:func:`check_address` for every address the name resolved to; it then connects to exactly
the address that passed, so a name cannot be re-resolved to somewhere else in between.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from typing import Any

from hutch.errors import InvalidError
from hutch.models import NetworkPolicy, normalize_host
from hutch.netpolicy import host_matches as host_matches

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Ranges a sandbox never reaches unless a CIDR names them: (network, reason).
BLOCKED: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = [
    (ipaddress.ip_network(net), reason)
    for net, reason in [
        ("169.254.169.254/32", "metadata"),
        ("fd00:ec2::254/128", "metadata"),
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("100.64.0.0/10", "cgnat"),
        ("169.254.0.0/16", "link_local"),
        ("192.0.0.0/24", "reserved"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fc00::/7", "private"),
        ("fe80::/10", "link_local"),
        ("fec0::/10", "link_local"),
        ("ff00::/8", "multicast"),
    ]
]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # allowed_host | allowed_cidr | open | host_not_allowed | denied_host | ip_literal | port_not_allowed ...
    rule: str = ""  # the rule that decided, in the words of the CLI

    def to_dict(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "reason": self.reason, "rule": self.rule}


def embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address inside an IPv4-mapped, IPv4-compatible, NAT64 or 6to4 IPv6 address."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    packed = ip.packed
    if packed[:12] == bytes(12) and ip != ipaddress.IPv6Address("::1") and ip != ipaddress.IPv6Address("::"):
        return ipaddress.IPv4Address(packed[12:])  # ::a.b.c.d (deprecated IPv4-compatible form)
    if ip in ipaddress.ip_network("64:ff9b::/96"):
        return ipaddress.IPv4Address(packed[12:])
    return None


def judged(ip: IPAddress) -> IPAddress:
    """The address a policy judges: an IPv6 address that carries an IPv4 one (mapped, NAT64,
    6to4...) reaches that IPv4 address, so it is judged as it, and only an IPv4 range covers it
    (an IPv6 range such as ``::/32`` would otherwise open every IPv4 address)."""
    inner = embedded_v4(ip)
    return ip if inner is None else inner


@functools.lru_cache(maxsize=1024)
def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)  # a policy's CIDRs, parsed once, not on every request


@functools.lru_cache(maxsize=4096)
def _host_name(text: str) -> str:
    return normalize_host(text)  # a refused name raises, and is not cached


def in_cidrs(ip: IPAddress, cidrs: list[str]) -> str | None:
    for text in cidrs:
        net = _network(text)
        if ip.version == net.version and ip in net:
            return text
    return None


def blocked_reason(ip: IPAddress, own: frozenset[str] = frozenset()) -> str | None:
    """Why this address is off limits by default, or None for a public address."""
    inner = embedded_v4(ip)
    if inner is not None:
        return blocked_reason(inner, own)
    for net, reason in BLOCKED:
        if ip.version == net.version and ip in net:
            return reason
    if str(ip) in own:
        return "host"
    return None


@functools.lru_cache(maxsize=4096)
def parse_ip(host: str) -> IPAddress | None:
    """The address ``host`` writes literally, or None (cached: the proxy asks for every request)."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def _port_ok(policy: NetworkPolicy, port: int) -> bool:
    ports = policy.effective_ports
    return ports is None or port in ports


def check_target(policy: NetworkPolicy, host: str, port: int) -> tuple[Decision, str]:
    """The decision before any lookup, and the host as it will be resolved.

    A passing decision here is provisional: every resolved address must also pass
    :func:`check_address`.
    """
    if policy.mode == "none":
        return Decision(False, "network_off", "--network none"), host
    if not 1 <= port <= 65535:
        return Decision(False, "invalid_port", f"port {port}"), host
    ip = parse_ip(host)
    if ip is not None:
        cidr = in_cidrs(judged(ip), policy.cidrs)
        if cidr is None and (policy.mode == "allowlist" or blocked_reason(ip) is not None):
            return Decision(False, "ip_literal", f"no --allow-cidr covers {ip}"), str(ip)
        if not _port_ok(policy, port):
            return Decision(False, "port_not_allowed", f"--allow-port {port} is not set"), str(ip)
        return Decision(True, "allowed_cidr" if cidr else "open", f"--allow-cidr {cidr}" if cidr else "--network open"), str(ip)
    try:
        name = _host_name(host)
    except InvalidError:
        return Decision(False, "invalid_host", f"{host!r} is not a host name"), host
    for pattern in policy.deny_hosts:
        if host_matches(name, pattern):
            return Decision(False, "denied_host", f"--deny-host {pattern}"), name
    allowed_by = next((p for p in policy.allow_hosts if host_matches(name, p)), None)
    if policy.mode == "allowlist" and allowed_by is None:
        return Decision(False, "host_not_allowed", f"no --allow-host matches {name}"), name
    if not _port_ok(policy, port):
        return Decision(False, "port_not_allowed", f"--allow-port {port} is not set"), name
    if allowed_by is not None:
        return Decision(True, "allowed_host", f"--allow-host {allowed_by}"), name
    return Decision(True, "open", "--network open"), name


def check_address(policy: NetworkPolicy, ip: IPAddress, own: frozenset[str] = frozenset()) -> Decision:
    """May the proxy connect to this resolved address? Private ranges only through a CIDR."""
    cidr = in_cidrs(judged(ip), policy.cidrs)
    if cidr is not None:
        return Decision(True, "allowed_cidr", f"--allow-cidr {cidr}")
    reason = blocked_reason(ip, own)
    if reason is not None:
        return Decision(False, f"{reason}_address", f"{ip} is {reason.replace('_', ' ')}; only --allow-cidr opens it")
    return Decision(True, "public_address", "")


def apply_change(
    policy: NetworkPolicy,
    *,
    mode: str | None = None,
    allow_hosts: list[str] | None = None,
    deny_hosts: list[str] | None = None,
    ports: list[int] | None = None,
    cidrs: list[str] | None = None,
    remove_hosts: list[str] | None = None,
    remove_ports: list[int] | None = None,
    remove_cidrs: list[str] | None = None,
) -> NetworkPolicy:
    """The policy after ``hutch policy``: additions, a deny removes a matching allow, and back;
    removals last (a port or range given both ways ends up removed)."""
    allow = set(policy.allow_hosts)
    deny = set(policy.deny_hosts)
    for host in allow_hosts or []:
        h = normalize_host(host, pattern=True)
        allow.add(h)
        deny.discard(h)
    for host in deny_hosts or []:
        h = normalize_host(host, pattern=True)
        deny.add(h)
        allow.discard(h)
    for host in remove_hosts or []:
        h = normalize_host(host, pattern=True)
        allow.discard(h)
        deny.discard(h)
    try:
        gone = {ipaddress.ip_network(c.strip()) for c in remove_cidrs or []}
    except ValueError as exc:
        raise InvalidError(f"invalid CIDR to remove: {exc}", hint="give it as it is allowed: see hutch policy SANDBOX") from exc
    new_mode = mode or policy.mode
    if new_mode == "none" and mode is None and (allow_hosts or ports or cidrs):
        new_mode = "allowlist"  # adding a rule to a sandbox without network turns the allowlist on
    return NetworkPolicy.model_validate(
        {
            "mode": new_mode,
            "allow_hosts": sorted(allow) if new_mode != "none" else [],
            "deny_hosts": sorted(deny),
            "ports": [p for p in policy.ports + (ports or []) if p not in (remove_ports or [])] if new_mode != "none" else [],
            "cidrs": [c for c in policy.cidrs + (cidrs or []) if _network(c) not in gone] if new_mode != "none" else [],
        }
    ).check()
