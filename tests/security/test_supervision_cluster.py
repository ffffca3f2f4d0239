"""A supervisor on node A, the session on node B (issue 51): two real servers (daphne, loopback profile: FAKE
stages) on one Redis and one database, as behind a load balancer, authentication on. Through the channel layer the
supervisor key hears the caller and the agent, whispers, takes over (the caller hears it) and, leaving, hands back;
another key finds the session as an id never issued."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
import websockets

from pipelines import audio
from tests.security.test_owner_routes import UNKNOWN_CALL, UNKNOWN_SESSION, follow, request, without_id
from tests.support import services
from tests.support.client import RealtimeClient
from tests.support.server import LiveServer
from tests.support.speech import silence, tone
from tests.support.webrtc_client import WebRTCClient

VAD = {"type": "server_vad", "silence_duration_ms": 200, "prefix_padding_ms": 0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[LiveServer, LiveServer, dict[str, str]]]:
    """(A, B, keys): A serves the supervisor, B holds the session; one SQLite file, one Redis."""
    tmp = tmp_path_factory.mktemp("supervision-cluster")
    env = {"REDIS_URL": services.redis_url(), "S2S_AUTH_REQUIRED": "1", "S2S_CALL_CONTROL_TIMEOUT_S": "1"}
    setup = LiveServer(tmp, env)
    setup.manage("migrate", "--noinput")
    keys = {name: setup.manage("create_api_key", name).stdout.strip() for name in ("alice", "bob")}
    keys["boss"] = setup.manage("create_api_key", "boss", "--supervisor").stdout.strip()
    servers: list[LiveServer] = []
    try:
        for node in ("node-a", "node-b"):
            servers.append(LiveServer(tmp, {**env, "S2S_NODE_NAME": node}).start(ready_timeout=180))
        yield servers[0], servers[1], keys
    finally:
        for server in servers:
            server.stop()


async def test_a_supervisor_on_another_node_listens_takes_over_and_hands_back(cluster):
    a, b, keys = cluster
    async with websockets.connect(b.ws, additional_headers={"Authorization": f"Bearer {keys['alice']}"}) as ws:
        caller = RealtimeClient.over_websocket(ws)
        session_id = (await caller.until("session.created"))["session"]["id"]
        await caller.update_session(type="realtime", audio={"input": {"turn_detection": VAD}})
        # Another key, on A, finds nothing; the supervisor key is seated on B from A.
        tried = await follow(a, session_id, keys["bob"], "supervise")
        never = await follow(a, UNKNOWN_SESSION, keys["bob"], "supervise")
        assert tried["close"] == 1008 and without_id(tried, session_id) == without_id(never, UNKNOWN_SESSION)
        url = f"{a.ws}?call_id={session_id}&mode=supervise"
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {keys['boss']}"}) as boss:
            got: list[dict] = []

            async def until(kind: str, timeout: float = 15.0, **fields: str) -> dict:
                while True:
                    event = json.loads(await asyncio.wait_for(boss.recv(), timeout))
                    got.append(event)
                    if event["type"] == kind and all(event.get(k) == v for k, v in fields.items()):
                        return event

            assert (await until("session.created"))["session"]["id"] == session_id
            await until("supervisor.state", state="listening")
            spoken = np.concatenate([tone(0.6), silence(0.5)])
            await caller.append(spoken)
            await until("response.done")
            heard = [base64.b64decode(e["delta"]) for e in got if e["type"] == "supervisor.input_audio.delta"]
            assert audio.encode(spoken, audio.PCM).startswith(b"".join(heard)) and len(heard) > 20
            assert any(e["type"] == "response.output_audio.delta" for e in got)  # the agent, heard from A
            await boss.send(json.dumps({"type": "supervisor.whisper", "text": "Be brief."}))
            await until("supervisor.whisper.added")
            await boss.send(json.dumps({"type": "supervisor.take_over"}))
            await until("supervisor.state", state="taken_over")
            await caller.drain(quiet_s=0.5)
            mark = len(caller.received)
            voice = audio.encode(np.concatenate([tone(0.5, freq=330.0), silence(1.0)]), audio.PCM)
            for at in range(0, len(voice), 960):
                chunk = base64.b64encode(voice[at : at + 960]).decode()
                await boss.send(json.dumps({"type": "supervisor.audio.append", "audio": chunk}))
                await asyncio.sleep(0.01)
            done = await caller.until("response.done", timeout=15)
            assert done["response"]["status"] == "completed"
            said = b"".join(
                base64.b64decode(e["delta"])
                for e in caller.received[mark:]
                if e["type"] == "response.output_audio.delta"
            )
            assert len(said) >= 0.5 * 48000 and voice.startswith(said[:4800])
        # The supervisor left holding the call: B hands it back, and the agent answers the next turn.
        await asyncio.sleep(0.5)
        await caller.append(np.concatenate([tone(0.6), silence(0.5)]))
        answer = await caller.until("response.done", timeout=15)
        assert answer["response"]["output"][0]["content"][0]["transcript"].startswith("You said")


async def test_a_secret_finds_no_trace_of_a_call_on_another_node_and_a_revocation_closes_what_its_key_reaches(cluster):
    """Issue 49 across nodes (last in the module: it revokes keys). Another browser's secret of Alice's key, on A,
    against her call on B: the 404 of an unknown id, in as long (before: B's refusal came back at once, an unknown id
    after S2S_CALL_CONTROL_TIMEOUT_S). Then the supervisor key, supervising from A a session B holds, is revoked in
    another process: A's socket closes, the session goes on; Alice's key revoked: her call on B ends."""
    a, b, keys = cluster
    call = WebRTCClient(b.http)
    try:
        assert (await call.connect(token=keys["alice"])).status == 201
        call_id = call.location.rsplit("/", 1)[1]
        await call.events.until("session.created")
        secret = await asyncio.to_thread(a.mint_client_secret, keys["alice"])
        for name in ("call", "call_hangup", "call_refer"):
            started = time.monotonic()
            refused = await asyncio.to_thread(request, a, name, call_id, secret)
            took = time.monotonic() - started
            assert refused == await asyncio.to_thread(request, a, name, UNKNOWN_CALL, secret) and refused[0] == 404
            assert took >= 0.9, (name, took)
        bearer = {"Authorization": f"Bearer {keys['alice']}"}
        async with websockets.connect(b.ws, additional_headers=bearer) as ws:
            caller = RealtimeClient.over_websocket(ws)
            session_id = (await caller.until("session.created"))["session"]["id"]
            url = f"{a.ws}?call_id={session_id}&mode=supervise"
            async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {keys['boss']}"}) as boss:
                assert json.loads(await asyncio.wait_for(boss.recv(), 10))["type"] == "session.created"
                await asyncio.to_thread(revoke, a, "boss")
                last: dict = {}
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    for _ in range(1000):
                        last = json.loads(await asyncio.wait_for(boss.recv(), 15))
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
                # Told why before the close, as a supervisor on the session's own node is (it came after it).
                assert last["type"] == "error" and last["error"]["code"] == "invalid_api_key", last
            await caller.update_session(instructions="still here")  # the session went on
            await asyncio.to_thread(revoke, a, "alice")
            assert (await caller.error(timeout=15))["code"] == "invalid_api_key"
        assert (await call.events.until("error", timeout=15))["error"]["code"] == "invalid_api_key"
    finally:
        await call.close()


def revoke(server: LiveServer, name: str) -> None:
    """Revokes the key ``name`` in a process of its own (as the admin or a script does)."""
    server.manage(
        "shell",
        "-c",
        "from django.utils import timezone\nfrom realtime.models import ApiKey\n"
        f"key = ApiKey.objects.get(name='{name}')\nkey.revoked_at = timezone.now()\nkey.save()\n",
    )
