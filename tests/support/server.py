"""A real server process (``manage.py serve``) for tests that need real sockets."""

from __future__ import annotations

import json
import os
import resource
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(process: subprocess.Popen, grace_s: float = 10) -> None:
    """Asks ``process`` to end (SIGTERM), and kills it if it has not within ``grace_s``."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


class LiveServer:
    """Starts ``manage.py serve`` (or uvicorn, ``launcher="uvicorn"``) on 127.0.0.1 with its own SQLite file
    and environment."""

    def __init__(
        self,
        tmp_dir: Path,
        env: dict[str, str] | None = None,
        port: int | None = None,
        launcher: str = "daphne",
        open_files: tuple[int, int] | None = None,
        root: Path = ROOT,
        ca_file: Path | None = None,
    ) -> None:
        """``open_files``: the (soft, hard) limit on open files the server process starts with; ``root``: the
        checkout whose ``manage.py`` runs (a benchmark's other version of the code); ``ca_file``: with
        ``S2S_TLS_CERT`` in ``env`` (https and wss), what this helper's own requests trust."""
        self.root = root
        self.launcher = launcher
        self.open_files = open_files
        self.port = port or free_port()
        self.tmp_dir = tmp_dir
        self.env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{tmp_dir / 'server.sqlite3'}",
            "S2S_PIPELINE": "loopback",
            "S2S_POOL_SIZE": "2",
            "S2S_AUTH_REQUIRED": "0",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.tls = bool(self.env.get("S2S_TLS_CERT"))
        self.ssl_context = ssl.create_default_context(cafile=ca_file) if self.tls else None
        self.log_path = tmp_dir / f"server-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}/v1/realtime"

    def manage(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )

    def start(self, ready_timeout: float = 600) -> LiveServer:
        if self.env["DATABASE_URL"].startswith("sqlite"):
            self.manage("migrate", "--noinput")
        command = {
            "daphne": [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            "uvicorn": [
                sys.executable,
                "-m",
                "uvicorn",
                "s2s_project.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                # the documented TLS launch: uvicorn takes the pair on its command line
                *(
                    ["--ssl-certfile", self.env["S2S_TLS_CERT"], "--ssl-keyfile", self.env["S2S_TLS_KEY"]]
                    if self.tls
                    else []
                ),
            ],
        }[self.launcher]
        limits = self.open_files
        with open(self.log_path, "wb") as log:  # the server writes to its own copy of the file
            self.process = subprocess.Popen(
                command,
                cwd=self.root,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=None if limits is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits),
            )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.http}/readyz", timeout=2, context=self.ssl_context) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server not ready in {ready_timeout}s:\n{self.log()}")

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"{self.http}{path}", timeout=10, context=self.ssl_context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_free(self, units: int, timeout_s: float = 10) -> None:
        """Waits (up to ``timeout_s``) until ``/readyz`` says ``units`` units are free: the last session's drained."""
        deadline = time.monotonic() + timeout_s
        while json.loads(self.get("/readyz")[1]).get("free_units") != units and time.monotonic() < deadline:
            time.sleep(0.05)

    def mint_client_secret(self, key: str) -> str:
        """An ``ek_`` client secret for a realtime session, minted with the API key ``key``."""
        request = urllib.request.Request(
            f"{self.http}/v1/realtime/client_secrets",
            method="POST",
            data=json.dumps({"session": {"type": "realtime"}}).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10, context=self.ssl_context) as response:
            return json.loads(response.read())["value"]

    def log(self) -> str:
        """The end of the server's log (5,000 characters)."""
        return self.full_log()[-5000:]

    def full_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.process is None:
            return
        stop_process(self.process, grace_s=20)
        self.process = None
