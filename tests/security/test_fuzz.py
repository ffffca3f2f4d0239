"""Property-based fuzzing of the event parser, the conversation and the consumer (hypothesis).

About 8,000 frames go to the parser and the conversation directly and 2,500 to
the consumer over the ASGI app: no exception escapes, every frame the parser
rejects is answered with an ``error``, and the session stays usable.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from pipelines.ids import new_id
from realtime.consumers import RealtimeConsumer
from realtime.conversation import Conversation, Port
from realtime.events import EventError, parse
from realtime.session import SessionConfig
from tests.security.conftest import connect, next_event
from tests.security.fuzz_events import frames

VOICES = ("alloy", "ash", "marin")


class Session:
    """The consumer's dispatch without a socket: parse, then session.update or a conversation handler."""

    def __init__(self) -> None:
        self.submitted: list[object] = []
        self.config = SessionConfig(new_id("sess"), "gpt-realtime", VOICES)
        self.conversation = Conversation(self.config, Port(1, self.submitted.append, lambda _: None), 64 * 1024)

    def handle(self, frame: str) -> list[dict]:
        event = parse(frame)
        kind = event["type"]
        if kind in ("session.update", "transcription_session.update"):
            if "session" not in event:
                raise EventError("missing_required_parameter", "Missing 'session'.", "session")
            self.config.update(event["session"], beta=False)
            self.config.settings()
            return [{"type": "session.updated", "session": self.config.as_ga()}]
        if kind == "output_audio_buffer.clear":
            raise EventError("invalid_value", "WebRTC only", "type")
        return getattr(self.conversation, RealtimeConsumer.HANDLERS[kind])(event)


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
@hsettings(max_examples=50, deadline=None,
           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(batch=st.lists(frames().filter(bool), min_size=50, max_size=50))
async def test_the_consumer_survives_random_and_mutated_events_and_answers_invalid_ones(loopback_pool, settings,
                                                                                        batch):
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
        await comm.send_to(text_data=json.dumps({"type": "conversation.item.retrieve", "item_id": "no_such_item",
                                                 "event_id": probe}))
        errors = 0
        for _ in range(1000):
            event = await next_event(comm, timeout=10)
            if event["type"] == "error" and event["error"].get("event_id") == probe:
                break
            assert not (event["type"] == "error" and "could not handle" in event["error"]["message"]), (
                f"the consumer failed on {frame!r}")
            errors += event["type"] == "error"
        else:
            raise AssertionError("the probe was never answered")
        assert errors or not invalid, f"no error for the invalid frame {frame!r}"
    await comm.send_to(text_data=json.dumps({"type": "input_audio_buffer.clear"}))
    for _ in range(1000):
        if (await next_event(comm))["type"] == "input_audio_buffer.cleared":
            break
    await comm.disconnect()
