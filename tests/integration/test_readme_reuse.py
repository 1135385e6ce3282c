"""The README's image example, run as written against this machine: an image named
python:3.12-slim (the tests' Debian root, which has python3 and pip) is pushed to a local
registry, pulled (the README's ``hutch image pull python:3.12-slim``, from that registry), and the
README's ``hutch run --image python:3.12-slim --reuse --sync . --allow-host "$INDEX" --allow-host
"$FILES" -- sh -c 'pip install -q pytest && pytest -x'`` line is run twice in a project directory:
pytest is installed through the egress proxy into the image sandbox's own root, the project's test
passes, and the second run reuses the first one's sandbox. The line is read from README.md, so an
edit of it is what is tested; only the image's name gets the local registry's host in front.

The image sets what the official python image has and a Debian root lacks: pip not refused by
PEP 668 (``PIP_BREAK_SYSTEM_PACKAGES``), /usr/local/bin on PATH, and this machine's package index
(``PIP_INDEX_URL``: the host $INDEX names); the daemon trusts this machine's CA bundle in image
sandboxes (``image_host_ca``), as docs/images.md says to where a proxy intercepts outside TLS."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from tests.conftest import ROOT, Daemon, destroy_all, hutch_env, sweep
from tests.imagekit import Registry, image_parts, oci_layout
from tests.integration.debian_root import debian_root
from tests.integration.image_roots import shared_dir
from tests.integration.test_image_users import pip_index

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the Debian root keeps its owners: built as root")
IMAGE = "python:3.12-slim"


def readme_lines() -> tuple[str, str]:
    """The README's pull line and its run line (continuations joined), as written."""
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    pull = re.search(rf"^hutch image pull {re.escape(IMAGE)}\b.*$", text, re.M)
    run = re.search(rf"^hutch run --image {re.escape(IMAGE)} --reuse .*$", text, re.M)
    assert pull and run, "the README's image example changed: update this test"
    return pull.group(0).split("#")[0].strip(), run.group(0).split("   #")[0].strip()


def hutch(home: Path, line: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``line`` as written through a POSIX shell (its variables expanded from ``env``), ``hutch`` being this one."""
    assert line.startswith("hutch ")
    script = f'hutch() {{ {shlex.quote(sys.executable)} -m hutch "$@"; }}; {line}'
    full = hutch_env(home, **env)
    return subprocess.run(["sh", "-c", script], env=full, cwd=cwd, capture_output=True, text=True, timeout=900)


def test_the_readmes_reuse_example_runs_against_a_local_python_image(tmp_path: Path) -> None:
    pull_line, run_line = readme_lines()
    root, _ = debian_root()
    index, files = pip_index()
    tar = subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", "-", "."], capture_output=True, check=True).stdout
    env = [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "PIP_BREAK_SYSTEM_PACKAGES=1",
        f"PIP_INDEX_URL={index}",
        "PIP_ROOT_USER_ACTION=ignore",
    ]
    layout = tmp_path / "layout"
    oci_layout(layout, {"py": [(*image_parts(layout, [tar], cmd=["python3"], env=env, workdir=None), None)]})
    del tar
    reg = Registry().start()
    home = shared_dir("hutch-readme-")
    daemon = Daemon(home, HUTCH_IMAGE_HOST_CA="system").start()
    try:
        reg.push(layout, "py", IMAGE)
        ref = f"{reg.host}/{IMAGE}"
        project = tmp_path / "project"
        project.mkdir()
        (project / "test_example.py").write_text("def test_it():\n    assert 1 + 1 == 2\n")

        r = hutch(home, pull_line.replace(IMAGE, ref, 1), project)
        assert r.returncode == 0, r.stderr
        hosts = {"INDEX": urllib.parse.urlsplit(index).hostname or "", "FILES": files}
        line = run_line.replace(IMAGE, ref, 1)
        for _ in range(2):  # the second run reuses the sandbox (pytest is installed already)
            r = hutch(home, line, project, **hosts)
            assert r.returncode == 0, (r.stdout, r.stderr)
            assert "1 passed" in r.stdout, r.stdout
        live = [s for s in json.loads(hutch(home, "hutch list --json", project).stdout) if s["state"] != "destroyed"]
        assert len(live) == 1 and live[0]["spec"]["image"] == ref, live
    finally:
        try:
            destroy_all(home)
        finally:
            daemon.stop()
            reg.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)
