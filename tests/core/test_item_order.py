"""Where a client's item lands: the conversation the client sees and the history the LM reads agree."""

from __future__ import annotations

import json

import pytest

from pipelines import messages as m
from pipelines.loopback import FakeLanguageModel
from pipelines.stages.base import SessionContext
from pipelines.stages.lm import LmStage
from realtime.protocol.client_events import parse_event
from realtime.protocol.conversation import Conversation, Port
from realtime.protocol.session.config import SessionConfig
from realtime.protocol.wire import EventError


class Session:
    """A conversation whose pipeline messages go straight into a real LM stage (with the FAKE model)."""

    def __init__(self) -> None:
        self.lm = LmStage(SessionContext(), FakeLanguageModel())
        self.conversation = Conversation(
            SessionConfig("sess_order", "gpt-realtime", ("alloy",)), Port(0, self._submit, lambda _id, _reason: None)
        )
        self.added: list[dict] = []

    def _submit(self, msg: m.Downstream) -> None:
        list(self.lm.process(msg))

    def create(self, item_id: str, previous: str | None = None) -> None:
        event: dict = {
            "type": "conversation.item.create",
            "item": {
                "id": item_id,
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": item_id}],
            },
        }
        if previous is not None:
            event["previous_item_id"] = previous
        parsed = parse_event(json.dumps(event), 1024)
        self.added += [
            e
            for e in self.conversation.create_item(parsed.item, parsed.previous_item_id)
            if e["type"] == "conversation.item.added"
        ]


def test_an_item_created_after_root_is_first_for_the_client_and_for_the_lm():
    session = Session()
    for item_id in ("a", "b"):
        session.create(item_id)
    session.create("c", "root")
    session.create("d", "a")
    assert list(session.conversation.items) == ["c", "a", "d", "b"]
    assert list(session.lm.history) == ["c", "a", "d", "b"]


def test_added_events_name_the_real_predecessor_never_root():
    session = Session()
    session.create("a")
    session.create("b")
    session.create("c", "root")
    session.create("d", "a")
    assert [(e["item"]["id"], e["previous_item_id"]) for e in session.added] == [
        ("a", None),
        ("b", "a"),
        ("c", None),
        ("d", "a"),
    ]


def test_an_unknown_predecessor_is_refused_and_nothing_changes():
    session = Session()
    session.create("a")
    with pytest.raises(EventError) as refused:
        session.create("b", "nope")
    assert refused.value.param == "previous_item_id"
    assert list(session.conversation.items) == ["a"] and list(session.lm.history) == ["a"]
