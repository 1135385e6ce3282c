"""Sizes: ``512M`` <-> bytes. Dependency-free so the CLI can import it cheaply."""

from __future__ import annotations

import re

from hutch.errors import InvalidError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_HINT = "use a positive number with an optional unit: 512M, 1G, 2GiB, 65536"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: str | int) -> int:
    """``512M``, ``1G``, ``1.5GiB``, ``65536`` -> bytes (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise InvalidError(f"size must be positive, got {value}", hint=_HINT)
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise InvalidError(f"invalid size {value!r}", hint=_HINT)
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if size <= 0:
        raise InvalidError(f"size must be positive, got {value!r}", hint=_HINT)
    return size


def format_size(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        mult = _UNITS[unit.lower()]
        if size >= mult and size % mult == 0:
            return f"{size // mult}{unit}"
    return str(size)
