"""hutch image build: an image made in a throwaway sandbox, its steps in command-line order; a failing
step leaves no image and no sandbox (docs/images.md, "Templates: commit and build")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import Daemon, hutch_env

from hutch import Sandbox

pytestmark = pytest.mark.integration


def cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env=hutch_env(d.home), capture_output=True, text=True, timeout=300
    )


def live(d: Daemon) -> list[str]:
    """Sandboxes not destroyed (``list --all`` also shows the destroyed ones)."""
    r = cli(d, "list", "--all", "--json")
    assert r.returncode == 0, r.stderr
    return [s["id"] for s in json.loads(r.stdout) if s["state"] != "destroyed"]


def sh(sbx: Sandbox, command: str) -> str:
    r = sbx.exec(command)
    assert r.exit_code == 0, (command, r.stdout, r.stderr)
    return r.stdout


def test_a_build_copies_runs_and_sets_env_and_workdir_in_order(daemon: Daemon, bb: str, tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello from the client\n")
    tree = tmp_path / "app"
    (tree / "lib" / "empty").mkdir(parents=True)
    (tree / "lib" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tree / "lib" / "run.sh").chmod(0o755)
    os.symlink("lib/run.sh", tree / "start")
    r = cli(
        daemon,
        "image", "build", "--from", bb, "--tag", "built:1",
        "--copy", f"{tmp_path / 'hello.txt'}:/opt/",
        "--run", "cat /opt/hello.txt > /etc/seen-before-env; echo \"[$GREETING]\" >> /etc/seen-before-env",
        "--env", "GREETING=hi there",
        "--workdir", "/srv/app",
        "--copy", f"{tree}:.",
        "--run", "echo \"$GREETING in $(pwd)\" > made-here && ./start > started",
        "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    image = json.loads(r.stdout)
    assert image["names"] == ["built:1"] and len(image["layers"]) == 2
    assert "step 5/6" in r.stderr and "destroyed" in r.stderr  # progress on stderr

    with Sandbox.create(settings=daemon.settings, image="built:1") as sbx:
        assert sh(sbx, "cat /opt/hello.txt") == "hello from the client\n"
        assert sh(sbx, "cat /etc/seen-before-env") == "hello from the client\n[]\n"  # --env came after that --run
        assert sh(sbx, "pwd") == "/srv/app\n"  # the image's workdir
        assert sh(sbx, 'echo "$GREETING"') == "hi there\n"  # the image's env
        assert sh(sbx, "cat made-here started") == "hi there in /srv/app\nran\n"
        assert sh(sbx, "stat -c %a lib/run.sh; readlink start; ls -d lib/empty") == "755\nlib/run.sh\nlib/empty\n"
    assert live(daemon) == []  # the build sandbox is gone (the one above too)


def test_a_failing_step_leaves_no_image_and_no_sandbox(daemon: Daemon, bb: str, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    r = cli(
        daemon,
        "image", "build", "--from", bb, "--tag", "broken:1",
        "--copy", f"{tmp_path / 'f'}:/opt/f",
        "--run", "echo first-line; echo the-reason >&2; exit 7",
        "--run", "touch /never",
        "--json",
    )  # fmt: skip
    assert r.returncode == 1, (r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]
    assert "exit code 7" in err["message"] and "the-reason" in err["message"] and "first-line" in err["message"]
    assert "step 2" in err["message"] and "touch /never" not in r.stderr  # stopped at the failing step
    assert live(daemon) == [] and "destroyed" in r.stderr  # it was made, and is gone
    names = [n for img in json.loads(cli(daemon, "image", "list", "--json").stdout) for n in img["names"]]
    assert names == ["bb:1"]


def test_bad_steps_are_refused_before_any_sandbox(daemon: Daemon, bb: str, tmp_path: Path) -> None:
    for args in (
        ["--copy", "no-colon"],
        ["--copy", f"{tmp_path / 'missing'}:/x"],
        ["--env", "NOVALUE"],
    ):
        r = cli(daemon, "image", "build", "--from", bb, "--tag", "bad:1", *args, "--json")
        assert r.returncode == 2 and json.loads(r.stdout)["error"]["kind"] == "invalid", (args, r.stdout, r.stderr)
    r = cli(daemon, "image", "build", "--from", bb, "--tag", "bad:1", "--workdir", "/workspace/x", "--json")
    assert r.returncode == 2 and "not part of an image" in json.loads(r.stdout)["error"]["message"]
    assert live(daemon) == []


def test_ctrl_c_destroys_the_build_sandbox(daemon: Daemon, bb: str) -> None:
    args = [sys.executable, "-m", "hutch", "image", "build", "--from", bb, "--tag", "never:1", "--run", "sleep 300"]
    proc = subprocess.Popen(args, env=hutch_env(daemon.home), stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the step has started: its sandbox exists
            if "step 1/1" in line:
                break
        assert len(live(daemon)) == 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert live(daemon) == []
    names = [n for img in json.loads(cli(daemon, "image", "list", "--json").stdout) for n in img["names"]]
    assert names == ["bb:1"]


def test_an_import_sets_the_config_a_root_filesystem_lacks(daemon: Daemon, busybox_dir: Path) -> None:
    r = cli(
        daemon,
        "image", "import", f"rootfs:{busybox_dir}", "svc:1",
        "--entrypoint", "/bin/sh -c", "--cmd", json.dumps(['echo "$GREETING from $(pwd) as $(id -u)"']),
        "--workdir", "/etc", "--env", "GREETING=hello there", "--user", "1000:1000", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    image = json.loads(r.stdout.splitlines()[-1])["image"]
    config = image["config"]
    assert config["entrypoint"] == ["/bin/sh", "-c"] and config["cmd"] == ['echo "$GREETING from $(pwd) as $(id -u)"']
    assert config["workdir"] == "/etc" and "GREETING=hello there" in config["env"] and config["user"] == "1000:1000"
    ran = cli(daemon, "run", "--image", "svc:1")  # no command: the image's entrypoint and cmd, as its user, in its workdir
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "hello there from /etc as 1000"

    for bad, why in ((("--cmd", "[1, 2]"), "array of strings"), (("--workdir", "etc"), "relative"), (("--env", "NOPE"), "--env")):
        r = cli(daemon, "image", "import", f"rootfs:{busybox_dir}", "bad:1", *bad, "--json")
        assert r.returncode == 2 and why in json.loads(r.stdout)["error"]["message"], r.stdout
    assert "bad:1" not in cli(daemon, "image", "list").stdout


def test_a_build_streams_each_steps_output_bounds_it_and_sets_cmd_entrypoint_user(daemon: Daemon, bb: str) -> None:
    args = [
        sys.executable, "-m", "hutch", "image", "build", "--from", bb, "--tag", "svc:2",
        "--run", "echo first-line; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo after-go",
        "--entrypoint", "/bin/sh -c", "--cmd", json.dumps(["echo I am $(id -u)"]), "--user", "1000",
    ]  # fmt: skip
    proc = subprocess.Popen(args, env=hutch_env(daemon.home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        sandbox = ""
        for line in proc.stderr:  # the step's first line shows while the step still waits for /tmp/go
            seen.append(line)
            if line.startswith("hutch: build sandbox "):
                sandbox = line.split()[3]
            if line.strip() == "| first-line":
                break
        assert sandbox and "| after-go" not in "".join(seen) and proc.poll() is None, seen
        assert cli(daemon, "exec", sandbox, "--", "touch", "/tmp/go").returncode == 0
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "| after-go" in err
    ran = cli(daemon, "run", "--image", "svc:2")
    assert ran.returncode == 0 and ran.stdout.strip() == "I am 1000", (ran.stdout, ran.stderr)

    r = cli(
        daemon, "image", "build", "--from", bb, "--tag", "slow:1", "--timeout", "2s", "--run", "echo going; sleep 300", "--json"
    )
    assert r.returncode == 1, (r.stdout, r.stderr)
    message = json.loads(r.stdout)["error"]["message"]
    assert "stopped at its --timeout of 2s" in message and "going" in message
    assert live(daemon) == [] and "slow:1" not in cli(daemon, "image", "list").stdout
