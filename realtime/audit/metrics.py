"""This process's metrics for Prometheus (``/metrics``), with ``prometheus_client``.

Each server process serves its own figures; Prometheus scrapes every node and
sums. Latency histograms and response counts are fed by the session recorder
from the event loop (``prometheus_client`` takes its own locks, never the
database); the pool and record-writer figures are read at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from realtime.models import Stage

if TYPE_CHECKING:
    from pipelines.pool import PipelinePool

disable_created_metrics()  # no "*_created" series: nothing here needs them and they double the output

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
UNIT_STATES = ("warming", "idle", "busy", "draining", "quarantined")


class WriterFigures(Protocol):
    @property
    def backlog(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def overflowed(self) -> int: ...


class Metrics:
    """The figures of one process: what sessions observed, and a view of the pool and the record writer."""

    def __init__(self, node: str, pool: Callable[[], PipelinePool | None], writer: WriterFigures) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "s2s_latency_seconds",
            "Per-stage latency: STT, LM to first token, TTS to first "
            "audio, and voice to voice (end of the user's speech to the first reply audio).",
            ["stage"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        for stage in Stage:
            self.latency.labels(stage=stage.value)  # every stage shows, observed or not
        self.responses = Counter("s2s_responses", "Responses finished, by status.", ["status"], registry=self.registry)
        self.refusals = Counter(
            "s2s_connections_refused",
            "Connections that never became a session, by the error code they were sent.",
            ["reason"],
            registry=self.registry,
        )
        self.listener_up = Gauge(
            "s2s_listener_up",
            "Whether a listener of this process (SIP over UDP, TCP, TLS) has its socket open.",
            ["transport"],
            registry=self.registry,
        )
        self.listener_restarts = Counter(
            "s2s_listener_restarts",
            "Listener sockets found closed and started again, by transport.",
            ["transport"],
            registry=self.registry,
        )
        self.sip_held = Gauge(
            "s2s_sip_held",
            "What the SIP listener holds, by kind: calls (ringing or answered) and INVITE server transactions "
            "(a flood of refused INVITEs grows neither).",
            ["kind"],
            registry=self.registry,
        )
        self.registry.register(_ProcessCollector(node, pool, writer))

    def listener_state(self, transport: str, up: bool) -> None:
        self.listener_up.labels(transport=transport).set(1 if up else 0)

    def sip_state(self, calls: int, transactions: int) -> None:
        self.sip_held.labels(kind="calls").set(calls)
        self.sip_held.labels(kind="transactions").set(transactions)

    def count_listener_restart(self, transport: str) -> None:
        self.listener_restarts.labels(transport=transport).inc()

    def observe(self, stage: Stage, seconds: float) -> None:
        self.latency.labels(stage=stage.value).observe(seconds)

    def count_response(self, status: str) -> None:
        self.responses.labels(status=status).inc()

    def count_refusal(self, reason: str) -> None:
        self.refusals.labels(reason=reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ProcessCollector(Collector):
    """Pool gauges and record-writer counters, read when Prometheus scrapes."""

    def __init__(self, node: str, pool: Callable[[], PipelinePool | None], writer: WriterFigures) -> None:
        self.node, self.pool, self.writer = node, pool, writer

    def collect(self) -> Iterator[Metric]:
        pool = self.pool()
        snapshot = pool.snapshot() if pool is not None else []
        states = dict.fromkeys(UNIT_STATES, 0)
        for unit in snapshot:
            states[str(unit["state"])] = states.get(str(unit["state"]), 0) + 1
        info = GaugeMetricFamily("s2s_node_info", "The node this process publishes as.", labels=["node"])
        info.add_metric([self.node], 1)
        yield info
        yield GaugeMetricFamily(
            "s2s_pool_ready",
            "1 while the pool is warm and admitting sessions.",
            value=int(pool is not None and pool.admitting),
        )
        units = GaugeMetricFamily("s2s_units", "Pipeline units by state.", labels=["state"])
        for state, count in states.items():
            units.add_metric([state], count)
        yield units
        yield GaugeMetricFamily("s2s_units_free", "Units free for a new session.", value=states["idle"])
        yield GaugeMetricFamily(
            "s2s_sessions_active", "Sessions holding a unit.", value=sum(1 for unit in snapshot if unit["session_id"])
        )
        yield CounterMetricFamily(
            "s2s_sessions_rejected",
            "Connections turned away because every unit was in use.",
            value=pool.rejections if pool is not None else 0,
        )
        yield CounterMetricFamily(
            "s2s_sessions_served",
            "Sessions the units have served.",
            value=sum(int(unit["sessions_served"]) for unit in snapshot),
        )
        yield GaugeMetricFamily(
            "s2s_record_writes_pending",
            "Record writes waiting for the database (grows while it is slow or down).",
            value=self.writer.backlog,
        )
        dropped = CounterMetricFamily(
            "s2s_record_writes_dropped",
            "Record writes lost: refused by the database, or over the backlog.",
            labels=["reason"],
        )
        dropped.add_metric(["refused"], self.writer.dropped)
        dropped.add_metric(["backlog_full"], self.writer.overflowed)
        yield dropped
