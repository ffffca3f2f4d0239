"""What asking another process costs: ``POST /v1/realtime/calls/{call_id}/accept`` sent to the process that holds the
ringing SIP call, against the same request sent to another process, which asks the holder through Redis.

It starts two servers (``manage.py serve``, daphne, loopback pipeline, authentication on) sharing one SQLite
file and one Redis: A with the SIP listener and a webhook (this process), B without. Each round a phone
(``tests/support/sip_phone.py``: aiosipua) calls A; once the webhook has the call's id, the accept goes to A or
to B (alternating), timed from the request sent to its 200; then the phone hangs up and both units are free
again before the next round. The 404 for an unknown call costs ``S2S_CALL_CONTROL_TIMEOUT_S`` by design and is
not measured.

Run: ``python bench/call_control.py --redis redis://127.0.0.1:6379/0`` (``--help``); it prints a markdown
section and writes it into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shlex
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import latency_row, machine_load, pct, write_section  # noqa: E402
from tests.sip.conftest import SECRET, Webhook, sip_listener_env  # noqa: E402
from tests.support.server import LiveServer, free_port  # noqa: E402
from tests.support.sip_phone import SipPhone  # noqa: E402

MARKERS = ("<!-- call-control:begin -->", "<!-- call-control:end -->")


def post(url: str, key: str, body: dict | None = None) -> tuple[int, bytes]:
    """A request with the API key (a GET without a body), its status and body; an error status is returned."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def free_units(key: str, server: LiveServer) -> int:
    return int(json.loads((await asyncio.to_thread(post, f"{server.http}/readyz", key))[1])["free_units"])


async def one_round(key: str, a: LiveServer, to: LiveServer, sip_port: int, webhook: Webhook) -> float:
    """One call rung on A, accepted through ``to``; returns the accept's round trip in ms."""
    phone = SipPhone()
    dialling = asyncio.create_task(phone.dial("127.0.0.1", sip_port))
    try:
        _, body = await asyncio.to_thread(webhook.next, 30)
        call_id = json.loads(body)["data"]["call_id"]
        url = f"{to.http}/v1/realtime/calls/{call_id}/accept"
        started = time.perf_counter()
        status, answer = await asyncio.to_thread(post, url, key, {"type": "realtime"})
        elapsed = (time.perf_counter() - started) * 1000
        if status != 200:
            raise RuntimeError(f"accept answered {status}: {answer!r}")
        await asyncio.wait_for(dialling, 30)
    finally:
        if not dialling.done():
            dialling.cancel()
        await phone.hang_up()
    for _ in range(200):  # both units back before the next round (bounded: 20 s)
        if await free_units(key, a) == 2:
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError("the call's unit did not come back")
    return elapsed


async def measure(a: LiveServer, b: LiveServer, key: str, sip_port: int, webhook: Webhook, rounds: int) -> dict:
    results: dict[str, list[float]] = {"local": [], "remote": []}
    await one_round(key, a, a, sip_port, webhook)  # warm-up of both paths, not counted
    await one_round(key, a, b, sip_port, webhook)
    for index in range(rounds * 2):
        kind = "local" if index % 2 == 0 else "remote"
        results[kind].append(await one_round(key, a, a if kind == "local" else b, sip_port, webhook))
    return results


def section(results: dict[str, list[float]], command: str, load: float) -> str:
    rows = ["| accept sent to | calls | p50 ms | p90 ms | min ms | max ms |", "|---|---:|---:|---:|---:|---:|"]
    labels = (("local", "A, the process holding the call"), ("remote", "B, which asks A through Redis"))
    for kind, label in labels:
        rows.append(latency_row(label, results[kind], digits=1))
    extra = pct(results["remote"], 50) - pct(results["local"], 50)
    begin, end = MARKERS
    return f"""{begin}
## SIP call control from another process: `/accept` on the holder against `/accept` through Redis

- Command: `{command}`
- Date: {dt.date.today().isoformat()}; machine: {platform.processor() or platform.machine()}, \
{psutil.cpu_count(logical=True)} logical CPUs, Python {platform.python_version()}; {machine_load(load)}.
  Two servers (daphne, loopback pipeline, pool of 2, authentication on) sharing one SQLite file and one Redis
  on 127.0.0.1; A holds the calls (SIP listener, webhook), B none. Each round one call rings on A and its
  `/accept` goes to A or to B in turn; a sample is the HTTP request's round trip to its 200 (the session
  settings checked and the 200 OK with the SDP answer sent to the caller, on A either way).

{chr(10).join(rows)}

Through B the median is {extra:+.1f} ms: what the relay adds (B checks the key as A would have):
a reply channel, the `group_send` to the call's group, A's mailbox running the same action, and the answer
back on that channel.
An unknown call id is a `404` only after `S2S_CALL_CONTROL_TIMEOUT_S` (5 s): nobody answers for it.
{end}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="counted calls per route")
    parser.add_argument("--redis", default=os.environ.get("S2S_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    sip_port = free_port()
    webhook = Webhook()
    env = {"REDIS_URL": args.redis, "S2S_AUTH_REQUIRED": "1", "S2S_POOL_SIZE": "2"}
    with tempfile.TemporaryDirectory() as tmp:
        a = LiveServer(
            Path(tmp),
            env={
                **env,
                "S2S_NODE_NAME": "bench-a",
                **sip_listener_env(sip_port),
                "S2S_SIP_WEBHOOK_URL": webhook.url,
                "S2S_SIP_WEBHOOK_SECRET": SECRET,
            },
        )
        b = LiveServer(Path(tmp), env={**env, "S2S_NODE_NAME": "bench-b"})  # the same SQLite file
        try:
            a.start(ready_timeout=300)
            key = a.manage("create_api_key", "bench").stdout.strip()
            b.start(ready_timeout=300)
            results = asyncio.run(measure(a, b, key, sip_port, webhook, args.rounds))
        finally:
            b.stop()
            a.stop()
            webhook.close()
    command = "python bench/call_control.py " + shlex.join(sys.argv[1:])
    text = section(results, command.strip(), os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, *MARKERS)


if __name__ == "__main__":
    main()
