"""E2B's ``user=``: the SDKs name a user per call (``Authorization: Basic base64(USER:)`` on
envd calls, ``?username=`` on file URLs). hutch runs every command of a sandbox as the
sandbox's own user (``hutch create --user``, an image's user), so:

- no user, or the sandbox's own (by name or uid): as always;
- another user, for a command, in a sandbox whose user is root: the run is that user
  (``exec --user``: looked up in the sandbox's /etc/passwd, no capabilities) where the
  provider switches users itself; elsewhere the command runs through ``runuser -u USER --``
  (the image must have runuser and that user; if not, the command fails saying so, as
  ``su`` would);
- anything else: ``permission_denied``, naming the sandbox's user, never silently ignored.
  File operations run as the sandbox's user, so they take only that user.

The sandbox's user is asked once (``id -un; id -u`` in the sandbox) and kept per sandbox.
"""

from __future__ import annotations

import base64
import binascii

from hutch.models import ExecRequest
from hutch.server.e2b.connect import ConnectError
from hutch.service import Service

HINT = "leave user unset (the sandbox's own user runs it), or use a template whose image runs as root or as that user"


def from_basic(authorization: str | None) -> str | None:
    """The user of an envd call's ``Authorization: Basic ...`` (None: none named)."""
    if not authorization or not authorization.lower().startswith("basic "):
        return None
    try:
        raw = base64.b64decode(authorization[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ConnectError("invalid_argument", "Authorization: Basic carries base64 of USER:") from None
    return raw.split(":", 1)[0] or None


class Users:
    def __init__(self, service: Service) -> None:
        self.svc = service
        self.known: dict[str, tuple[str, int]] = {}

    async def whoami(self, sandbox_id: str) -> tuple[str, int]:
        found = self.known.get(sandbox_id)
        if found is None:
            req = ExecRequest(command=["/bin/sh", "-c", "id -un 2>/dev/null || echo '?'; id -u"], timeout=60)
            result = await self.svc.runs.exec(sandbox_id, req)
            lines = str(result.stdout).split()
            if result.exit_code != 0 or len(lines) != 2 or not lines[1].isdigit():
                raise ConnectError("unavailable", f"could not tell which user sandbox {sandbox_id} runs as")
            found = self.known[sandbox_id] = (lines[0], int(lines[1]))
        return found

    def forget(self, sandbox_id: str) -> None:
        self.known.pop(sandbox_id, None)

    async def command_prefix(self, sandbox_id: str, user: str | None) -> tuple[list[str], str | None]:
        """What a command for ``user`` starts with (``[]``: as the sandbox's user), and the run's user
        (None: the sandbox's own)."""
        if not user:
            return [], None
        name, uid = await self.whoami(sandbox_id)
        if user in (name, str(uid)):
            return [], None
        if uid == 0:
            rec = self.svc.live(sandbox_id, touch=False)
            caps = self.svc.provider(rec.provider).capabilities.of_runtime(rec.spec.runtime)
            if caps is not None and caps.exec_users:
                return [], user
            return ["runuser", "-u", user, "--"], None
        why = f"sandbox {sandbox_id} runs its commands as {name} (uid {uid}), not as {user!r}; {HINT}"
        raise ConnectError("permission_denied", why)

    async def check_files(self, sandbox_id: str, user: str | None) -> None:
        if not user:
            return
        name, uid = await self.whoami(sandbox_id)
        if user not in (name, str(uid)):
            raise ConnectError(
                "permission_denied",
                f"files of sandbox {sandbox_id} are read and written as its user {name} (uid {uid}), not as {user!r}; "
                "leave user unset",
            )
