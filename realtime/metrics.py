"""This process's metrics in the Prometheus text format (``/metrics``).

Each server process serves its own figures; Prometheus scrapes every node and
sums. Histograms are fed by :class:`realtime.records.SessionRecorder` from the
event loop, so updates take a lock but never touch the database.
"""

from __future__ import annotations

import bisect
import threading

from pipelines.pool import PipelinePool

BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
STAGES = ("stt", "lm_first_token", "tts_first_audio", "voice_to_voice")
UNIT_STATES = ("warming", "idle", "busy", "draining", "quarantined")


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1


_lock = threading.Lock()
_latency = {stage: Histogram() for stage in STAGES}
_responses: dict[str, int] = {}


def observe(stage: str, seconds: float) -> None:
    with _lock:
        _latency[stage].observe(seconds)


def count_response(status: str) -> None:
    with _lock:
        _responses[status] = _responses.get(status, 0) + 1


def _fmt(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{int(value)}"


def render(pool: PipelinePool | None, node: str) -> str:
    """The exposition text: pool gauges, rejections, responses by status and latency histograms."""
    snapshot = pool.snapshot() if pool is not None else []
    states = {state: 0 for state in UNIT_STATES}
    for unit in snapshot:
        states[str(unit["state"])] = states.get(str(unit["state"]), 0) + 1
    lines = [
        "# HELP s2s_node_info The node this process publishes as.",
        "# TYPE s2s_node_info gauge",
        f's2s_node_info{{node="{_escape(node)}"}} 1',
        "# HELP s2s_pool_ready 1 while the pool is warm and admitting sessions.",
        "# TYPE s2s_pool_ready gauge",
        f"s2s_pool_ready {int(pool is not None and pool.admitting)}",
        "# HELP s2s_units Pipeline units by state.",
        "# TYPE s2s_units gauge",
        *(f's2s_units{{state="{state}"}} {count}' for state, count in states.items()),
        "# HELP s2s_units_free Units free for a new session.",
        "# TYPE s2s_units_free gauge",
        f"s2s_units_free {states['idle']}",
        "# HELP s2s_sessions_active Sessions holding a unit.",
        "# TYPE s2s_sessions_active gauge",
        f"s2s_sessions_active {sum(1 for unit in snapshot if unit['session_id'])}",
        "# HELP s2s_sessions_rejected_total Connections turned away because every unit was in use.",
        "# TYPE s2s_sessions_rejected_total counter",
        f"s2s_sessions_rejected_total {pool.rejections if pool is not None else 0}",
        "# HELP s2s_sessions_served_total Sessions the units have served.",
        "# TYPE s2s_sessions_served_total counter",
        f"s2s_sessions_served_total {sum(int(unit['sessions_served']) for unit in snapshot)}",
    ]
    from realtime.records import writer  # records imports this module

    lines += [
        "# HELP s2s_record_writes_pending Record writes waiting for the database (grows while it is slow or down).",
        "# TYPE s2s_record_writes_pending gauge",
        f"s2s_record_writes_pending {writer.backlog}",
        "# HELP s2s_record_writes_dropped_total Record writes lost: refused by the database, or over the backlog.",
        "# TYPE s2s_record_writes_dropped_total counter",
        f's2s_record_writes_dropped_total{{reason="refused"}} {writer.dropped}',
        f's2s_record_writes_dropped_total{{reason="backlog_full"}} {writer.overflowed}',
    ]
    with _lock:
        responses = dict(_responses)
        histograms = {stage: (list(h.counts), h.total, h.count) for stage, h in _latency.items()}
    lines += ["# HELP s2s_responses_total Responses finished, by status.", "# TYPE s2s_responses_total counter"]
    lines += [f's2s_responses_total{{status="{_escape(status)}"}} {count}' for status, count in sorted(responses.items())]
    lines += ["# HELP s2s_latency_seconds Per-stage latency: STT, LM to first token, TTS to first audio, voice to voice.",
              "# TYPE s2s_latency_seconds histogram"]
    for stage, (counts, total, count) in histograms.items():
        cumulative = 0
        for bound, bucket in zip((*BUCKETS, float("inf")), counts):
            cumulative += bucket
            le = "+Inf" if bound == float("inf") else _fmt(bound)
            lines.append(f's2s_latency_seconds_bucket{{stage="{stage}",le="{le}"}} {cumulative}')
        lines.append(f's2s_latency_seconds_sum{{stage="{stage}"}} {_fmt(total)}')
        lines.append(f's2s_latency_seconds_count{{stage="{stage}"}} {count}')
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
