"""What an INVITE flood from an untrusted address costs the server (issue 49, finding 3).

It starts ``manage.py serve`` (daphne, loopback pipeline, pool of 2) with its SIP listener,
``S2S_SIP_TRUSTED=127.0.0.1/32`` and a webhook nobody answers, so a call from 127.0.0.1 rings. From
127.0.0.2 it then sends ``--count`` INVITEs evenly over ``--seconds``, the issue's shape (5,700 in 25 s): each
repeats the ringing call's Call-ID with a new branch and is never ACKed, the INVITE that before issue 49
got ``100 Trying`` (a known Call-ID returned before the trust gate) and left aiosipua a server
transaction for 300 s, which every new INVITE then scanned; now it must be refused ``403`` and
leave nothing. The answers are read on another thread. Before and during the flood it measures, one
after the other every ``--interval``: a refused INVITE's answer time (a fresh Call-ID from
127.0.0.2, to its first final answer) and ``GET /healthz``; each second it reads ``s2s_sip_held``
(calls and INVITE server transactions) from ``/metrics``. ``--compare DIR`` floods another
checkout's server too, on the same machine in the same run: the code before the fix is
``mkdir /tmp/before-issue-49 && git archive a423c13^ | tar -x -C /tmp/before-issue-49``.

Run: ``python bench/sip_flood.py`` (``--help``); it prints a markdown section and writes it into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shlex
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, pct, write_section  # noqa: E402
from tests.sip.conftest import SECRET, Webhook, sip_listener_env  # noqa: E402
from tests.sip.test_malformed import invite  # noqa: E402
from tests.sip.test_security import OFFER  # noqa: E402
from tests.support.server import LiveServer, free_port  # noqa: E402

MARKERS = ("<!-- sip-flood:begin -->", "<!-- sip-flood:end -->")
ATTACKER = "127.0.0.2"  # not in S2S_SIP_TRUSTED: every INVITE from it is refused
CALLER = "127.0.0.1"  # trusted: its call rings through the flood
RINGING_CALL_ID = "ringing-call"
HELD = re.compile(r'^s2s_sip_held\{kind="(\w+)"\} ([0-9.e+]+)$', re.MULTILINE)


@dataclass
class Phase:
    """What one phase (quiet, or during the flood) measured, in ms; and the held counts seen."""

    refused_ms: list[float] = field(default_factory=list)
    healthz_ms: list[float] = field(default_factory=list)
    lost: int = 0  # probes that got no final answer within the timeout
    statuses: Counter[int] = field(default_factory=Counter)


def refused_invite_ms(port: int, tag: str, timeout: float = 5.0) -> tuple[float | None, int]:
    """Sends one INVITE from :data:`ATTACKER` and waits for its first final answer: (ms, status), or (None, 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind((ATTACKER, 0))
        udp.settimeout(timeout)
        message = invite(f"probe-{tag}", OFFER)
        start = time.perf_counter()
        udp.sendto(message, ("127.0.0.1", port))
        deadline = start + timeout
        while time.perf_counter() < deadline:
            try:
                data = udp.recv(65536)
            except TimeoutError:
                break
            status = int(data[8:11]) if data.startswith(b"SIP/2.0 ") and data[8:11].isdigit() else 0
            if status >= 200:
                return (time.perf_counter() - start) * 1000, status
    return None, 0


def healthz_ms(server: LiveServer) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(f"{server.http}/healthz", timeout=10) as response:
        response.read()
    return (time.perf_counter() - start) * 1000


def held(server: LiveServer) -> dict[str, int]:
    """``s2s_sip_held`` from /metrics ({} where the server has no such metric: an older checkout)."""
    with urllib.request.urlopen(f"{server.http}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {kind: int(float(value)) for kind, value in HELD.findall(text)}


def measure(server: LiveServer, port: int, until: float, interval: float, phase: Phase, name: str) -> None:
    """A refused INVITE's answer time and /healthz's, one after the other every ``interval``, until ``until``."""
    index = 0
    while time.monotonic() < until:
        started = time.monotonic()
        ms, status = refused_invite_ms(port, f"{name}{index}")
        if ms is None:
            phase.lost += 1
        else:
            phase.refused_ms.append(ms)
            phase.statuses[status] += 1
        phase.healthz_ms.append(healthz_ms(server))
        index += 1
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


class Flood:
    """``count`` INVITEs from :data:`ATTACKER` evenly over ``seconds`` (in 10 ms ticks), answers read and counted
    on a thread of their own; the server's held counts sampled each second."""

    def __init__(self, server: LiveServer, port: int, count: int, seconds: float) -> None:
        self.server, self.port, self.count, self.seconds = server, port, count, seconds
        self.sent = 0
        self.answers: Counter[int] = Counter()
        self.held_max: dict[str, int] = {}
        self.elapsed = 0.0
        self._done = threading.Event()
        self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._udp.bind((ATTACKER, 0))
        self._udp.settimeout(0.2)
        self._threads = [threading.Thread(target=run, daemon=True) for run in (self._send, self._read, self._watch)]

    def start(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def join(self, linger_s: float = 2.0) -> None:
        """Waits for the last INVITE to go, then ``linger_s`` for the answers and a last look at the held counts."""
        self._threads[0].join()
        time.sleep(linger_s)
        self._done.set()
        for thread in self._threads[1:]:
            thread.join()
        self._udp.close()

    def _send(self) -> None:
        start = time.monotonic()
        ticks = max(1, int(self.seconds * 100))
        for tick in range(ticks):
            target = (tick + 1) * self.count // ticks
            while self.sent < target:
                via = f"SIP/2.0/UDP {ATTACKER}:5999;branch=z9hG4bKflood{self.sent};rport"
                message = invite(RINGING_CALL_ID, OFFER, Via=via, From=f"<sip:mallory@{ATTACKER}>;tag=f{self.sent}")
                self._udp.sendto(message, ("127.0.0.1", self.port))
                self.sent += 1
            time.sleep(max(0.0, start + (tick + 1) / 100 - time.monotonic()))
        self.elapsed = time.monotonic() - start

    def _read(self) -> None:
        while not self._done.is_set():
            try:
                data = self._udp.recv(65536)
            except (TimeoutError, OSError):
                continue
            self.answers[int(data[8:11]) if data[8:11].isdigit() else 0] += 1

    def _watch(self) -> None:
        while not self._done.is_set():
            for kind, value in held(self.server).items():
                self.held_max[kind] = max(self.held_max.get(kind, 0), value)
            self._done.wait(1.0)


class RingingCall:
    """A call from :data:`CALLER` that rings through the flood (the webhook is told, nobody accepts): the
    Call-ID the flood repeats. It must ring: an answered call's Call-ID was refused 481 by aiosipua even before."""

    def __init__(self, port: int) -> None:
        self.sip = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sip.bind((CALLER, 0))
        self.rtp.bind((CALLER, 0))
        self.sip.settimeout(10)
        offer = OFFER.replace("m=audio 5998", f"m=audio {self.rtp.getsockname()[1]}")
        self.sip.sendto(invite(RINGING_CALL_ID, offer), ("127.0.0.1", port))
        while not (answer := self.sip.recv(65536)).startswith(b"SIP/2.0 180"):
            if not answer.startswith(b"SIP/2.0 1"):
                raise RuntimeError(f"the call did not ring: {answer[:60]!r}")

    def close(self) -> None:
        self.sip.close()
        self.rtp.close()


def rss_mb(server: LiveServer) -> float:
    assert server.process is not None
    return psutil.Process(server.process.pid).memory_info().rss / 2**20


def run(args: argparse.Namespace, root: Path) -> dict:
    """Starts ``root``'s server, measures the quiet phase, then the flood; returns the figures."""
    sip_port = free_port()
    with tempfile.TemporaryDirectory() as tmp, closing(Webhook()) as hook:
        env = {
            "S2S_POOL_SIZE": "2",
            **sip_listener_env(sip_port),
            "S2S_SIP_TRUSTED": "127.0.0.1/32",
            "S2S_SIP_WEBHOOK_URL": hook.url,  # a call rings until the operator accepts it: nobody does
            "S2S_SIP_WEBHOOK_SECRET": SECRET,
            "S2S_SIP_ACCEPT_TIMEOUT_S": "600",
        }
        server = LiveServer(Path(tmp), env=env, root=root)
        server.start(ready_timeout=300)
        ringing = None
        try:
            ringing = RingingCall(sip_port)
            quiet, during = Phase(), Phase()
            measure(server, sip_port, time.monotonic() + args.quiet_seconds, args.interval, quiet, "quiet")
            rss_before, held_before = rss_mb(server), held(server)
            flood = Flood(server, sip_port, args.count, args.seconds).start()
            measure(server, sip_port, time.monotonic() + args.seconds, args.interval, during, "flood")
            flood.join()
            held_after, rss_after = held(server), rss_mb(server)
            log = server.full_log()
        finally:
            if ringing is not None:
                ringing.close()
            server.stop()
    return {
        "quiet": quiet,
        "during": during,
        "flood": flood,
        "held": (held_before, flood.held_max, held_after),
        "rss": (rss_before, rss_after),
        "log_lines": sum(ATTACKER in line and "refused" in line for line in log.splitlines()),
        "tracebacks": log.count("Traceback") + log.count("CRITICAL"),
    }


def row(label: str, values: list[float]) -> str:
    if not values:
        return f"| {label} | 0 | - | - | - |"
    return f"| {label} | {len(values)} | {pct(values, 50):.1f} | {pct(values, 95):.1f} | {max(values):.1f} |"


def held_text(counts: dict[str, int]) -> str:
    if not counts:
        return "not reported (no `s2s_sip_held`)"
    return f"{counts.get('calls', 0)} calls, {counts.get('transactions', 0)} transactions"


def rows(name: str, figures: dict) -> list[str]:
    quiet, during = figures["quiet"], figures["during"]
    return [
        row(f"{name}: refused INVITE, quiet", quiet.refused_ms),
        row(f"{name}: refused INVITE, during the flood", during.refused_ms),
        row(f"{name}: `/healthz`, quiet", quiet.healthz_ms),
        row(f"{name}: `/healthz`, during the flood", during.healthz_ms),
    ]


def notes(name: str, figures: dict) -> str:
    quiet, during, flood = figures["quiet"], figures["during"], figures["flood"]
    before, most, after = figures["held"]
    statuses = ", ".join(f"{count} × {status}" for status, count in sorted(flood.answers.items()))
    probes = ", ".join(f"{count} × {status}" for status, count in sorted((quiet.statuses + during.statuses).items()))
    return (
        f"- {name}: {flood.sent} INVITEs in {flood.elapsed:.1f} s ({flood.sent / max(flood.elapsed, 1e-9):.0f} a "
        f"second), {sum(flood.answers.values())} answers read ({statuses}); the probes answered {probes}, "
        f"{quiet.lost} quiet and {during.lost} during the flood unanswered within 5 s. Held (`s2s_sip_held`, read "
        f"each second): {held_text(before)} before, at most {held_text(most)} during, {held_text(after)} after. "
        f"Memory {figures['rss'][0]:.0f} MB before, {figures['rss'][1]:.0f} MB after. Log lines for the refusals "
        f"from {ATTACKER}: {figures['log_lines']}; tracebacks or CRITICAL lines: {figures['tracebacks']}."
    )


def intro(args: argparse.Namespace, command: str, load: float) -> str:
    cpu = platform.processor() or platform.machine()
    return (
        f"`{command}` on {dt.date.today()}, {os.cpu_count()} CPUs ({cpu}; a 2-core AMD EPYC VM, no GPU), "
        f"{machine_load(load)}. The server (daphne, loopback pipeline, pool of 2, "
        "`S2S_SIP_TRUSTED=127.0.0.1/32`) and the client share the machine. A call from "
        f"{CALLER} rings (a webhook nobody answers); the flood: {args.count} INVITEs from {ATTACKER} over "
        f"{args.seconds:.0f} s, each repeating the ringing call's Call-ID with a new branch, never ACKed "
        "(before issue 49 each got `100 Trying` and left a transaction). Before it and during it, every "
        f"{args.interval} s, one refused INVITE (a fresh Call-ID, to its final answer) and one "
        "`GET /healthz`, in ms:"
    )


BEFORE = """Before issue 49 such an INVITE returned before the trust gate (a known Call-ID) and left aiosipua a
server transaction for 300 s, and each new INVITE scanned them all (the issue measured a refused INVITE
going from 0.12 s to 0.68 s and `/healthz` from 21 to 211 ms). Now the gate answers before any state
exists, known Call-ID or not, and expired transactions are looked for at most every 5 s: the table
does not grow."""


def section(runs: list[tuple[str, dict]], args: argparse.Namespace, command: str, load: float) -> str:
    return "\n".join(
        [
            MARKERS[0],
            "## SIP: an INVITE flood from an untrusted address (`bench/sip_flood.py`)",
            "",
            intro(args, command, load),
            "",
            "| Server: measure | n | p50 | p95 | max |",
            "|---|---|---|---|---|",
            *[line for name, figures in runs for line in rows(name, figures)],
            "",
            *[notes(name, figures) for name, figures in runs],
            "",
            *([f"The compared server runs the checkout at `{args.compare}`."] if args.compare else []),
            BEFORE,
            MARKERS[1],
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5700, help="INVITEs in the flood")
    parser.add_argument("--seconds", type=float, default=25.0, help="how long the flood lasts")
    parser.add_argument("--quiet-seconds", type=float, default=10.0, help="measuring before the flood")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between two probes")
    parser.add_argument("--compare", default="", help="another checkout whose server is flooded too (the old code)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.count <= 50000 or not 1 <= args.seconds <= 120:
        parser.error("--count must be 1 to 50000 and --seconds 1 to 120 (a bounded flood)")
    runs = [("this checkout", run(args, ROOT))]
    if args.compare:
        runs.append((f"`{Path(args.compare).name}`", run(args, Path(args.compare).resolve())))
    command = ("python bench/sip_flood.py " + shlex.join(sys.argv[1:])).strip()
    text = section(runs, args, command, os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, *MARKERS)


if __name__ == "__main__":
    main()
