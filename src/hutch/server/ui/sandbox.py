"""What a sandbox's page shows: its facts, runs, files, and the places its live logs, events
and egress decisions stream into (filled by the page's script from :mod:`.live`)."""

from __future__ import annotations

import posixpath
import shlex
import stat
from collections.abc import Mapping
from typing import Any

from hutch.actors import Actor
from hutch.models import FileEntry, SandboxRecord
from hutch.server.ui.html import age, e, layout, part, row, size, table, url, when
from hutch.server.ui.pages import limits

FILE_VIEW = 256 << 10  # a file shown on its page: the first 256 KiB


def facts(rec: SandboxRecord, owner: str, use: Mapping[str, Any]) -> str:
    net = rec.spec.network
    network = net.mode + (": " + ", ".join(net.allow_hosts) if net.allow_hosts else "")
    egress = f"{rec.egress.get('allowed', 0)} allowed, {rec.egress.get('denied', 0)} denied" if rec.egress else ""
    cpu = use.get("cpu_seconds")
    items = [
        ("id", rec.id),
        ("name", rec.name or ""),
        ("state", rec.state.value + (f": {rec.error}" if rec.error else "")),
        ("provider", rec.provider),
        ("node", rec.node or ""),
        ("image", rec.spec.image or ""),
        ("limits", limits(rec)),
        ("owner", owner),
        ("created", f"{when(rec.created_at)} ({age(rec.created_at)} ago)"),
        ("expires", when(rec.expires_at)),
        ("last active", when(rec.last_active_at)),
        ("network", network),
        ("egress", egress),
        ("memory", size(use.get("memory"))),
        ("cpu", "" if cpu is None else f"{cpu:.1f} s"),
        ("processes", use.get("pids", "")),
    ]
    dl = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in items if v not in ("", None))
    labels = "".join(f'<span class="label">{e(k)}={e(v)}</span>' for k, v in sorted(rec.spec.labels.items()))
    return f'<dl class="facts" id="facts">{dl}<dt>labels</dt><dd>{labels}</dd></dl>'


def run_rows(rec: SandboxRecord, runs: list[dict[str, Any]], chosen: str | None) -> str:
    out = []
    for r in reversed(runs[-200:]):  # the newest first
        command = " ".join(shlex.quote(str(a)) for a in r["command"])
        link = url("/ui/sandboxes/" + part(rec.id), run=r["id"])
        mark = ' class="chosen"' if r["id"] == chosen else ""
        out.append(
            row(
                f'<a href="{link}">{e(r["id"])}</a>',
                f"<code>{e(command)}</code>",
                e(r["status"]),
                e("" if r["exit_code"] is None else r["exit_code"]),
                e(when(r["started_at"])),
                e("" if r["duration_ms"] is None else f"{r['duration_ms'] / 1000:.2f} s"),
                e("background" if r["background"] else ""),
                attrs=mark,
            )
        )
    return "".join(out)


def file_rows(rec: SandboxRecord, where: str, entries: list[FileEntry]) -> str:
    out = []
    base = "/ui/sandboxes/" + part(rec.id)
    if where not in ("/", ""):
        out.append(row(f'<a href="{url(base, path=posixpath.dirname(where.rstrip("/")) or "/")}">..</a>', "", "", ""))
    for f in sorted(entries, key=lambda f: (f.type != "dir", f.name))[:1000]:
        full = posixpath.join(where, f.name)
        target = url(base, path=full) if f.type == "dir" else url(base + "/file", path=full)
        out.append(row(f'<a href="{target}">{e(f.name)}</a>', e(f.type), e(size(f.size)), e(stat.filemode(f.mode))))
    return "".join(out)


def page(
    rec: SandboxRecord,
    *,
    owner: str,
    use: Mapping[str, Any],
    runs: list[dict[str, Any]],
    chosen: str | None,
    where: str,
    files: list[FileEntry] | str,
    actor: Actor,
    csrf: str,
) -> str:
    base = "/ui/sandboxes/" + part(rec.id)
    listing = (
        f'<p class="hint">{e(files)}</p>'
        if isinstance(files, str)
        else table(("name", "type", "size", "mode"), [file_rows(rec, where, files)], id_="files", empty="empty")
    )
    which = f" of {e(chosen)}" if chosen else ""
    runs_table = table(("run", "command", "status", "exit", "started", "took", ""), [run_rows(rec, runs, chosen)], id_="runs")
    egress = table(("time", "decision", "host", "port", "reason"), [], id_="egress", empty="none yet")
    events = table(("#", "time", "type", "run", "actor", "data"), [], id_="events", empty="none yet")
    body = (
        facts(rec, owner, use)
        + f"<section><h2>Runs</h2>{runs_table}</section>"
        + f'<section><h2>Logs{which} <span class="live-state" id="logs-state"></span></h2>'
        f'<pre id="logs" class="logs" data-stream="{url(base + "/logs", run=chosen)}" data-state="logs-state"></pre></section>'
        + f"<section><h2>Egress decisions</h2>{egress}</section>"
        + f'<section><h2>Events <span class="live-state" id="events-state"></span></h2>{events}'
        f'<p class="live" data-events="{url(base + "/events")}" data-state="events-state"></p></section>'
        + f"<section><h2>Files in <code>{e(where)}</code></h2>{listing}</section>"
    )
    return layout(rec.name or rec.id, body, actor=actor, csrf=csrf)


def file_page(rec: SandboxRecord, path: str, data: bytes, truncated: bool, actor: Actor, csrf: str) -> str:
    back = url("/ui/sandboxes/" + part(rec.id), path=posixpath.dirname(path) or "/")
    note = f'<p class="hint">the first {size(len(data))} only</p>' if truncated else ""
    text = e(data.decode("utf-8", "replace"))
    body = f'<p><a href="{back}">back to {e(rec.name or rec.id)}</a></p>{note}<pre class="file">{text}</pre>'
    return layout(path, body, actor=actor, csrf=csrf)
