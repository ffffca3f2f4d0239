"""``manage.py call sip:+15551234567@trunk.example --instructions "..."``: try a number by hand, through the API.

The command is a client of the running server, not a second server: it posts ``POST /v1/realtime/calls`` with the
API key of ``--api-key`` (or ``S2S_API_KEY``), so the call gets a unit of that server's pool and every rule an API
call meets (the allow-list, the injection checks, the key's caps). It follows the call on the sideband
(``/v1/realtime?call_id=``) and asks the agent to speak first (``response.create``; ``--no-greeting``: the callee
speaks first), prints each status change of ``GET /v1/realtime/calls/{id}`` until the call ends, and hangs up
(``DELETE``) on Ctrl-C or after ``--max-seconds``.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

POLL_S = 0.5
ENDED = frozenset({"busy", "no_answer", "rejected", "failed", "ended"})
HANG_UP_GRACE_S = 15.0  # after our DELETE, how long the call may take to say it ended


class Api:
    """The server's call URLs, with the key as the bearer."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base.rstrip("/"), key

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.key}", "User-Agent": "s2s-realtime manage.py call"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except urllib.error.URLError as exc:
            raise CommandError(f"The server at {self.base} cannot be reached: {exc.reason}") from None
        try:
            return status, json.loads(raw) if raw else {}
        except ValueError:
            return status, {}


def refusal(status: int, body: dict[str, Any]) -> str:
    error = body.get("error") or {}
    param = f" ({error['param']})" if error.get("param") else ""
    return f"{status} {error.get('code') or ''}{param}: {error.get('message') or 'refused'}"


def greet(base: str, key: str, call_id: str, stop: threading.Event) -> None:
    """Follows the call on the sideband and sends ``response.create``: the agent speaks once the callee answers."""
    from websockets.sync.client import connect

    url = base.replace("http", "ws", 1).rstrip("/") + f"/v1/realtime?call_id={call_id}"
    try:
        with connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=10) as socket:
            socket.send(json.dumps({"type": "response.create"}))
            while not stop.is_set():
                try:
                    socket.recv(timeout=POLL_S)
                except TimeoutError:
                    continue
    except Exception:  # the call ended (the server closes its followers), or the sideband was refused
        return


class Command(BaseCommand):
    help = "Place a phone call through the running server's API (POST /v1/realtime/calls) and follow it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("to", help="The target, a sip:user@host[:port] URI that S2S_SIP_OUTBOUND_ALLOW allows.")
        parser.add_argument("--instructions", default="", help="The agent's instructions for this call.")
        parser.add_argument("--from", dest="from_uri", default="", help="The From URI (default: the server's).")
        parser.add_argument(
            "--header", action="append", default=[], metavar="X-NAME=VALUE", help="An X- header of the INVITE."
        )
        parser.add_argument("--server", default="http://127.0.0.1:8000", help="The running server's base URL.")
        parser.add_argument("--api-key", default="", help="The API key (default: the S2S_API_KEY variable).")
        parser.add_argument("--no-greeting", action="store_true", help="Let the callee speak first.")
        parser.add_argument("--max-seconds", type=float, default=600.0, help="Hang up after this long.")

    def handle(self, *args: object, **options: Any) -> None:
        key = options["api_key"] or os.environ.get("S2S_API_KEY", "")
        if not key:
            raise CommandError("An API key is needed: --api-key or the S2S_API_KEY variable.")
        api = Api(options["server"], key)
        status, placed = api.request("POST", "/v1/realtime/calls", self.body(options))
        if status != 201:
            raise CommandError(f"The call was refused: {refusal(status, placed)}")
        call_id = placed["id"]
        self.stdout.write(f"call {call_id} (session {placed.get('session_id', '')})")
        self.stdout.write(self.line(placed))
        stop = threading.Event()
        if not options["no_greeting"]:
            threading.Thread(target=greet, args=(api.base, key, call_id, stop), daemon=True).start()
        try:
            final = self.follow(api, call_id, time.monotonic() + options["max_seconds"], placed.get("status", ""))
            if final is None:
                final = self.hang_up(api, call_id)
        except KeyboardInterrupt:
            final = self.hang_up(api, call_id)
        finally:
            stop.set()
        if final is None:
            raise CommandError(f"The call {call_id} did not say it ended.")

    def body(self, options: dict[str, Any]) -> dict[str, Any]:
        sip: dict[str, Any] = {"to": options["to"]}
        if options["from_uri"]:
            sip["from"] = options["from_uri"]
        headers = {}
        for header in options["header"]:
            name, sep, value = header.partition("=")
            if not sep:
                raise CommandError(f"--header {header!r}: X-Name=value")
            headers[name] = value
        if headers:
            sip["headers"] = headers
        session: dict[str, Any] = {"type": "realtime"}
        if options["instructions"]:
            session["instructions"] = options["instructions"]
        return {"sip": sip, "session": session}

    def follow(self, api: Api, call_id: str, deadline: float, last: str = "") -> dict[str, Any] | None:
        """Prints each status change (after ``last``) until the call ends (its record), or ``deadline`` (None)."""
        while True:
            status, record = api.request("GET", f"/v1/realtime/calls/{call_id}")
            if status != 200:
                raise CommandError(f"The call's record: {refusal(status, record)}")
            if record.get("status") != last:
                last = record.get("status", "")
                self.stdout.write(self.line(record))
            if last in ENDED:
                return record
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)

    def hang_up(self, api: Api, call_id: str) -> dict[str, Any] | None:
        self.stdout.write(f"hanging up {call_id}")
        api.request("DELETE", f"/v1/realtime/calls/{call_id}")
        return self.follow(api, call_id, time.monotonic() + HANG_UP_GRACE_S)

    @staticmethod
    def line(record: dict[str, Any]) -> str:
        parts = [time.strftime("%H:%M:%S"), record.get("status", "?")]
        if record.get("sip_code") is not None:
            parts.append(f"sip {record['sip_code']}")
        if record.get("end_reason"):
            parts.append(f"({record['end_reason']})")
        return " ".join(parts)
