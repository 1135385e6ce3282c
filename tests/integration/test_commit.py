"""Images made from sandboxes (``hutch image commit``): the writable root becomes a layer on the
sandbox's image; a sandbox made from the new image sees the changes (deletions and opaque
directories included), owners as the image sees them, and commits stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from tests.conftest import Daemon, hutch_env

from hutch import Sandbox, wire
from hutch.wire.pydantic import pydantic_type

pytestmark = pytest.mark.integration


def cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=hutch_env(d.home), capture_output=True, text=True, timeout=300
    )


def sh(sbx: Sandbox, command: str) -> str:
    r = sbx.exec(command)
    assert r.exit_code == 0, (command, r.stdout, r.stderr)
    return r.stdout


def test_a_commit_becomes_an_image_whose_sandboxes_see_the_changes_and_commits_stack(daemon: Daemon, bb: str) -> None:
    with Sandbox.create(settings=daemon.settings, image=bb) as sbx:
        sh(
            sbx,
            "echo added > /etc/added && chown 1000:1000 /etc/added && echo more >> /etc/marker && rm /etc/group"
            " && rm -r /usr/bin && mkdir /usr/bin && echo only > /usr/bin/only && ln /etc/added /etc/hardlink"
            " && echo ws > /workspace/not-in-the-image",
        )
        r = cli(daemon, "image", "commit", sbx.id, "bb:2", "--json")
        assert r.returncode == 0, r.stderr
        done = json.loads(r.stdout)
        TypeAdapter(pydantic_type(wire.ImageCommitted)).validate_python(done)  # the wire's body
        assert done["image"]["names"] == ["bb:2"] and len(done["image"]["layers"]) == 2
        assert done["layer"]["diff_id"] == done["image"]["layers"][-1]["diff_id"]
        assert sh(sbx, "cat /etc/marker").endswith("more\n")  # it runs on after the commit (thawed)

    with Sandbox.create(settings=daemon.settings, image="bb:2") as two:
        assert sh(two, "cat /etc/added /etc/marker") == "added\nfrom the image\nmore\n"
        assert sh(two, "ls /usr/bin") == "only\n"  # the opaque directory hides the image's /usr/bin
        assert two.exec("ls /etc/group").exit_code != 0  # deleted stays deleted
        assert sh(two, "stat -c '%u:%g' /etc/added") == "1000:1000\n"  # the owner as the image sees it
        inodes = sh(two, "stat -c %i /etc/added /etc/hardlink").split()
        assert inodes[0] == inodes[1]  # the hard link kept
        assert two.exec("ls /workspace/not-in-the-image").exit_code != 0  # the workspace is not the image
        assert two.diff()["changes"] == []  # the image is its start
        sh(two, "echo two > /etc/two && rm /etc/added")
        three = two.client.image_commit(two.id, "bb:3")
        assert [layer["diff_id"] for layer in three["image"]["layers"][:2]] == [
            layer["diff_id"] for layer in done["image"]["layers"]
        ]  # stacked: the first two layers shared

    with Sandbox.create(settings=daemon.settings, image="bb:3") as last:
        assert sh(last, "cat /etc/two /etc/hardlink; ls /usr/bin") == "two\nadded\nonly\n"
        assert last.exec("ls /etc/added").exit_code != 0 and last.exec("ls /etc/group").exit_code != 0
    rootfs = Path(three["image"]["rootfs"])
    assert not os.path.lexists(rootfs / "etc" / "group") and not list(rootfs.rglob(".wh.*"))


def test_a_sandbox_without_an_image_cannot_be_committed(daemon: Daemon) -> None:
    with Sandbox.create(settings=daemon.settings) as sbx:
        r = cli(daemon, "image", "commit", sbx.id, "nothing:1", "--json")
        assert r.returncode == 2 and json.loads(r.stdout)["error"]["kind"] == "invalid"
    r = cli(daemon, "image", "list", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == []
