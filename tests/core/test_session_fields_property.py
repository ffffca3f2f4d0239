"""Generated ``session.update`` and ``response.create`` payloads, valid and invalid, field by field (hypothesis).

Each event sets one field of the SDK's types to a generated value, so its outcome is that field's:

* every server event validates against the openai SDK's types (the client checks each one);
* a value the SDK's own types reject (``strict``) is refused, with an ``error`` whose ``param``
  names that field and whose ``event_id`` is the client's;
* an accepted value is echoed as applied (``session.updated``; a response's ``response.created``
  and ``response.done``);
* the session goes on: after every example a plain update and a response still work.

A beta client's flat fields get the same checks against the beta types.

Bounded: 50 GA examples, each setting every field once (15 session fields, 9 response fields), about
1,200 events on 50 sessions; 20 beta examples of 9 fields: about 15 seconds here in all.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from openai.types.realtime import RealtimeResponseCreateParams, RealtimeSessionCreateRequest
from pydantic import TypeAdapter, ValidationError

from realtime.models import Prompt, PromptVersion

PROMPT_ID = "pmpt_property"
SESSION_TYPE = TypeAdapter(RealtimeSessionCreateRequest)
RESPONSE_TYPE = TypeAdapter(RealtimeResponseCreateParams)

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10_000),
    st.floats(-2, 5000, allow_nan=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
maybe = lambda strategy: st.one_of(strategy, junk)  # noqa: E731  (a field's plausible values, or anything)

token_limits = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"post_instructions": maybe(st.one_of(st.none(), st.integers(-5, 5000)))}),
)
truncation = st.one_of(
    st.sampled_from(["auto", "disabled", "bogus"]),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["retention_ratio", "other"]),
            "retention_ratio": maybe(st.floats(-0.5, 1.5, allow_nan=False)),
        },
        optional={"token_limits": token_limits},
    ),
)
tracing = st.one_of(
    st.just("auto"),
    st.fixed_dictionaries(
        {},
        optional={
            "workflow_name": maybe(st.text(max_size=8)),
            "group_id": maybe(st.text(max_size=8)),
            "metadata": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
        },
    ),
)
variable = st.one_of(
    st.text(max_size=6),
    st.fixed_dictionaries({"type": st.sampled_from(["input_text", "input_image"]), "text": st.text(max_size=6)}),
)
prompt = st.fixed_dictionaries(
    {"id": st.sampled_from([PROMPT_ID, "pmpt_missing"])},
    optional={
        "version": maybe(st.sampled_from(["1", "2", "7"])),
        "variables": st.dictionaries(st.sampled_from(["who", "city", "other"]), maybe(variable), max_size=3),
    },
)
metadata = st.dictionaries(st.text(min_size=1, max_size=70), maybe(st.text(max_size=520)), max_size=18)
max_tokens = st.one_of(st.just("inf"), st.integers(-2, 5000), st.sampled_from([1, 64, 128, 129, 4096, 4097]))
modalities = st.sampled_from([["text"], ["audio"], ["text", "audio"], [], ["video"]])
voice = st.one_of(
    st.sampled_from(["alloy", "ash", "nope"]), st.fixed_dictionaries({"id": st.sampled_from(["alloy", "x"])})
)

# (path of the field in the session, its values); the echo is found at the same path.
SESSION_FIELDS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("instructions",), maybe(st.text(max_size=20))),
    (("max_output_tokens",), maybe(max_tokens)),
    (("output_modalities",), maybe(modalities)),
    (("truncation",), maybe(truncation)),
    (("tracing",), maybe(tracing)),
    (("prompt",), maybe(prompt)),
    (("reasoning",), maybe(st.fixed_dictionaries({"effort": st.sampled_from(["low", "high"])}))),
    (("model",), maybe(st.sampled_from(["gpt-realtime", "my-model", ""]))),
    (("include",), maybe(st.sampled_from([["item.input_audio_transcription.logprobs"], ["x"], []]))),
    (("audio", "output", "speed"), maybe(st.floats(0.0, 2.0, allow_nan=False))),
    (("audio", "output", "voice"), maybe(voice)),
    (
        ("audio", "input", "format"),
        maybe(st.sampled_from([{"type": "audio/pcmu"}, {"type": "audio/pcm", "rate": 24000}, {"type": "audio/ogg"}])),
    ),
    (
        ("audio", "input", "noise_reduction"),
        maybe(st.fixed_dictionaries({"type": maybe(st.sampled_from(["near_field", "far_field", "loud"]))})),
    ),
    (
        ("audio", "input", "transcription"),
        maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "model": maybe(st.sampled_from(["whisper-1", "gpt-4o-transcribe", "nope"])),
                    "language": maybe(st.sampled_from(["en", "english"])),
                    "prompt": maybe(st.text(max_size=8)),
                },
            )
        ),
    ),
    (
        ("audio", "input", "turn_detection"),
        maybe(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["server_vad", "semantic_vad", "push"])},
                optional={
                    "threshold": maybe(st.floats(-1, 2, allow_nan=False)),
                    "eagerness": maybe(st.sampled_from(["low", "auto", "eager"])),
                    "create_response": maybe(st.booleans()),
                    "idle_timeout_ms": maybe(st.integers(0, 10_000)),
                },
            )
        ),
    ),
]
# Fields whose echo the server fills in (defaults, normalized names): checked for SDK validity, not equality.
FILLED_IN = {("audio", "input", "transcription"), ("audio", "input", "turn_detection")}
RESPONSE_FIELDS: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("max_output_tokens", maybe(max_tokens)),
    ("metadata", maybe(metadata)),
    ("conversation", maybe(st.sampled_from(["auto", "none", "conv_other"]))),
    ("output_modalities", maybe(modalities)),
    ("instructions", maybe(st.text(max_size=20))),
    ("prompt", maybe(prompt)),
    ("reasoning", maybe(st.fixed_dictionaries({"effort": st.sampled_from(["low", "high"])}))),
    (
        "audio",
        maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "output": maybe(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "voice": maybe(voice),
                                "format": maybe(st.sampled_from([{"type": "audio/pcmu"}, {"type": "audio/x"}])),
                                "speed": st.just(1.0),
                            },
                        )
                    )
                },
            )
        ),
    ),
    ("unknown_field", junk),
]


def nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


def at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def sdk_accepts(adapter: TypeAdapter[Any], data: dict[str, Any]) -> bool:
    try:
        adapter.validate_python(data, strict=True)
    except ValidationError:
        return False
    return True


def applied(path: tuple[str, ...], sent: Any) -> Any:
    """What the session shows for an accepted value: the value, in the SDK's shape where the server normalizes."""
    if path == ("audio", "output", "voice") and isinstance(sent, dict):
        return sent["id"]
    if path == ("audio", "output", "speed"):
        return float(sent)
    if path == ("prompt",):
        return {key: value for key, value in sent.items() if value is not None}
    if path == ("truncation",) and isinstance(sent, dict):
        limits = sent.get("token_limits")
        out = {"type": sent["type"], "retention_ratio": sent["retention_ratio"]}
        return out if limits is None else {**out, "token_limits": {k: v for k, v in limits.items()}}
    if path == ("audio", "input", "format"):
        kind = {"pcm16": "audio/pcm", "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}.get(
            sent if isinstance(sent, str) else sent["type"], sent if isinstance(sent, str) else sent["type"]
        )
        return {"type": kind, **({"rate": 24000} if kind == "audio/pcm" else {})}
    return sent


# Every field once per example, in a generated order (a prompt, then instructions, or the other way round).
session_events = st.tuples(*(st.tuples(st.just(path), values) for path, values in SESSION_FIELDS)).flatmap(
    lambda events: st.permutations(list(events))
)
response_events = st.tuples(*(st.tuples(st.just(key), values) for key, values in RESPONSE_FIELDS)).flatmap(
    lambda events: st.permutations(list(events))
)


@sync_to_async
def store_prompt() -> None:
    prompt_row, _ = Prompt.objects.get_or_create(id=PROMPT_ID, defaults={"name": "property"})
    PromptVersion.objects.get_or_create(prompt=prompt_row, version=1, defaults={"instructions": "Be {{who}}."})
    PromptVersion.objects.get_or_create(
        prompt=prompt_row,
        version=2,
        defaults={"instructions": "Guide {{who}} in {{city}}.", "variables": {"who": "me", "city": "Oslo"}},
    )


async def check_session_update(client, path: tuple[str, ...], value: Any) -> None:
    event_id = await client.send("session.update", session={"type": "realtime", **nested(path, value)})
    event = await client.until(lambda e: e["type"] == "session.updated" or e["type"] == "error")
    if event["type"] == "error":
        error = event["error"]
        assert error["event_id"] == event_id and error["param"], error
        assert error["param"].startswith("session." + ".".join(path[:1])), (path, value, error)
        return
    # An audio format may also be named by a string (as older clients do); it is echoed in the SDK's shape.
    sent = {"type": "realtime", **nested(path, value)}
    assert path == ("audio", "input", "format") or sdk_accepts(SESSION_TYPE, sent), (
        f"the server accepted {path}={value!r}, which the SDK's types reject"
    )
    if value is not None and path != ("reasoning",) and path not in FILLED_IN:
        assert at(event["session"], path) == applied(path, value), (path, value, at(event["session"], path))


async def check_response_create(client, key: str, value: Any) -> None:
    params = {"output_modalities": ["text"], key: value} if key != "output_modalities" else {key: value}
    event_id = await client.send("response.create", response=params)
    event = await client.until(lambda e: e["type"] in ("response.created", "error"))
    if event["type"] == "error":
        error = event["error"]
        assert error["event_id"] == event_id and error["param"], error
        assert error["param"].startswith(f"response.{key}"), (key, value, error)
        return
    assert sdk_accepts(RESPONSE_TYPE, params), f"the server accepted response.{key}={value!r}, which the SDK rejects"
    done = (await client.until("response.done", timeout=20))["response"]
    for shown in (event["response"], done):
        if key == "max_output_tokens" and value is not None:
            assert shown["max_output_tokens"] == value
        if key == "metadata":
            assert shown["metadata"] == value
        if key == "conversation":
            assert (shown["conversation_id"] is None) == (value == "none")
        if key == "output_modalities" and value is not None:
            assert shown["output_modalities"] == (["audio"] if "audio" in value else ["text"])


@pytest.mark.django_db(transaction=True)
@hsettings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(updates=session_events, responses=response_events)
async def test_every_generated_setting_is_honoured_and_echoed_or_refused_naming_its_param(
    connect, loopback_pool, settings, updates, responses
):
    settings.S2S_MAX_EVENTS_PER_SECOND = 100_000
    settings.S2S_EVENTS_BURST = 100_000
    await store_prompt()
    for _ in range(200):  # the previous example's unit may still be on its way back
        if loopback_pool.free_units() == len(loopback_pool.units):
            break
        await asyncio.sleep(0.05)
    client = await connect()
    await client.update_session(output_modalities=["text"], audio={"input": {"turn_detection": None}})
    await client.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    )
    await client.until("conversation.item.done")
    for path, value in updates:
        await check_session_update(client, path, value)
    await client.update_session(
        output_modalities=["text"], instructions="Plain.", max_output_tokens="inf", truncation="auto"
    )
    for key, value in responses:
        await check_response_create(client, key, value)
    # The session goes on.
    await client.send("response.create", response={"output_modalities": ["text"]})
    assert (await client.until("response.done", timeout=20))["response"]["status"] == "completed"
    await client.communicator.disconnect()


# The beta's flat shape: what a beta client may set; its events validate against the beta types.
BETA_FIELDS: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("instructions", maybe(st.text(max_size=20))),
    ("max_response_output_tokens", maybe(max_tokens)),
    ("modalities", maybe(modalities)),
    ("speed", maybe(st.floats(0.0, 2.0, allow_nan=False))),
    ("tracing", maybe(tracing)),
    ("truncation", maybe(truncation)),
    ("voice", maybe(st.sampled_from(["alloy", "nope"]))),
    ("temperature", maybe(st.floats(0.0, 2.0, allow_nan=False))),
    ("input_audio_format", maybe(st.sampled_from(["pcm16", "g711_ulaw", "audio/pcm"]))),
]
beta_events = st.tuples(*(st.tuples(st.just(key), values) for key, values in BETA_FIELDS)).flatmap(
    lambda events: st.permutations(list(events))
)


@pytest.mark.django_db(transaction=True)
@hsettings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(updates=beta_events)
async def test_a_beta_clients_generated_settings_are_applied_or_refused_and_every_event_is_beta_valid(
    connect, loopback_pool, settings, updates
):
    settings.S2S_MAX_EVENTS_PER_SECOND = 100_000
    settings.S2S_EVENTS_BURST = 100_000
    for _ in range(200):
        if loopback_pool.free_units() == len(loopback_pool.units):
            break
        await asyncio.sleep(0.05)
    client = await connect(headers=[(b"openai-beta", b"realtime=v1")])
    for key, value in updates:
        event_id = await client.send("session.update", session={key: value})
        event = await client.until(lambda e: e["type"] in ("session.updated", "error"))
        if event["type"] == "error":
            assert event["error"]["event_id"] == event_id, event
            assert event["error"]["param"].startswith(f"session.{key}"), (key, value, event["error"])
        elif value is not None and key in ("instructions", "tracing", "truncation", "voice"):
            assert event["session"][key] == value, (key, value, event["session"][key])
    await client.send(
        "session.update", session={"modalities": ["text"], "turn_detection": None, "max_response_output_tokens": "inf"}
    )
    await client.until("session.updated")
    await client.say_text("still here")
    assert (await client.until("response.done", timeout=20))["response"]["status"] == "completed"
    await client.communicator.disconnect()
