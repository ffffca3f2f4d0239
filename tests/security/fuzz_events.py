"""Hypothesis strategies for client events: random JSON, plausible events, and mutations of valid ones."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import strategies as st

from realtime.protocol.client_events import CLIENT_EVENT_TYPES

FIELDS = (
    "type",
    "event_id",
    "session",
    "audio",
    "item",
    "item_id",
    "previous_item_id",
    "content_index",
    "audio_end_ms",
    "response",
    "response_id",
    "instructions",
    "output_modalities",
    "modalities",
    "voice",
    "turn_detection",
    "input_audio_format",
    "output_audio_format",
    "max_output_tokens",
    "temperature",
    "conversation",
    "input",
    "metadata",
    "role",
    "content",
    "text",
    "format",
    "rate",
    "threshold",
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.sampled_from(
        [
            "",
            "root",
            "user",
            "assistant",
            "system",
            "audio",
            "text",
            "server_vad",
            "semantic_vad",
            "none",
            "inf",
            "pcm16",
            "audio/pcm",
            "audio/pcmu",
            "input_text",
            "input_audio",
            "message",
            "item_reference",
            "AAAA",
            "!!",
            "alloy",
        ]
    ),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=10)), inner, max_size=5),
    ),
    max_leaves=12,
)
audio_b64 = st.binary(max_size=4800).map(lambda b: base64.b64encode(b).decode())

VALID: list[dict[str, Any]] = [
    {
        "type": "session.update",
        "session": {
            "type": "realtime",
            "instructions": "Be brief.",
            "audio": {"input": {"turn_detection": None}, "output": {"voice": "alloy"}},
        },
    },
    {"type": "session.update", "session": {"modalities": ["text"], "voice": "alloy", "input_audio_format": "pcm16"}},
    {"type": "input_audio_buffer.append", "audio": "AAAAAAAA"},
    {"type": "input_audio_buffer.commit"},
    {"type": "input_audio_buffer.clear"},
    {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]},
    },
    {"type": "conversation.item.retrieve", "item_id": "item_x"},
    {"type": "conversation.item.delete", "item_id": "item_x"},
    {"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0, "audio_end_ms": 10},
    {"type": "response.create", "response": {"output_modalities": ["text"], "instructions": "Say hi."}},
    {"type": "response.cancel"},
    {"type": "transcription_session.update", "session": {}},
]


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    """A valid event with one or two of its fields replaced, removed, or nested values scrambled."""
    event = json.loads(json.dumps(draw(st.sampled_from(VALID))))
    for _ in range(draw(st.integers(1, 2))):
        target = event
        path = draw(st.lists(st.sampled_from(FIELDS), max_size=2))
        for key in path:
            child = target.get(key) if isinstance(target, dict) else None
            if isinstance(child, dict):
                target = child
        if not isinstance(target, dict):
            break
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        keys = list(target) or ["type"]
        key = draw(st.sampled_from(keys)) if action != "add" else draw(st.sampled_from(FIELDS))
        if action == "delete":
            target.pop(key, None)
        else:
            target[key] = draw(st.one_of(json_values, audio_b64))
    return event


plausible = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(CLIENT_EVENT_TYPES), st.text(max_size=20))},
    optional={key: st.one_of(json_values, audio_b64) for key in FIELDS[1:]},
)


def frames() -> st.SearchStrategy[str]:
    """Text frames: JSON of anything, of plausible and of mutated events, and text that is not JSON at all."""
    as_json = st.one_of(json_values, plausible, mutated(), st.sampled_from(VALID)).map(json.dumps)
    broken = st.one_of(
        st.text(max_size=60),
        as_json.map(lambda s: s[: len(s) // 2]),
        st.just('{"type": "response.create"'),
        st.just("\x00"),
        st.just('{"type": NaN}'),
    )
    return st.one_of(as_json, as_json, as_json, broken)
