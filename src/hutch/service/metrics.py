"""The daemon's metrics (``GET /metrics``, Prometheus text format, prometheus_client).

Counters and histograms are fed as things happen (creates, destroys, runs, egress
decisions, requests per key); gauges of state (sandboxes by state and provider, pending
approvals, each key's live sandboxes and memory) are read from the store at each scrape.
The pool's size is a gauge its owner sets: ``service.metrics.pool_size.labels(shape=...).set(n)``.
Every Service has a registry of its own (several live in one test process).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hutch.actors import current
from hutch.models import LIVE_STATES, ApprovalStatus

if TYPE_CHECKING:
    from hutch.service import Service

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, float("inf"))


class _State(Collector):
    """What the store says at scrape time."""

    def __init__(self, service: Service) -> None:
        self.svc = service

    def collect(self) -> Iterator[Metric]:
        store = self.svc.store
        by_state = GaugeMetricFamily("hutch_sandboxes", "Sandboxes by state and provider", labels=["state", "provider"])
        for state, provider, count in store.sandboxes.counts():
            by_state.add_metric([state, provider], count)
        yield by_state
        pending = len(store.approvals.all(ApprovalStatus.pending))
        yield GaugeMetricFamily("hutch_approvals_pending", "Approval requests waiting for a human", value=pending)
        names = {k["id"]: k["name"] for k in store.keys.all()}
        live = GaugeMetricFamily("hutch_key_live_sandboxes", "Live sandboxes per key", labels=["key"])
        memory = GaugeMetricFamily("hutch_key_memory_bytes", "Memory limit of each key's live sandboxes", labels=["key"])
        usage: dict[str, list[int]] = {}
        for rec in store.sandboxes.all(LIVE_STATES):
            row = usage.setdefault(names.get(rec.owner or "", rec.owner or "none"), [0, 0])
            row[0] += 1
            row[1] += rec.spec.limits.memory
        for key, (count, size) in sorted(usage.items()):
            live.add_metric([key], count)
            memory.add_metric([key], size)
        yield live
        yield memory


def _children(metric: Counter) -> Callable[..., Counter]:
    """``metric.labels(*values)``, each child looked up once (``labels`` checks and joins its
    values on every call, and the exec path counts three of them per run)."""
    return functools.lru_cache(maxsize=None)(metric.labels)


class Metrics:
    def __init__(self, service: Service) -> None:
        r = self.registry = CollectorRegistry()
        self.creates = Counter("hutch_sandboxes_created", "Sandboxes created", ["provider"], registry=r)
        self.destroys = Counter("hutch_sandboxes_destroyed", "Sandboxes destroyed", ["provider"], registry=r)
        self.create_seconds = Histogram(
            "hutch_create_duration_seconds", "Create latency", ["provider"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.runs = Counter("hutch_runs_finished", "Runs finished, by status", ["status"], registry=r)
        self.exec_seconds = Histogram("hutch_exec_duration_seconds", "Run (exec) duration", buckets=LATENCY_BUCKETS, registry=r)
        self.egress = Counter("hutch_egress_decisions", "Egress decisions of sandbox proxies", ["decision"], registry=r)
        self.pool_size = Gauge("hutch_pool_size", "Pre-started sandboxes waiting in the pool", ["shape"], registry=r)
        self.requests = Counter("hutch_key_requests", "HTTP requests per key and status", ["key", "code"], registry=r)
        self.key_runs = Counter("hutch_key_runs", "Runs finished per key", ["key"], registry=r)
        self.key_creates = Counter("hutch_key_sandboxes_created", "Sandboxes created per key", ["key"], registry=r)
        self.limited = Counter("hutch_key_rate_limited", "Requests refused by a key's rate limit", ["key", "limit"], registry=r)
        self._runs, self._key_runs, self._requests = _children(self.runs), _children(self.key_runs), _children(self.requests)
        self._egress = _children(self.egress)  # one per proxied connection
        ProcessCollector(registry=r)  # the daemon's own memory, CPU and open files
        r.register(_State(service))

    def created(self, provider: str, seconds: float) -> None:
        self.creates.labels(provider=provider).inc()
        self.create_seconds.labels(provider=provider).observe(seconds)
        self.key_creates.labels(key=current().name).inc()

    def destroyed(self, provider: str) -> None:
        self.destroys.labels(provider=provider).inc()

    def run_finished(self, status: str, seconds: float) -> None:
        self._runs(status).inc()
        self.exec_seconds.observe(seconds)
        self._key_runs(current().name).inc()

    def event(self, type_: str, data: dict[str, Any]) -> None:
        if type_ in ("egress_allowed", "egress_denied"):
            self._egress(type_.removeprefix("egress_")).inc()

    def request(self, key: str, code: int) -> None:
        self._requests(key, str(code)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
