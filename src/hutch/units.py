"""Sizes: ``512M`` <-> bytes. Dependency-free so the CLI can import it cheaply."""

from __future__ import annotations

import re

from hutch.errors import InvalidError

_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_HINT = "use a positive number with an optional unit: 512M, 1G, 2GiB, 65536"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: str | int) -> int:
    """``512M``, ``1G``, ``1.5GiB``, ``65536`` -> bytes (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise InvalidError(f"size must be positive, got {value}", hint=_HINT)
        return value
    m = _SIZE_RE.fullmatch(str(value))
    if not m:
        raise InvalidError(f"invalid size {value!r}", hint=_HINT)
    try:
        size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    except OverflowError:  # more digits than a float holds: far past any bound
        raise InvalidError(f"size {value!r} is too large", hint=_HINT) from None
    if size <= 0:
        raise InvalidError(f"size must be positive, got {value!r}", hint=_HINT)
    return size


def format_size(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        mult = _UNITS[unit.lower()]
        if size >= mult and size % mult == 0:
            return f"{size // mult}{unit}"
    return str(size)


_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HINT = "use a positive number with an optional unit: 90s, 30m, 2h, 1d (a bare number is seconds)"


def parse_duration(value: str | float) -> float:
    """``30m``, ``2h``, ``90s``, ``1.5d``, ``45`` -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = float("inf")
    else:
        m = _DURATION_RE.fullmatch(str(value))
        if not m:
            raise InvalidError(f"invalid duration {value!r}", hint=_DURATION_HINT)
        seconds = float(m.group(1)) * _DURATION_UNITS[(m.group(2) or "s").lower()]
    if not seconds > 0 or seconds == float("inf"):  # NaN too (JSON bodies may carry NaN and Infinity)
        raise InvalidError(f"a duration must be a positive, finite number, got {value!r}", hint=_DURATION_HINT)
    return seconds


def format_duration(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    return f"{s // 60}m" if s < 7200 else f"{s // 3600}h{(s % 3600) // 60:02d}m"
