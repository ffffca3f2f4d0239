"""Helpers for tests against a real server process: a bounded, synchronous Realtime client."""

from __future__ import annotations

import json
import time
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support.conformance import decode

Event = dict[str, Any]


def open_session(url: str, headers: dict[str, str] | None = None) -> tuple[ClientConnection, Event]:
    ws = connect(
        url,
        open_timeout=10,
        close_timeout=5,
        additional_headers=headers or {},
        subprotocols=["realtime"],
        max_size=None,
    )
    created = decode(ws.recv(timeout=10))
    return ws, created


def open_session_once_free(url: str, within_s: float = 5.0) -> tuple[ClientConnection, Event]:
    """Like ``open_session``, trying again while the unit of a session just closed is still being released."""
    import time

    deadline = time.monotonic() + within_s
    while True:
        ws, created = open_session(url)
        if created["type"] == "session.created" or time.monotonic() > deadline:
            return ws, created
        assert created["error"]["code"] == "session_limit_reached", created
        ws.close()
        time.sleep(0.05)


def send(ws: ClientConnection, event_type: str, **fields: Any) -> None:
    ws.send(json.dumps({"type": event_type, **fields}))


def until(ws: ClientConnection, kind: str, timeout: float = 15) -> tuple[Event, list[Event]]:
    """Reads until an event of ``kind`` (bounded in time); returns it and what came before."""
    seen: list[Event] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = decode(ws.recv(timeout=max(0.05, deadline - time.monotonic())))
        if event["type"] == kind:
            return event, seen
        seen.append(event)
    raise AssertionError(f"no {kind} in {timeout}s; saw {[e['type'] for e in seen]}")


def ask(ws: ClientConnection, text: str) -> None:
    """A user text item and a text-only response to it (the fake LM answers "You said: <text>.")."""
    send(
        ws,
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    )
    send(ws, "response.create", response={"output_modalities": ["text"]})


def turn(ws: ClientConnection, text: str, timeout: float = 15) -> tuple[Event, list[Event]]:
    ask(ws, text)
    return until(ws, "response.done", timeout)


def close_code(ws: ClientConnection, timeout: float = 15) -> int | None:
    """Reads (and drops) events until the server closes; returns the close code."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            decode(ws.recv(timeout=max(0.05, deadline - time.monotonic())))
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd is not None else None
    raise AssertionError(f"the server did not close within {timeout}s")


def texts(events: list[Event]) -> str:
    """Every text and transcript the client was sent, joined (to look for another session's words)."""
    parts = []
    for event in events:
        for key in ("delta", "text", "transcript"):
            if isinstance(event.get(key), str):
                parts.append(event[key])
    return " ".join(parts)
