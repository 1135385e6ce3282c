"""Building image layers (tar, tar+gzip, tar+zstd) in tests, hostile ones included."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
TAR = "application/vnd.oci.image.layer.v1.tar"


@dataclass
class E:
    """One tar entry: ``kind`` is file, dir, symlink, hardlink, chr, blk, fifo, or a raw tarfile type."""

    name: str
    kind: str = "file"
    data: bytes = b""
    mode: int | None = None
    link: str = ""
    uid: int = 0
    gid: int = 0
    uname: str = ""
    gname: str = ""
    mtime: float = 1_700_000_000
    pax: dict[str, str] = field(default_factory=dict)


_TYPES = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "chr": tarfile.CHRTYPE,
    "blk": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}


def tar_bytes(entries: Iterable[E]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            ti = tarfile.TarInfo(e.name)
            ti.type = _TYPES.get(e.kind, e.kind.encode())
            ti.mode = e.mode if e.mode is not None else (0o755 if e.kind == "dir" else 0o644)
            ti.linkname, ti.uid, ti.gid, ti.uname, ti.gname, ti.mtime = e.link, e.uid, e.gid, e.uname, e.gname, e.mtime
            ti.pax_headers = dict(e.pax)
            if e.kind == "file":
                ti.size = len(e.data)
                tf.addfile(ti, io.BytesIO(e.data))
            else:
                tf.addfile(ti)
    return buf.getvalue()


def compress(raw: bytes, how: str = "gzip") -> bytes:
    if how == "gzip":
        return gzip.compress(raw, compresslevel=6)
    if how == "zstd":
        return zstandard.ZstdCompressor(level=3).compress(raw)
    return raw


def write_layer(path: Path, entries: Iterable[E], how: str = "gzip") -> Path:
    path.write_bytes(compress(tar_bytes(entries), how))
    return path


def sparse_entry_bytes(name: str, realsize: int, data_at: int, data: bytes) -> bytes:
    """A tar with one GNU sparse file (PAX format 1.0): ``realsize`` bytes of holes but ``data`` at ``data_at``."""
    sparse_map = f"1\n{data_at}\n{len(data)}\n".encode().ljust(512, b"\0")
    body = sparse_map + data.ljust(-(-len(data) // 512) * 512, b"\0")
    ti = tarfile.TarInfo(f"GNUSparseFile.0/{name}")
    ti.size = len(body)
    ti.mode = 0o644
    ti.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(realsize),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(ti, io.BytesIO(body))
    return buf.getvalue()


def zero_bomb(size: int, how: str = "gzip") -> bytes:
    """A layer with one file of ``size`` zero bytes (a multiple of 1 MiB), made without compressing it all:
    gzip repeats one fully flushed deflate block of 1 MiB of zeros; zstd compresses zeros fast anyway."""
    header = tarfile.TarInfo("bomb")
    header.size = size
    head = header.tobuf(tarfile.PAX_FORMAT)
    chunk = bytes(1 << 20)
    end = b"\0" * 1024
    count = size // len(chunk)
    if how == "zstd":
        out = io.BytesIO()
        with zstandard.ZstdCompressor(level=1).stream_writer(out, closefd=False) as zw:
            zw.write(head)
            for _ in range(count):
                zw.write(chunk)
            zw.write(end)
        return out.getvalue()
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = co.compress(head) + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    last = co.compress(end) + co.flush()
    crc = zlib.crc32(head)
    for _ in range(count):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(end, crc)
    total = len(head) + size + len(end)
    gz_header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return gz_header + first + block * count + last + struct.pack("<II", crc, total & 0xFFFFFFFF)
