"""Where a run's output goes: redacted, capped on disk, into the sandbox transcript."""

from __future__ import annotations

import os

from . import wire

RUNS_DIR = "/.hutch/runs"
MIN_REDACT = 4  # shorter secret values are not searched for in output (they would match everywhere)


class Redactor:
    """Replaces secret values in output with [redacted:NAME] before it is kept or sent.

    A value split across two reads is still found: the end of a chunk that could be the
    start of a secret is held back until the next read (or the end of the stream).
    """

    def __init__(self, secrets: dict[str, str]) -> None:
        pairs = [(v.encode(), f"[redacted:{n}]".encode()) for n, v in secrets.items() if len(v) >= MIN_REDACT]
        self.pairs = sorted(pairs, key=lambda p: -len(p[0]))
        self.held: dict[int, bytes] = {}

    def feed(self, key: int, data: bytes) -> bytes:
        if not self.pairs:
            return data
        buf = self.held.pop(key, b"") + data
        for value, mark in self.pairs:
            buf = buf.replace(value, mark)
        keep = 0
        for value, _ in self.pairs:
            for k in range(min(len(value) - 1, len(buf)), keep, -1):
                if buf.endswith(value[:k]):
                    keep = k
                    break
        if keep:
            self.held[key] = buf[-keep:]
            buf = buf[:-keep]
        return buf

    def flush(self, key: int) -> bytes:
        return self.held.pop(key, b"")


class Transcript:
    """The sandbox's transcript: every run's kept output, in the order it came.

    Opened once by the agent (spares inherit it). Each record is one O_APPEND write, so
    records of concurrent runs never interleave: ``RUN_ID S SIZE\\n`` (S is o or e, SIZE
    8 hex digits), then SIZE bytes.
    """

    fd: int | None = None

    @classmethod
    def open(cls) -> None:
        try:
            cls.fd = os.open(os.path.join(RUNS_DIR, "transcript"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            cls.fd = None

    @classmethod
    def write(cls, run_id: str, stream: str, data: bytes) -> None:
        if cls.fd is not None:
            os.write(cls.fd, f"{run_id} {stream[3]} {len(data):08x}\n".encode() + data)


class RunDir:
    """A run's directory, ``RUNS_DIR/RUN_ID``: its output files and its ``status``.

    Making a file or a directory costs the file system an inode (~1 ms here, more than
    the rest of a short run), so a spare makes its directory and status file while it
    waits (:meth:`prepare`), and a run renames the directory to its id (:meth:`claim`);
    anything that goes wrong falls back to making them at the time.
    """

    def __init__(self, runs_dir: str = RUNS_DIR) -> None:
        self.runs_dir = runs_dir
        self.spare: str | None = None  # the directory made ahead of time
        self.status_fd: int | None = None  # its .status.tmp, open
        self.path = ""

    def prepare(self) -> None:
        spare = os.path.join(self.runs_dir, f".spare-{os.getpid()}")
        try:
            os.mkdir(spare)
            self.status_fd = os.open(os.path.join(spare, ".status.tmp"), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:  # a full disk: the run makes them itself
            self._drop(spare)
            return
        self.spare = spare

    def claim(self, run_id: str) -> str:
        """The run's directory (named, not yet made, when it was not prepared)."""
        self.path = os.path.join(self.runs_dir, run_id)
        if self.spare is not None:
            try:
                os.rename(self.spare, self.path)  # not over a directory with a file (a kill's mark): then as usual
            except OSError:
                self._drop(self.spare)
            self.spare = None
        return self.path

    def write_status(self, status: bytes) -> None:
        """``status`` whole or not at all: written to .status.tmp, renamed over ``status``."""
        tmp = os.path.join(self.path, ".status.tmp")
        try:
            fd, self.status_fd = self.status_fd, None
            if fd is None:
                os.makedirs(self.path, exist_ok=True)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, status)
            finally:
                os.close(fd)
            os.replace(tmp, os.path.join(self.path, "status"))
        except OSError:
            pass  # a full disk: the daemon still hears the status over the connection

    def drop(self) -> None:
        """Give up what :meth:`prepare` made (a spare that leaves without a run)."""
        if self.spare is not None:
            self._drop(self.spare)
            self.spare = None

    def _drop(self, spare: str) -> None:
        if self.status_fd is not None:
            os.close(self.status_fd)
            self.status_fd = None
        with wire.ignoring(OSError):
            os.unlink(os.path.join(spare, ".status.tmp"))
        with wire.ignoring(OSError):
            os.rmdir(spare)


class Sink:
    """One output stream of a run: a capped file on disk, the transcript, the live host.

    Files are opened at the first byte: a command that prints nothing costs no file.
    """

    def __init__(self, name: str, run_id: str, rdir: str, cap: int, live_limit: int | None) -> None:
        self.name, self.run_id, self.rdir, self.cap = name, run_id, rdir, cap
        self.live_limit = live_limit  # None: everything goes to the host live
        self.total = 0
        self.disk_error: str | None = None
        self.fd: int | None = -1  # -1: not opened yet; None: cannot write

    def _open(self) -> None:
        try:
            os.makedirs(self.rdir, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
            self.fd = os.open(os.path.join(self.rdir, self.name), flags, 0o600)
        except OSError as exc:  # a full disk: the run goes on, its output only streamed live
            self.fd, self.disk_error = None, exc.strerror

    def write(self, data: bytes) -> None:
        room = self.cap - self.total
        self.total += len(data)
        if self.fd == -1:
            self._open()
        if room <= 0 or self.fd is None:
            return
        kept = data[:room]
        try:
            os.write(self.fd, kept)
            Transcript.write(self.run_id, self.name, kept)
        except OSError as exc:
            self.fd, self.disk_error = None, exc.strerror

    def live(self, data: bytes) -> bytes:
        """The part of ``data`` (just written) the host wants live."""
        if self.live_limit is None:
            return data
        sent = self.total - len(data)
        return data[: max(0, self.live_limit - sent)]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap
