"""The dashboard's HTML, as plain strings: every value that comes from outside (names,
labels, commands, log lines, file names, reasons) goes through :func:`e`, which escapes it
for text and for a quoted attribute alike. Functions here return HTML that is safe to join;
nothing else in the dashboard builds markup."""

from __future__ import annotations

import time
from collections.abc import Iterable
from html import escape
from urllib.parse import quote, urlencode

from hutch.actors import Actor
from hutch.units import format_size


def e(value: object) -> str:
    """``value`` as text, safe inside an element and inside a double- or single-quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def url(base: str, /, **query: object) -> str:
    """A dashboard URL with its query values encoded (then escaped for an attribute)."""
    params = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    return e(base + ("?" + urlencode(params) if params else ""))


def part(value: str) -> str:
    """One path segment (a sandbox's name may hold anything a name allows)."""
    return quote(value, safe="")


def when(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def age(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return ""
    s = max(0, int((now or time.time()) - ts))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def size(n: int | None) -> str:
    return "" if n is None else format_size(n)


def table(head: Iterable[str], rows: Iterable[str], *, id_: str = "", empty: str = "none") -> str:
    """A table of rows already made with :func:`row` (``empty``: what an empty one says)."""
    cells = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join(rows) or f'<tr class="empty"><td colspan="99">{e(empty)}</td></tr>'
    ident = f' id="{e(id_)}"' if id_ else ""
    return f"<table><thead><tr>{cells}</tr></thead><tbody{ident}>{body}</tbody></table>"


def row(*cells: str, attrs: str = "") -> str:
    """A row of cells that are HTML already (escape text with :func:`e` first)."""
    return f"<tr{attrs}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def csrf_field(csrf: str) -> str:
    return f'<input type="hidden" name="csrf" value="{e(csrf)}">'


def layout(title: str, body: str, *, actor: Actor | None, csrf: str = "", refresh: str = "") -> str:
    """A whole page: the head (no asset from elsewhere), the navigation, ``body``."""
    nav = ""
    if actor is not None:
        links = [("/", "Sandboxes"), ("/ui/approvals", "Approvals")] + ([("/ui/keys", "Keys")] if actor.admin else [])
        items = "".join(f'<a href="{e(href)}">{e(label)}</a>' for href, label in links)
        button = '<button type="submit">Log out</button>'
        logout = f'<form method="post" action="/ui/logout" class="inline">{csrf_field(csrf)}{button}</form>' if csrf else ""
        who = f'<span class="who">{e(actor.name)} ({e(", ".join(sorted(actor.scopes)))})</span>'
        nav = f"<nav><strong>hutch</strong>{items}{who}{logout}</nav>"
    meta = f'<meta name="hutch-csrf" content="{e(csrf)}">' if csrf else ""
    live = f' data-refresh="{e(refresh)}"' if refresh else ""
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{e(title)} · hutch</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'{meta}<link rel="stylesheet" href="/ui/static/app.css"><script src="/ui/static/app.js" defer></script></head>'
        f"<body{live}>{nav}<main><h1>{e(title)}</h1>{body}</main></body></html>\n"
    )
