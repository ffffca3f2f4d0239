"""A real MCP server for the tests: the SDK's ``MCPServer`` over Streamable HTTP on a loopback port.

Run as a script (``python -m tests.support.mcp_server PORT``) in a subprocess; :func:`serve` starts
one and stops it. Its tools: ``get_weather(city)`` (read-only), ``set_alarm(time)``, ``explode()``
(raises), ``nap(seconds)`` (sleeps: past the session's MCP timeout), ``flood(size)`` (a large answer).
Besides ``/mcp`` it answers ``/moved`` with a redirect to a server outside any allowed prefix.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.server import stop_process

WEATHER = {"Paris": "sunny, 21 degrees", "Oslo": "snowing, minus 3 degrees"}


def build():  # noqa: ANN201 (the SDK's type, imported here only)
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("weather-test", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        return f"The weather in {city} is {WEATHER.get(city, 'cloudy, 15 degrees')}."

    @server.tool()
    def set_alarm(time: str) -> str:
        """Sets an alarm at a time of day."""
        return f"Alarm set for {time}."

    @server.tool()
    def explode() -> str:
        """Always fails."""
        raise RuntimeError("the tool exploded")

    @server.tool()
    async def nap(seconds: float) -> str:
        """Sleeps, then answers."""
        await asyncio.sleep(min(seconds, 30))
        return "rested"

    @server.tool()
    def flood(size: int) -> str:
        """Answers with ``size`` characters."""
        return "x" * min(size, 10_000_000)

    return server


def main(port: int) -> None:
    from starlette.responses import RedirectResponse

    server = build()

    @server.custom_route("/moved", methods=["GET", "POST"])
    async def moved(request):  # noqa: ANN001, ANN202
        return RedirectResponse("http://127.0.0.2:9/mcp", status_code=307)

    server.run(transport="streamable-http", host="127.0.0.1", port=port)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve(timeout_s: float = 30) -> Iterator[str]:
    """Starts the server in a subprocess; yields its base URL (``http://127.0.0.1:PORT``)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.mcp_server", str(port)])
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the MCP test server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


if __name__ == "__main__":
    main(int(sys.argv[1]))
