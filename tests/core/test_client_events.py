"""The client event registry: one typed class per event, one handler per class, and nothing else to touch."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any, Self

import pytest

from pipelines.ids import new_id
from realtime.live.core import SessionCore
from realtime.live.opening import Opening
from realtime.node import runtime
from realtime.protocol import client_events as ce
from realtime.protocol.client_items import ClientItem
from realtime.protocol.conversation import Port
from realtime.protocol.supervisor_events import SUPERVISOR_EVENTS
from realtime.protocol.wire import EventError, require

# The client events of the OpenAI Realtime API this server takes, in the order its error message lists them.
API_EVENTS = (
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.retrieve",
    "conversation.item.truncate",
    "conversation.item.delete",
    "response.create",
    "response.cancel",
    "output_audio_buffer.clear",
    "transcription_session.update",
)


class NoTransport:
    """Fake transport: ``handle`` returns its answers, nothing is sent."""

    async def send_event(self, event: dict) -> None:
        raise AssertionError("nothing is sent")

    async def close(self, code: int, reason: str) -> None:
        raise AssertionError("nothing closes")


def make_core(submit: Any = lambda _m: None) -> SessionCore:
    """A session core without a unit: what it hands the pipeline goes to ``submit``."""
    opening = Opening(session_id=new_id("sess"), model="gpt-realtime")
    return SessionCore(runtime.current(), NoTransport(), opening, None, Port(1, submit, lambda _i, _r: None))


def test_the_registry_holds_every_api_event_once_in_order():
    assert ce.CLIENT_EVENT_TYPES == API_EVENTS
    assert all(ce.REGISTRY[kind].type == kind for kind in API_EVENTS)


@pytest.mark.parametrize("kind", API_EVENTS)
def test_each_event_names_a_handler_of_the_core_that_takes_that_class(kind):
    cls = ce.REGISTRY[kind]
    handler = getattr(SessionCore, cls.handler, None)
    assert callable(handler), f"{kind}: SessionCore has no {cls.handler}"
    annotation = inspect.signature(handler).parameters["event"].annotation
    assert annotation == f"ce.{cls.__name__}", (kind, annotation)


def test_every_on_method_of_the_core_is_some_event_s_handler():
    named = {cls.handler for cls in (*ce.REGISTRY.values(), *SUPERVISOR_EVENTS.values())}
    handlers = {name for name, _ in inspect.getmembers(SessionCore, inspect.isfunction) if name.startswith("on_")}
    assert handlers == named
    assert set(SessionCore.SUPERVISOR_HANDLERS) == {cls.handler for cls in SUPERVISOR_EVENTS.values()}


def test_a_parsed_event_is_its_typed_class_with_its_fields():
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    event = ce.parse_event(json.dumps({"type": "conversation.item.create", "event_id": "e1", "item": item}), 1024)
    assert isinstance(event, ce.ItemCreate)
    assert event.event_id == "e1" and event.previous_item_id is None
    assert isinstance(event.item, ClientItem) and event.item.text == "hi"
    truncate = ce.parse_event(
        json.dumps({"type": "conversation.item.truncate", "item_id": "i", "content_index": 0, "audio_end_ms": 5}), 1
    )
    assert isinstance(truncate, ce.ItemTruncate) and (truncate.item_id, truncate.audio_end_ms) == ("i", 5)
    append = ce.parse_event(json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA"}), 1024)
    assert isinstance(append, ce.InputAudioAppend) and append.audio == b"\0\0\0"


def test_an_invalid_field_names_its_param_and_keeps_the_event_id():
    frame = {"type": "conversation.item.truncate", "event_id": "e7", "item_id": "i", "content_index": "0"}
    with pytest.raises(EventError) as caught:
        ce.parse_event(json.dumps(frame), 1024)
    assert (caught.value.param, caught.value.event_id) == ("content_index", "e7")
    with pytest.raises(EventError) as caught:
        ce.parse_event(json.dumps({"type": "conversation.item.create", "item": {"type": "message"}}), 1024)
    assert caught.value.param == "item.role"


def test_prompts_are_looked_up_only_for_the_events_that_name_one():
    assert ce.parse_event('{"type": "session.update", "session": {"prompt": {"id": "p"}}}', 1).prompt_ref() == {
        "id": "p"
    }
    assert ce.parse_event('{"type": "response.create", "response": {"prompt": {"id": "q"}}}', 1).prompt_ref() == {
        "id": "q"
    }
    assert ce.parse_event('{"type": "response.create"}', 1).prompt_ref() is None
    assert ce.parse_event('{"type": "input_audio_buffer.commit"}', 1).prompt_ref() is None


def test_a_second_class_for_a_registered_type_is_refused():
    with pytest.raises(ValueError, match="two classes"):

        @ce.client_event
        @dataclass(frozen=True, kw_only=True)
        class Again(ce.ClientEvent):
            type = "response.cancel"
            handler = "on_response_cancel"


async def test_adding_an_event_is_one_class_and_one_handler(monkeypatch):
    """What a maintainer writes for a new client event, and nothing else: parsing, the error for a bad field
    and the dispatch to its handler follow from the registry."""

    @dataclass(frozen=True, kw_only=True)
    class Ping(ce.ClientEvent):
        type = "test.ping"
        handler = "on_test_ping"
        word: str

        @classmethod
        def parse(cls, raw: dict[str, Any], max_audio_bytes: int) -> Self:
            return cls(event_id=raw.get("event_id"), word=require(raw, "word", str))

    def on_test_ping(self: SessionCore, event: Ping) -> list[dict[str, Any]]:
        return [{"type": "test.pong", "word": event.word, "session": self.id}]

    monkeypatch.setattr(ce, "REGISTRY", dict(ce.REGISTRY))
    ce.client_event(Ping)
    monkeypatch.setattr(SessionCore, "on_test_ping", on_test_ping, raising=False)
    core = make_core()
    event = ce.parse_event('{"type": "test.ping", "word": "hello"}', 1024)
    assert core.handle(event) == [{"type": "test.pong", "word": "hello", "session": core.id}]
    with pytest.raises(EventError) as caught:
        ce.parse_event('{"type": "test.ping", "event_id": "e2", "word": 3}', 1024)
    assert (caught.value.param, caught.value.event_id) == ("word", "e2")


def test_new_instructions_or_tools_are_handed_to_the_lm_to_read_now_other_settings_are_not():
    from pipelines import messages as m

    submitted: list[object] = []
    core = make_core(submitted.append)

    def update(**session: Any) -> list[object]:
        submitted.clear()
        core.handle(
            ce.parse_event(json.dumps({"type": "session.update", "session": {"type": "realtime", **session}}), 1)
        )
        return [msg for msg in submitted if isinstance(msg, m.ReadAhead)]

    assert len(update(instructions="Speak like a pirate.")) == 1
    assert update(instructions="Speak like a pirate.") == []  # the same prompt: nothing new to read
    assert update(audio={"output": {"speed": 1.2}}) == []
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    assert len(update(tools=[tool])) == 1
