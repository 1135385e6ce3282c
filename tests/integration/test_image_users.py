"""Acceptance of root inside and real users in a real Debian image (item 5 of the images issue):
apt-get installs a package through hutch's egress proxy with the machine's Debian mirror allowed (every
request an event), useradd/chown/runuser work, pip installs into the image's own site-packages through
the proxy with the package index allowed and the host's CA bundle trusted (this machine's outside TLS
is intercepted by a proxy with a CA of its own). The Debian root is built once per day by mmdebstrap
(debian_root.py); the image is served from that directory by the test daemon of hutch.testing.images."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon, destroy_all, sweep
from tests.integration.debian_root import Mirror, debian_root
from tests.integration.image_roots import shared_dir

from hutch.client import Client

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the Debian root keeps its owners: built as root")
LONG = 600.0


@pytest.fixture(scope="module")
def debian() -> tuple[Path, Mirror]:
    return debian_root()


@pytest.fixture(scope="module")
def imaged(debian: tuple[Path, Mirror]) -> Iterator[Daemon]:
    home = shared_dir("hutch-debian-")
    table = home / "test-images.json"
    table.write_text(json.dumps({"debian": {"rootfs": str(debian[0])}}))
    # a uid registry of its own: the tests read it
    d = Daemon(home, argv=("hutch.testing.images",), HUTCH_TEST_IMAGES=str(table), HUTCH_UID_REGISTRY=str(home / "uids"))
    d.start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


def sh(c: Client, sid: str, script: str, timeout: float = 120.0) -> dict[str, object]:
    return dict(c.exec(sid, {"command": ["/bin/sh", "-c", script], "timeout": timeout}))


def test_apt_get_installs_through_the_proxy_and_every_request_is_an_event(imaged: Daemon, debian: tuple[Path, Mirror]) -> None:
    host = debian[1].host
    with imaged.client() as c:
        sid = str(
            c.create({"provider": "local", "image": "debian", "network": {"mode": "allowlist", "allow_hosts": [host]}})["id"]
        )
        r = sh(c, sid, "id -u && apt-get update -q && apt-get install -y -q jq && jq --version", LONG)
        assert r["exit_code"] == 0, (r["stdout"], r["stderr"])
        assert str(r["stdout"]).splitlines()[0] == "0"
        assert str(r["stdout"]).strip().splitlines()[-1].startswith("jq-1."), r
        got = c.events(sid, types=["egress_allowed", "egress_denied"])
        assert got and all(e["type"] == "egress_allowed" and e["data"]["host"] == host for e in got), got
        # apt fetched as its own user _apt (uid 42 inside): the range maps it; nothing ran as host root
        r = sh(c, sid, "stat -c %U:%u /var/lib/apt/lists/partial /usr/bin/jq")
        assert str(r["stdout"]).split() == ["_apt:42", "root:0"], r


def test_useradd_chown_runuser_and_the_owners_on_the_host(imaged: Daemon, debian: tuple[Path, Mirror]) -> None:
    with imaged.client() as c:
        rec = c.create({"provider": "local", "image": "debian"})
        sid = str(rec["id"])
        r = sh(c, sid, "useradd bob && mkdir /x && chown bob /x && runuser -u bob -- id && runuser -u bob -- touch /x/f "
                       "&& stat -c %U /x/f")  # fmt: skip
        assert r["exit_code"] == 0, (r["stdout"], r["stderr"])
        lines = str(r["stdout"]).splitlines()
        assert lines[0].startswith("uid=1000(bob) gid=1000(bob)"), r
        assert lines[1] == "bob"
        base = next(
            e for e in json.loads((imaged.home / "uids" / "registry.json").read_text())["entries"] if e["sandbox"] == sid
        )["start"]
        # the upper on the host: files of root inside are the range's first uid, bob's its uid 1000; never host root
        uppers = [p for p in (imaged.home / "sandboxes" / sid).rglob("x") if p.is_dir() and (p / "f").exists()]
        assert uppers, list((imaged.home / "sandboxes" / sid).iterdir())
        assert (uppers[0].stat().st_uid, (uppers[0] / "f").stat().st_uid) == (base + 1000, base + 1000)
        passwd = next(p for p in (imaged.home / "sandboxes" / sid).rglob("passwd") if "etc" in p.parts and "bob" in p.read_text())
        assert passwd.stat().st_uid == base
        # the image itself is untouched
        assert "bob" not in (debian[0] / "etc" / "passwd").read_text()


def pip_index() -> tuple[str, str]:
    """The package index pip on this machine uses (its config, the environment, else pip's own default),
    and the host its files come from."""
    url = os.environ.get("PIP_INDEX_URL", "")
    if not url:
        got = subprocess.run(["python3", "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True)
        url = got.stdout.strip() if got.returncode == 0 else ""
    if not url:
        from pip._internal.models.index import PyPI

        return PyPI.simple_url, PyPI.file_storage_domain
    return url, urllib.parse.urlsplit(url).hostname or ""


def test_pip_installs_into_the_images_site_packages_through_the_proxy(imaged: Daemon) -> None:
    index, files = pip_index()
    hosts = sorted({urllib.parse.urlsplit(index).hostname or "", files})
    with imaged.client() as c:
        net = {"mode": "allowlist", "allow_hosts": hosts}
        sid = str(c.create({"provider": "local", "image": "debian", "network": net, "host_ca": True})["id"])
        r = sh(c, sid, f"python3 -m pip install -q --no-cache-dir --break-system-packages --index-url {index} six "
                       "&& python3 -c 'import six; print(six.__file__)'", LONG)  # fmt: skip
        assert r["exit_code"] == 0, (r["stdout"], r["stderr"])
        assert str(r["stdout"]).strip().startswith("/usr/local/lib/python3"), r
        got = c.events(sid, types=["egress_allowed", "egress_denied"])
        assert got and all(e["type"] == "egress_allowed" and e["data"]["host"] in hosts for e in got), got
