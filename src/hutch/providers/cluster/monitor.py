"""Following the cluster: Ray's view of its nodes, each node's daemon, losses and returns.

One task, started on first use, does a round every ``interval`` seconds (see
:mod:`hutch.providers.cluster.nodes` for the states). Ray's calls block: each runs in a
thread with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from hutch._version import __version__
from hutch.errors import HutchError, UnavailableError
from hutch.provider.optional import Death, OnGone
from hutch.providers.cluster.driver import Driver, RayNode
from hutch.providers.cluster.http import NodeClient, sandbox
from hutch.providers.cluster.nodes import Node

log = logging.getLogger("hutch.cluster")
GATEWAY_LABEL = "hutch.gateway.sandbox"  # on each node sandbox: the gateway's id for it
T = TypeVar("T")
NODES_TIMEOUT = 15.0  # a round waits this long for Ray's answer

OnEvent = Callable[[str, str, "str | None", dict[str, Any]], None]
OnNode = Callable[[dict[str, Any]], None]


def in_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``fn(*args)`` in a daemon thread of its own: a Ray call that hangs (a head that is down)
    never holds up the event loop, the default executor, or the daemon's exit."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, exc: BaseException | None) -> None:
        if not fut.done():
            fut.set_exception(exc) if exc is not None else fut.set_result(value)

    def run() -> None:
        try:
            value, exc = fn(*args), None
        except BaseException as e:  # noqa: BLE001 (handed to the awaiting task, whatever it is)
            value, exc = None, e
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, value, exc)

    threading.Thread(target=run, daemon=True, name="hutch-ray").start()
    return fut


class Monitor:
    def __init__(self, driver: Driver, detect: float, default_sandboxes: int) -> None:
        self.driver = driver
        self.detect = detect
        self.interval = max(0.25, min(2.0, detect / 4))
        self.default_sandboxes = default_sandboxes
        self.nodes: dict[str, Node] = {}
        self.watchers: dict[str, OnGone] = {}
        self.drained: set[str] = set()
        self.head_error: str | None = None
        self.rounds = 0
        self.on_event: OnEvent = lambda *a: None
        self.on_node: OnNode = lambda doc: None
        self.on_ready: Callable[[Node], Awaitable[None]] | None = None  # each round, for each node that answered
        self._task: asyncio.Task[None] | None = None
        self._round_done = asyncio.Event()
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._ray_call: asyncio.Future[list[RayNode]] | None = None
        self._ray_since = time.monotonic()

    # -- the loop ------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="hutch-cluster-monitor")

    async def claim(self, holder: dict[str, Any]) -> None:
        """This process is the cluster's gateway: it takes the lease before it serves
        (``conflict`` naming the gateway that holds it). A head that does not answer yet is
        left to the rounds: the lease is taken when it answers."""
        self.driver.holder = holder
        try:
            await asyncio.wait_for(in_thread(self.driver.init), NODES_TIMEOUT)
        except (TimeoutError, UnavailableError) as exc:
            log.warning("the Ray cluster at %s does not answer yet (%s): the lease waits for it", self.driver.address, exc)
            return
        await in_thread(self.driver.connect)

    async def first_round(self) -> None:
        """Wait for one full round (the cluster's state is known, or the head is down)."""
        self.start()
        if self.rounds == 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._round_done.wait(), NODES_TIMEOUT * 2)
        if self.head_error is not None and not self.nodes:
            raise self.driver.down(RuntimeError(self.head_error))

    async def settled(self, name: str, timeout: float) -> Node | None:
        """The node ``name`` once it is no longer starting (None: Ray does not know it)."""
        await self.first_round()
        deadline = time.monotonic() + timeout
        while (node := self.nodes.get(name)) is not None and node.state in ("starting", "unreachable"):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(self.interval)
        return self.nodes.get(name)

    async def _run(self) -> None:
        while True:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cluster round failed")
            self.rounds += 1
            self._round_done.set()
            await asyncio.sleep(self.interval)

    async def round(self) -> None:
        try:
            ray_nodes = await self._ray_nodes()
            self.head_error = None
        except (TimeoutError, HutchError) as exc:
            waited = time.monotonic() - self._ray_since
            self.head_error = exc.message if isinstance(exc, HutchError) else f"no answer for {waited:.0f} s"
            ray_nodes = None
        alive: dict[str, bool] = {}
        for rn in ray_nodes or []:
            if rn.alive:
                alive[rn.name] = True
                self._know(rn)
            else:
                alive.setdefault(rn.name, False)
        await asyncio.gather(*(self._check(node, alive.get(node.name)) for node in list(self.nodes.values())))

    async def _ray_nodes(self) -> list[RayNode]:
        """Ray's nodes, within NODES_TIMEOUT. A call to a head that is down can block for minutes
        (``ray.init`` retries): it is left to finish in its thread and the next rounds wait on the
        same call instead of piling up threads."""
        if self._ray_call is None:
            self._ray_call = in_thread(self.driver.nodes)
            self._ray_since = time.monotonic()
        call = self._ray_call
        await asyncio.wait({call}, timeout=NODES_TIMEOUT)
        if not call.done():
            raise TimeoutError
        self._ray_call = None
        return call.result()

    def _know(self, rn: RayNode) -> None:
        node = self.nodes.get(rn.name)
        if node is None:
            node = self.nodes[rn.name] = Node(rn.name, rn.id, dict(rn.resources), drained=rn.name in self.drained)
        fresh = node.ray_id != rn.id  # the same machine, a new Ray node: its daemon is found again
        if fresh:
            node.ray_id = rn.id
            if node.state != "lost":
                node.state = "starting"
        node.resources = dict(rn.resources)
        if (node.client is None or fresh) and rn.name not in self._starting:
            self._starting[rn.name] = asyncio.get_running_loop().create_task(self._connect(node, rn))

    async def _connect(self, node: Node, rn: RayNode, restart: bool = False) -> None:
        try:
            info = await in_thread(self.driver.daemon, rn, restart)
            if info.get("version") != __version__:
                node.state, node.version = "refused", str(info.get("version"))
                node.error = (
                    f"node {node.name} runs hutch {info.get('version')}, this gateway runs {__version__}: nothing is placed on it"
                )
                self._report(node)
                return
            old = node.client
            node.client = NodeClient(node.name, str(info["url"]), str(info["token"]), str(info["ca"]))
            node.version = str(info["version"])
            node.users = str(info["users"]) if info.get("users") else None
            if old is not None:
                await old.close()
        except Exception as exc:  # noqa: BLE001 (Ray's errors, the actor's own: said in the node's state)
            node.error = f"its daemon cannot be started: {exc.__class__.__name__}: {exc}"[:500]
            log.warning("node %s: %s", node.name, node.error)
        finally:
            self._starting.pop(node.name, None)

    async def _check(self, node: Node, ray_alive: bool | None) -> None:
        before = (node.state, node.error)
        now = time.monotonic()
        ok = False
        if node.client is not None and node.state != "refused":
            try:
                await node.client.health()
                ok = True
            except HutchError as exc:
                if node.state != "refused":  # refused meanwhile (_connect): its reason stays, not a stale client's
                    node.error = exc.message
        if node.state == "refused":
            if ray_alive is False or (ray_alive is None and self.head_error is None):
                node.state, node.error = "lost", "Ray reports the node dead"
        elif ok:
            if node.state == "lost":
                await self._returned(node)
            node.state, node.error, node.last_ok = "ready", None, now
            if self.on_ready is not None:
                await self.on_ready(node)
        elif ray_alive is False or (ray_alive is None and self.head_error is None):
            await self._lose(node, "Ray reports the node dead")
        else:
            if node.client is not None and now - node.last_ok > self.detect:
                await self._lose(node, f"its daemon has not answered for {self.detect:g} s")
            elif node.client is not None and node.state != "lost":
                node.state = "unreachable"
            if ray_alive and node.client is not None and node.name not in self._starting:
                # the Ray node lives but its daemon does not answer: its actor starts it again
                rn = RayNode(node.ray_id, node.name, True, node.resources)
                self._starting[node.name] = asyncio.get_running_loop().create_task(self._connect(node, rn, restart=True))
        if (node.state, node.error) != before:
            self._report(node)

    def _report(self, node: Node) -> None:
        log.info("node %s is %s%s", node.name, node.state, f": {node.error}" if node.error else "")
        self.on_node(node.describe(self.default_sandboxes))

    # -- losses and returns ------------------------------------------------------------------

    async def _lose(self, node: Node, why: str) -> None:
        if node.state == "lost":
            return
        node.state, node.error = "lost", why
        log.warning("node %s lost: %s (%d sandboxes)", node.name, why, len(node.placed))
        for sid in list(node.placed):
            node.placed.pop(sid, None)
            on_gone = self.watchers.pop(sid, None)
            if on_gone is not None:
                await on_gone(sid, Death(detail=f"node {node.name} was lost: {why}"))

    async def _returned(self, node: Node) -> None:
        """A lost node answers again: sandboxes it still holds that the gateway does not follow
        (reported lost meanwhile) are removed from it, each with an event; none is adopted twice."""
        assert node.client is not None
        try:
            held = await node.client.json("GET", "/v1/sandboxes")
        except HutchError as exc:
            log.warning("node %s returned but cannot be listed: %s", node.name, exc.message)
            return
        for made in held:
            gid = (made.get("spec") or {}).get("labels", {}).get(GATEWAY_LABEL)
            if gid is None or gid in node.placed:
                continue
            with contextlib.suppress(HutchError):
                await node.client.json("DELETE", sandbox(made["id"]))
                self.on_event("sandbox_cleaned", gid, None, {"node": node.name, "node_sandbox": made["id"]})
        log.info("node %s returned", node.name)

    def follow(self, sandbox_id: str, on_gone: OnGone) -> None:
        self.watchers[sandbox_id] = on_gone

    def unfollow(self, sandbox_id: str) -> None:
        self.watchers.pop(sandbox_id, None)

    async def close(self) -> None:
        tasks = [t for t in (self._task, self._ray_call, *self._starting.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for node in self.nodes.values():
            if node.client is not None:
                await node.client.close()


def unavailable(node: Node | None, name: str) -> UnavailableError:
    state = node.state if node is not None else "unknown to Ray"
    why = f": {node.error}" if node is not None and node.error else ""
    return UnavailableError(f"node {name} is {state}{why}", hint="hutch cluster nodes shows each node's state")
