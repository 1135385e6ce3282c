"""The project names no package registry's host (the index, mirror and registry hosts this
machine installs from): examples use example.com, tests read real hosts from the machine.

The hosts are kept as hashes, so this file does not name them either.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# sha256 prefixes of the hosts (and their parent domains) of the Python, Debian and npm registries
FORBIDDEN = {
    "a4aa2ac280bb8d1a",
    "c899567ee9068517",
    "8b5bb5eb9d758455",
    "e680c440a2e92079",
    "1ba4e37997a2e986",
    "75adac515f0bd3db",
    "0dc11026ac75c015",
    "8743857e3ea00fd1",
    "3ca29e55be4befa4",
    "70bb4000cd2fab03",
}
HOST = re.compile(rb"[a-z0-9][a-z0-9.-]*\.[a-z]{2,}", re.IGNORECASE)


def _suffixes(host: str) -> list[str]:
    parts = host.lower().strip(".").split(".")
    return [".".join(parts[i:]) for i in range(len(parts) - 1)]


def test_no_registry_host_is_named() -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    found = []
    for name in filter(None, files):
        path = ROOT / name.decode()
        if not path.is_file():
            continue
        for m in HOST.finditer(path.read_bytes()):
            for host in _suffixes(m.group().decode("ascii", "replace")):
                if hashlib.sha256(host.encode()).hexdigest()[:16] in FORBIDDEN:
                    found.append(f"{name.decode()}: {host}")
    assert not found, "a package registry's host is named (use example.com, or read it from the machine):\n" + "\n".join(found)


def test_the_check_sees_a_named_host(tmp_path: Path) -> None:
    planted = "ab" + "c.pypi" + ".org"  # built here so this file names no host whole
    hits = [h for m in HOST.finditer(planted.encode()) for h in _suffixes(m.group().decode())]
    assert any(hashlib.sha256(h.encode()).hexdigest()[:16] in FORBIDDEN for h in hits)
