"""``hutch doctor --provider unikraft``: token, account, metro reach, image, quota headroom.

Read-only: one quotas call (which is also the reachability and token check). Nothing is
created or changed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hutch.credentials import CALLER
from hutch.errors import HutchError
from hutch.provider import CheckResult
from hutch.providers.unikraft.api import TOKEN_VARS, resolve_endpoint, resolve_token

if TYPE_CHECKING:
    from hutch.providers.unikraft import UnikraftProvider


async def checks(provider: UnikraftProvider) -> list[CheckResult]:
    out: list[CheckResult] = []
    caller = CALLER.get().get("unikraft")  # a remote daemon's doctor: the caller's token and metro count
    try:
        if caller is not None and caller.token:
            token, source = caller.token, f"the caller's {caller.source}"
        else:
            token, source = resolve_token()
        out.append(CheckResult("unikraft token", True, f"from {source}"))
    except HutchError as exc:
        out.append(CheckResult("unikraft token", False, exc.message, f"export one of {', '.join(TOKEN_VARS)}"))
        return out
    try:
        endpoint = resolve_endpoint(caller.metro if caller is not None and caller.metro else None)
    except HutchError as exc:
        out.append(CheckResult("unikraft metro", False, exc.message, exc.hint))
        return out
    t0 = time.monotonic()
    try:
        scope = await provider.account(endpoint, token)
    except HutchError as exc:
        out.append(CheckResult("unikraft metro", False, f"{endpoint}: {exc.message}", exc.hint))
        return out
    ms = (time.monotonic() - t0) * 1000
    out.append(CheckResult("unikraft metro", True, f"{endpoint} answered in {ms:.0f} ms"))
    out.append(CheckResult("unikraft account", True, f"account {scope['account']}"))
    image, default = provider.config.default_image()
    detail = image + (" (default; set UKC_SANDBOX_IMAGE or --image)" if default else "")
    out.append(CheckResult("unikraft image", True, detail + "; existence is checked at create (no image API used)"))
    used, hard = scope.get("used"), scope.get("hard")
    if used is not None and hard is not None:
        ok = used < hard
        fix = None if ok else "destroy instances (hutch cleanup --provider unikraft) or raise the quota"
        out.append(CheckResult("unikraft quota", ok, f"{used} of {hard} instances used", fix))
    else:
        out.append(CheckResult("unikraft quota", True, "the account reports no instance limit"))
    return out
