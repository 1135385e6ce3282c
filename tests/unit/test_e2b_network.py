"""E2B's network update body as a hutch policy: what each shape means, and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from hutch.errors import InvalidError
from hutch.server.e2b.network import policy_of


@pytest.mark.parametrize(
    ("body", "mode", "hosts", "cidrs"),
    [
        ({}, "open", [], []),  # omitting everything clears the rules: E2B's sandboxes have the internet
        ({"allow_internet_access": True}, "open", [], []),
        ({"allow_internet_access": False}, "none", [], []),
        ({"denyOut": ["0.0.0.0/0"]}, "none", [], []),
        (
            {"denyOut": ["0.0.0.0/0"], "allowOut": ["Example.com", "*.example.org"]},
            "allowlist",
            ["*.example.org", "example.com"],
            [],
        ),
        (
            {"denyOut": ["0.0.0.0/0"], "allowOut": ["203.0.113.7", "10.0.0.0/8"]},
            "allowlist",
            [],
            ["10.0.0.0/8", "203.0.113.7/32"],
        ),
        ({"allow_internet_access": False, "denyOut": ["192.0.2.0/24"]}, "none", [], []),  # a deny inside deny-all
        ({"denyOut": ["0.0.0.0/0"], "allowOut": ["0.0.0.0/0", "10.1.0.0/16"]}, "open", [], ["10.1.0.0/16"]),  # allow wins
        ({"allowOut": ["10.2.0.0/16", "example.com"]}, "open", [], ["10.2.0.0/16"]),  # hosts are open already
        ({"dnsServers": []}, "open", [], []),
    ],
)
def test_shapes(body: dict[str, Any], mode: str, hosts: list[str], cidrs: list[str]) -> None:
    p = policy_of(body)
    assert (p.mode, p.allow_hosts, p.cidrs, p.deny_hosts) == (mode, hosts, cidrs, [])


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"egressProxy": {"address": "socks5://proxy.example.com:1080"}}, "egress_proxy"),
        ({"rules": {"api.example.com": [{"transform": {}}]}}, "--secret"),
        ({"dnsServers": ["192.0.2.53"]}, "dns_servers"),
        ({"denyOut": ["192.0.2.0/24"]}, "deny all traffic"),
        ({"denyOut": ["0.0.0.0/0", "example.com"]}, "not host names"),
        ({"allowOut": "example.com"}, "list of strings"),
        ({"allow_internet_access": "yes"}, "true or false"),
        ({"mask": True}, "unknown network field"),
        ({"denyOut": ["0.0.0.0/0"], "allowOut": ["not a host!"]}, ""),
    ],
)
def test_refused_never_ignored(body: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidError) as exc:
        policy_of(body)
    assert words in exc.value.message
