"""Docker credential helpers (credHelpers, credsStore) on the pull path, against a real docker-registry with
htpasswd auth on 127.0.0.1: the helper is a small script each test writes on PATH, run as docker runs it
(``docker-credential-NAME get``, the server on stdin, ``{"Username", "Secret"}`` on stdout)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon
from tests.imagekit import Registry

from hutch import credhelper
from hutch.client.images import follow
from hutch.errors import HutchError, InvalidError, UnavailableError

SECRET = "s3cret-pass-42"  # auth_registry's password for alice


def pull(d: Daemon, ref: str) -> dict[str, Any]:
    with d.client() as c:
        return follow(c.image_pull(ref), lambda f: None)


@pytest.fixture
def helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on PATH for the helpers, and a docker config directory of the test's own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("HUTCH_REGISTRY_USER", raising=False)
    monkeypatch.delenv("HUTCH_REGISTRY_PASSWORD", raising=False)
    (tmp_path / "docker").mkdir()
    return bin_dir


def helper(bin_dir: Path, name: str, script: str) -> Path:
    path = bin_dir / f"docker-credential-{name}"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(stat.S_IRWXU)
    return path


def config(doc: dict[str, Any]) -> None:
    (Path(os.environ["DOCKER_CONFIG"]) / "config.json").write_text(json.dumps(doc))


def answer(username: str, secret: str) -> str:
    """A helper that keeps what it was asked (its argument and stdin) and answers with one login."""
    body = json.dumps({"ServerURL": "x", "Username": username, "Secret": secret})
    return f'echo "$1" > "$0.asked"; cat >> "$0.asked"\nprintf \'%s\' \'{body}\'\n'


def test_cred_helpers_and_creds_store_are_run_as_docker_runs_them(daemon: Daemon, auth_registry: Registry, helpers: Path) -> None:
    ref = f"{auth_registry.host}/team/tiny:1"
    asked = helper(helpers, "hutchtest", answer("alice", SECRET))
    config({"credHelpers": {auth_registry.host: "hutchtest"}, "credsStore": "nosuch-store", "auths": {}})
    done = pull(daemon, ref)
    assert done["image"]["names"] == [ref]
    assert Path(f"{asked}.asked").read_text() == f"get\n{auth_registry.host}\n"  # `get`, the server on stdin
    # credsStore for every registry without a credHelpers entry of its own
    other = helper(helpers, "store", answer("alice", SECRET))
    config({"credsStore": "store"})
    assert pull(daemon, ref)["transferred"] == 0
    assert Path(f"{other}.asked").read_text() == f"get\n{auth_registry.host}\n"
    log = (daemon.home / "test-daemon.log").read_text()
    assert SECRET not in log


def test_a_helper_without_credentials_pulls_anonymously_and_the_registry_says_no(
    daemon: Daemon, auth_registry: Registry, helpers: Path
) -> None:
    helper(helpers, "empty", "echo 'credentials not found in native keychain'; exit 1\n")
    config({"credsStore": "empty"})
    with pytest.raises(HutchError) as err:
        pull(daemon, f"{auth_registry.host}/team/tiny:1")
    assert err.value.kind == "unauthorized", err.value


def test_a_missing_failing_lying_or_hostile_helper_is_a_clear_error(
    daemon: Daemon, auth_registry: Registry, helpers: Path
) -> None:
    ref = f"{auth_registry.host}/team/tiny:1"
    config({"credHelpers": {auth_registry.host: "nosuch"}})
    with pytest.raises(InvalidError) as bad:
        pull(daemon, ref)
    assert "docker-credential-nosuch, which is not on PATH" in bad.value.message
    assert "install docker-credential-nosuch" in (bad.value.hint or "")

    config({"credsStore": "../../bin/sh"})
    with pytest.raises(InvalidError) as bad:
        pull(daemon, ref)
    assert "not a plain name" in bad.value.message

    helper(helpers, "locked", f"echo '{SECRET}'; echo 'the keychain is locked' >&2; exit 3\n")
    config({"credsStore": "locked"})
    with pytest.raises(UnavailableError) as down:
        pull(daemon, ref)
    assert "docker-credential-locked get failed" in down.value.message and "keychain is locked" in down.value.message
    assert SECRET not in json.dumps(down.value.to_dict())  # its stdout is never quoted

    helper(helpers, "garbled", f"echo 'Secret={SECRET}'\n")
    config({"credsStore": "garbled"})
    with pytest.raises(UnavailableError) as down:
        pull(daemon, ref)
    assert "did not answer with a JSON object" in down.value.message
    assert SECRET not in json.dumps(down.value.to_dict())

    helper(helpers, "wrong", answer("alice", "not-the-password"))
    config({"credsStore": "wrong"})
    with pytest.raises(HutchError) as err:
        pull(daemon, ref)
    assert err.value.kind == "unauthorized" and "not-the-password" not in json.dumps(err.value.to_dict())
    assert daemon.client().images() == []


def test_a_helper_that_hangs_is_stopped_with_what_it_started(
    daemon: Daemon, auth_registry: Registry, helpers: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(credhelper, "TIMEOUT", 2.0)
    pidfile = tmp_path / "grandchild.pid"
    # a grandchild that keeps the helper's stdout open, then the helper itself hangs
    helper(helpers, "hang", f"sleep 600 & echo $! > {pidfile}\nsleep 600\n")
    config({"credsStore": "hang"})
    with pytest.raises(UnavailableError) as down:
        pull(daemon, f"{auth_registry.host}/team/tiny:1")
    assert "did not answer" in down.value.message and "within 2 s" in down.value.message
    grandchild = int(pidfile.read_text())

    def state() -> str:
        try:
            return Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    # the whole process group was killed: the grandchild goes (SIGKILL lands when it is next scheduled)
    deadline = time.monotonic() + 60
    while state() not in ("gone", "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state() in ("gone", "Z"), state()
