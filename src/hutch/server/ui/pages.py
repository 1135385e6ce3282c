"""What the overview, approvals, keys, login and error pages show (pure: data in, HTML out)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from hutch.actors import SCOPES, Actor
from hutch.models import ApprovalRecord, SandboxRecord
from hutch.server.ui.html import age, csrf_field, e, layout, part, row, size, table, url, when

PER_PAGE = 100  # sandboxes on one page of the overview
SANDBOX_HEAD = ("sandbox", "state", "provider", "image", "limits", "age", "owner", "memory", "cpu", "processes")
APPROVAL_HEAD = ("request", "action", "detail", "sandbox", "reason", "age", "decision")


def limits(rec: SandboxRecord) -> str:
    lim = rec.spec.limits
    cpus = f"{lim.cpus:g} cpu · " if lim.cpus else ""
    return f"{cpus}{size(lim.memory)} · {lim.pids} pids"


def provider_cell(rec: SandboxRecord) -> str:
    """The provider, and the node a cluster's sandbox lives on (``hutch serve --cluster``)."""
    node = f' <span class="node" title="the cluster node it runs on">on {e(rec.node)}</span>' if rec.node else ""
    return e(rec.provider) + node


def sandbox_rows(records: list[SandboxRecord], owners: Mapping[str, str], usage: Mapping[str, Mapping[str, Any]]) -> str:
    now = time.time()
    out = []
    for rec in records:
        use = usage.get(rec.id, {})
        label = e(rec.name) + f' <span class="id">{e(rec.id)}</span>' if rec.name else e(rec.id)
        cpu = use.get("cpu_seconds")
        out.append(
            row(
                f'<a href="{url("/ui/sandboxes/" + part(rec.id))}">{label}</a>',
                f'<span class="state state-{e(rec.state.value)}">{e(rec.state.value)}</span>',
                provider_cell(rec),
                e(rec.spec.image or ""),
                e(limits(rec)),
                f'<span title="{e(when(rec.created_at))}">{e(age(rec.created_at, now))}</span>',
                e(owners.get(rec.owner or "", rec.owner or "")),
                e(size(use.get("memory"))),
                e("" if cpu is None else f"{cpu:.1f} s"),
                e(use.get("pids", "")),
                attrs=f' data-sandbox="{e(rec.id)}"',
            )
        )
    return "".join(out)


def approval_rows(items: list[ApprovalRecord], actor: Actor, csrf: str) -> str:
    now = time.time()
    out = []
    for apr in items:
        decide = ""
        if actor.allows("approve") and apr.status.value == "pending":
            action = url("/ui/approvals/" + part(apr.id))
            decide = "".join(
                f'<form method="post" action="{action}" class="inline">{csrf_field(csrf)}'
                f'<input type="hidden" name="decision" value="{value}">'
                f'<button type="submit" class="{value}" data-approval="{e(apr.id)}">{label}</button></form>'
                for value, label in (("approve", "Approve"), ("reject", "Reject"))
            )
        elif apr.status.value != "pending":
            decide = e(apr.status.value + (f" by {apr.decided_by}" if apr.decided_by else ""))
        sandbox = f'<a href="{url("/ui/sandboxes/" + part(apr.sandbox_id))}">{e(apr.sandbox_id)}</a>' if apr.sandbox_id else ""
        out.append(
            row(
                e(apr.id),
                e(apr.action),
                e(apr.detail or ""),
                sandbox,
                e(apr.reason or ""),
                e(age(apr.created_at, now)),
                decide,
                attrs=f' data-approval="{e(apr.id)}"',
            )
        )
    return "".join(out)


def pager(page: int, count: int) -> str:
    """Links to the newer and older pages of the overview (newest first), and where this one is."""
    last = max(1, -(-count // PER_PAGE))
    first_shown = min(count, (page - 1) * PER_PAGE + 1)
    shown = f"{first_shown} to {min(count, page * PER_PAGE)} of {count}, page {page} of {last}"
    newer = f'<a rel="prev" href="{url("/", page=page - 1)}">&lsaquo; newer</a>' if page > 1 else ""
    older = f'<a rel="next" href="{url("/", page=page + 1)}">older &rsaquo;</a>' if page < last else ""
    return f'<p class="pager" id="pager">{newer} <span>{e(shown)}</span> {older}</p>'


def overview(sandboxes: str, approvals: str, count: int, actor: Actor, csrf: str, page: int = 1) -> str:
    fragment = url("/ui/fragments/sandboxes", page=page if page > 1 else None)
    body = (
        f"<section><h2>Pending approvals</h2>{table(APPROVAL_HEAD, [approvals], id_='approvals', empty='none pending')}"
        f'<p class="live" data-fragment="/ui/fragments/approvals" data-target="approvals"></p></section>'
        f'<section><h2>Sandboxes <span class="count" id="sandbox-count">{count}</span></h2>'
        f"{pager(page, count) if count > PER_PAGE or page > 1 else ''}"
        f"{table(SANDBOX_HEAD, [sandboxes], id_='sandboxes', empty='no sandboxes')}"
        f'<p class="live" data-fragment="{fragment}" data-target="sandboxes" data-count="sandbox-count"></p>'
        "</section>"
    )
    return layout("Sandboxes", body, actor=actor, csrf=csrf)


def approvals_page(rows: str, actor: Actor, csrf: str) -> str:
    body = table(APPROVAL_HEAD, [rows], id_="all-approvals", empty="no approval requests")
    return layout("Approvals", body, actor=actor, csrf=csrf)


def keys_page(keys: list[dict[str, Any]], actor: Actor, csrf: str) -> str:
    rows = []
    for k in keys:
        quotas = ", ".join(f"{name} {value}" for name, value in sorted(k.get("quotas", {}).items()))
        revoke = ""
        if k["state"] == "active":
            revoke = (
                f'<form method="post" action="{url("/ui/keys/" + part(k["id"]) + "/revoke")}" class="inline">'
                f'{csrf_field(csrf)}<button type="submit" class="reject">Revoke</button></form>'
            )
        rows.append(
            row(
                e(k["id"]),
                e(k["name"]),
                e(k["state"]),
                e(", ".join(k["scopes"])),
                e(quotas),
                e(when(k["created_at"])),
                e(when(k.get("expires_at"))),
                revoke,
            )
        )
    body = table(("key", "name", "state", "scopes", "quotas", "created", "expires", ""), rows, id_="keys", empty="no keys")
    boxes = "".join(
        f'<label><input type="checkbox" name="scope" value="{s}"{" checked" if s in ("read", "write") else ""}> {s}</label> '
        for s in SCOPES
    )
    body += (
        f'<section><h2>New key</h2><form method="post" action="/ui/keys" id="new-key-form">{csrf_field(csrf)}'
        '<label>Name <input type="text" name="name" required maxlength="64" pattern="[A-Za-z0-9][A-Za-z0-9._-]*"></label> '
        f'<label>Expires after <input type="text" name="ttl" placeholder="e.g. 30d (empty: never)" size="22"></label> {boxes}'
        '<button type="submit">Create</button></form>'
        '<p class="hint">The key is shown once, on the next page (as <code>hutch key create</code> prints it once). '
        "Quotas and network limits: <code>hutch key create --help</code>.</p></section>"
    )
    return layout("Keys", body, actor=actor, csrf=csrf)


def key_created(made: dict[str, Any], actor: Actor, csrf: str) -> str:
    """The one page that shows a new key's secret."""
    body = (
        f"<p>Key <strong>{e(made['name'])}</strong> ({e(made['id'])}), scopes {e(', '.join(made['scopes']))}"
        f"{', expires ' + e(when(made.get('expires_at'))) if made.get('expires_at') else ''}.</p>"
        f'<p class="warning">Copy it now: it is shown this once and cannot be shown again '
        f"(<code>hutch key rotate {e(made['name'])}</code> makes a new one).</p>"
        f'<pre id="new-key">{e(made["key"])}</pre><p><a href="/ui/keys">Back to the keys</a></p>'
    )
    return layout("Key created", body, actor=actor, csrf=csrf)


def login_page(csrf: str, *, token: str = "", next_: str = "/", message: str = "") -> str:
    """The key form, or (with a one-time ``token``) a form that sends it, submitted by the script at once."""
    note = f'<p class="error">{e(message)}</p>' if message else ""
    hidden = csrf_field(csrf) + f'<input type="hidden" name="next" value="{e(next_)}">'
    if token:
        form = (
            f'<form method="post" action="/ui/login" data-autosubmit>{hidden}'
            f'<input type="hidden" name="token" value="{e(token)}"><button type="submit">Log in</button></form>'
        )
    else:
        form = (
            f'<form method="post" action="/ui/login">{hidden}<label>API key '
            '<input type="password" name="key" autocomplete="off" required></label>'
            '<button type="submit">Log in</button></form>'
            '<p class="hint">On this machine, <code>hutch ui</code> prints a link that logs you in.</p>'
        )
    return layout("Log in", note + form, actor=None)


def error_page(status: int, kind: str, message: str, hint: str | None, actor: Actor | None, csrf: str) -> str:
    body = f'<p class="error"><strong>{e(kind)}</strong>: {e(message)}</p>' + (f'<p class="hint">{e(hint)}</p>' if hint else "")
    return layout(f"{status} {kind}", body, actor=actor, csrf=csrf)
