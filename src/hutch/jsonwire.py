"""JSON for the wire and the CLI's hot path: the ``json`` package's own C scanner and encoder,
without importing the package.

``import json`` imports ``re`` (and with it ``enum``): about 7 ms of a CLI process's start,
more than the rest of ``hutch exec``'s client. :func:`dumps` and :func:`loads` call the same
C functions ``json.dumps`` and ``json.loads`` use (``_json.make_encoder``,
``_json.make_scanner``) with ``json``'s defaults, so they give the same text and the same
values; a document that does not parse raises ``json.JSONDecodeError`` (the C scanner loads
``json.decoder`` to make it, which only a malformed document pays for). Where ``_json`` is
missing (another Python), they are ``json``'s own. tests/unit/test_jsonwire.py compares them.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

WHITESPACE = " \t\n\r"


def _default(obj: Any) -> Any:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


def _constant(name: str) -> float:
    return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


class _Context:
    """What the C scanner reads of a ``JSONDecoder``: ``json.loads``'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_constant)


_scan: Callable[[str, int], tuple[Any, int]] | None
try:
    from _json import encode_basestring_ascii as _escape
    from _json import make_encoder as _make_encoder
    from _json import make_scanner

    _scan = make_scanner(_Context())  # type: ignore[arg-type]  # the scanner reads only the context's attributes
except ImportError:  # pragma: no cover - CPython has them
    _scan = None


def dumps(obj: Any) -> str:
    """``json.dumps(obj)``: ASCII, ``", "`` and ``": "`` separators, NaN allowed, no default."""
    if _scan is None:  # pragma: no cover
        import json

        return json.dumps(obj)
    if isinstance(obj, str):
        return str(_escape(obj))
    encode = _make_encoder({}, _default, _escape, None, ": ", ", ", False, False, True)
    return "".join(encode(obj, 0))


def loads(text: str | bytes | bytearray) -> Any:
    """``json.loads(text)`` for a document in UTF-8 (the wire's): one value, whitespace around it."""
    if _scan is None:  # pragma: no cover
        import json

        return json.loads(text)
    raw = text
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", "replace")
    if not text or text[0] == "\ufeff" or (raw is not text and ("\x00" in text[:4] or "\ufffd" in text)):
        import json  # nothing, a BOM, UTF-16/32, bytes that are not UTF-8: json's own answer

        return json.loads(raw)
    start = len(text) - len(text.lstrip(WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as stop:
        import json

        raise json.JSONDecodeError("Expecting value", text, stop.value) from None
    if text[end:].strip(WHITESPACE):
        import json

        raise json.JSONDecodeError("Extra data", text, end + len(text[end:]) - len(text[end:].lstrip(WHITESPACE)))
    return value
