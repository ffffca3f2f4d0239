"""A supervisor's client (issue 51): the session's events, checked against the openai SDK's types as every
client's are, and the ``supervisor.*`` events only supervisors get, checked here against the documented shapes
(docs/clients.md, "Supervising a live session")."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from tests.support import conformance
from tests.support.client import DEFAULT_TIMEOUT, Event, RealtimeClient

SHAPES: dict[str, dict[str, type]] = {
    "supervisor.state": {"state": str, "by": str},
    "supervisor.input_audio.delta": {"delta": str},
    "supervisor.whisper.added": {"item_id": str, "text": str},
}


def check_supervisor_event(event: Event) -> Event:
    """A ``supervisor.*`` event has exactly its documented fields, of their types."""
    shape = SHAPES.get(event.get("type", ""))
    assert shape is not None, f"an undocumented supervisor event: {json.dumps(event)[:300]}"
    assert set(event) == {"type", "event_id", *shape}, event
    assert isinstance(event["event_id"], str) and event["event_id"], event
    for name, kind in shape.items():
        assert isinstance(event[name], kind), (name, event)
    if event["type"] == "supervisor.state":
        assert event["state"] in ("listening", "taken_over"), event
    if event["type"] == "supervisor.input_audio.delta":
        try:
            assert len(base64.b64decode(event["delta"], validate=True)) % 2 == 0, "PCM16 has whole samples"
        except binascii.Error as exc:
            raise AssertionError(f"not base64: {event['delta'][:50]}") from exc
    return event


class SupervisorClient(RealtimeClient):
    """:class:`RealtimeClient` on a supervise connection (``?call_id=ID&mode=supervise``)."""

    async def recv(self, timeout: float = DEFAULT_TIMEOUT) -> Event | None:
        text = await self._recv(timeout)
        if text is None:
            return None
        event: dict[str, Any] = json.loads(text)
        if str(event.get("type", "")).startswith("supervisor."):
            check_supervisor_event(event)
        else:
            conformance.check(event)
        self.received.append(event)
        return event
