"""Sizes: ``512M`` <-> bytes, durations, times. Dependency-free so the CLI can import it
cheaply: every CLI call checks its size settings, and the plain forms (``512M``, ``65536``)
are read without ``re`` (with ``enum``, about 7 ms of a CLI process's start); the rest with
the patterns below."""

from __future__ import annotations

import time

from hutch.errors import InvalidError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import datetime
    import re

_SIZE_RE = r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*"
_HINT = "use a positive number with an optional unit: 512M, 1G, 2GiB, 65536"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: str | int) -> int:
    """``512M``, ``1G``, ``1.5GiB``, ``65536`` -> bytes (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise InvalidError(f"size must be positive, got {value}", hint=_HINT)
        return value
    plain = _plain_size(str(value))
    if plain is not None:
        if plain <= 0:
            raise InvalidError(f"size must be positive, got {value!r}", hint=_HINT)
        return plain
    m = _match(_SIZE_RE, str(value))
    if not m:
        raise InvalidError(f"invalid size {value!r}", hint=_HINT)
    try:
        size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    except OverflowError:  # more digits than a float holds: far past any bound
        raise InvalidError(f"size {value!r} is too large", hint=_HINT) from None
    if size <= 0:
        raise InvalidError(f"size must be positive, got {value!r}", hint=_HINT)
    return size


def _plain_size(text: str) -> int | None:
    """What the pattern gives for up to 15 ASCII digits with an optional ``K``/``M``/``G``/``T``
    (exact: such a number times a power of two is a float exactly); None for any other form."""
    unit = text[-1:].lower()
    digits = text[:-1] if unit in ("k", "m", "g", "t") else text
    if 0 < len(digits) <= 15 and digits.isascii() and digits.isdigit():
        return int(digits) * _UNITS[unit if digits is not text else ""]
    return None


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _match(pattern: str, text: str) -> re.Match[str] | None:
    """``pattern`` (case-insensitive) matched against the whole of ``text``; compiled on first use."""
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        import re

        compiled = _PATTERNS[pattern] = re.compile(pattern, re.IGNORECASE)
    return compiled.fullmatch(text)


def format_size(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        mult = _UNITS[unit.lower()]
        if size >= mult and size % mult == 0:
            return f"{size // mult}{unit}"
    return str(size)


_DURATION_RE = r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*"
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
        m = _match(_DURATION_RE, str(value))
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


def parse_time(value: str | float | datetime.datetime, now: float | None = None) -> float:
    """When something happened, as a Unix time: a Unix time (``1767225600``), an ISO 8601 time
    (``2026-12-01T10:00:00Z``; without a zone it is local time), a ``datetime``, or a duration
    with its unit meaning that long ago (``90s``, ``10m``, ``2h``, ``1d``)."""
    import datetime  # here: the CLI's exec and run never parse a time

    hint = "use a Unix time (1767225600), an ISO 8601 time (2026-12-01T10:00:00Z) or a duration ago (10m, 2h)"
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip()
        m = _match(_DURATION_RE, text)
        if m and m.group(2):
            return (time.time() if now is None else now) - parse_duration(text)
        try:
            seconds = float(text)
        except ValueError:
            try:
                return datetime.datetime.fromisoformat(text.replace("z", "Z")).timestamp()
            except ValueError:
                raise InvalidError(f"invalid time {value!r}", hint=hint) from None
    if not 0 <= seconds < 1e11:  # NaN too
        raise InvalidError(f"invalid time {value!r}", hint=hint)
    return seconds
