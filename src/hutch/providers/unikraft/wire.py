"""What a plugin command carries on the wire: the wrapped shell line and its exit marker."""

from __future__ import annotations

import shlex
from collections.abc import Callable

HOLD = 64  # stderr bytes held back while streaming: the exit marker may be among them


def marker(nonce: str) -> bytes:
    return b"\nhutch-exit-" + nonce.encode() + b":"


def wrap(argv: list[str], nonce: str, stdin: bool) -> str:
    """The shell line for the plugin: the command, then its exit code behind the marker."""
    line = shlex.join(argv) + ("" if stdin else " </dev/null")
    return f"{line}; printf '\\nhutch-exit-{nonce}:%d\\n' $? >&2"


def scrubber(secrets: dict[str, str] | None) -> Callable[[bytes], bytes]:
    """Replaces every secret value of 4 bytes or more by ``[redacted:NAME]``."""
    pairs = [(v.encode(), f"[redacted:{k}]".encode()) for k, v in (secrets or {}).items() if len(v) >= 4]

    def scrub(data: bytes) -> bytes:
        for value, mark in pairs:
            data = data.replace(value, mark)
        return data

    return scrub


def split_marker(stderr: bytes, nonce: str) -> tuple[bytes, int | None]:
    mark = marker(nonce)
    at = stderr.rfind(mark)
    if at < 0:
        return stderr, None
    tail = stderr[at + len(mark) :].strip()
    try:
        return stderr[:at], int(tail)
    except ValueError:
        return stderr, None
