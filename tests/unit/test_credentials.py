"""The caller's provider credentials: gathered from the environment or config file, one
bounded header, sent only over this user's unix socket or TLS, refused when malformed (never
quoted); the daemon's owner-only credentials file."""

from __future__ import annotations

import base64
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from hutch import credentials
from hutch.client.endpoint import Endpoint
from hutch.config import Settings
from hutch.credentials import HEADER, Credential, decode, encode, fingerprint, gather, load_file
from hutch.errors import InvalidError

TOKEN = "tok-unit-0123456789abcdef"


@pytest.fixture
def bare(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for var in (*credentials.UNIKRAFT_TOKEN_VARS, "UKC_METRO"):
        clean_env.delenv(var, raising=False)
    clean_env.setenv("HUTCH_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return clean_env


def test_gather_takes_the_first_variable_then_the_config_file(bare: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert gather(os.environ, home) == {}
    (home / "config.toml").write_text('unikraft_token = "from-file"\nunikraft_metro = "dal"\n')
    assert gather(os.environ, home)["unikraft"] == Credential("unikraft", "from-file", credentials.CONFIG_SOURCE, "dal")
    bare.setenv("UKC_API_KEY", "c")
    bare.setenv("UKC_TOKEN", "b")
    bare.setenv("UKC_METRO", "sin")
    cred = gather(os.environ, home)["unikraft"]
    assert (cred.token, cred.source, cred.metro) == ("b", "UKC_TOKEN", "sin")
    bare.setenv("HUTCH_UNIKRAFT_TOKEN", TOKEN)
    assert gather(os.environ, home)["unikraft"].source == "HUTCH_UNIKRAFT_TOKEN"
    assert TOKEN not in repr(gather(os.environ, home)["unikraft"])  # never in a repr


def test_a_metro_alone_travels_too(bare: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bare.setenv("UKC_METRO", "fra")
    assert gather(os.environ, tmp_path / "home") == {"unikraft": Credential("unikraft", "", "", "fra")}


def test_the_header_round_trips_and_is_bounded() -> None:
    creds = {"unikraft": Credential("unikraft", TOKEN, "UKC_TOKEN", "http://127.0.0.1:9")}
    value = encode(creds)
    assert TOKEN not in value and decode(value) == creds
    for bad in ("!!!", "e30" * 5000, encode({}).replace("e", "%"), "WzFd"):  # not base64, too long, ..., a list
        with pytest.raises(InvalidError) as info:
            decode(bad)
        assert bad not in info.value.message
    for token in ("a b\n", "x" * 5000, "é"):
        with pytest.raises(InvalidError) as info:
            decode(encode({"unikraft": Credential("unikraft", token, "UKC_TOKEN")}))
        assert token not in info.value.message
    doc = {"aws": {"token": "x"}, "unikraft": {"token": TOKEN, "source": "UKC_TOKEN", "metro": "http://127.0.0.1:9"}}
    other = base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()  # a provider this daemon does not know
    assert decode(other) == creds


def test_fingerprints_are_short_stable_and_not_the_token() -> None:
    assert fingerprint(TOKEN) == fingerprint(TOKEN) != fingerprint(TOKEN + "x")
    assert fingerprint(TOKEN).startswith("sha256:") and len(fingerprint(TOKEN)) == 19 and TOKEN not in fingerprint(TOKEN)


def test_sent_over_the_own_socket_and_tls_only(bare: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bare.setenv("UKC_TOKEN", TOKEN)
    local = Endpoint.from_settings(Settings.load())
    assert decode(local.headers()[HEADER])["unikraft"].token == TOKEN
    assert TOKEN not in repr(local)
    tls = Endpoint.from_settings(Settings.load(host="https://h:1"))
    assert HEADER in tls.headers()
    clear = Endpoint.from_settings(Settings.load(host="http://127.0.0.1:9"))
    assert HEADER not in clear.headers()  # plain TCP: never
    mine = tmp_path / "mine.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(mine))
        assert HEADER in Endpoint.from_settings(Settings.load(host=f"unix://{mine}")).headers()
        if os.geteuid() == 0:  # a socket of another user: never
            os.chown(mine, 65534, 65534)
            assert HEADER not in Endpoint.from_settings(Settings.load(host=f"unix://{mine}")).headers()
    assert HEADER not in Endpoint.from_settings(Settings.load(host=f"unix://{tmp_path}/none.sock")).headers()


def test_the_app_refuses_a_malformed_header_without_quoting_it(app_client: Any) -> None:
    resp = app_client.get("/v1/sandboxes", headers={HEADER: "not-base64-" + TOKEN})
    assert resp.status_code == 400 and resp.json()["error"]["kind"] == "invalid"
    assert TOKEN not in resp.text
    ok = app_client.get("/v1/sandboxes", headers={HEADER: encode({"unikraft": Credential("unikraft", TOKEN, "UKC_TOKEN")})})
    assert ok.status_code == 200 and TOKEN not in ok.text
    assert app_client.get("/v1/credentials").json() == {"accounts": [], "checks": []}


def write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_credentials_file_is_owner_only_and_strict(tmp_path: Path) -> None:
    good = write(tmp_path / "c.toml", f'[[unikraft]]\ntoken = "{TOKEN}"\nmetro = "fra"\n[[unikraft]]\ntoken = "t2"\n', 0o600)
    creds = load_file(str(good))
    assert [(c.token, c.metro, c.source) for c in creds] == [(TOKEN, "fra", "credentials file"), ("t2", "", "credentials file")]
    one = write(tmp_path / "one.toml", f'[unikraft]\ntoken = "{TOKEN}"\n', 0o400)
    assert [c.token for c in load_file(str(one))] == [TOKEN]
    cases = {
        "open.toml": (f'[unikraft]\ntoken = "{TOKEN}"\n', 0o644, "group or others"),
        "group.toml": (f'[unikraft]\ntoken = "{TOKEN}"\n', 0o640, "group or others"),
        "bad.toml": (f"[unikraft\ntoken = {TOKEN}", 0o600, "not valid TOML"),
        "who.toml": (f'[aws]\ntoken = "{TOKEN}"\n', 0o600, "unknown provider"),
        "key.toml": (f'[unikraft]\ntoken = "{TOKEN}"\nsecret = "x"\n', 0o600, "unknown key"),
        "none.toml": ('[unikraft]\nmetro = "fra"\n', 0o600, "no token"),
    }
    for name, (text, mode, message) in cases.items():
        path = write(tmp_path / name, text, mode)
        with pytest.raises(InvalidError, match=message) as info:
            load_file(str(path))
        assert TOKEN not in info.value.message + (info.value.hint or "")
        if "group" in message:
            assert info.value.hint == f"chmod 600 {path} (a regular file owned by the daemon's user)"
    (tmp_path / "link.toml").symlink_to(good)
    with pytest.raises(InvalidError, match="cannot open"):
        load_file(str(tmp_path / "link.toml"))
    with pytest.raises(InvalidError, match="cannot open"):
        load_file(str(tmp_path / "missing.toml"))
