"""Gzip layer data as gzip itself reads it: several members, zero padding, CRC and length checked."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from hutch import errors
from hutch.providers.local.images.unpack import unpack_layer

GZ = "application/vnd.oci.image.layer.v1.tar+gzip"


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(3):
            data = bytes([i]) * (300_000 + i)
            ti = tarfile.TarInfo(f"d/f{i}")
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_members_and_zero_padding_unpack_whole(tmp_path: Path) -> None:
    tar = _tar()
    half = len(tar) // 2
    blob = tmp_path / "blob"
    blob.write_bytes(gzip.compress(tar[:half]) + bytes(1000) + gzip.compress(tar[half:]) + bytes(10))
    stats = unpack_layer(blob, tmp_path / "out", media_type=GZ, keep_owners=False)
    assert stats.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    for i in range(3):
        assert (tmp_path / "out" / "d" / f"f{i}").read_bytes() == bytes([i]) * (300_000 + i)


@pytest.mark.parametrize("damage", ["truncated", "crc", "garbage"])
def test_damaged_gzip_is_refused(tmp_path: Path, damage: str) -> None:
    gz = bytearray(gzip.compress(_tar()))
    if damage == "truncated":
        gz = gz[: len(gz) - 20]
    elif damage == "crc":
        gz[-8] ^= 0xFF  # the member's CRC-32
    else:
        gz += b"not gzip"
    blob = tmp_path / "blob"
    blob.write_bytes(bytes(gz))
    with pytest.raises(errors.InvalidError):
        unpack_layer(blob, tmp_path / "out", media_type=GZ, keep_owners=False)
    assert not (tmp_path / "out").exists()
