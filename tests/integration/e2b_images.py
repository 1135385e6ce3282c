"""The root filesystem of the code interpreter's test image: the day's Debian root
(debian_root.py, python3 3.11) with ipykernel installed into its /usr/local dist-packages by
this machine's pip (wheels for CPython 3.11 from the package index, as the SDK's own venv is
made), kept under the test cache next to the Debian root and made once a day."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

from tests.integration.debian_root import CACHE, debian_root

PACKAGES = ("ipykernel>=6.20",)


def interpreter_root() -> Path:
    debian, _mirror = debian_root()
    root = CACHE / f"{debian.name}-ipykernel"
    done = CACHE / f"{debian.name}-ipykernel.complete"
    with open(CACHE / "e2b-interpreter.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists() and root.is_dir():
            return root
        for old in CACHE.glob("debian-*-ipykernel*"):  # yesterday's
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["cp", "-a", "--reflink=auto", str(debian), str(tmp)], check=True, timeout=600)
        target = tmp / "usr/local/lib/python3.11/dist-packages"
        target.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--only-binary=:all:", "--python-version", "3.11"]
        subprocess.run([*pip, "--target", str(target), *PACKAGES], check=True, timeout=900)
        tmp.rename(root)
        done.write_text("")
    return root
