"""How a translation session's socket closes after ``session.closed``, for a client that closes it then, as
OpenAI's SDKs do (the Node SDK's ``finish()`` fails on any close code but 1000, 1001 and 1005).

It starts ``manage.py serve`` (daphne, loopback pipeline, one unit, https/wss) of today's code and, with
``--compare DIR``, of another checkout (say the code before the fix: ``git archive 67955c1 | tar -x -C DIR``), and
runs rounds interleaved on them. A round: a session opens, is asked to close (``session.close``), and the client
closes its socket (1000) the moment ``session.closed`` arrives. One sample: the close code the client was
answered with (1006: the connection ended with no close frame, what the SDK calls "closed abnormally") and the
time from ``session.close`` to the connection's end.

Run: ``python bench/translation_close.py`` (``--help``); it prints a markdown section and writes it into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import ssl
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import latency_row, machine_load, write_section  # noqa: E402
from tests.clients.conftest import make_certs, tls_env  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

BEGIN, END = "<!-- translation-close:begin -->", "<!-- translation-close:end -->"
PATH = "/v1/realtime/translations?model=gpt-realtime-translate"
NORMAL = {1000, 1001, 1005}  # what the Node SDK's finish() takes for a clean close


async def one_round(server: LiveServer, context: ssl.SSLContext) -> tuple[int, float]:
    """A session closed as the SDKs close it: the close code the client got and ms from ``session.close``."""
    url = server.http.replace("https", "wss") + PATH
    async with asyncio.timeout(30):
        ws = await websockets.connect(url, ssl=context, subprotocols=["realtime"], max_size=None)
        while json.loads(await ws.recv())["type"] != "session.created":
            pass
        asked = time.monotonic()
        await ws.send(json.dumps({"type": "session.close"}))
        while json.loads(await ws.recv())["type"] != "session.closed":
            pass
        await ws.close(1000)
        ended = time.monotonic()
    return ws.close_code or 1005, (ended - asked) * 1000  # websockets: 1006 when no close frame came


async def measure(servers: dict[str, LiveServer], context: ssl.SSLContext, rounds: int) -> dict[str, list]:
    results: dict[str, list] = {label: [] for label in servers}
    for _ in range(rounds):
        for label, server in servers.items():  # interleaved: the machine's drift falls on both alike
            await asyncio.to_thread(server.wait_free, 1)
            results[label].append(await one_round(server, context))
    return results


def section(results: dict[str, list], command: str, load: float) -> str:
    rows = []
    for label, samples in results.items():
        codes = Counter(code for code, _ in samples)
        abnormal = sum(n for code, n in codes.items() if code not in NORMAL)
        said = ", ".join(f"{code}: {n}" for code, n in sorted(codes.items()))
        rows.append(latency_row(label, [ms for _, ms in samples]) + f" {said} | {abnormal} of {len(samples)} |")
    return "\n".join(
        [
            BEGIN,
            "### A translation session's close, as OpenAI's SDKs close it",
            "",
            f"`{command}` ({datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} cores; {machine_load(load)}).",
            "",
            "The loopback pipeline, one unit per server, https/wss, rounds interleaved. A session is asked to close",
            "and the client closes its socket (1000) the moment `session.closed` arrives: ms from `session.close`",
            "to the connection's end, the close codes the client was answered with (1006: no close frame came),",
            "and how many of those the Node SDK's `finish()` calls abnormal.",
            "",
            "| server | rounds | p50 | p90 | min | max | close codes | abnormal |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Before, the server closed the socket itself right after `session.closed`; when its close crossed the",
            "client's, autobahn (daphne's WebSocket layer), in the closing state, dropped the connection at once",
            "(`abortConnection`), and a close frame still in its write buffer never went out. Now the session ends at",
            "`session.closed` and the socket is the client's to close (the server's after 2 s).",
            END,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="sessions per server")
    parser.add_argument("--compare", type=Path, help="another checkout to run beside today's code")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    roots = {"today": ROOT} | ({f"{args.compare.name} (before)": args.compare} if args.compare else {})
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(Path(tmp))
        context = ssl.create_default_context(cafile=certs.ca)
        servers = {}
        try:
            for n, (label, root) in enumerate(roots.items()):
                folder = Path(tmp) / str(n)
                folder.mkdir()
                env = {"S2S_POOL_SIZE": "1", **tls_env(certs)}
                servers[label] = LiveServer(folder, env=env, root=root, ca_file=certs.ca).start()
            results = asyncio.run(measure(servers, context, args.rounds))
        finally:
            for server in servers.values():
                server.stop()
    command = "python bench/translation_close.py " + shlex.join(sys.argv[1:])
    text = section(results, command.strip(), os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
