"""HUTCH_HOST parsing and the TCP listener's checks, before anything connects."""

from __future__ import annotations

from pathlib import Path

import pytest

from hutch.client.endpoint import Endpoint
from hutch.config import Settings
from hutch.errors import InvalidError
from hutch.server.remote import listener, parse_listen


@pytest.fixture
def home(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clean_env.setenv("HUTCH_HOME", str(tmp_path / "home"))
    return tmp_path


def test_host_forms(home: Path) -> None:
    local = Endpoint.from_settings(Settings.load())
    assert (local.scheme, local.remote, local.address) == ("unix", False, str(home / "home" / "hutchd.sock"))
    unix = Endpoint.from_settings(Settings.load(host="unix:///run/h.sock"))
    assert (unix.scheme, unix.address, unix.remote, unix.label) == ("unix", "/run/h.sock", True, "unix:///run/h.sock")
    (home / "tok").write_text("s3cret-token\n")
    tcp = Endpoint.from_settings(Settings.load(host="http://127.0.0.1:8765", token_file=str(home / "tok")))
    assert (tcp.label, tcp.headers()) == ("http://127.0.0.1:8765", {"authorization": "Bearer s3cret-token"})
    assert "s3cret" not in repr(tcp)
    tls = Endpoint.from_settings(Settings.load(host="https://[::1]:9"))
    assert (tls.label, tls.port, tls.headers()) == ("https://[::1]:9", 9, {})


def test_hutch_token_env_beats_the_file(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    (home / "tok").write_text("from-file")
    clean_env.setenv("HUTCH_TOKEN", "from-env")
    ep = Endpoint.from_settings(Settings.load(host="https://h:1", token_file=str(home / "tok")))
    assert ep.token == "from-env"


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("http://192.0.2.1:80", "in clear"),
        ("http://example.com:80", "in clear"),
        ("ftp://h:1", "not a daemon address"),
        ("https://h:1/path", "not a daemon address"),
        ("https://user:pw@h:1", "credentials"),
        ("https://h:99999", "invalid port"),
        ("unix://", "names no socket"),
    ],
)
def test_bad_hosts(home: Path, host: str, message: str) -> None:
    with pytest.raises(InvalidError, match=message) as exc:
        Endpoint.from_settings(Settings.load(host=host))
    assert "pw" not in exc.value.message


def test_token_file_problems_never_show_the_token(home: Path) -> None:
    with pytest.raises(InvalidError, match="cannot read the token file"):
        Endpoint.from_settings(Settings.load(host="https://h:1", token_file=str(home / "missing")))
    (home / "tok").write_text("two words")
    with pytest.raises(InvalidError, match="spaces") as exc:
        Endpoint.from_settings(Settings.load(host="https://h:1", token_file=str(home / "tok")))
    assert "two words" not in exc.value.message
    (home / "tok").write_text("\n")
    with pytest.raises(InvalidError, match="is empty"):
        Endpoint.from_settings(Settings.load(host="https://h:1", token_file=str(home / "tok")))
    with pytest.raises(InvalidError, match="HUTCH_CA_FILE"):
        Endpoint.from_settings(Settings.load(host="https://h:1", ca_file=str(home / "no-ca.pem")))


def test_listen_checks(home: Path) -> None:
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("8765", "h:", "h:x", "h:70000"):
        with pytest.raises(InvalidError, match="HOST:PORT"):
            parse_listen(bad)
    assert listener(Settings.load()) is None
    with pytest.raises(InvalidError, match="without TLS"):
        listener(Settings.load(listen="0.0.0.0:1", api_token_file="/x"))
    keys_only = listener(Settings.load(listen="127.0.0.1:1"))  # no --token-file: API keys only
    assert keys_only is not None and keys_only.token is None
    with pytest.raises(InvalidError, match="go together"):
        listener(Settings.load(listen="0.0.0.0:1", tls_cert="/c"))
    (home / "tok").write_text("t0ken")
    lst = listener(Settings.load(listen="localhost:5", api_token_file=str(home / "tok")))
    assert lst is not None and (lst.url, lst.token) == ("http://localhost:5", "t0ken") and "t0ken" not in repr(lst)


def test_the_listener_socket_is_tcp_so_asyncio_sets_nodelay() -> None:
    import socket

    from hutch.server.remote import Listener, bind

    sock = bind(Listener("127.0.0.1", 0, "t"))
    try:
        # asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP: without it a TLS
        # response waited ~40 ms for the delayed ACK (bench/remote.py)
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
