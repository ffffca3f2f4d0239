"""Two server processes sharing PostgreSQL and Redis, a Celery worker with beat: the cluster as operators see it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from websockets.exceptions import ConnectionClosed

from tests.audit.clients import wait_for, ws_connect, ws_receive_until, ws_text_turn
from tests.support.server import ROOT, LiveServer

pytestmark = pytest.mark.services

ADMIN_PASSWORD = "audit-cluster-pw"


@dataclass
class Cluster:
    a: LiveServer
    b: LiveServer
    env: dict[str, str]
    database_url: str
    tmp: Path
    worker_log: Path

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url.replace("postgres://", "postgresql://", 1)) as conn:
            return conn.execute(sql, params).fetchall()

    def session(self, session_id: str) -> dict[str, Any] | None:
        rows = self.query(
            "SELECT end_reason, close_code, node, summary FROM realtime_realtimesession WHERE id = %s", session_id
        )
        return dict(zip(("end_reason", "close_code", "node", "summary"), rows[0])) if rows else None

    def pool_status(self) -> list[dict[str, Any]]:
        return json.loads(self.a.manage("pool_status", "--json", timeout=60).stdout)

    def admin(self, server: LiveServer) -> requests.Session:
        """A logged-in admin browser session on ``server``."""
        http = requests.Session()
        http.get(f"{server.http}/admin/login/", timeout=10).raise_for_status()
        response = http.post(
            f"{server.http}/admin/login/?next=/admin/",
            timeout=10,
            data={
                "username": "admin",
                "password": ADMIN_PASSWORD,
                "next": "/admin/",
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
            },
        )
        assert response.url.endswith("/admin/"), response.text[:500]
        return http


@pytest.fixture(scope="module")
def cluster(private_database: str, module_redis_url: str, tmp_path_factory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    queue = f"s2s-audit-{uuid.uuid4().hex[:8]}"  # its own queue: other runs on the same Redis do not take its tasks
    env = {
        "DATABASE_URL": private_database,
        "REDIS_URL": module_redis_url,
        "CELERY_BROKER_URL": module_redis_url,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "S2S_HEARTBEAT_S": "0.5",
        "S2S_NODE_TIMEOUT_S": "3",
        "DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD,
        "DJANGO_SUPERUSER_USERNAME": "admin",
        "DJANGO_SUPERUSER_EMAIL": "admin@example.com",
    }
    setup = LiveServer(tmp, env)
    setup.manage("migrate", "--noinput")
    setup.manage("createsuperuser", "--noinput")
    worker_log = tmp / "worker.log"
    with open(worker_log, "wb") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "s2s_project",
                "worker",
                "-B",
                "-s",
                str(tmp / "beat-schedule"),
                "-Q",
                queue,
                "--pool",
                "solo",
                "--loglevel",
                "info",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=ROOT,
            env={**setup.env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    servers: list[LiveServer] = []
    try:
        for name in ("audit-a", "audit-b"):
            servers.append(LiveServer(tmp, {**env, "S2S_NODE_NAME": name}).start(ready_timeout=120))
        yield Cluster(servers[0], servers[1], env, private_database, tmp, worker_log)
    finally:
        for server in servers:
            server.stop()
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)


def ready(server: LiveServer) -> tuple[int, dict[str, Any]]:
    status, body = server.get("/readyz")
    return status, json.loads(body)


def test_pool_status_and_the_slot_board_show_both_nodes_units(cluster: Cluster):
    with ws_connect(cluster.a.ws) as ws:
        session_id = ws_receive_until(ws, "session.created")["session"]["id"]

        def busy_on_a() -> list[dict[str, Any]] | None:
            """Both nodes alive and ready by their latest heartbeats, the session busy on A."""
            nodes = {n["name"]: n for n in cluster.pool_status()}
            a, b = nodes.get("audit-a"), nodes.get("audit-b")
            if not (a and b and all(n["alive"] and n["status"] == "ready" and len(n["slots"]) == 2 for n in (a, b))):
                return None
            return nodes if any(s["session_id"] == session_id and s["state"] == "busy" for s in a["slots"]) else None

        nodes = wait_for(busy_on_a, timeout=20, interval=0.5, what="both nodes ready and a busy slot in pool_status")
        assert [s["state"] for s in nodes["audit-b"]["slots"]] == ["idle", "idle"]
        table = cluster.a.manage("pool_status", timeout=60).stdout
        assert "audit-a" in table and "audit-b" in table and session_id in table

        http = cluster.admin(cluster.b)  # the board, served by the other node
        board = {
            n["name"]: n
            for n in http.get(f"{cluster.b.http}/admin/realtime/node/board.json", timeout=10).json()["nodes"]
        }
        assert any(s["session_id"] == session_id and s["state"] == "busy" for s in board["audit-a"]["slots"])
        assert board["audit-b"]["free_units"] == 2
        page = http.get(f"{cluster.b.http}/admin/realtime/node/", timeout=10).text
        assert "Slot board" in page and session_id in page


def test_an_admin_request_on_one_node_ends_a_session_held_by_the_other(cluster: Cluster):
    http = cluster.admin(cluster.b)
    with ws_connect(cluster.a.ws) as ws:
        session_id = ws_receive_until(ws, "session.created")["session"]["id"]
        wait_for(lambda: cluster.session(session_id), timeout=10, what="session record")
        assert ready(cluster.a)[1]["free_units"] == 1
        response = http.post(
            f"{cluster.b.http}/admin/realtime/node/end/{session_id}/",
            timeout=10,
            headers={"X-CSRFToken": http.cookies["csrftoken"]},
        )
        assert response.json() == {"status": "ending", "session_id": session_id}
        error = ws_receive_until(ws, "error", timeout=10)
        assert error["error"]["code"] == "session_ended_by_admin"
        with pytest.raises(ConnectionClosed) as closed:
            ws_receive_until(ws, "never", timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    wait_for(lambda: ready(cluster.a)[1]["free_units"] == 2, timeout=10, what="unit freed on node A")
    record = wait_for(lambda: (r := cluster.session(session_id)) and r["end_reason"] != "active" and r, timeout=10)
    assert record["end_reason"] == "admin_ended" and record["close_code"] == 1008 and record["node"] == "audit-a"


def test_readyz_turns_503_when_the_last_unit_is_claimed_and_200_when_one_is_released(cluster: Cluster):
    assert ready(cluster.a)[0] == 200
    first = ws_connect(cluster.a.ws)
    second = ws_connect(cluster.a.ws)
    try:
        for ws in (first, second):
            ws_receive_until(ws, "session.created")
        status, body = ready(cluster.a)
        assert status == 503 and body["status"] == "full" and body["free_units"] == 0
        assert ready(cluster.b)[0] == 200  # a balancer sends the next session to the other node
        first.close()
        status, body = wait_for(lambda: (r := ready(cluster.a))[0] == 200 and r, timeout=10, what="ready again")
        assert body["free_units"] == 1
    finally:
        first.close()
        second.close()


def test_a_celery_worker_writes_the_post_session_summary_onto_the_record(cluster: Cluster):
    with ws_connect(cluster.b.ws) as ws:
        session_id = ws_receive_until(ws, "session.created")["session"]["id"]
        assert ws_text_turn(ws, "summarize this please")["response"]["status"] == "completed"
    record = wait_for(
        lambda: (r := cluster.session(session_id)) and r["summary"] and r,
        timeout=60,
        interval=0.5,
        what="summary written by the worker",
    )
    assert record["summary"]["words"] == {"user": 3, "assistant": 5}
    assert record["summary"]["latency_s"]["lm_first_token"]["count"] == 1
    log = cluster.worker_log.read_text(errors="replace")
    assert "realtime.tasks.summarize_session[" in log and "succeeded" in log


def test_a_node_whose_heartbeat_stopped_is_shown_gone_and_its_sessions_interrupted(cluster: Cluster):
    doomed = LiveServer(cluster.tmp, {**cluster.env, "S2S_NODE_NAME": "audit-c", "S2S_POOL_SIZE": "1"}).start(
        ready_timeout=120
    )
    try:
        ws = ws_connect(doomed.ws)
        session_id = ws_receive_until(ws, "session.created")["session"]["id"]
        wait_for(lambda: cluster.session(session_id), timeout=10, what="session record")
        # The crash comes after the node has published its busy slot (a node killed before its first beat
        # with a pool has no slots to show).
        wait_for(
            lambda: any(
                slot["state"] == "busy"
                for (slots,) in cluster.query("SELECT slots FROM realtime_node WHERE name = %s", "audit-c")
                for slot in slots
            ),
            timeout=10,
            interval=0.2,
            what="the busy slot published",
        )
        assert doomed.process is not None
        os.kill(doomed.process.pid, signal.SIGKILL)  # a crash: no clean shutdown, no record of the end
        doomed.process.wait(timeout=10)
        doomed.process = None
        record = wait_for(
            lambda: (r := cluster.session(session_id)) and r["end_reason"] != "active" and r,
            timeout=30,
            interval=0.5,
            what="session interrupted by the beat task",
        )
        assert record["end_reason"] == "interrupted"
        node = next(n for n in cluster.pool_status() if n["name"] == "audit-c")
        assert node["status"] == "gone" and [s["state"] for s in node["slots"]] == ["gone"]
        ws.close()
    finally:
        doomed.stop()
