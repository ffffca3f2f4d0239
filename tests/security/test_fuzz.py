"""Property-based fuzzing of the event parser, the session core and the consumer (hypothesis).

About 8,000 frames go to the parser and the session core directly (no transport) and 2,500 to
the consumer over the ASGI app: no exception escapes, every frame the parser
rejects is answered with an ``error``, and the session stays usable.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from pipelines.ids import new_id
from realtime.live.core import SessionCore
from realtime.live.opening import Opening
from realtime.node import runtime
from realtime.protocol.client_events import parse, parse_event
from realtime.protocol.conversation import Port
from realtime.protocol.wire import EventError
from tests.security.conftest import connect, next_event
from tests.security.fuzz_events import frames


class NoTransport:
    """A transport that carries nothing: these frames never leave the session core."""

    async def send_event(self, event: dict) -> None:
        raise AssertionError("handle() returns its answers; nothing is sent")

    async def close(self, code: int, reason: str) -> None:
        raise AssertionError("nothing closes")


class Session:
    """The session core without a socket or a unit: parse, then carry the event out."""

    def __init__(self) -> None:
        self.submitted: list[object] = []
        opening = Opening(session_id=new_id("sess"), model="gpt-realtime")
        self.core = SessionCore(
            runtime.current(), NoTransport(), opening, None, Port(1, self.submitted.append, lambda _id, _reason: None)
        )

    def handle(self, frame: str) -> list[dict]:
        replies = self.core.handle(parse_event(frame, 64 * 1024))
        self.core.session.settings()
        return replies


@hsettings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames(), min_size=20, max_size=20))
def test_the_parser_and_the_conversation_answer_every_frame_with_events_or_an_error(batch):
    session = Session()  # 400 examples x 20 frames = 8,000 frames, each on a session that has seen the others
    for frame in batch:
        try:
            replies = session.handle(frame)
        except EventError as exc:
            assert exc.code and exc.message and isinstance(exc.message, str)
            continue
        json.dumps(replies)  # whatever is answered can be sent
    assert session.handle(json.dumps({"type": "input_audio_buffer.clear"})) == []  # still usable


@pytest.mark.django_db(transaction=True)
@hsettings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(batch=st.lists(frames().filter(bool), min_size=50, max_size=50))
async def test_the_consumer_survives_random_and_mutated_events_and_answers_invalid_ones(loopback_pool, settings, batch):
    settings.S2S_MAX_EVENTS_PER_SECOND = 100_000  # the fuzzer is not a flood; limits have their own tests
    settings.S2S_EVENTS_BURST = 100_000
    for _ in range(200):  # the previous example's unit may still be on its way back
        if loopback_pool.free_units() == len(loopback_pool.units):
            break
        await asyncio.sleep(0.05)
    comm, _ = await connect()
    assert (await next_event(comm))["type"] == "session.created"
    for index, frame in enumerate(batch):  # 50 examples x 50 frames = 2,500 frames
        try:
            parse(frame)
            invalid = False
        except EventError:
            invalid = True
        await comm.send_to(text_data=frame)
        probe = f"probe_{index}"
        await comm.send_to(
            text_data=json.dumps({"type": "conversation.item.retrieve", "item_id": "no_such_item", "event_id": probe})
        )
        errors = 0
        for _ in range(1000):
            event = await next_event(comm, timeout=10)
            if event["type"] == "error" and event["error"].get("event_id") == probe:
                break
            assert not (event["type"] == "error" and "could not handle" in event["error"]["message"]), (
                f"the consumer failed on {frame!r}"
            )
            errors += event["type"] == "error"
        else:
            raise AssertionError("the probe was never answered")
        assert errors or not invalid, f"no error for the invalid frame {frame!r}"
    await comm.send_to(text_data=json.dumps({"type": "input_audio_buffer.clear"}))
    for _ in range(1000):
        if (await next_event(comm))["type"] == "input_audio_buffer.cleared":
            break
    await comm.disconnect()
