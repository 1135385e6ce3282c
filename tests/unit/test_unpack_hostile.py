"""Layers are hostile input: each hostile layer is refused or neutralised, nothing is written outside
the layer's directory and no temporary directory is left behind."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.layertar import GZIP, TAR, ZSTD, E, compress, sparse_entry_bytes, tar_bytes, write_layer, zero_bomb

from hutch import errors
from hutch.providers.local.images.unpack import DEFAULT_LIMITS, TEMP_MARKER, LayerStats, UnpackLimits, unpack_layer

MiB = 1 << 20


def snapshot(root: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Everything under ``root``: type+mode and content (files), target (symlinks)."""
    out: dict[str, tuple[int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            body: bytes | str | None = None
            if stat.S_ISREG(st.st_mode):
                body = p.read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(p)
            out[str(p.relative_to(root))] = (st.st_mode, body)
    return out


# The peak of Python's allocations during one unpack, in a process of its own: tracemalloc counts
# every thread's, and a thread another test left behind (seen once under load: +32 MiB) is not
# the unpack's.
_MEASURED = """
import json, sys, tracemalloc
from hutch import errors
from hutch.providers.local.images.unpack import UnpackLimits, unpack_layer
blob, dest, media_type, limits, keep = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5] == "1"
tracemalloc.start()
try:
    unpack_layer(blob, dest, media_type=media_type, limits=UnpackLimits(**limits), keep_owners=keep)
    message = None
except errors.InvalidError as exc:
    message = exc.message
print(json.dumps({"message": message, "peak": tracemalloc.get_traced_memory()[1]}))
"""


@dataclass
class Box:
    """A layers directory and, beside it, an ``outside`` tree no layer may touch."""

    top: Path
    layers: Path
    outside: Path

    def __post_init__(self) -> None:
        self.before = snapshot(self.outside)

    def layer(self, entries: list[E], how: str = "gzip") -> Path:
        return write_layer(self.top / "blob", entries, how)

    def dest(self) -> Path:
        return self.layers / "layer"

    def assert_untouched(self) -> None:
        assert snapshot(self.outside) == self.before
        leftovers = [p.name for p in self.layers.iterdir() if TEMP_MARKER in p.name]
        assert leftovers == [], f"temporary directories left behind: {leftovers}"

    def refused(self, blob: Path, match: str, *, media_type: str = GZIP, limits: UnpackLimits = DEFAULT_LIMITS) -> str:
        with pytest.raises(errors.InvalidError, match=match) as info:
            unpack_layer(blob, self.dest(), media_type=media_type, limits=limits, keep_owners=os.geteuid() == 0)
        assert not self.dest().exists()
        self.assert_untouched()
        return info.value.message

    def refused_measured(
        self, blob: Path, match: str, *, media_type: str = GZIP, limits: dict[str, int] | None = None
    ) -> tuple[str, int]:
        """:meth:`refused` in a process of its own: the refusal's message and the peak of Python's allocations."""
        argv = [str(blob), str(self.dest()), media_type, json.dumps(limits or {}), "1" if os.geteuid() == 0 else "0"]
        r = subprocess.run([sys.executable, "-c", _MEASURED, *argv], capture_output=True, text=True, timeout=300, check=True)
        got = json.loads(r.stdout.splitlines()[-1])
        assert got["message"] is not None and re.search(match, got["message"]), got
        assert not self.dest().exists()
        self.assert_untouched()
        return str(got["message"]), int(got["peak"])

    def unpacked(self, blob: Path, *, media_type: str = GZIP, limits: UnpackLimits = DEFAULT_LIMITS) -> LayerStats:
        stats = unpack_layer(blob, self.dest(), media_type=media_type, limits=limits, keep_owners=os.geteuid() == 0)
        self.assert_untouched()
        return stats


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret").write_text("secret")
    (outside / "dir" / "keep").write_text("keep")
    layers = tmp_path / "layers"
    layers.mkdir()
    yield Box(tmp_path, layers, outside)


# -- paths ---------------------------------------------------------------------------------------


def test_an_absolute_name_lands_inside_the_layer(box: Box) -> None:
    box.unpacked(box.layer([E("/etc/hostname", data=b"img"), E("//usr/x", data=b"x")]))
    assert (box.dest() / "etc/hostname").read_bytes() == b"img"
    assert (box.dest() / "usr/x").read_bytes() == b"x"


@pytest.mark.parametrize("name", ["../outside/evil", "a/../../outside/evil", "/../outside/evil", "a/b/../../../x"])
def test_a_dotdot_name_is_refused(box: Box, name: str) -> None:
    message = box.refused(box.layer([E("a/ok", data=b"1"), E(name, data=b"evil")]), "'..'")
    assert "layer blob" in message and repr(name) in message


def test_a_file_through_a_symlinked_parent_is_refused(box: Box) -> None:
    for target in (str(box.outside), "../../outside", "/"):
        box.refused(box.layer([E("d", "symlink", link=target), E("d/secret", data=b"pwned")]), r"parent 'd' is a symlink")


def test_a_file_through_a_deeper_symlinked_parent_is_refused(box: Box) -> None:
    entries = [E("a/b", "dir"), E("a/b/c", "symlink", link=str(box.outside)), E("a/b/c/dir/keep", data=b"x")]
    box.refused(box.layer(entries), r"parent 'a/b/c' is a symlink")


def test_symlinks_pointing_outside_are_kept_but_never_followed(box: Box) -> None:
    entries = [E("abs", "symlink", link=str(box.outside / "secret")), E("rel", "symlink", link="../../outside/secret")]
    box.unpacked(box.layer(entries))
    assert os.readlink(box.dest() / "abs") == str(box.outside / "secret")
    assert os.readlink(box.dest() / "rel") == "../../outside/secret"


def test_a_symlink_replaced_by_a_file_is_replaced_not_written_through(box: Box) -> None:
    entries = [E("f", data=b"one"), E("f", "symlink", link=str(box.outside / "secret")), E("f", data=b"two")]
    box.unpacked(box.layer(entries))
    assert not (box.dest() / "f").is_symlink() and (box.dest() / "f").read_bytes() == b"two"


def test_a_symlink_replaced_by_a_directory_is_a_real_directory(box: Box) -> None:
    entries = [E("d", "symlink", link=str(box.outside)), E("d", "dir"), E("d/new", data=b"n")]
    box.unpacked(box.layer(entries))
    assert (box.dest() / "d").is_dir() and not (box.dest() / "d").is_symlink()
    assert (box.dest() / "d/new").read_bytes() == b"n"


@pytest.mark.parametrize(
    ("link", "match"),
    [
        ("../outside/secret", "'..'"),
        ("/outside/secret", "not a file of this layer"),
        ("s/secret", "not a file of this layer"),  # through the symlink s -> outside: never followed
        ("s", "not a regular file"),  # the symlink itself
        ("dir", "not a regular file"),
    ],
)
def test_a_hardlink_must_name_a_regular_file_of_the_layer(box: Box, link: str, match: str) -> None:
    entries = [E("s", "symlink", link=str(box.outside)), E("dir", "dir"), E("hl", "hardlink", link=link)]
    box.refused(box.layer(entries), match)


def test_a_hardlink_to_a_file_of_the_layer_shares_its_inode(box: Box) -> None:
    box.unpacked(box.layer([E("usr/bin/a", data=b"bin", mode=0o755), E("usr/bin/b", "hardlink", link="usr/bin/a")]))
    assert (box.dest() / "usr/bin/a").stat().st_ino == (box.dest() / "usr/bin/b").stat().st_ino


def test_long_names_are_refused(box: Box) -> None:
    box.refused(box.layer([E("a/" + "x" * 256, data=b"")]), "longer than 255 bytes")
    box.refused(box.layer([E("/".join(["d" * 200] * 25), data=b"")]), "max_name_bytes")
    box.refused(box.layer([E("/".join(["d"] * 300), data=b"")]), "max_depth")


def test_a_huge_header_is_refused_with_bounded_memory(box: Box) -> None:
    blob = box.layer([E("x", data=b"", pax={"comment": "c" * (4 * MiB)})])
    _, peak = box.refused_measured(blob, "headers are larger than allowed")
    assert peak < 3 * MiB, peak


# -- types and modes ----------------------------------------------------------------------------


def test_devices_and_fifos_are_skipped_and_noted(box: Box) -> None:
    entries = [E("dev/null", "chr"), E("dev/sda", "blk"), E("run/fifo", "fifo"), E("etc/ok", data=b"ok")]
    stats = box.unpacked(box.layer(entries))
    assert stats.skipped_count == 3
    assert stats.skipped == ("dev/null: a device node, skipped", "dev/sda: a device node, skipped", "run/fifo: a fifo, skipped")
    assert not os.path.lexists(box.dest() / "dev/null") and not os.path.lexists(box.dest() / "run/fifo")
    assert (box.dest() / "etc/ok").read_bytes() == b"ok"


def test_an_unknown_entry_type_is_refused(box: Box) -> None:
    box.refused(box.layer([E("vol", "V")]), "type 'V'")


def test_setuid_and_setgid_are_cleared_and_sticky_dirs_kept(box: Box) -> None:
    entries = [
        E("tmp", "dir", mode=0o1777),
        E("var/mail", "dir", mode=0o2775),
        E("usr/bin/su", data=b"su", mode=0o4755),
        E("usr/bin/wall", data=b"w", mode=0o2755),
        E("usr/bin/sticky", data=b"s", mode=0o1755),
        E("etc/shadow", data=b"", mode=0o640),
        E("ro", "dir", mode=0o555),
        E("ro/f", data=b"f", mode=0o444),
    ]
    stats = box.unpacked(box.layer(entries))
    mode = {name: stat.S_IMODE((box.dest() / name).lstat().st_mode) for name in ("tmp", "var/mail", "usr/bin/su", "usr/bin/wall")}
    assert mode == {"tmp": 0o1777, "var/mail": 0o775, "usr/bin/su": 0o755, "usr/bin/wall": 0o755}
    assert stat.S_IMODE((box.dest() / "usr/bin/sticky").stat().st_mode) == 0o755
    assert stat.S_IMODE((box.dest() / "etc/shadow").stat().st_mode) == 0o640
    assert stat.S_IMODE((box.dest() / "ro").stat().st_mode) == (0o555 if os.geteuid() == 0 else 0o755)
    assert stats.stripped_modes == 3


def test_xattrs_are_never_applied(box: Box) -> None:
    pax = {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "SCHILY.xattr.user.note": "x"}
    stats = box.unpacked(box.layer([E("usr/bin/ping", data=b"p", mode=0o755, pax=pax)]))
    assert os.listxattr(box.dest() / "usr/bin/ping", follow_symlinks=False) == []
    assert stats.xattrs_dropped == 2


def test_mtimes_are_kept(box: Box) -> None:
    box.unpacked(
        box.layer(
            [E("d", "dir", mtime=1_000_000), E("d/f", data=b"x", mtime=2_000_000), E("l", "symlink", link="d", mtime=3_000_000)]
        )
    )
    assert (box.dest() / "d").stat().st_mtime == 1_000_000
    assert (box.dest() / "d/f").stat().st_mtime == 2_000_000
    assert (box.dest() / "l").lstat().st_mtime == 3_000_000


# -- sizes, counts, bombs, time ------------------------------------------------------------------


def test_a_huge_sparse_file_is_refused_before_a_byte_is_written(box: Box) -> None:
    blob = box.top / "sparse"
    blob.write_bytes(compress(sparse_entry_bytes("big", 1 << 40, (1 << 40) - 4096, b"tail")))
    box.refused(blob, "over max_file_bytes")


def test_a_sparse_file_within_limits_is_written_sparse(box: Box) -> None:
    blob = box.top / "sparse"
    blob.write_bytes(compress(sparse_entry_bytes("big", 256 * MiB, 256 * MiB - 512, b"tail")))
    stats = box.unpacked(blob)
    st = (box.dest() / "big").stat()
    assert st.st_size == 256 * MiB and stats.bytes == 256 * MiB
    assert st.st_blocks * 512 < MiB  # holes take no disk
    with open(box.dest() / "big", "rb") as f:
        f.seek(256 * MiB - 512)
        assert f.read(4) == b"tail"


def test_too_many_entries_are_refused(box: Box) -> None:
    blob = box.layer([E(f"f{i}", data=b"") for i in range(500)])
    box.refused(blob, r"more than max_entries \(100\)", limits=UnpackLimits(max_entries=100))
    assert DEFAULT_LIMITS.max_entries == 1_000_000


def test_too_many_bytes_are_refused(box: Box) -> None:
    blob = box.layer([E("a", data=b"a" * MiB), E("b", data=b"b" * MiB)])
    box.refused(blob, "max_bytes", limits=UnpackLimits(max_bytes=MiB + MiB // 2))
    box.refused(blob, "max_file_bytes", limits=UnpackLimits(max_file_bytes=MiB // 2))


@pytest.mark.parametrize("how", ["gzip", "zstd"])
def test_a_decompression_bomb_stops_early_with_bounded_memory(box: Box, how: str) -> None:
    blob = box.top / "bomb"
    blob.write_bytes(zero_bomb(64 * MiB, how))
    limits = {"ratio_floor": 8 * MiB, "max_ratio": 100}
    message, peak = box.refused_measured(blob, "decompression bomb", media_type=GZIP if how == "gzip" else ZSTD, limits=limits)
    out, read = map(int, re.search(r"(\d+) bytes out of (\d+) read", message).groups())  # type: ignore[union-attr]
    assert 8 * MiB < out <= 10 * MiB  # stopped right after the floor, not at 64 MiB
    assert read <= blob.stat().st_size and out > 100 * read
    assert peak < 8 * MiB, peak


def test_the_default_limits_stop_a_bomb(box: Box) -> None:
    blob = box.top / "bomb"
    blob.write_bytes(zero_bomb(1 << 30))  # 1 GiB of zeros in ~1 MiB
    message = box.refused(blob, "decompression bomb")
    out = int(re.search(r"(\d+) bytes out", message).group(1))  # type: ignore[union-attr]
    assert out <= DEFAULT_LIMITS.ratio_floor + 2 * MiB


def test_unpacking_is_bounded_in_time(box: Box) -> None:
    blob = box.layer([E(f"f{i}", data=b"x") for i in range(50)])
    with pytest.raises(errors.TimeoutError_, match="longer than"):
        unpack_layer(blob, box.dest(), media_type=GZIP, limits=UnpackLimits(max_seconds=0), keep_owners=False)
    assert not box.dest().exists()
    box.assert_untouched()


# -- the stream ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("how", "media_type"), [("gzip", GZIP), ("zstd", ZSTD), ("none", TAR), ("gzip", "detect")])
def test_compressions_and_the_diff_id(box: Box, how: str, media_type: str) -> None:
    raw = tar_bytes([E("etc/os-release", data=b"ID=test\n"), E("bin", "symlink", link="usr/bin")])
    blob = box.top / "blob"
    blob.write_bytes(compress(raw, how))
    stats = box.unpacked(blob, media_type=media_type)
    assert stats.diff_id == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert stats.compression == how and stats.uncompressed_bytes == len(raw)
    assert stats.compressed_bytes == blob.stat().st_size
    assert (stats.entries, stats.files, stats.symlinks) == (2, 1, 1)


def test_an_unknown_media_type_is_refused(box: Box) -> None:
    box.refused(
        box.layer([E("x")]),
        "unsupported layer media type 'application/vnd.example.layer'",
        media_type="application/vnd.example.layer",
    )


def test_data_unlike_its_media_type_is_refused(box: Box) -> None:
    box.refused(box.layer([E("x")], how="none"), "not compressed as its media type")
    blob = box.top / "xz"
    blob.write_bytes(b"\xfd7zXZ\x00" + b"\0" * 100)
    box.refused(blob, "xz or bzip2")


@pytest.mark.parametrize(
    ("mangle", "match"),
    [
        (lambda b: b[: len(b) // 2], "corrupt or truncated"),  # a cut gzip stream
        (lambda b: b[:12] + bytes(x ^ 0xFF for x in b[12:40]) + b[40:], "corrupt|not a valid tar"),
    ],
)
def test_a_corrupt_layer_is_refused(box: Box, mangle: Callable[[bytes], bytes], match: str) -> None:
    blob = box.layer([E(f"f{i}", data=os.urandom(4096)) for i in range(20)])
    blob.write_bytes(mangle(blob.read_bytes()))
    box.refused(blob, match)


def test_a_truncated_tar_is_refused(box: Box) -> None:
    raw = tar_bytes([E("a", data=os.urandom(10000))])
    blob = box.top / "cut"
    blob.write_bytes(compress(raw[:3000]))
    box.refused(blob, "truncated|not a valid tar")


def test_a_non_empty_destination_is_a_conflict(box: Box) -> None:
    box.dest().mkdir()
    (box.dest() / "x").write_text("x")
    with pytest.raises(errors.ConflictError):
        unpack_layer(box.layer([E("a")]), box.dest(), media_type=GZIP, keep_owners=False)
    assert (box.dest() / "x").read_text() == "x"
    box.assert_untouched()


def test_an_empty_destination_directory_is_filled(box: Box) -> None:
    box.dest().mkdir()
    box.unpacked(box.layer([E("a", data=b"a")]))
    assert (box.dest() / "a").read_bytes() == b"a"


def test_a_disk_error_is_unavailable_and_leaves_nothing(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def full(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 1000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(errors.UnavailableError, match="disk is full"):
        unpack_layer(box.layer([E("big", data=os.urandom(5000))]), box.dest(), media_type=GZIP, keep_owners=False)
    assert not box.dest().exists()
    box.assert_untouched()


# -- whiteouts -----------------------------------------------------------------------------------


def test_whiteouts_are_kept_as_empty_marker_files(box: Box) -> None:
    entries = [
        E("etc/.wh.passwd"),
        E("opt/.wh..wh..opq"),
        E("opt/new", data=b"n"),
        E("var/.wh.lib", "symlink", link="/x"),  # a marker whatever its type
        E(".wh..wh.plnk/123", data=b""),  # AUFS metadata: skipped
    ]
    stats = box.unpacked(box.layer(entries))
    for marker in ("etc/.wh.passwd", "opt/.wh..wh..opq", "var/.wh.lib"):
        p = box.dest() / marker
        assert p.is_file() and not p.is_symlink() and p.stat().st_size == 0
    assert stats.whiteouts == 3 and stats.skipped_count == 1
    assert not (box.dest() / ".wh..wh.plnk").exists()


def test_a_whiteout_naming_nothing_is_refused(box: Box) -> None:
    box.refused(box.layer([E("etc/.wh.")]), "whiteout must name an entry")
