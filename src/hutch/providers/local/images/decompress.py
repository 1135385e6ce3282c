"""The layer's tar stream: decompressed while read, counted, hashed, and bounded as it goes.

Compression is recognised by the data's magic number (gzip, zstd, or none); the media type
only has to be one a layer may have. Decompression bombs stop early: the decompressed size
and its ratio to the bytes read from the blob are checked on every read, never after.
"""

from __future__ import annotations

import hashlib
import io
import sys
import time
import zlib
from typing import IO, Any, Protocol, cast

from hutch import errors

from .fdtree import Refused

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
XZ_MAGIC = b"\xfd7zXZ\x00"
BZIP2_MAGIC = b"BZh"

# Media types a layer blob may have (OCI image-spec layer types and Docker's schema 2 ones).
# "detect" takes whatever the data is (a plain rootfs tarball given to ``hutch image import``).
LAYER_MEDIA_TYPES = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.diff.tar",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.diff.tar.zstd",
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
        "application/x-tar",
        "detect",
    }
)

# A zstd frame names the window its decoder must hold; a hostile one could ask for gigabytes.
ZSTD_MAX_WINDOW = 1 << 27  # 128 MiB, zstd's own default limit for decoders


class _Reader(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class _Counting(io.RawIOBase):
    """The blob as read: counts the (compressed) bytes taken from it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self.raw.readinto(buffer)  # type: ignore[attr-defined]
        self.count += n or 0
        return n or 0


class _GzipReader:
    """Gzip members decompressed with ``zlib`` directly, the blob read in large chunks.

    ``gzip.GzipFile`` (3.11) reads its source 8 KiB at a time and runs Python code for each
    block; this reads ``CHUNK`` bytes at a time (small enough that the ratio check, which counts
    the blob bytes read, stays close to what was really decompressed) and lets zlib check each member's CRC-32 and
    length (``wbits`` 31: gzip framing). Members follow one another (zero padding between them
    is skipped, as gzip does); anything else after a member is an error. ``read(n)`` returns
    at most ``n`` bytes (``max_length``), so memory stays bounded whatever the ratio.
    """

    CHUNK = 256 * 1024

    def __init__(self, source: _Counting) -> None:
        self.source = source
        self.dec = zlib.decompressobj(31)
        self.pending = b""  # compressed bytes read but not yet given to the decompressor

    def _next_member(self) -> bool:
        """After a member's end: start the next one; False at the end of the blob."""
        self.pending = self.dec.unused_data.lstrip(b"\0")
        while not self.pending:
            chunk = self.source.read(self.CHUNK)
            if not chunk:
                return False
            self.pending = chunk.lstrip(b"\0")
        if not GZIP_MAGIC.startswith(self.pending[:2]):
            raise OSError("not a gzipped file (trailing garbage after a gzip member)")
        self.dec = zlib.decompressobj(31)
        return True

    def read(self, size: int = -1, /) -> bytes:
        want = size if size > 0 else self.CHUNK
        while True:
            if self.dec.eof and not self._next_member():
                return b""
            data = self.dec.unconsumed_tail or self.pending
            self.pending = b""
            if not data:
                data = self.source.read(self.CHUNK)
                if not data:
                    raise EOFError("compressed file ended before the end-of-stream marker was reached")
            out = self.dec.decompress(data, want)
            if out:
                return out


def _zstd_reader(source: _Counting, media_type: str) -> _Reader:
    if sys.version_info >= (3, 14):
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]

        params = {zstd.DecompressionParameter.window_log_max: ZSTD_MAX_WINDOW.bit_length() - 1}
        return zstd.ZstdFile(source, options=params)  # type: ignore[no-any-return,unused-ignore]
    try:
        import zstandard
    except ImportError:  # pragma: no cover - a dependency; only a broken install lacks it
        raise errors.UnavailableError(
            f"this layer is zstd-compressed ({media_type}) and the zstandard package is missing",
            hint="pip install zstandard (a dependency of hutch: reinstall hutch)",
        ) from None
    dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    return dctx.stream_reader(cast(IO[bytes], source), read_across_frames=True, closefd=False)


class LayerStream(io.RawIOBase):
    """What tarfile reads: the decompressed tar, with its sha256 (the OCI diff_id) and bounds.

    ``limit`` is the absolute position in the tar stream that reads may not pass (the caller
    moves it: past a member's data while extracting it, a header budget while tarfile parses
    the next header). Reads past it, past ``max_stream``, past the ratio, or after the deadline
    raise Refused.
    """

    def __init__(
        self, blob: IO[bytes], *, media_type: str, max_stream: int, max_ratio: int, ratio_floor: int, deadline: float
    ) -> None:
        if media_type not in LAYER_MEDIA_TYPES:
            raise errors.InvalidError(
                f"unsupported layer media type {media_type!r}",
                hint="layers must be tar, tar+gzip or tar+zstd (OCI image-spec)",
            )
        self.source = _Counting(blob)
        head = blob.read(6)
        blob.seek(0)
        self.compression = "none"
        self._decoder: _Reader = self.source
        if head.startswith(GZIP_MAGIC):
            self.compression = "gzip"
            self._decoder = _GzipReader(self.source)
        elif head.startswith(ZSTD_MAGIC):
            self.compression = "zstd"
            self._decoder = _zstd_reader(self.source, media_type)
        elif head.startswith((XZ_MAGIC, BZIP2_MAGIC)):
            raise errors.InvalidError(
                f"layer data is xz or bzip2-compressed (media type {media_type!r}): not a layer compression",
                hint="compress the tar with gzip or zstd, or give it uncompressed",
            )
        elif media_type.endswith(("+gzip", ".gzip", "+zstd", ".zstd")):
            raise errors.InvalidError(f"layer data is not compressed as its media type {media_type!r} says")
        self.digest = hashlib.sha256()
        self.pos = 0
        self.limit: int | None = None
        self.max_stream = max_stream
        self.max_ratio = max_ratio
        self.ratio_floor = ratio_floor
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = len(view)
        if self.limit is not None:
            if self.pos >= self.limit:
                raise Refused("its headers are larger than allowed (max_header_bytes)")
            want = min(want, self.limit - self.pos)
        try:
            data = self._decoder.read(want)
        except (OSError, EOFError, zlib.error, ValueError) as exc:
            raise Refused(f"the compressed data is corrupt or truncated ({exc})") from None
        except Exception as exc:  # zstandard.ZstdError and the like
            if type(exc).__module__.startswith(("zstandard", "compression")):
                raise Refused(f"the compressed data is corrupt or truncated ({exc})") from None
            raise
        n = len(data)
        view[:n] = data
        self.pos += n
        self.digest.update(data)
        self.check()
        return n

    def check(self, produced: int = 0) -> None:
        """Raise when the stream (or ``produced``, the bytes of files written so far) passes a bound."""
        out = max(self.pos, produced)
        if self.pos > self.max_stream:
            raise Refused(f"the layer's tar is larger than allowed ({self.max_stream} bytes, max_bytes)")
        if out > self.ratio_floor and out > self.max_ratio * max(self.source.count, 1):
            raise Refused(
                f"decompression bomb: {out} bytes out of {self.source.count} read from the blob "
                f"(ratio over {self.max_ratio}, max_ratio)"
            )
        if time.monotonic() > self.deadline:
            raise TimeoutError

    def drain(self, chunk: int = 1 << 20) -> None:
        """Read what follows the tar's end (so the diff_id covers the whole stream), bounded as ever."""
        self.limit = None
        buf = bytearray(chunk)
        while self.readinto(buf):
            pass
