"""flatten: one root filesystem from unpacked layers, OCI whiteouts applied exactly, nothing copied."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from tests.layertar import GZIP, E, write_layer

from hutch import errors
from hutch.providers.local.images.flatten import flatten
from hutch.providers.local.images.unpack import unpack_layer

ROOT = os.geteuid() == 0


class Layers:
    def __init__(self, top: Path) -> None:
        self.top = top
        self.dirs: list[Path] = []

    def add(self, *entries: E) -> Path:
        n = len(self.dirs)
        blob = write_layer(self.top / f"blob{n}", list(entries))
        dest = self.top / "layers" / f"l{n}"
        unpack_layer(blob, dest, media_type=GZIP, keep_owners=ROOT)
        self.dirs.append(dest)
        return dest

    def flatten(self) -> Path:
        root = self.top / "roots" / "r"
        flatten(self.dirs, root)
        assert [p.name for p in root.parent.iterdir()] == ["r"], "no temporary directory left"
        return root


def tree(root: Path) -> dict[str, str]:
    """path -> 'dir' | 'link:TARGET' | file content."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = p.read_text()
    return out


@pytest.fixture
def layers(tmp_path: Path) -> Layers:
    return Layers(tmp_path)


def test_upper_layers_win_and_files_are_hardlinks(layers: Layers) -> None:
    low = layers.add(E("etc/os", data=b"low"), E("etc/keep", data=b"keep"), E("bin", "symlink", link="usr/bin"))
    up = layers.add(E("etc/os", data=b"up"), E("usr/bin/sh", data=b"sh", mode=0o755))
    root = layers.flatten()
    assert tree(root) == {
        "etc": "dir",
        "etc/os": "up",
        "etc/keep": "keep",
        "bin": "link:usr/bin",
        "usr": "dir",
        "usr/bin": "dir",
        "usr/bin/sh": "sh",
    }
    assert (root / "etc/os").stat().st_ino == (up / "etc/os").stat().st_ino  # no data copied
    assert (root / "etc/keep").stat().st_ino == (low / "etc/keep").stat().st_ino
    assert stat.S_IMODE((root / "usr/bin/sh").stat().st_mode) == 0o755


def test_a_whiteout_removes_a_lower_file(layers: Layers) -> None:
    layers.add(E("etc/passwd", data=b"p"), E("etc/group", data=b"g"))
    layers.add(E("etc/.wh.passwd"))
    assert tree(layers.flatten()) == {"etc": "dir", "etc/group": "g"}


def test_a_whiteout_removes_a_whole_lower_directory(layers: Layers) -> None:
    layers.add(E("var/cache/apt/a", data=b"a"), E("var/cache/apt/sub/b", data=b"b"), E("var/log", "dir"))
    layers.add(E("var/cache/.wh.apt"))
    assert tree(layers.flatten()) == {"var": "dir", "var/cache": "dir", "var/log": "dir"}


def test_an_opaque_directory_hides_lower_entries_and_keeps_its_own(layers: Layers) -> None:
    layers.add(E("opt/old", data=b"o"), E("opt/sub/deep", data=b"d"), E("other", data=b"x"))
    layers.add(E("opt/.wh..wh..opq"), E("opt/new", data=b"n"), E("opt/sub/mine", data=b"m"))
    assert tree(layers.flatten()) == {"opt": "dir", "opt/new": "n", "opt/sub": "dir", "opt/sub/mine": "m", "other": "x"}


def test_a_whited_out_path_can_be_added_again(layers: Layers) -> None:
    layers.add(E("app/conf", data=b"v1"), E("app/lib/x", data=b"x"))
    layers.add(E("app/.wh.conf"), E(".wh.app"))
    layers.add(E("app/conf", data=b"v3"))
    assert tree(layers.flatten()) == {"app": "dir", "app/conf": "v3"}


def test_a_whiteout_and_a_new_entry_in_one_layer(layers: Layers) -> None:
    layers.add(E("d/old", data=b"o"))
    layers.add(E(".wh.d"), E("d/new", data=b"n"))  # rm -rf d && mkdir d in one step
    assert tree(layers.flatten()) == {"d": "dir", "d/new": "n"}


def test_a_whiteout_never_hides_its_own_layer(layers: Layers) -> None:
    layers.add(E("a", data=b"a"))
    layers.add(E("only-here", data=b"mine"), E(".wh.only-here"), E(".wh.nothing"))
    assert tree(layers.flatten()) == {"a": "a", "only-here": "mine"}


def test_markers_never_appear_even_from_a_single_layer(layers: Layers) -> None:
    layers.add(E(".wh.x"), E("d/.wh..wh..opq"), E("d/f", data=b"f"))
    assert tree(layers.flatten()) == {"d": "dir", "d/f": "f"}


def test_types_replace_each_other(layers: Layers) -> None:
    layers.add(E("f2d", data=b"file"), E("d2f/x", data=b"x"), E("l2d", "symlink", link="/etc"))
    layers.add(E("f2d/in", data=b"in"), E("d2f", data=b"now a file"), E("l2d/in", data=b"in"))
    assert tree(layers.flatten()) == {"f2d": "dir", "f2d/in": "in", "d2f": "now a file", "l2d": "dir", "l2d/in": "in"}


def test_symlinks_in_layers_are_never_followed(layers: Layers, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret")
    layers.add(E("d", "symlink", link=str(outside)), E("e", "symlink", link=str(outside)))
    layers.add(E("d/.wh.secret"), E("d/planted", data=b"p"), E("e/.wh..wh..opq"))
    root = layers.flatten()
    assert [p.name for p in outside.iterdir()] == ["secret"] and (outside / "secret").read_text() == "secret"
    assert tree(root) == {"d": "dir", "d/planted": "p", "e": "dir"}


def test_directory_metadata_comes_from_the_highest_layer(layers: Layers) -> None:
    layers.add(E("tmp", "dir", mode=0o755, mtime=1_000), E("srv", "dir", mode=0o700, mtime=2_000, uid=7, gid=8))
    layers.add(
        E("tmp", "dir", mode=0o1777, mtime=3_000), E("tmp/x", data=b"x"), E("lnk", "symlink", link="tmp", mtime=4_000, uid=9)
    )
    root = layers.flatten()
    st = (root / "tmp").stat()
    assert (stat.S_IMODE(st.st_mode), st.st_mtime) == (0o1777, 3_000)
    srv = (root / "srv").stat()
    assert stat.S_IMODE(srv.st_mode) == 0o700 and srv.st_mtime == 2_000
    assert (root / "lnk").lstat().st_mtime == 4_000
    if ROOT:
        assert (srv.st_uid, srv.st_gid) == (7, 8) and (root / "lnk").lstat().st_uid == 9


def test_a_layer_with_a_fifo_fails_and_leaves_nothing(layers: Layers) -> None:
    bad = layers.add(E("a", data=b"a"))
    os.mkfifo(bad / "fifo")
    with pytest.raises(errors.InvalidError, match="'fifo' is a device, fifo or socket"):
        flatten(layers.dirs, layers.top / "roots" / "r")
    assert list((layers.top / "roots").iterdir()) == []


def test_an_existing_root_is_a_conflict(layers: Layers) -> None:
    layers.add(E("a", data=b"a"))
    root = layers.top / "roots" / "r"
    root.mkdir(parents=True)
    (root / "x").write_text("x")
    with pytest.raises(errors.ConflictError):
        flatten(layers.dirs, root)
    assert [p.name for p in root.parent.iterdir()] == ["r"] and (root / "x").read_text() == "x"
