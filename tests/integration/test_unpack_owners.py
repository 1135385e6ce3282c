"""Owners of unpacked layers: a root daemon keeps the tar's numeric ids, a normal user owns everything."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.integration.test_nonroot import NOBODY, _as_nobody, _python_for, nobody_env
from tests.layertar import GZIP, E, write_layer

from hutch import errors
from hutch.providers.local.images.unpack import unpack_layer

__all__ = ["nobody_env"]  # the fixture, shared with the other unprivileged tests

ENTRIES = [
    E("etc", "dir", uid=0, gid=0, uname="nobody", gname="nogroup"),
    E("etc/app.conf", data=b"c", uid=1234, gid=5678, uname="root", gname="root"),  # names are never looked up
    E("home/bob", "dir", mode=0o700, uid=1000, gid=1000),
    E("home/bob/.profile", data=b"p", uid=1000, gid=1000, mode=0o600),
    E("home/bob/link", "symlink", link=".profile", uid=1000, gid=1000),
    E("srv", "dir", mode=0o555),
]

CHILD = """
import json, os, sys
from pathlib import Path
from hutch import errors
from hutch.providers.local.images.unpack import unpack_layer, remove_tree
blob, top = Path(sys.argv[1]), Path(sys.argv[2])
out = {}
unpack_layer(blob, top / "mine", media_type=sys.argv[3], keep_owners=False)
out["owners"] = sorted({(p.lstat().st_uid, p.lstat().st_gid) for p in (top / "mine").rglob("*")})
out["srv"] = oct((top / "mine" / "srv").stat().st_mode & 0o7777)
remove_tree(top / "mine")
out["removed"] = not (top / "mine").exists()
try:
    unpack_layer(blob, top / "kept", media_type=sys.argv[3], keep_owners=True)
except errors.HutchError as exc:
    out["keep_owners"] = [exc.kind, exc.message]
out["left"] = sorted(p.name for p in top.iterdir())
print(json.dumps(out))
"""


def test_a_root_daemon_keeps_the_tars_numeric_owners(tmp_path: Path) -> None:
    blob = write_layer(tmp_path / "blob", ENTRIES)
    if os.geteuid() != 0:  # the suite runs as root; as a user, the other test covers this path
        with pytest.raises(errors.UnavailableError, match="cannot set the owner"):
            unpack_layer(blob, tmp_path / "kept", media_type=GZIP, keep_owners=True)
        return
    unpack_layer(blob, tmp_path / "kept", media_type=GZIP, keep_owners=True)
    owner = {
        name: (lambda s: (s.st_uid, s.st_gid))((tmp_path / "kept" / name).lstat())
        for name in ("etc", "etc/app.conf", "home/bob/.profile", "home/bob/link")
    }
    assert owner == {
        "etc": (0, 0),
        "etc/app.conf": (1234, 5678),
        "home/bob/.profile": (1000, 1000),
        "home/bob/link": (1000, 1000),
    }
    assert (tmp_path / "kept/srv").stat().st_mode & 0o7777 == 0o555
    unpack_layer(blob, tmp_path / "mine", media_type=GZIP, keep_owners=False)
    assert {(p.lstat().st_uid, p.lstat().st_gid) for p in (tmp_path / "mine").rglob("*")} == {(0, 0)}


def test_a_normal_user_owns_the_layer_and_cannot_keep_owners(nobody_env: tuple[dict[str, str], Path]) -> None:
    env, home = nobody_env
    try:
        blob = write_layer(home / "blob", ENTRIES)
        top = home / "layers"
        top.mkdir()
        if os.geteuid() == 0:
            for p in (blob, top):
                os.chown(p, NOBODY, NOBODY)
        pre = _as_nobody if os.geteuid() == 0 else None
        r = subprocess.run(
            [_python_for(NOBODY), "-c", CHILD, str(blob), str(top), GZIP],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=pre,
        )
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        me = NOBODY if os.geteuid() == 0 else os.geteuid()
        assert [next(iter(o)) for o in out["owners"]] == [me]
        assert out["srv"] == "0o755"  # the owner keeps rwx on directories: the tree stays removable
        assert out["removed"] is True
        assert out["keep_owners"][0] == "unavailable" and "cannot set the owner" in out["keep_owners"][1]
        assert out["left"] == []  # nothing half-unpacked, no temporary directory
    finally:
        subprocess.run(["rm", "-rf", str(home.parent if os.geteuid() == 0 else home)], check=False)
