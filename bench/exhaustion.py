"""What one client can take from a node: the figures of docs/security.md ("Exhaustion"), before and after.

Runs a real ``manage.py serve`` (loopback pipeline, SQLite) from ``--root`` (default: this tree; point it
at a checkout without the limits for the "before" figures) and measures, one after the other:

* trickle: how long a request sent one byte a second keeps its socket (stopped at ``--trickle-limit-s``);
* unfinished: 250 connections from 127.0.0.2 that never finish their request, the server's open-files
  limit at 256: how many of 10 ``/healthz`` from 127.0.0.1 (one every 0.5 s) and of 3 sessions succeed;
* items: 100 ``conversation.item.create`` of 5 MiB of text: the server's RSS and database growth;
* refusals: 500 handshakes without credentials: session rows written and database growth.

    .venv/bin/python bench/exhaustion.py
    .venv/bin/python bench/exhaustion.py --root ../main-before
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import sqlite3
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib

from tests.support import server as live  # noqa: E402

MiB = 1024 * 1024


def trickle(server: live.LiveServer, limit_s: float) -> float:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.settimeout(1.0)
        started = time.monotonic()
        request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 1000
        for byte in request[: int(limit_s)]:
            try:
                if not sock.recv(4096):
                    break
            except TimeoutError:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    break
            except OSError:
                break
        return time.monotonic() - started


def unfinished(server: live.LiveServer) -> dict[str, object]:
    resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE, (256, 256))
    held = []
    for _ in range(250):
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            held.append(sock)
        except OSError:
            sock.close()
    time.sleep(0.5)
    fds = psutil.Process(server.process.pid).num_fds()
    healthz = 0
    for _ in range(10):
        try:
            with urllib.request.urlopen(f"{server.http}/healthz", timeout=2) as answer:
                healthz += answer.status == 200
        except OSError:
            pass
        time.sleep(0.5)
    sessions = 0
    for _ in range(3):
        try:
            with connect(server.ws, open_timeout=3) as ws:
                sessions += json.loads(ws.recv(timeout=3))["type"] == "session.created"
        except Exception:
            pass
    for sock in held:
        sock.close()
    return {"server_fds": fds, "healthz_ok_of_10": healthz, "sessions_ok_of_3": sessions}


def db_bytes(server: live.LiveServer) -> int:
    return sum(path.stat().st_size for path in server.tmp_dir.glob("server.sqlite3*"))


def items(server: live.LiveServer) -> dict[str, object]:
    process = psutil.Process(server.process.pid)
    rss, size = process.memory_info().rss, db_bytes(server)
    text = "a" * (5 * MiB)
    frame = json.dumps(
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        }
    )
    started = time.monotonic()
    with connect(server.ws, max_size=None, open_timeout=10) as ws:
        ws.recv(timeout=10)
        answers: dict[str, int] = {}
        for _ in range(100):
            ws.send(frame)
            while True:
                event = json.loads(ws.recv(timeout=60))
                kind = event["error"]["code"] if event["type"] == "error" else event["type"]
                if kind in ("conversation.item.done", "conversation.item.created") or event["type"] == "error":
                    answers[kind] = answers.get(kind, 0) + 1
                    break
        during = process.memory_info().rss
    time.sleep(2)
    return {
        "answers": answers,
        "seconds": round(time.monotonic() - started, 1),
        "rss_growth_mib": round((during - rss) / MiB),
        "rss_after_close_growth_mib": round((process.memory_info().rss - rss) / MiB),
        "db_growth_mb": round((db_bytes(server) - size) / 1e6, 1),
    }


def refusals(server: live.LiveServer) -> dict[str, object]:
    size = db_bytes(server)
    started = time.monotonic()
    for _ in range(500):
        with connect(server.ws, open_timeout=5, user_agent_header="x" * 500) as ws, contextlib.suppress(Exception):
            ws.recv(timeout=5)
    took = time.monotonic() - started
    time.sleep(3)
    with sqlite3.connect(server.tmp_dir / "server.sqlite3") as db:
        rows = db.execute("SELECT count(*) FROM realtime_realtimesession").fetchone()[0]
    return {
        "per_second": round(500 / took),
        "session_rows": rows,
        "db_growth_kb": round((db_bytes(server) - size) / 1000),
    }


def run(root: Path, env: dict[str, str], measure) -> dict[str, object]:
    live.ROOT = root
    with tempfile.TemporaryDirectory() as tmp:
        server = live.LiveServer(Path(tmp), env=env).start()
        try:
            return measure(server)
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=live.ROOT)
    parser.add_argument("--trickle-limit-s", type=float, default=45.0)
    parser.add_argument("--only", choices=("trickle", "unfinished", "items", "refusals"))
    args = parser.parse_args()
    figures = {
        "trickle": lambda: {"open_s": round(run(args.root, {}, lambda s: trickle(s, args.trickle_limit_s)), 1)},
        "unfinished": lambda: run(args.root, {}, unfinished),
        "items": lambda: run(args.root, {"S2S_POOL_SIZE": "1"}, items),
        "refusals": lambda: run(args.root, {"S2S_AUTH_REQUIRED": "1"}, refusals),
    }
    for name, measure in figures.items():
        if args.only in (None, name):
            print(name, json.dumps(measure()), flush=True)


if __name__ == "__main__":
    main()
