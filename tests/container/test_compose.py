"""compose.yaml end to end with the real image: up, ready, a spoken turn through the official openai SDK, a
session ended by `compose stop` (1001 after the grace period, audit ``server_closed``), up again with the data kept.

Runs the stack with podman-compose as these machines allow (scripts/podman_here.sh: runc, host networking), on
ports of its own beside the host's PostgreSQL and Redis, as the compose project ``s2sctest`` (its volumes are
removed before and after). The images come first: `make test-container` builds them (scripts/container_build.sh).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.speech import pcm16_chunks, silence, spoken

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "s2sctest"
VOLUMES = [f"{PROJECT}_{name}" for name in ("db", "redis", "data")]
IMAGE = os.environ.get("S2S_IMAGE", "localhost/s2s:cpu")
POSTGRES_IMAGE = os.environ.get("S2S_POSTGRES_IMAGE", "localhost/s2s-test-postgres:latest")
REDIS_IMAGE = os.environ.get("S2S_REDIS_IMAGE", "localhost/s2s-test-redis:latest")
GRACE_S = 2
# Debian's podman-compose 1.0.3 adds the project's network beside network_mode: host (podman refuses both);
# make test-container installs 1.0.6 from PyPI and names it here.
PODMAN_COMPOSE = os.environ.get("S2S_PODMAN_COMPOSE", "podman-compose")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Stack:
    """The compose project, driven through podman-compose; ``.env`` comes from a file of the test's own."""

    def __init__(self, tmp: Path) -> None:
        self.port, pg, redis = free_port(), free_port(), free_port()
        password = secrets.token_hex(12)
        env_file = tmp / "container.env"
        env_file.write_text(
            "\n".join(
                [
                    f"DJANGO_SECRET_KEY={secrets.token_urlsafe(50)}",
                    "DJANGO_ALLOWED_HOSTS=127.0.0.1,localhost",
                    "POSTGRES_USER=s2s",
                    "POSTGRES_DB=s2s",
                    f"POSTGRES_PASSWORD={password}",
                    f"DATABASE_URL=postgres://s2s:{password}@127.0.0.1:{pg}/s2s",
                    f"REDIS_URL=redis://127.0.0.1:{redis}/0",
                    f"CELERY_BROKER_URL=redis://127.0.0.1:{redis}/1",
                    f"S2S_PORT={self.port}",
                    "S2S_NODE_NAME=container-test",
                    "S2S_POOL_SIZE=1",
                    f"S2S_SHUTDOWN_GRACE_S={GRACE_S}",
                    "S2S_RECORD_AUDIO=1",
                ]
            )
            + "\n"
        )
        self.env = {
            **os.environ,
            "S2S_ENV_FILE": str(env_file),
            "S2S_IMAGE": IMAGE,
            "S2S_POSTGRES_IMAGE": POSTGRES_IMAGE,
            "S2S_REDIS_IMAGE": REDIS_IMAGE,
            "S2S_POSTGRES_PORT": str(pg),
            "S2S_REDIS_PORT": str(redis),
            # runc may only lower rlimits here (scripts/podman_here.sh)
            "S2S_NOFILE": str(min(65536, int(subprocess.check_output(["sh", "-c", "ulimit -Hn"]).strip()))),
            "S2S_NPROC": "32768",
        }

    def compose(self, *args: str, timeout: float = 300) -> str:
        command = ["scripts/podman_here.sh", PODMAN_COMPOSE, "-p", PROJECT, "-f", "compose.yaml", *args]
        done = subprocess.run(command, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    def podman(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["scripts/podman_here.sh", "podman", *args], cwd=ROOT, env=self.env, capture_output=True, text=True
        )
        assert not check or done.returncode == 0, f"podman {args}: {done.stdout}\n{done.stderr}"
        return done

    def container(self, service: str) -> str:
        return f"{PROJECT}_{service}_1"

    def sql(self, query: str) -> str:
        port = self.env["S2S_POSTGRES_PORT"]
        args = ("exec", self.container("db"), "psql", "-h", "/var/run/postgresql", "-p", port, "-U", "s2s")
        return self.podman(*args, "-d", "s2s", "-tAc", query).stdout.strip()

    def readyz(self) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
        except OSError as exc:
            return 0, {"error": str(exc)}

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while (found := self.readyz())[0] != 200:
            if time.monotonic() > deadline:
                logs = self.podman("logs", "--tail", "60", self.container("server"), check=False)
                raise AssertionError(f"/readyz {found} after {timeout}s\n{logs.stdout}\n{logs.stderr}")
            time.sleep(2)

    def remove(self) -> None:
        subprocess.run(
            ["scripts/podman_here.sh", PODMAN_COMPOSE, "-p", PROJECT, "-f", "compose.yaml", "down", "-t", "30"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            timeout=300,
        )
        self.podman("volume", "rm", "-f", *VOLUMES, check=False)


@pytest.fixture
def stack(tmp_path):
    stack = Stack(tmp_path)
    stack.remove()
    try:
        yield stack
    finally:
        stack.remove()


async def spoken_turn_then_stop(stack: Stack, key: str) -> dict:
    """Speaks a question through the SDK, checks the spoken answer, then stops the stack with the session open."""
    from openai import AsyncOpenAI
    from websockets.exceptions import ConnectionClosed

    client = AsyncOpenAI(api_key=key, base_url=f"http://127.0.0.1:{stack.port}/v1")
    seen: list[dict] = []
    async with client.realtime.connect(model="gpt-realtime") as connection:

        async def until(kind: str, timeout: float) -> dict:
            async with asyncio.timeout(timeout):
                while True:
                    event = json.loads(await connection.recv_bytes())
                    seen.append(event)
                    if event["type"] == kind:
                        return event

        created = await until("session.created", 30)
        await connection.session.update(
            session={"type": "realtime", "output_modalities": ["audio"], "instructions": "Answer in one sentence."}
        )
        chunks = pcm16_chunks(silence(0.6)) + pcm16_chunks(spoken("What is the capital of France?"))
        for chunk in chunks + pcm16_chunks(silence(1.5)):
            await connection.input_audio_buffer.append(audio=chunk)
            await asyncio.sleep(0.02)
        done = await until("response.done", 120)
        stopping = asyncio.create_task(asyncio.to_thread(stack.compose, "stop", "-t", "60", timeout=180))
        try:
            goodbye = await until("error", 30)
            with pytest.raises(ConnectionClosed) as closed:
                await until("never", 30)
        finally:
            await stopping
    return {"created": created, "done": done, "seen": seen, "goodbye": goodbye, "closed": closed.value}


def test_the_stack_comes_up_answers_a_spoken_turn_drains_on_stop_and_keeps_its_data(stack):
    stack.compose("up", "-d")
    stack.wait_ready()
    assert stack.podman("healthcheck", "run", stack.container("server")).returncode == 0
    user = stack.podman("exec", stack.container("server"), "id", "-un").stdout.strip()
    assert user == "s2s"
    key = stack.podman("exec", stack.container("server"), "python", "manage.py", "create_api_key", "ct").stdout.strip()

    result = asyncio.run(spoken_turn_then_stop(stack, key))
    kinds = [event["type"] for event in result["seen"]]
    transcript = next(e for e in result["seen"] if e["type"].endswith("input_audio_transcription.completed"))
    assert {"capital", "france"} <= set(transcript["transcript"].lower().replace("?", " ").split()), transcript
    response = result["done"]["response"]
    assert response["status"] in ("completed", "incomplete"), response
    assert "response.output_audio.delta" in kinds
    assert response["output"][0]["content"][0]["transcript"].strip()
    assert result["goodbye"]["error"]["code"] == "server_shutting_down"
    assert result["closed"].rcvd is not None and result["closed"].rcvd.code == 1001
    assert stack.readyz()[0] == 0  # the server is down

    session_id = result["created"]["session"]["id"]
    stack.compose("up", "-d")
    stack.wait_ready()
    row = stack.sql(f"select end_reason, close_code from realtime_realtimesession where id = '{session_id}'")
    assert row == "server_closed|1001", row
    texts = stack.sql(f"select count(*) from realtime_conversationitem where session_id = '{session_id}'")
    assert int(texts) >= 2, texts
    recordings = stack.podman("exec", stack.container("server"), "find", "/data/media", "-type", "f").stdout
    assert recordings.strip(), "the recordings volume is empty after the restart"
