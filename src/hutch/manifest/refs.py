"""Secret references: where a secret's value is read, on the caller's side, at each create.
A manifest holds only these (``NAME = "env:VAR"`` or ``"file:PATH"``), never a value."""

from __future__ import annotations

import os

from hutch.errors import InvalidError

TYPE_CHECKING = False  # (typing, collections and pathlib stay out of hutch run's start)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

HINT = "use NAME, NAME=env:VAR or NAME=file:PATH"


def is_ref(source: str) -> bool:
    kind, sep, where = source.partition(":")
    return bool(sep and where) and kind in ("env", "file")


def parse(items: Iterable[str]) -> dict[str, str]:
    """``--secret`` items (NAME, NAME=env:VAR, NAME=file:PATH) as NAME -> source."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, source = item.partition("=")
        if not sep:
            source = f"env:{name}"
        if not name or not is_ref(source):
            raise InvalidError(f"invalid --secret {name or item!r}: not a reference", hint=HINT)
        out[name] = source
    return out


def read(name: str, source: str) -> str:
    """The value ``source`` names."""
    kind, _, where = source.partition(":")
    if kind == "env" and where:
        value = os.environ.get(where)
        if value is None:
            raise InvalidError(f"secret {name}: ${where} is not set", hint=f"export {where}=..., or use {name}=file:PATH")
    elif kind == "file" and where:
        try:
            from pathlib import Path

            value = Path(where).expanduser().read_text().rstrip("\n")
        except OSError as exc:
            raise InvalidError(f"secret {name}: cannot read {where}: {exc.strerror}", hint="check the path") from exc
    else:
        raise InvalidError(f"invalid secret {name}: not a reference", hint=HINT)
    if not value:
        raise InvalidError(f"secret {name} is empty", hint="an empty secret would redact nothing; check its source")
    return value


def resolve(sources: Mapping[str, str]) -> dict[str, str]:
    """Each secret's value, read now."""
    return {name: read(name, source) for name, source in sources.items()}
