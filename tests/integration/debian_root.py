"""A Debian minbase root filesystem (with python3-pip) built by mmdebstrap from this machine's own
apt sources, cached on disk by suite, architecture and day: CI builds it once per run.

The mirror is read from the machine at test time (``/etc/apt/sources.list.d/*.sources``, then
``/etc/apt/sources.list``): the project names no package registry.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("HUTCH_TEST_CACHE") or "/var/cache/hutch-tests")
PACKAGES = ("ca-certificates", "python3-pip")
BUILD_TIMEOUT = 1500


@dataclass(frozen=True)
class Mirror:
    uri: str
    suite: str
    keyring: str | None

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.uri).hostname or ""

    def line(self) -> str:
        opts = f"[signed-by={self.keyring}] " if self.keyring else ""
        return f"deb {opts}{self.uri} {self.suite} main"


def machine_mirror(etc: Path = Path("/etc/apt")) -> Mirror:
    """The first Debian ``deb`` source of this machine with the ``main`` component."""
    for file in sorted((etc / "sources.list.d").glob("*.sources")):
        for stanza in file.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and "main" in fields.get("components", "").split():
                suites = [s for s in fields.get("suites", "").split() if "-" not in s]
                if fields.get("uris") and suites:
                    return Mirror(fields["uris"].split()[0], suites[0], fields.get("signed-by"))
    legacy = etc / "sources.list"
    for line in legacy.read_text().splitlines() if legacy.exists() else []:
        parts = line.split()
        if parts[:1] == ["deb"]:
            opts = parts[1] if parts[1].startswith("[") else ""
            rest = parts[2:] if opts else parts[1:]
            if len(rest) >= 3 and "main" in rest[2:] and "-" not in rest[1]:
                keyring = next((o.split("=", 1)[1] for o in opts.strip("[]").split() if o.startswith("signed-by=")), None)
                return Mirror(rest[0], rest[1], keyring)
    raise RuntimeError("this machine has no Debian apt source with main: the apt tests need one")


def debian_root() -> tuple[Path, Mirror]:
    """The root filesystem directory (owners kept: build it as root), built once a day per suite."""
    mirror = machine_mirror()
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    key = f"debian-{mirror.suite}-{arch}-minbase-{'-'.join(PACKAGES)}-{datetime.date.today():%Y%m%d}"
    root, done = CACHE / key, CACHE / f"{key}.complete"
    if done.exists():
        return root, mirror
    CACHE.mkdir(parents=True, exist_ok=True)
    os.chmod(CACHE, 0o755)
    tarball = CACHE / f"{key}.tar"
    if not tarball.exists():
        part = tarball.with_suffix(".part.tar")
        argv = ["mmdebstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", mirror.suite, str(part), mirror.line()]
        subprocess.run(argv, check=True, capture_output=True, timeout=BUILD_TIMEOUT)
        part.rename(tarball)
    tmp = CACHE / f"{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    # owners as the tarball says (numeric), no device nodes (an image never carries them)
    tar = ["tar", "--numeric-owner", "--exclude=./dev/*", "-xpf", str(tarball), "-C", str(tmp)]
    subprocess.run(tar, check=True, capture_output=True, timeout=600)
    os.chmod(tmp, 0o755)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    done.write_text("")
    for old in CACHE.glob(f"debian-{mirror.suite}-{arch}-*"):  # yesterday's
        if not old.name.startswith(key):
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
    return root, mirror
