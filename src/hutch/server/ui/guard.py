"""The dashboard's middleware (inside the app, after :mod:`hutch.server.auth`): every answer on
its paths carries :data:`~.gate.HEADERS`; every request there that is not a GET is checked
for CSRF (:func:`~.gate.check_csrf`) before a route sees it, and refused with 403 otherwise.

The token a request must carry: its session's, when the session cookie let it in; the login
form's own (matched against its cookie) for the login itself. A request let in by a key in
``Authorization`` (or over the owner-only unix socket) carries no ambient credential a
browser would add by itself, so it needs none. Any other (a client certificate alone, which a
browser sends by itself to any site that asks) is refused: a change from the dashboard needs
its session.
"""

from __future__ import annotations

from typing import Any

from hutch.actors import current
from hutch.errors import HutchError, UnauthorizedError
from hutch.server.ui import gate
from hutch.server.ui.html import e, layout

Scope = dict[str, Any]


class Guard:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not gate.is_ui(scope.get("path", "")):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                present = {bytes(k).lower() for k, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in gate.HEADERS.items() if k.encode() not in present]
                message = message | {"headers": [*message.get("headers", []), *extra]}
            await send(message)

        if scope.get("method") not in gate.SAFE:
            try:
                fields, receive = await gate.read_form(receive)
                session = scope.get("hutch.ui_session")
                if session is not None:
                    gate.check_csrf(scope, fields, session.csrf)
                elif scope.get("path") == "/ui/login":
                    gate.check_csrf(scope, fields, gate.cookies(scope).get(gate.LOGIN_COOKIE, ""))
                elif not gate.has_bearer(scope) and current().via != "unix":
                    raise UnauthorizedError("refused: a change from the dashboard needs its session", hint="log in first")
            except HutchError as exc:
                await _refuse(with_headers, exc)
                return
        await self.app(scope, receive, with_headers)


async def _refuse(send: Any, exc: HutchError) -> None:
    status = 413 if exc.kind == "invalid" else 403
    text = f'<p class="error">{e(exc.message)}</p><p class="hint">{e(exc.hint or "")}</p>'
    body = layout(f"{status} refused", text, actor=None)
    data = body.encode()
    headers = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
