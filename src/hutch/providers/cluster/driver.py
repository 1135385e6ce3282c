"""The gateway as the cluster's only Ray driver: which nodes there are, and each node's daemon.

Ray is imported here only, and only when a cluster is used (``hutch[cluster]``). Every call
blocks, so the provider runs them in a thread, each with a deadline: a Ray head that is down
is ``unavailable``, never a hang.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from hutch.errors import UnavailableError

NAMESPACE = "hutch"
INFO_TIMEOUT = 180.0  # a node's first daemon start imports hutch and makes a certificate: slow on a busy machine


@dataclass(frozen=True)
class RayNode:
    """One node as Ray sees it."""

    id: str
    ip: str
    alive: bool
    resources: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.ip


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UnavailableError(
            "this gateway cannot drive a cluster: Ray is not installed", hint="pip install 'hutch[cluster]'"
        ) from None
    return ray


class Driver:
    """One connection to the Ray cluster at ``address`` (host:port of its head)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._lock = threading.Lock()

    def connect(self) -> None:
        ray = _ray()
        with self._lock:
            if ray.is_initialized():
                return
            # Ray's own SIGTERM handler would end the daemon without its clean stop; no usage reports
            os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            try:
                ray.init(
                    address=self.address,
                    namespace=NAMESPACE,
                    log_to_driver=False,
                    logging_level="ERROR",
                    include_dashboard=False,
                )
            except Exception as exc:  # noqa: BLE001 (ConnectionError, RuntimeError ... each Ray version its own)
                raise self.down(exc) from None

    def down(self, exc: BaseException | None = None) -> UnavailableError:
        why = f": {exc}" if exc else ""
        return UnavailableError(
            f"the Ray cluster at {self.address} does not answer{why}",
            hint="start its head (ray start --head) or fix hutch serve --cluster ADDRESS",
        )

    def nodes(self) -> list[RayNode]:
        ray = _ray()
        self.connect()
        try:
            found = ray.nodes()
        except Exception as exc:  # noqa: BLE001 (Ray's own errors: the head went away)
            raise self.down(exc) from None
        return [
            RayNode(str(n["NodeID"]), str(n["NodeManagerAddress"]), bool(n["Alive"]), dict(n.get("Resources") or {}))
            for n in found
        ]

    def daemon(self, node: RayNode, restart: bool = False) -> dict[str, Any]:
        """The node's daemon (started by its actor, made here when it does not exist yet)."""
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from hutch.providers.cluster.daemon import NodeDaemon

        self.connect()
        actor = ray.remote(num_cpus=0, max_restarts=-1)(NodeDaemon).options(
            name=f"hutch-node-{node.id[:16]}",
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node.id, soft=False),
        )
        handle = actor.remote(node.ip)
        call = handle.restart.remote() if restart else handle.info.remote()
        info: dict[str, Any] = ray.get(call, timeout=INFO_TIMEOUT)
        return info

    def close(self) -> None:
        ray = _ray()
        with self._lock:
            if ray.is_initialized():
                ray.shutdown()
