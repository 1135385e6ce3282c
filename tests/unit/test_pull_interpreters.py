"""A pull's safe extraction on every Python 3 interpreter of this machine that can load this
install: the one running the tests, and the distribution's ``/usr/bin/python3`` (3.11.2 on
Debian 12, which has no ``tarfile.data_filter`` nor ``TarInfo.replace``: those came with 3.11.4).
Each runs ``transfer.pull_into`` on the same archives in a process of its own, with this
install's packages on its path."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest

import hutch

SRC = str(Path(hutch.__file__).resolve().parent.parent)
SYSTEM = "/usr/bin/python3"


def _version(python: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    major, minor, micro = (int(x) for x in out.stdout.split())
    return major, minor, micro


def interpreters() -> list[str]:
    """This one, and the system's when it is another interpreter of the same minor version (its
    packages are then importable from here)."""
    found = [sys.executable]
    system = _version(SYSTEM)
    if system is not None and system[:2] == sys.version_info[:2] and os.path.realpath(SYSTEM) != os.path.realpath(sys.executable):
        found.append(SYSTEM)
    return found


def test_the_distributions_python_is_among_them_on_debian_12() -> None:
    """Where /usr/bin/python3 is 3.11.2 (Debian 12) and the tests run on 3.11, it is tested too."""
    system = _version(SYSTEM)
    if system is not None and system[:2] == (3, 11) == sys.version_info[:2]:
        assert SYSTEM in interpreters()
    assert interpreters()[0] == sys.executable


PULL = """
import json, sys
from pathlib import Path
from hutch.client import transfer
from hutch.errors import InvalidError
data, out = Path(sys.argv[1]).read_bytes(), Path(sys.argv[2])
try:
    summary = transfer.pull_into(data, out)
except InvalidError as exc:
    summary = {"refused": str(exc)}
print(json.dumps(summary))
"""


def _pull(python: str, archive: bytes, tmp: Path, name: str) -> dict[str, object]:
    (tmp / f"{name}.tar").write_bytes(archive)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([SRC, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    done = subprocess.run(
        [python, "-I" if python == sys.executable else "-s", "-c", PULL, str(tmp / f"{name}.tar"), str(tmp / name)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _archive(members: list[tuple[str, str, str | bytes, int]]) -> bytes:
    """(name, kind "file"/"dir"/"link", content or link target, mode)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, what, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, str(what)
                tar.addfile(info)
            else:
                data = what if isinstance(what, bytes) else what.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("python", interpreters())
def test_a_pull_unpacks_files_modes_and_inner_links(python: str, tmp_path: Path) -> None:
    archive = _archive(
        [
            ("d", "dir", "", 0o755),
            ("d/run.sh", "file", "#!/bin/sh\necho hi\n", 0o755),
            ("d/secret", "file", "s", 0o600),
            ("ro", "dir", "", 0o555),  # a directory without write: its files still land
            ("ro/inside", "file", "i", 0o644),
            ("link", "link", "d/run.sh", 0o777),
        ]
    )
    summary = _pull(python, archive, tmp_path, "out")
    out = tmp_path / "out"
    assert summary["files_received"] == 4, summary
    assert (out / "d/run.sh").read_text() == "#!/bin/sh\necho hi\n"
    assert (out / "d/run.sh").stat().st_mode & 0o777 == 0o755
    assert (out / "d/secret").stat().st_mode & 0o777 == 0o600
    assert (out / "ro/inside").read_text() == "i"
    assert (out / "ro").stat().st_mode & 0o777 == 0o555
    assert os.readlink(out / "link") == "d/run.sh"
    (out / "ro").chmod(0o755)  # (so that pytest can remove it)


@pytest.mark.parametrize("python", interpreters())
def test_a_pull_never_writes_outside_its_directory(python: str, tmp_path: Path) -> None:
    """Links that leave the tree are skipped, also when a link made by an earlier member is
    what makes them leave; a path that leaves it refuses the archive."""
    escaping = _archive(
        [
            ("up", "link", "..", 0o777),
            ("abs", "link", "/etc", 0o777),
            ("b", "link", ".", 0o777),
            ("a", "link", "b/..", 0o777),  # inside when read alone, outside through "b"
            ("a/escape", "file", "x", 0o644),
            ("ok", "link", "b", 0o777),
        ]
    )
    summary = _pull(python, escaping, tmp_path, "out")
    out = tmp_path / "out"
    assert not (tmp_path / "escape").exists()
    assert not (out / "up").is_symlink() and not (out / "abs").is_symlink() and not (out / "a").is_symlink()
    assert (out / "ok").is_symlink() and summary["skipped"] == 2, summary
    refused = _pull(python, _archive([("../evil", "file", "e", 0o644)]), tmp_path, "out2")
    assert "outside the tree" in str(refused.get("refused")), refused
    assert not (tmp_path / "evil").exists()
