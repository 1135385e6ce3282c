"""One gateway per cluster: the gateway's lease, a named Ray actor.

The gateway places sandboxes and counts what it placed (:mod:`~hutch.providers.cluster.nodes`);
a second gateway on the same Ray cluster would count only its own and fill the nodes twice.
So ``hutch serve --cluster`` holds a lease: the Ray actor ``hutch-gateway`` (namespace
``hutch``), made by the gateway's own Ray job and not detached, so Ray ends it with the job
(a gateway that stops, or is killed, frees it). A second gateway finds the name taken, asks
the actor who holds it, and is refused naming the first (its host, pid, state directory and
since when). The same gateway started again (its state directory, on its host) waits for its
old job's lease to go; another waits a short while, then is refused.

Only ``hutch serve`` takes the lease; a Service made in a process of its own (the contract
suite's) does not. This module runs on a Ray worker too (the actor): it imports no Ray and
little of hutch.
"""

from __future__ import annotations

import time
from typing import Any

NAME = "hutch-gateway"
SAME_WAIT = 90.0  # this gateway's previous process: Ray ends its job's actors once it sees the job gone
OTHER_WAIT = 10.0  # another gateway's lease: time for one that just died to let go


class GatewayLease:
    """The actor (``ray.remote`` is applied by the gateway): it only says who holds it."""

    def __init__(self, holder: dict[str, Any]) -> None:
        self.holder = holder

    def who(self) -> dict[str, Any]:
        return self.holder


def held_by(holder: dict[str, Any]) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder.get("since") or 0)))
    return f"pid {holder.get('pid')} on {holder.get('host')} (HUTCH_HOME {holder.get('home')}, since {since})"


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same gateway (another process of it): one host, one state directory."""
    return a.get("host") == b.get("host") and a.get("home") == b.get("home")
