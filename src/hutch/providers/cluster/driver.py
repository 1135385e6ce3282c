"""The gateway as the cluster's only Ray driver: which nodes there are, and each node's daemon.

Ray is imported here only, and only when a cluster is used (``hutch[cluster]``). Every call
blocks, so the provider runs them in a thread, each with a deadline: a Ray head that is down
is ``unavailable``, never a hang.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hutch.errors import ConflictError, UnavailableError
from hutch.providers.cluster import lease

NAMESPACE = "hutch"
INFO_TIMEOUT = 180.0  # a node's first daemon start imports hutch and makes a certificate: slow on a busy machine
LEASE_CALL = 30.0  # one call to the lease actor


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
        self.holder: dict[str, Any] | None = None  # set: this process is the gateway, it holds the lease
        self._lease: Any = None  # the lease actor's handle, kept for the connection's life

    def connect(self) -> None:
        """Connected to the head (and, for the gateway, holding the lease); ``unavailable`` when
        the head does not answer, ``conflict`` when another gateway holds the lease."""
        ray = _ray()
        with self._lock:
            self._init(ray)
            if self.holder is not None and self._lease is None:
                self._take(ray, self.holder)

    def init(self) -> None:
        """Connected to the head only (the gateway's first, short try: :meth:`connect` takes the lease)."""
        ray = _ray()
        with self._lock:
            self._init(ray)

    def _init(self, ray: Any) -> None:
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

    def _take(self, ray: Any, me: dict[str, Any]) -> None:
        """The gateway's lease (:mod:`~hutch.providers.cluster.lease`), or ``conflict`` naming its holder."""
        start = time.monotonic()
        while True:
            try:
                handle = ray.remote(num_cpus=0)(lease.GatewayLease).options(name=lease.NAME, namespace=NAMESPACE).remote(me)
                if ray.get(handle.who.remote(), timeout=LEASE_CALL) == me:
                    self._lease = handle
                    return
            except Exception:  # noqa: BLE001 (the name is taken, or was taken in a race: asked below)
                pass
            try:
                other = ray.get(ray.get_actor(lease.NAME, namespace=NAMESPACE).who.remote(), timeout=LEASE_CALL)
            except Exception:  # noqa: BLE001 (gone meanwhile, or going: try again)
                other = None
            waited = time.monotonic() - start
            if other is not None and waited > (lease.SAME_WAIT if lease.same(other, me) else lease.OTHER_WAIT):
                raise ConflictError(
                    f"another hutch gateway already drives the Ray cluster at {self.address}: {lease.held_by(other)}",
                    hint="one gateway per cluster (each counts only the sandboxes it placed: two would overfill the "
                    "nodes); stop that one first, or send clients to it",
                )
            if other is None and waited > lease.SAME_WAIT:
                raise self.down(RuntimeError("its gateway lease (a Ray actor) can neither be made nor asked who holds it"))
            time.sleep(0.5)

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
            self._lease = None  # the lease ends with this driver's job
            if ray.is_initialized():
                ray.shutdown()
