"""Placeholder secrets without a sandbox: the spec's checks, the CLI grammar, the vault's
decisions and the sandbox CA's certificates (a real TLS handshake in memory)."""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

import pytest

from hutch.errors import InvalidError
from hutch.models import NetworkPolicy, SandboxSpec
from hutch.providers.local.placeholders import Vault, placeholder, scrub
from hutch.providers.local.sandboxca import SandboxCA
from hutch.secretpolicy import check_bindings, host_allowed
from hutch.wire.build import secret_binding

VALUE = "s3cr3t-value-0123456789"


def policy(**kw: object) -> NetworkPolicy:
    return NetworkPolicy.model_validate({"mode": "allowlist", **kw})


def test_a_secret_host_must_be_one_the_policy_allows() -> None:
    p = policy(allow_hosts=["api.example.com", "*.example.org"], deny_hosts=["bad.example.org"])
    assert host_allowed("api.example.com", p)
    assert host_allowed("x.example.org", p) and host_allowed("*.a.example.org", p) and host_allowed("*.example.org", p)
    assert not host_allowed("example.org", p)  # *.example.org is strictly below it
    assert not host_allowed("other.example.com", p) and not host_allowed("*.example.com", p)
    assert not host_allowed("bad.example.org", p)
    assert host_allowed("anything.example.net", NetworkPolicy(mode="open"))
    assert not host_allowed("api.example.com", NetworkPolicy(mode="none"))


def test_bindings_are_checked_at_create() -> None:
    p = policy(allow_hosts=["api.example.com"])
    check_bindings({"TOKEN": ["api.example.com"]}, {"TOKEN": VALUE}, p)
    with pytest.raises(InvalidError, match="unknown secret NOPE") as info:
        check_bindings({"NOPE": ["api.example.com"]}, {"TOKEN": VALUE}, p)
    assert "--secret NOPE" in str(info.value.hint)
    with pytest.raises(InvalidError, match="has no value"):
        check_bindings({"TOKEN": ["api.example.com"]}, {"TOKEN": ""}, p)
    with pytest.raises(InvalidError, match=r"does not allow evil\.example") as info:
        check_bindings({"TOKEN": ["evil.example"]}, {"TOKEN": VALUE}, p)
    assert "--allow-host evil.example" in str(info.value.hint)


def test_the_spec_normalizes_and_refuses() -> None:
    spec = SandboxSpec.model_validate(
        {"secret_hosts": {"TOKEN": ["API.Example.com.", "api.example.com"]}, "secret_body": ["TOKEN", "TOKEN"]}
    )
    assert spec.secret_hosts == {"TOKEN": ["api.example.com"]} and spec.secret_body == ["TOKEN"]
    bad = [
        ({"secret_hosts": {"TOKEN": []}}, "names no host"),
        ({"secret_hosts": {"bad-name": ["a.example"]}}, "invalid secret name"),
        ({"secret_hosts": {"TOKEN": ["10.0.0.1"]}}, "is an IP address"),
        ({"secret_body": ["TOKEN"]}, "not bound to a host"),
        ({"no_intercept": ["not a host"]}, "invalid host name"),
    ]
    for body, message in bad:
        with pytest.raises(InvalidError, match=message):
            SandboxSpec.model_validate(body)
    assert "secrets" not in SandboxSpec.model_validate({"secrets": {"TOKEN": VALUE}}).model_dump()


def test_the_cli_grammar() -> None:
    assert secret_binding(["A=x.example", "A=y.example,z.example", "B=*.example.org"]) == {
        "A": ["x.example", "y.example", "z.example"],
        "B": ["*.example.org"],
    }
    assert secret_binding({"A": "x.example"}) == {"A": ["x.example"]}
    for bad in ("A", "=x.example", "A="):
        with pytest.raises(InvalidError, match="invalid --secret-host"):
            secret_binding([bad])


def vault(body: bool = False, value: str | None = VALUE) -> tuple[Vault, bytes]:
    spec = SandboxSpec.model_validate(
        {
            "secrets": {"TOKEN": value} if value is not None else {},
            "secret_hosts": {"TOKEN": ["api.example.com", "*.up.example"]},
            "secret_body": ["TOKEN"] if body else [],
            "no_intercept": ["raw.example"],
        }
    )
    token = placeholder("TOKEN")
    return Vault.of(spec, {"TOKEN": token}, SandboxCA.new("sbx_test")), token.encode()


def test_the_vault_replaces_for_bound_hosts_and_blocks_elsewhere() -> None:
    v, token = vault()
    header = b"Bearer " + token
    assert v.rewrite(header, "api.example.com").data == b"Bearer " + VALUE.encode()
    assert v.rewrite(header, "a.up.example").replaced == ["TOKEN"]
    out = v.rewrite(header, "other.example.com")
    assert out.blocked == ["TOKEN"] and out.data == header
    assert v.rewrite(b"nothing here", "other.example.com").blocked == []
    # bodies: left as they are for a bound host unless asked, blocked elsewhere either way
    assert v.rewrite(b"k=" + token, "api.example.com", body=True).data == b"k=" + token
    assert v.rewrite(b"k=" + token, "other.example.com", body=True).blocked == ["TOKEN"]
    opted, token2 = vault(body=True)
    assert opted.rewrite(b"k=" + token2, "api.example.com", body=True).data == b"k=" + VALUE.encode()
    assert opted.replaces_body("api.example.com") and not opted.replaces_body("other.example.com")
    # what a bound host echoes back becomes the placeholder again
    echo = v.rewrite(header, "api.example.com").echo
    assert scrub(b'{"auth": "Bearer ' + VALUE.encode() + b'"}', echo) == b'{"auth": "Bearer ' + token + b'"}'
    assert v.exempt("raw.example") and not v.exempt("api.example.com")


def test_after_a_restart_the_value_is_missing_not_sent() -> None:
    v, token = vault(value=None)
    out = v.rewrite(b"Bearer " + token, "api.example.com")
    assert out.missing == ["TOKEN"] and out.replaced == [] and token in out.data


def test_the_sandbox_ca_signs_leaves_a_client_trusting_it_accepts() -> None:
    ca = SandboxCA.new("sbx_test")
    with tempfile.TemporaryDirectory() as tmp:
        ca.save(Path(tmp))
        assert (Path(tmp) / "sandbox-ca.key").stat().st_mode & 0o777 == 0o600
        loaded = SandboxCA.load(Path(tmp))
        assert loaded is not None and loaded.pem() == ca.pem()
    for host, trusted in (("api.example.com", ca), ("api.example.com", SandboxCA.new("sbx_other"))):
        client = ssl.create_default_context(cadata=trusted.pem().decode())
        ok = handshake(client, ca.context(host), host)
        assert ok == (trusted is ca)  # another sandbox's CA does not vouch for this one's leaves
    assert not handshake(ssl.create_default_context(cadata=ca.pem().decode()), ca.context("a.example"), "b.example")


def handshake(client_ctx: ssl.SSLContext, server_ctx: ssl.SSLContext, name: str) -> bool:
    """A TLS handshake between two memory-BIO ends: True when the client accepted."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=name)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for end, outbox, peer_in in ((client, c_out, s_in), (server, s_out, c_in)):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                return False
            peer_in.write(outbox.read())
        try:
            client.do_handshake()
            return True
        except ssl.SSLWantReadError:
            continue
        except ssl.SSLError:
            return False
    return False


def test_mcp_reads_secret_values_from_its_own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from hutch.mcp.shapes import env_secrets

    monkeypatch.setenv("HUTCH_TEST_TOKEN", VALUE)
    monkeypatch.delenv("HUTCH_TEST_MISSING", raising=False)
    assert env_secrets(["HUTCH_TEST_TOKEN"]) == {"HUTCH_TEST_TOKEN": VALUE}
    assert env_secrets(None) == {}
    with pytest.raises(InvalidError, match="not set where the MCP server runs"):
        env_secrets(["HUTCH_TEST_MISSING"])


def test_basic_credentials_are_opened_for_the_placeholder() -> None:
    import base64

    v, token = vault()
    basic = b"Basic " + base64.b64encode(b"x-access-token:" + token)
    out = v.rewrite_header(basic, "api.example.com")
    assert out.replaced == ["TOKEN"] and base64.b64decode(out.data[6:]) == b"x-access-token:" + VALUE.encode()
    assert scrub(b"you sent " + out.data, out.echo) == b"you sent " + basic  # echoed encoded: undone too
    assert v.rewrite_header(basic, "other.example.com").blocked == ["TOKEN"]
    plain = b"Basic " + base64.b64encode(b"user:password")
    assert v.rewrite_header(plain, "other.example.com").data == plain
    assert v.rewrite_header(b"Basic not-base64!", "other.example.com").blocked == []
