"""Egress decisions (pure), secret parsing and output redaction: the rules, without I/O."""

from __future__ import annotations

import ipaddress
import random

import pytest

from hutch.cli.network import resolve_secrets
from hutch.errors import InvalidError
from hutch.models import ExecRequest, NetworkPolicy, SandboxSpec, normalize_host
from hutch.policy import apply_change, blocked_reason, check_address, check_target, host_matches
from hutch.providers.local.agent.output import Redactor


def allowlist(**kw: object) -> NetworkPolicy:
    return NetworkPolicy.model_validate({"mode": "allowlist", **kw})


@pytest.mark.parametrize(
    ("host", "pattern", "match"),
    [
        ("example.com", "example.com", True),
        ("a.example.com", "example.com", False),
        ("a.example.org", "*.example.org", True),
        ("b.a.example.org", "*.example.org", True),
        ("example.org", "*.example.org", False),
        ("badexample.org", "*.example.org", False),
        ("example.org.evil.com", "*.example.org", False),
    ],
)
def test_host_patterns(host: str, pattern: str, match: bool) -> None:
    assert host_matches(host, pattern) is match


def test_names_are_normalised_before_matching() -> None:
    policy = allowlist(allow_hosts=["Example.COM."])
    assert policy.allow_hosts == ["example.com"]
    for spelled in ("EXAMPLE.com", "example.com.", "example.com"):
        assert check_target(policy, spelled, 443)[0].allowed, spelled
    assert normalize_host("bücher.example") == "xn--bcher-kva.example"
    for bad in ("exa mple.com", "a..b", "-a.com", "a.com/x", "a.com\x00.evil", "*", ""):
        with pytest.raises(InvalidError):
            normalize_host(bad, pattern=True)
    assert check_target(policy, "example.com\x00.evil", 443)[0].reason == "invalid_host"


def test_allowlist_decisions() -> None:
    policy = allowlist(allow_hosts=["api.test", "*.cdn.test"], deny_hosts=["bad.cdn.test"])
    cases = {
        ("api.test", 443): "allowed_host",
        ("x.cdn.test", 80): "allowed_host",
        ("bad.cdn.test", 443): "denied_host",
        ("other.test", 443): "host_not_allowed",
        ("api.test", 8080): "port_not_allowed",
        ("203.0.113.7", 443): "ip_literal",
        ("[2001:db8::1]", 443): "ip_literal",
    }
    for (host, port), reason in cases.items():
        decision, _ = check_target(policy, host, port)
        assert decision.reason == reason, (host, port)
        assert decision.allowed is reason.startswith("allowed"), (host, port)
        assert decision.rule


def test_cidrs_open_ip_literals_and_private_ranges_only_where_they_say() -> None:
    policy = allowlist(cidrs=["10.1.0.0/16"], ports=[5432])
    assert check_target(policy, "10.1.2.3", 5432)[0].reason == "allowed_cidr"
    assert check_target(policy, "10.2.0.1", 5432)[0].reason == "ip_literal"
    assert check_target(policy, "10.1.2.3", 443)[0].reason == "port_not_allowed"
    assert check_address(policy, ipaddress.ip_address("10.1.9.9")).allowed
    assert not check_address(policy, ipaddress.ip_address("10.9.9.9")).allowed
    # an IPv4-mapped spelling is the same address
    assert check_address(policy, ipaddress.ip_address("::ffff:10.1.9.9")).allowed


@pytest.mark.parametrize("literal", ["::ffff:169.254.169.254", "::ffff:127.0.0.5", "::ffff:10.1.2.3", "64:ff9b::a9fe:a9fe"])
def test_an_ipv6_range_never_covers_an_ipv4_address_spelled_in_ipv6(literal: str) -> None:
    """``::/32`` (what ``::1/32`` widened to) holds every IPv4-mapped address: those are judged
    as the IPv4 address they reach, which only an IPv4 range covers."""
    for cidrs in (["::/32"], ["::/0"], ["::ffff:0:0/96"], ["64:ff9b::/96"]):
        policy = allowlist(cidrs=cidrs, ports=[80])
        decision, _ = check_target(policy, literal, 80)
        assert not decision.allowed and decision.reason == "ip_literal", (literal, cidrs, decision)
        assert not check_address(policy, ipaddress.ip_address(literal)).allowed, (literal, cidrs)
        opened = check_address(NetworkPolicy(mode="open", cidrs=cidrs), ipaddress.ip_address(literal))
        assert not opened.allowed and opened.reason.endswith("_address"), (literal, cidrs, opened)
    inner = str(ipaddress.ip_address(literal).ipv4_mapped or ipaddress.IPv4Address(ipaddress.ip_address(literal).packed[12:]))
    assert check_target(allowlist(cidrs=[f"{inner}/32"], ports=[80]), literal, 80)[0].reason == "allowed_cidr"


def test_a_range_with_bits_past_its_prefix_is_refused_not_widened() -> None:
    for text, one, whole in (("::1/32", "::1/128", "::/32"), ("10.0.0.5/24", "10.0.0.5/32", "10.0.0.0/24")):
        with pytest.raises(InvalidError) as err:
            SandboxSpec.model_validate({"network": {"mode": "allowlist", "cidrs": [text]}})
        assert one in (err.value.hint or "") and whole in (err.value.hint or ""), err.value.hint
    assert SandboxSpec.model_validate({"network": {"mode": "allowlist", "cidrs": ["10.0.0.0/24"]}}).network.cidrs == [
        "10.0.0.0/24"
    ]


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.1.1", "link_local"),
        ("fe80::1", "link_local"),
        ("100.64.0.1", "cgnat"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "metadata"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("::10.0.0.1", "private"),  # IPv4-compatible
    ],
)
def test_forbidden_ranges(address: str, reason: str) -> None:
    ip = ipaddress.ip_address(address)
    assert blocked_reason(ip) == reason
    verdict = check_address(NetworkPolicy(mode="open"), ip)
    assert not verdict.allowed and verdict.reason == f"{reason}_address"


def test_public_addresses_pass_and_the_hosts_own_do_not() -> None:
    for address in ("93.184.216.34", "2606:2800:220:1::1", "198.18.3.4"):
        assert blocked_reason(ipaddress.ip_address(address)) is None
    own = frozenset({"93.184.216.34"})
    verdict = check_address(NetworkPolicy(mode="open"), ipaddress.ip_address("93.184.216.34"), own)
    assert verdict.reason == "host_address" and not verdict.allowed


def test_open_mode() -> None:
    policy = NetworkPolicy(mode="open", deny_hosts=["tracker.test"])
    assert check_target(policy, "anything.test", 22)[0].reason == "open"  # any port
    assert check_target(policy, "tracker.test", 443)[0].reason == "denied_host"
    assert check_target(policy, "93.184.216.34", 443)[0].allowed
    assert check_target(policy, "127.0.0.1", 443)[0].reason == "ip_literal"
    assert not check_target(NetworkPolicy(mode="open", ports=[443]), "a.test", 80)[0].allowed


def test_none_denies_everything() -> None:
    decision, _ = check_target(NetworkPolicy(), "example.com", 443)
    assert not decision.allowed and decision.reason == "network_off"


def test_policy_changes() -> None:
    base = NetworkPolicy()
    on = apply_change(base, allow_hosts=["a.test"])
    assert on.mode == "allowlist" and on.allow_hosts == ["a.test"]  # a rule turns the allowlist on
    denied = apply_change(on, deny_hosts=["a.test"])
    assert denied.allow_hosts == [] and denied.deny_hosts == ["a.test"]
    back = apply_change(denied, allow_hosts=["a.test"], ports=[8443], cidrs=["203.0.113.0/24"])
    assert back.allow_hosts == ["a.test"] and back.deny_hosts == [] and back.ports == [8443]
    assert apply_change(back, remove_hosts=["a.test"]).allow_hosts == []
    off = apply_change(back, mode="none")
    assert off.mode == "none" and off.allow_hosts == [] and off.ports == []
    with pytest.raises(InvalidError):
        apply_change(base, allow_hosts=["not a host"])
    # a range or a port taken back, the rest kept; the range written as allowed or in another spelling
    two = apply_change(back, ports=[9000], cidrs=["10.0.0.0/8"])
    fewer = apply_change(two, remove_ports=[8443], remove_cidrs=["10.0.0.0/8"])
    assert fewer.ports == [9000] and fewer.cidrs == ["203.0.113.0/24"] and fewer.allow_hosts == ["a.test"]
    assert apply_change(two, remove_cidrs=["2001:db8::/32", "203.0.113.0/24"]).cidrs == ["10.0.0.0/8"]
    assert sorted(apply_change(fewer, remove_ports=[9000]).effective_ports or []) == [80, 443]  # none left: the default
    assert not check_target(fewer, "10.1.2.3", 9000)[0].allowed
    with pytest.raises(InvalidError):
        apply_change(two, remove_cidrs=["10.0.0.0/33"])


@pytest.mark.parametrize(
    "bad",
    [
        {"mode": "none", "allow_hosts": ["a.test"]},
        {"mode": "allowlist", "ports": [0]},
        {"mode": "allowlist", "ports": [65536]},
        {"mode": "allowlist", "cidrs": ["10.0.0.0/40"]},
        {"mode": "allowlist", "allow_hosts": ["*.com"]},
        {"mode": "allowlist", "allow_hosts": ["10.0.0.1"]},
    ],
)
def test_bad_policies_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidError) as err:
        SandboxSpec.model_validate({"network": bad})
    assert err.value.hint


def test_build_infers_the_allowlist() -> None:
    assert NetworkPolicy.build(None, ["a.test"]).mode == "allowlist"
    assert NetworkPolicy.build().mode == "none"
    with pytest.raises(InvalidError):
        NetworkPolicy.build("none", ports=[443])


def test_secret_values_are_never_serialised() -> None:
    spec = SandboxSpec(secrets={"TOKEN": "hunter2-value"})
    assert spec.secret_names == ["TOKEN"]
    assert "hunter2" not in spec.model_dump_json() and "hunter2" not in repr(spec)
    req = ExecRequest(command=["true"], secrets={"RUN": "hunter3-value"})
    assert "hunter3" not in req.model_dump_json() and "hunter3" not in repr(req)
    with pytest.raises(InvalidError):
        SandboxSpec(secrets={"1BAD": "x"})


def test_secret_sources(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUTCH_T_A", "from-env")
    monkeypatch.setenv("HUTCH_T_B", "other-env")
    path = tmp_path / "tok"  # type: ignore[operator]
    path.write_text("from-file\n")
    got = resolve_secrets(("HUTCH_T_A", "B=env:HUTCH_T_B", f"C=file:{path}"))
    assert got == {"HUTCH_T_A": "from-env", "B": "other-env", "C": "from-file"}
    for bad, message in (
        ("HUTCH_T_UNSET", "is not set"),
        ("X=file:/nonexistent/x", "cannot read"),
        ("X=vault:y", "invalid --secret"),
        ("X=env:", "invalid --secret"),
    ):
        with pytest.raises(InvalidError, match=message):
            resolve_secrets((bad,))


def test_redaction_catches_values_across_reads() -> None:
    secret = "tok-0123456789"
    r = Redactor({"TOKEN": secret, "SHORT": "abc"})
    assert r.feed(1, b"a " + secret.encode() + b" b\n") == b"a [redacted:TOKEN] b\n"
    assert r.feed(1, b"abc is too short to redact\n") == b"abc is too short to redact\n"
    # split at every position, over several reads
    text = f"x{secret}y{secret}".encode()
    for _ in range(50):
        cuts = sorted(random.sample(range(1, len(text)), 3))
        parts = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        r2 = Redactor({"TOKEN": secret})
        out = b"".join(r2.feed(7, p) for p in parts) + r2.flush(7)
        assert out == b"x[redacted:TOKEN]y[redacted:TOKEN]"
    # a prefix that never completes comes out at the end, unchanged
    r3 = Redactor({"TOKEN": secret})
    assert r3.feed(2, b"hello tok-01") == b"hello "
    assert r3.flush(2) == b"tok-01"
    # streams are kept apart
    r4 = Redactor({"TOKEN": secret})
    assert r4.feed(1, b"tok-0123") == b""
    assert r4.feed(2, b"456789") == b"456789"
    assert r4.feed(1, b"456789") == b"[redacted:TOKEN]"
