"""Where each key and array element of a TOML document starts (its line), for errors that
point at the line. tomllib keeps no positions, so this walks the text once more; it runs
only on a document tomllib has already parsed (its syntax is known to be good)."""

from __future__ import annotations

import bisect
import re

Path = tuple[str | int, ...]
BARE = re.compile(r"[A-Za-z0-9_-]+")
ESCAPE = re.compile(r"\\(.)")


class _Walk:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.breaks = [m.start() for m in re.finditer("\n", text)]
        self.where: dict[Path, int] = {}

    def line(self) -> int:
        return bisect.bisect_right(self.breaks, self.i) + 1

    def mark(self, path: Path) -> None:
        self.where.setdefault(path, self.line())

    def blank(self, newlines: bool) -> None:
        """Skip spaces (and newlines and comments when ``newlines``)."""
        t = self.text
        while self.i < len(t):
            c = t[self.i]
            if c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            elif c == "#":
                end = t.find("\n", self.i)
                self.i = len(t) if end < 0 else end
            else:
                return

    def key(self) -> tuple[str, ...]:
        parts: list[str] = []
        t = self.text
        while True:
            self.blank(False)
            c = t[self.i]
            if c in "\"'":
                end = t.index(c, self.i + 1) if c == "'" else self._basic_end(self.i + 1)
                raw = t[self.i + 1 : end]
                parts.append(raw if c == "'" else ESCAPE.sub(r"\1", raw))
                self.i = end + 1
            else:
                m = BARE.match(t, self.i)
                assert m is not None
                parts.append(m.group())
                self.i = m.end()
            self.blank(False)
            if self.i < len(t) and t[self.i] == ".":
                self.i += 1
                continue
            return tuple(parts)

    def _basic_end(self, i: int) -> int:
        t = self.text
        while t[i] != '"':
            i += 2 if t[i] == "\\" else 1
        return i

    def value(self, path: Path) -> None:
        t = self.text
        self.blank(False)
        for quote in ('"""', "'''"):
            if t.startswith(quote, self.i):
                end = self.i + 3
                while True:
                    end = t.index(quote, end)
                    if quote == "'''" or t[end - 1] != "\\" or t[end - 2] == "\\":
                        break
                    end += 1
                self.i = end + 3
                while self.i < len(t) and t[self.i] == quote[0]:
                    self.i += 1
                return
        c = t[self.i]
        if c == '"':
            self.i = self._basic_end(self.i + 1) + 1
        elif c == "'":
            self.i = t.index("'", self.i + 1) + 1
        elif c == "[":
            self.i += 1
            index = 0
            while True:
                self.blank(True)
                if t[self.i] == "]":
                    self.i += 1
                    return
                self.mark((*path, index))
                self.value((*path, index))
                self.blank(True)
                if t[self.i] == ",":
                    self.i += 1
                    index += 1
        elif c == "{":
            self.i += 1
            while True:
                self.blank(False)
                if t[self.i] == "}":
                    self.i += 1
                    return
                key = (*path, *self.key())
                self.mark(key)
                self.i += 1  # =
                self.value(key)
                self.blank(False)
                if t[self.i] == ",":
                    self.i += 1
        else:
            m = re.compile(r"[^,\]}\n#]*").match(t, self.i)
            assert m is not None
            self.i = m.end()

    def document(self) -> dict[Path, int]:
        t = self.text
        table: Path = ()
        counts: dict[Path, int] = {}
        while True:
            self.blank(True)
            if self.i >= len(t):
                return self.where
            if t[self.i] == "[":
                at = self.line()
                many = t.startswith("[[", self.i)
                self.i += 2 if many else 1
                name = self.key()
                self.i += 2 if many else 1
                if many:
                    counts[name] = counts.get(name, -1) + 1
                    table = (*name, counts[name])
                    self.where.setdefault(name, at)
                else:
                    table = name
                self.where.setdefault(table, at)
                continue
            key = (*table, *self.key())
            self.mark(key)
            self.i += 1  # =
            self.value(key)


def locate(text: str) -> dict[Path, int]:
    """Each key's and each array element's path -> the line it starts on."""
    return _Walk(text).document()


def line_of(where: dict[Path, int], path: Path) -> int | None:
    """The line of ``path``, or of the nearest enclosing key that has one."""
    for n in range(len(path), 0, -1):
        if path[:n] in where:
            return where[path[:n]]
    return None
